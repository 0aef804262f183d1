"""The object header reader's short paths (issue 31.3) agree with its general reader, header by header, and the
walk's records and findings are the same with them as without: HeaderReader._plain_header (a version 2 header
read in place, and one like the last read by its model) against HeaderReader._decoded."""

from __future__ import annotations

import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

from mdiff.hdf5walk import DEFAULT_LIMITS, walk_file
from mdiff.hdf5walk.object_header import DecodedHeader, HeaderReader

_O = 8  # offset and length sizes of the headers built here


def _state(header: DecodedHeader) -> tuple:
    return header.version, header.messages, header.flags, header.first, header.counts, repr(header.fault)


def _message(mtype: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack("<BHB", mtype, len(body), flags) + body


def _v2_header(messages: bytes) -> bytes:
    """A version 2 object header of one chunk (a 2-byte chunk size), its checksum left 0 (the reader does not
    check it; libhdf5 does)."""
    return b"OHDR" + bytes([2, 0x01]) + struct.pack("<H", len(messages)) + messages + b"\0" * 4


def _continuation(at: int, length: int) -> bytes:
    return _message(0x10, struct.pack("<QQ", at, length))


def _chunk(messages: bytes) -> bytes:
    return b"OCHK" + messages + b"\0" * 4


def _layout(address: int) -> bytes:  # a contiguous layout message of version 3: its data's address and size
    return _message(0x08, bytes([3, 1]) + struct.pack("<QQ", address, 16))


_DATASPACE = _message(0x01, bytes([2, 1, 1, 0]) + struct.pack("<Q", 4))
_DATATYPE = _message(0x03, bytes([0x11, 0x20, 0x1F, 0]) + struct.pack("<I", 4) + struct.pack("<HHBBBBI", 0, 32, 23, 8, 0, 23, 127))


class _File:
    """Bytes laid out at chosen places, read as HeaderReader reads a file."""

    def __init__(self, size: int = 1 << 14):
        self.data = bytearray(size)

    def put(self, at: int, raw: bytes) -> int:
        self.data[at:at + len(raw)] = raw
        return at

    def reader(self) -> HeaderReader:
        return HeaderReader(lambda n, offset: bytes(self.data[offset:offset + n]), len(self.data), 0, _O, _O)


def _agrees(reader: HeaderReader, address: int) -> DecodedHeader:
    """The header as the reader gives it, once it is what the general reader gives (asked of a fresh reader)."""
    got = reader.header(address)
    general = HeaderReader(reader.read_at, reader.size, 0, _O, _O)._decoded(address)
    assert _state(got) == _state(general)
    return got


def test_a_header_of_one_chunk_and_one_continued_read_in_place() -> None:
    f = _File()
    one = f.put(64, _v2_header(_DATASPACE + _DATATYPE + _layout(4096)))
    chunk = _chunk(_message(0x0C, b"\x03" * 40) + _message(0x0A, b"\0\0"))
    continued = f.put(512, _v2_header(_continuation(1024, len(chunk)) + _message(0x12, b"\x01\0\0\0\0\0\0\0")))
    f.put(1024, chunk)
    reader = f.reader()
    assert reader._plain_header(one) is not None and reader._plain_header(continued) is not None
    assert [t for t, _ in _agrees(f.reader(), one).messages] == [0x01, 0x03, 0x08]
    assert [t for t, _ in _agrees(f.reader(), continued).messages] == [0x10, 0x12, 0x0C, 0x0A]


@pytest.mark.parametrize("case, fault", [
    ("cycle", "object header continuation cycle"),
    ("back to the first chunk", "object header continuation cycle"),
    ("message past its chunk", "truncated structure"),
    ("chunk past the file", "object header block too large"),
    ("continuation without its signature", "bad continuation block signature"),
    ("continuation past the file", "lie outside the file"),
    ("version 1", None),
])
def test_a_header_the_short_path_does_not_read_is_read_by_the_general_reader(case: str, fault: str | None) -> None:
    f = _File(4096)
    at = 64
    if case == "cycle":
        f.put(at, _v2_header(_continuation(1024, 48)))
        f.put(1024, _chunk(_continuation(1024, 48) + b"\0" * 16))
    elif case == "back to the first chunk":
        f.put(at, _v2_header(_continuation(at + 8, 24)))
    elif case == "message past its chunk":
        raw = bytearray(_v2_header(_DATASPACE + _DATATYPE))
        raw[9:11] = struct.pack("<H", 200)  # the first message's size, past the chunk's end
        f.put(at, bytes(raw))
    elif case == "chunk past the file":
        raw = bytearray(_v2_header(_DATASPACE))
        raw[6:8] = struct.pack("<H", 5000)
        f.put(at, bytes(raw))
    elif case == "continuation without its signature":
        f.put(at, _v2_header(_continuation(1024, 40)))
        f.put(1024, b"XXXX" + _DATASPACE + b"\0" * 4)
    elif case == "continuation past the file":
        f.put(at, _v2_header(_continuation(4000, 400)))
    else:  # a version 1 header: version, reserved, 1 message, reference count 1, its messages' size
        f.put(at, struct.pack("<BBHII", 1, 0, 1, 1, 16) + b"\0" * 4 + struct.pack("<HHB3x", 0x12, 8, 0) + b"\0" * 8)
    reader = f.reader()
    assert reader._plain_header(at) is None
    header = _agrees(f.reader(), at)
    assert (header.fault is None) if fault is None else fault in str(header.fault)


def test_headers_alike_are_read_by_their_model_and_others_are_not() -> None:
    f = _File()
    places = [64 + 256 * i for i in range(8)]
    for i, at in enumerate(places[:5]):  # alike but for where their data lies
        f.put(at, _v2_header(_DATASPACE + _DATATYPE + _layout(8192 + 16 * i)))
    f.put(places[5], _v2_header(_DATASPACE + _DATATYPE.replace(b"\x11\x20", b"\x11\x21") + _layout(8192)))  # its type's bits
    f.put(places[6], _v2_header(_DATASPACE + _message(0x03, _DATATYPE[4:], flags=1) + _layout(8192)))  # a message's flags
    f.put(places[7], _v2_header(_message(0x02, _DATASPACE[4:]) + _DATATYPE + _layout(8192)))  # a message's type
    reader = f.reader()
    for at in places:
        _agrees(reader, at)
    assert reader._template is not None and reader._template[4].messages[2][0] == 0x08  # the layout's body varies
    got = [reader.header(at) for at in places[2:5]]
    assert [int.from_bytes(h.messages[2][1][2:10], "little") for h in got] == [8192 + 32, 8192 + 48, 8192 + 64]


def _attribute(value: bytes) -> bytes:
    """An attribute message's body (version 3) of a scalar fixed-length string named "update" holding ``value``."""
    return bytes([3, 0]) + struct.pack("<HHH", 7, 8, 4) + b"\0" + b"update\0" + b"\x13\0\0\0" + struct.pack("<I", len(value)) \
        + bytes([2, 0, 0, 0]) + value


def _group_header(f: _File, at: int, chunk_at: int, value: bytes, member: int, chunk: bytes | None = None) -> int:
    """A group's header as mdiff's writer leaves it: an attribute in its first chunk, its link in a continuation."""
    chunk = chunk if chunk is not None else _chunk(_message(0x02, b"\0\0" + b"\xff" * 16) + _message(0x06, b"\x01\x00\x03xor" + struct.pack("<Q", member)))
    f.put(chunk_at, chunk)
    return f.put(at, _v2_header(_continuation(chunk_at, len(chunk)) + _message(0x0A, b"\0\0") + _message(0x0C, _attribute(value))))


def test_headers_of_two_chunks_alike_are_read_by_their_model_and_others_are_not() -> None:
    f = _File(1 << 15)
    places = [64 + 512 * i for i in range(14)]
    for i, at in enumerate(places[:6]):  # alike but for their attribute's value, their member and where their links lie
        _group_header(f, at, at + 256, b"v%03d" % i + b"\x07" * 36, 8192 + 64 * i)
    _group_header(f, places[6], places[6] + 256, b"v%03d" % 6 + b"\x07" * 36, 8192,  # a link message's flags
                  _chunk(_message(0x02, b"\0\0" + b"\xff" * 16) + _message(0x06, b"\x01\x00\x03xor" + struct.pack("<Q", 8192), flags=1)))
    _group_header(f, places[7], places[7] + 256, b"v%03d" % 7 + b"\x07" * 36, 8192,  # a link info message's body
                  _chunk(_message(0x02, b"\0\0" + b"\xfe" * 16) + _message(0x06, b"\x01\x00\x03xor" + struct.pack("<Q", 8192))))
    at = _group_header(f, places[8], places[8] + 256, b"v%03d" % 8 + b"\x07" * 36, 8192)
    f.put(at + 10, struct.pack("<Q", at + 8))  # a continuation back to its own first chunk (a cycle)
    _group_header(f, places[9], places[9] + 256, b"v%03d" % 9 + b"\x07" * 36, 8192)
    f.put(places[9] + 256, b"OCHX")  # the continuation's signature
    at = _group_header(f, places[10], places[10] + 256, b"v%03d" % 10 + b"\x07" * 36, 8192)
    f.put(at + 10, struct.pack("<Q", (1 << 15) - 40))  # a continuation that runs past the file
    at = _group_header(f, places[11], places[11] + 256, b"v%03d" % 11 + b"\x07" * 36, 8192)
    f.put(at + 18, struct.pack("<Q", 47))  # a continuation of another length
    at = _group_header(f, places[12], places[12] + 256, b"v%03d" % 12 + b"\x07" * 36, 8192)  # read by the model, but
    f.put(at + 8 + 20 + 4 + 4 + 9 + 7, b"f")  # its attribute's name is another ("updatf")
    _group_header(f, places[13], places[13] + 256, b"v%03d" % 13 + b"\x07" * 36, 8192,  # and its link's ("xos")
                  _chunk(_message(0x02, b"\0\0" + b"\xff" * 16) + _message(0x06, b"\x01\x00\x03xos" + struct.pack("<Q", 8192))))
    reader = f.reader()
    asked = []
    for at in places:  # each asked what the walk asks of a group, as it is read
        _agrees(reader, at)
        asked.append((reader.compact_links(at), reader.attribute_profiles(at)))
    pair = reader._pair
    assert pair is not None and pair.places == (0, 2, 4)  # the continuation, the attribute, the link
    got = [reader.header(at) for at in places[2:6]]
    assert [int.from_bytes(h.messages[4][1][-8:], "little") for h in got] == [8192 + 128, 8192 + 192, 8192 + 256, 8192 + 320]
    assert [h.messages[2][1][-40:-36] for h in got] == [b"v002", b"v003", b"v004", b"v005"]
    assert all(h.messages is not pair.model.messages and h.flags is pair.model.flags for h in got)
    assert not any(f.reader().header(at).flags is pair.model.flags for at in places[6:12])  # the others: decoded whole
    # what the walk asks of them, read from the model's answers: as of a header decoded whole
    assert pair.model.memo is not None and "links" in pair.model.memo and "attributes" in pair.model.memo
    assert [asked[i] == (f.reader().compact_links(at), f.reader().attribute_profiles(at)) for i, at in enumerate(places)] == [True] * 14
    assert reader.header(places[12]).model is not None and reader.header(places[13]).model is not None
    assert asked[12][1] is not None and b"updatf" in asked[12][1] and asked[13][0] == [(b"xos", 0, 8192)]
    assert reader.compact_links(places[5]) == [(b"xor", 0, 8192 + 320)]
    assert reader.attribute_profiles(places[5])[b"update"][2] == b"v005" + b"\x07" * 36
    assert reader.header(places[8]).fault is not None and "signature" in str(reader.header(places[9]).fault)


def _mixed_file(path: Path) -> None:
    """Groups and datasets of several kinds, attributes on some, as a diff of many parameters holds them."""
    with h5py.File(path, "w", libver=("v110", "v112")) as f:  # version 2 headers, layouts of version 4 at most
        parameters = f.create_group("parameters")
        for i in range(60):
            group = parameters.create_group(f"p{i:03d}")
            group.attrs["update"] = np.bytes_(f'{{"type":"dense","n":{i * 7919}}}'.encode())
            shape = (4,) if i % 5 else (3, i + 1)
            if i % 7 == 3:
                data = group.create_dataset("xor", data=np.arange(np.prod(shape), dtype="<u4").reshape(shape),
                                            chunks=shape, compression="gzip")
            else:
                data = group.create_dataset("xor", data=np.arange(np.prod(shape), dtype="<f4").reshape(shape))
            if i % 11 == 5:
                data.attrs["note"] = np.bytes_(b"x" * (i + 1))
        f.attrs["format"] = np.bytes_(b"mdiff")


def test_the_walk_finds_the_same_with_the_short_paths_as_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mixed.h5"
    _mixed_file(path)
    inventory, findings = walk_file(path, DEFAULT_LIMITS)
    fast = (inventory.to_records(), [(x.code, x.path, x.message) for x in findings])
    monkeypatch.setattr(HeaderReader, "_plain_header", lambda self, address: None)
    inventory, findings = walk_file(path, DEFAULT_LIMITS)
    assert fast == (inventory.to_records(), [(x.code, x.path, x.message) for x in findings])
    assert len(fast[0][1]) == 1 + 1 + 60 * 2 and fast[1] == []


def test_a_read_that_fails_is_the_general_readers_fault_as_before() -> None:
    f = _File()
    at = f.put(64, _v2_header(_continuation(8192, 40)))
    f.put(8192, _chunk(_DATASPACE + b"\0" * 12))  # past the window of 4 KiB the header is read in

    def read_at(n: int, offset: int) -> bytes:
        if offset >= 8192:
            raise OSError("the store did not answer")
        return bytes(f.data[offset:offset + n])

    reader = HeaderReader(read_at, len(f.data), 0, _O, _O)
    header = reader.header(at)
    assert _state(header) == _state(HeaderReader(read_at, len(f.data), 0, _O, _O)._decoded(at))
    assert isinstance(header.fault, OSError) and [t for t, _ in header.messages] == [0x10]
