"""The state digest (SPEC.md §4.2) of one ``.safetensors`` file, from its bytes with hashlib and json alone.

A commit's `state_sha256` names the state it makes: every parameter's dtype, shape and sha256, every
file's sha256 and the layout's. The state a single safetensors file holds has no files, the layout of a
folder holding it as model.safetensors (§10.1), and each tensor's sha256 over its bytes as they lie in
the file (little-endian, C order: the canonical bytes of §6.2). So whether a checkpoint holds the state
at a commit can be told without numpy, libhdf5 or replaying a commit: ``mdiff status`` of the checkpoint
just committed starts as fast as ``mdiff log``.

Only a file that the full reader (safetensors.py) would read as it reads it is given a digest; anything
it would refuse or that this reading is unsure of gives None, and the caller reads the file in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

from mdiff.format import canonical_json
from mdiff.format.layout import single_file

# safetensors' dtype tags: mdiff's dtype name and item size (safetensors.py builds its table from this one)
DTYPE_TAGS: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 1), "U8": ("uint8", 1), "I8": ("int8", 1), "I16": ("int16", 2), "U16": ("uint16", 2),
    "I32": ("int32", 4), "U32": ("uint32", 4), "I64": ("int64", 8), "U64": ("uint64", 8), "F16": ("float16", 2),
    "BF16": ("bfloat16", 2), "F32": ("float32", 4), "F64": ("float64", 8),
}
_MAX_HEADER_BYTES = 100_000_000  # as safetensors.py
_MAX_RANK = 32
_BLOCK = 8 << 20


class _Unsure(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Unsure("a name twice")
    return result


def _no_constant(token: str) -> None:
    raise _Unsure(f"{token} is not JSON")


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def state_digest(path: str | os.PathLike[str]) -> str | None:
    """The §4.2 digest of the state the ``.safetensors`` file at ``path`` holds, or None when the file is not
    a regular, well-formed safetensors file of dtypes mdiff knows, tiled as §10 requires."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None
        digest = _digest(fd, before.st_size)
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != (before.st_size, before.st_mtime_ns, before.st_ctime_ns):
            return None  # written meanwhile: not one state
        return digest
    except (_Unsure, OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)


def _read(fd: int, count: int, offset: int) -> bytes:
    data = os.pread(fd, count, offset)
    if len(data) != count:
        raise _Unsure("the file ends early")
    return data


@dataclass(frozen=True)
class Tiling:
    """What a well-formed ``.safetensors`` file holds, as this module reads it: ``head``, its length field and
    header as they lie in the file; ``names``, the tensors in the header's order; ``metadata``; ``tensors``, each
    (first byte, end byte — in the file —, name, mdiff dtype name, shape), in the order of their bytes, which tile
    everything after the header."""

    head: bytes
    names: list[str]
    metadata: dict[str, str] | None
    tensors: list[tuple[int, int, str, str, list[int]]]


def safetensors_tiling(fd: int) -> Tiling | None:
    """The :class:`Tiling` of the safetensors file open at ``fd``; None where the full reader might disagree."""
    try:
        return _tiling(fd, os.fstat(fd).st_size)
    except (_Unsure, OSError, ValueError, RecursionError):
        return None


def tensor_sha256(fd: int, begin: int, end: int) -> str | None:
    """The sha256 of the file's bytes [begin, end) (a tensor of a :class:`Tiling`); None where it ends early."""
    try:
        return _tensor_sha256(fd, begin, end)
    except (_Unsure, OSError):
        return None


def _tensor_sha256(fd: int, begin: int, end: int) -> str:
    sha256 = hashlib.sha256()
    for at in range(begin, end, _BLOCK):
        sha256.update(_read(fd, min(_BLOCK, end - at), at))
    return sha256.hexdigest()


def _digest(fd: int, size: int) -> str:
    tiling = _tiling(fd, size)
    parameters = {name: {"dtype": dtype, "sha256": _tensor_sha256(fd, begin, stop), "shape": shape}
                  for begin, stop, name, dtype, shape in tiling.tensors}
    layout = single_file(tiling.names, tiling.metadata)
    digest_object = {"files": {}, "layout": hashlib.sha256(layout.encode()).hexdigest(), "parameters": parameters}
    return hashlib.sha256(canonical_json.dumps(digest_object).encode("utf-8")).hexdigest()


def _tiling(fd: int, size: int) -> Tiling:
    first = _read(fd, 8, 0)
    (length,) = struct.unpack("<Q", first)
    if length > min(_MAX_HEADER_BYTES, size - 8):
        raise _Unsure("header length")
    raw = _read(fd, length, 8)
    header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    if not isinstance(header, dict):
        raise _Unsure("not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) and _valid_text(k) and _valid_text(v) for k, v in metadata.items())):
        raise _Unsure("__metadata__")
    data_start, data_size = 8 + length, size - 8 - length
    tensors: list[tuple[int, int, str, str, list[int]]] = []  # (begin, end, name, dtype, shape)
    for name, entry in header.items():
        if not name or not _valid_text(name) or not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise _Unsure("entry")
        tag, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(tag, str) or tag not in DTYPE_TAGS:
            raise _Unsure("dtype")
        dtype, itemsize = DTYPE_TAGS[tag]
        if not (isinstance(shape, list) and len(shape) <= _MAX_RANK and all(type(d) is int and d >= 0 for d in shape)):
            raise _Unsure("shape")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(v) is int for v in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data_size):
            raise _Unsure("data_offsets")
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * itemsize:
            raise _Unsure("size")
        tensors.append((offsets[0], offsets[1], name, dtype, shape))
    end = 0
    tensors.sort()
    for begin, stop, *_ in tensors:  # the data tiled: no gap, no overlap, nothing after
        if begin != end:
            raise _Unsure("not tiled")
        end = stop
    if end != data_size:
        raise _Unsure("bytes after the last tensor")
    return Tiling(first + raw, list(header), metadata,
                  [(data_start + begin, data_start + stop, name, dtype, shape) for begin, stop, name, dtype, shape in tensors])
