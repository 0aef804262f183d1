"""Byte-level knowledge of HDF5 files, for mutations that get past the library's checksums.

HDF5 ≥ 1.8 protects its newer metadata structures (superblock v2/v3, version 2 object headers
and their continuation chunks, fixed-array chunk indexes, v2 B-tree headers) with a Jenkins
lookup3 checksum. A random byte flip in them is refused at once, so it never reaches the
decoders behind the checksum — where libhdf5's memory-safety bugs live. This module finds those
structures in a file, lists the messages of each object header, and recomputes the checksums
after a mutation, so that mutated metadata is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_M = 0xFFFFFFFF
SUPERBLOCK_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# Object header message types worth mutating (HDF5 file format spec, IV.A.2).
MESSAGE_NAMES = {
    0x00: "nil", 0x01: "dataspace", 0x02: "link-info", 0x03: "datatype", 0x04: "fill-old", 0x05: "fill",
    0x06: "link", 0x07: "external-files", 0x08: "layout", 0x09: "bogus", 0x0A: "group-info", 0x0B: "filters",
    0x0C: "attribute", 0x0D: "comment", 0x0E: "mtime-old", 0x0F: "shared-table", 0x10: "continuation",
    0x11: "symbol-table", 0x12: "mtime", 0x13: "btree-k", 0x14: "drvinfo", 0x15: "attribute-info", 0x16: "refcount",
    0x17: "fsinfo",
}


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, as H5_checksum_lookup3 computes it."""
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & _M
    i = 0
    frm = int.from_bytes
    while length > 12:
        a = (a + frm(data[i:i + 4], "little")) & _M
        b = (b + frm(data[i + 4:i + 8], "little")) & _M
        c = (c + frm(data[i + 8:i + 12], "little")) & _M
        a = (a - c) & _M; a ^= _rot(c, 4); c = (c + b) & _M
        b = (b - a) & _M; b ^= _rot(a, 6); a = (a + c) & _M
        c = (c - b) & _M; c ^= _rot(b, 8); b = (b + a) & _M
        a = (a - c) & _M; a ^= _rot(c, 16); c = (c + b) & _M
        b = (b - a) & _M; b ^= _rot(a, 19); a = (a + c) & _M
        c = (c - b) & _M; c ^= _rot(b, 4); b = (b + a) & _M
        i += 12
        length -= 12
    if length == 0:
        return c
    tail = bytes(data[i:]) + bytes(12 - length)
    a = (a + frm(tail[0:4], "little")) & _M
    b = (b + frm(tail[4:8], "little")) & _M
    c = (c + frm(tail[8:12], "little")) & _M
    c ^= b; c = (c - _rot(b, 14)) & _M
    a ^= c; a = (a - _rot(c, 11)) & _M
    b ^= a; b = (b - _rot(a, 25)) & _M
    c ^= b; c = (c - _rot(b, 16)) & _M
    a ^= c; a = (a - _rot(c, 4)) & _M
    b ^= a; b = (b - _rot(a, 14)) & _M
    c ^= b; c = (c - _rot(b, 24)) & _M
    return c


@dataclass
class Message:
    offset: int  # of the message header
    type: int
    size: int
    body: int  # offset of the body


@dataclass
class Block:
    """A checksummed structure: the checksum of data[start:end] is stored at data[end:end + 4]."""

    kind: str
    start: int
    end: int
    messages: list[Message] = field(default_factory=list)


@dataclass
class Layout:
    offset_size: int = 8
    length_size: int = 8
    blocks: list[Block] = field(default_factory=list)


def _u(data, pos: int, width: int) -> int:
    return int.from_bytes(data[pos:pos + width], "little")


def _valid(data, start: int, end: int) -> bool:
    return 0 <= start < end and end + 4 <= len(data) and lookup3(bytes(data[start:end])) == _u(data, end, 4)


def _messages(data, start: int, end: int, creation_order: bool) -> list[Message]:
    out = []
    header = 6 if creation_order else 4
    pos = start
    while pos + header <= end:
        mtype, size = data[pos], _u(data, pos + 1, 2)
        if pos + header + size > end:
            break
        out.append(Message(pos, mtype, size, pos + header))
        pos += header + size
    return out


def scan(data) -> Layout:
    """Every checksummed structure of ``data`` whose checksum is currently valid."""
    layout = Layout()
    n = len(data)
    # superblock (at 0 or a power of two ≥ 512)
    base = 0
    while base + 48 <= n:
        if data[base:base + 8] == SUPERBLOCK_SIGNATURE:
            if data[base + 8] in (2, 3):
                layout.offset_size, layout.length_size = data[base + 9] or 8, data[base + 10] or 8
                end = base + 12 + 4 * layout.offset_size
                if _valid(data, base, end):
                    layout.blocks.append(Block("superblock", base, end))
            elif data[base + 8] in (0, 1):
                layout.offset_size, layout.length_size = data[base + 13] or 8, data[base + 14] or 8
            break
        base = 512 if base == 0 else base * 2
    O, L = layout.offset_size, layout.length_size
    continuations: list[tuple[int, int, bool]] = []
    pos = data.find(b"OHDR")
    while pos >= 0:
        if pos + 8 <= n and data[pos + 4] == 2:
            flags = data[pos + 5]
            head = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
            width = 1 << (flags & 3)
            size = _u(data, pos + head, width)
            end = pos + head + width + size
            if _valid(data, pos, end):
                messages = _messages(data, pos + head + width, end, bool(flags & 0x04))
                layout.blocks.append(Block("OHDR", pos, end, messages))
                for m in messages:
                    if m.type == 0x10 and m.size >= O + L:
                        continuations.append((_u(data, m.body, O), _u(data, m.body + O, L), bool(flags & 0x04)))
        pos = data.find(b"OHDR", pos + 4)
    for address, length, creation_order in continuations:
        if 0 < address < n and data[address:address + 4] == b"OCHK" and length > 8:
            end = address + length - 4
            if _valid(data, address, end):
                layout.blocks.append(Block("OCHK", address, end, _messages(data, address + 4, end, creation_order)))
    for sig, size in ((b"FAHD", 8 + L + O), (b"BTHD", 18 + O + L), (b"EAHD", 0)):
        pos = data.find(sig)
        while pos >= 0 and size:
            if _valid(data, pos, pos + size):
                layout.blocks.append(Block(sig.decode(), pos, pos + size))
            pos = data.find(sig, pos + 4)
    return layout


def fix_checksums(data: bytearray, layout: Layout) -> int:
    """Recompute the checksum of every block in ``layout`` (found before the mutation); how many changed."""
    changed = 0
    for block in layout.blocks:
        if block.end + 4 > len(data):
            continue
        value = lookup3(bytes(data[block.start:block.end])).to_bytes(4, "little")
        if data[block.end:block.end + 4] != value:
            data[block.end:block.end + 4] = value
            changed += 1
    return changed
