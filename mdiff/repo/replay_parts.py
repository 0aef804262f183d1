"""SPEC.md §13.4: a parameter's usual history — its last `replace` (a root's value, or a snapshot's) and a
run of dense updates after it — read a part of the value at a time, the parts side by side on the pool.

Each part is read from the `replace`, then every dense delta of the run is decoded into a scratch part and
applied to it while both are in a core's cache (SUB and XOR deltas commute modulo 2^w, so applying each in
turn is folding them: §13.4), and the parts are hashed in order on the calling thread as they end. So a
tensor of k deltas costs one array (the value itself, no zeroed change and no delta array), one pass over it
per delta, and no serial pass at all but the hash, which overlaps the decoding of the parts after it.
Every other history (sparse entries, other types, bool values, datasets not read by byte ranges) is left to
StateView's general replay, whose results these equal bit for bit (tests).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mdiff.errors import ApplyError, InvalidFileError
from mdiff.format.chunk_reader import ByteRanges, byte_ranges
from mdiff.format.dtypes import DType, from_bits
from mdiff.threads import in_pool, pool_size, shared_pool
from mdiff.updates import dense, replace
from mdiff.updates.base import Update, empty_array

PART_BYTES = 1 << 20  # of a value read, applied and hashed as one task (rounded up to whole chunks of the replace)
MIN_BYTES = 1 << 20  # smaller values are left to the general replay: parts would be one task anyway


@dataclass(frozen=True)
class PartsPlan:
    """How to read one value in parts: its replace's bytes, then each dense delta's with its arithmetic."""

    shape: tuple[int, ...]
    dtype: DType
    head: ByteRanges
    deltas: tuple[tuple[ByteRanges, Any], ...]  # (the stored delta's bytes, its BitDelta class)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype.bits).itemsize


class StepFailed(Exception):
    """A part's read or check failed: ``index`` -1 for the replace, else the delta's place in the run."""

    def __init__(self, index: int, error: Exception):
        super().__init__(str(error))
        self.index, self.error = index, error


def parts_plan(head: Update, run: Sequence[Update]) -> PartsPlan | None:
    """The plan when ``head`` is a built-in `replace` and ``run`` built-in dense updates of its shape and dtype,
    every dataset readable by byte ranges, the value at least MIN_BYTES and not bool; None otherwise."""
    if head.update_type is not replace.TYPE:
        return None
    dtype, shape = head.dtype, head.shape
    bits = np.dtype(dtype.bits)
    if dtype.name == "bool" or math.prod(shape) * bits.itemsize < MIN_BYTES:
        return None
    ranges = byte_ranges(head.data.get("value"))
    if ranges is None or np.dtype(head.data["value"].dtype).itemsize != bits.itemsize:
        return None
    deltas = []
    for update in run:
        kind = update.update_type
        composition = kind.composition
        if (kind not in (dense.TYPE, dense.TYPE_V2) or composition is None or composition.entries is not None
                or kind.delta is None or update.shape != shape or update.dtype.name != dtype.name):
            return None
        source = update.data.get(kind.delta.dataset)
        delta_ranges = byte_ranges(source)
        if delta_ranges is None or np.dtype(source.dtype).itemsize != bits.itemsize:
            return None
        deltas.append((delta_ranges, kind.delta))
    return PartsPlan(shape, dtype, ranges, tuple(deltas))


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
    does not read (MD513 …): every part has ended then. Checking the sha256 is the caller's."""
    bits_dtype = np.dtype(plan.dtype.bits)
    out = empty_array(plan.shape, bits_dtype, name)
    flat = out.reshape(-1)
    raw = flat.view(np.uint8)
    itemsize = bits_dtype.itemsize

    def part(lo: int, hi: int) -> None:
        try:
            plan.head.read(raw[lo:hi], lo)
        except (InvalidFileError, ApplyError, OSError, ValueError) as exc:
            raise StepFailed(-1, _typed(exc, plan.head)) from exc
        value = flat[lo // itemsize:hi // itemsize]
        scratch = _scratch(hi - lo)
        for index, (ranges, delta) in enumerate(plan.deltas):
            try:
                ranges.read(scratch, lo)
            except (InvalidFileError, ApplyError, OSError, ValueError) as exc:
                raise StepFailed(index, _typed(exc, ranges)) from exc
            delta.apply(value, scratch.view(bits_dtype), out=value)  # on a pool thread: in this one pass

    digest = hashlib.sha256()
    cuts = _cuts(plan)
    if len(cuts) == 1 or pool_size() <= 1 or in_pool():
        for lo, hi in cuts:
            part(lo, hi)
            digest.update(raw[lo:hi].data)
    else:
        pool = shared_pool()
        futures = [pool.submit(part, lo, hi) for lo, hi in cuts]
        try:
            for (lo, hi), future in zip(cuts, futures):  # hashed in order while the later parts decode
                future.result()
                digest.update(raw[lo:hi].data)
        finally:  # a failure: the parts not started are dropped, those running end before the caller goes on
            for future in futures:
                future.cancel()
            concurrent.futures.wait(futures)
    return from_bits(out, plan.dtype), digest.hexdigest()
