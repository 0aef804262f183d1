"""One pool of threads for the work that releases the GIL: inflating chunks, hashing results.

libhdf5 and the Python code around it use one core; zlib/ISA-L and hashlib release the GIL on
large buffers, so these run side by side on the others.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

THREADS = max(1, min(8, os.cpu_count() or 1))


@lru_cache(maxsize=1)
def shared_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(THREADS, thread_name_prefix="mdiff")


# A forked child (isolation.py) inherits the pool but not its threads: work sent there would wait forever.
os.register_at_fork(after_in_child=shared_pool.cache_clear)


def in_pool() -> bool:
    """True on one of the pool's threads: work there must not wait on the pool (it could deadlock)."""
    return threading.current_thread().name.startswith("mdiff_")
