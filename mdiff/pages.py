"""Memory without transparent huge pages: for the large, short-lived buffers of a commit, and a checkout's values.

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
nothing is done. :func:`fresh_array` gives one array such memory without touching the switch: what a checkout
returns to its caller, whose other threads keep numpy's advice.

:func:`recycled_array` gives a commit's large buffers (a tensor read from a checkpoint, a delta) memory whose pages
are already faulted in: inside :func:`recycling`, an array of RECYCLE_MIN_BYTES or more is made in anonymous
memory that goes back to a free list once the array and every view of it are gone (a finalizer on the array that
owns the views), and the next array of the same size takes it. A fresh buffer's first touch costs a page fault
per 4 KiB (here 3–5 µs each: the MiniLM history's commits made ~34,500 a commit, three 47 MB arrays of its
embedding); the free list keeps at most RECYCLE_KEEP_BYTES between commits. Outside the block, plain numpy.
A checkout recycles too (:func:`fresh_array`): a value written out, or dropped by the caller it was returned to,
gives its pages to the next value of its size.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import mmap
import threading
import weakref
from collections.abc import Callable, Iterator

import numpy as np

from mdiff.errors import LimitError

HUGEPAGE_BYTES = 4 << 20  # numpy madvises transparent huge pages for arrays of this size and more (alloc.c)

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


def _anonymous(nbytes: int) -> mmap.mmap:
    """Private anonymous memory (``mmap.mmap(-1, n)`` alone maps it shared: shmem, whose first touch of a page
    costs ~1.5× a private one's — 256 MiB in a fresh process, 0.16–0.43 s of CPU against 0.11–0.17 s here)."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def fresh_array(shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    """An uninitialised array for a value, from anonymous memory of its own when it is at least HUGEPAGE_BYTES:
    numpy asks the kernel for transparent huge pages there (madvise), and where free memory is fragmented a
    fault of one stalls in direct compaction — measured here, first touch of 256 MiB: 1.35 s of CPU with
    numpy's arrays, 0.11 s without (a fresh process's checkout 1.7–3.1 s → 0.9–1.3 s). MD508 (as
    ``updates.base.empty_array``) for a shape that cannot be allocated."""
    if _recycling:  # a checkout's: the pages of a value gone (written out, or dropped by its caller)
        return recycled_array(shape, dtype, name)
    try:
        if math.prod(shape) * dtype.itemsize < HUGEPAGE_BYTES:
            return np.empty(shape, dtype)
        return np.frombuffer(_anonymous(math.prod(shape) * dtype.itemsize), dtype).reshape(shape)
    except (OSError, ValueError, OverflowError, TypeError) as exc:
        raise LimitError("MD508", f"a tensor of shape {list(shape)} cannot be allocated: {exc}", name) from None


RECYCLE_MIN_BYTES = 1 << 20  # smaller arrays are numpy's (its allocator's pages come back warm more often)
RECYCLE_KEEP_BYTES = 256 << 20  # of free buffers kept for the next arrays (between commits too)

_recycling = 0  # inside recycling(): nested and concurrent users
_free: dict[int, list[mmap.mmap]] = {}  # by size: buffers whose arrays are gone, pages faulted in
_free_bytes = 0
counts = {"made": 0, "reused": 0}  # buffers made anew and taken from the free list (for tests)


@contextlib.contextmanager
def recycling() -> Iterator[None]:
    """:func:`recycled_array` recycles inside the block (see the module's text)."""
    global _recycling
    with _lock:
        _recycling += 1
    try:
        yield
    finally:
        with _lock:
            _recycling -= 1


def _give_back(buffer: mmap.mmap) -> None:
    # called while the array that owned the buffer is being freed: kept, or left to be unmapped with it
    global _free_bytes
    with _lock:
        if _free_bytes + len(buffer) <= RECYCLE_KEEP_BYTES:
            _free.setdefault(len(buffer), []).append(buffer)
            _free_bytes += len(buffer)


def recycled_array(shape: tuple[int, ...], dtype: np.dtype | type, name: str = "") -> np.ndarray:
    """An uninitialised, writable, C-contiguous array: inside :func:`recycling` and of RECYCLE_MIN_BYTES or more,
    in memory that a gone array of the same size left (its pages faulted in already) or in fresh anonymous memory,
    given back once this array and all its views are gone; else ``np.empty``. MD508 for a shape that cannot be
    allocated."""
    global _free_bytes
    dtype = np.dtype(dtype)
    try:
        nbytes = math.prod(shape) * dtype.itemsize
        if not _recycling or nbytes < RECYCLE_MIN_BYTES:
            return np.empty(shape, dtype)
        buffer = None
        with _lock:
            stack = _free.get(nbytes)
            if stack:
                buffer = stack.pop()
                _free_bytes -= nbytes
                counts["reused"] += 1
            else:
                counts["made"] += 1
        if buffer is None:
            buffer = _anonymous(nbytes)
        owner = np.frombuffer(buffer, np.uint8)  # every view of the result keeps this one alive
        weakref.finalize(owner, _give_back, buffer)
        return owner.view(dtype).reshape(shape)
    except (OSError, ValueError, OverflowError, TypeError) as exc:
        raise LimitError("MD508", f"a tensor of shape {list(shape)} cannot be allocated: {exc}", name) from None


def drop_recycled() -> None:
    """Let the free list's buffers go (unmapped once nothing holds them)."""
    global _free_bytes
    with _lock:
        _free.clear()
        _free_bytes = 0
