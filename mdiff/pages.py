"""Memory advice for the large, short-lived buffers of a commit: no transparent huge pages.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) for every array of 4 MiB or more.
Where the kernel honours that by compacting memory on the first touch (Linux with THP ``madvise`` and defrag
``madvise``, the common default), each fresh buffer of a commit — every tensor's new value, parent value and
delta, allocated and freed once — costs kernel time that swings with the machine's memory: measured on a 256 MiB
commit (4 tensors, interleaved, 4 trials each, load 4.6–4.8), 3.60 s of CPU with the advice and 2.47 s without
it (user CPU 1.50 and 1.49 s: the same work), wall 5.44 → 3.29 s; the MiniLM history's 20 commits' system CPU
8.8–11.9 s → 5.2–5.3 s. Those buffers are streamed through once, so huge pages buy them nothing.

:func:`no_huge_pages` turns numpy's advice off for the duration and back to what it was after. The switch is
numpy's own (process-wide, as ``NUMPY_MADVISE_HUGEPAGE=0`` sets it at start): arrays another thread allocates
meanwhile get no advice either — a matter of speed only, never of values. Where numpy has no such switch,
nothing is done.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator

_lock = threading.Lock()
_depth = 0  # nested and concurrent users: the advice is restored when the last one leaves
_before: bool | None = None


def _switch() -> Callable[[bool], bool] | None:
    """numpy's setter, which returns the advice as it was (numpy ≥ 1.20; in numpy._core since 2.0), or None."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return getattr(module, "_set_madvise_hugepage", None)
    return None


@contextlib.contextmanager
def no_huge_pages() -> Iterator[None]:
    """numpy's transparent-huge-page advice off inside the block (see the module's text)."""
    global _depth, _before
    switch = _switch()
    if switch is None:
        yield
        return
    with _lock:
        if _depth == 0:
            _before = bool(switch(False))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _before is not None:
                switch(_before)
                _before = None
