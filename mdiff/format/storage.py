"""Reading a dataset's stored bytes straight from the file, without libhdf5's filter pipeline.

The structure walk (structure.py) has already checked every chunk of a dataset against the file's
bounds and the filter allowlist, and recorded where each one lies. For the layouts mdiff writers
make — contiguous data, or chunks that are slabs along the leading axes, filtered by shuffle and/or
deflate — the data is read here with ``os.pread`` and inflated on a pool of threads (inflating
releases the GIL; libhdf5 holds one lock for everything, so its reads use one core). Every other
layout is read by libhdf5 (``read_direct``). The bytes are the same either way; the tests compare
both readers on every layout mdiff writes.

Hostile input: each inflate is bounded by the chunk's declared size, a stream that inflates to
another size is refused (MD513), and a set of chunks that does not cover the dataset exactly once
makes the plan unusable (libhdf5 then reads it, and the walk has reported the shortfall as MD509).
"""

from __future__ import annotations

import math
import os
import zlib as _zlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.threads import THREADS, in_pool, shared_pool

_inflate_lib: ModuleType
try:  # ISA-L inflates the same streams ~1.5× faster than zlib; zlib is the fallback
    from isal import isal_zlib as _inflate_lib
except ImportError:  # pragma: no cover - isal is a dependency; kept for platforms without a wheel
    _inflate_lib = _zlib

FILTER_DEFLATE, FILTER_SHUFFLE = 1, 2
_PARALLEL_BYTES = 4 << 20  # below this, a thread pool costs more than it saves


@dataclass(frozen=True)
class Chunk:
    offset: tuple[int, ...]  # the chunk's first element, in dataset coordinates
    byte_offset: int  # where its stored bytes start in the file
    size: int  # how many bytes are stored


@dataclass(frozen=True)
class StoragePlan:
    """Where a dataset's bytes lie and how to decode them; None-able parts mean "use libhdf5"."""

    contiguous_offset: int | None = None
    chunk_shape: tuple[int, ...] | None = None
    chunks: tuple[Chunk, ...] = ()
    filters: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (filter id, client data), pipeline order


def plan_for(shape, itemsize: int, contiguous_offset=None, chunk_shape=None, chunks=(), filters=()) -> StoragePlan | None:
    """A plan this module can carry out, or None when libhdf5 should read the dataset."""
    if contiguous_offset is not None:
        return StoragePlan(contiguous_offset=int(contiguous_offset))
    if chunk_shape is None or not shape:
        return None
    if any(code not in (FILTER_DEFLATE, FILTER_SHUFFLE) for code, _ in filters):
        return None  # fletcher32: left to libhdf5, which checks it
    if any(code == FILTER_SHUFFLE and (not values or values[0] != itemsize) for code, values in filters):
        return None
    if not _is_slab(tuple(shape), tuple(chunk_shape)):
        return None
    chunk_bytes = math.prod(chunk_shape) * itemsize
    if any(c.size > _max_stored(chunk_bytes) for c in chunks):
        return None  # more bytes than any deflate stream of the chunk needs: not read into memory here
    aligned = all(
        len(c.offset) == len(shape) and all(o % k == 0 and 0 <= o < d for o, k, d in zip(c.offset, chunk_shape, shape))
        for c in chunks
    )
    expected = math.prod(math.ceil(d / c) for d, c in zip(shape, chunk_shape))
    if not aligned or len(chunks) != expected or len({c.offset for c in chunks}) != expected:
        return None  # not each chunk exactly once
    return StoragePlan(chunk_shape=tuple(chunk_shape), chunks=tuple(chunks), filters=tuple(filters))


def _max_stored(chunk_bytes: int) -> int:
    return chunk_bytes + chunk_bytes // 1000 + 1024  # deflate's stored blocks add 5 bytes per 64 KiB


def _cut_axis(chunk: tuple[int, ...]) -> int:
    """The one axis a slab chunking cuts: the first whose chunk is not 1 (the last when all are)."""
    return next((i for i, c in enumerate(chunk) if c != 1), len(chunk) - 1)


def _is_slab(shape: tuple[int, ...], chunk: tuple[int, ...]) -> bool:
    """Chunks of the form (1, …, 1, k, full, …, full): each one a contiguous run in C order."""
    axis = _cut_axis(chunk)
    return len(chunk) == len(shape) and all(c == d for c, d in zip(chunk[axis + 1:], shape[axis + 1:]))


class Slabs:
    """Where each chunk of a slab chunking lies in the array's C-order bytes (read here, written by writer.py)."""

    def __init__(self, shape: tuple[int, ...], chunk_shape: tuple[int, ...], itemsize: int):
        self.shape, self.chunk_shape = tuple(shape), tuple(chunk_shape)
        self.chunk_bytes = math.prod(chunk_shape) * itemsize
        self._axis = _cut_axis(self.chunk_shape)
        self._strides = [math.prod(shape[i + 1:]) * itemsize for i in range(len(shape))]
        self._row_bytes = math.prod(shape[self._axis + 1:]) * itemsize

    def span(self, origin: tuple[int, ...]) -> tuple[int, int]:
        """(first byte, bytes inside the array) of the chunk at ``origin``. A chunk that sticks out
        past the end of the cut axis holds only its leading rows inside: the rest is padding, which
        must not land on the next slab's elements."""
        start = sum(o * s for o, s in zip(origin, self._strides))
        axis = self._axis
        return start, min(self.chunk_shape[axis], self.shape[axis] - origin[axis]) * self._row_bytes


class PlannedDataset:
    """An h5py dataset whose ``read_direct`` (whole dataset) follows its StoragePlan."""

    def __init__(self, dataset, plan: StoragePlan, fd: int):
        self._dataset, self._plan, self._fd = dataset, plan, fd

    def __getattr__(self, attribute):
        return getattr(self._dataset, attribute)

    def __getitem__(self, selection):  # partial reads: libhdf5
        return self._dataset[selection]

    def __len__(self) -> int:
        return len(self._dataset)

    def read_direct(self, out: np.ndarray) -> None:
        shape = tuple(self._dataset.shape)
        if out.shape != shape or not out.flags.c_contiguous or out.dtype.itemsize != self._dataset.dtype.itemsize:
            raise ValueError("read_direct here fills a whole C-contiguous array of the dataset's shape")
        read_planned(self._fd, self._plan, shape, out, self._dataset.name)


def read_planned(fd: int, plan: StoragePlan, shape: tuple[int, ...], out: np.ndarray, name: str) -> None:
    flat = out.reshape(-1).view(np.uint8)
    if plan.contiguous_offset is not None:
        _pread_into(fd, flat, plan.contiguous_offset, name)
        return
    itemsize = out.itemsize
    assert plan.chunk_shape is not None  # a plan is contiguous or chunked
    slabs = Slabs(shape, plan.chunk_shape, itemsize)
    chunk_bytes = slabs.chunk_bytes

    def decode(chunk: Chunk) -> None:
        start, valid = slabs.span(chunk.offset)
        data = os.pread(fd, chunk.size, chunk.byte_offset)
        if len(data) != chunk.size:
            raise InvalidFileError("MD513", f"chunk {chunk.offset} is cut short", name)
        array = np.frombuffer(data, np.uint8)
        filters = [code for code, _ in reversed(plan.filters)]
        # The usual last step, unshuffling a whole chunk, copies plane by plane into the result
        # (~3× faster than copying numpy's transposed view).
        last_unshuffle = bool(filters) and filters[-1] == FILTER_SHUFFLE and itemsize > 1
        for code in filters[:-1] if last_unshuffle else filters:
            if code == FILTER_DEFLATE:
                array = np.frombuffer(_inflate(array, chunk_bytes, chunk.offset, name), np.uint8)
            else:
                array = _unshuffle(array, itemsize)
        if array.size != chunk_bytes:
            raise InvalidFileError("MD513", f"chunk {chunk.offset} holds {array.size} bytes, not {chunk_bytes}", name)
        target = flat[start:start + valid].reshape(-1, itemsize)
        if last_unshuffle:
            planes = array.reshape(itemsize, -1)
            for byte in range(itemsize):
                target[:, byte] = planes[byte, : target.shape[0]]
        else:
            target[...] = array.reshape(-1, itemsize)[: target.shape[0]]

    if out.nbytes >= _PARALLEL_BYTES and len(plan.chunks) > 1 and THREADS > 1 and not in_pool():
        list(shared_pool().map(decode, plan.chunks))
    else:
        for chunk in plan.chunks:
            decode(chunk)


def _pread_into(fd: int, flat: np.ndarray, offset: int, name: str) -> None:
    done = 0
    view = flat.data
    while done < flat.size:
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise InvalidFileError("MD513", f"the dataset's data ends {flat.size - done} bytes early", name)
        done += n


def _unshuffle(array: np.ndarray, itemsize: int) -> np.ndarray:
    """libhdf5's shuffle, undone, into a new contiguous buffer: whole elements only, trailing bytes as
    they are, a buffer of ≤ 1 element untouched."""
    elements, leftover = divmod(array.size, itemsize)
    if itemsize <= 1 or elements <= 1:
        return array
    out = np.empty(array.size, np.uint8)
    out[: elements * itemsize].reshape(elements, itemsize)[...] = array[: elements * itemsize].reshape(itemsize, elements).T
    out[elements * itemsize:] = array[elements * itemsize:]
    return out


def _inflate(data, expected: int, offset, name: str) -> bytes:
    inflater = _inflate_lib.decompressobj()
    try:
        out = inflater.decompress(data, expected)
        if not inflater.eof:  # output stopped at ``expected``: the rest may only end the stream
            if inflater.decompress(inflater.unconsumed_tail, 1):
                raise InvalidFileError("MD513", f"chunk {offset} inflates to more than {expected} bytes", name)
        if not inflater.eof:
            raise InvalidFileError("MD513", f"chunk {offset} is not a complete deflate stream", name)
    except (_zlib.error, getattr(_inflate_lib, "error", _zlib.error)) as exc:
        raise InvalidFileError("MD513", f"chunk {offset} does not inflate: {exc}", name) from None
    return out
