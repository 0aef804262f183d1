"""Reading a dataset's stored bytes straight from the file, never through libhdf5's filter pipeline.

The structure walk (mdiff/hdf5walk/walk.py) has already checked every chunk of a dataset against the file's
bounds and the filter allowlist, and recorded where each one lies. Every contiguous and every
chunked dataset is read here: the stored bytes with ``pread`` (positional_io.py), decoded through
the dataset's filters (deflate, shuffle, fletcher32) on a pool of threads (inflating releases the
GIL; libhdf5 holds one lock for everything, so its reads use one core). Only compact datasets,
whose few bytes lie in the object header, and empty ones are left to libhdf5. The bytes equal libhdf5's; the tests
compare both readers on every layout and filter order.

Hostile input (§8.3, §8.5): libhdf5 inflates a chunk into a buffer it doubles until the stream
ends, so a stream made to inflate to 1000 times its size costs that much memory. Here every filter
step is bounded by the size it must produce — a deflate stream is inflated into at most the chunk's
size, and one that would give more, or less, is refused (MD513) — so that decoding a chunk holds
its stored bytes and one chunk's worth of output, whatever the stream claims.
"""

from __future__ import annotations

import bisect
import math
import zlib as _zlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol, TypeVar, Union

import numpy as np
from numpy.typing import DTypeLike

from mdiff.errors import InvalidFileError
from mdiff.hdf5walk import positional_io
from mdiff.hdf5walk.storage import FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_SHUFFLE, Chunk, StoragePlan
from mdiff.format.shuffling import unshuffle_into
from mdiff.threads import in_pool, pool_size, shared_pool


class RangeSource(Protocol):
    """A file read by ranges that has no descriptor (ranged_file.RangedFile: a remote file read in place)."""

    def pread(self, n: int, offset: int) -> bytes: ...


# where a dataset's stored bytes are read from: a file descriptor (positional_io.pread), or a RangeSource
Source = Union[int, RangeSource]


class StoredDataset(Protocol):
    """The dataset a PlannedDataset reads by its plan: an h5py dataset, or parameters.LazyDataset."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def __len__(self) -> int: ...


_T = TypeVar("_T")


def _pread(source: Source, n: int, offset: int) -> bytes:
    return positional_io.pread(source, n, offset) if isinstance(source, int) else source.pread(n, offset)

_inflate_lib: ModuleType
try:  # ISA-L inflates the same streams ~1.5× faster than zlib; zlib is the fallback
    from isal import isal_zlib as _inflate_lib
except ImportError:  # pragma: no cover - isal is a dependency; kept for platforms without a wheel
    _inflate_lib = _zlib
_runs_lib: ModuleType | None
try:  # zlib-ng inflates long runs (matches at distance 1) faster than ISA-L, the rest slower (see _inflater)
    from zlib_ng import zlib_ng as _runs_lib
except ImportError:  # pragma: no cover - zlib-ng is a dependency (the writer's deflate); ISA-L then inflates all
    _runs_lib = None
RUNS_RATIO = 4  # a stream that inflates to this many times its size or more is mostly runs: zlib-ng's

_PARALLEL_BYTES = 4 << 20  # below this, a thread pool costs more than it saves
_FLETCHER_BYTES = 4


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


class _ChunkDecoder:
    """A chunk's stored bytes → its ``chunk_bytes`` decoded bytes, each filter step bounded by the size it may give.

    Filters are undone in the reverse of pipeline order. Written forward from the chunk's bytes,
    shuffle keeps the size, fletcher32 adds 4 bytes and deflate makes at most about 1.001 times its
    input: so before any byte is read, the size each decoding step must give back is known — exactly
    up to the first deflate, bounded after it — and deflate is never let produce more."""

    def __init__(self, plan: StoragePlan, itemsize: int, name: str):
        assert plan.chunk_shape is not None
        self.chunk_bytes = math.prod(plan.chunk_shape) * itemsize
        self.itemsize, self.name = itemsize, name
        sizes: list[tuple[int, bool]] = []  # (bytes, exact) entering each filter when written
        size, exact = self.chunk_bytes, True
        for code, _ in plan.filters:
            sizes.append((size, exact))
            if code == FILTER_FLETCHER32:
                size += _FLETCHER_BYTES
            elif code == FILTER_DEFLATE:
                size, exact = _max_deflated(size), False
        self.steps = [(code, values, *bound) for (code, values), bound in zip(reversed(plan.filters), reversed(sizes))]

    def read(self, fd: Source, chunk: Chunk, defer_unshuffle: bool = False) -> np.ndarray:
        """The chunk's decoded bytes; with ``defer_unshuffle`` the last step, when it is a shuffle by the
        element size, is left undone (the caller unshuffles while it copies)."""
        data = _pread(fd, chunk.size, chunk.byte_offset)
        if len(data) != chunk.size:
            raise InvalidFileError("MD513", f"chunk {chunk.offset} is cut short", self.name)
        array = np.frombuffer(data, np.uint8)
        steps = self.steps[:-1] if defer_unshuffle else self.steps
        for code, values, expected, exact in steps:
            if code == FILTER_DEFLATE:
                array = np.frombuffer(_inflate(array, expected, chunk.offset, self.name), np.uint8)
            elif code == FILTER_SHUFFLE:
                array = _unshuffle(array, _shuffle_size(values, chunk.offset, self.name))
            else:
                array = _strip_fletcher32(array, chunk.offset, self.name)
            if exact and array.size != expected:
                raise InvalidFileError("MD513", f"chunk {chunk.offset} decodes to {array.size} bytes, not {expected}",
                                       self.name)
        if array.size != self.chunk_bytes:  # also unfiltered chunks, and those whose unshuffle is deferred
            raise InvalidFileError("MD513", f"chunk {chunk.offset} holds {array.size} bytes, not {self.chunk_bytes}",
                                   self.name)
        return array

    def ends_with_unshuffle(self) -> bool:
        """True when the last decoding step unshuffles whole elements of this dataset's itemsize."""
        if not self.steps or self.itemsize <= 1:
            return False
        code, values, _, _ = self.steps[-1]
        return code == FILTER_SHUFFLE and tuple(values) == (self.itemsize,)


class PlannedDataset:
    """An h5py dataset read through its StoragePlan: whole (``read_direct``, ``[()]``, ``[...]``,
    ``np.asarray``) or by rows (``[start:stop]``); other selections read the whole and index it."""

    def __init__(self, dataset: StoredDataset, plan: StoragePlan, fd: Source):
        self._dataset, self._plan, self._fd = dataset, plan, fd

    @property
    def plan(self) -> StoragePlan:
        """Where the bytes lie, as the structure walk planned them."""
        return self._plan

    # asked of every parameter, several times (a file may hold 10^5): a property, not __getattr__'s fallback (~1 µs)
    @property
    def shape(self) -> tuple[int, ...]:
        return self._dataset.shape

    @property
    def dtype(self) -> np.dtype:
        return self._dataset.dtype

    def __getattr__(self, attribute: str) -> Any:  # the rest of h5py's Dataset, as the dataset has it
        return getattr(self._dataset, attribute)

    def __len__(self) -> int:
        return len(self._dataset)

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        whole = self[()]
        return whole if dtype is None else whole.astype(dtype)

    def __getitem__(self, selection: Any) -> np.ndarray:  # any numpy index
        shape = tuple(self._dataset.shape)
        rows = _row_range(selection, shape)
        if rows is not None:
            return self._rows(*rows)
        out = np.empty(shape, self._dataset.dtype)
        self.read_direct(out)
        if selection is Ellipsis or (isinstance(selection, tuple) and selection == ()):
            return out
        return out[selection]

    def read_direct(self, out: np.ndarray) -> None:
        shape = tuple(self._dataset.shape)
        if out.shape != shape or not out.flags.c_contiguous or out.dtype.itemsize != self._dataset.dtype.itemsize:
            raise ValueError("read_direct here fills a whole C-contiguous array of the dataset's shape")
        read_planned(self._fd, self._plan, shape, out, self._dataset.name)

    def _rows(self, start: int, stop: int) -> np.ndarray:
        shape = tuple(self._dataset.shape)
        out = np.empty((stop - start, *shape[1:]), self._dataset.dtype)
        if out.size:
            read_rows(self._fd, self._plan, shape, out, start, self._dataset.name)
        return out


class DetachedDataset:
    """A dataset read without libhdf5 (SPEC §8.5): through its StoragePlan from the file descriptor, or from
    the bytes an isolated child read for it (compact data: at most 64 KiB, held in the object header);
    its name, shape, dtype and stored size as the child's structure walk found them."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, storage_size: int,
                 plan: StoragePlan | None, fd: Source, inline: bytes | None):
        self.name, self.shape, self.dtype, self.storage_size = name, shape, dtype, storage_size
        self._plan, self._fd, self._inline = plan, fd, inline

    @property
    def plan(self) -> StoragePlan | None:
        """Where the bytes lie, as the structure walk planned them (None: compact data, or none)."""
        return self._plan

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("a scalar dataset has no length")
        return self.shape[0]

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        whole = self[()]
        return whole if dtype is None else whole.astype(dtype)

    def __getitem__(self, selection: Any) -> np.ndarray:  # any numpy index
        rows = _row_range(selection, self.shape) if self._plan is not None else None
        if rows is not None and self._plan is not None:
            start, stop = rows
            out = np.empty((stop - start, *self.shape[1:]), self.dtype)
            if out.size:
                read_rows(self._fd, self._plan, self.shape, out, start, self.name)
            return out
        out = np.empty(self.shape, self.dtype)
        self.read_direct(out)
        if selection is Ellipsis or (isinstance(selection, tuple) and selection == ()):
            return out
        return out[selection]

    def read_direct(self, out: np.ndarray) -> None:
        if out.shape != self.shape or not out.flags.c_contiguous or out.dtype.itemsize != self.dtype.itemsize:
            raise ValueError("read_direct here fills a whole C-contiguous array of the dataset's shape")
        if self._plan is not None:
            read_planned(self._fd, self._plan, self.shape, out, self.name)
            return
        flat = out.reshape(-1).view(np.uint8)
        data = self._inline or b""
        if len(data) != flat.size:
            raise InvalidFileError("MD513", f"the dataset holds {len(data)} bytes, not {flat.size}", self.name)
        flat[:] = np.frombuffer(data, np.uint8)


class ByteRanges:
    """Any byte range of a dataset's C-order bytes, read and decoded alone: the dataset is contiguous, or
    chunked in slabs (each chunk one run of those bytes), so a range decodes only the chunks it touches.
    ``chunk_bytes``: the span of one chunk (a range cut at its multiples decodes each chunk once; 0 when
    contiguous). Reads on one of the pool's threads stay on it."""

    def __init__(self, plan: StoragePlan, shape: tuple[int, ...], itemsize: int, fd: Source, name: str):
        self._plan, self._itemsize, self._fd, self.name = plan, itemsize, fd, name
        self.chunk_bytes = 0
        if plan.contiguous_offset is None:
            assert plan.chunk_shape is not None
            self.chunk_bytes = math.prod(plan.chunk_shape) * itemsize
            self._decoder = _ChunkDecoder(plan, itemsize, name)
            self._spans = sorted(_slab_spans(plan, shape, itemsize), key=lambda span: span[0])
            self._starts = [start for start, _, _ in self._spans]

    def read(self, out: np.ndarray, first: int) -> None:
        """``out`` (uint8, contiguous) ← the dataset's bytes ``[first, first + out.size)``."""
        if self._plan.contiguous_offset is not None:
            _pread_into(self._fd, out, self._plan.contiguous_offset + first, self.name)
            return
        # the chunks that may hold a byte of the range: from the last one starting at or before it
        low = max(0, bisect.bisect_right(self._starts, first) - 1)
        high = bisect.bisect_left(self._starts, first + out.size)
        _decode_slabs(self._fd, self._decoder, self._spans[low:high], out, first, self._itemsize)


def byte_ranges(dataset: object) -> ByteRanges | None:
    """A :class:`ByteRanges` of a dataset read through its plan (``PlannedDataset``, ``DetachedDataset``)
    whose bytes can be read by any range; None for any other (compact, inline, other chunkings, in memory)."""
    if not isinstance(dataset, (PlannedDataset, DetachedDataset)):
        return None
    plan, shape = dataset._plan, tuple(dataset.shape)
    if plan is None or not shape or (plan.contiguous_offset is None
                                     and (plan.chunk_shape is None or not _is_slab(shape, plan.chunk_shape))):
        return None
    return ByteRanges(plan, shape, np.dtype(dataset.dtype).itemsize, dataset._fd, dataset.name)


def _row_range(selection: object, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(start, stop) when ``selection`` is a step-1 slice of the leading axis, else None."""
    if isinstance(selection, tuple) and len(selection) == 1:
        selection = selection[0]
    if not isinstance(selection, slice) or not shape or selection.step not in (None, 1):
        return None
    start, stop, _ = selection.indices(shape[0])
    return start, max(start, stop)


def read_planned(fd: Source, plan: StoragePlan, shape: tuple[int, ...], out: np.ndarray, name: str) -> None:
    """Fill ``out`` (C-contiguous, the dataset's shape) with the dataset's elements."""
    read_rows(fd, plan, shape, out.reshape(shape), 0, name)


def read_rows(fd: Source, plan: StoragePlan, shape: tuple[int, ...], out: np.ndarray, start: int, name: str) -> None:
    """Fill ``out`` (C-contiguous, shape ``(rows, *shape[1:])``) with the rows from ``start`` on, decoding
    only the chunks that hold some of them."""
    row_bytes = math.prod(shape[1:]) * out.itemsize
    flat = out.reshape(-1).view(np.uint8)
    if plan.contiguous_offset is not None:
        _pread_into(fd, flat, plan.contiguous_offset + start * row_bytes, name)
        return
    assert plan.chunk_shape is not None  # a plan is contiguous or chunked
    if _is_slab(shape, plan.chunk_shape):
        _read_slabs(fd, plan, shape, flat, start * row_bytes, out.itemsize, name)
    else:
        _read_blocks(fd, plan, shape, out, start, name)


def _read_slabs(fd: Source, plan: StoragePlan, shape: tuple[int, ...], flat: np.ndarray, first: int, itemsize: int,
                name: str) -> None:
    """A slab chunking (each chunk one run of the array's C-order bytes): the bytes ``[first, first + flat.size)``."""
    assert plan.chunk_shape is not None
    _decode_slabs(fd, _ChunkDecoder(plan, itemsize, name), _slab_spans(plan, shape, itemsize), flat, first, itemsize)


def _slab_spans(plan: StoragePlan, shape: tuple[int, ...], itemsize: int) -> list[tuple[int, int, Chunk]]:
    """(first byte, bytes inside the array, chunk) of each chunk of a slab chunking, in the file's order."""
    assert plan.chunk_shape is not None
    slabs = Slabs(shape, plan.chunk_shape, itemsize)
    return [(*slabs.span(chunk.offset), chunk) for chunk in plan.chunks]


def _decode_slabs(fd: Source, decoder: _ChunkDecoder, spans: Sequence[tuple[int, int, Chunk]], flat: np.ndarray,
                  first: int, itemsize: int) -> None:
    end = first + flat.size
    # The usual last step, unshuffling a whole chunk, writes straight into the result (shuffling.py: as words,
    # ~5× faster than copying numpy's transposed view).
    planes = decoder.ends_with_unshuffle()
    wanted: list[tuple[Chunk, int, int, int, int]] = []  # chunk, its bytes wanted [lo, hi), its elements [a, b)
    for start, valid, chunk in spans:
        lo, hi = max(start, first), min(start + valid, end)
        if lo < hi:
            wanted.append((chunk, lo, hi, (lo - start) // itemsize, (hi - start) // itemsize))

    def decode(item: tuple[Chunk, int, int, int, int]) -> None:
        chunk, lo, hi, a, b = item
        array = decoder.read(fd, chunk, defer_unshuffle=planes)
        target = flat[lo - first:hi - first].reshape(-1, itemsize)
        if planes:
            unshuffle_into(array.reshape(itemsize, -1)[:, a:b], target)
        else:
            target[...] = array.reshape(-1, itemsize)[a:b]

    _each(decode, wanted, flat.size)


def _read_blocks(fd: Source, plan: StoragePlan, shape: tuple[int, ...], out: np.ndarray, start: int, name: str) -> None:
    """Any other chunking: each chunk's block, clipped to the dataset and to the rows asked for."""
    assert plan.chunk_shape is not None
    stop = start + out.shape[0]
    chunk_shape, itemsize = plan.chunk_shape, out.itemsize
    decoder = _ChunkDecoder(plan, itemsize, name)
    target = out.reshape(-1).view(np.uint8).reshape(*out.shape, itemsize)
    wanted = [c for c in plan.chunks if c.offset[0] < stop and c.offset[0] + chunk_shape[0] > start]

    def decode(chunk: Chunk) -> None:
        array = decoder.read(fd, chunk).reshape(*chunk_shape, itemsize)
        first, last = max(chunk.offset[0], start), min(chunk.offset[0] + chunk_shape[0], stop, shape[0])
        into = [slice(first - start, last - start)]
        source = [slice(first - chunk.offset[0], last - chunk.offset[0])]
        for origin, size, dim in zip(chunk.offset[1:], chunk_shape[1:], shape[1:]):
            inside = min(size, dim - origin)  # an edge chunk's padding stays out
            into.append(slice(origin, origin + inside))
            source.append(slice(0, inside))
        target[tuple(into)] = array[tuple(source)]

    _each(decode, wanted, out.nbytes)


def _each(decode: Callable[[_T], None], chunks: Sequence[_T], nbytes: int) -> None:
    if nbytes >= _PARALLEL_BYTES and len(chunks) > 1 and pool_size() > 1 and not in_pool():
        list(shared_pool().map(decode, chunks))
    else:
        for chunk in chunks:
            decode(chunk)


def _pread_into(fd: Source, flat: np.ndarray, offset: int, name: str) -> None:
    done = 0
    view = flat.data
    if not isinstance(fd, int):
        data = fd.pread(flat.size, offset)
        flat[:len(data)] = np.frombuffer(data, np.uint8)
        done = len(data)
    while done < flat.size:
        n = positional_io.preadv(fd, [view[done:]], offset + done) if isinstance(fd, int) else 0
        if n <= 0:
            raise InvalidFileError("MD513", f"the dataset's data ends {flat.size - done} bytes early", name)
        done += n


def _max_deflated(size: int) -> int:
    """More than deflate makes of ``size`` bytes (stored blocks add 5 bytes per 64 KiB; zlib's header and adler32 6)."""
    return size + size // 1000 + 1024


def _shuffle_size(values: tuple[int, ...], offset: tuple[int, ...], name: str) -> int:
    """The element size a shuffle filter works in: its one client value (libhdf5 refuses others)."""
    if len(values) != 1 or values[0] < 1:
        raise InvalidFileError("MD513", f"chunk {offset}: the shuffle filter's parameters {list(values)} are invalid", name)
    return int(values[0])


def _unshuffle(array: np.ndarray, itemsize: int) -> np.ndarray:
    """libhdf5's shuffle, undone, into a new contiguous buffer: whole elements only, trailing bytes as
    they are, a buffer of ≤ 1 element untouched."""
    elements, leftover = divmod(array.size, itemsize)
    if itemsize <= 1 or elements <= 1:
        return array
    out = np.empty(array.size, np.uint8)
    unshuffle_into(array[:elements * itemsize].reshape(itemsize, elements), out[:elements * itemsize].reshape(elements, itemsize))
    out[elements * itemsize:] = array[elements * itemsize:]
    return out


def _inflate(data: np.ndarray, expected: int, offset: tuple[int, ...], name: str) -> bytes:
    """The stream inflated into at most ``expected`` bytes: output past that is never made (MD513)."""
    inflater = _inflater(data.size, expected)
    try:
        out = inflater.decompress(data, expected)
        if not inflater.eof:  # output stopped at ``expected``: the rest may only end the stream
            if inflater.decompress(inflater.unconsumed_tail, 1):
                raise InvalidFileError("MD513", f"chunk {offset} inflates to more than {expected} bytes", name)
        if not inflater.eof:
            raise InvalidFileError("MD513", f"chunk {offset} is not a complete deflate stream", name)
    except (_zlib.error, getattr(_inflate_lib, "error", _zlib.error), getattr(_runs_lib, "error", _zlib.error)) as exc:
        raise InvalidFileError("MD513", f"chunk {offset} does not inflate: {exc}", name) from None
    return out


def _inflater(stored: int, expected: int) -> Any:
    """A decompressor for a stream of ``stored`` bytes that inflates to at most ``expected``: zlib-ng's where it
    expands RUNS_RATIO-fold or more (mostly runs: a sparse update's 8-byte gaps, six of their eight planes zeros,
    inflate 1.4–1.8× faster — 46 KB → 334 KB: 0.25 ms with ISA-L, 0.13–0.18 ms with zlib-ng), ISA-L's elsewhere
    (a float32 chunk, 1.2-fold: ISA-L 1.3–1.6× faster). The same bytes either way (both inflate deflate)."""
    if _runs_lib is not None and expected >= RUNS_RATIO * stored:
        counts["runs"] += 1
        return _runs_lib.decompressobj()
    return _inflate_lib.decompressobj()


counts = {"runs": 0}  # streams inflated by zlib-ng (tests)


_FLETCHER_BLOCK = 360  # libhdf5 folds its sums every 360 16-bit words (H5_checksum_fletcher32)


def fletcher32(data: np.ndarray) -> int:
    """libhdf5's Fletcher-32 of ``data`` (uint8): big-endian 16-bit words, sums folded every 360 words."""
    words = data[: data.size // 2 * 2].reshape(-1, 2).astype(np.int64)
    words = (words[:, 0] << 8) | words[:, 1]
    whole = words.size // _FLETCHER_BLOCK * _FLETCHER_BLOCK
    blocks = [(words[:whole].reshape(-1, _FLETCHER_BLOCK), _FLETCHER_BLOCK)]
    if whole < words.size:
        blocks.append((words[whole:].reshape(1, -1), words.size - whole))
    sum1 = sum2 = 0
    for block, length in blocks:
        totals = block.sum(axis=1).tolist()
        # Within a block each word enters sum2 once per step still to come: w_k (length - k) times, k from 0.
        weighted = (block @ np.arange(length, 0, -1, dtype=np.int64)).tolist()
        for total, weight in zip(totals, weighted):
            sum2 = (sum2 + length * sum1 + weight) & 0xFFFFFFFF
            sum1 = (sum1 + total) & 0xFFFFFFFF
            sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
            sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if data.size % 2:
        sum1 = (sum1 + (int(data[-1]) << 8)) & 0xFFFFFFFF
        sum2 = (sum2 + sum1) & 0xFFFFFFFF
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return ((sum2 << 16) | sum1) & 0xFFFFFFFF


def _strip_fletcher32(array: np.ndarray, offset: tuple[int, ...], name: str) -> np.ndarray:
    """The bytes before a fletcher32 checksum, once it matches (libhdf5 also accepts the checksum
    with the bytes of each 16-bit half swapped, as libraries before 1.6.3 wrote it)."""
    if array.size < _FLETCHER_BYTES:
        raise InvalidFileError("MD513", f"chunk {offset} is too short to hold its fletcher32 checksum", name)
    body = array[:-_FLETCHER_BYTES]
    stored = int.from_bytes(array[-_FLETCHER_BYTES:].tobytes(), "little")
    computed = fletcher32(body)
    swapped = ((computed & 0x00FF00FF) << 8) | ((computed >> 8) & 0x00FF00FF)
    if stored not in (computed, swapped):
        raise InvalidFileError("MD513", f"chunk {offset} fails its fletcher32 checksum", name)
    return body


# ------------------------------------------------ many small datasets at once (issue 31.3)

_NEAR_BYTES = 4 << 10  # stored bytes this close are read in one pread, the gap with them
_SPAN_BYTES = 8 << 20  # at most this much is read at a time


class _Spans:
    """A RangeSource over a file's stored bytes read ahead in a few spans: a range inside a span is served
    from memory, any other from the file itself, as :func:`_pread` would — so that a dataset decodes to the same
    bytes, and fails with the same finding, as when its chunks are read one by one."""

    def __init__(self, source: Source, spans: list[tuple[int, bytes]]):
        self._source, self._spans = source, spans
        self._starts = [start for start, _ in spans]

    def pread(self, n: int, offset: int) -> bytes:  # or a memoryview of them: what np.frombuffer takes alike
        at = bisect.bisect_right(self._starts, offset) - 1
        if at >= 0:
            start, data = self._spans[at]
            if offset + n <= start + len(data):
                return memoryview(data)[offset - start:offset - start + n]  # type: ignore[return-value]
        return _pread(self._source, n, offset)


def stored_ranges(plan: StoragePlan, nbytes: int) -> list[tuple[int, int]]:
    """(offset, size) of each run of a dataset's stored bytes in the file, by its plan."""
    if plan.contiguous_offset is not None:
        return [(plan.contiguous_offset, nbytes)]
    return [(chunk.byte_offset, chunk.size) for chunk in plan.chunks]


def read_many(datasets: Sequence[Any]) -> tuple[list[np.ndarray | None], int]:
    """The elements of each of ``datasets`` (DetachedDataset, PlannedDataset: read by their plan) as
    :func:`read_planned` reads them, the stored bytes of those that lie near each other in one file read with one
    pread (a diff of 10^5 small parameters keeps them side by side): each dataset's array — None where it failed,
    for the caller to read it alone and raise what that raises — and the number of preads made for the spans.
    A contiguous dataset's array may be a read-only view of a span; a range outside the spans (a span the file
    cut short) is read from the file itself."""
    planned: list[tuple[Source, StoragePlan] | None] = [planned_source(dataset) for dataset in datasets]
    wanted: dict[Source, list[tuple[int, int]]] = {}
    for dataset, where in zip(datasets, planned):
        if where is not None:
            wanted.setdefault(where[0], []).extend(stored_ranges(where[1], math.prod(dataset.shape) * dataset.dtype.itemsize))
    sources: dict[Source, _Spans] = {}
    reads = 0
    for source, ranges in wanted.items():
        spans: list[tuple[int, bytes]] = []
        ranges.sort()
        i = 0
        while i < len(ranges):
            start, end = ranges[i][0], ranges[i][0] + ranges[i][1]
            i += 1
            while i < len(ranges) and ranges[i][0] - end <= _NEAR_BYTES and ranges[i][0] + ranges[i][1] - start <= _SPAN_BYTES:
                end = max(end, ranges[i][0] + ranges[i][1])
                i += 1
            if end > start:
                spans.append((start, _pread(source, end - start, start)))
                reads += 1
        sources[source] = _Spans(source, spans)
    arrays: list[np.ndarray | None] = []
    for dataset, where in zip(datasets, planned):
        try:
            if where is None:
                arrays.append(None)
                continue
            source, plan = where
            shape, dtype = tuple(dataset.shape), dataset.dtype
            if plan.contiguous_offset is not None:
                count = math.prod(shape)
                view = sources[source].pread(count * dtype.itemsize, plan.contiguous_offset)
                if len(view) == count * dtype.itemsize:
                    arrays.append(np.frombuffer(view, dtype, count).reshape(shape))
                    continue
            out = np.empty(shape, dtype)
            if out.size:
                read_planned(sources[source], plan, shape, out, dataset.name)
            arrays.append(out)
        except Exception:  # noqa: BLE001 — the caller reads it alone, which raises this again
            arrays.append(None)
    return arrays, reads


def read_as_rows(datasets: Sequence[Any]) -> np.ndarray | None:
    """The elements of ``datasets`` — of one shape (of rank >= 1) and one dtype, each stored as it is (contiguous)
    in one file — as the rows of one array, their stored bytes read with one pread (a run of 10^5 small parameters:
    no array, view or check of each); None where they are not all so, lie more than a span apart, or the file holds
    fewer bytes than their plans say: :func:`read_many` reads them then, as it reads any, and says why."""
    if not datasets:
        return None
    first = datasets[0]
    shape, dtype = tuple(first.shape), first.dtype
    where = planned_source(first)
    if where is None or not shape:
        return None
    source = where[0]
    offsets = []
    for dataset in datasets:
        where = planned_source(dataset)
        if where is None or where[0] != source or where[1].contiguous_offset is None or dataset.dtype != dtype \
                or dataset.shape != shape:
            return None
        offsets.append(where[1].contiguous_offset)
    nbytes = math.prod(shape) * dtype.itemsize
    at = np.array(offsets, np.int64)
    start = int(at.min())
    end = int(at.max()) + nbytes
    if nbytes == 0 or end - start > _SPAN_BYTES:
        return None
    data = _pread(source, end - start, start)
    if len(data) != end - start:
        return None
    # each row's bytes gathered from the span by one index (n × nbytes): a copy, in the order of ``datasets``
    rows = np.frombuffer(data, np.uint8)[(at - start)[:, None] + np.arange(nbytes)]
    return rows.view(dtype).reshape(len(datasets), *shape)


def planned_source(dataset: object) -> tuple[Source, StoragePlan] | None:
    """Where a dataset this module reads by its plan is read from, and the plan; None for any other
    (compact data, an array in memory, a dataset libhdf5 reads)."""
    if isinstance(dataset, DetachedDataset) and dataset._plan is not None:
        return dataset._fd, dataset._plan
    if isinstance(dataset, PlannedDataset):
        return dataset._fd, dataset._plan
    return None
