"""SPEC.md §13.4: a parameter's usual history — its last `replace` (a root's value, or a snapshot's) and a
run of dense and sparse updates after it — read a part of the value at a time, the parts side by side on the pool.

Each part is read from the `replace`, then every dense delta of the run is decoded into a scratch part and
applied to it while both are in a core's cache, and every sparse update's entries that fall in the part are
gathered, added and scattered back (SUB and XOR deltas commute modulo 2^w, so applying each in turn is
folding them: §13.4); the parts are hashed in order on the calling thread as they end. So a tensor costs one
array (the value itself: no zeroed change, no delta array), one pass over it per dense delta, and no serial
pass but the hash, which overlaps the decoding of the parts after it. A run's sparse entries are held whole
(bounded by HELD_BYTES). Every other history (other types, bool values, datasets not read by byte ranges,
values under MIN_BYTES) is left to StateView's general replay, whose results these equal bit for bit (tests).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mdiff.errors import ApplyError, InvalidFileError
from mdiff.format.chunk_reader import ByteRanges, byte_ranges
from mdiff.format.dtypes import DType, from_bits
from mdiff.pages import fresh_array
from mdiff.threads import in_pool, pool_size, shared_pool
from mdiff.updates import dense, replace, sparse
from mdiff.updates.base import Update
from mdiff.updates.bit_deltas import SubDelta, XorDelta

PART_BYTES = 1 << 20  # of a value read, applied and hashed as one task (rounded up to whole chunks of the replace)
MIN_BYTES = 1 << 20  # smaller values are left to the general replay: parts would be one task anyway
HELD_BYTES = 64 << 20  # of a run's sparse updates (declared), or the value's size if more, held at once


@dataclass(frozen=True)
class PartsPlan:
    """How to read one value in parts: its replace's bytes, each dense delta's with its arithmetic, the sparse updates."""

    shape: tuple[int, ...]
    dtype: DType
    head: ByteRanges
    deltas: tuple[tuple[int, ByteRanges, Any], ...]  # dense: (place in the run, the stored delta's bytes, its BitDelta)
    sparse: tuple[tuple[int, Update], ...] = ()  # (place in the run, the sparse update)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype.bits).itemsize


class StepFailed(Exception):
    """A part's read or check failed: ``index`` -1 for the replace, else the delta's place in the run."""

    def __init__(self, index: int, error: Exception):
        super().__init__(str(error))
        self.index, self.error = index, error


def parts_plan(head: Update, run: Sequence[Update]) -> PartsPlan | None:
    """The plan when ``head`` is a built-in `replace` and ``run`` built-in dense and sparse updates of its shape
    and dtype that compose with each other (one composition: SUB or XOR), every dense dataset readable by byte
    ranges, the sparse entries within HELD_BYTES, the value at least MIN_BYTES and not bool; None otherwise."""
    if head.update_type is not replace.TYPE:
        return None
    dtype, shape = head.dtype, head.shape
    bits = np.dtype(dtype.bits)
    if dtype.name == "bool" or math.prod(shape) * bits.itemsize < MIN_BYTES:
        return None
    ranges = byte_ranges(head.data.get("value"))
    if ranges is None or np.dtype(head.data["value"].dtype).itemsize != bits.itemsize:
        return None
    deltas, held, held_bytes = [], [], 0
    names = {None if u.update_type.composition is None else u.update_type.composition.name for u in run}
    if len(names) > 1:  # a run composes (§13.4): its updates are applied here in another order than written
        return None
    for index, update in enumerate(run):
        kind = update.update_type
        composition = kind.composition
        if update.shape != shape or update.dtype.name != dtype.name or composition is None or kind.delta is None:
            return None
        if kind in (sparse.TYPE, sparse.TYPE_V2):
            held.append((index, update))
            held_bytes += update.stored_bytes
            continue
        if kind not in (dense.TYPE, dense.TYPE_V2):
            return None
        source = update.data.get(kind.delta.dataset)
        delta_ranges = byte_ranges(source)
        if source is None or delta_ranges is None or np.dtype(source.dtype).itemsize != bits.itemsize:
            return None
        deltas.append((index, delta_ranges, kind.delta))
    if held_bytes > max(HELD_BYTES, math.prod(shape) * bits.itemsize):  # the entries are held whole: bounded
        return None
    return PartsPlan(shape, dtype, ranges, tuple(deltas), tuple(held))


# a folded change added to bits (BitDelta.apply_folded's arithmetic, on a few entries: without its checks and parts)
_FOLDED_ADD: dict[type, np.ufunc] = {XorDelta: np.bitwise_xor, SubDelta: np.add}
_local = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's buffer for one part of a delta, kept from part to part (a new one costs its pages' faults)."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None or buffer.size < nbytes:
        buffer = _local.buffer = np.empty(max(nbytes, 1), np.uint8)
    return buffer[:nbytes]


def _cuts(plan: PartsPlan) -> list[tuple[int, int]]:
    chunk = plan.head.chunk_bytes
    step = PART_BYTES if not chunk else max(1, -(-PART_BYTES // chunk)) * chunk
    return [(lo, min(lo + step, plan.nbytes)) for lo in range(0, plan.nbytes, step)]


def _typed(exc: Exception, ranges: ByteRanges) -> Exception:
    """A read's error as read_array gives it: an OSError or ValueError of the data is MD513."""
    if isinstance(exc, (InvalidFileError, ApplyError)):
        return exc
    return InvalidFileError("MD513", f"dataset cannot be read: {exc}", ranges.name)


def read_parts(plan: PartsPlan, name: str) -> tuple[np.ndarray, str]:
    """(the value, the sha256 of its bytes, §6.2): read and hashed in parts. StepFailed when a dataset's part
    does not read (MD513 …) or a sparse update's entries are refused (MD408 …): every part has ended then.
    Checking the sha256 is the caller's."""
    bits_dtype = np.dtype(plan.dtype.bits)
    out = fresh_array(plan.shape, bits_dtype, name)
    flat = out.reshape(-1)
    raw = flat.view(np.uint8)
    itemsize = bits_dtype.itemsize
    cuts = _cuts(plan)
    # a sparse update's entries: (how a folded change is added, positions, each entry as a folded change, where
    # each part's entries start)
    entries: list[tuple[np.ufunc, np.ndarray, np.ndarray, list[int]]] = []

    def dense_part(lo: int, hi: int) -> None:
        try:
            plan.head.read(raw[lo:hi], lo)
        except (InvalidFileError, ApplyError, OSError, ValueError) as exc:
            raise StepFailed(-1, _typed(exc, plan.head)) from exc
        value = flat[lo // itemsize:hi // itemsize]
        scratch = _scratch(hi - lo)
        for index, ranges, delta in plan.deltas:
            try:
                ranges.read(scratch, lo)
            except (InvalidFileError, ApplyError, OSError, ValueError) as exc:
                raise StepFailed(index, _typed(exc, ranges)) from exc
            delta.apply(value, scratch.view(bits_dtype), out=value)  # on a pool thread: in this one pass

    def sparse_part(part: int) -> None:
        # each update's entries in this part, gathered and scattered by their positions in the whole value (not
        # made relative to the part first: that pass and its array cost a third of the scatter, measured)
        for add, at, values, starts in entries:
            low, high = starts[part], starts[part + 1]
            if low < high:
                where = at[low:high]
                gathered = flat[where]
                add(gathered, values[low:high], out=gathered)
                flat[where] = gathered

    def held_entries(index: int, update: Update) -> tuple[np.ufunc, np.ndarray, np.ndarray, list[int]]:
        composition = update.update_type.composition
        assert composition is not None and composition.entries is not None
        try:
            at, values = composition.entries(update, name, flat.size)
        except (InvalidFileError, ApplyError, OSError, ValueError) as exc:
            raise StepFailed(index, exc if isinstance(exc, (InvalidFileError, ApplyError))
                             else InvalidFileError("MD513", f"dataset cannot be read: {exc}", name)) from exc
        delta = update.update_type.delta
        folded = delta.fold(np.zeros_like(values), values)  # each stored delta as a run's change (its form to add)
        edges = np.searchsorted(at, np.array([lo // itemsize for lo, _ in cuts[1:]], np.int64))
        return _FOLDED_ADD[delta], at, folded, [0, *edges.tolist(), at.size]

    digest = hashlib.sha256()
    if len(cuts) == 1 or pool_size() <= 1 or in_pool():
        for index, update in plan.sparse:
            entries.append(held_entries(index, update))
        for part, (lo, hi) in enumerate(cuts):
            dense_part(lo, hi)
            sparse_part(part)
            digest.update(raw[lo:hi].data)
        return from_bits(out, plan.dtype), digest.hexdigest()
    # On the pool: each part read, then scattered into, then handed to the hash, which the thread that ends the
    # part next in order takes on (one thread at a time, in order) — the caller waits once, not part by part
    # (each wake-up of a waiting thread costs a hand-off of the GIL: ~3 ms a part under load, measured).
    hashed = _InOrder(len(cuts), lambda part: digest.update(raw[cuts[part][0]:cuts[part][1]].data))
    pool = shared_pool()
    held = [pool.submit(held_entries, index, update) for index, update in plan.sparse]
    entries_lock = threading.Lock()

    def whole_part(part: int) -> None:
        dense_part(*cuts[part])
        if held:
            # submitted before every part, so running or done by now (the pool takes work in order): no deadlock
            with entries_lock:
                if not entries:
                    entries.extend([future.result() for future in held])  # whole, or not at all
            sparse_part(part)
        hashed.done(part)

    futures: list[concurrent.futures.Future[Any]] = [*held, *(pool.submit(whole_part, part) for part in range(len(cuts)))]
    try:
        concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        for future in futures:  # the first error in order (a dataset's StepFailed), once every part has ended
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        assert hashed.next == len(cuts)
    finally:  # a failure: the parts not started are dropped, those running end before the caller goes on
        for future in futures:
            future.cancel()
        concurrent.futures.wait(futures)
    return from_bits(out, plan.dtype), digest.hexdigest()


class _InOrder:
    """Work on parts 0, 1, … in order as the parts end in any order: the thread that ends the next part due
    does it, and every later one already ended; one thread at a time."""

    def __init__(self, count: int, work: Callable[[int], None]):
        self.lock = threading.Lock()
        self.next, self._ended, self._busy, self._work = 0, [False] * count, False, work

    def done(self, part: int) -> None:
        with self.lock:
            self._ended[part] = True
            if self._busy:  # the thread at work will find it ended
                return
            self._busy = True
        while True:
            with self.lock:
                if self.next >= len(self._ended) or not self._ended[self.next]:
                    self._busy = False
                    return
                due = self.next
            try:
                self._work(due)
            except BaseException:
                with self.lock:
                    self._busy = False
                raise
            with self.lock:
                self.next += 1
