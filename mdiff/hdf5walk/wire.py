"""A structure walk as one compact message (SPEC.md §8.5): what an isolated child sends its parent.

The child walks a stranger's file and the parent reads the file by that walk, so the walk crosses a process
boundary — for a file of 10^5 parameters, 2×10^5 objects. As JSON records (Inventory.to_records) that cost
~0.7 s to encode and ~1 s to decode; here it is a header and a few columns, each encoded and decoded in bulk:

    header       magic, identity (st_dev, st_ino, st_size, st_mtime_ns), total bytes, the counts below
    datasets     int64[8, d]: object index, dtype index, ndim, nbytes, stored, plan kind, offset, inline length
    dims         int64[]: each dataset's shape, one after the other
    plans        int64[]: what a chunked plan holds (offset flag and offset, chunk shape, chunks, filters)
    objects      uint32[3, n]: members, attributes, refused attributes of each object
    kinds        uint8[n]: group, dataset, refused, deferred (0-3), and 0x10 where it holds a dict of members
    inline       bytes: the compact datasets' bytes, one after the other
    text         UTF-8 (lone surrogates passed): every name, attribute name, value, refused name and dtype,
                 joined by NUL (none of them holds one: otherwise the walk goes as JSON records)
    findings     JSON: [[code, path, message], ...]

Objects are in breadth-first order, each group's members in their order: the members of every group are
consecutive, and the groups' runs follow one another, so that a member count per object says the whole tree.
The parent checks every count against the message's size before it allocates by it, and every index and kind
before it builds anything: a malformed message is a ValueError (the child is trusted to be mdiff's code, not
to be intact).
"""

from __future__ import annotations

import json
import struct
from array import array
import sys
from collections import deque
from itertools import chain, repeat
from operator import attrgetter, is_not, methodcaller
from typing import Any, Mapping, Sequence

import numpy as np

from mdiff.hdf5walk.storage import Chunk, StoragePlan
from mdiff.hdf5walk.walk import DTYPE_TEXT, DatasetInfo, Inventory, ObjectInfo

MAGIC = b"MDW\x01"
# magic; st_dev, st_ino, st_size, st_mtime_ns; total bytes; objects, datasets, attributes, refused names,
# dtypes, dims, plan ints, inline bytes, text bytes, findings bytes
_HEADER = struct.Struct("<4s3Qqq10Q")
KINDS = ("group", "dataset", "refused", "deferred")
_KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}
_HOLDS = 0x10  # in an object's kind byte: it has a dict of members (a group; or one refused after its walk began)
_DATASET_ROWS = 8
_CONTIGUOUS, _CHUNKED = 1, 2
_U32 = "I" if array("I").itemsize == 4 else "L"
_PLAN_REST = attrgetter("chunk_shape", "chunks", "filters")
_OFFSET = attrgetter("contiguous_offset")
_NODE_FIELDS = attrgetter("name", "kind", "children", "attrs", "refused_attrs", "dataset")
_DATASET_FIELDS = attrgetter("shape", "dtype", "nbytes", "plan", "stored", "inline")
_SIMPLE = (None, (), ())  # what a contiguous plan holds besides its offset
Triple = tuple[str, str, str]


class NotCompact(Exception):
    """A walk this form cannot carry (an integer past 64 bits, a NUL in a name): send it as JSON records."""


def encode(identity: Sequence[int], inventory: Inventory, findings: Sequence[Triple]) -> bytes:
    """The message for ``inventory`` and ``findings`` of the file ``identity`` names; NotCompact when the
    walk holds what this form cannot carry."""
    nodes = [inventory.root]
    for node in nodes:  # breadth first: the list grows as it is read
        nodes.extend(node.children.values())
    n = len(nodes)
    # each object read once (one attrgetter of its fields; a walk's objects lie all over the heap), then columns
    names, kind_texts, children, attrs, refused_sets, datasets = zip(*map(_NODE_FIELDS, nodes))
    try:
        kinds = bytes(map(int.__or__, map(_KIND_CODES.__getitem__, kind_texts),
                          map(_HOLDS.__mul__, map(isinstance, children, repeat(dict)))))
    except KeyError as exc:
        raise NotCompact(f"an object of kind {exc}") from None
    members = list(map(len, children))
    n_attrs = list(map(len, attrs))
    having = [a for a in attrs if a]
    keys = list(chain.from_iterable(map(methodcaller("keys"), having)))
    values = list(chain.from_iterable(map(methodcaller("values"), having)))
    n_refused = list(map(len, refused_sets))
    refused = list(chain.from_iterable(map(sorted, filter(None, refused_sets))))

    at = np.flatnonzero(np.fromiter(map(is_not, datasets, repeat(None)), bool, n)).tolist()
    infos = list(map(datasets.__getitem__, at))
    d = len(infos)
    shapes, dtype_objects, nbytes, plans, stored, inlines = zip(*map(_DATASET_FIELDS, infos)) if d else ((),) * 6
    by_id = {id(x): x for x in dtype_objects}  # the walk's few dtypes, each told once (dtype.str makes a string)
    dtypes = list(dict.fromkeys(x.str for x in by_id.values()))
    index_of = {key: dtypes.index(x.str) for key, x in by_id.items()}
    plan_kinds: list[int]
    offsets: list[int]
    ints: list[int] = []
    if None not in plans and all(map(_SIMPLE.__eq__, map(_PLAN_REST, plans))) and None not in (
            offsets := list(map(_OFFSET, plans))):  # contiguous, all of them: the usual
        plan_kinds = [_CONTIGUOUS] * d
    else:
        plan_kinds, offsets = [], []
        for plan in plans:
            if plan is None:
                plan_kinds.append(0)
                offsets.append(0)
            elif plan.contiguous_offset is not None and _PLAN_REST(plan) == _SIMPLE:
                plan_kinds.append(_CONTIGUOUS)
                offsets.append(plan.contiguous_offset)
            else:
                plan_kinds.append(_CHUNKED)
                offsets.append(0)
                _flat_plan(plan, ints)
    strings = [*names, *keys, *values, *refused, *dtypes]
    text = "\0".join(strings)
    if text.count("\0") != len(strings) - 1:
        raise NotCompact("a NUL in a name or attribute")
    try:
        table = array("q", at)
        inline_sizes = [-1] * d if inlines.count(None) == d else [-1 if b is None else len(b) for b in inlines]
        for row in (map(index_of.__getitem__, map(id, dtype_objects)), map(len, shapes), nbytes, stored, plan_kinds,
                    offsets, inline_sizes):
            table.extend(row)
        dims = array("q", chain.from_iterable(shapes))
        plan_ints = array("q", ints)
        counts = array(_U32, members)
        counts.extend(n_attrs)
        counts.extend(n_refused)
    except (OverflowError, TypeError) as exc:  # an integer past 64 bits, or one that is not an int
        raise NotCompact(str(exc)) from None
    if sys.byteorder != "little":
        for column in (table, dims, plan_ints, counts):
            column.byteswap()
    inline = b"".join(b for b in inlines if b is not None)
    encoded = text.encode("utf-8", "surrogatepass")
    found = json.dumps([list(x) for x in findings]).encode()
    try:
        header = _HEADER.pack(MAGIC, *identity, inventory.total_bytes, n, d, len(keys), len(refused), len(dtypes),
                              len(dims), len(plan_ints), len(inline), len(encoded), len(found))
    except struct.error as exc:
        raise NotCompact(str(exc)) from None
    return b"".join((header, table, dims, plan_ints, counts, kinds,
                     inline, encoded, found))


def _flat_plan(plan: StoragePlan, out: list[int]) -> None:
    out.extend((-1,) if plan.contiguous_offset is None else (1, plan.contiguous_offset))
    if plan.chunk_shape is None:
        out.append(-1)
    else:
        out.append(len(plan.chunk_shape))
        out.extend(plan.chunk_shape)
    out.append(len(plan.chunks))
    for chunk in plan.chunks:
        out.append(len(chunk.offset))
        out.extend(chunk.offset)
        out.extend((chunk.byte_offset, chunk.size))
    out.append(len(plan.filters))
    for code, values in plan.filters:
        out.extend((code, len(values)))
        out.extend(values)


class _Ints:
    """A chunked plan's integers, read in order; ValueError past their end."""

    def __init__(self, values: list[int]):
        self.values, self.at = values, 0

    def take(self, count: int) -> tuple[int, ...]:
        if count < 0 or self.at + count > len(self.values):
            raise ValueError("a plan that runs past its integers")
        out = tuple(self.values[self.at:self.at + count])
        self.at += count
        return out

    def one(self) -> int:
        return self.take(1)[0]


def _plan_of(ints: _Ints) -> StoragePlan:
    offset = None if ints.one() == -1 else ints.one()
    rank = ints.one()
    chunk_shape = None if rank == -1 else ints.take(rank)
    chunks: list[Chunk] = []
    for _ in range(ints.one()):
        if len(chunks) > len(ints.values):
            raise ValueError("more chunks than integers")
        where = ints.take(ints.one())
        byte_offset, size = ints.take(2)
        chunks.append(Chunk(where, byte_offset, size))
    filters: list[tuple[int, tuple[int, ...]]] = []
    for _ in range(ints.one()):
        if len(filters) > len(ints.values):
            raise ValueError("more filters than integers")
        code = ints.one()
        filters.append((code, ints.take(ints.one())))
    return StoragePlan(offset, chunk_shape, tuple(chunks), tuple(filters))


def decode(message: bytes | bytearray | memoryview) -> tuple[tuple[int, int, int, int], Inventory, list[Triple]]:
    """The identity, inventory and findings :func:`encode` made into ``message``; ValueError when it is not
    such a message (truncated, with counts it does not hold, an index out of range, a kind unknown)."""
    try:
        return _decode(memoryview(message).cast("B"))
    except (TypeError, ValueError, IndexError, KeyError, OverflowError, struct.error, RecursionError) as exc:
        raise ValueError(f"not a walk: {exc}") from None


def _decode(view: memoryview) -> tuple[tuple[int, int, int, int], Inventory, list[Triple]]:
    if len(view) < _HEADER.size:
        raise ValueError("shorter than its header")
    (magic, dev, ino, size, mtime, total_bytes, n, d, a, r, t, n_dims, n_ints, n_inline, n_text,
     n_found) = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise ValueError("not this form")
    sizes = (8 * _DATASET_ROWS * d, 8 * n_dims, 8 * n_ints, 12 * n, n, n_inline, n_text, n_found)
    if _HEADER.size + sum(sizes) != len(view) or n < 1:  # before anything is allocated by a count
        raise ValueError("counts that are not the message's size")
    parts = []
    at = _HEADER.size
    for nbytes in sizes:
        parts.append(view[at:at + nbytes])
        at += nbytes
    table_bytes, dims_bytes, ints_bytes, counts_bytes, kinds_bytes, inline, text_bytes, found_bytes = parts
    findings = _findings(json.loads(bytes(found_bytes)))

    kind_bytes = np.frombuffer(kinds_bytes, np.uint8)
    holds = (kind_bytes & _HOLDS) != 0
    kinds = kind_bytes & ~np.uint8(_HOLDS)
    if int(kinds.max()) >= len(KINDS) or np.any(kind_bytes & ~np.uint8(_HOLDS | 0x0F)):
        raise ValueError("an object of no kind")
    counts = np.frombuffer(counts_bytes, "<u4").reshape(3, n).astype(np.int64)
    members, n_attrs, n_refused = counts
    # the tree: object 0 is the root, and each object's members follow the members of the objects before it
    first = np.empty(n + 1, np.int64)
    first[0] = 1
    np.cumsum(members, out=first[1:])
    first[1:] += 1
    if first[n] != n:
        raise ValueError("member counts that are not the objects")
    holders = np.flatnonzero(members)
    if holders.size and (np.any(first[holders] <= holders) or not np.all(holds[holders])):
        raise ValueError("a member that comes before its group, or a member of what holds none")
    if int(n_attrs.sum()) != a or int(n_refused.sum()) != r:
        raise ValueError("attribute counts that are not the attributes")

    text = str(text_bytes, "utf-8", "surrogatepass")
    strings = text.split("\0")
    del text
    if len(strings) != n + 2 * a + r + t:
        raise ValueError("names that are not the objects")
    names = strings[:n]
    keys = list(map(sys.intern, strings[n:n + a]))  # one "update" for all, as JSON's decoder keeps keys
    values = strings[n + a:n + 2 * a]
    refused = strings[n + 2 * a:n + 2 * a + r]
    dtype_texts = strings[n + 2 * a + r:]
    del strings
    if not all(DTYPE_TEXT.fullmatch(x) for x in dtype_texts):
        raise ValueError("a dtype that is not a storage type")
    dtypes = [np.dtype(x) for x in dtype_texts]

    nodes = ObjectInfo.blank(n)
    kind_names = list(map(KINDS.__getitem__, kinds.tolist()))
    starts = first[:-1].tolist()
    member_counts = members.tolist()
    child_at: list[int] = []  # the objects that hold a dict of members, and those dicts
    children: list[dict[str, ObjectInfo]] = []
    for count in (0, 1):  # the usual: a leaf group, or a parameter's group of one dataset
        which = np.flatnonzero(holds & (members == count))
        child_at.extend(which.tolist())
        children.extend([{} for _ in range(which.size)] if count == 0 else
                        [{names[j]: nodes[j]} for j in first[which].tolist()])
    for i in np.flatnonzero(holds & (members > 1)).tolist():
        j, count = starts[i], member_counts[i]
        child_at.append(i)
        children.append(dict(zip(names[j:j + count], nodes[j:j + count])))
        if len(children[-1]) != count:
            raise ValueError("two members of one name")
    parents = [None, *map(nodes.__getitem__, np.repeat(np.arange(n), members).tolist())]
    depths = np.zeros(n, np.int64)
    start, end, level = 0, 1, 0
    while start < end:  # level by level: each level's members are the next run of objects
        depths[start:end] = level
        start, end, level = int(first[start]), int(first[end]), level + 1
    ends = np.cumsum(n_attrs)
    single = np.flatnonzero(n_attrs == 1)  # the usual: a parameter's `update`
    attr_at: list[int] = single.tolist()
    attrs: list[Mapping[str, str]] = [{keys[j]: values[j]} for j in (ends[single] - 1).tolist()]
    for i in np.flatnonzero(n_attrs > 1).tolist():
        j, count = int(ends[i]), int(n_attrs[i])
        attr_at.append(i)
        attrs.append(dict(zip(keys[j - count:j], values[j - count:j])))
    refused_at: list[int] = []
    refused_attrs: list[set[str]] = []
    if r:
        ends = np.cumsum(n_refused).tolist()
        for i in np.flatnonzero(n_refused).tolist():
            refused_at.append(i)
            refused_attrs.append(set(refused[ends[i] - int(n_refused[i]):ends[i]]))
    dataset_of: list[DatasetInfo | None] = [None] * n
    for i, info in _datasets(table_bytes, dims_bytes, ints_bytes, inline, d, n, dtypes):
        dataset_of[i] = info
    ObjectInfo.fill(nodes, names, parents, kind_names, depths.tolist(), dataset_of, (attr_at, attrs),
                    (refused_at, refused_attrs), (child_at, children))
    return (dev, ino, size, mtime), Inventory(nodes[0], total_bytes), findings


def _datasets(table_bytes: memoryview, dims_bytes: memoryview, ints_bytes: memoryview, inline: memoryview, d: int,
              n: int, dtypes: list[np.dtype]) -> zip:
    if d == 0:
        if len(dims_bytes) or len(ints_bytes) or len(inline):
            raise ValueError("dataset parts without datasets")
        return zip((), ())
    table = np.frombuffer(table_bytes, "<i8").reshape(_DATASET_ROWS, d)
    at, dtype_at, ndim, nbytes, stored, plan_kind, offset, inline_size = table
    if np.any(at < 0) or np.any(at >= n) or np.any(np.diff(at) <= 0):
        raise ValueError("a dataset of no object")
    if np.any(dtype_at < 0) or np.any(dtype_at >= len(dtypes)) or np.any(ndim < 0) or np.any(plan_kind < 0) \
            or np.any(plan_kind > _CHUNKED) or np.any(inline_size < -1):
        raise ValueError("a malformed dataset")
    dims = np.frombuffer(dims_bytes, "<i8")
    if int(ndim.sum()) != dims.size or int(inline_size[inline_size > 0].sum()) != len(inline):
        raise ValueError("shapes or bytes that are not the datasets'")
    shapes: list[Any]
    low, high = int(ndim.min()), int(ndim.max())  # not np.unique: its first call imports numpy.ma (6-26 ms)
    if low == high:
        rank = low
        shapes = list(zip(*dims.reshape(d, rank).T.tolist())) if rank else [()] * d
    else:
        shapes = [None] * d
        dim_at = np.cumsum(ndim) - ndim
        for rank in sorted(set(ndim.tolist())):
            which = np.flatnonzero(ndim == rank)
            got = list(zip(*(dims[dim_at[which] + k].tolist() for k in range(rank)))) if rank else [()] * which.size
            for i, shape in zip(which.tolist(), got):
                shapes[i] = shape
    dtype_of = list(map(dtypes.__getitem__, dtype_at.tolist()))
    plans: list[Any] = [None] * d
    contiguous = plan_kind == _CONTIGUOUS
    deque(map(plans.__setitem__, np.flatnonzero(contiguous).tolist(), StoragePlan.contiguous_at(offset[contiguous].tolist())), 0)
    if np.any(plan_kind == _CHUNKED):
        ints = _Ints(np.frombuffer(ints_bytes, "<i8").tolist())
        for i in np.flatnonzero(plan_kind == _CHUNKED).tolist():
            plans[i] = _plan_of(ints)
        if ints.at != len(ints.values):
            raise ValueError("plan integers left over")
    elif len(ints_bytes):
        raise ValueError("plan integers left over")
    inlines: list[Any] = [None] * d
    if len(inline):
        ends = np.cumsum(np.maximum(inline_size, 0)).tolist()
        for i in np.flatnonzero(inline_size >= 0).tolist():
            inlines[i] = bytes(inline[ends[i] - int(inline_size[i]):ends[i]])
    elif np.any(inline_size >= 0):
        inlines = [None if x < 0 else b"" for x in inline_size.tolist()]
    infos = list(map(DatasetInfo, shapes, dtype_of, nbytes.tolist(), plans, stored.tolist(), inlines))
    return zip(at.tolist(), infos)


def _findings(data: object) -> list[Triple]:
    if not isinstance(data, list):
        raise ValueError("findings that are not a list")
    out = []
    for item in data:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
            raise ValueError("a malformed finding")
        out.append((item[0], item[1], item[2]))
    return out
