"""One pool of threads for the work that releases the GIL: inflating chunks, hashing results.

libhdf5 and the Python code around it use one core; zlib/ISA-L and hashlib release the GIL on
large buffers, so these run side by side on the others.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import Callable, TypeVar

THREADS = max(1, min(8, os.cpu_count() or 1))


@lru_cache(maxsize=1)
def shared_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(THREADS, thread_name_prefix="mdiff")


# A forked child (isolation.py) inherits the pool but not its threads: work sent there would wait forever.
if hasattr(os, "register_at_fork"):  # POSIX; where there is no fork there is nothing to rebuild
    os.register_at_fork(after_in_child=shared_pool.cache_clear)


def in_pool() -> bool:
    """True on one of the pool's threads: work there must not wait on the pool (it could deadlock)."""
    return threading.current_thread().name.startswith("mdiff_")


class Writeback:
    """Syncs a file being written on the pool every ``every`` bytes, one sync at a time: the disk
    works while the writer goes on, and the final fsync has little left (1 GiB: ~0.4 s less here)."""

    def __init__(self, sync: Callable[[], None], every: int = 64 << 20):
        self._sync, self._every = sync, every
        self._unsynced = 0
        self._running: Future | None = None

    def wrote(self, nbytes: int, flush: Callable[[], None] | None = None) -> None:
        self._unsynced += nbytes
        if self._unsynced < self._every or (self._running is not None and not self._running.done()):
            return
        self._unsynced = 0
        if flush is not None:
            flush()  # what the writer buffers must reach the OS before the sync can cover it
        self._running = shared_pool().submit(self._sync)

    def wait(self) -> None:
        """Let a sync in flight finish (before the final fsync, or before the file is removed)."""
        if self._running is not None:
            self._running.exception()


T = TypeVar("T")
R = TypeVar("R")


def one_ahead(items: Iterable[T], work: Callable[[T], R]) -> Generator[tuple[T, R], None, None]:
    """(item, work(item)) in order, each item's work done on one thread of its own while the caller handles the
    item before — never two at once, so ``work`` may read what is not thread-safe (a state's files). Not the
    shared pool: ``work`` waits on that pool (hashing, inflating), which must never wait on its own threads."""
    with ThreadPoolExecutor(1, thread_name_prefix="mdiff-ahead") as ahead:  # its exit waits for the work in flight
        pending: tuple[T, Future[R]] | None = None
        try:
            for item in items:
                previous, pending = pending, (item, ahead.submit(work, item))
                if previous is not None:
                    yield previous[0], previous[1].result()
            if pending is not None:
                last, pending = pending, None
                yield last[0], last[1].result()
        finally:  # closed early (an error, or the caller stopped): the next item's work is not started
            if pending is not None:
                pending[1].cancel()
