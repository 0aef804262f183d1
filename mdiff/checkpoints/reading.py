"""What the format readers share: fail-closed checks of tensor names and shapes, reads of a
regular file that never go past its end, and zip archives whose members' bytes are their own (MD701)."""

from __future__ import annotations

import io
import math
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

from mdiff.errors import CheckpointError

# numpy 1.x cannot create arrays of more dimensions than this (numpy 2 allows
# 64); refusing more keeps every file we accept loadable by both.
MAX_RANK = 32

# numpy refuses arrays whose byte size (zero dimensions aside) exceeds this.
_MAX_ARRAY_BYTES = int(np.iinfo(np.intp).max)

# Large reads go in slices of this size so that file objects that read via a
# temporary bytes object (zip members) never hold a second copy of a tensor.
_READ_CHUNK = 1 << 24


def is_valid_unicode(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8 (it has no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_valid_name(name: object) -> bool:
    """A tensor name mdiff can carry: a non-empty string of valid Unicode."""
    return isinstance(name, str) and name != "" and is_valid_unicode(name)


def open_regular_file(path: str) -> io.FileIO:
    """Open ``path`` unbuffered for reading; MD701 unless it is a regular file."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckpointError("MD701", "not a regular file; give the path of a checkpoint file", path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def checked_shape(dims: object, itemsize: int, path: str, name: str) -> tuple[int, ...]:
    """``dims`` as a shape numpy can allocate, or MD701 saying why not."""
    if not isinstance(dims, (list, tuple)):
        raise CheckpointError("MD701", f"tensor {name!r}: shape is {dims!r}, not a list of integers", path)
    if len(dims) > MAX_RANK:
        raise CheckpointError(
            "MD701", f"tensor {name!r} has {len(dims)} dimensions; at most {MAX_RANK} are supported", path
        )
    size = itemsize
    for dim in dims:
        # type() rather than isinstance(): JSON true/false must not pass as 1/0.
        if type(dim) is not int or dim < 0:
            raise CheckpointError(
                "MD701", f"tensor {name!r}: shape {dims!r} is not a list of non-negative integers", path
            )
        size *= max(dim, 1)  # numpy bounds the product of the non-zero dimensions
        if size > _MAX_ARRAY_BYTES:
            raise CheckpointError("MD701", f"tensor {name!r}: shape {dims!r} is too large for any array", path)
    return tuple(dims)


def element_count(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def fill_from(
    readinto: Callable[[memoryview], int | None], target: np.ndarray | bytearray, path: str, name: str
) -> None:
    """Fill a C-contiguous array or a bytearray from a stream; MD701 if the stream ends first."""
    view = target.reshape(-1).view(np.uint8).data if isinstance(target, np.ndarray) else memoryview(target)
    filled = 0
    while filled < len(view):
        count = readinto(view[filled : filled + _READ_CHUNK])
        if not count:
            raise CheckpointError(
                "MD701",
                f"the file ends inside tensor {name!r}; it is truncated or was changed while open",
                path,
            )
        filled += count


def refuse_invalid_bools(array: np.ndarray, path: str, name: str) -> None:
    """A bool is stored as byte 0 or 1; anything else would make numpy misbehave."""
    if array.dtype == np.bool_ and array.size and int(array.view(np.uint8).max()) > 1:
        raise CheckpointError(
            "MD701", f"bool tensor {name!r} holds a byte other than 0 or 1; the file is corrupt", path
        )


# ---------------------------------------------------------------- zip archives (.npz, PyTorch's .pt/.bin)

# What a corrupt archive can make zipfile (or a parser of its members) raise.
ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    OverflowError,
    RuntimeError,  # zipfile: encrypted members; RecursionError is one too
    NotImplementedError,
    SyntaxError,
)

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, …, file name length, extra field length


def open_zip(file: Any, path: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(file, "r")
    except ZIP_ERRORS as exc:
        raise CheckpointError("MD701", f"the zip archive is corrupt ({exc})", path) from None


def zip_data_offsets(archive: zipfile.ZipFile, file: BinaryIO, path: str) -> dict[str, int]:
    """Where each member's data starts in the file, by name; MD701 unless every member's bytes — local
    header, name, extra field, compressed data — are its own.

    A zip bomb can point many members at one deflate stream (local headers whose extra fields
    reach over the headers after them, or that quote them in stored blocks): zipfile before Python
    3.12.4/3.11.10 reads such an archive and inflates the stream once per member, so a 1 MB file
    becomes 32 × 1 GiB. Checked from the directory and the 30-byte local headers, before any
    member is inflated."""
    spans = []
    offsets: dict[str, int] = {}
    for info in archive.infolist():
        header = b""
        if info.header_offset >= 0:  # zipfile subtracts what it takes for data before the archive
            file.seek(info.header_offset)
            header = file.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise CheckpointError("MD701", f"member {info.filename!r} has no local header where the directory says", path)
        _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        offsets[info.filename] = start
        spans.append((info.header_offset, start + info.compress_size, info.filename))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise CheckpointError("MD701", f"members {first!r} and {second!r} overlap: each member's bytes must be "
                                           "its own (a zip bomb shares one stream among many)", path)
    directory = getattr(archive, "start_dir", None)
    if spans and directory is not None and spans[-1][1] > directory:
        raise CheckpointError("MD701", f"member {spans[-1][2]!r} overlaps the archive's directory", path)
    return offsets
