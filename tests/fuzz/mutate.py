"""Mutations of .mdiff files: structural edits with h5py, then byte-level edits.

:func:`mutate` is deterministic: the same seed bytes and ``random.Random`` state give the same
operations (the bytes h5py writes may still differ, e.g. by object timestamps). Every operation
returns a short description; the list of them says how a failing input was made.

Structural operations (on a copy of the seed, opened with h5py):
  attributes — JSON edits of ``commit``, ``update``, ``extensions``, ``definition`` (drop/replace
  members, wrong types, huge numbers, deep nesting, long strings, duplicate keys, raw tokens),
  text edits, other datatypes and dataspaces, new and many attributes;
  links — soft, external, dangling, hard aliases (also of the root: cycles), removal, renaming
  to non-canonical or non-UTF-8 names, moves;
  objects — new groups (deep, many), datasets, committed datatypes, parameters of random types
  with consistent layouts and hostile values, groups copied from other seeds;
  datasets — other dtypes (also big-endian, float16, enum, compound, vlen, opaque, strings),
  shapes (huge declared shapes with little or no storage), layouts, chunking, filters (deflate,
  shuffle, fletcher32, lzf, scaleoffset, nbit, szip), extendible, fill values, external
  storage, values (sparse indices out of order/range, bools of 2), raw chunks (garbage, deflate
  bombs, filter masks);
  embedded functions — random graphs of allowed ONNX operators, node/attribute/type edits.
Byte operations (on the result): bit flips, byte and integer overwrites, truncation, removal,
duplication and insertion of ranges, splices from other seeds — anywhere, or inside HDF5
metadata (object header messages) with the checksums recomputed so the decoders see them.
"""

from __future__ import annotations

import json
import os
import random
import string
import zlib
from pathlib import Path

import h5py
import numpy as np

from tests.fuzz import hdf5bytes

# ---------------------------------------------------------------- values

DTYPE_NAMES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "bfloat16", "float32", "float64"]
STORAGE = {"bool": "<u1", "int8": "<i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "<u1",
           "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "float16": "<u2", "bfloat16": "<u2",
           "float32": "<f4", "float64": "<f8"}
BITS = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}
ITEMSIZE = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
            "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
UPDATE_TYPES = ["dense", "sparse", "low_rank", "replace", "delete"]
KNOWN_KEYS = ["type", "version", "shape", "dtype", "sha256", "lossy", "stats", "changed", "rel_change", "scale",
              "A_sha256", "B_sha256", "author", "name", "email", "date", "message", "parents", "writer", "meta",
              "inputs", "exact", "description", "must_understand"]

# Raw JSON tokens that json.dumps cannot produce: placed as "\x00RAW<i>\x00" strings, then substituted.
RAW_TOKENS = [
    "1" * 5000, "-" + "9" * 4400, "1" + "0" * 4300 + ".0", "1e999", "-1e999", "1e-999", "NaN", "Infinity",
    "-Infinity", "-0", "1E+2", "2.0", "4e0", "1.0000000000000002", "9007199254740993", "18446744073709551616",
    "-9223372036854775809", "0." + "0" * 5000 + "1", "1" + "0" * 400, "1e308", "5e-324",
]

INTERESTING_INTS = [0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 1024, 4095, 4096,
                    65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**36 + 1, 2**40, 2**48, 2**53 + 1,
                    2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _raw(i: int) -> str:
    return f"\x00RAW{i}\x00"


def _substitute_raw(text: str) -> str:
    import re

    for i, token in enumerate(RAW_TOKENS):
        text = text.replace(json.dumps(_raw(i)), token)

    def deep(m):
        depth, kind = int(m.group(1)), m.group(2)
        return "[" * depth + "1" + "]" * depth if kind == "a" else '{"a":' * depth + "1" + "}" * depth

    return re.sub(r'"\\u0000DEEP(\d+):([ao])\\u0000"', deep, text)


def _deep(rng: random.Random, depth: int):
    if depth > 400:  # json.dumps would recurse too deeply: a placeholder, substituted in the text
        return f"\x00DEEP{depth}:{rng.choice('ao')}\x00"
    leaf = rng.choice([1, "x", None, [], {}])
    for _ in range(depth):
        leaf = [leaf] if rng.random() < 0.5 else {"a": leaf}
    return leaf


def _text(rng: random.Random) -> str:
    kind = rng.randrange(9)
    if kind == 0:
        return ""
    if kind == 1:
        return "A" * rng.choice([100, 4301, 70_000, 300_000])
    if kind == 2:
        return "".join(rng.choice("é€𝄞\t\n\x00\x7f\u200b\ufeff%/.") for _ in range(rng.randrange(1, 40)))
    if kind == 3:
        return rng.choice(["\ud800", "a\udfffb", "\ud83d"])  # lone surrogates (escaped in JSON)
    if kind == 4:
        return rng.choice(DTYPE_NAMES + UPDATE_TYPES + ["x-ia3", "x-", "float8", "Dense", "mdiff", "1.0"])
    if kind == 5:
        return rng.choice(["2026-02-30T00:00:00Z", "2026-01-01T00:00:60Z", "9999-12-31T23:59:59.999999999Z",
                           "2026-01-01T00:00:00Z\n", "0000-01-01T00:00:00Z", "2026-01-01T24:00:00Z"])
    if kind == 6:
        return "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(rng.choice([63, 64, 65])))
    if kind == 7:
        return "a@b" if rng.random() < 0.5 else "<a@b>"
    return "".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 30)))


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(16 if depth < 3 else 11)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, 1, -1, 2, 32, 33, 2**31, 2**32, 2**36 + 1, 2**53 + 1, 2**63, 2**64, -(2**63) - 1, 10**30])
    if kind == 2:
        return rng.choice([0.0, -0.0, 0.5, 1.5, 2.0, 1e308, -1e308, 5e-324, 1e-300, 3.0e10])
    if kind == 3:
        return rng.randint(-(2**70), 2**70)
    if kind in (4, 5):
        return _text(rng)
    if kind == 6:
        return _raw(rng.randrange(len(RAW_TOKENS)))
    if kind == 7:
        return [rng.randrange(0, 1 << rng.choice([2, 8, 33, 65])) for _ in range(rng.choice([0, 1, 2, 3, 32, 33, 1000]))]
    if kind == 8:
        return _deep(rng, rng.choice([10, 63, 64, 65, 200, 900, 990, 1200, 5000, 50_000]))
    if kind == 9:
        return rng.choice([[], {}, [[]], {"": ""}])
    if kind == 10:
        return rng.choice(["0" * 64, "f" * 64])
    if kind == 11:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if kind == 12:
        return {rng.choice(KNOWN_KEYS + ["", "x", "\u00e9"]): random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    if kind == 13:
        return [0] * rng.choice([10_000, 100_000])
    if kind == 14:
        return {"name": random_value(rng, depth + 1), "must_understand": random_value(rng, depth + 1)}
    return {"name": _text(rng), "email": _text(rng)}


SEMANTIC = {
    "shape": lambda rng: rng.choice([
        [], [0], [1], [8], [2, 4], [4, 2], [8, 1], [2**31], [2**32 + 8], [2**36 + 1], [2**63], [2**64], [-1], [1.5],
        [2.0, 4.0], [1] * 32, [1] * 33, [2**20, 2**20], [0, 2**62], [2**31, 2**31, 2**31], [3, 0, 5], "2x4", None,
        [[2]], [True], [_raw(3)], [_raw(0)], [rng.randrange(0, 70) for _ in range(rng.randrange(0, 4))],
    ]),
    "dtype": lambda rng: rng.choice(DTYPE_NAMES + ["float8", "", "Float32", "complex64", None, 4]),
    "type": lambda rng: rng.choice(UPDATE_TYPES + ["x-ia3", "x-other", "Dense", "", None, 1, "x-" + "a" * 70]),
    "version": lambda rng: rng.choice([0, 1, 2, 1.0, 1.5, 2**64, "1", True, None, -1, _raw(0), _raw(3)]),
    "scale": lambda rng: rng.choice([0, -0.0, 1e308, -1e308, 5e-324, _raw(3), _raw(6), _raw(0), "1", 2**1000, True]),
    "lossy": lambda rng: rng.choice([True, False, 1, "true", None]),
    "stats": lambda rng: rng.choice([{}, {"changed": -1}, {"changed": 2**64}, {"rel_change": _raw(3)}, {"x": 1}, []]),
    "inputs": lambda rng: rng.choice([[], ["s"], ["base"], ["result"], ["s", "s"], ["A", "B"], ["s"] * 17,
                                      ["a" * 65], [""], [1], ["xor"], ["value"], ["s", "t"], _twins(rng)]),
    "exact": lambda rng: rng.choice([True, False, None, 1]),
    "parents": lambda rng: rng.choice([[], ["0" * 64], ["0" * 64, "0" * 64], ["A" * 64], ["0" * 64 + "\n"], ["0" * 10000],
                                       ["%064x" % i for i in range(rng.choice([3, 1000]))], _twins(rng)]),
    "date": lambda rng: _text(rng) if rng.random() < 0.3 else rng.choice([
        "2026-02-29T00:00:00Z", "2024-02-29T23:59:59.123456789Z", "2026-01-01T00:00:00+00:00", "2026-1-1T0:0:0Z",
        "2026-01-01T00:00:00.1234567890Z", "2026-13-01T00:00:00Z"]),
    "meta": lambda rng: rng.choice([{}, {"k": 1}, {"": ""}, {"k": "v" * 100_000}, {str(i): str(i) for i in range(2000)}, []]),
}
SHA_KEYS = ("sha256", "A_sha256", "B_sha256")


def _twins(rng: random.Random) -> list:
    """Two equal, deeply nested elements: what `uniqueItems` compares element by element."""
    depth = rng.choice([100, 300, 600, 900, 990])
    kind = rng.choice("ao")
    twin = (lambda: _deep_exact(depth, kind))
    return [twin(), twin()] + ([twin()] if rng.random() < 0.3 else [])


def _deep_exact(depth: int, kind: str):
    if depth > 400:
        return f"\x00DEEP{depth}:{kind}\x00"
    leaf = 1
    for _ in range(depth):
        leaf = [leaf] if kind == "a" else {"a": leaf}
    return leaf


def _nodes(value, path=()):
    """(container path, key) of every member/element, depth-first, with the root as (None, None)."""
    out = [((), None)]
    stack = [((), value)]
    while stack and len(out) < 5000:
        p, v = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, child in items:
            out.append((p, k))
            if isinstance(child, (dict, list)) and len(p) < 20:
                stack.append((p + (k,), child))
    return out


def _get(value, p):
    for k in p:
        value = value[k]
    return value


def mutate_json(rng: random.Random, value) -> tuple[object, str]:
    """One random edit of a parsed JSON value; returns (new value, description)."""
    nodes = _nodes(value)
    if isinstance(value, dict) and value and rng.random() < 0.5:  # a top-level member, semantically
        key = rng.choice(list(value) + [k for k in SEMANTIC if k not in value])
        if key in SEMANTIC and rng.random() < 0.75:
            value[key] = SEMANTIC[key](rng)
            return value, f"semantic {key}={str(value[key])[:40]!r}"
        if key in SHA_KEYS:
            value[key] = rng.choice(["0" * 64, "%064x" % rng.getrandbits(256), value.get(key, "").upper(), ""])
            return value, f"sha {key}"
    p, k = rng.choice(nodes)
    if k is None:  # the root
        choice = rng.randrange(4)
        if choice == 0:
            return random_value(rng), "root replaced"
        if choice == 1:
            return [value], "root wrapped in an array"
        if choice == 2 and isinstance(value, dict):
            value[rng.choice(KNOWN_KEYS + ["unknown", ""])] = random_value(rng)
            return value, "member added"
        return _deep(rng, rng.choice([64, 900, 3000])) if rng.random() < 0.3 else value, "root deep/unchanged"
    parent = _get(value, p)
    action = rng.randrange(6)
    if action == 0:
        del parent[k]
        return value, f"removed {p + (k,)}"[:80]
    if action == 1:
        parent[k] = random_value(rng)
        return value, f"replaced {p + (k,)}"[:80]
    if action == 2:
        parent[k] = [parent[k]]
        return value, f"wrapped {p + (k,)}"[:80]
    if action == 3:
        old = parent[k]
        if isinstance(old, bool) or old is None:
            parent[k] = rng.choice([0, 1, "true", "null"])
        elif isinstance(old, (int, float)):
            parent[k] = rng.choice([str(old), -old, old + 1, old * 2**40, float(old) + 0.5, _raw(rng.randrange(len(RAW_TOKENS)))])
        elif isinstance(old, str):
            parent[k] = rng.choice([len(old), old + "\n", old.upper(), old * 1000, old[:-1], None, [old], {old: old}])
        else:
            parent[k] = rng.choice([str(old)[:100], 0, None])
        return value, f"type-changed {p + (k,)}"[:80]
    if action == 4 and isinstance(parent, dict):
        parent[rng.choice(KNOWN_KEYS + ["", "x"])] = random_value(rng)
        return value, "member added"
    parent[k] = _deep(rng, rng.choice([64, 65, 500, 995, 2000]))
    return value, f"deep at {p + (k,)}"[:80]


def mutate_json_text(rng: random.Random, text: str) -> tuple[bytes, str]:
    """An edit of the JSON text itself (duplicate keys, raw tokens, truncation, garbage)."""
    data = text.encode("utf-8", "surrogatepass")
    action = rng.randrange(10)
    if action == 0 and data:
        cut = rng.randrange(len(data))
        return data[:cut], f"truncated at {cut}"
    if action == 1:
        pos = rng.randrange(len(data) + 1)
        junk = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\\", b"\"", b"}", b"]", b",", b"\x01"])
        return data[:pos] + junk + data[pos:], f"inserted {junk!r} at {pos}"
    if action == 2:
        return data + rng.choice([b"\n", b" ", b"\x00\x00", b"x", b"{}", b"\t\r\n", b" " * 100_000]), "trailing text"
    if action == 3:
        return rng.choice([b"\xef\xbb\xbf", b" ", b"\n"]) + data, "leading BOM/space"
    if action == 4 and data.startswith(b"{") and len(data) > 2:  # a duplicate member
        try:
            obj = json.loads(text)
            key = rng.choice(list(obj)) if isinstance(obj, dict) and obj else "type"
        except ValueError:
            key = "type"
        return b"{" + json.dumps(key).encode() + b":0," + data[1:], f"duplicate member {key!r}"
    if action == 5:  # a number replaced by a raw token
        import re

        numbers = list(re.finditer(rb"-?\d+(\.\d+)?([eE][-+]?\d+)?", data))
        if numbers:
            m = rng.choice(numbers)
            token = RAW_TOKENS[rng.randrange(len(RAW_TOKENS))].encode()
            return data[:m.start()] + token + data[m.end():], f"number -> {token[:12]!r}"
    if action == 6:
        return json.dumps(json.loads(text) if _parses(text) else text, indent=rng.choice([1, 4, 200])).encode(), "reindented"
    if action == 7:
        return b"", "empty"
    if action == 8 and data:
        pos = rng.randrange(len(data))
        return data[:pos] + bytes([data[pos] ^ (1 << rng.randrange(8))]) + data[pos + 1:], f"bit flip at {pos}"
    return ("[" * rng.choice([64, 1000, 100_000]) + "]" * rng.choice([0, 64, 1000, 100_000])).encode(), "brackets"


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except (ValueError, RecursionError):
        return False


# ---------------------------------------------------------------- the h5py view of a file


class View:
    """What a structural operation may touch: groups, datasets, attributes of the open file."""

    def __init__(self, f: h5py.File):
        self.f = f
        self.groups: list[str] = []
        self.datasets: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        seen = set()
        stack = ["/"]
        while stack and len(self.groups) + len(self.datasets) < 3000:
            path = stack.pop()
            try:
                obj = f[path]
                addr = h5py.h5o.get_info(obj.id).addr
            except Exception:  # noqa: BLE001 — a corrupt or refused object: skip it
                continue
            if addr in seen:
                continue
            seen.add(addr)
            try:
                self.attrs += [(path, n) for n in obj.attrs.keys()]
            except Exception:  # noqa: BLE001
                pass
            if isinstance(obj, h5py.Dataset):
                self.datasets.append(path)
                continue
            if not isinstance(obj, h5py.Group):
                continue
            self.groups.append(path)
            try:
                names = list(obj.keys())
            except Exception:  # noqa: BLE001
                continue
            for name in names:
                try:
                    if isinstance(obj.get(name, getlink=True), h5py.HardLink):
                        stack.append(path.rstrip("/") + "/" + name)
                except Exception:  # noqa: BLE001
                    pass

    def params(self) -> list[str]:
        return [g for g in self.groups if g.startswith("/parameters/") and g.count("/") == 2]


def read_attr_bytes(obj, name: str) -> bytes | None:
    try:
        value = obj.attrs[name]
    except Exception:  # noqa: BLE001
        return None
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).rstrip(b"\0")
    return None


def write_attr_bytes(obj, name: str, data: bytes, cset: str = "utf-8") -> None:
    if name in obj.attrs:
        del obj.attrs[name]
    obj.attrs.create(name, np.array(data, dtype=h5py.string_dtype(cset, max(len(data), 1))))


def _dcpl():
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_obj_track_times(False)
    return dcpl


def _parent_and_name(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def _random_link_name(rng: random.Random) -> bytes:
    return rng.choice([
        b"v", b"%2Fx", b"%2fx", b"%41", b"%", b"%%", b"%2", b".hidden", b"%2E.", b"a%2Eb", b"\x01", b"\x7f", b"a\tb",
        b"\xff\xfe", b"\xc3", b"caf\xe9", "é".encode(), b"x" * rng.choice([64, 1000, 70_000]), b"update",
        b"parameters", b"update_types", b"xor", b"value", b"indices", b"gaps", b"sub", b"A", b"B", b"function.float32", b"x-new",
        b"x-Bad", b" ", b"%20", b"w", b"flags", b"big", b"counts",
    ])


def _create_link_bytes(group: h5py.Group, name: bytes, target_path: str | None = None, kind: str = "hard") -> None:
    """A link with an arbitrary byte name (h5py's high level API only takes str)."""
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(False)
    if kind == "group":
        h5py.h5g.create(group.id, name, lcpl=lcpl).close()
    elif kind == "soft":
        group.id.links.create_soft(name, target_path.encode(), lcpl=lcpl)
    elif kind == "external":
        group.id.links.create_external(name, b"other.h5", target_path.encode(), lcpl=lcpl)
    else:
        group.id.links.create_hard(name, group.file.id, target_path.encode(), lcpl=lcpl)


# ---------------------------------------------------------------- structural operations


def op_json_attr(rng, v: View) -> str:
    candidates = [(p, n) for p, n in v.attrs if n in ("commit", "update", "extensions", "definition")] or v.attrs
    if not candidates:
        return op_add_attr(rng, v)
    path, name = rng.choice(candidates)
    obj = v.f[path]
    data = read_attr_bytes(obj, name)
    if data is None:
        return "json: skipped (not a string)"
    text = data.decode("utf-8", "surrogateescape")
    if rng.random() < 0.7 and _parses(text):
        value, what = json.loads(text), ""
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            value, w = mutate_json(rng, value)
            what += w + "; "
        new = _substitute_raw(json.dumps(value, ensure_ascii=rng.random() < 0.5)).encode("utf-8", "surrogatepass")
    else:
        new, what = mutate_json_text(rng, text)
    write_attr_bytes(obj, name, new)
    return f"json {path}@{name}: {what}"[:200]


def op_plain_attr(rng, v: View) -> str:
    """format / format_version and other non-JSON text."""
    f = v.f
    name = rng.choice(["format", "format_version", "format_version", "extensions"])
    value = rng.choice([
        "1." + "9" * rng.choice([4300, 4301, 5000, 100_000]), "9" * 5000 + ".0", "1.1", "1.99", "2.0", "0.9", "1.0\n",
        "01.0", "1.00", " 1.0", "1.0 ", "1", "", "mdiff", "MDIFF", "mdiff\n", "١.٠", "1.٠", "1.0\x00x", "[]",
        "[{}]", '[{"name":"x","must_understand":false}]', '[{"name":"x","must_understand":true}]',
        '[{"name":1,"must_understand":false}]', json.dumps([{"name": "e%d" % i, "must_understand": False} for i in range(2000)]),
    ])
    write_attr_bytes(f, name, value.encode("utf-8"))
    return f"text {name}={value[:30]!r}"


def op_attr_type(rng, v: View) -> str:
    if not v.attrs:
        return op_add_attr(rng, v)
    path, name = rng.choice(v.attrs)
    obj = v.f[path]
    data = read_attr_bytes(obj, name) or b"x"
    kind = rng.randrange(11)
    del obj.attrs[name]
    if kind == 0:
        obj.attrs.create(name, data.decode("utf-8", "replace"), dtype=h5py.string_dtype("utf-8"))
    elif kind == 1:
        obj.attrs[name] = rng.choice([np.float64(1.0), np.int64(-1), np.uint8(7)])
    elif kind == 2:
        obj.attrs.create(name, np.array([data, data], dtype=h5py.string_dtype("utf-8", max(len(data), 1))))
    elif kind == 3:
        obj.attrs.create(name, h5py.Empty(h5py.string_dtype("utf-8", max(len(data), 1))))
    elif kind == 4:
        write_attr_bytes(obj, name, data, "ascii")
    elif kind == 5:
        write_attr_bytes(obj, name, data + b"\xff")
    elif kind == 6:
        write_attr_bytes(obj, name, data + b" " * rng.choice([(1 << 20) - len(data), (1 << 20) + 1 - len(data), 70_000]))
    elif kind == 7:
        write_attr_bytes(obj, name, data[: len(data) // 2] + b"\x00" + data[len(data) // 2:])
    elif kind == 8:
        obj.attrs.create(name, np.array([[data]], dtype=h5py.string_dtype("utf-8", max(len(data), 1))))
    elif kind == 9:
        obj.attrs.create(name, np.frombuffer(data, np.uint8))
    else:
        obj.attrs.create(name, np.array(data, dtype=h5py.string_dtype("utf-8", max(len(data), 1) * rng.choice([2, 64]))))
    return f"attr type {path}@{name} kind {kind}"


def op_add_attr(rng, v: View) -> str:
    path = rng.choice(v.groups + v.datasets) if v.groups else "/"
    obj = v.f[path]
    count = rng.choice([1, 1, 1, 9, 40, 300])
    for i in range(count):
        name = rng.choice(["note", "update", "commit", "format", "definition", "x" * 300, "é", f"a{i}"]) + (str(i) if count > 1 else "")
        if name in obj.attrs:
            continue
        if rng.random() < 0.1:  # a non-UTF-8 attribute name, through the low-level API
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(1)
            aid = h5py.h5a.create(obj.id, b"\xff\xfe" + str(i).encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
            aid.write(np.array(b"x", dtype="S1"))
            aid.close()
            continue
        write_attr_bytes(obj, name, json.dumps(random_value(rng), default=str).encode("utf-8", "surrogatepass")[:200_000])
    return f"added {count} attributes at {path}"


def op_del_attr(rng, v: View) -> str:
    if not v.attrs:
        return "no attribute"
    path, name = rng.choice(v.attrs)
    del v.f[path].attrs[name]
    return f"deleted attribute {path}@{name}"


def op_link(rng, v: View) -> str:
    f = v.f
    group = f[rng.choice(v.groups)]
    targets = v.groups + v.datasets
    target = rng.choice(targets)
    kind = rng.choice(["soft", "soft", "dangling", "external", "hard", "hard", "root"])
    name = _random_link_name(rng)
    if name.decode("utf-8", "replace") in group:
        name = name + b"2"
    if kind == "soft":
        _create_link_bytes(group, name, target, "soft")
    elif kind == "dangling":
        _create_link_bytes(group, name, rng.choice(["/nowhere", "", "/parameters/../x", "x" * 2000]) or "/x", "soft")
    elif kind == "external":
        _create_link_bytes(group, name, target, "external")
    elif kind == "hard":
        _create_link_bytes(group, name, target, "hard")
    else:
        _create_link_bytes(group, name, "/", "hard")
    return f"{kind} link {group.name}/{name[:20]!r} -> {target}"


def op_remove(rng, v: View) -> str:
    path = rng.choice(v.datasets + v.groups[1:]) if len(v.groups) > 1 or v.datasets else None
    if path is None:
        return "nothing to remove"
    del v.f[path]
    return f"removed {path}"


def op_rename(rng, v: View) -> str:
    movable = v.datasets + v.groups[1:]
    if not movable:
        return "nothing to rename"
    path = rng.choice(movable)
    parent, _ = _parent_and_name(path)
    dest_group = v.f[rng.choice(v.groups)] if rng.random() < 0.3 else v.f[parent]
    name = _random_link_name(rng)
    if name.decode("utf-8", "replace") in dest_group:
        name += b"_"
    dest_group.id.links.create_hard(name, v.f.id, path.encode())
    v.f[parent].id.unlink(_parent_and_name(path)[1].encode("utf-8", "surrogateescape"))
    return f"moved {path} -> {dest_group.name}/{name[:20]!r}"


def op_add_group(rng, v: View) -> str:
    parent = v.f[rng.choice(v.groups)]
    kind = rng.randrange(4)
    if kind == 0:  # deep
        depth = rng.choice([20, 100, 400])
        g = parent
        for i in range(depth):
            g = g.create_group(f"d{i}")
        return f"{depth} nested groups under {parent.name}"
    if kind == 1:  # many
        n = rng.choice([9, 60, 600])
        for i in range(n):
            parent.create_group(f"g{i:04d}")
        return f"{n} groups in {parent.name}"
    name = _random_link_name(rng)
    if name.decode("utf-8", "replace") in parent:
        name += b"3"
    _create_link_bytes(parent, name, kind="group")
    return f"group {parent.name}/{name[:20]!r}"


def op_committed_type(rng, v: View) -> str:
    f = v.f
    parent = f[rng.choice(v.groups)]
    name = "t" + str(rng.randrange(1000))
    parent[name] = np.dtype(rng.choice(["<f4", "<u4", ">u4", "<u2"]))
    if v.datasets and rng.random() < 0.6:  # a dataset whose datatype is the committed one (a shared message)
        path = rng.choice(v.datasets)
        ds = f[path]
        try:
            data = ds[()]
        except Exception:  # noqa: BLE001
            data = None
        del f[path]
        dt = parent[name]
        shape = ds.shape if data is None else np.shape(data)
        nd = f.create_dataset(path, shape=shape, dtype=dt)
        if data is not None and np.size(data):
            try:
                nd[...] = np.asarray(data).astype(dt.dtype, copy=False)
            except Exception:  # noqa: BLE001
                pass
        return f"committed datatype {parent.name}/{name}, used by {path}"
    return f"committed datatype {parent.name}/{name}"


def _original(ds):
    try:
        return ds[()]
    except Exception:  # noqa: BLE001
        return None


def _random_array(rng: random.Random, shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    raw = np.frombuffer(rng.randbytes(n * dt.itemsize), dtype=dt) if n * dt.itemsize else np.zeros(0, dt)
    return raw.reshape(shape)


def _storage_kwargs(rng: random.Random, shape, itemsize: int) -> dict:
    kw: dict = {}
    if not shape or 0 in shape:
        return kw
    layout = rng.randrange(6)
    if layout == 0:
        return kw  # contiguous
    if layout == 1 and int(np.prod(shape)) * itemsize < 60_000:
        dcpl = _dcpl()
        dcpl.set_layout(h5py.h5d.COMPACT)
        return {"dcpl": dcpl}
    kw["chunks"] = tuple(max(1, rng.choice([1, d, d, (d + 1) // 2, (d + 2) // 3])) for d in shape)
    filt = rng.randrange(9)
    if filt in (0, 1):
        kw.update(compression="gzip", compression_opts=rng.randrange(10))
    if filt in (1, 2) or rng.random() < 0.2:
        kw["shuffle"] = True
    if filt == 3 or rng.random() < 0.15:
        kw["fletcher32"] = True
    if filt == 4:
        kw["compression"] = "lzf"
    if filt == 5:
        kw["scaleoffset"] = 0 if rng.random() < 0.5 else None
        if kw["scaleoffset"] is None:
            del kw["scaleoffset"]
    if filt == 6:
        kw["compression"] = "szip"
    if layout == 5:
        kw["maxshape"] = tuple(None if rng.random() < 0.5 else d for d in shape)
    return kw


def op_dataset(rng, v: View) -> str:
    """Replace a dataset: other dtype, shape, storage or values."""
    if not v.datasets:
        return op_new_dataset(rng, v)
    f = v.f
    path = rng.choice(v.datasets)
    ds = f[path]
    data = _original(ds)
    try:
        shape, dtype = ds.shape, ds.dtype
    except Exception:  # noqa: BLE001
        shape, dtype = (4,), np.dtype("<u4")
    if data is None or not isinstance(data, np.ndarray) and not np.isscalar(data):
        data = _random_array(rng, shape or (), dtype if dtype.kind in "uif" else "<u1")
    data = np.asarray(data)
    what = []
    change = rng.randrange(8)
    if change in (0, 5):  # dtype
        new_dtype = rng.choice(["<u1", "<u2", "<u4", "<u8", "<i1", "<i2", "<i4", "<i8", "<f4", "<f8", ">f4", ">u4", ">i8",
                                "<f2", "?", "S4", "V4", "<c8", "u1"])
        try:
            data = data.astype(new_dtype) if np.dtype(new_dtype).kind in "uifb?" and data.dtype.kind in "uifb" else _random_array(rng, data.shape, new_dtype if np.dtype(new_dtype).kind != "b" else "u1").astype(new_dtype)
        except Exception:  # noqa: BLE001
            data = np.zeros(data.shape, new_dtype)
        what.append(f"dtype {new_dtype}")
    if change in (1, 5):  # shape
        choice = rng.randrange(9)
        n = data.size
        if choice == 0:
            data = data.reshape(-1)
        elif choice == 1:
            data = data.reshape((1,) + data.shape)
        elif choice == 2:
            data = data.reshape(-1)[:1].reshape(()) if n else np.zeros((), data.dtype)
        elif choice == 3:
            data = np.zeros((0,) + data.shape[1:], data.dtype)
        elif choice == 4:
            data = np.resize(data, (n + rng.choice([1, 7, 100]),)) if n else np.zeros(3, data.dtype)
        elif choice == 5 and data.ndim >= 2:
            data = np.ascontiguousarray(data.T)
        elif choice == 6:
            data = data.reshape((1,) * 31 + (n,)) if n else data
        elif choice == 7:
            data = np.resize(data, (rng.randrange(0, 6), rng.randrange(0, 6)))
        else:
            data = data.reshape(-1)[: max(0, n - 1)]
        what.append(f"shape {data.shape}")
    if change == 2:  # values
        data = data.copy()
        flat = data.reshape(-1)
        if flat.size and flat.dtype.kind in "uif":
            for _ in range(rng.choice([1, 2, 5])):
                i = rng.randrange(flat.size)
                if flat.dtype.kind in "ui":
                    info = np.iinfo(flat.dtype)
                    flat[i] = rng.choice([0, 1, 2, info.max, info.min, int(flat[i]) ^ 1, flat[max(0, i - 1)]])
                else:
                    flat[i] = rng.choice([np.nan, np.inf, -0.0, 1e30, 0.0])
            if path.endswith("/indices") and rng.random() < 0.5:
                rng.shuffle(flat)
        what.append("values")
    declared_shape, write = data.shape, True
    if change == 3:  # huge declared shape, little or no storage
        declared_shape = rng.choice([(2**36 + 1,), (2**31,), (2**20, 2**20), (2**40,), (2**62,), (2**32 + 8,)])
        write = False
        what.append(f"declared {declared_shape}")
    kw = _storage_kwargs(rng, declared_shape, max(data.dtype.itemsize, 1))
    if change == 3:  # HDF5 refuses chunks over 4 GiB: small chunks, or contiguous storage never allocated
        kw = rng.choice([{}, {"chunks": tuple(min(d, rng.choice([1, 64, 4096])) for d in declared_shape)},
                         {"chunks": tuple(min(d, 4096) for d in declared_shape), "compression": "gzip"}])
    if change in (4, 6):
        what.append(f"storage {sorted(k for k in kw if k != 'dcpl')}{' compact' if 'dcpl' in kw else ''}")
    if change == 7:
        kw = {"shape": data.shape, "dtype": data.dtype}
        fill = rng.randrange(3)
        if fill == 0:
            kw["fillvalue"] = np.ones((), data.dtype) if data.dtype.kind in "uif" else None
            kw = {k: x for k, x in kw.items() if x is not None}
            write = False
            what.append("fill value, never written")
        elif fill == 1:
            dcpl = _dcpl()
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
            if data.size and data.ndim:
                dcpl.set_chunk(tuple(max(1, d) for d in data.shape))
            kw["dcpl"] = dcpl
            write = False
            what.append("allocated early, never written")
        else:
            kw["external"] = [("x.bin", 0, h5py.h5f.UNLIMITED)]
            write = False
            what.append("external storage")
    del f[path]
    try:
        if "shape" in kw:
            f.create_dataset(path, **kw)
        elif write:
            f.create_dataset(path, data=data, **kw)
        else:
            f.create_dataset(path, shape=declared_shape, dtype=data.dtype, **kw)
            if change == 3 and rng.random() < 0.5 and "chunks" in kw:
                ds = f[path]
                ds[tuple(slice(0, min(c, d)) for c, d in zip(kw["chunks"], declared_shape))] = 1
                what.append("one chunk written")
    except Exception as exc:  # noqa: BLE001 — an invalid combination: fall back to plain data
        f.create_dataset(path, data=data if data.dtype.kind != "V" else np.zeros(data.shape, "u1"))
        what.append(f"fallback ({type(exc).__name__})")
    return f"dataset {path}: " + ", ".join(what)


def op_low_level_dataset(rng, v: View) -> str:
    """Datasets only the low-level API makes: odd integer precision/offset, nbit, opaque, array, bitfield types."""
    f = v.f
    path = rng.choice(v.datasets) if v.datasets and rng.random() < 0.8 else rng.choice(v.groups).rstrip("/") + "/lowlevel"
    parent, name = _parent_and_name(path)
    if name in f[parent]:
        del f[path]
    kind = rng.randrange(8)
    n = rng.choice([1, 4, 8, 64])
    dcpl = _dcpl()
    if kind == 0:
        tid = h5py.h5t.STD_U32LE.copy()
        tid.set_precision(rng.choice([1, 7, 24, 31]))
        if rng.random() < 0.5:
            tid.set_offset(rng.choice([1, 8]))
    elif kind == 1:
        tid = h5py.h5t.IEEE_F32LE.copy()
        tid.set_ebias(rng.choice([0, 100, 255]))
    elif kind == 2:
        tid = h5py.h5t.STD_U32LE.copy()
        tid.set_precision(12)
        dcpl.set_chunk((n,))
        dcpl.set_filter(h5py.h5z.FILTER_NBIT, h5py.h5z.FLAG_OPTIONAL)
    elif kind == 3:
        tid = h5py.h5t.array_create(h5py.h5t.STD_U8LE, (4,))
    elif kind == 4:
        tid = h5py.h5t.create(h5py.h5t.OPAQUE, 4)
        tid.set_tag(b"x")
    elif kind == 5:
        tid = h5py.h5t.STD_B32LE.copy()
    elif kind == 6:
        tid = h5py.h5t.STD_U32LE.copy()
        dcpl.set_chunk((max(1, n // 2),))
        dcpl.set_filter(rng.choice([h5py.h5z.FILTER_SZIP, h5py.h5z.FILTER_SCALEOFFSET, 32000, 307, 65000]), h5py.h5z.FLAG_OPTIONAL,
                        tuple(rng.randrange(0, 64) for _ in range(rng.randrange(0, 4))))
    else:
        tid = h5py.h5t.STD_U64LE.copy()
        tid.set_order(h5py.h5t.ORDER_BE)
    space = h5py.h5s.create_simple((n,)) if rng.random() < 0.9 else h5py.h5s.create(h5py.h5s.NULL)
    dsid = h5py.h5d.create(f[parent].id, name.encode("utf-8", "surrogateescape"), tid, space, dcpl=dcpl)
    if space.get_simple_extent_type() == h5py.h5s.SIMPLE and rng.random() < 0.8:
        buf = np.frombuffer(rng.randbytes(n * tid.get_size()), dtype=f"V{tid.get_size()}")
        try:
            dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=h5py.h5t.create(h5py.h5t.OPAQUE, tid.get_size()) if kind != 3 else tid)
        except Exception:  # noqa: BLE001
            pass
    dsid.close()
    return f"low-level dataset {path} kind {kind}"


def op_raw_chunk(rng, v: View) -> str:
    """A chunk written raw, bypassing the filters: garbage, a deflate bomb, a wrong size, a filter mask."""
    f = v.f
    chunked = []
    for p in v.datasets:
        try:
            if f[p].chunks:
                chunked.append(p)
        except Exception:  # noqa: BLE001
            pass
    if chunked and rng.random() < 0.7:
        path = rng.choice(chunked)
        ds = f[path]
    elif v.datasets:
        path = rng.choice(v.datasets)
        old = f[path]
        try:
            shape, dtype = old.shape, old.dtype
        except Exception:  # noqa: BLE001
            return "raw chunk: skipped"
        if not shape or 0 in shape or dtype.kind not in "uif":
            return "raw chunk: skipped"
        del f[path]
        kw = {"compression": "gzip"} if rng.random() < 0.7 else {}
        if rng.random() < 0.3:
            kw["fletcher32"] = True
        if rng.random() < 0.3:
            kw["shuffle"] = True
        ds = f.create_dataset(path, shape=shape, dtype=dtype, chunks=shape, **kw)
    else:
        return "raw chunk: no dataset"
    chunk = ds.chunks
    nbytes = int(np.prod(chunk)) * ds.dtype.itemsize
    kind = rng.randrange(8)
    if kind == 0:
        payload = rng.randbytes(rng.choice([0, 1, 7, nbytes // 2, nbytes, nbytes + 4, 2 * nbytes]))
    elif kind == 1:  # a deflate stream that inflates far beyond the chunk
        payload = zlib.compress(bytes(rng.choice([nbytes * 4, 1 << 22, 1 << 24])), 9)
    elif kind == 2:  # a deflate stream of the wrong length
        payload = zlib.compress(bytes(max(0, nbytes + rng.choice([-4, -1, 1, 4]))), 1)
    elif kind == 3:  # a truncated deflate stream
        full = zlib.compress(rng.randbytes(nbytes), 1)
        payload = full[: rng.randrange(len(full))]
    elif kind == 4:
        payload = zlib.compress(rng.randbytes(nbytes), 1) + rng.randbytes(8)
    elif kind == 5:
        payload = b"\x78\x01" + rng.randbytes(rng.choice([2, 10, 100]))
    elif kind == 6:  # correct data, wrong fletcher32
        payload = rng.randbytes(nbytes) + rng.randbytes(4)
    else:  # a zlib bomb just inside the MD509 ratio
        payload = zlib.compress(bytes(nbytes), 9)
    filter_mask = rng.choice([0, 0, 0, 1, 2, 3, 0xFFFFFFFF])
    offset = tuple(rng.randrange(0, max(1, d), c) // c * c if rng.random() < 0.9 else d for d, c in zip(ds.shape, chunk))
    ds.id.write_direct_chunk(offset, payload, filter_mask)
    return f"raw chunk {path} at {offset}: kind {kind}, {len(payload)} bytes, mask {filter_mask:#x}"


def op_new_dataset(rng, v: View) -> str:
    f = v.f
    parent = f[rng.choice(v.groups)]
    name = rng.choice(["xor", "value", "indices", "gaps", "sub", "A", "B", "s", "extra", "function.float32", "function.bool"])
    if name in parent:
        name += "_"
    dtype = rng.choice(["<u1", "<u2", "<u4", "<u8", "<i4", "<f4", "<f8"])
    shape = rng.choice([(), (0,), (3,), (2, 4), (8,), (100, 100), (1,) * 32])
    data = _random_array(rng, shape, dtype)
    parent.create_dataset(name, data=data, **_storage_kwargs(rng, shape, np.dtype(dtype).itemsize))
    return f"new dataset {parent.name}/{name} {dtype}{shape}"


def _consistent_update(rng: random.Random, name: str):
    """A parameter update whose layout matches its metadata, with values that may be hostile."""
    from mdiff.format.dtypes import dtype_named
    from mdiff.updates.base import sha256_hex
    from tests.fuzz.corpus import synth

    utype = rng.choice(UPDATE_TYPES)
    dtype_name = rng.choice(DTYPE_NAMES if utype != "low_rank" else ["float16", "bfloat16", "float32", "float64"])
    dt = dtype_named(dtype_name)
    shape = rng.choice([(), (1,), (5,), (3, 4), (2, 3, 4), (0, 3), (4, 0), (300, 7), (1,) * 12, (2,) * 10])
    if utype == "low_rank" and not shape:
        shape = (5,)
    meta = {"type": utype, "version": 1, "shape": list(shape), "dtype": dtype_name}
    n = int(np.prod(shape)) if shape else 1
    bits = np.dtype(BITS[dt.itemsize])
    data = {}
    base = synth(name, shape, dtype_name)
    if utype == "dense":
        xor = _random_array(rng, shape, bits)
        if dtype_name == "bool" and rng.random() < 0.7:
            xor = (xor & 1).astype(bits)
        if rng.random() < 0.4:  # version 2 (§7.3): the same patterns as zigzag differences (bool: MD403)
            from mdiff.updates.bit_deltas import SubDelta

            meta["version"] = 2
            data["sub"] = xor
            result = SubDelta.apply(base.view(bits), xor, out=np.empty_like(base.view(bits))).view(dt.value)
        else:
            data["xor"] = xor
            result = np.bitwise_xor(base.view(bits), xor).view(dt.value)
        meta["sha256"] = sha256_hex(result if rng.random() < 0.7 else base)
    elif utype == "sparse":
        k = rng.choice([0, 1, min(n, 3), n, n + 1])
        idx_kind = rng.randrange(6)
        if idx_kind == 0:
            indices = np.sort(np.array(rng.sample(range(max(n, 1)), min(k, max(n, 1))), dtype="<u8"))[: k]
        elif idx_kind == 1:
            indices = np.array([rng.randrange(0, 2**64) for _ in range(k)], dtype="<u8")
        elif idx_kind == 2:
            indices = np.array([n - 1 + i for i in range(k)], dtype="<u8") if n else np.zeros(k, "<u8")
        elif idx_kind == 3:
            indices = np.array([2**64 - 1 - i for i in range(k)][::-1], dtype="<u8")
        elif idx_kind == 4:
            indices = np.zeros(k, "<u8")
        else:
            indices = np.arange(k, dtype="<u8")[::-1].copy()
        xor = _random_array(rng, (len(indices),), bits)
        if dtype_name == "bool":
            xor = (xor & rng.choice([1, 3])).astype(bits)
        if rng.random() < 0.4:  # version 2 (§7.4): the same numbers as gaps (hostile sums included), sub values
            meta["version"] = 2
            data["gaps"], data["sub"] = indices, xor
        else:
            data["indices"], data["xor"] = indices, xor
        meta["sha256"] = sha256_hex(base)
    elif utype == "replace":
        value = _random_array(rng, shape, dt.storage)
        if dtype_name == "bool":
            value = (value & rng.choice([1, 1, 1, 3])).astype(dt.storage)
        data["value"] = value
        meta["sha256"] = sha256_hex(value.view(dt.value)) if rng.random() < 0.7 else "0" * 64
    elif utype == "low_rank":
        m, ncols = shape[0], int(np.prod(shape[1:]))
        r = rng.choice([1, 2, max(1, min(m, ncols))])
        c = np.float64 if dtype_name == "float64" else np.float32
        A = np.asarray(_random_array(rng, (m, r), c)) if rng.random() < 0.3 else np.full((m, r), rng.choice([1.0, 1e30, np.nan, -0.0]), c)
        B = np.ones((r, ncols), c) * rng.choice([1.0, 1e30, np.inf, 0.0])
        data["A"], data["B"] = A, B
        meta.update(scale=rng.choice([1.0, 0.5, 1e308, -1e308, 0.0]), A_sha256=sha256_hex(A), B_sha256=sha256_hex(B))
    return meta, data


def op_new_param(rng, v: View) -> str:
    from mdiff.format.names import encode_name

    f = v.f
    if "parameters" not in f:
        f.create_group("parameters")
    name = rng.choice(["w", "flags", "counts", "big", "new", "a/b", ".x", "p%", "n" * 200])
    link = encode_name(name)
    params = f["parameters"]
    if link in params:
        del params[link]
    meta, data = _consistent_update(rng, name)
    group = params.create_group(link)
    write_attr_bytes(group, "update", json.dumps(meta).encode())
    for key, array in data.items():
        group.create_dataset(key, data=array, **_storage_kwargs(rng, array.shape, array.dtype.itemsize))
    return f"new parameter {name!r}: {meta['type']} {meta['dtype']}{meta['shape']}"


def op_splice_h5(rng, v: View, donors: list[Path]) -> str:
    """Copy a group or dataset from another seed (h5py's copy: new objects, not aliases)."""
    if not donors:
        return "no donor"
    donor = rng.choice(donors)
    try:
        with h5py.File(donor, "r") as src:
            dv = View(src)
            candidates = [p for p in dv.groups[1:] + dv.datasets]
            if not candidates:
                return "donor empty"
            path = rng.choice(candidates)
            dest = v.f[rng.choice(v.groups)] if rng.random() < 0.3 else v.f.require_group(_parent_and_name(path)[0])
            name = _parent_and_name(path)[1]
            if name in dest:
                del dest[name]
            src.copy(src[path], dest, name=name)
            return f"spliced {donor.name}:{path} -> {dest.name}/{name}"[:200]
    except Exception as exc:  # noqa: BLE001
        return f"splice failed ({type(exc).__name__})"


# ---------------------------------------------------------------- embedded ONNX functions

ONNX_OPS_UNARY = ["Abs", "Ceil", "Exp", "Floor", "Identity", "Log", "Neg", "Not", "Reciprocal", "Round", "Sign", "Sqrt",
                  "Tanh", "BitwiseNot", "Flatten", "Squeeze", "Transpose", "Shape", "ReduceMax", "ReduceMean",
                  "ReduceMin", "ReduceSum", "Cast", "BitCast"]
ONNX_OPS_BINARY = ["Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater",
                   "GreaterOrEqual", "Less", "LessOrEqual", "MatMul", "Max", "Min", "Mod", "Mul", "Or", "Pow", "Sub",
                   "Sum", "Xor", "Expand", "Reshape", "Gather", "Concat", "Unsqueeze"]
ONNX_OPS_OTHER = ["Clip", "Gemm", "Where", "Slice", "ScatterElements", "Constant"]


def _onnx_types():
    from onnx import TensorProto as T

    return [T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16, T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32,
            T.UINT64, T.BOOL]


def _random_constant(rng: random.Random, name: str):
    from onnx import TensorProto as T, helper

    kind = rng.randrange(5)
    if kind == 0:  # a shape-like int64 vector
        dims = [rng.choice([-1, 0, 1, 2, 3, 6, 8, 48, 2**20, 2**31, 2**40, -2]) for _ in range(rng.randrange(0, 4))]
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, T.INT64, [len(dims)], dims))
    if kind == 1:
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, T.INT64, [], [rng.choice([-1, 0, 1, 7, 100, 2**62])]))
    if kind == 2:
        return helper.make_node("Constant", [], [name], value_float=rng.choice([0.0, 1.0, -1.0, 1e38, float("nan")]))
    if kind == 3:
        return helper.make_node("Constant", [], [name], value_ints=[rng.choice([0, 1, -1, 2]) for _ in range(rng.randrange(1, 4))])
    t = rng.choice(_onnx_types())
    dims = [rng.randrange(1, 4) for _ in range(rng.randrange(0, 3))]
    n = int(np.prod(dims)) if dims else 1
    np_type = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.INT64: np.int64, T.INT32: np.int32, T.UINT8: np.uint8,
               T.BOOL: np.bool_}.get(t)
    if np_type is None:
        t, np_type = T.FLOAT, np.float32
    vals = np.frombuffer(rng.randbytes(n * np.dtype(np_type).itemsize), np_type) if np_type is not np.bool_ else np.ones(n, np.bool_)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, t, dims, vals.tobytes(), raw=True))


def _random_attrs(rng: random.Random, op: str) -> dict:
    from onnx import TensorProto as T

    attrs: dict = {}
    if op in ("Cast",):
        attrs["to"] = rng.choice(_onnx_types() + [0, 99])
        if rng.random() < 0.2:
            attrs["saturate"] = rng.choice([0, 1])
    elif op == "BitCast":
        attrs["to"] = rng.choice(_onnx_types())
    elif op in ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum"):
        attrs["keepdims"] = rng.choice([0, 1])
        if rng.random() < 0.3:
            attrs["noop_with_empty_axes"] = 1
    elif op in ("Flatten", "Concat", "Gather", "ScatterElements"):
        attrs["axis"] = rng.choice([0, 1, -1, 2, 5, -5])
    elif op == "Transpose" and rng.random() < 0.7:
        attrs["perm"] = rng.choice([[1, 0], [0, 1], [0, 0], [2, 0, 1], [5, 0]])
    elif op == "BitShift":
        attrs["direction"] = rng.choice(["LEFT", "RIGHT", "UP"])
    elif op == "Mod":
        attrs["fmod"] = rng.choice([0, 1])
    elif op == "Gemm":
        attrs.update(transA=rng.choice([0, 1]), transB=rng.choice([0, 1]), alpha=rng.choice([1.0, 1e38]))
    elif op == "ScatterElements" and rng.random() < 0.5:
        attrs["reduction"] = rng.choice(["none", "add", "mul", "max", "min"])
    _ = T
    return attrs


def random_function(rng: random.Random, dtype_name: str, inputs: list[str]) -> bytes:
    """A random graph of allowed operators, from ``base`` and the inputs to a ``result`` of the dtype."""
    from onnx import helper
    from mdiff.format.onnx_functions import OPSET, VALUE_TYPES

    t = VALUE_TYPES[dtype_name]
    values = ["base", *inputs]
    nodes = []
    for i in range(rng.randrange(1, 7)):
        if rng.random() < 0.25:
            name = f"c{i}"
            nodes.append(_random_constant(rng, name))
            values.append(name)
            continue
        if rng.random() < 0.3:  # a cast, so that later operators see other types
            src = rng.choice(values)
            nodes.append(helper.make_node("Cast", [src], [f"k{i}"], to=rng.choice(_onnx_types())))
            values.append(f"k{i}")
        group = rng.random()
        op = rng.choice(ONNX_OPS_UNARY if group < 0.4 else ONNX_OPS_BINARY if group < 0.85 else ONNX_OPS_OTHER)
        arity = 1 if op in ONNX_OPS_UNARY else 2 if op in ONNX_OPS_BINARY else {"Clip": 3, "Gemm": 3, "Where": 3, "Slice": 3,
                                                                               "ScatterElements": 3, "Constant": 0}[op]
        if op == "Constant":
            nodes.append(_random_constant(rng, f"v{i}"))
        else:
            ins = [rng.choice(values) for _ in range(arity)]
            if op == "Sum":
                ins = ins[: rng.randrange(1, 3)]
            nodes.append(helper.make_node(op, ins, [f"v{i}"], **_random_attrs(rng, op)))
        values.append(f"v{i}")
    last = values[-1]
    finish = rng.randrange(3)
    if finish == 0:
        nodes.append(helper.make_node("Cast", [last], ["result"], to=t))
    elif finish == 1:
        nodes += [helper.make_node("Cast", [last], ["lc"], to=t), helper.make_node("ReduceMax", ["lc"], ["lr"], keepdims=0),
                  helper.make_node("Mul", ["base", "lr"], ["result"])]
    else:
        nodes += [helper.make_node("Cast", [last], ["lc"], to=t), helper.make_node("Expand", ["lc", "bs"], ["result"]),
                  helper.make_node("Shape", ["base"], ["bs"])]
        nodes = nodes[:-3] + [nodes[-1], nodes[-3], nodes[-2]]
    dims = lambda prefix: [f"{prefix}0", f"{prefix}1"] if rng.random() < 0.9 else rng.choice([[f"{prefix}0"], [], None])  # noqa: E731
    graph = helper.make_graph(
        nodes, "fuzz", [helper.make_tensor_value_info("base", t, dims("m"))] +
        [helper.make_tensor_value_info(name, rng.choice([t, t, t, rng.choice(_onnx_types())]), dims(name)) for name in inputs],
        [helper.make_tensor_value_info("result", t, dims("r"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", OPSET)], ir_version=rng.choice([13, 13, 13, 10, 3]))
    return model.SerializeToString()


def op_onnx(rng, v: View) -> str:
    import onnx
    from onnx import helper

    f = v.f
    functions = [p for p in v.datasets if p.startswith("/update_types/") and "/function." in p]
    if not functions:
        return op_new_param(rng, v)
    path = rng.choice(functions)
    dtype_name = path.rsplit("function.", 1)[1]
    if dtype_name not in DTYPE_NAMES:
        dtype_name = "float32"
    group = f[_parent_and_name(path)[0]]
    definition = read_attr_bytes(group, "definition") or b"{}"
    try:
        inputs = list(json.loads(definition).get("inputs", ["s"]))
        inputs = [i for i in inputs if isinstance(i, str)]
    except (ValueError, AttributeError):
        inputs = ["s"]
    try:
        model_bytes = bytes(np.asarray(f[path][()], dtype=np.uint8).tobytes())
    except Exception:  # noqa: BLE001
        model_bytes = b""
    kind = rng.randrange(6)
    what = ""
    if kind <= 2:
        new = random_function(rng, dtype_name, inputs)
        what = "random graph"
    else:
        model = onnx.ModelProto()
        try:
            model.ParseFromString(model_bytes)
        except Exception:  # noqa: BLE001
            model = onnx.load_from_string(random_function(rng, dtype_name, inputs))
        graph = model.graph
        if kind == 3 and graph.node:
            node = rng.choice(graph.node)
            choice = rng.randrange(4)
            if choice == 0:
                node.op_type = rng.choice(ONNX_OPS_UNARY + ONNX_OPS_BINARY + ONNX_OPS_OTHER)
            elif choice == 1:
                node.attribute.extend([helper.make_attribute(rng.choice(["to", "axis", "keepdims", "perm", "direction"]),
                                                             rng.choice([1, -1, 2**40, [0, 1], "LEFT", 1.5]))])
            elif choice == 2 and node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(["base", *inputs, "result", "", "nowhere"])
            else:
                graph.node.insert(0, _random_constant(rng, rng.choice(["base", "s", "k", "result"])))
            what = f"node {node.op_type} edit {choice}"
        elif kind == 4:
            choice = rng.randrange(4)
            if choice == 0 and graph.input:
                graph.input[rng.randrange(len(graph.input))].type.tensor_type.elem_type = rng.choice(_onnx_types() + [0, 40])
            elif choice == 1:
                model.ir_version = rng.choice([0, 3, 13, 14, 2**40])
            elif choice == 2 and graph.input:
                tt = graph.input[rng.randrange(len(graph.input))].type.tensor_type
                tt.ClearField("shape")
                for _ in range(rng.randrange(0, 4)):
                    tt.shape.dim.add().dim_value = rng.choice([0, 1, 8, 6, 2**40])
            else:
                graph.output[0].type.tensor_type.elem_type = rng.choice(_onnx_types())
            what = f"signature edit {choice}"
        else:
            data = bytearray(model.SerializeToString())
            for _ in range(rng.randrange(1, 4)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            new = bytes(data)
            what = "bytes flipped"
        if kind != 5:
            new = model.SerializeToString()
    del f[path]
    target = path if rng.random() < 0.85 else _parent_and_name(path)[0] + "/function." + rng.choice(DTYPE_NAMES)
    if target in f:
        del f[target]
    f.create_dataset(target, data=np.frombuffer(new, np.uint8) if new else np.zeros(0, np.uint8))
    return f"onnx {target}: {what}"


STRUCTURAL = [  # (weight, operation)
    (22, op_json_attr), (5, op_plain_attr), (6, op_attr_type), (4, op_add_attr), (2, op_del_attr), (6, op_link),
    (4, op_remove), (4, op_rename), (3, op_add_group), (2, op_committed_type), (16, op_dataset), (4, op_low_level_dataset),
    (7, op_raw_chunk), (3, op_new_dataset), (8, op_new_param), (3, "splice"), (0, op_onnx),
]


# ---------------------------------------------------------------- byte operations


def _pick_block_position(rng: random.Random, layout: hdf5bytes.Layout, n: int) -> int:
    blocks = [b for b in layout.blocks if b.end <= n]
    if not blocks:
        return rng.randrange(n)
    block = rng.choice(blocks)
    messages = [m for m in block.messages if m.body < block.end and m.size]
    if messages and rng.random() < 0.85:
        interesting = [m for m in messages if m.type in (0x01, 0x03, 0x05, 0x06, 0x08, 0x0B, 0x0C, 0x15, 0x02, 0x0A, 0x10)]
        m = rng.choice(interesting or messages)
        if rng.random() < 0.15:
            return m.offset + rng.randrange(0, m.body - m.offset)  # the message header: type, size, flags
        return m.body + rng.randrange(m.size)
    return block.start + rng.randrange(max(1, block.end - block.start))


def mutate_bytes(rng: random.Random, data: bytearray, donors: list[bytes], count: int) -> list[str]:
    layout = hdf5bytes.scan(data)
    ops = []
    length_changed_at = None
    for _ in range(count):
        n = len(data)
        if n == 0:
            break
        kind = rng.choices(["flip", "meta_flip", "meta_int", "overwrite", "int", "truncate", "remove", "duplicate",
                            "insert", "splice", "zero", "eof"], weights=[8, 16, 16, 4, 5, 2, 1, 1, 1, 2, 2, 1])[0]
        if kind in ("flip", "meta_flip"):
            pos = rng.randrange(n) if kind == "flip" else _pick_block_position(rng, layout, n)
            data[pos] ^= 1 << rng.randrange(8)
            ops.append(f"{kind} @{pos}")
        elif kind in ("meta_int", "int"):
            width = rng.choice([1, 2, 4, 8])
            pos = _pick_block_position(rng, layout, n) if kind == "meta_int" else rng.randrange(n)
            value = rng.choice(INTERESTING_INTS + [n, n - 1, n + 1, rng.getrandbits(64)]) & ((1 << (8 * width)) - 1)
            if rng.random() < 0.2:
                value = (int.from_bytes(data[pos:pos + width], "little") + rng.choice([-1, 1, 8, -8])) % (1 << (8 * width))
            data[pos:pos + width] = value.to_bytes(width, "little")[: max(0, n - pos)]
            ops.append(f"{kind}{width * 8} @{pos}={value:#x}")
        elif kind == "overwrite":
            pos = rng.randrange(n)
            size = rng.randrange(1, 17)
            data[pos:pos + size] = rng.randbytes(min(size, n - pos))
            ops.append(f"overwrite {size} @{pos}")
        elif kind == "truncate":
            cut = rng.choice([rng.randrange(n), n - rng.randrange(1, min(n, 64) + 1), rng.randrange(min(n, 4096))])
            del data[cut:]
            length_changed_at = min(length_changed_at or cut, cut)
            ops.append(f"truncate @{cut}")
        elif kind in ("remove", "duplicate", "insert"):
            pos = rng.randrange(n)
            size = rng.choice([1, 4, 8, 16, 100, 1000])
            if kind == "remove":
                del data[pos:pos + size]
            elif kind == "duplicate":
                data[pos:pos] = data[pos:pos + size]
            else:
                data[pos:pos] = rng.randbytes(size)
            length_changed_at = min(length_changed_at or pos, pos)
            ops.append(f"{kind} {size} @{pos}")
        elif kind == "splice" and donors:
            donor = rng.choice(donors)
            pos = rng.randrange(min(n, len(donor)))
            size = rng.choice([8, 64, 512, 4096])
            data[pos:pos + size] = donor[pos:pos + size][: n - pos]
            ops.append(f"splice {size} @{pos}")
        elif kind == "zero":
            pos = rng.randrange(n)
            size = rng.choice([4, 16, 256])
            data[pos:pos + size] = bytes(min(size, n - pos))
            ops.append(f"zero {size} @{pos}")
        elif kind == "eof":
            sb = next((b for b in layout.blocks if b.kind == "superblock"), None)
            if sb is not None:
                pos = sb.start + 12 + 2 * layout.offset_size  # end-of-file address
                value = rng.choice([0, 1, n // 2, n - 1, n + 1, n * 2, 2**40, 2**63, 2**64 - 1])
                data[pos:pos + 8] = value.to_bytes(8, "little")
                ops.append(f"eof={value:#x}")
    if ops and rng.random() < 0.85:
        blocks = layout.blocks if length_changed_at is None else [b for b in layout.blocks if b.end + 4 <= length_changed_at]
        fixed = hdf5bytes.fix_checksums(data, hdf5bytes.Layout(layout.offset_size, layout.length_size, blocks))
        ops.append(f"checksums fixed: {fixed}")
    return ops


# ---------------------------------------------------------------- the whole mutation


def mutate(seed_path: Path, out_path: Path, rng: random.Random, donors: list[Path], onnx_bias: bool = False) -> list[str]:
    """Write a mutant of ``seed_path`` to ``out_path``; the operations applied, described."""
    ops: list[str] = []
    out_path.write_bytes(seed_path.read_bytes())
    plan = rng.random()
    structural = 0 if plan < 0.3 else rng.choice([1, 1, 1, 2, 2, 3])
    byte_ops = 0 if 0.3 <= plan < 0.75 else rng.choice([1, 1, 2, 3, 5])
    if structural:
        weights = [w for w, _ in STRUCTURAL]
        if onnx_bias:
            weights[-1] = 60
        try:
            with h5py.File(out_path, "r+") as f:
                for _ in range(structural):
                    op = rng.choices([o for _, o in STRUCTURAL], weights=weights)[0]
                    try:
                        view = View(f)
                        if not view.groups:
                            ops.append("no groups")
                            break
                        ops.append(op_splice_h5(rng, view, donors) if op == "splice" else op(rng, view))
                    except Exception as exc:  # noqa: BLE001 — the operation did not apply; go on
                        ops.append(f"{getattr(op, '__name__', op)} failed: {type(exc).__name__}: {str(exc)[:60]}")
        except Exception as exc:  # noqa: BLE001 — h5py cannot open the seed for writing
            ops.append(f"not editable: {type(exc).__name__}")
            out_path.write_bytes(seed_path.read_bytes())
            byte_ops = byte_ops or 2
    if byte_ops:
        data = bytearray(out_path.read_bytes())
        donor_bytes = [rng.choice(donors).read_bytes()] if donors else []
        ops += mutate_bytes(rng, data, donor_bytes, byte_ops)
        out_path.write_bytes(bytes(data))
    return ops


def _self_test():  # pragma: no cover — python -m tests.fuzz.mutate SEED_DIR
    import sys

    seeds = sorted(Path(sys.argv[1]).glob("*.mdiff"))
    rng = random.Random(1)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / "mutant.mdiff"
    for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 50):
        seed = rng.choice(seeds)
        print(seed.name, mutate(seed, out, rng, seeds))


if __name__ == "__main__":
    _self_test()
