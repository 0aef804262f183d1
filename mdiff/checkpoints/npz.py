"""The ``.npz`` format: a zip archive with one ``NAME.npy`` member per tensor.

Reading uses :mod:`zipfile` and numpy's own ``.npy`` header parser rather
than ``numpy.load``: ``numpy.load`` gives no way to learn a member's shape
without reading its data, and it allocates whatever shape a header claims
before noticing that the member is too short to hold it. Here every header
is parsed and checked against its member's size on open, so a read
allocates only what the archive can back. Nothing is ever unpickled: a
member whose dtype needs pickle (object arrays) is refused from its header.

Files written here are plain uncompressed npz files that ``numpy.load``
reads. bfloat16 cannot be written: numpy records it as the anonymous void
dtype ``|V2``, which no other reader can interpret.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from mdiff.checkpoints.base import CheckpointReader, Entry, Fetch
from mdiff.checkpoints.reading import (
    ZIP_ERRORS,
    checked_shape,
    element_count,
    fill_from,
    is_valid_name,
    open_regular_file,
    open_zip,
    refuse_invalid_bools,
    zip_data_offsets,
)
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DType, dtype_of

MEMBER_SUFFIX = ".npy"

# Deflate cannot expand data by more than about 1032:1, so a member claiming
# more is a lie, and honoring it would let a small file demand huge buffers.
_MAX_DEFLATE_RATIO = 1032
_MAX_NPY_HEADER_BYTES = 10_000  # numpy's own default limit

# Fixed zip attributes: the archive's bytes must not depend on when or where
# it was written. 1980-01-01 is the earliest date a zip entry can carry.
_ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
_ZIP_CREATE_SYSTEM_UNIX = 3
_ZIP_FILE_MODE = 0o100644 << 16  # a regular file, rw-r--r--

@dataclass(frozen=True)
class _Member:
    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    dtype: DType
    stored_dtype: np.dtype  # as in the file: possibly big-endian
    fortran_order: bool
    header_bytes: int  # where the array data starts within the member


class NpzReader(CheckpointReader):
    """An ``.npz`` file; every member header is validated on open, data read on demand."""

    def __init__(self, path: str):
        self.path = path
        raw = open_regular_file(path)
        self._file = io.BufferedReader(raw)
        try:
            _refuse_non_zip(self._file, path)
            self._zip = open_zip(self._file, path)
            try:
                self._members = _parse_members(self._zip, self._file, os.fstat(raw.fileno()).st_size, path)
            except BaseException:
                self._zip.close()
                raise
        except BaseException:
            self._file.close()
            raise

    def _index(self) -> dict[str, _Member]:
        return self._members

    def read(self, name: str) -> np.ndarray:
        member = self._entry(name)
        if self._file.closed:
            raise ValueError(f"the reader of {self.path} is closed")
        # Fortran-ordered data is the C-ordered transpose: read it so, then transpose.
        stored_shape = member.shape[::-1] if member.fortran_order else member.shape
        array = np.empty(stored_shape, dtype=member.stored_dtype)
        try:
            with self._zip.open(member.info) as stream:
                stream.read(member.header_bytes)  # parsed on open already
                fill_from(stream.readinto, array, self.path, name)  # type: ignore[attr-defined]  # ZipExtFile has it
                if stream.read(1):
                    raise CheckpointError("MD701", f"member {name!r} has bytes after its array data", self.path)
        except ZIP_ERRORS as exc:
            raise CheckpointError("MD701", f"cannot read tensor {name!r}: {exc}", self.path) from None
        refuse_invalid_bools(array, self.path, name)
        if member.fortran_order:
            array = array.T
        return array.astype(member.dtype.value, order="C", copy=False)

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        self._zip.close()
        self._file.close()



def open_reader(path: str) -> NpzReader:
    return NpzReader(path)


# ---------------------------------------------------------------- reading


def _refuse_non_zip(file: Any, path: str) -> None:  # a buffered reader (peek)
    # numpy.load would try to unpickle a file that is not a zip; we say what it is not.
    magic = file.peek(4)[:4]
    file.seek(0)
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise CheckpointError("MD701", f"{os.path.basename(path) or path} is not an .npz file (not a zip archive)", path)


def _parse_members(archive: zipfile.ZipFile, file: BinaryIO, archive_size: int, path: str) -> dict[str, _Member]:
    infos: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        name = _tensor_name(info, path)
        if name in infos:
            raise CheckpointError("MD701", f"the archive holds {info.filename!r} twice; it is ambiguous", path)
        _refuse_implausible_sizes(info, archive_size, path)
        infos[name] = info
    zip_data_offsets(archive, file, path)  # refuses members that share bytes
    return {name: _parse_member(archive, info, name, path) for name, info in infos.items()}


def _tensor_name(info: zipfile.ZipInfo, path: str) -> str:
    if not info.filename.endswith(MEMBER_SUFFIX) or info.is_dir():  # is_dir() fails on an empty name
        raise CheckpointError(
            "MD701", f"archive member {info.filename!r} is not a {MEMBER_SUFFIX} file; not an npz checkpoint", path
        )
    name = info.filename[: -len(MEMBER_SUFFIX)]
    if not is_valid_name(name):
        raise CheckpointError("MD701", f"archive member {info.filename!r} does not name a tensor", path)
    return name


def _refuse_implausible_sizes(info: zipfile.ZipInfo, archive_size: int, path: str) -> None:
    if info.flag_bits & 0x1:
        raise CheckpointError("MD701", f"member {info.filename!r} is encrypted; decrypt the archive first", path)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(
            "MD701",
            f"member {info.filename!r} uses zip compression method {info.compress_type}; "
            "only stored and deflate are supported",
            path,
        )
    if info.header_offset + info.compress_size > archive_size:
        raise CheckpointError("MD701", f"member {info.filename!r} extends past the end of the file", path)
    ratio = 1 if info.compress_type == zipfile.ZIP_STORED else _MAX_DEFLATE_RATIO
    max_size = info.compress_size * ratio
    if info.file_size > max_size:
        raise CheckpointError(
            "MD701", f"member {info.filename!r} claims more data than its compressed bytes can hold", path
        )


def _parse_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, path: str) -> _Member:
    try:
        with archive.open(info) as stream:
            version = npy_format.read_magic(stream)
            if version not in ((1, 0), (2, 0), (3, 0)):
                raise ValueError(f".npy format version {version} is not supported")
            # Version 3.0 only changes the header encoding to UTF-8, which
            # matters for structured dtypes alone, and those are refused.
            read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            shape, fortran_order, stored_dtype = read_header(stream, max_header_size=_MAX_NPY_HEADER_BYTES)
            header_bytes = stream.tell()
    except ZIP_ERRORS as exc:
        raise CheckpointError("MD701", f"member {info.filename!r} is not a valid .npy array ({exc})", path) from None
    dtype = _supported_dtype(stored_dtype, name, path)
    shape = checked_shape(shape, dtype.itemsize, path, name)
    if header_bytes + element_count(shape) * dtype.itemsize != info.file_size:
        raise CheckpointError(
            "MD701", f"member {info.filename!r} holds {info.file_size} bytes, not what its header describes", path
        )
    return _Member(info, shape, dtype, stored_dtype, fortran_order, header_bytes)


def _supported_dtype(stored: np.dtype, name: str, path: str) -> DType:
    if stored.hasobject:
        raise CheckpointError(
            "MD702",
            f"tensor {name!r} holds Python objects, which only pickle can load; mdiff never unpickles. "
            "Save numeric arrays instead",
            path,
        )
    if stored.kind == "V":
        raise CheckpointError(
            "MD702",
            f"tensor {name!r} has the void/structured dtype {stored.str}; numpy writes bfloat16 so. "
            "Store bfloat16 tensors in .safetensors instead",
            path,
        )
    try:
        return dtype_of(np.empty(0, dtype=stored))
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(
            "MD702", f"tensor {name!r} has dtype {stored}, which mdiff does not support", path
        ) from None


# ---------------------------------------------------------------- writing


def check_writable(entries: Sequence[Entry], metadata: dict[str, str] | None, path: str) -> None:
    for name, _, dt in entries:
        if dt.name == "bfloat16":
            raise CheckpointError(
                "MD702",
                f"tensor {name!r} is bfloat16, which .npz cannot store portably; use .safetensors for bfloat16",
                path,
            )
        # A diff may carry any parameter name (§5.2); these an .npz cannot hold: a refusal of the
        # output format (MD703, SPEC.md §10), not a programming error.
        if "\0" in name:
            raise CheckpointError("MD703", f"tensor name {name!r} contains NUL, which zip member names cannot; "
                                           "write .safetensors or .pt", path)
        if len((name + MEMBER_SUFFIX).encode("utf-8")) > 0xFFFF:
            raise CheckpointError("MD703", f"tensor name {name[:40]!r}... is longer than a zip member name "
                                           "can be (65,535 bytes with .npy); write .safetensors or .pt", path)
    if metadata:
        raise CheckpointError(
            "MD700", "an .npz file cannot hold metadata; write .safetensors to keep it, or drop it", path
        )


def write(
    file: BinaryIO,
    entries: Sequence[Entry],
    fetch: Fetch,
    metadata: dict[str, str] | None,
    template: str | os.PathLike[str] | None = None,  # not used by this format
) -> None:
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, _, _ in entries:
            array = fetch(name)
            info = _member_info(name)
            # zipfile decides up front, from this estimate, whether the member needs ZIP64.
            info.file_size = array.nbytes
            with archive.open(info, "w") as stream:
                npy_format.write_array(stream, array, allow_pickle=False)


def _member_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name + MEMBER_SUFFIX, date_time=_ZIP_DATE_TIME)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = _ZIP_CREATE_SYSTEM_UNIX
    info.external_attr = _ZIP_FILE_MODE
    return info
