"""A *core* mdiff implementation (SPEC.md §12.2), written from SPEC.md and schemas/ alone.

It reads every file through h5py (libhdf5) only -- no HDF5 metadata is parsed by hand -- in a forked
child process with a memory and a time limit (§8.5: a crash, hang or runaway allocation is MD515), checks
every rule of §3-§7 and every rule of §8 that h5py exposes, verifies every value by its sha256, and
speaks the conformance contract (conformance/README.md):

    mdiff_core.py validate FILE [FILE ...] --json [--limit NAME=N ...]
    mdiff_core.py apply BASE DIFF -o OUT --json [--limit NAME=N ...]
    mdiff_core.py apply-many --json [--limit NAME=N ...] BASE DIFF OUT [BASE DIFF OUT ...]
    mdiff_core.py features

It does not import mdiff: it exists to show that the core expectations of the corpus are reachable by
an implementation that uses a standard HDF5 library, not to be fast. It implements the update types of
§7.3-§7.7 and embedded ones (§7.8-§7.9, core_functions.py: the `onnx` package parses a function, the
shape rules are applied there, onnxruntime runs it), applies to `.safetensors` bases, and claims
`configurable-limits`, `checkpoint-rule-codes`, `embedded-update-types` and `apply-many` (several files
a command, each still in a child of its own: the tests run the corpus in batches to save start-ups).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import resource
import signal
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

import core_functions

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
FORMAT_MINOR = 3
DEFAULT_LIMITS = {"max_rank": 32, "max_elements": 2**36, "max_dataset_bytes": 2**38,
                  "max_attribute_bytes": 2**20, "max_objects": 1_000_000, "max_depth": 32,
                  "max_total_bytes": 2**40}
MEMORY_LIMIT = 2 * 2**30
TIME_LIMIT = 60

DTYPES = {  # dtype -> (storage numpy dtype, bits numpy dtype)
    "bool": ("<u1", "<u1"), "int8": ("<i1", "<u1"), "int16": ("<i2", "<u2"), "int32": ("<i4", "<u4"),
    "int64": ("<i8", "<u8"), "uint8": ("<u1", "<u1"), "uint16": ("<u2", "<u2"), "uint32": ("<u4", "<u4"),
    "uint64": ("<u8", "<u8"), "float16": ("<u2", "<u2"), "bfloat16": ("<u2", "<u2"),
    "float32": ("<f4", "<u4"), "float64": ("<f8", "<u8")}
ST_TAGS = {"BOOL": "bool", "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64", "U8": "uint8",
           "U16": "uint16", "U32": "uint32", "U64": "uint64", "F16": "float16", "BF16": "bfloat16",
           "F32": "float32", "F64": "float64"}
ST_OTHER = {"F4", "F6_E2M3", "F6_E3M2", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"}
WIDTH = {k: int(v[1][2]) for k, v in DTYPES.items()}


class Refused(Exception):
    """A thing refused under §8 (rule 3 of §12.1): present but unusable."""


class Stop(Exception):
    """MD511 or MD512: the whole file has that one finding (§12.1 rule 2)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


# ---------------------------------------------------------------------------------------------- JSON (§4.1)

class JSONError(ValueError):
    pass


def parse_json(text):
    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise JSONError("duplicate member")
        return dict(items)

    def number(s):
        if len(s) > 4096:
            raise JSONError("number too long")
        if re.fullmatch(r"-?[0-9]+", s):
            return int(s)
        v = float(s)
        if math.isinf(v):
            raise JSONError("number out of range")
        return v

    def const(s):
        raise JSONError(f"{s} is not JSON")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_float=number, parse_int=number, parse_constant=const)
    except RecursionError:
        raise JSONError("too deeply nested") from None
    except ValueError as exc:
        raise JSONError(str(exc)) from None
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        for text_value in ([v] if isinstance(v, str) else list(v) if isinstance(v, dict) else []):
            try:
                text_value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate's escape: no UTF-8 text holds it (§4.1)
                raise JSONError("a string holds a lone surrogate") from None
        if isinstance(v, (dict, list)):
            for child in (v.values() if isinstance(v, dict) else v):
                if d + 1 > 512:
                    raise JSONError("a value inside more than 512 arrays and objects")
                stack.append((child, d + 1))
    return value


def _ecma(schema):
    """ECMA-262 `$` matches only at the end (§4.1): Python's `$` also matches before a final newline."""
    if isinstance(schema, dict):
        return {k: (v.replace("$", r"\Z") if k == "pattern" else _ecma(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_ecma(v) for v in schema]
    return schema


def schema(name):
    return _ecma(json.loads((SCHEMAS / name).read_text(encoding="utf-8")))


def schema_ok(sch, value):
    import jsonschema
    return jsonschema.Draft202012Validator(sch).is_valid(value)


# ---------------------------------------------------------------------------------------------- names (§5.2, §5.5)

def decode_name(raw):
    """The parameter name a link name encodes, or None (MD302)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "%":
            h = text[i + 1:i + 3]
            if len(h) != 2 or not re.fullmatch(r"[0-9A-F]{2}", h):
                return None
            out.append(chr(int(h, 16)))
            i += 3
        else:
            out.append(c)
            i += 1
    name = "".join(out)
    return name if name and encode_name(name) == text else None


def encode_name(name):
    out = []
    for i, c in enumerate(name):
        if c in "%/" or ord(c) < 0x20 or ord(c) == 0x7F or (c == "." and i == 0):
            out.append("%%%02X" % ord(c))
        else:
            out.append(c)
    return "".join(out)


DEVICES = {"con", "prn", "aux", "nul"} | {f"{p}{d}" for p in ("com", "lpt") for d in "0123456789¹²³"}


def path_safe(path):
    b = path.encode("utf-8", "surrogatepass")
    if not 1 <= len(b) <= 4096:
        return False
    parts = path.split("/")
    if not 1 <= len(parts) <= 64:
        return False
    for p in parts:
        if not 1 <= len(p.encode("utf-8", "surrogatepass")) <= 255 or p.startswith("."):
            return False
        if any(c in '\\:*?"<>|' or ord(c) < 0x20 or ord(c) == 0x7F for c in p) or p[-1] in " .":
            return False
        stem = p.split(".")[0]
        if "".join(ch.lower() if "A" <= ch <= "Z" else ch for ch in stem) in DEVICES:
            return False
    return True


def fold(path):
    return "".join(ch.lower() if "A" <= ch <= "Z" else ch for ch in path)


def collide(paths):
    """Whether two of ``paths`` are one file or one is a folder of another (§5.5)."""
    folded = sorted(fold(p) for p in paths)
    if len(set(folded)) != len(folded):
        return True
    s = set(folded)
    return any("/".join(p.split("/")[:i]) in s for p in folded for i in range(1, p.count("/") + 1))


# ---------------------------------------------------------------------------------------------- the walk (§8)

class Node:
    def __init__(self, kind, obj, path, depth):
        self.kind, self.obj, self.path, self.depth = kind, obj, path, depth
        self.attrs = {}      # name -> str, or Refused
        self.members = {}    # raw link name (bytes) -> Node, or Refused
        self.info = {}       # a dataset's facts


class Walker:
    def __init__(self, path, limits):
        self.path, self.limits = path, limits
        self.findings = []
        self.count = 0
        self.total_bytes = 0
        self.seen = set()
        self.eof = os.path.getsize(path)

    def add(self, code, where, severity="error"):
        self.findings.append({"code": code, "severity": severity, "path": where})

    def counted(self, n=1):
        self.count += n
        if self.count > self.limits["max_objects"]:
            raise Stop("MD511")

    def open(self):
        import h5py
        from h5py import h5f, h5o
        try:
            self.fid = h5f.open(os.fsencode(self.path), h5f.ACC_RDONLY)
        except Exception:
            return None
        self.h5py = h5py
        try:
            info = h5o.get_info(self.fid)
            root = h5o.open(self.fid, b"/")
        except Exception:
            self.add("MD513", "/")
            return "stop"
        self.seen.add(info.addr)
        node = Node("group", root, "/", 0)
        self.counted()
        return self.walk_group(node, info)

    # -- objects
    def walk_group(self, node, info):
        names = []
        try:
            node.obj.links.iterate(lambda n: names.append(n) or None)
        except Exception:
            self.add("MD513", node.path)
            if node.path == "/":
                return "stop"
            raise Refused from None
        self.walk_attrs(node, info)
        for raw in names:
            where = node.path.rstrip("/") + "/" + raw.decode("utf-8", "replace")
            try:
                node.members[raw] = self.walk_link(node, raw, where)
            except Refused:
                node.members[raw] = Refused
        return node

    def walk_link(self, parent, raw, where):
        from h5py import h5d, h5g, h5o
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            self.add("MD302", where)
            raise Refused from None
        try:  # h5py looks a link up by its name only (H5Lget_info_by_idx is not exposed)
            link = parent.obj.links.get_info(raw)
        except Exception:
            self.add("MD513", where)
            raise Refused from None
        if link.type != 0:
            self.add("MD500", where)
            raise Refused
        if parent.depth + 1 > self.limits["max_depth"]:
            raise Stop("MD511")
        try:
            info = h5o.get_info(parent.obj, raw)
        except Exception:
            self.add("MD513", where)
            raise Refused from None
        if info.rc != 1 or info.addr in self.seen:
            self.seen.add(info.addr)
            self.add("MD514", where)
            raise Refused
        self.seen.add(info.addr)
        try:  # an object that cannot be read comes before its kind (§12.1 rule 3)
            obj = h5o.open(parent.obj, raw)
        except Exception:
            self.add("MD513", where)
            raise Refused from None
        if info.type not in (h5o.TYPE_GROUP, h5o.TYPE_DATASET):
            self.add("MD501", where)
            raise Refused
        if info.type == h5o.TYPE_GROUP:
            assert isinstance(obj, h5g.GroupID)
            self.counted()
            return self.walk_group(Node("group", obj, where, parent.depth + 1), info)
        assert isinstance(obj, h5d.DatasetID)
        node = Node("dataset", obj, where, parent.depth + 1)
        self.check_dataset(node)
        self.counted()
        self.walk_attrs(node, info)
        return node

    def walk_attrs(self, node, info):
        from h5py import h5a, h5s, h5t
        n = info.num_attrs
        if n > 64:
            raise Stop("MD511")
        self.counted(n)
        for i in range(n):
            where = f"{node.path}@{i}"
            try:
                attr = h5a.open(node.obj, index=i)
                raw = attr.get_name()
            except Exception:
                self.add("MD513", where)
                continue
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                self.add("MD506", where)
                continue
            where = f"{node.path}@{name}"
            try:  # an attribute is read by its name (§8.1): through the name index's hash
                attr = h5a.open(node.obj, raw)
            except Exception:
                self.add("MD513", where)
                continue
            try:
                t, s = attr.get_type(), attr.get_space()
                ok = (t.get_class() == h5t.STRING and not t.is_variable_str()
                      and t.get_cset() in (h5t.CSET_ASCII, h5t.CSET_UTF8)
                      and s.get_simple_extent_type() == h5s.SCALAR)
            except Exception:
                self.add("MD513", where)
                node.attrs[name] = Refused
                continue
            if not ok:
                self.add("MD506", where)
                node.attrs[name] = Refused
                continue
            if t.get_size() > self.limits["max_attribute_bytes"]:
                self.add("MD510", where)
                node.attrs[name] = Refused
                continue
            try:
                buf = np.zeros((), dtype=f"S{t.get_size()}")
                attr.read(buf, mtype=t)
                data = bytes(buf.tobytes()).rstrip(b"\0")
            except Exception:
                self.add("MD513", where)
                node.attrs[name] = Refused
                continue
            try:
                node.attrs[name] = data.decode("utf-8")
            except UnicodeDecodeError:
                self.add("MD506", where)
                node.attrs[name] = Refused

    # -- datasets (§8.2, §8.3)
    def check_dataset(self, node):
        from h5py import h5d, h5s, h5z
        ds, where, lim = node.obj, node.path, self.limits

        def refuse(code):
            self.add(code, where)
            raise Refused

        try:
            dcpl = ds.get_create_plist()
            layout = dcpl.get_layout()
            if layout == h5d.VIRTUAL:
                refuse("MD503")
            if dcpl.get_external_count() > 0:
                refuse("MD502")
            filters = [dcpl.get_filter(i)[:3] for i in range(dcpl.get_nfilters())] if layout == h5d.CHUNKED else []
            for code, _flags, values in filters:
                good = ((code == h5z.FILTER_DEFLATE and len(values) == 1 and values[0] <= 9)
                        or (code == h5z.FILTER_SHUFFLE and len(values) == 1 and values[0] != 0)
                        or code == h5z.FILTER_FLETCHER32)
                if not good:
                    refuse("MD504")
            t = ds.get_type()
            if t.committed():
                refuse("MD501")
            dtype = self.storage_dtype(t)
            if dtype is None:
                refuse("MD505")
            space = ds.get_space()
            kind = space.get_simple_extent_type()
            if kind == h5s.NULL or kind not in (h5s.SCALAR, h5s.SIMPLE):
                refuse("MD505")
            shape = tuple(space.get_simple_extent_dims()) if kind == h5s.SIMPLE else ()
            maxshape = tuple(space.get_simple_extent_dims(True)) if kind == h5s.SIMPLE else ()
            if maxshape != shape:
                refuse("MD509")
            if len(shape) > lim["max_rank"]:
                refuse("MD507")
            counted = math.prod(max(d, 1) for d in shape)
            if counted > lim["max_elements"] or counted * dtype.itemsize > lim["max_dataset_bytes"]:
                refuse("MD508")
            numel = math.prod(shape)
            nbytes = numel * dtype.itemsize
            chunk = dcpl.get_chunk() if layout == h5d.CHUNKED else None
            if numel:
                self.check_storage(ds, layout, shape, chunk, dtype.itemsize, [f[0] for f in filters], refuse)
        except Refused:
            raise
        except Exception:
            self.add("MD513", where)
            raise Refused from None
        node.info = {"dtype": dtype, "shape": shape, "layout": layout, "chunk": chunk,
                     "filters": [f[0] for f in filters]}
        self.total_bytes += nbytes
        if self.total_bytes > lim["max_total_bytes"]:
            raise Stop("MD512")

    def storage_dtype(self, t):
        from h5py import h5t
        try:
            cls, size = t.get_class(), t.get_size()
            if cls == h5t.INTEGER:
                if (size in (1, 2, 4, 8) and t.get_order() == h5t.ORDER_LE and t.get_precision() == 8 * size
                        and t.get_offset() == 0 and t.get_pad() == (h5t.PAD_ZERO, h5t.PAD_ZERO)):
                    return np.dtype(("<i" if t.get_sign() == h5t.SGN_2 else "<u") + str(size))
            elif cls == h5t.FLOAT:
                std = {4: ((31, 23, 8, 0, 23), 127), 8: ((63, 52, 11, 0, 52), 1023)}.get(size)
                if (std and t.get_order() == h5t.ORDER_LE and t.get_precision() == 8 * size and t.get_offset() == 0
                        and t.get_pad() == (h5t.PAD_ZERO, h5t.PAD_ZERO) and t.get_inpad() == h5t.PAD_ZERO
                        and tuple(t.get_fields()) == std[0] and t.get_ebias() == std[1]
                        and t.get_norm() == h5t.NORM_IMPLIED):
                    return np.dtype("<f" + str(size))
        except Exception:
            return None
        return None

    def check_storage(self, ds, layout, shape, chunk, itemsize, filters, refuse):
        from h5py import h5d, h5z
        if layout == h5d.COMPACT:
            return
        if layout == h5d.CONTIGUOUS:
            offset = ds.get_offset()
            size = ds.get_storage_size()
            if offset is None or size < math.prod(shape) * itemsize or offset + size > self.eof:
                refuse("MD509")
            return
        grid = [range(0, d, c) for d, c in zip(shape, chunk)]
        places = math.prod(len(g) for g in grid)
        n = ds.get_num_chunks()
        if n != places:
            refuse("MD509")
        infos = [ds.get_chunk_info(i) for i in range(n)]
        if any(i.filter_mask != 0 for i in infos):
            refuse("MD504")
        chunk_bytes = math.prod(chunk) * itemsize
        seen = set()
        for i in infos:
            off = tuple(i.chunk_offset)
            if (i.byte_offset is None or off in seen or any(o % c or o >= d for o, c, d in zip(off, chunk, shape))
                    or i.byte_offset + i.size > self.eof
                    or chunk_bytes > (1100 if h5z.FILTER_DEFLATE in filters else 1) * i.size
                    or (h5z.FILTER_FLETCHER32 in filters and i.size < 4)):
                refuse("MD509")
            seen.add(off)


# ---------------------------------------------------------------------------------------------- data (§8.3, §9.1)

def fletcher32(data):
    """HDF5's Fletcher-32 of ``data`` (16-bit words, big-endian pairs)."""
    n = len(data) // 2
    words = np.frombuffer(data[:2 * n], dtype=">u2").astype(np.uint64)
    s1 = s2 = 0
    for start in range(0, n, 360):
        block = words[start:start + 360]
        c = np.cumsum(block)
        s2 += int(s1) * len(block) + int(c.sum())
        s1 += int(c[-1]) if len(block) else 0
        s1 = (s1 & 0xFFFF) + (s1 >> 16)
        s2 = (s2 & 0xFFFF) + (s2 >> 16)
    if len(data) % 2:
        s1 += data[-1] << 8
        s2 += s1
        s1 = (s1 & 0xFFFF) + (s1 >> 16)
        s2 = (s2 & 0xFFFF) + (s2 >> 16)
    s1 = (s1 & 0xFFFF) + (s1 >> 16)
    s2 = (s2 & 0xFFFF) + (s2 >> 16)
    return (s2 << 16) | s1


def decode_chunk(data, filters, chunk_bytes, itemsize):
    """Undo the pipeline in reverse, inflating no more than the known size (§8.3); None if it does not decode."""
    from h5py import h5z
    sizes = [chunk_bytes]  # the size of each filter's input
    for f in filters[:-1]:
        sizes.append(sizes[-1] + 4 if f == h5z.FILTER_FLETCHER32 else
                     sizes[-1] + sizes[-1] // 1000 + 1024 if f == h5z.FILTER_DEFLATE else sizes[-1])
    for f, want in zip(reversed(filters), reversed(sizes)):
        if f == h5z.FILTER_FLETCHER32:
            if len(data) < 4:
                return None
            body, stored = data[:-4], struct.unpack("<I", data[-4:])[0]
            total = fletcher32(body)
            swapped = struct.unpack("<I", struct.pack(">I", total))[0]
            if stored not in (total, swapped):
                return None
            data = body
        elif f == h5z.FILTER_DEFLATE:
            d = zlib.decompressobj()
            try:
                out = d.decompress(data, want + 1)
            except zlib.error:
                return None
            if len(out) > want or not d.eof:
                return None
            data = out
        elif f == h5z.FILTER_SHUFFLE:
            if len(data) % itemsize == 0:
                a = np.frombuffer(data, np.uint8).reshape(itemsize, -1)
                data = a.T.tobytes()
        else:
            return None
    return data if len(data) == chunk_bytes else None


def read_dataset(node):
    """The dataset's values (numpy, its storage dtype), or None when a chunk does not decode (MD513)."""
    from h5py import h5d
    ds, info = node.obj, node.info
    dtype, shape = info["dtype"], info["shape"]
    try:
        if info["layout"] != h5d.CHUNKED or math.prod(shape) == 0:
            out = np.empty(shape, dtype=dtype)
            if math.prod(shape):
                ds.read(__import__("h5py").h5s.ALL, __import__("h5py").h5s.ALL, out)
            return out
        out = np.empty(shape, dtype=dtype)
        chunk = info["chunk"]
        chunk_bytes = math.prod(chunk) * dtype.itemsize
        for i in range(ds.get_num_chunks()):
            ci = ds.get_chunk_info(i)
            _mask, raw = ds.read_direct_chunk(tuple(ci.chunk_offset))
            if len(raw) != ci.size or (not info["filters"] and ci.size != chunk_bytes):
                return None  # the chunk's stored bytes are not what its index records: it does not decode
            data = decode_chunk(bytes(raw), info["filters"], chunk_bytes, dtype.itemsize)
            if data is None:
                return None
            block = np.frombuffer(data, dtype=dtype).reshape(chunk)
            sl = tuple(slice(o, min(o + c, d)) for o, c, d in zip(ci.chunk_offset, chunk, shape))
            out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
        return out
    except Exception:
        return None


def canonical_sha(values, dtype_name):
    """sha256 of the canonical bytes (§6.2): the bit patterns, little-endian, C order."""
    return hashlib.sha256(np.ascontiguousarray(values).view(DTYPES[dtype_name][1]).tobytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- §3-§7

DEFINITION_SCHEMA = schema("update-type-definition.schema.json")
UPDATE_SCHEMAS = {t: schema(f"updates/{t}.schema.json") for t in ("dense", "sparse", "low_rank", "replace", "delete")}
COMMIT_SCHEMA = schema("commit.schema.json")
LAYOUT_SCHEMA = schema("layout.schema.json")


def embedded_schema(name, definition):
    """The schema of an `update` of an embedded type (§7.1's members; `sha256` iff the type is exact)."""
    sch = json.loads(json.dumps(UPDATE_SCHEMAS["dense"]))
    props = sch["properties"]
    props["type"] = {"const": name}
    props["version"] = {"const": definition["version"]}
    required = [r for r in sch["required"] if r != "sha256"]
    if definition["exact"]:
        required.append("sha256")
    else:
        props.pop("sha256", None)
    sch["required"] = required
    return sch


def real_date(text):
    """Whether a `date` that matches the schema's pattern is a real day of the years 0001-9999 (§4.2)."""
    import datetime
    if not isinstance(text, str):
        return True  # absent or not a string: the schema decides
    try:
        datetime.date(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return True


class Checker:
    def __init__(self, walker, root):
        self.w, self.root = walker, root
        self.add = walker.add
        self.updates = {}  # parameter name -> (meta, group node, data dict) for a sound group
        self.files = {}
        self.layout = None
        self.types = {}

    def check(self):
        root = self.root
        a = root.attrs
        if a.get("format") is Refused or a.get("format_version") is Refused:
            return
        bad = False
        if a.get("format") != "mdiff":
            self.add("MD101", "/")
            bad = True
        fv = a.get("format_version")
        m = re.fullmatch(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})", fv) if isinstance(fv, str) else None
        if not m:
            self.add("MD102", "/")
            bad = True
        elif int(m.group(1)) != 1:
            self.add("MD103", "/")
            bad = True
        if bad:
            return
        self.minor = int(m.group(2))
        if self.minor > FORMAT_MINOR:
            self.add("MD104", "/", "warning")
        self.check_extensions(a.get("extensions"))
        self.check_commit(a.get("commit"))
        for name in a:
            if name not in ("format", "format_version", "commit", "extensions") and a[name] is not Refused:
                self.add("MD303", f"/@{name}", "warning")
        members = root.members
        known = {b"parameters", b"update_types"} | ({b"files", b"layout"} if self.minor >= 1 else set())
        for raw, node in members.items():
            if node is Refused:
                continue
            if raw in (b"files", b"layout") and self.minor == 0:
                self.add("MD306", "/" + raw.decode())
            elif raw not in known:
                self.add("MD303", "/" + raw.decode("utf-8", "replace"), "warning")
        self.types = self.check_update_types(members.get(b"update_types"))
        params = members.get(b"parameters")
        if params is None or (params is not Refused and params.kind != "group"):
            self.add("MD300", "/parameters")
        elif params is not Refused:
            self.check_container(params, is_file=False)
        files = members.get(b"files")
        if self.minor >= 1 and files is not None and files is not Refused:
            if files.kind != "group":
                self.add("MD305", "/files")
            else:
                self.check_container(files, is_file=True)
        layout = members.get(b"layout")
        if self.minor >= 1 and layout is not None and layout is not Refused:
            if layout.kind != "group":
                self.add("MD305", "/layout")
            else:
                self.layout = self.check_update(layout, "/layout", is_file=True)

    def unknown_attributes(self, node, where, known=()):
        for name, value in node.attrs.items():
            if name not in known and value is not Refused:
                self.add("MD303", f"{where}@{name}", "warning")

    def named_members(self, group, where):
        """(name, node, path) of each member of ``group`` not refused under §8 whose link name encodes a name
        (§5.2; MD302 otherwise)."""
        for raw, node in group.members.items():
            path = where + "/" + raw.decode("utf-8", "replace")
            if node is Refused:
                continue
            name = decode_name(raw)
            if name is None:
                self.add("MD302", path)
                continue
            yield name, node, path

    def required_datasets(self, group, where, needed):
        """The datasets of ``needed`` names among the members of an update's group, and whether one of those
        names is refused under §8; every other member, and each attribute of a dataset, is MD303."""
        found, refused = {}, False
        for raw, node in group.members.items():
            name = raw.decode("utf-8", "replace")
            if node is Refused:
                refused = refused or name in needed
                continue
            if name in needed and node.kind == "dataset":
                found[name] = node
            elif name not in needed:  # a group named like a required dataset is MD405, not unknown (§7.1)
                self.add("MD303", f"{where}/{name}", "warning")
            if node.kind == "dataset":
                self.unknown_attributes(node, f"{where}/{name}")
        return found, refused

    def check_update_types(self, group):
        """§7.8: the types /update_types defines soundly, name -> (definition, {dtype: (model, bytes)})."""
        types = {}
        if group is None or group is Refused:
            return types
        if group.kind != "group":
            self.add("MD420", "/update_types")
            return types
        self.unknown_attributes(group, "/update_types")
        for name, node, where in self.named_members(group, "/update_types"):
            if node.kind != "group" or not re.fullmatch(r"x-[a-z0-9][a-z0-9_-]{0,62}", name):
                self.add("MD420", where)
                continue
            self.unknown_attributes(node, where, known=("definition",))
            text = node.attrs.get("definition")
            if text is Refused:
                continue
            try:
                definition = parse_json(text) if text is not None else None
            except JSONError:
                definition = None
            if definition is None or not schema_ok(DEFINITION_SCHEMA, definition):
                self.add("MD420", where)
                continue
            functions, broken = {}, False
            for mraw, member in node.members.items():
                mname = mraw.decode("utf-8", "replace")
                mwhere = f"{where}/{mname}"
                dtype = mname[len("function."):] if mname.startswith("function.") else None
                if dtype not in DTYPES:
                    if member is not Refused:
                        self.add("MD303", mwhere, "warning")
                    continue
                if member is Refused:  # its own finding; the type is not defined (§7.8)
                    broken = True
                    continue
                if member.kind != "dataset" or member.info["dtype"] != np.dtype("<u1") or len(member.info["shape"]) != 1:
                    self.add("MD420", mwhere)
                    broken = True
                    continue
                if member.info["shape"][0] > self.w.limits.get("max_function_bytes", 2**20):
                    self.add("MD421", mwhere)
                    broken = True
                    continue
                data = read_dataset(member)
                if data is None:
                    self.add("MD513", mwhere)
                    broken = True
                    continue
                model, problems = core_functions.check_function(data.tobytes(), dtype, definition["inputs"], self.w.limits)
                for code, _message in problems:
                    self.add(code, mwhere)
                if model is None:
                    broken = True
                else:
                    functions[dtype] = (model, data.tobytes())
            if not functions and not broken:
                self.add("MD420", where)
            if functions and not broken:
                types[name] = (definition, functions)
        return types

    def check_extensions(self, text):
        if text is None or text is Refused:
            return
        try:
            v = parse_json(text)
        except JSONError:
            self.add("MD105", "/@extensions")
            return
        if (not isinstance(v, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                               and isinstance(e.get("must_understand"), bool) for e in v)
                or len({e["name"] for e in v}) != len(v)):
            self.add("MD105", "/@extensions")
            return
        for e in v:
            self.add("MD106" if e["must_understand"] else "MD107", "/@extensions",
                     "error" if e["must_understand"] else "warning")

    def check_commit(self, text):
        if text is Refused:
            return
        if text is None:
            self.add("MD200", "/@commit")
            return
        try:
            v = parse_json(text)
        except JSONError:
            self.add("MD201", "/@commit")
            return
        if not isinstance(v, dict):
            self.add("MD201", "/@commit")
            return
        sch = json.loads(json.dumps(COMMIT_SCHEMA))
        if self.minor < 3:
            del sch["properties"]["state_sha256"]
        if self.minor > FORMAT_MINOR:
            v = {k: x for k, x in v.items() if k in sch["properties"]}
        if not schema_ok(sch, v) or not real_date(v.get("date")):
            self.add("MD202", "/@commit")

    def check_container(self, group, is_file):
        self.unknown_attributes(group, group.path)
        paths = []
        for name, node, where in self.named_members(group, group.path):
            if node.kind != "group":
                self.add("MD301", where)
                continue
            if is_file:
                if path_safe(name):
                    paths.append(name)
                else:
                    self.add("MD304", where)
            result = self.check_update(node, where, is_file)
            if result is not None:
                (self.files if is_file else self.updates)[name] = result
        if is_file and collide(paths):
            self.add("MD304", group.path)

    def check_update(self, group, where, is_file):
        """§12.1 rules 5 and 6 for one group: (meta, data) when it is sound, else None."""
        self.unknown_attributes(group, where, known=("update",))
        text = group.attrs.get("update")
        if text is Refused:
            return None
        if text is None:
            self.add("MD400", where)
            return None
        try:
            meta = parse_json(text)
        except JSONError:
            meta = None
        if not isinstance(meta, dict):
            self.add("MD401", where)
            return None
        kind = meta.get("type")
        if not isinstance(kind, str):
            self.add("MD404", where)
            return None
        embedded = self.types.get(kind) if kind not in UPDATE_SCHEMAS and not is_file else None
        if (kind not in UPDATE_SCHEMAS and embedded is None) or (is_file and kind not in ("replace", "delete")):
            self.add("MD305" if is_file else "MD402", where)
            return None
        version = meta.get("version")
        if isinstance(version, float) and version.is_integer():
            version = meta["version"] = int(version)
        if isinstance(version, int) and not isinstance(version, bool):
            known = ((embedded[0]["version"],) if embedded else (1, 2) if kind in ("dense", "sparse") else (1,))
            if version not in known or (version == 2 and self.minor < 3) or (version == 2 and meta.get("dtype") == "bool"):
                self.add("MD403", where)
                return None
        sch = embedded_schema(kind, embedded[0]) if embedded else json.loads(json.dumps(UPDATE_SCHEMAS[kind]))
        if self.minor > FORMAT_MINOR:
            meta = {k: x for k, x in meta.items() if k in sch["properties"]}
        if self.minor < 2:
            sch["properties"].pop("base_sha256", None)
        if not schema_ok(sch, meta):
            self.add("MD404", where)
            return None
        shape = [int(d) for d in meta["shape"]]
        meta["shape"] = shape
        dtype = meta["dtype"]
        if is_file and (dtype != "uint8" or len(shape) != 1):
            self.add("MD305", where)
            return None
        if embedded and dtype not in embedded[1]:
            self.add("MD427", where)
            return None
        lim = self.w.limits
        if len(shape) > lim["max_rank"]:
            self.add("MD507", where)
            return None
        counted = math.prod(max(d, 1) for d in shape)
        if counted > lim["max_elements"] or counted * WIDTH[dtype] > lim["max_dataset_bytes"]:
            self.add("MD508", where)
            return None
        if kind == "low_rank" and (dtype not in ("float16", "bfloat16", "float32", "float64") or not shape):
            self.add("MD411", where)
            return None
        if embedded:
            return self.check_embedded(group, where, meta, embedded)
        return self.check_datasets(group, where, meta)

    def check_embedded(self, group, where, meta, embedded):
        """§7.8 for one parameter of an embedded type: its datasets, checks 7-8, then its data."""
        inputs = embedded[0]["inputs"]
        model, model_bytes = embedded[1][meta["dtype"]]
        found, refused = self.required_datasets(group, where, inputs)
        missing = [n for n in inputs if n not in found]
        if not refused:
            for name in missing:
                self.add("MD405", f"{where}/{name}")
        if refused or missing:
            return None
        problem = core_functions.check_parameter(model, meta["dtype"], meta["shape"], {
            n: (found[n].info["shape"], found[n].info["dtype"]) for n in inputs}, self.w.limits)
        if problem:
            self.add(problem[0], where)
            return None
        data = {}
        for name in inputs:
            values = read_dataset(found[name])
            if values is None:
                self.add("MD513", where)
                return None
            data[name] = values
        meta["_function"] = model_bytes
        return meta, data

    def check_datasets(self, group, where, meta):
        kind, dtype, shape, v = meta["type"], meta["dtype"], meta["shape"], meta.get("version", 1)
        bits, store = np.dtype(DTYPES[dtype][1]), np.dtype(DTYPES[dtype][0])
        compute = np.dtype("<f8" if dtype == "float64" else "<f4")
        need = {("dense", 1): {"xor": bits}, ("dense", 2): {"sub": bits},
                ("sparse", 1): {"indices": np.dtype("<u8"), "xor": bits},
                ("sparse", 2): {"gaps": np.dtype("<u8"), "sub": bits},
                ("low_rank", 1): {"A": compute, "B": compute}, ("replace", 1): {"value": store},
                ("delete", 1): {}}[(kind, v)]
        found, refused = self.required_datasets(group, where, need)
        error = False
        for name, want in need.items():
            if name not in found:
                if not any(raw.decode("utf-8", "replace") == name and n is Refused for raw, n in group.members.items()):
                    self.add("MD405", f"{where}/{name}")
                    error = True
                continue
            if found[name].info["dtype"] != want:
                self.add("MD406", f"{where}/{name}")
                error = True
        ok = {n: found[n] for n in need if n in found and found[n].info["dtype"] == need[n]}
        numel = math.prod(shape)

        def bad_shape(name):
            self.add("MD407", f"{where}/{name}")

        for name in ("xor", "sub", "value"):
            if kind in ("dense", "replace") and name in found and list(found[name].info["shape"]) != shape:
                bad_shape(name)
                error = True
        if kind == "sparse":
            a, b = ("indices", "xor") if v == 1 else ("gaps", "sub")
            if a in found and b in found:
                sa, sb = found[a].info["shape"], found[b].info["shape"]
                if len(sa) != 1 or len(sb) != 1 or sa != sb or sa[0] > numel:
                    bad_shape(a)
                    error = True
        if kind == "low_rank" and "A" in found and "B" in found:
            sa, sb = found["A"].info["shape"], found["B"].info["shape"]
            m, n = shape[0], math.prod(shape[1:])
            if (len(sa) != 2 or len(sb) != 2 or sa[0] != m or sb[1] != n or sa[1] != sb[0]
                    or not 1 <= sa[1] <= max(1, min(m, n))):
                bad_shape("A")
                error = True
        if error or refused or len(ok) != len(need):
            return None
        # rule 6: data
        data = {}
        for name, node in ok.items():
            values = read_dataset(node)
            if values is None:
                self.add("MD513", where)
                return None
            data[name] = values
        sound = True
        if kind == "sparse":
            if v == 1:
                idx = data["indices"]
                if (len(idx) and (np.any(idx >= numel) or np.any(np.diff(idx.astype(np.uint64)) <= 0)
                                  or np.any(idx[1:] <= idx[:-1]))):
                    self.add("MD408", where)
                    sound = False
            else:
                pos, indices = -1, []
                for g in data["gaps"].tolist():
                    pos = pos + int(g) + 1
                    if pos >= numel:
                        self.add("MD408", where)
                        sound = False
                        break
                    indices.append(pos)
                data["indices"] = np.array(indices, dtype=np.uint64)
        if dtype == "bool":
            for name in ("xor", "value"):
                if name in data and np.any(data[name] > 1):
                    self.add("MD409", where)
                    sound = False
        if kind == "replace" and canonical_sha(data["value"], dtype) != meta["sha256"]:
            self.add("MD410", where)
            sound = False
        if kind == "low_rank":
            for f in ("A", "B"):
                if hashlib.sha256(np.ascontiguousarray(data[f]).tobytes()).hexdigest() != meta[f + "_sha256"]:
                    self.add("MD410", where)
                    sound = False
                    break
        if sound and where == "/layout" and kind == "replace":
            try:
                layout = parse_json(bytes(data["value"]).decode("utf-8"))
                good = schema_ok(LAYOUT_SCHEMA, layout)
            except (JSONError, UnicodeDecodeError):
                good = False
            if good:
                paths = [f["path"] for f in layout["files"]] + ([layout["index"]["path"]] if "index" in layout else [])
                tensors = [t for f in layout["files"] for t in f["tensors"]]
                good = (all(path_safe(p) for p in paths) and not collide(paths)
                        and all(f["path"].endswith(".safetensors") for f in layout["files"])
                        and ("index" not in layout or layout["index"]["path"].endswith(".safetensors.index.json"))
                        and len(set(tensors)) == len(tensors))
            if not good:
                self.add("MD307", where)
                sound = False
        return (meta, data) if sound else None


def validate_in_child(path, limits):
    """{findings, status, updates}: the whole check, run where a crash cannot reach the caller."""
    w = Walker(path, limits)
    try:
        root = w.open()
    except Stop as s:
        return {"findings": [{"code": s.code, "severity": "error", "path": "/"}]}, None
    if root is None:
        return {"findings": [{"code": "MD100", "severity": "error", "path": "/"}]}, None
    if root == "stop":
        return {"findings": w.findings}, None
    c = Checker(w, root)
    c.check()
    return {"findings": w.findings}, c.updates


# ---------------------------------------------------------------------------------------------- isolation (§8.5)

def isolated(work, *args):
    """``work(*args)`` in a forked child with a memory and a time limit; its pickled result, or MD515."""
    import pickle
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            signal.alarm(TIME_LIMIT)
            payload = pickle.dumps(("ok", work(*args)))
        except MemoryError:
            payload = pickle.dumps(("MD515", "out of memory"))
        except BaseException as exc:
            payload = pickle.dumps(("crash", repr(exc)))
        with os.fdopen(wfd, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(r, "rb") as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or not data:
        return ("MD515", f"the reader died (status {status})")
    return pickle.loads(data)


# ---------------------------------------------------------------------------------------------- checkpoints

class CheckpointError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def count(x):
    """A JSON non-negative integer (not `true`, not 1.5)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def read_safetensors(path):
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise CheckpointError("MD701", "too short")
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise CheckpointError("MD701", "header past the file")
    try:
        header = parse_json(raw[8:8 + n].decode("utf-8"))
    except (JSONError, UnicodeDecodeError):
        raise CheckpointError("MD701", "header is not JSON") from None
    if not isinstance(header, dict):
        raise CheckpointError("MD701", "header is not an object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(x, str) for x in meta.values())):
        raise CheckpointError("MD701", "__metadata__")
    data = raw[8 + n:]
    tensors, spans = {}, []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError("MD701", f"entry {name}")
        if not isinstance(e["dtype"], str):
            raise CheckpointError("MD701", f"entry {name}")
        if e["dtype"] in ST_OTHER:
            raise CheckpointError("MD702", f"dtype {e['dtype']}")
        if e["dtype"] not in ST_TAGS:
            raise CheckpointError("MD701", f"dtype {e['dtype']}")
        dtype = ST_TAGS[e["dtype"]]
        shape, offsets = e["shape"], e["data_offsets"]
        if not (isinstance(shape, list) and all(count(d) for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(count(o) for o in offsets)):
            raise CheckpointError("MD701", f"entry {name}")
        b, end = offsets
        if not b <= end or end - b != math.prod(shape) * WIDTH[dtype]:
            raise CheckpointError("MD701", f"entry {name}")
        if end > len(data):
            raise CheckpointError("MD701", "data offsets past the end of the file")
        spans.append((b, end))
        values = np.frombuffer(data[b:end], dtype=DTYPES[dtype][1]).reshape(shape)
        if dtype == "bool" and np.any(values > 1):
            raise CheckpointError("MD701", "bool value")
        tensors[name] = (dtype, list(shape), values)
    pos = 0
    for b, end in sorted(spans):
        if b != pos:
            raise CheckpointError("MD701", "data offsets do not tile")
        pos = end
    if pos != len(data):
        raise CheckpointError("MD701", "data offsets do not tile")
    return tensors


def write_safetensors(path, tensors):
    tags = {v: k for k, v in ST_TAGS.items()}
    header, pos, blobs = {}, 0, []
    for name in sorted(tensors, key=lambda s: s.encode("utf-8", "surrogatepass")):
        dtype, shape, values = tensors[name]
        blob = np.ascontiguousarray(values).view(DTYPES[dtype][1]).tobytes()
        header[name] = {"dtype": tags[dtype], "shape": shape, "data_offsets": [pos, pos + len(blob)]}
        blobs.append(blob)
        pos += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = Path(str(path) + ".part")
    tmp.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def apply_updates(base, updates):
    """The result state, or raises CheckpointError with an MD6xx code (§9)."""
    out = dict(base)
    for name, (meta, data) in sorted(updates.items()):
        kind, dtype, shape = meta["type"], meta["dtype"], meta["shape"]
        if kind != "replace":
            if name not in base:
                raise CheckpointError("MD600", name)
            if base[name][0] != dtype or base[name][1] != shape:
                raise CheckpointError("MD601", name)
            old = base[name][2]
            if "base_sha256" in meta and canonical_sha(old, dtype) != meta["base_sha256"]:
                raise CheckpointError("MD603", name)
        if kind == "delete":
            del out[name]
            continue
        bits = np.dtype(DTYPES[dtype][1])
        if "_function" in meta:  # an embedded type (§7.8): its checked function, run by onnxruntime
            value_type = np.dtype("?") if dtype == "bool" else np.dtype(DTYPES[dtype][0])
            result = np.empty(shape, dtype=value_type)
            try:
                core_functions.run_function(meta["_function"], old.view(value_type), data, result)
            except Exception as exc:
                raise CheckpointError("MD428", f"the function of {kind} failed to run: {exc}") from None
            new = result.view(bits)
            if "sha256" in meta and canonical_sha(new, dtype) != meta["sha256"]:
                raise CheckpointError("MD602", name)
            out[name] = (dtype, shape, np.ascontiguousarray(new).reshape(shape))
            continue
        if kind == "replace":
            new = data["value"].view(bits).reshape(shape)
        elif kind == "dense":
            if meta.get("version", 1) == 1:
                new = old ^ data["xor"].reshape(shape)
            else:
                new = old + unzigzag(data["sub"], bits)
        elif kind == "sparse":
            new = old.reshape(-1).copy()
            idx = data["indices"].astype(np.int64)
            if meta.get("version", 1) == 1:
                new[idx] ^= data["xor"]
            else:
                new[idx] += unzigzag(data["sub"], bits)
            new = new.reshape(shape)
        else:  # low_rank
            new = low_rank(old, data["A"], data["B"], float(meta["scale"]), dtype, shape)
        if kind != "low_rank" and canonical_sha(new, dtype) != meta["sha256"]:
            raise CheckpointError("MD602", name)
        out[name] = (dtype, shape, np.ascontiguousarray(new).view(bits).reshape(shape))
    return out


def unzigzag(z, bits):
    z = z.astype(bits)
    with np.errstate(over="ignore"):
        return (z >> bits.type(1)) ^ (bits.type(0) - (z & bits.type(1)))


def low_rank(old, A, B, scale, dtype, shape):
    m = shape[0]
    if dtype in ("float32", "float64"):
        base = old.view("<f4" if dtype == "float32" else "<f8").astype("<f8")
    elif dtype == "float16":
        base = old.view("<f2").astype("<f8")
    else:
        base = (old.astype(np.uint32) << 16).view("<f4").astype("<f8")
    with np.errstate(all="ignore"):
        r = base.reshape(m, math.prod(shape[1:])) + scale * (A.astype("<f8") @ B.astype("<f8"))
    if dtype == "float64":
        return r.reshape(shape).view("<u8")
    if dtype == "float32":
        return r.astype("<f4").reshape(shape).view("<u4")
    if dtype == "float16":
        return r.astype("<f2").reshape(shape).view("<u2")
    f = r.astype("<f4").view("<u4").astype(np.uint64)  # bfloat16: round to nearest even from float32
    nan = np.isnan(r)
    rounded = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype("<u2")
    rounded[nan.reshape(rounded.shape)] = 0x7FC0
    return rounded.reshape(shape)


# ---------------------------------------------------------------------------------------------- command line

def parse_args(argv):
    args, limits, out = [], dict(DEFAULT_LIMITS), None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--limit":
            k, _, v = argv[i + 1].partition("=")
            limits[k] = int(v)
            i += 2
        elif a == "-o":
            out = argv[i + 1]
            i += 2
        elif a == "--json":
            i += 1
        else:
            args.append(a)
            i += 1
    return args, limits, out


def _validate(path, limits):
    report, _ = validate_in_child(path, limits)
    return report


def _apply(base_path, diff, out, limits):
    report, updates = validate_in_child(diff, limits)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if errors:
        return {"error": {"code": errors[0]["code"], "message": "the file is invalid"}}
    try:
        base = read_safetensors(base_path)
        state = apply_updates(base, updates)
    except CheckpointError as exc:
        return {"error": {"code": exc.code, "message": str(exc)}}
    if "__metadata__" in state:  # the reserved key is never a tensor (§10)
        return {"error": {"code": "MD703", "message": "a .safetensors file cannot hold a parameter named __metadata__"}}
    write_safetensors(out, state)
    return {"written": out}


def validate_one(path, limits):
    """One file's report and its exit status (2 when it is no mdiff file at all, 1 with errors)."""
    status, report = isolated(_validate, path, limits)
    if status != "ok":
        report = {"findings": [{"code": "MD515", "severity": "error", "path": "/", "message": str(report)}]}
    codes = {f["code"] for f in report["findings"] if f["severity"] == "error"}
    return report, 2 if "MD100" in codes else 1 if codes else 0


def apply_one(base, diff, out, limits):
    """One apply's report; ``out`` is written only on success."""
    if os.path.exists(out):
        os.remove(out)
    status, report = isolated(_apply, base, diff, out, limits)
    if status != "ok":
        report = {"error": {"code": "MD515", "message": str(report)}}
        if os.path.exists(out):
            os.remove(out)
    return report


def main(argv):
    if not argv:
        print("usage: mdiff_core.py validate|apply|features ...", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "features":
        print(json.dumps(["configurable-limits", "checkpoint-rule-codes", "embedded-update-types", "apply-many"]))
        return 0
    args, limits, out = parse_args(rest)
    if cmd == "validate" and args:
        # several files: one report each, in order, as a JSON array (the contract's optional batch form)
        reports, statuses = [], []
        for path in args:
            report, status = validate_one(path, limits)
            reports.append(report)
            statuses.append(status)
        print(json.dumps(reports[0] if len(args) == 1 else reports))
        return max(statuses)
    if cmd == "apply" and len(args) == 2 and out:
        report = apply_one(args[0], args[1], out, limits)
        print(json.dumps(report))
        return 1 if "error" in report else 0
    if cmd == "apply-many" and args and len(args) % 3 == 0 and not out:
        reports = [apply_one(*args[i:i + 3], limits) for i in range(0, len(args), 3)]
        print(json.dumps(reports))
        return max(1 if "error" in r else 0 for r in reports)
    print(f"unknown command or arguments: {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
