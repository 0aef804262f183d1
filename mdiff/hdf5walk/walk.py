"""SPEC.md §8.1–§8.3: walk an HDF5 file's objects, refuse what a file must not hold.

The walk reads metadata only — link and object headers, datatypes,
dataspaces, storage sizes, attribute sizes — never dataset data, and it
stops at the object limit. It never follows a soft or external link and never
visits an object twice. What it returns (an inventory of the objects that
passed) is all the reader and validator look at afterwards.

It is one module of ~800 lines because §8's rules are one walk: each check needs the state the walk
has reached (the object visited, the limits spent so far), and split apart they would pass that state
back and forth. The bytes below libhdf5's view live in object_header.py.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import functools
import math
import operator
import os
import re
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import Any, Final, Iterator, Literal, Mapping

import h5py
import numpy as np

from mdiff.hdf5walk import positional_io
from mdiff.hdf5walk.attributes import read_string, string_attribute_size
from mdiff.hdf5walk.findings import Finding
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, MAX_DEFLATE_RATIO, Limits, shape_problem
from mdiff.hdf5walk.object_header import MAX_ATTRIBUTES_PER_OBJECT, HeaderReader, ReadAt
from mdiff.hdf5walk.storage import FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_SHUFFLE, Chunk, StoragePlan, coverage_problem, plan_for

# object header message types by which libhdf5 tells a group (either) from a dataset (both) (H5O__group_isa, H5O__dset_isa)
_SYMBOL_TABLE_MESSAGE, _LINK_INFO_MESSAGE, _DATATYPE_MESSAGE, _DATASPACE_MESSAGE = 0x11, 0x02, 0x03, 0x01
_ATTRIBUTE_MESSAGE, _ATTRIBUTE_INFO_MESSAGE = 0x0C, 0x15
_GROUP, _DATASET, _HARD_LINK = h5py.h5i.GROUP, h5py.h5i.DATASET, h5py.h5l.TYPE_HARD
_CONTIGUOUS = h5py.h5d.CONTIGUOUS  # an object without either has no attributes

ALLOWED_FILTERS = {FILTER_DEFLATE: "deflate", FILTER_SHUFFLE: "shuffle", FILTER_FLETCHER32: "fletcher32"}

# The only dataset datatypes a file may use (§8.2): little-endian IEEE floats and two's-complement integers.
STORAGE_DTYPES = [np.dtype(s) for s in ("<u1", "<u2", "<u4", "<u8", "<i1", "<i2", "<i4", "<i8", "<f4", "<f8")]

def _type_key(tid: h5py.h5t.TypeID) -> tuple[int, int, int | None]:
    return (tid.get_class(), tid.get_size(), tid.get_sign() if tid.get_class() == h5py.h5t.INTEGER else None)


# By (class, size, sign): a file's datatype is compared with the one allowed type it could be.
_STORAGE_TYPES = {_type_key(tid): (dt, tid) for dt, tid in ((dt, h5py.h5t.py_create(dt)) for dt in STORAGE_DTYPES)}


def _standard_bits(dtype: np.dtype) -> int:
    """The class bit field of the datatype message of the standard type ``dtype`` (§8.2): a float's mantissa
    normalisation (implied: 2, bits 4-5) and sign location (bits 8-15); an integer's sign (bit 3); every other bit
    0 (little-endian, padding zeros, nothing reserved)."""
    if dtype.kind == "f":
        return 0x20 | (8 * dtype.itemsize - 1) << 8
    return 0x08 if dtype.kind == "i" else 0


def _utf8_text(raw: bytes) -> str | None:
    """A fixed-length string attribute's bytes as read_string gives them: trailing NULs dropped, UTF-8 decoded
    (None when not UTF-8)."""
    try:
        return raw.rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        return None


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass(slots=True)  # one per dataset: a file may hold 10^5
class DatasetInfo:
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    plan: StoragePlan | None = None  # where the bytes lie, when chunk_reader.py can read them itself
    stored: int = 0  # bytes the dataset occupies in the file (after its filters)
    inline: bytes | None = None  # a compact dataset's bytes, read by an isolated child for its parent


_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})
_NONE_REFUSED: frozenset[str] = frozenset()  # shared: each empty frozenset() is an object of 216 bytes
_NO_CHILDREN: Mapping[str, "ObjectInfo"] = MappingProxyType({})
MAX_REPORTED_PATH = 4096  # characters of a path in a finding; longer ones keep their two ends


class ObjectInfo:
    """One object that passed the walk's link checks. It knows its parent, not its path: a file of
    deeply nested long names would otherwise hold every prefix of every path (issue 14.9)."""

    __slots__ = ("name", "parent", "kind", "depth", "attrs", "refused_attrs", "children", "dataset")

    def __init__(self, name: str, parent: ObjectInfo | None, kind: str):
        self.name = name
        self.parent = parent
        # "group", "dataset", "refused" (reported: MD501, or a member refused at its link), or "deferred"
        # (a member of a group a LazyWalk walks only when it is used)
        self.kind = kind
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.attrs: Mapping[str, str] = _NO_ATTRIBUTES  # well-formed attributes only
        self.refused_attrs: frozenset[str] | set[str] = _NONE_REFUSED  # present, but reported under §8 (not "missing")
        # by link name, in name order; groups only (one shared empty mapping for the rest: a file may hold 10^5)
        self.children: Mapping[str, ObjectInfo] = {} if kind == "group" else _NO_CHILDREN
        self.dataset: DatasetInfo | None = None  # None for groups and refused datasets

    @staticmethod
    def blank(n: int) -> list[ObjectInfo]:
        """``n`` objects, each to be given its fields by :meth:`fill` (they refer to one another)."""
        return list(map(object.__new__, repeat(ObjectInfo, n)))

    @staticmethod
    def fill(nodes: list[ObjectInfo], names: list[str], parents: list[ObjectInfo | None], kinds: list[str],
             depths: list[int], datasets: list[DatasetInfo | None],
             attrs: tuple[list[int], list[Mapping[str, str]]], refused: tuple[list[int], list[set[str]]],
             children: tuple[list[int], list[dict[str, ObjectInfo]]]) -> None:
        """Every field of ``nodes`` (made by :meth:`blank`) from columns, one entry an object: a walk of 10^5
        parameters sent by an isolated child (wire.decode). ``attrs``, ``refused`` and ``children`` are (the
        places, the values) of the objects that have attributes, refused attribute names and a dict of members;
        the others share the empty ones, as ``__init__`` gives them."""
        n = len(nodes)
        columns: list[tuple[str, list[Any]]] = [("name", names), ("parent", parents), ("kind", kinds), ("depth", depths),
                                                ("dataset", datasets)]
        for slot, empty, (places, values) in (("attrs", _NO_ATTRIBUTES, attrs), ("refused_attrs", _NONE_REFUSED, refused),
                                              ("children", _NO_CHILDREN, children)):
            column: list[Any] = [empty] * n
            deque(map(column.__setitem__, places, values), 0)
            columns.append((slot, column))
        for slot, column in columns:
            deque(map(getattr(ObjectInfo, slot).__set__, nodes, column), 0)

    def adopt(self, node: ObjectInfo) -> ObjectInfo:
        """File ``node`` as this group's member of its name."""
        assert isinstance(self.children, dict)
        self.children[node.name] = node
        return node

    def disown(self, name: str) -> None:
        assert isinstance(self.children, dict)
        del self.children[name]

    @property
    def path(self) -> str:
        names = []
        node: ObjectInfo | None = self
        while node is not None and node.parent is not None:
            names.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(names))

    @property
    def members(self) -> list[str]:
        """Link names of a group's members, in name order (objects refused by a link check excluded)."""
        return list(self.children)

    def child(self, name: str) -> ObjectInfo | None:
        """The member ``name`` when it is a group or dataset; None when absent, refused or not walked yet."""
        node = self.children.get(name)
        return node if node is not None and node.kind in ("group", "dataset") else None


def report_path(node: ObjectInfo, name: str | None = None) -> str:
    """The path of ``node`` (or of its member ``name``) for a finding, at most MAX_REPORTED_PATH characters:
    beyond that its middle is elided, so that findings stay small whatever the names."""
    names = [] if name is None else [name]
    size = len(names[0]) + 1 if names else 0
    current: ObjectInfo | None = node
    while current is not None and current.parent is not None:
        names.append(current.name)
        size += len(current.name) + 1
        current = current.parent
    if size <= MAX_REPORTED_PATH:
        return "/" + "/".join(reversed(names))
    full = "/" + "/".join(reversed(names))  # bounded: §8.3 bounds the depth, the file the names
    keep = MAX_REPORTED_PATH // 2
    return f"{full[:keep]}…{full[-keep:]}"


class _ByPath:
    """inventory.objects: the objects that passed, found by HDF5 path ("/", "/parameters/w/xor")."""

    def __init__(self, root: ObjectInfo):
        self._root = root

    def get(self, path: str, default: ObjectInfo | None = None) -> ObjectInfo | None:
        node: ObjectInfo | None = self._root
        for name in path.split("/")[1:] if path != "/" else []:
            node = node.child(name) if node is not None else None
        return node if node is not None else default

    def __getitem__(self, path: str) -> ObjectInfo:
        node = self.get(path)
        if node is None:
            raise KeyError(path)
        return node

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and self.get(path) is not None

    def refused(self, path: str) -> bool:
        """Whether a link at ``path`` leads to something the walk refused (reported once under §8; no
        other rule reports it, as missing or otherwise: SPEC §12.1)."""
        parent, _, name = path.rpartition("/")
        node = self.get(parent or "/")
        member = node.children.get(name) if node is not None else None
        return member is not None and member.kind == "refused"


@dataclass
class Inventory:
    root: ObjectInfo = field(default_factory=lambda: ObjectInfo("", None, "group"))
    total_bytes: int = 0

    @property
    def objects(self) -> _ByPath:
        return _ByPath(self.root)

    def release(self) -> None:
        """Unlink the tree (each node knows its parent and its members: a cycle the garbage collector alone
        would free) so that it is freed as soon as nothing else holds it: ~1.7 KB a parameter, which a reader
        that has parsed the file by it no longer needs. The inventory is empty afterwards."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            children = node.children
            if children:
                stack.extend(children.values())
                node.children = {}
            node.parent = None
        self.root = ObjectInfo("", None, "group")

    def to_records(self) -> list:
        """The walk as JSON-able records, in walk order: a record per object with its parent's index, so
        that neither encoding nor decoding recurses (an isolated child hands its walk to the parent, §8.5)."""
        records: list = []
        index: dict[int, int] = {}
        stack = [self.root]
        while stack:
            node = stack.pop()
            index[id(node)] = len(records)
            parent = -1 if node.parent is None else index[id(node.parent)]
            if node.dataset is None and not node.refused_attrs:  # the short forms: no trailing nulls to send
                records.append([parent, node.name, node.kind, dict(node.attrs)] if node.attrs else [parent, node.name, node.kind])
            else:
                records.append([parent, node.name, node.kind, dict(node.attrs) or None,
                                sorted(node.refused_attrs) or None, _dataset_record(node.dataset)])
            stack.extend(reversed(list(node.children.values())))
        return [self.total_bytes, records]

    @classmethod
    def from_records(cls, data: object) -> "Inventory":
        """The inventory :meth:`to_records` made, rebuilt from JSON another process sent: ValueError when it
        is not such records (the sender is a child reading a stranger's file, trusted to be mdiff's code
        but not to be intact)."""
        try:
            if not isinstance(data, list) or len(data) != 2 or not isinstance(data[1], list):
                raise ValueError("not [total bytes, records]")
            total_bytes: object = data[0]
            records: list = data[1]
            nodes: list[ObjectInfo] = []
            dtypes: dict[str, np.dtype] = {}
            for record in records:
                if not isinstance(record, list) or len(record) not in (3, 4, 6):
                    raise ValueError("a malformed object record")
                parent, name, kind, attrs, refused, flat = record if len(record) == 6 else (*record, *_ABSENT[len(record)])
                if not (isinstance(parent, int) and -1 <= parent < len(nodes) and (parent >= 0) == bool(nodes)
                        and isinstance(name, str) and kind in _KINDS):
                    raise ValueError("a malformed object record")
                up = nodes[parent] if parent >= 0 else None
                node = ObjectInfo(name, up, kind)
                if up is not None:
                    up.adopt(node)
                if attrs:
                    if not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
                        raise ValueError("a malformed attribute")
                    node.attrs = attrs  # a dict of its own, decoded from JSON
                if refused:
                    node.refused_attrs = {str(x) for x in refused}
                node.dataset = _dataset_from_record(flat, dtypes)
                nodes.append(node)
            if not nodes or not isinstance(total_bytes, int):
                raise ValueError("no root")
            return cls(nodes[0], total_bytes)
        except (TypeError, ValueError, AttributeError, KeyError, AssertionError) as exc:
            raise ValueError(f"not an inventory: {exc}") from None


_KINDS = frozenset({"group", "dataset", "refused", "deferred"})
_ABSENT = {3: (None, None, None), 4: (None, None)}  # what a record of 3 or 4 fields leaves out (to_records)
# what a dataset of an accepted file can be stored as (§6.1, with room for what the walk reports on);
# never an object dtype, which numpy would fill with Python objects
DTYPE_TEXT = re.compile(r"[<>|=][biufcSUV][0-9]{1,5}")


def _dataset_record(info: DatasetInfo | None) -> list | None:
    if info is None:
        return None
    plan = info.plan
    if plan is not None and plan.contiguous_offset is not None and info.inline is None:  # most: an offset alone
        return [list(info.shape), info.dtype.str, info.nbytes, info.stored, plan.contiguous_offset]
    flat_plan = None if plan is None else [
        plan.contiguous_offset, plan.chunk_shape, [[c.offset, c.byte_offset, c.size] for c in plan.chunks],
        [[code, list(values)] for code, values in plan.filters]]
    inline = None if info.inline is None else base64.b64encode(info.inline).decode("ascii")
    return [list(info.shape), info.dtype.str, info.nbytes, info.stored, flat_plan, inline]


def _ints(values: list[Any]) -> tuple[int, ...]:  # values of a JSON record an isolated child sent
    if not all(type(v) is int for v in values):
        raise ValueError("not integers")
    return tuple(values)


def _dataset_from_record(flat: list[Any] | None, dtypes: dict[str, np.dtype]) -> DatasetInfo | None:
    if flat is None:
        return None
    if not isinstance(flat, list) or len(flat) not in (5, 6):
        raise ValueError("a malformed dataset record")
    contiguous = len(flat) == 5  # [shape, dtype, nbytes, stored, offset]: a contiguous dataset (_dataset_record)
    shape, dtype, nbytes, stored, flat_plan, inline = (*flat, None) if contiguous else flat
    if not (isinstance(dtype, str) and DTYPE_TEXT.fullmatch(dtype) and type(nbytes) is int and type(stored) is int):
        raise ValueError("a malformed dataset record")
    plan = None
    if contiguous:
        plan = StoragePlan(_ints([flat_plan])[0])
    elif flat_plan is not None:
        offset, chunk_shape, chunks, filters = flat_plan
        plan = StoragePlan(None if offset is None else _ints([offset])[0],
                           None if chunk_shape is None else _ints(chunk_shape),
                           tuple(Chunk(_ints(c[0]), *_ints(c[1:])) for c in chunks),
                           tuple((_ints([code])[0], _ints(values)) for code, values in filters))
    if dtype not in dtypes:
        dtypes[dtype] = np.dtype(dtype)
    data = None if inline is None else base64.b64decode(inline, validate=True)
    return DatasetInfo(_ints(shape), dtypes[dtype], nbytes, plan, stored, data)


class _Stop(enum.Enum):
    """What the walk's steps return once a global limit was reached: the walk ends. A member of its own
    type, not a bare object(), so that ``is _STOP`` narrows a step's result for the type checker."""

    STOP = enum.auto()


_STOP: Final = _Stop.STOP
Links = list[tuple[bytes, int, int]]  # (link name, link type, address) of each member of a group, in name order
Pipeline = list[tuple[int, int, tuple[int, ...], bytes]]  # each filter's (id, flags, client data, name): libhdf5's get_filter

# libhdf5's metadata cache: small while objects are walked (each is visited once; its default grows to
# 32 MB of object headers, ~110 MB of decoded messages for 10^5 parameters, held while the file is open),
# and as large as libhdf5 takes (H5C__MAX_MAX_CACHE_SIZE, 128 MB) while the links of a big group are listed:
# the group's name index and heap must fit, else they thrash — at 2 MB, 1.3 s for 10^5 links (0.1 s at 8 MB);
# at 16 MB, 9.8 s of CPU for 10^6 links (0.78 s at 64 MB), and 0.51 s for 4·10^4 names of 1 KB (0.13 s at
# 128 MB). The cache holds only what the listing reads (the group's index and heap, which are in the file),
# and is set back to WALK_CACHE_BYTES after.
WALK_CACHE_BYTES = 2 << 20
LISTING_CACHE_BYTES = 128 << 20
_MANY_LINKS = 4096
_LINK_NAME = operator.itemgetter(0)


def set_metadata_cache(f: h5py.File, nbytes: int) -> None:
    """Fix the file's metadata cache at ``nbytes`` (no adaptive growth); a libhdf5 that refuses keeps its own."""
    try:
        config = f.id.get_mdc_config()
        config.set_initial_size = True
        config.initial_size = config.max_size = nbytes
        config.min_size = min(config.min_size, nbytes)
        config.incr_mode = config.flash_incr_mode = 0  # H5C_incr__off, H5C_flash_incr__off
        f.id.set_mdc_config(config)
    except Exception:
        pass


@contextlib.contextmanager
def metadata_cache(f: h5py.File, nbytes: int) -> Iterator[None]:
    set_metadata_cache(f, nbytes)
    try:
        yield
    finally:
        set_metadata_cache(f, WALK_CACHE_BYTES)


def _header_reader(f: h5py.File, file_size: int, read_at: ReadAt | None = None) -> HeaderReader | None:
    """The reader of the file's object headers: through ``read_at`` (a file libhdf5 reads as a Python
    file object has no descriptor), else through the file's descriptor."""
    try:
        offset_size, length_size = f.id.get_create_plist().get_sizes()
        if read_at is None:
            fd = f.id.get_vfd_handle()
            read_at = functools.partial(positional_io.pread, fd)
        return HeaderReader(read_at, file_size, f.id.get_create_plist().get_userblock(), offset_size, length_size)
    except Exception:
        return None


def _plain_name(raw: bytes) -> bool:
    """A link name that means the same as one component of a path (libhdf5 splits a path at "/" and takes "." for
    the group itself; a name is read up to a NUL)."""
    # bytes.find, not ``in``: ``b"/" in raw`` first tries b"/" as an integer, and makes and drops a TypeError
    return bool(raw) and raw not in (b".", b"..") and raw.find(b"/") < 0 and raw.find(b"\0") < 0


class _Unopened:
    """A group the walk has not opened in libhdf5 (:meth:`_Walk._unopened_group`): ``path`` from the open group
    ``base``; ``first``, its first member, opened through it (name, address, the member, its kind) until visited."""

    __slots__ = ("base", "path", "gid", "first")

    def __init__(self, base: h5py.h5g.GroupID, path: bytes, first: tuple[bytes, int, h5py.h5o.ObjectID, int] | None):
        self.base, self.path, self.first = base, path, first
        self.gid: h5py.h5g.GroupID | None = None

    def opened(self) -> h5py.h5g.GroupID:
        """The group, opened by H5Gopen (once): it was found by H5Dopen or H5Gopen of its member (see
        :meth:`_Walk._unopened_group`), so this finds and opens it too."""
        if self.gid is None:
            self.gid = h5py.h5g.open(self.base, self.path)
        return self.gid


def _opened(gid: Any) -> Any:
    """A group's handle as libhdf5 takes it: an unopened group opened."""
    return gid.opened() if type(gid) is _Unopened else gid


class _Walk:
    def __init__(self, f: h5py.File, file_size: int, limits: Limits, deferred: frozenset[str] = frozenset(),
                 read_at: ReadAt | None = None):
        self.file = f
        self.file_size = file_size
        self.limits = limits
        self.deferred = deferred  # groups (by path) whose members are walked when first used (LazyWalk)
        self.deferred_gids: dict[int, object] = {}  # id(node) -> that group, held open for expand()
        self.findings: list[Finding] = []
        self.inventory = Inventory()
        self.seen_addresses: set[int] = set()
        self.headers = _header_reader(f, file_size, read_at)
        if self.headers is not None:
            # §8.3: "within the file" is before the end-of-file address the superblock records, where that is
            # less than the file's size — every HDF5 library refuses to read past it
            try:
                self.file_size = min(file_size, self.headers.base + self.headers.end_of_file_address())
            except Exception:  # the superblock opened in libhdf5: what it holds is checked there
                pass
            self.headers.size = self.file_size
        self.count = 1  # the root group: §8.3 counts every object of the file and every attribute, in one total
        self.stopped = False  # a global limit was reached: nothing more is walked
        # What libhdf5 made of objects checked already, by their profile (HeaderReader.profile): another object
        # of the same profile is read alike, so its properties are taken from here instead of asked of libhdf5
        # again (every object is still opened by libhdf5, and where its data lies asked of it: a file of 10^5
        # parameters is mostly objects alike). Only what passed every check is kept.
        self.dataset_kinds: dict[tuple, tuple[int, np.dtype, tuple[int, ...], Pipeline]] = {}
        self.group_kinds: set[tuple] = set()  # groups whose creation properties libhdf5 read
        self.attribute_storages: set[tuple] = set()  # attribute storage libhdf5 counted (HeaderReader.attribute_storage)
        self.attribute_kinds: dict[tuple, tuple[int, h5py.h5t.TypeID]] = {}  # an attribute's size and type
        # profiles of attributes whose value libhdf5 read as the bytes their message holds (the walk's own reading
        # of them agreed): another attribute of one of them, its name stored whole, is read from its message
        self.attributes_in_header: set[tuple] = set()
        # profiles of groups whose links libhdf5 listed as the walk reads them from their header (compact storage):
        # another group of one of them is listed from its header (HeaderReader.compact_links)
        self.links_in_header: set[tuple] = set()
        # profiles of contiguous datasets where libhdf5 said their data lies where their layout message says (its
        # address, the file's base added, and its size): another dataset of one of them is taken at its message's word
        # (HeaderReader.contiguous_storage; its header, checksums included, is the one libhdf5 opened it by)
        self.storage_in_header: set[tuple] = set()

    def finding(self, code: str, where: ObjectInfo, message: str, name: str | None = None) -> None:
        self.findings.append(Finding(code, report_path(where, name), message))

    def run(self) -> None:
        """Depth first, members in name order; each group's links are listed once, and only the groups on
        the current path are held open (at most the depth limit): a group of many members costs a list of
        names, not an open HDF5 object each."""
        root = self.inventory.root
        try:
            group = h5py.h5g.open(self.file.id, b"/")
        except Exception as exc:  # a corrupt root object header: nothing of the file can be read (§12.1)
            self.finding("MD513", root, f"the root group cannot be opened: {exc}")
            root.kind = "refused"
            return
        try:
            root_address = None if self.headers is None else self.headers.root_address()
        except Exception:
            root_address = None
        if root_address is not None and self.headers is not None:
            try:  # §8.1: the root's object header is read as every other object's is at its link
                self.headers.link_count(root_address)
            except Exception as exc:
                self.finding("MD513", root, f"the root group's object header cannot be read: {exc}")
                root.kind = "refused"
                return
        if root_address is not None:  # §8.1: a link that leads back to the root reaches it a second time
            self.seen_addresses.add(root_address)
        links = self._open_group(root, self.file.id, None, group, root_address)
        if links is _STOP:
            self.stopped = True
            return
        if links is not None:
            self._descend([(root, self.file.id, iter(links))])

    def _descend(self, stack: list) -> None:
        while stack:
            node, gid, links = stack[-1]
            entry = next(links, None)
            if entry is None:
                stack.pop()
                continue
            if id(node) in self.deferred_gids:  # all of its members at once: a deferred group may hold 10^6
                stack.pop()
                if self._defer(node, entry) is _STOP or self._defer_all(node, links) is _STOP:
                    self.stopped = True
                    return
                continue
            child = self._visit(node, gid, *entry)
            if child is _STOP:
                self.stopped = True
                return
            if child is not None:
                info, oid, address = child
                links = self._open_group(info, oid, None, address=address)
                if links is _STOP:
                    self.stopped = True
                    return
                if links is None:
                    continue
                if self.deferred and info.path in self.deferred:
                    self.deferred_gids[id(info)] = _opened(oid)
                stack.append((info, oid, iter(links)))
        self._check_total()

    def _defer_all(self, parent: ObjectInfo, links: Iterator[tuple[bytes, int, int]]) -> _Stop | None:
        """Every remaining member of a deferred group (:meth:`_defer`), in one loop."""
        defer = self._defer
        for entry in links:
            if defer(parent, entry) is _STOP:
                return _STOP
        return None

    def _link(self, parent: ObjectInfo, raw: bytes, link_type: int) -> tuple[str, bool] | None:
        """§8.1 on one link of ``parent``: its name and whether it is a hard link (else MD500 is found); None
        for a name that is not UTF-8 (MD302)."""
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.finding("MD302", parent, f"link name {raw[:200]!r} is not UTF-8")
            return None
        if link_type != h5py.h5l.TYPE_HARD:
            kind = {h5py.h5l.TYPE_SOFT: "soft", h5py.h5l.TYPE_EXTERNAL: "external"}.get(link_type, "user-defined")
            self.finding("MD500", parent, f"{kind} link; only hard links are allowed", name)
            return name, False
        return name, True

    def _defer(self, parent: ObjectInfo, entry: tuple[bytes, int, int]) -> _Stop | None:
        """A member of a deferred group: its link checked (§8.1) and counted; the object left for expand()."""
        raw, link_type, _ = entry
        link = self._link(parent, raw, link_type)
        if link is None or not link[1]:
            return None
        name = link[0]
        self.count += 1  # _count_object's, inline
        if self.count > self.limits.max_objects:
            self.finding("MD511", parent, f"more than {self.limits.max_objects} objects and attributes", name)
            return _STOP
        parent.children[name] = ObjectInfo(name, parent, "deferred")  # type: ignore[index]  # a group's children: a dict
        return None

    def _count_object(self, parent: ObjectInfo, name: str) -> bool:
        """Count an object the walk accepts (§8.3: the root, each group and dataset reached through a link that
        passed §8.1 — once, however many links lead to it — and every attribute); False past the limit (MD511)."""
        self.count += 1
        if self.count > self.limits.max_objects:
            self.finding("MD511", parent, f"more than {self.limits.max_objects} objects and attributes", name)
            return False
        return True

    def expand(self, node: ObjectInfo) -> list[Finding]:
        """Walk a deferred member and everything below it, with every check and limit of the full walk
        (the object count, the addresses seen and the declared bytes carry on from what was walked
        before); the findings it made. The member's node is replaced by the walked one."""
        assert node.kind == "deferred" and node.parent is not None
        first = len(self.findings)
        if self.stopped:
            self.finding("MD511", node, "the file's limits were reached before this member was read")
            return self.findings[first:]
        parent, gid = node.parent, self.deferred_gids[id(node.parent)]
        parent.disown(node.name)  # _visit files the walked node in its place (or nothing, if refused)
        self.count -= 1  # counted when deferred; _visit counts it again
        child = self._visit(parent, gid, node.name.encode("utf-8"), h5py.h5l.TYPE_HARD)
        if child is _STOP:
            self.stopped = True
        elif child is not None:
            info, oid, address = child
            links = self._open_group(info, oid, None, address=address)
            if links is _STOP:
                self.stopped = True
            elif links is not None:
                self._descend([(info, oid, iter(links))])
        else:
            self._check_total()
        return self.findings[first:]

    def _open_group(self, info: ObjectInfo, gid: h5py.h5g.GroupID, attributes: int | None,
                    group: h5py.h5g.GroupID | None = None, address: int | None = None) -> Links | _Stop | None:
        """A group's links, read before its attributes: a group whose links cannot be read is an object
        that cannot be read (§8.1, MD513), refused whole — its attributes and members unused (§12.1)
        — and None; _STOP once its attributes are over a limit of the whole file (MD511)."""
        links = self._links(info, gid, gid if group is None else group, address)
        if links is None:
            info.kind = "refused"
            return None
        if not self._read_attributes(info, gid, attributes, address):
            return _STOP
        return links

    def _links(self, node: ObjectInfo, gid: h5py.h5g.GroupID, group: h5py.h5g.GroupID,
               address: int | None = None) -> Links | None:
        """(link name, link type, address) of each member, in name order; one libhdf5 iteration per group. None
        when they cannot be read (reported: MD513) — the group's creation properties (its link info and
        group info messages, which every HDF5 library decodes to list a group) included, and, for links stored
        densely, the header of their name index (§8.1: checked before libhdf5 reads the index, and the number of
        links it records must be the number listed — libhdf5 sizes its name-order table by it)."""
        links: Links = []
        cap = self.limits.max_objects
        recorded = None
        if address is not None and self.headers is not None:
            try:
                recorded = self.headers.checked_link_count(address)
            except Exception as exc:
                self.finding("MD513", node, f"the group's links cannot be read: {exc}")
                return None

        listed = countable = 0
        hard = h5py.h5l.TYPE_HARD

        def collect(raw: bytes, info: h5py.h5l.LinkInfo) -> int | None:
            nonlocal listed, countable
            listed += 1
            # a link refused at its name or kind (MD302, MD500) counts nothing (§12.1 rule 2) and is always kept
            # (one finding each); of the others, one past the object limit is enough for MD511
            link_type = info.type
            counts = link_type == hard and (raw.isascii() or _is_utf8(raw))
            if not counts or countable <= cap:
                links.append((raw, link_type, info.u))  # u: a hard link's object header address
                countable += counts
                return None
            # kept no further; a name index's record is still checked against every link (§12.1 rule 3: a group
            # whose links cannot be read is refused before anything below it counts)
            return None if recorded is not None else 1

        try:
            profile = None
            if address is not None and self.headers is not None:
                profile = self.headers.profile(address, dataset=False)
            if profile is None or profile not in self.group_kinds:
                _opened(group).get_create_plist()
                if profile is not None:
                    self.group_kinds.add(profile)
            in_header = self.headers.compact_links(address) \
                if recorded is None and profile is not None and self.headers is not None and address is not None else None
            if in_header is not None and profile in self.links_in_header:
                # stored alike a group whose links libhdf5 listed as the walk reads them from its header (below):
                # these are what libhdf5 would list (its header, checksums included, is the one libhdf5 opened)
                for raw, link_type, u in in_header:
                    listed += 1
                    counts = link_type == hard and (raw.isascii() or _is_utf8(raw))
                    if counts and countable > cap:
                        break  # as collect: one past the object limit is enough (MD511)
                    links.append((raw, link_type, u))
                    countable += counts
            # in the index's own order, sorted below: ITER_INC has libhdf5 build and sort a table of every
            # link first (0.8 s for 10^5 members, against 0.14 s)
            elif self._member_count(gid, recorded, address) > _MANY_LINKS:
                with metadata_cache(self.file, LISTING_CACHE_BYTES):  # the group's heap and index, held
                    _opened(gid).links.iterate(collect, info=True, order=h5py.h5.ITER_NATIVE)
            else:
                _opened(gid).links.iterate(collect, info=True, order=h5py.h5.ITER_NATIVE)
                if in_header is not None and profile is not None and profile not in self.links_in_header and listed == len(links) \
                        and sorted(in_header) == sorted(links):
                    self.links_in_header.add(profile)  # libhdf5 lists such a group's links as its header holds them
        except Exception as exc:  # a corrupt group B-tree or heap
            self.finding("MD513", node, f"the group's links cannot be read: {exc}")
            return None
        if recorded is not None and recorded != listed:
            self.finding("MD513", node, f"the group's links cannot be read: its name index records {recorded} links, "
                                        f"it holds {listed}")
            return None
        # by name alone (a group's link names are distinct): 2.4x faster than comparing the tuples (10^6: 0.76 s)
        links.sort(key=_LINK_NAME)
        return links

    def _member_count(self, gid: h5py.h5g.GroupID, recorded: int | None, address: int | None) -> int:
        """About how many links a group holds (to size libhdf5's cache while they are listed): its dense storage's
        count, else its link messages, else (a symbol table) libhdf5's count."""
        if recorded is not None:
            return recorded
        compact = self.headers.link_messages(address) if address is not None and self.headers is not None else None
        return compact if compact else _opened(gid).get_num_objs()

    def _visit(self, parent: ObjectInfo, gid: h5py.h5g.GroupID, raw: bytes, link_type: int,
               address: int | None = None) -> tuple[ObjectInfo, h5py.h5g.GroupID, int] | _Stop | None:
        if link_type == _HARD_LINK and raw.isascii():  # _link's verdict on most links, without asking it
            name = raw.decode("ascii")
        else:
            link = self._link(parent, raw, link_type)
            if link is None:
                return None
            name, hard = link
            if not hard:
                parent.adopt(ObjectInfo(name, parent, "refused"))
                return None
        if parent.depth >= self.limits.max_depth:
            self.finding("MD511", parent, f"objects nested more than {self.limits.max_depth} links below the root", name)
            return _STOP
        try:
            opened = self._open_as_its_header_says(gid, raw, address)
            if opened is not None:
                oid, kind = opened
            else:
                oid = h5py.h5o.open(_opened(gid), raw)
                # h5py gives an object the class of its kind (asking libhdf5 again costs a call per object)
                kind = _GROUP if isinstance(oid, h5py.h5g.GroupID) else _DATASET \
                    if isinstance(oid, h5py.h5d.DatasetID) else h5py.h5i.get_type(oid)
            if address is None:
                address = _opened(gid).links.get_info(raw).u
        except Exception as exc:
            self.finding("MD513", parent, f"the object cannot be opened: {exc}", name)
            parent.adopt(ObjectInfo(name, parent, "refused"))
            return None
        seen = self.seen_addresses
        count = 1
        if address not in seen:
            try:
                count = self._link_count(oid, address)
            except Exception as exc:
                self.finding("MD513", parent, f"the object header cannot be read: {exc}", name)
                parent.adopt(ObjectInfo(name, parent, "refused"))
                return None
        if address in seen or count != 1:  # §8.1: refused at every link (its count is 2)
            self.finding("MD514", parent, "the object has more than one link to it", name)
            parent.adopt(ObjectInfo(name, parent, "refused"))
            return None
        seen.add(address)
        if kind == _GROUP or kind == _DATASET:
            self.count += 1  # _count_object's, inline
            if self.count > self.limits.max_objects:
                self.finding("MD511", parent, f"more than {self.limits.max_objects} objects and attributes", name)
                return _STOP
            if kind == _GROUP:
                info = parent.children[name] = ObjectInfo(name, parent, "group")  # type: ignore[index]  # parent.adopt's
                return (info, oid, address)
            info = parent.children[name] = ObjectInfo(name, parent, "dataset")  # type: ignore[index]
            if self._read_attributes(info, oid, None, address):
                info.dataset = self._check_dataset(info, oid, address)
                if info.dataset is None:  # refused (reported): present, but no other rule looks at it
                    info.kind = "refused"
            return None
        parent.adopt(ObjectInfo(name, parent, "refused"))
        self.finding("MD501", parent, "a committed datatype; only groups and datasets are allowed", name)
        return None

    def _open_as_its_header_says(self, gid: h5py.h5g.GroupID | _Unopened, raw: bytes, address: int | None
                                 ) -> tuple[h5py.h5o.ObjectID | _Unopened, int] | None:
        """The member ``raw`` opened as a group or a dataset where its header at ``address`` says which (libhdf5's
        own test: a symbol table or link info message makes a group; else a datatype and a dataspace message a
        dataset), by H5Gopen or H5Dopen — which find it and ask libhdf5 its kind as H5Oopen does, and fail unless
        it is that kind — with the kind; None where the header does not say, or that open fails (the walk then
        opens it by H5Oopen, as any other: h5py's H5Oopen costs ~5 µs more an object, in Python). A group whose
        members libhdf5 would list as its header holds them may be left unopened (:meth:`_unopened_group`), and
        a member of an unopened group is opened by its path from the nearest group that is open."""
        if address is None or self.headers is None:
            return None
        header = self.headers.header(address)
        if header.fault is not None:
            return None
        first = header.first
        if type(gid) is _Unopened:
            if gid.first is not None:
                opened, gid.first = gid.first, None
                if opened[0] == raw and opened[1] == address:
                    return opened[2], opened[3]
            if gid.gid is None and _plain_name(raw):
                base, path = gid.base, gid.path + b"/" + raw
            else:
                base, path = gid.opened(), raw
        else:
            base, path = gid, raw
        try:
            if _SYMBOL_TABLE_MESSAGE in first or _LINK_INFO_MESSAGE in first:
                unopened = self._unopened_group(base, path, address)
                return (unopened if unopened is not None else h5py.h5g.open(base, path)), _GROUP
            if _DATATYPE_MESSAGE in first and _DATASPACE_MESSAGE in first:
                return h5py.h5d.open(base, path), _DATASET
        except Exception:  # H5Oopen says why (MD513)
            return None
        return None

    def _unopened_group(self, base: h5py.h5g.GroupID, path: bytes, address: int) -> _Unopened | None:
        """The group at ``path`` from ``base`` (its header at ``address``), left unopened, where its first member is
        opened through it instead — one libhdf5 open, not two, for each of 10^5 parameters. That is where the group's
        header is of a profile libhdf5 read the creation properties and listed the links of as the walk reads them
        from the header (HeaderReader.compact_links), its first member by name is a group or dataset by its own
        header, and every name on the path is a plain one (no "/", not "." or ".."). libhdf5 opens the member
        by H5Gopen or H5Dopen of ``path/member``: it finds the group by name in ``base``, as H5Gopen would, reads
        its header (checksums included), finds its link info message — which makes it a group, H5Gopen's own
        test — and the member's link message in it, then opens and checks the member as when opened from the
        group: so an H5Gopen of the group would have succeeded, and the walk, which reads what it needs of the
        group from that header (its links, and attributes stored alike), misses nothing libhdf5 would have said.
        The opened member is kept for its visit (used only if its name and address are those it is visited by).
        Where the group is needed open (an attribute read by libhdf5, a member opened by H5Oopen) it is opened
        then, by H5Gopen (:meth:`_Unopened.opened`). None where any of that does not hold, or the member's open
        fails: the group is then opened as any other."""
        headers = self.headers
        if headers is None or not _plain_name(path.rpartition(b"/")[2]):
            return None
        profile = headers.profile(address, dataset=False)
        if profile is None or profile not in self.group_kinds or profile not in self.links_in_header:
            return None
        links = headers.compact_links(address)
        if not links:
            return None
        raw, _, member = min(links, key=_LINK_NAME)
        if not _plain_name(raw):
            return None
        header = headers.header(member)
        if header.fault is not None:
            return None
        first = header.first
        try:
            if _SYMBOL_TABLE_MESSAGE in first or _LINK_INFO_MESSAGE in first:
                oid, kind = h5py.h5g.open(base, path + b"/" + raw), _GROUP
            elif _DATATYPE_MESSAGE in first and _DATASPACE_MESSAGE in first:
                oid, kind = h5py.h5d.open(base, path + b"/" + raw), _DATASET
            else:
                return None
        except Exception:
            return None
        return _Unopened(base, path, (raw, member, oid, kind))

    def _link_count(self, oid: h5py.h5o.ObjectID, address: int) -> int:
        """The object header's link count (§8.1), read from its bytes (object_header.py says why)."""
        if self.headers is None:  # a file driver without a descriptor: libhdf5's count
            return h5py.h5o.get_info(_opened(oid)).rc
        return self.headers.link_count(address)

    def _read_attributes(self, info: ObjectInfo, oid: h5py.h5o.ObjectID, n: int | None = None, address: int | None = None) -> bool:
        """Record well-formed attributes (``n`` of them: the object header's count, when the caller has it);
        False once the attribute count is over the object limit. The header at ``address`` is read first
        (object_header.py): a dense storage libhdf5 would crash on cannot be read (§8.1)."""
        if n is None and address is not None and self.headers is not None and self.count <= self.limits.max_objects:
            header = self.headers.header(address)
            if (header.fault is None and _ATTRIBUTE_INFO_MESSAGE not in header.first and _ATTRIBUTE_MESSAGE not in header.first
                    and (header.version, ()) in self.attribute_storages):
                # no attribute, stored as objects libhdf5 counted none on were (most datasets): what the rest would find
                return True
        try:
            stored = 0
            if address is not None and self.headers is not None:
                # the count the object header records (§12.1 rule 3) is held to the limit of 64 (§8.3) before
                # the HDF5 library is asked: a library that cannot read the storage cannot count it either
                stored = self.headers.attribute_count(address)
                if stored > MAX_ATTRIBUTES_PER_OBJECT:
                    self.finding("MD511", info, f"{stored} attributes on one object (at most {MAX_ATTRIBUTES_PER_OBJECT})")
                    return False
            if n is None:
                # libhdf5's own count can be lower than the header's (a damaged header flag makes it 0 while its
                # attributes can still be opened one by one): each attribute the header records is read. It is
                # asked all the same: an object whose attributes it cannot count cannot be read (MD513) — once
                # for each way of storing them (HeaderReader.attribute_storage), which it counts alike.
                storage = self.headers.attribute_storage(address) if address is not None and self.headers is not None else None
                if storage is not None and storage in self.attribute_storages:
                    n = stored
                else:
                    n = max(stored, h5py.h5a.get_num_attrs(_opened(oid)))
                    if storage is not None:
                        self.attribute_storages.add(storage)
        except Exception as exc:
            self.finding("MD513", info, f"attributes cannot be read: {exc}")
            info.kind = "refused"  # an object that cannot be read (§12.1): nothing else looks at it
            return True
        self.count += n
        if n > MAX_ATTRIBUTES_PER_OBJECT:  # opening the i-th of many attributes costs libhdf5 O(n log n)
            self.finding("MD511", info, f"{n} attributes on one object (at most {MAX_ATTRIBUTES_PER_OBJECT})")
            return False
        if self.count > self.limits.max_objects:
            self.finding("MD511", info, f"more than {self.limits.max_objects} objects and attributes")
            return False
        if n == 0:
            return True
        attrs: dict[str, str] = {}
        refused: set[str] = set()
        kinds = self.headers.attribute_profiles(address) if address is not None and self.headers is not None else None
        names = self._listed_attributes(kinds, n)
        for i in range(n):
            name = None
            try:
                # libhdf5's list of the attributes, by name, where it is known without asking (_listed_attributes)
                raw_name = names[i] if names is not None else h5py.h5a.open(_opened(oid), index=i).get_name()  # closed at once
                name = raw_name.decode("utf-8", "replace")
                if name.encode("utf-8") != raw_name:  # §8.2: an attribute's name is UTF-8, as a link's is
                    self.finding("MD506", info, f"an attribute name {raw_name[:200]!r} is not UTF-8")
                    refused.add(name)
                    continue
                stored_as = kinds.get(raw_name) if kinds is not None else None
                profile = stored_as[0] if stored_as is not None else None
                known = self.attribute_kinds.get(profile) if profile is not None else None
                in_header = stored_as[2] if names is not None and stored_as is not None else None
                if known is not None and in_header is not None and profile in self.attributes_in_header:
                    # stored alike an attribute libhdf5 read to the same bytes as its message holds (below): its value
                    # is those bytes here too, as libhdf5 would read them (its header, checksums included, is the
                    # one libhdf5 opened the object by)
                    size = known[0]
                    if size > self.limits.max_attribute_bytes:
                        self.finding("MD510", info, f"attribute {name[:200]!r} has {size} bytes (limit {self.limits.max_attribute_bytes})")
                        refused.add(name)
                        continue
                    text = _utf8_text(in_header[:size])
                else:
                    read = self._read_attribute(info, oid, raw_name, name, profile, known, in_header, refused)
                    if read is False:
                        continue
                    text = read
            except Exception as exc:
                self.finding("MD513", info, f"attribute {i} cannot be read: {exc}")
                if name is not None:
                    refused.add(name)
                continue
            if text is None:
                self.finding("MD506", info, f"attribute {name[:200]!r} is not valid UTF-8")
                refused.add(name)
                continue
            attrs[name] = text
        if attrs:
            info.attrs = attrs
        if refused:
            info.refused_attrs = refused
        return True

    def _read_attribute(self, info: ObjectInfo, oid: h5py.h5o.ObjectID, raw_name: bytes, name: str, profile: tuple | None,
                        known: tuple[int, h5py.h5t.TypeID] | None, in_header: bytes | None, refused: set[str]) -> str | None | Literal[False]:
        """An attribute's text, read by libhdf5 (None when it is not UTF-8); False when it is refused (reported).
        What libhdf5 cannot read raises."""
        # §8.1: an attribute is read by its name — through its name index, by the name's hash, for dense
        # storage (libhdf5 hands back an attribute still open under that name without that lookup)
        aid = h5py.h5a.open(_opened(oid), name=raw_name)
        size: int | None
        if known is not None:  # an attribute stored alike has this size and type (HeaderReader.profile)
            size, tid = known
        else:
            tid = aid.get_type()
            size = string_attribute_size(aid, tid)
            if size is not None and profile is not None:
                self.attribute_kinds[profile] = (size, tid)
        if size is None:
            self.finding("MD506", info, f"attribute {name[:200]!r} is not a scalar fixed-length UTF-8 string")
            refused.add(name)
            return False
        if size > self.limits.max_attribute_bytes:
            self.finding("MD510", info, f"attribute {name[:200]!r} has {size} bytes (limit {self.limits.max_attribute_bytes})")
            refused.add(name)
            return False
        text = read_string(aid, size, tid)
        if (text is not None and profile is not None and in_header is not None and profile not in self.attributes_in_header
                and len(in_header) >= size and _utf8_text(in_header[:size]) == text):
            self.attributes_in_header.add(profile)  # libhdf5 reads an attribute of this profile as its message's bytes
        return text

    def _listed_attributes(self, kinds: dict[bytes, tuple[tuple, int, bytes | None]] | None, n: int) -> list[bytes] | None:
        """The names libhdf5 lists an object's ``n`` attributes under (in its order: by name), known without asking
        it where every one is stored in the header in a message this walk has seen libhdf5 read alike — the same
        datatype and dataspace (HeaderReader.attribute_profiles) — that holds its data: libhdf5 then decodes each
        as it decoded those. None otherwise: libhdf5 is asked."""
        if kinds is None or len(kinds) != n:
            return None
        for profile, data_bytes, _ in kinds.values():
            known = self.attribute_kinds.get(profile)
            if known is None or data_bytes < known[0]:  # a scalar string: its size in bytes of data
                return None
        return sorted(kinds)

    def _check_dataset(self, info: ObjectInfo, did: h5py.h5d.DatasetID, address: int | None = None) -> DatasetInfo | None:
        profile = self.headers.profile(address, dataset=True) if address is not None and self.headers is not None else None
        known = self.dataset_kinds.get(profile) if profile is not None else None
        try:
            dcpl = None
            if known is not None:  # a dataset stored alike passed every check of its properties: these pass too
                layout, dtype, shape, pipeline = known
                if layout == _CONTIGUOUS and profile in self.storage_in_header:  # _storage_plan's way, inline (most)
                    nbytes = math.prod(shape) * dtype.itemsize
                    in_header = self.headers.contiguous_storage(address)  # type: ignore[union-attr, arg-type]
                    if nbytes and in_header is not None and in_header[1] >= nbytes and sum(in_header) <= self.file_size:
                        self.inventory.total_bytes += nbytes
                        return DatasetInfo(shape, dtype, nbytes, StoragePlan(in_header[0]), in_header[1])
            else:
                checked = self._dataset_properties(info, did, address)
                if checked is None:  # refused (reported)
                    return None
                layout, dcpl, dtype, shape, pipeline = checked
                if profile is not None and layout in (h5py.h5d.CONTIGUOUS, h5py.h5d.COMPACT):
                    self.dataset_kinds[profile] = (layout, dtype, shape, pipeline)
            nbytes = math.prod(shape) * dtype.itemsize
            planned = self._storage_plan(info, did, layout, dcpl, shape, dtype, nbytes, pipeline, address, profile)
            if planned is False:  # refused (reported)
                return None
            plan, stored = planned
        except Exception as exc:
            self.finding("MD513", info, f"the dataset's header cannot be read: {exc}")
            return None
        self.inventory.total_bytes += nbytes
        return DatasetInfo(shape, dtype, nbytes, plan, stored)

    def _dataset_properties(self, info: ObjectInfo, did: h5py.h5d.DatasetID, address: int | None
                            ) -> tuple[int, h5py.h5p.PropDCID, np.dtype, tuple[int, ...], Pipeline] | None:
        """A dataset's layout class, creation properties, dtype, shape and filters, as libhdf5 reads them, once
        they pass §8.2 and §8.3; None when one does not (reported). What libhdf5 cannot read raises."""
        if address is not None and self.headers is not None:
            try:  # §8.2: a layout message of version 1 to 4 (HDF5 1.x libraries, h5wasm's among them, read no other)
                version = self.headers.layout_version(address)
                if version is not None and not 1 <= version <= 4:
                    raise ValueError(f"its data layout message has version {version}")
            except Exception as exc:
                self.finding("MD513", info, f"the dataset's header cannot be read: {exc}")
                return None
        dcpl = did.get_create_plist()
        layout = dcpl.get_layout()
        if layout == h5py.h5d.VIRTUAL:
            self.finding("MD503", info, "virtual dataset")
            return None
        if dcpl.get_external_count() > 0:
            self.finding("MD502", info, "external raw storage")
            return None
        pipeline: Pipeline = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
        filters = [f[0] for f in pipeline]
        bad = [f for f in filters if f not in ALLOWED_FILTERS]
        if bad:
            self.finding("MD504", info, f"filter id(s) {bad}; allowed: deflate (1), shuffle (2), fletcher32 (3)")
            return None
        for code, _, values, _ in pipeline:  # the parameters every HDF5 library decodes with (§8.2)
            if ((code == FILTER_DEFLATE and (len(values) != 1 or values[0] > 9))
                    or (code == FILTER_SHUFFLE and (len(values) != 1 or values[0] == 0))):
                name = ALLOWED_FILTERS[code]
                self.finding("MD504", info, f"the {name} filter has the parameters {list(values)}")
                return None
        tid = did.get_type()
        if tid.committed():  # its datatype is an object of its own (§8.1: groups and datasets only)
            self.finding("MD501", info, "the dataset's datatype is a committed datatype")
            return None
        dtype = self._storage_dtype(tid)
        if dtype is None:
            self.finding("MD505", info, "datatype is not a little-endian IEEE float or two's-complement integer")
            return None
        bits = self.headers.datatype_bits(address) if address is not None and self.headers is not None else None
        if bits is not None and bits != _standard_bits(dtype):  # §8.2: every field the standard type's
            self.finding("MD505", info, f"datatype's class bit field is {bits:#08x}, not the standard type's "
                                        f"{_standard_bits(dtype):#08x}")
            return None
        space = did.get_space()
        extent_type = space.get_simple_extent_type()
        if extent_type not in (h5py.h5s.SCALAR, h5py.h5s.SIMPLE):
            self.finding("MD505", info, "null dataspace")
            return None
        shape = tuple(int(d) for d in space.shape)
        if extent_type == h5py.h5s.SIMPLE and tuple(space.get_simple_extent_dims(True)) != shape:
            self.finding("MD509", info, "the dataset is extendible (its maximum shape is not its shape)")
            return None
        problem = shape_problem(shape, dtype.itemsize, self.limits)  # MD507/MD508; a 0 counts as 1
        if problem:
            self.finding(problem[0], info, problem[1])
            return None
        return layout, dcpl, dtype, shape, pipeline

    @staticmethod
    def _storage_dtype(tid: h5py.h5t.TypeID) -> np.dtype | None:
        """The one allowed dtype of the same class, size and sign, if ``tid`` equals it in every field."""
        candidate = _STORAGE_TYPES.get(_type_key(tid))
        if candidate is not None and tid.equal(candidate[1]):
            return candidate[0]
        return None

    def _storage_plan(self, info: ObjectInfo, did: h5py.h5d.DatasetID, layout: int, dcpl: h5py.h5p.PropDCID | None,
                      shape: tuple[int, ...], dtype: np.dtype, nbytes: int, pipeline: Pipeline,
                      address: int | None = None, profile: tuple | None = None) -> tuple[StoragePlan | None, int] | Literal[False]:
        """Every byte the dataset declares is stored inside the file; nothing is left to fill values.

        False when not (reported); otherwise (how chunk_reader.py reads the bytes, or None: compact or empty,
        libhdf5 reads them; the bytes stored in the file).
        """
        if nbytes == 0 or layout == h5py.h5d.COMPACT:
            return None, int(did.get_storage_size()) if nbytes else 0
        if layout == h5py.h5d.CONTIGUOUS:
            in_header = self.headers.contiguous_storage(address) \
                if profile is not None and address is not None and self.headers is not None else None
            if in_header is not None and profile in self.storage_in_header:
                offset, stored = in_header  # where libhdf5 would say (above): two calls fewer a dataset
            else:
                try:
                    offset = did.get_offset()
                except RuntimeError:  # h5py takes libhdf5's offset 0 for an error (an unknown one is None)
                    offset = 0
                stored = did.get_storage_size()
                if in_header is not None and profile is not None and in_header == (offset, stored):
                    self.storage_in_header.add(profile)  # libhdf5 says such a dataset's data lies where its header says
            if offset is None or stored < nbytes:
                self.finding("MD509", info, f"declares {nbytes} bytes; {stored if offset is not None else 0} are stored")
                return False
            if offset + stored > self.file_size:  # all the storage, as allocated, not only the declared bytes
                self.finding("MD509", info, f"its storage ({stored} bytes at {offset}) does not end within the file")
                return False
            return plan_for(shape, dtype.itemsize, contiguous_offset=offset), int(stored)
        assert dcpl is not None  # only a contiguous or compact dataset's properties are known without it
        filters = [f[0] for f in pipeline]
        chunk = dcpl.get_chunk()
        expected = math.prod(math.ceil(d / c) for d, c in zip(shape, chunk))
        chunk_bytes = math.prod(chunk) * dtype.itemsize
        ratio = MAX_DEFLATE_RATIO if FILTER_DEFLATE in filters else 1
        problems: list[str] = []
        chunks: list[Chunk] = []
        # a single chunk's recorded size, whole (libhdf5 reports its low 32 bits): the size §8.3 checks
        recorded = self.headers.single_chunk_size(address) if address is not None and self.headers is not None else None

        def visit(chunk_info: h5py.h5d.StoreInfo) -> None:
            size = int(chunk_info.size) if recorded is None else recorded
            chunks.append(Chunk(tuple(int(o) for o in chunk_info.chunk_offset), int(chunk_info.byte_offset), size))
            if chunk_info.filter_mask:
                skipped.append(chunk_info.chunk_offset)
            elif chunk_info.byte_offset + size > self.file_size:
                problems.append(f"chunk {chunk_info.chunk_offset} lies outside the file")
            elif FILTER_FLETCHER32 in filters and size < 4:  # libhdf5 underflows on these
                problems.append(f"chunk {chunk_info.chunk_offset} is too short to hold its fletcher32 checksum")
            elif size * ratio < chunk_bytes:
                problems.append(f"chunk {chunk_info.chunk_offset} stores {size} bytes for {chunk_bytes}")

        stored_chunks = did.get_num_chunks()
        if stored_chunks != expected:
            self.finding("MD509", info, f"{stored_chunks} of {expected} chunks are stored")
            return False
        skipped: list = []
        did.chunk_iter(visit)
        if skipped:  # libhdf5 mis-reads such chunks (heap over-read, found by fuzzing)
            self.finding("MD504", info, f"chunk {skipped[0]} skips some of the dataset's filters")
            return False
        coverage = coverage_problem(shape, tuple(int(c) for c in chunk), chunks)
        if coverage:  # libhdf5 would read a missing chunk as fill values
            problems.append(coverage)
        if problems:
            self.finding("MD509", info, problems[0])
            return False
        steps = tuple((int(code), tuple(int(v) for v in values)) for code, _, values, _ in pipeline)
        plan = plan_for(shape, dtype.itemsize, chunk_shape=tuple(int(c) for c in chunk), chunks=chunks, filters=steps)
        return plan, sum(c.size for c in chunks)

    def _check_total(self) -> None:
        if self.inventory.total_bytes > self.limits.max_total_bytes:
            self.finding(
                "MD512", self.inventory.root,
                f"datasets declare {self.inventory.total_bytes} bytes (limit {self.limits.max_total_bytes})",
            )


def inspect_structure(f: h5py.File, file_size: int, limits: Limits,
                      read_at: ReadAt | None = None) -> tuple[Inventory, list[Finding]]:
    """Walk the open file ``f`` of ``file_size`` bytes: the objects that passed, and every finding. Its object
    headers are read through ``read_at(n, offset)``, else through the file's descriptor."""
    walk = _Walk(f, file_size, limits, read_at=read_at)
    walk.run()
    return walk.inventory, walk.findings


def walk_file(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS) -> tuple[Inventory, list[Finding]]:
    """Walk the HDF5 file at ``path`` under ``limits``: :func:`inspect_structure` of it, opened read-only.
    OSError when libhdf5 cannot open it (mdiff reports that as MD100). libhdf5 reads the superblock and the
    root group's header when it opens the file: run this in an isolated process for a stranger's file
    (SPEC.md §8.5)."""
    f = h5py.File(os.fspath(path), "r", locking=False)
    try:
        set_metadata_cache(f, WALK_CACHE_BYTES)
        return inspect_structure(f, os.path.getsize(path), limits)
    finally:
        f.close()


class LazyWalk:
    """The structure walk of a reader that uses only some parameters (SPEC §8): everything is walked at
    once except the members of ``deferred`` groups, whose links alone are checked and counted; each
    member is walked — with every check of §8.1–§8.3 — by :meth:`expand`, before anything of it is read."""

    def __init__(self, f: h5py.File, file_size: int, limits: Limits, deferred: frozenset[str],
                 read_at: ReadAt | None = None):
        self._walk = _Walk(f, file_size, limits, deferred, read_at)
        self._walk.run()
        self.inventory = self._walk.inventory
        self.findings = list(self._walk.findings)

    def expand(self, node: ObjectInfo) -> list[Finding]:
        return self._walk.expand(node)
