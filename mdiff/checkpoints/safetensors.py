"""The ``.safetensors`` format, read and written without the ``safetensors`` package.

Layout: an 8-byte little-endian length N, N bytes of UTF-8 JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}``, then the data buffer; offsets count from the buffer's start.
Tensor data is little-endian and C-ordered.

Our own implementation because the package's numpy API reads whole files,
and we want per-tensor reads and stricter validation. Like the reference
library the writer pads the header with spaces so that data starts at a
multiple of 8 bytes, and the reader requires the tensors' data_offsets to tile
the data buffer exactly (SPEC.md §10): no gap, no overlap, no byte after the
last tensor — no bytes a reader would not see, and none that two tensors
share. This module assumes a little-endian host, as mdiff does.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring as _json_string  # json.dumps' own, ensure_ascii=False
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from mdiff.checkpoints.base import CheckedEntries, CheckpointReader, Entry, Fetch
from mdiff.checkpoints.reading import (
    MAX_RANK,
    checked_shape,
    element_count,
    fill_from,
    is_valid_name,
    is_valid_unicode,
    open_regular_file,
    refuse_invalid_bools,
)
from mdiff.errors import CheckpointError
from mdiff.pages import recycled_array
from mdiff.format.dtypes import DType, dtype_named
from mdiff.format.layout import Layout, single_file

# The reference library refuses longer headers; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000

METADATA_KEY = "__metadata__"

_LENGTH = struct.Struct("<Q")
_ALIGNMENT = 8
_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})
_RUN_BYTES = 8 << 20  # read_many reads at most about this much at once
_GATHER_BYTES = 64 << 10  # the writer copies tensors smaller than this into one buffer
_GATHERED_BYTES = 1 << 20  # which it writes once it holds this much

_DTYPE_BY_TAG: dict[str, DType] = {
    tag: dtype_named(name)
    for tag, name in {
        "BOOL": "bool",
        "U8": "uint8",
        "I8": "int8",
        "I16": "int16",
        "U16": "uint16",
        "I32": "int32",
        "U32": "uint32",
        "I64": "int64",
        "U64": "uint64",
        "F16": "float16",
        "BF16": "bfloat16",
        "F32": "float32",
        "F64": "float64",
    }.items()
}
_TAG_BY_DTYPE_NAME = {dt.name: tag for tag, dt in _DTYPE_BY_TAG.items()}

# Dtypes the safetensors format defines (0.8) but mdiff cannot represent: a
# file holding one is well formed, just out of reach (MD702, not MD701).
_FOREIGN_TAGS = frozenset(
    {"F4", "F6_E2M3", "F6_E3M2", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"}
)


@dataclass(frozen=True, slots=True)  # one per tensor; a header may list 10^6
class _Tensor:
    shape: tuple[int, ...]
    dtype: DType
    offset: int  # absolute position of the first byte in the file
    nbytes: int


class SafetensorsReader(CheckpointReader):
    """A ``.safetensors`` file; the header is validated on open, tensors read on demand."""

    def __init__(self, path: str):
        self.path = path
        self._file = open_regular_file(path)
        try:
            self._tensors, self._metadata, self._has_metadata = _parse_file(self._file, path)
        except BaseException:
            self._file.close()
            raise

    def _index(self) -> dict[str, _Tensor]:
        return self._tensors

    def status(self) -> os.stat_result:
        """The identity and times of the file the tensors are read from (``os.fstat`` of the open file)."""
        return os.fstat(self._file.fileno())

    def read(self, name: str) -> np.ndarray:
        tensor = self._entry(name)
        if self._file.closed:
            raise ValueError(f"the reader of {self.path} is closed")
        array = recycled_array(tensor.shape, tensor.dtype.value, name)  # in a commit: warm pages (pages.py)
        self._file.seek(tensor.offset)
        fill_from(self._file.readinto, array, self.path, name)
        refuse_invalid_bools(array, self.path, name)
        return array

    def read_many(self, names: Sequence[str]) -> list[np.ndarray]:
        """:meth:`read` of each of ``names``: tensors that lie side by side in the file, in this order, are read
        with one read into one buffer (each result a view of it) — many small tensors cost one read, not one each."""
        if self._file.closed:
            raise ValueError(f"the reader of {self.path} is closed")
        tensors = [self._entry(name) for name in names]
        results: list[np.ndarray] = []
        i = 0
        while i < len(tensors):
            j, end = i + 1, tensors[i].offset + tensors[i].nbytes
            # a bool tensor is read alone (read() checks its bytes are 0 or 1)
            while j < len(tensors) and tensors[j].offset == end and end - tensors[i].offset < _RUN_BYTES \
                    and tensors[i].dtype.kind != "bool" and tensors[j].dtype.kind != "bool":
                end += tensors[j].nbytes
                j += 1
            if j - i == 1:
                results.append(self.read(names[i]))
            else:
                run = recycled_array((end - tensors[i].offset,), np.uint8, names[i])
                self._file.seek(tensors[i].offset)
                try:
                    fill_from(self._file.readinto, run, self.path, names[i])
                except CheckpointError:  # the file changed under us: say so of the tensor it cut short
                    results += [self.read(name) for name in names[i:j]]
                else:
                    at = 0
                    for t in tensors[i:j]:
                        results.append(run[at:at + t.nbytes].view(t.dtype.value).reshape(t.shape))
                        at += t.nbytes
            i = j
        return results

    def read_joined(self, names: Sequence[str]) -> np.ndarray:
        """:meth:`CheckpointReader.read_joined`: with one read where the tensors lie side by side in this order (no
        bool among them: read() checks their bytes), each as any other read otherwise."""
        if self._file.closed:
            raise ValueError(f"the reader of {self.path} is closed")
        tensors = [self._entry(name) for name in names]
        start = end = tensors[0].offset if tensors else 0
        for tensor in tensors:
            if tensor.offset != end or tensor.dtype.kind == "bool":
                return super().read_joined(names)
            end += tensor.nbytes
        run = recycled_array((end - start,), np.uint8, names[0] if names else "")
        self._file.seek(start)
        try:
            fill_from(self._file.readinto, run, self.path, names[0] if names else "")
        except CheckpointError:  # the file changed under us: say so of the tensor it cut short
            return super().read_joined(names)
        return run

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    @property
    def order(self) -> list[str]:
        """Tensor names in the order the header lists them (the data's order, for files written by
        the safetensors library and by mdiff)."""
        return list(self._tensors)

    @property
    def layout(self) -> Layout:
        """SPEC.md §10.1: a single file has the layout of a folder holding it as model.safetensors."""
        return single_file(self.order, self._metadata if self._has_metadata else None)

    def close(self) -> None:
        self._file.close()


def open_reader(path: str) -> SafetensorsReader:
    return SafetensorsReader(path)


# ---------------------------------------------------------------- reading


def _parse_file(file: Any, path: str) -> tuple[dict[str, _Tensor], dict[str, str], bool]:
    """(tensors in header order, __metadata__, whether the header has __metadata__)."""
    file_size = os.fstat(file.fileno()).st_size
    header_length = _read_header_length(file, file_size, path)
    raw = _read_bytes(file, header_length, path)
    data_start = _LENGTH.size + header_length
    data_size = file_size - data_start
    usual = _parse_usual(raw, data_start, data_size)
    if usual is not None:
        tensors, metadata, has_metadata = usual
        _refuse_untiled(tensors, data_start, data_size, path)
        return tensors, _parse_metadata(metadata, path), has_metadata
    header = _decode_header(raw, path)
    has_metadata = header.get(METADATA_KEY) is not None
    metadata = _parse_metadata(header.pop(METADATA_KEY, None), path)
    tensors = {
        name: _parse_entry(name, entry, data_start, data_size, path) for name, entry in header.items()
    }
    _refuse_untiled(tensors, data_start, data_size, path)
    return tensors, metadata, has_metadata


def _parse_usual(raw: bytearray, data_start: int, data_size: int) -> tuple[dict[str, _Tensor], Any, bool] | None:
    """The usual header, as :func:`_parse_file` reads it, at the speed of json's own decoder: (the tensors, the
    metadata's JSON, whether it has one) — or None, for the full reading: a header with a backslash (an escape), a
    duplicate key, an entry or a metadata that is not the usual one, anything that is not JSON. json.loads without
    a hook keeps the last of two equal keys; a header without a backslash has no `"` but those around its strings,
    so that it names a key twice exactly when it holds more `"` than the strings of what it decoded to (each tensor:
    three keys and its dtype; the metadata: a key and a value each)."""
    try:
        text = raw.decode("utf-8")
        if "\\" in text:
            return None
        header = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    if type(header) is not dict:
        return None
    strings = len(header)
    has_metadata = header.get(METADATA_KEY) is not None
    metadata = header.pop(METADATA_KEY, None)
    if metadata is not None:
        if type(metadata) is not dict or not all(type(v) is str for v in metadata.values()):
            return None
        strings += 2 * len(metadata)
    tensors = {}
    for name, entry in header.items():
        tensor = _usual_entry(name, entry, data_start, data_size)
        if tensor is None:
            return None
        tensors[name] = tensor
    strings += 4 * len(tensors)
    if text.count('"') != 2 * strings:
        return None
    return tensors, metadata, has_metadata


def _not_safetensors(path: str, why: str, what: str = "is not a safetensors file") -> CheckpointError:
    """MD701 for a file that is no safetensors file at all (text, another format, random bytes)."""
    return CheckpointError("MD701", f"{os.path.basename(path) or path} {what} ({why})", path)


def _read_header_length(file: Any, file_size: int, path: str) -> int:
    if file_size < _LENGTH.size:
        raise _not_safetensors(path, f"it has {file_size} bytes, fewer than the 8 of a header's length")
    (length,) = _LENGTH.unpack(_read_bytes(file, _LENGTH.size, path))
    if length > MAX_HEADER_BYTES:
        raise _not_safetensors(path, f"its first 8 bytes, read as its header's length, say {length} bytes; a "
                                     f"header has at most {MAX_HEADER_BYTES}")
    if length > file_size - _LENGTH.size:
        raise _not_safetensors(path, f"its header would have {length} bytes; the file has {file_size}",
                               "is cut short, or is not a safetensors file")
    return length


def _read_bytes(file: Any, count: int, path: str) -> bytearray:
    buffer = bytearray(count)
    fill_from(file.readinto, buffer, path, "(header)")
    return buffer


class _DuplicateKeyError(ValueError):
    pass


def _object_refusing_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # called once per JSON object: a 10^6-tensor header makes 10^6 of them
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return result


def _refuse_constant(token: str) -> None:
    raise ValueError(f"{token} is not JSON")


def _decode_header(raw: bytearray, path: str) -> dict[str, Any]:
    try:
        header = json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_object_refusing_duplicates,
            parse_constant=_refuse_constant,
        )
    except _DuplicateKeyError as exc:
        raise CheckpointError(
            "MD701", f"the header names {exc.args[0]!r} twice; the file is ambiguous", path
        ) from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise _not_safetensors(path, f"its header is not UTF-8 JSON: {str(exc)[:200]}") from None
    if not isinstance(header, dict):
        raise _not_safetensors(path, f"its header is a JSON {type(header).__name__}, not an object")
    return header


def _parse_metadata(value: Any, path: str) -> dict[str, str]:
    if value is None:  # absent, or null as the reference library allows
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and is_valid_unicode(k) and is_valid_unicode(v)
        for k, v in value.items()
    ):
        raise CheckpointError("MD701", f"{METADATA_KEY} must map strings to strings", path)
    return value


def _usual_entry(name: str, entry: Any, data_start: int, data_size: int) -> _Tensor | None:
    """The usual entry, taken in one pass (a header may list 10^5 tensors): a dtype mdiff has, dimensions > 0,
    offsets within the data; None for any other, which _parse_entry looks at in full."""
    if type(entry) is dict and len(entry) == 3:
        tag, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        dtype = _DTYPE_BY_TAG.get(tag) if type(tag) is str else None
        if dtype is not None and type(shape) is list and len(shape) <= MAX_RANK and type(offsets) is list \
                and len(offsets) == 2 and all(type(d) is int and d > 0 for d in shape):
            begin, end = offsets
            # dims > 0: the array's size is its bytes, within the file: one numpy can allocate (checked_shape)
            if type(begin) is int and type(end) is int and 0 <= begin <= end <= data_size \
                    and end - begin == math.prod(shape) * dtype.itemsize and is_valid_name(name):
                return _Tensor(tuple(shape), dtype, data_start + begin, end - begin)
    return None


def _parse_entry(name: str, entry: Any, data_start: int, data_size: int, path: str) -> _Tensor:
    # the usual entry, taken in one pass; anything else is looked at in full below, which refuses it as it would have
    usual = _usual_entry(name, entry, data_start, data_size)
    if usual is not None:
        return usual
    if not is_valid_name(name):
        raise CheckpointError("MD701", f"tensor name {name!r} is empty or not valid Unicode", path)
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        raise CheckpointError(
            "MD701", f"tensor {name!r}: entry must be an object with exactly dtype, shape, data_offsets", path
        )
    dtype = _dtype_of_tag(entry["dtype"], name, path)
    shape = checked_shape(entry["shape"], dtype.itemsize, path, name)
    begin, end = _offsets(entry["data_offsets"], name, path)
    nbytes = element_count(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise CheckpointError(
            "MD701",
            f"tensor {name!r}: data_offsets span {end - begin} bytes but shape {list(shape)} "
            f"of {entry['dtype']} needs {nbytes}",
            path,
        )
    if end > data_size:
        raise CheckpointError(
            "MD701",
            f"tensor {name!r} ends at byte {end} of a {data_size}-byte data buffer; the file is truncated",
            path,
        )
    return _Tensor(shape, dtype, data_start + begin, nbytes)


def _dtype_of_tag(tag: Any, name: str, path: str) -> DType:
    if isinstance(tag, str) and tag in _DTYPE_BY_TAG:
        return _DTYPE_BY_TAG[tag]
    if isinstance(tag, str) and tag in _FOREIGN_TAGS:
        raise CheckpointError(
            "MD702",
            f"tensor {name!r} has dtype {tag}, which mdiff does not support; "
            f"convert it to one of {', '.join(_DTYPE_BY_TAG)}",
            path,
        )
    raise CheckpointError("MD701", f"tensor {name!r}: {tag!r} is not a safetensors dtype", path)


def _offsets(value: Any, name: str, path: str) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(type(v) is int for v in value)
        or not 0 <= value[0] <= value[1]
    ):
        raise CheckpointError(
            "MD701", f"tensor {name!r}: data_offsets {value!r} is not [begin, end] with 0 <= begin <= end", path
        )
    return value[0], value[1]


def _refuse_untiled(tensors: dict[str, _Tensor], data_start: int, data_size: int, path: str) -> None:
    """SPEC.md §10: the data_offsets, sorted, tile the data buffer: the first begins at 0, each begins
    where the one before ends, the last ends at the end of the file — as the safetensors library
    requires. Overlaps would let one stored byte feed many tensors; gaps and trailing bytes would
    hide bytes no reader sees."""
    end, previous = 0, None
    for begin, stop, name in sorted((t.offset - data_start, t.offset - data_start + t.nbytes, name)
                                    for name, t in tensors.items()):
        if begin < end:
            raise CheckpointError("MD701", f"tensors {previous!r} and {name!r} share bytes "
                                           f"(data_offsets overlap); the file is corrupt or hostile", path)
        if begin > end:
            where = f"after tensor {previous!r}" if previous is not None else "before the first tensor"
            raise CheckpointError("MD701", f"{begin - end} bytes {where} belong to no tensor "
                                           f"(data_offsets leave a gap); the file is corrupt or hostile", path)
        end, previous = stop, name
    if end != data_size:
        raise CheckpointError("MD701", f"{data_size - end} bytes after the last tensor belong to no tensor; "
                                       "the file is corrupt or hostile", path)


# ---------------------------------------------------------------- writing


def check_writable(entries: Sequence[Entry], metadata: dict[str, str] | None, path: str) -> None:
    """CheckpointError (MD703) for what a safetensors file cannot hold: a tensor named like the
    format's reserved key, or a header larger than readers accept. A diff may carry such a
    parameter, so this is a refusal with a code, not a programming error."""
    for name, _, _ in entries:
        if name == METADATA_KEY:
            raise CheckpointError(
                "MD703", f"{METADATA_KEY!r} is reserved in safetensors and cannot name a tensor; write .npz or .pt", path
            )
    header = _header_bytes(entries, metadata)
    if len(header) > MAX_HEADER_BYTES:
        raise CheckpointError("MD703", f"the header would exceed {MAX_HEADER_BYTES} bytes; split the checkpoint", path)
    if isinstance(entries, CheckedEntries):  # write() is handed these entries next: 10^5 of them, 0.2 s a header
        entries.derived[_HEADER] = (None if metadata is None else dict(metadata), header)


_HEADER = "safetensors header"  # CheckedEntries.derived: (the metadata it was made with, a copy; the header)


def write(
    file: BinaryIO,
    entries: Sequence[Entry],
    fetch: Fetch,
    metadata: dict[str, str] | None,
    template: str | os.PathLike[str] | None = None,  # not used by this format
) -> None:
    made = entries.derived.get(_HEADER) if isinstance(entries, CheckedEntries) else None
    if made is not None and made[0] == metadata:  # type: ignore[index]
        header: bytes = made[1]  # type: ignore[index]
    else:
        header = _header_bytes(entries, metadata)
    file.write(_LENGTH.pack(len(header)))
    file.write(header)
    # small tensors' bytes are copied into one buffer written by the megabyte (10^5 tiny tensors: 10^5 writes
    # less); a large one is written from its own buffer
    gathered = bytearray()
    for name, _, _ in entries:
        array = fetch(name)
        try:
            data = array.data  # its bytes as they lie: no view of them made
        except ValueError:  # a dtype numpy makes no buffer of (bfloat16, float8 from ml_dtypes): its bytes' view
            data = array.reshape(-1).view(np.uint8).data
        if data.nbytes < _GATHER_BYTES and data.c_contiguous:
            gathered += data
            if len(gathered) >= _GATHERED_BYTES:
                file.write(gathered)
                gathered = bytearray()
            continue
        if gathered:
            file.write(gathered)
            gathered = bytearray()
        file.write(array.reshape(-1).view(np.uint8).data)
    if gathered:
        file.write(gathered)


def _header_bytes(entries: Sequence[Entry], metadata: dict[str, str] | None) -> bytes:
    """The header's JSON, as ``json.dumps`` writes the dict of the metadata and each entry (compact separators,
    no ASCII escapes), padded to the alignment. Each entry's text is made by one format, not a dict and two lists
    handed to the encoder: a header of 10^5 tensors is made twice by a write (check_writable, write)."""
    parts = [] if metadata is None else [f"{_json_string(METADATA_KEY)}:{json.dumps(metadata, separators=(',', ':'), ensure_ascii=False)}"]
    offset = 0
    for name, shape, dt in entries:
        nbytes = element_count(shape) * dt.itemsize
        parts.append(f'{_json_string(name)}:{{"dtype":"{_TAG_BY_DTYPE_NAME[dt.name]}","shape":[{",".join(map(str, shape))}],'
                     f'"data_offsets":[{offset},{offset + nbytes}]}}')
        offset += nbytes
    try:
        encoded = ("{" + ",".join(parts) + "}").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (an escape in a file's JSON text): UTF-8 cannot hold it
        raise CheckpointError("MD703", "a safetensors header is UTF-8 JSON text, which cannot hold the lone "
                                       "surrogate in a tensor name or the metadata") from None
    padding = -(_LENGTH.size + len(encoded)) % _ALIGNMENT
    return encoded + b" " * padding
