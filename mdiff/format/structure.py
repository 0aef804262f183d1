"""SPEC.md §8.1–§8.3: walk an HDF5 file's objects, refuse what a file must not hold.

The walk reads metadata only — link and object headers, datatypes,
dataspaces, storage sizes, attribute sizes — never dataset data, and it
stops at the object limit. It never follows a soft or external link and never
visits an object twice. What it returns (an inventory of the objects that
passed) is all the reader and validator look at afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import h5py
import numpy as np

from mdiff.format.attributes import read_string, string_attribute_size
from mdiff.format.findings import Finding
from mdiff.format.limits import MAX_DEFLATE_RATIO, Limits, shape_problem
from mdiff.format.storage import Chunk, StoragePlan, coverage_problem, plan_for

FILTER_DEFLATE, FILTER_SHUFFLE, FILTER_FLETCHER32 = 1, 2, 3
MAX_ATTRIBUTES_PER_OBJECT = 64  # mdiff defines at most 4 per object; more is hostile (§8.3)
ALLOWED_FILTERS = {FILTER_DEFLATE: "deflate", FILTER_SHUFFLE: "shuffle", FILTER_FLETCHER32: "fletcher32"}

# The only dataset datatypes a file may use (§8.2): little-endian IEEE floats and two's-complement integers.
STORAGE_DTYPES = [np.dtype(s) for s in ("<u1", "<u2", "<u4", "<u8", "<i1", "<i2", "<i4", "<i8", "<f4", "<f8")]
_STORAGE_TYPES = [(dt, h5py.h5t.py_create(dt)) for dt in STORAGE_DTYPES]


@dataclass
class DatasetInfo:
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    plan: StoragePlan | None = None  # where the bytes lie, when storage.py can read them itself


@dataclass
class ObjectInfo:
    path: str
    kind: str  # "group" or "dataset"
    attrs: dict[str, str] = field(default_factory=dict)  # well-formed attributes only
    refused_attrs: set[str] = field(default_factory=set)  # present, but reported under §8 (not "missing")
    members: list[str] = field(default_factory=list)  # link names, for groups
    dataset: DatasetInfo | None = None  # None for groups and refused datasets


@dataclass
class Inventory:
    objects: dict[str, ObjectInfo] = field(default_factory=dict)
    total_bytes: int = 0


def _join(parent: str, name: str) -> str:
    return "/" + name if parent == "/" else f"{parent}/{name}"


class _Walk:
    def __init__(self, f: h5py.File, file_size: int, limits: Limits):
        self.file = f
        self.file_size = file_size
        self.limits = limits
        self.findings: list[Finding] = []
        self.inventory = Inventory()
        self.seen_addresses: set[int] = set()
        self.count = 0

    def finding(self, code: str, path: str, message: str) -> None:
        self.findings.append(Finding(code, path, message))

    def run(self) -> None:
        stack = [("/", self.file.id)]
        while stack:
            path, gid = stack.pop()
            info = ObjectInfo(path, "group")
            self.inventory.objects[path] = info
            if not self._read_attributes(path, gid, info):
                return
            for raw in self._link_names(path, gid):
                if self.count >= self.limits.max_objects:
                    self.finding("MD511", path, f"more than {self.limits.max_objects} objects")
                    return
                child = self._visit(path, gid, raw, info)
                if child is not None:
                    stack.append(child)
        self._check_total()

    def _link_names(self, path: str, gid) -> list[bytes]:
        try:
            names = []
            for raw in gid:  # iterating yields link names without resolving them
                names.append(raw)
                if len(names) > self.limits.max_objects:
                    break
            return sorted(names)
        except Exception as exc:  # a corrupt group B-tree
            self.finding("MD513", path, f"the group's links cannot be read: {exc}")
            return []

    def _visit(self, parent: str, gid, raw: bytes, parent_info: ObjectInfo):
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.finding("MD302", parent, f"link name {raw!r} is not UTF-8")
            return None
        path = _join(parent, name)
        try:
            link_type = gid.links.get_info(raw).type
        except Exception as exc:
            self.finding("MD513", path, f"the link cannot be read: {exc}")
            return None
        if link_type != h5py.h5l.TYPE_HARD:
            kind = {h5py.h5l.TYPE_SOFT: "soft", h5py.h5l.TYPE_EXTERNAL: "external"}.get(link_type, "user-defined")
            self.finding("MD500", path, f"{kind} link; only hard links are allowed")
            return None
        try:
            oid = h5py.h5o.open(gid, raw)
            oinfo = h5py.h5o.get_info(oid)
        except Exception as exc:
            self.finding("MD513", path, f"the object cannot be opened: {exc}")
            return None
        self.count += 1
        if oinfo.addr in self.seen_addresses or oinfo.rc != 1:
            self.finding("MD514", path, "the object has more than one link to it")
            return None
        self.seen_addresses.add(oinfo.addr)
        parent_info.members.append(name)
        kind = h5py.h5i.get_type(oid)
        if kind == h5py.h5i.GROUP:
            return (path, oid)
        if kind == h5py.h5i.DATASET:
            info = ObjectInfo(path, "dataset")
            self.inventory.objects[path] = info
            if self._read_attributes(path, oid, info):
                info.dataset = self._check_dataset(path, oid)
            return None
        self.finding("MD501", path, "a committed datatype; only groups and datasets are allowed")
        return None

    def _read_attributes(self, path: str, oid, info: ObjectInfo) -> bool:
        """Record well-formed attributes; False once the attribute count is over the object limit."""
        try:
            n = h5py.h5a.get_num_attrs(oid)
        except Exception as exc:
            self.finding("MD513", path, f"attributes cannot be read: {exc}")
            return True
        self.count += n
        if n > MAX_ATTRIBUTES_PER_OBJECT:  # opening the i-th of many attributes costs libhdf5 O(n log n)
            self.finding("MD511", path, f"{n} attributes on one object (at most {MAX_ATTRIBUTES_PER_OBJECT})")
            return False
        if self.count > self.limits.max_objects:
            self.finding("MD511", path, f"more than {self.limits.max_objects} objects and attributes")
            return False
        for i in range(n):
            try:
                aid = h5py.h5a.open(oid, index=i)
                name = aid.get_name().decode("utf-8", "replace")
                size = string_attribute_size(aid)
                if size is None:
                    self.finding("MD506", path, f"attribute {name!r} is not a scalar fixed-length UTF-8 string")
                    info.refused_attrs.add(name)
                    continue
                if size > self.limits.max_attribute_bytes:
                    self.finding("MD510", path, f"attribute {name!r} has {size} bytes (limit {self.limits.max_attribute_bytes})")
                    info.refused_attrs.add(name)
                    continue
                text = read_string(aid, size)
            except Exception as exc:
                self.finding("MD513", path, f"attribute {i} cannot be read: {exc}")
                continue
            if text is None:
                self.finding("MD506", path, f"attribute {name!r} is not valid UTF-8")
                info.refused_attrs.add(name)
                continue
            info.attrs[name] = text
        return True

    def _check_dataset(self, path: str, did) -> DatasetInfo | None:
        try:
            dcpl = did.get_create_plist()
            layout = dcpl.get_layout()
            if layout == h5py.h5d.VIRTUAL:
                self.finding("MD503", path, "virtual dataset")
                return None
            if dcpl.get_external_count() > 0:
                self.finding("MD502", path, "external raw storage")
                return None
            filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
            bad = [f for f in filters if f not in ALLOWED_FILTERS]
            if bad:
                self.finding("MD504", path, f"filter id(s) {bad}; allowed: deflate (1), shuffle (2), fletcher32 (3)")
                return None
            dtype = self._storage_dtype(did.get_type())
            if dtype is None:
                self.finding("MD505", path, "datatype is not a little-endian IEEE float or two's-complement integer")
                return None
            space = did.get_space()
            if space.get_simple_extent_type() not in (h5py.h5s.SCALAR, h5py.h5s.SIMPLE):
                self.finding("MD505", path, "null dataspace")
                return None
            shape = tuple(int(d) for d in space.shape)
            if space.get_simple_extent_type() == h5py.h5s.SIMPLE and tuple(space.get_simple_extent_dims(True)) != shape:
                self.finding("MD509", path, "the dataset is extendible (its maximum shape is not its shape)")
                return None
            problem = shape_problem(shape, dtype.itemsize, self.limits)  # MD507/MD508; a 0 counts as 1
            if problem:
                self.finding(problem[0], path, problem[1])
                return None
            nbytes = math.prod(shape) * dtype.itemsize
            plan = self._storage_plan(path, did, layout, dcpl, shape, dtype, nbytes, filters)
            if plan is False or plan is True:  # False: refused (reported); a plan is never True
                return None
        except Exception as exc:
            self.finding("MD513", path, f"the dataset's header cannot be read: {exc}")
            return None
        self.inventory.total_bytes += nbytes
        return DatasetInfo(shape, dtype, nbytes, plan)

    @staticmethod
    def _storage_dtype(tid) -> np.dtype | None:
        for dtype, allowed in _STORAGE_TYPES:
            if tid.equal(allowed):
                return dtype
        return None

    def _storage_plan(self, path, did, layout, dcpl, shape, dtype, nbytes, filters) -> StoragePlan | None | bool:
        """Every byte the dataset declares is stored inside the file; nothing is left to fill values.

        False when not (reported); otherwise how storage.py reads the bytes, or None (compact or empty: libhdf5 reads them).
        """
        if nbytes == 0 or layout == h5py.h5d.COMPACT:
            return None
        if layout == h5py.h5d.CONTIGUOUS:
            offset = did.get_offset()
            stored = did.get_storage_size()
            if offset is None or stored < nbytes or offset + nbytes > self.file_size:
                self.finding("MD509", path, f"declares {nbytes} bytes; {stored} are stored within the file")
                return False
            return plan_for(shape, dtype.itemsize, contiguous_offset=offset)
        chunk = dcpl.get_chunk()
        expected = math.prod(math.ceil(d / c) for d, c in zip(shape, chunk))
        chunk_bytes = math.prod(chunk) * dtype.itemsize
        ratio = MAX_DEFLATE_RATIO if FILTER_DEFLATE in filters else 1
        problems: list[str] = []
        chunks: list[Chunk] = []

        def visit(chunk_info) -> None:
            chunks.append(Chunk(tuple(int(o) for o in chunk_info.chunk_offset), int(chunk_info.byte_offset), int(chunk_info.size)))
            if chunk_info.filter_mask:
                skipped.append(chunk_info.chunk_offset)
            elif chunk_info.byte_offset + chunk_info.size > self.file_size:
                problems.append(f"chunk {chunk_info.chunk_offset} lies outside the file")
            elif FILTER_FLETCHER32 in filters and chunk_info.size < 4:  # libhdf5 underflows on these
                problems.append(f"chunk {chunk_info.chunk_offset} is too short to hold its fletcher32 checksum")
            elif chunk_info.size * ratio < chunk_bytes:
                problems.append(f"chunk {chunk_info.chunk_offset} stores {chunk_info.size} bytes for {chunk_bytes}")

        if did.get_num_chunks() != expected:
            self.finding("MD509", path, f"{did.get_num_chunks()} of {expected} chunks are stored")
            return False
        skipped: list = []
        did.chunk_iter(visit)
        if skipped:  # libhdf5 mis-reads such chunks (heap over-read, found by fuzzing)
            self.finding("MD504", path, f"chunk {skipped[0]} skips some of the dataset's filters")
            return False
        coverage = coverage_problem(shape, tuple(int(c) for c in chunk), chunks)
        if coverage:  # libhdf5 would read a missing chunk as fill values
            problems.append(coverage)
        if problems:
            self.finding("MD509", path, problems[0])
            return False
        pipeline = tuple((int(code), tuple(int(v) for v in values)) for code, _, values, _ in map(dcpl.get_filter, range(dcpl.get_nfilters())))
        return plan_for(shape, dtype.itemsize, chunk_shape=tuple(int(c) for c in chunk), chunks=chunks, filters=pipeline)

    def _check_total(self) -> None:
        if self.inventory.total_bytes > self.limits.max_total_bytes:
            self.finding(
                "MD512", "/",
                f"datasets declare {self.inventory.total_bytes} bytes (limit {self.limits.max_total_bytes})",
            )


def inspect_structure(f: h5py.File, file_size: int, limits: Limits) -> tuple[Inventory, list[Finding]]:
    walk = _Walk(f, file_size, limits)
    walk.run()
    return walk.inventory, walk.findings
