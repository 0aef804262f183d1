"""SPEC.md §8.1: an object's link count (HDF5's reference count), read from its object header's bytes.

libhdf5 reports the count only through ``H5Oget_info``, whose deprecated form (all h5py offers) also
sizes the header and the object's attribute and link storage: a damaged B-tree or heap there fails the
call for an object every other reader opens. So the walk reads the count itself, as an independent
reader does (mdiff-js's h5raw.js): the prefix of a version 1 header, or the refcount message (0x16)
of a version 2 header and its continuation chunks (1 when there is none). Every read is bounded by
the file; anything that does not decode is :class:`HeaderError` (MD513).
"""

from __future__ import annotations

import os

_V2_SIGNATURE = b"OHDR"
_CONTINUATION_SIGNATURE = b"OCHK"
_REFCOUNT = 0x16
_CONTINUATION = 0x10
_MAX_BLOCK = 1 << 30
_MAX_BLOCKS = 100_000


class HeaderError(ValueError):
    """An object header that does not decode."""


class HeaderReader:
    """Reads object headers of the open file ``fd`` (``size`` bytes; HDF5 addresses start at ``base``)."""

    def __init__(self, fd: int, size: int, base: int, offset_size: int, length_size: int):
        self.fd, self.size, self.base = fd, size, base
        self.offset_size, self.length_size = offset_size, length_size

    def _read(self, address: int, n: int, up_to: bool = False) -> bytes:
        start = self.base + address
        if address < 0 or start >= self.size or (not up_to and start + n > self.size):
            raise HeaderError(f"bytes {address}..{address + n} lie outside the file")
        n = min(n, self.size - start)
        data = os.pread(self.fd, n, start)
        if len(data) != n:
            raise HeaderError("unexpected end of file")
        return data

    def _int(self, data: bytes, at: int, width: int) -> int:
        if at + width > len(data):
            raise HeaderError("truncated structure")
        return int.from_bytes(data[at:at + width], "little")

    def link_count(self, address: int) -> int:
        """The reference count of the object whose header is at ``address``."""
        first = self._read(address, 16, up_to=True)
        if first[:4] != _V2_SIGNATURE:
            return self._int(first, 4, 4)  # version 1: version, reserved, messages (2), reference count (4)
        for mtype, body in self._v2_messages(address, first):
            if mtype == _REFCOUNT:
                return self._int(body, 1, 4)  # version (1), count (4)
        return 1

    def _v2_messages(self, address: int, first: bytes):
        if len(first) < 6 or first[4] != 2:
            raise HeaderError("object header version is not 2")
        flags = first[5]
        prefix = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        head = self._read(address, prefix + width)
        blocks = [(address + prefix + width, self._int(head, prefix, width), False)]
        header = 6 if flags & 0x04 else 4  # a message's type, size, flags (and creation order)
        seen: set[int] = set()
        while blocks:
            if len(seen) >= _MAX_BLOCKS:
                raise HeaderError("too many object header blocks")
            start, length, continued = blocks.pop(0)
            if start in seen:
                raise HeaderError("object header continuation cycle")
            seen.add(start)
            if length > _MAX_BLOCK:
                raise HeaderError("object header block too large")
            block = self._read(start, length)
            pos, end = 0, len(block)
            if continued:
                if block[:4] != _CONTINUATION_SIGNATURE:
                    raise HeaderError("bad continuation block signature")
                pos, end = 4, len(block) - 4  # a continuation chunk's length includes its checksum
            while end - pos >= header:
                mtype, size = block[pos], self._int(block, pos + 1, 2)
                pos += header
                if pos + size > len(block):
                    raise HeaderError("truncated structure")
                body = block[pos:pos + size]
                pos += size
                if mtype == _CONTINUATION:
                    o, n = self.offset_size, self.length_size
                    blocks.append((self._int(body, 0, o), self._int(body, o, n), True))
                yield mtype, body
