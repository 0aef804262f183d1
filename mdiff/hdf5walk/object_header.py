"""SPEC.md §8.1: an object's link count and attribute count, read from its object header's bytes.

libhdf5 reports the count only through ``H5Oget_info``, whose deprecated form (all h5py offers) also
sizes the header and the object's attribute and link storage: a damaged B-tree or heap there fails the
call for an object every other reader opens. So the walk reads the count itself, as an independent
reader does (mdiff-js's h5raw.js): the prefix of a version 1 header, or the refcount message (0x16)
of a version 2 header and its continuation chunks (1 when there is none). Every read is bounded by
the file; anything that does not decode is :class:`HeaderError` (MD513).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator

_V2_SIGNATURE = b"OHDR"
_CONTINUATION_SIGNATURE = b"OCHK"
_REFCOUNT = 0x16
_CONTINUATION = 0x10
_ATTRIBUTE = 0x0C
_ATTRIBUTE_INFO = 0x15
_BTREE_SIGNATURE = b"BTHD"
_ATTRIBUTE_NAME_INDEX = 8  # a v2 B-tree's type: attribute names of dense storage
_LINK_INFO = 0x02
_LAYOUT = 0x08
_DATATYPE = 0x03
_DATASPACE, _OLD_FILL_VALUE, _FILL_VALUE, _EXTERNAL_FILES, _FILTER_PIPELINE = 0x01, 0x04, 0x05, 0x07, 0x0B
_GROUP_INFO = 0x0A
_LINK = 0x06
# what libhdf5 makes a dataset's properties of (H5D__open_oid), and a group's creation properties
_DATASET_PROPERTIES = frozenset({_DATASPACE, _DATATYPE, _OLD_FILL_VALUE, _FILL_VALUE, _EXTERNAL_FILES, _LAYOUT,
                                 _FILTER_PIPELINE})
_GROUP_PROPERTIES = frozenset({_LINK_INFO, _GROUP_INFO, _FILTER_PIPELINE})
_LINK_NAME_INDEX, _LINK_ORDER_INDEX = 5, 6  # v2 B-tree types: a group's dense links by name, by creation order
_SYMBOL_TABLE = 0x11
_HEAP_SIGNATURE = b"HEAP"
_GROUP_NODE_SIGNATURE, _SYMBOL_NODE_SIGNATURE = b"TREE", b"SNOD"  # a symbol table's B-tree node, its leaves
_BTREE_K = 0x13  # the superblock extension's message of B-tree K values
_DEFAULT_GROUP_K = (16, 4)  # a group B-tree's internal node K, a symbol table node's K (libhdf5's defaults)
_FRACTAL_HEAP_SIGNATURE = b"FRHP"
_HUGE_OBJECT_INDEXES = (1, 2, 3, 4)  # v2 B-tree types of a fractal heap's huge objects (filtered or not, direct or not)
_BTREE_NODE_PREFIX = 10  # a v2 B-tree node's signature, version, type and checksum
_BTREE_LEAF, _BTREE_INTERNAL = b"BTLF", b"BTIN"
_SHARED = 0x02  # an object header message flag: the message is in a shared message table
_HEAP_ID_BYTES = 8  # an attribute's ID in its fractal heap, in a record of its name index
MAX_ATTRIBUTES_PER_OBJECT = 64  # mdiff defines at most 4 per object; more is hostile (§8.3)
_MAX_RECORDS = 1 << 20  # records a check walks in one v2 B-tree (an attribute name index holds at most 64)
_MAX_DEPTH = 16  # of a v2 B-tree; HDF5 libraries write nodes of 512 bytes, of which 4 levels hold 10^7 links
_NO_FREE_BLOCK = 1  # a local heap's free list offset that ends the list
MIN_NODE, MAX_NODE = 64, 1 << 16  # bytes in a node of that B-tree (libhdf5 writes 512)
_MAX_BLOCK = 1 << 30
_MAX_BLOCKS = 100_000
_WINDOW = 4096  # bytes read at once for a small read (HeaderReader._read)
# a message's type, size and flags in its header: of version 2 (1, 2 and 1 bytes), of version 2 with its creation
# order (2 bytes more), of version 1 (2, 2 and 1 bytes, 3 reserved)
_V2_MESSAGE = struct.Struct("<BHB").unpack_from
_V2_ORDERED_MESSAGE = struct.Struct("<BHBxx").unpack_from
_V1_MESSAGE = struct.Struct("<HHBxxx").unpack_from
_THREE_SIZES = struct.Struct("<HHH").unpack_from  # an attribute message's name, datatype and dataspace sizes
_PLAIN_BLOCKS, _PLAIN_MESSAGES = 4, 256  # past these, a header is left to the general reader (HeaderReader._plain_header)
_RECENT = 4  # object headers whose messages a HeaderReader keeps (each is asked several questions in a row)


ReadAt = Callable[[int, int], bytes]  # (n, offset) -> up to n bytes of the file at offset, as positional_io.pread


class HeaderError(ValueError):
    """An object header that does not decode."""


class DecodedHeader:
    """An object header's messages, up to its first fault: each (type, body) in order, their flags, where each
    type first comes, and the fault (None: the header decoded whole)."""

    __slots__ = ("version", "messages", "flags", "first", "counts", "fault", "memo", "model")

    def __init__(self) -> None:
        self.version = 0  # of the header: 1 or 2 (0: not known, the header does not decode)
        self.messages: list[tuple[int, bytes]] = []
        self.flags: list[int] = []
        self.first: dict[int, int] = {}  # by type: the place of its first message
        self.counts: dict[int, int] = {}  # by type: how many messages of it there are
        self.fault: Exception | None = None
        # what HeaderReader made of it (profile, compact_links), by question: the walk asks a group's twice
        self.memo: dict | None = None
        # the header this one was read by (alike_in) and the places of the messages whose bodies differ
        self.model: tuple[DecodedHeader, tuple[int, ...]] | None = None

    def alike_in(self, places: tuple[int, ...], bodies: list[bytes]) -> DecodedHeader:
        """A header of this one's messages but for the bodies of those at ``places``, which are ``bodies`` (each of
        the same length and type); this one's tables shared. What the walk made of this one (``memo``) is kept for
        the questions no message at ``places`` answers: a group's profile where none is of its properties."""
        other = DecodedHeader.__new__(DecodedHeader)
        other.version, other.flags, other.first, other.counts, other.fault = self.version, self.flags, self.first, self.counts, None
        other.messages = messages = self.messages.copy()
        for place, body in zip(places, bodies):
            messages[place] = (messages[place][0], body)
        other.memo = None
        other.model = (self, places)
        memo = self.memo
        if memo is not None and False in memo and not any(messages[place][0] in _GROUP_PROPERTIES for place in places):
            other.memo = {False: memo[False]}
        return other

    def alike(self, index: int, body: bytes) -> DecodedHeader:
        """A header of this one's messages but for the body of the ``index``-th, which is ``body`` (of the same
        length and type); this one's lists and tables shared (neither is changed once decoded)."""
        other = DecodedHeader.__new__(DecodedHeader)
        other.version, other.flags, other.first, other.counts, other.fault = self.version, self.flags, self.first, self.counts, None
        other.messages = messages = self.messages.copy()
        mtype, before = messages[index]
        messages[index] = (mtype, body)
        other.memo = other.model = None
        memo = self.memo
        if (memo is not None and mtype == _LAYOUT and True in memo and body[:2] == before[:2]
                and (before[1:2] != b"\0" or body[2:4] == before[2:4])):
            # a dataset's profile leaves out where its data lies (HeaderReader.profile: of a layout message, its
            # version and class, and a compact one's size): alike in those, the model's holds
            other.memo = {True: memo[True]}
        return other


_REMEMBERED = 64  # message bodies a HeaderReader keeps of each kind (_remember)


def _attributes_alike(header: DecodedHeader, model: DecodedHeader, places: tuple[int, ...]
                      ) -> dict[bytes, tuple[tuple, int, bytes | None]] | None:
    """HeaderReader.attribute_profiles of ``header``, read by ``model`` but for the bodies at ``places``, from the
    model's: where each of those that is an attribute message equals the model's up to its data (its name,
    datatype and dataspace: all that makes its profile), and none is an attribute info message, the model's
    profiles with those attributes' data. None where that cannot be said (then they are read as any header's)."""
    memo = model.memo
    kept = memo.get("attributes") if memo is not None else None
    if kept is None:
        return None
    found, at_of = kept
    found = dict(found)
    messages, before = header.messages, model.messages
    for place in places:
        mtype, body = messages[place]
        if mtype == _ATTRIBUTE:
            name, at = at_of[place]
            if body[:at] != before[place][1][:at]:
                return None
            profile, size, data = found[name]
            found[name] = (profile, size, None if data is None else body[at:])
        elif mtype == _ATTRIBUTE_INFO:
            return None
    return found


def _links_alike(header: DecodedHeader, model: DecodedHeader, places: tuple[int, ...], o: int
                 ) -> list[tuple[bytes, int, int]] | None:
    """HeaderReader.compact_links of ``header``, read by ``model`` but for the bodies at ``places``, from the
    model's: where each of those that is a link message equals the model's but for its last ``o`` bytes (the
    address it links to), and none is a link info message, the model's links with those addresses. None where
    that cannot be said."""
    memo = model.memo
    if memo is None or not memo.get("links"):
        return None
    links: list[tuple[bytes, int, int]] = memo["links"]
    at: list[int] = memo.get("link places") or []
    if not at:  # the links' places, in order (asked once of a model)
        at = memo["link places"] = [i for i, (t, _) in enumerate(model.messages) if t == _LINK]
    messages, before = header.messages, model.messages
    found = None
    for place in places:
        mtype, body = messages[place]
        if mtype == _LINK:
            if body[:-o] != before[place][1][:-o]:
                return None
            if found is None:
                found = links.copy()
            index = at.index(place)
            found[index] = (found[index][0], 0, int.from_bytes(body[-o:], "little"))
        elif mtype == _LINK_INFO:
            return None
    return links if found is None else found


def _remember(kept: set[bytes], body: bytes) -> None:
    """Keep ``body`` in ``kept``, which holds at most _REMEMBERED (a hostile file's bodies may all differ)."""
    if len(kept) >= _REMEMBERED:
        kept.clear()
    kept.add(body)


def _padded_to_8(size: int) -> int:  # a version 1 attribute message's fields are padded to 8 bytes each
    return (size + 7) & ~7


def _as_it_is(size: int) -> int:
    return size


def _append_messages(block: bytes, pos: int, last: int, limit: int, unpack: Callable[[bytes, int], tuple[int, int, int]],
                     size_of: int, o: int, n: int,
                     into: "DecodedHeader | tuple[list[tuple[int, bytes]], list[int], dict[int, int], dict[int, int]]",
                     continued: list) -> bool:
    """The messages of one chunk of ``block``, their headers (``size_of`` bytes, read by ``unpack``) from ``pos`` up
    to ``last`` and their bodies within ``limit``, appended in order to ``into``'s messages and flags (where each
    type first comes, and how many of it, counted), and each continuation message's (address, length) to
    ``continued``; False at a message that runs past ``limit`` or a continuation too short for its two fields
    (``o``- and ``n``-byte), with the messages before it appended — the one loop of both readers."""
    found, flags, first, counts = (into.messages, into.flags, into.first, into.counts) if isinstance(
        into, DecodedHeader) else into
    add, add_flags = found.append, flags.append
    while pos <= last:
        mtype, size, flag = unpack(block, pos)
        pos += size_of
        stop = pos + size
        if stop > limit:
            return False
        body = block[pos:stop]
        pos = stop
        if mtype == _CONTINUATION:
            if size < o + n:
                return False
            continued.append((int.from_bytes(body[:o], "little"), int.from_bytes(body[o:o + n], "little")))
        if mtype in counts:
            counts[mtype] += 1
        else:
            counts[mtype] = 1
            first[mtype] = len(found)
        add((mtype, body))
        add_flags(flag)
    return True


class _PairModel:
    """A model for headers of two chunks alike (HeaderReader._learn_pair): the first chunk's bytes (``span`` of
    them) and the continuation chunk's, equal in a header alike but for the message bodies at ``spans`` (in the
    first chunk) and ``rest_spans`` (in the continuation, up to its last message's end), which are the bodies of
    the model's messages at ``places``; the continuation message's address lies at ``address`` in the first chunk,
    its length (which must be ``length``) after it, up to the third."""

    __slots__ = ("span", "raw", "spans", "address", "length", "rest", "rest_spans", "model", "places")

    def __init__(self, span: int, raw: bytes, spans: tuple[tuple[int, int], ...], address: tuple[int, int, int], length: int,
                 rest: bytes, rest_spans: tuple[tuple[int, int], ...], model: DecodedHeader, places: tuple[int, ...]):
        self.span, self.raw, self.spans, self.address, self.length = span, raw, spans, address, length
        self.rest, self.rest_spans, self.model, self.places = rest, rest_spans, model, places

    def read(self, reader: HeaderReader, window: bytes, here: int, first: int) -> DecodedHeader | None:
        """The header whose first chunk is ``window[here:here + span]`` (its messages from ``first``, an address),
        decoded by the model where its bytes and its continuation chunk's are the model's but for those bodies;
        None otherwise. The continuation is held to what :meth:`HeaderReader._plain_header` holds it to (its
        bytes are the model's, so its length, signature and messages are; where it lies is checked here)."""
        raw, bodies = self.raw, []
        previous = 0
        for start, end in self.spans:
            if window[here + previous:here + start] != raw[previous:start]:
                return None
            bodies.append(window[here + start:here + end])
            previous = end
        if window[here + previous:here + self.span] != raw[previous:]:
            return None
        at, stop, end = self.address
        chunk, length = int.from_bytes(window[here + at:here + stop], "little"), self.length
        if (int.from_bytes(window[here + stop:here + end], "little") != length or chunk == first
                or reader.base + chunk + length > reader.size):
            return None
        try:
            block = reader._read(chunk, length)
        except HeaderError:
            return None
        rest = self.rest
        previous = 0
        for start, end in self.rest_spans:
            if block[previous:start] != rest[previous:start]:
                return None
            bodies.append(block[start:end])
            previous = end
        if block[previous:len(rest)] != rest[previous:]:
            return None
        return self.model.alike_in(self.places, bodies)


class HeaderReader:
    """Reads object headers of a file of ``size`` bytes through ``read_at(n, offset)`` (``positional_io.pread`` of its
    descriptor, or a remote file's ranged read); HDF5 addresses start at ``base``."""

    def __init__(self, read_at: ReadAt, size: int, base: int, offset_size: int, length_size: int):
        self.read_at, self.size, self.base = read_at, size, base
        self.offset_size, self.length_size = offset_size, length_size
        self._window: tuple[int, bytes] = (0, b"")  # the bytes last read, from that offset (see _read)
        self._recent: dict[int, DecodedHeader] = {}  # by address: the last few headers decoded (see header())
        # the last header of one chunk decoded in full, and the model headers like it are decoded by (_learn)
        self._last_plain: tuple[bytes, int, DecodedHeader] | None = None
        self._template: tuple[int, bytes, int, int, DecodedHeader, int] | None = None
        # the same for headers of two chunks (a group of mdiff's: its attribute, then its links in a continuation)
        self._last_pair: tuple[bytes, int, int, bytes, int, DecodedHeader] | None = None
        self._pair: _PairModel | None = None
        # link info and attribute info messages' bodies found to name no dense storage (their fractal heap's address
        # is not defined): what they say follows from their bytes alone, and most groups of a file hold the same ones
        self._compact_links: set[bytes] = set()
        self._compact_attributes: set[bytes] = set()

    def _read(self, address: int, n: int, up_to: bool = False) -> bytes:
        start = self.base + address
        if address < 0 or start >= self.size or (not up_to and start + n > self.size):
            raise HeaderError(f"bytes {address}..{address + n} lie outside the file")
        n = min(n, self.size - start)
        # A walk reads an object's header in a few small pieces (its prefix, then its blocks), and a writer puts
        # an object's header beside its neighbours': one read of at least _WINDOW bytes serves most of them
        # (10^5 parameters made 1.2 million reads of a few bytes each).
        at, window = self._window
        if at <= start and start + n <= at + len(window):
            return window[start - at:start - at + n]
        ahead = min(max(n, _WINDOW), self.size - start)
        data = self.read_at(ahead, start)
        if len(data) < n:
            raise HeaderError("unexpected end of file")
        if ahead <= _WINDOW:
            self._window = (start, data)
        return data[:n] if len(data) > n else data

    def _int(self, data: bytes, at: int, width: int) -> int:
        if at + width > len(data):
            raise HeaderError("truncated structure")
        return int.from_bytes(data[at:at + width], "little")

    def root_address(self) -> int:
        """The root group's object header address, from the superblock at ``base``."""
        o = self.offset_size
        head = self._read(0, 128, up_to=True)
        if head[8] in (2, 3):  # signature, version, sizes, flags; base, extension, end-of-file, root
            return self._int(head, 12 + 3 * o, o)
        fields = 24 + (4 if head[8] == 1 else 0)  # base, free space, end-of-file, driver; the root's entry
        return self._int(head, fields + 5 * o, o)

    def end_of_file_address(self) -> int:
        """The end-of-file address the superblock at ``base`` records, relative to ``base``: libhdf5 reads nothing
        past it (its end of allocation), whatever the file's size. A superblock that records a base address other
        than its own place has that address moved to its place, and the end-of-file address moved by as much
        (as libhdf5 does)."""
        o = self.offset_size
        head = self._read(0, 128, up_to=True)
        fields = 12 if head[8] in (2, 3) else 24 + (4 if head[8] == 1 else 0)  # up to the base address
        stored_base, eof = self._int(head, fields, o), self._int(head, fields + 2 * o, o)  # base, ext/free space, eof
        undefined = (1 << 8 * o) - 1
        return eof if stored_base == undefined else eof - (stored_base - self.base)

    def messages(self, address: int) -> Iterator[tuple[int, bytes]]:
        """(type, body) of each message of the object header at ``address`` (version 1 or 2), through its
        continuation blocks; a header that does not decode raises where its first fault is, after the messages
        before it."""
        header = self.header(address)
        yield from header.messages
        if header.fault is not None:
            raise header.fault

    def header(self, address: int) -> DecodedHeader:
        """The object header at ``address``, decoded. The walk asks an object's header several questions in a
        row (its link count, attribute count, layout, datatype): the last few headers are kept, each decoded once."""
        kept = self._recent.get(address)
        if kept is not None:
            return kept
        try:
            kept = self._plain_header(address)
        except Exception:  # a read that fails (a remote file's, say): the general reader reads again, and keeps why
            kept = None
        if kept is None:
            kept = self._decoded(address)
        if len(self._recent) >= _RECENT:
            del self._recent[next(iter(self._recent))]
        self._recent[address] = kept
        return kept

    def _plain_header(self, address: int) -> DecodedHeader | None:
        """The header at ``address`` decoded as :meth:`_decoded` decodes it, where it is the most common kind — a
        version 2 header whose chunks (the first, and those continuation messages lead to, at most _PLAIN_BLOCKS)
        lie whole in the file — its first chunk read in place from the window of the file's bytes, each message by
        one unpack (a file of 10^5 parameters holds 2·10^5 headers); None for any other header, or at any fault:
        :meth:`_decoded` then decodes it (and says why it does not decode), so that both give the same messages,
        flags and fault."""
        start = self.base + address
        if address < 0 or start >= self.size:
            return None
        at, window = self._window
        here = start - at
        for fresh in (False, True):
            if fresh or here < 0 or here + 64 > len(window):  # not in the window (64: a prefix's largest size and more)
                if fresh and at == start:
                    return None
                window = self.read_at(min(_WINDOW, self.size - start), start)
                at, self._window = start, (start, window)
                here = 0
            if window[here:here + 4] != _V2_SIGNATURE or len(window) < here + 6 or window[here + 4] != 2:
                return None
            header_flags = window[here + 5]
            prefix = here + 6 + (16 if header_flags & 0x20 else 0) + (4 if header_flags & 0x10 else 0)
            width = 1 << (header_flags & 3)
            pos = prefix + width
            length = int.from_bytes(window[prefix:pos], "little") if pos <= len(window) else _MAX_BLOCK
            limit = pos + length  # the first chunk's end, in the window
            if limit <= len(window):
                break
        else:
            return None
        if length > _MAX_BLOCK or start + (limit - here) > self.size:
            return None
        span = limit - here
        template = self._template
        if template is not None and template[0] == span:
            _, raw, body_start, body_end, model, index = template
            if window[here:here + body_start] == raw[:body_start] and window[here + body_end:limit] == raw[body_end:]:
                return model.alike(index, window[here + body_start:here + body_end])
        pair = self._pair
        if pair is not None and pair.span == span:
            alike = pair.read(self, window, here, address + (pos - here))
            if alike is not None:
                return alike
        size_of, unpack = (4, _V2_MESSAGE) if not header_flags & 0x04 else (6, _V2_ORDERED_MESSAGE)
        kept = DecodedHeader()
        kept.version = 2
        found = kept.messages
        block, last = window, limit - size_of  # where the last message's header may start
        o, n = self.offset_size, self.length_size
        blocks: list[tuple[int, int]] = []  # continuation chunks: (address, length)
        seen = [address + (pos - here)]  # the chunks read (a continuation back to one is a cycle: _decoded says so)
        first_chunk: tuple[bytes, int, int] | None = None  # the first chunk's bytes, its first message's place, messages
        total = length
        while True:
            if not _append_messages(block, pos, last, limit, unpack, size_of, o, n, kept, blocks):
                return None
            if not blocks:
                if len(seen) == 1:  # one chunk: a model for the headers that follow (_learn)
                    self._learn(window[here:limit], prefix + width - here, size_of, kept)
                elif len(seen) == 2 and first_chunk is not None:  # two: a model of two chunks (_learn_pair)
                    self._learn_pair(first_chunk, block[:limit], seen[1], size_of, kept)
                return kept
            chunk, length = blocks.pop(0)
            total += length
            if (len(seen) >= _PLAIN_BLOCKS or len(found) > _PLAIN_MESSAGES or chunk in seen or chunk < 0 or length < 4
                    or length > _MAX_BLOCK or self.base + chunk + length > self.size or total > self.size):
                return None
            if len(seen) == 1:
                first_chunk = (window[here:limit], prefix + width - here, len(found))
            seen.append(chunk)
            block = self._read(chunk, length)
            if block[:4] != _CONTINUATION_SIGNATURE:
                return None
            pos, limit, last = 4, length, length - 4 - size_of  # a continuation chunk's length includes its checksum

    def _learn(self, raw: bytes, at: int, size_of: int, decoded: DecodedHeader) -> None:
        """Compare the header of one chunk just decoded (its bytes ``raw``, its first message at ``at``, message
        headers of ``size_of`` bytes) with the one decoded before it: where the two are of one length and differ in
        one message's body alone (datasets alike but for where their data lies), that header becomes the model
        :meth:`_plain_header` decodes the next ones by — a header whose bytes equal the model's but for that
        body holds the model's messages, with its own body there."""
        last, self._last_plain = self._last_plain, (raw, at, decoded)
        if last is None or len(last[0]) != len(raw) or last[1] != at or last[2].flags != decoded.flags:
            return
        before, now = last[2].messages, decoded.messages
        differ = [i for i in range(len(now)) if now[i] != before[i]] if len(now) == len(before) else []
        if len(differ) != 1:
            return
        index = differ[0]
        body_start = at + size_of
        for _, body in now[:index]:
            body_start += len(body) + size_of
        body_end = body_start + len(now[index][1])
        if raw[:body_start] == last[0][:body_start] and raw[body_end:] == last[0][body_end:]:
            self._template = (len(raw), raw, body_start, body_end, decoded, index)

    def _learn_pair(self, first: tuple[bytes, int, int], second: bytes, chunk: int, size_of: int,
                    decoded: DecodedHeader) -> None:
        """:meth:`_learn` for a header of two chunks just decoded: ``first`` (the first chunk's bytes, its first
        message's place in them, how many messages it holds), ``second`` (the continuation chunk's bytes, at
        ``chunk``). Where it and the one decoded before it are of one layout — their bytes equal but for some
        messages' bodies, the continuation message's among them — it becomes the model of :class:`_PairModel`."""
        raw, at, in_first = first
        last, self._last_pair = self._last_pair, (raw, at, in_first, second, chunk, decoded)
        if (last is None or len(last[0]) != len(raw) or last[1] != at or last[2] != in_first
                or len(last[3]) != len(second) or last[5].flags != decoded.flags or last[4] == chunk):
            return
        before, now = last[5].messages, decoded.messages
        if len(now) != len(before):
            return
        places: list[int] = []
        spans: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
        pos = [at, 4]  # where the next message's header is, in each chunk (a continuation chunk's after its signature)
        continuation = None
        for i, ((mtype, body), (was_type, was)) in enumerate(zip(now, before)):
            part = 0 if i < in_first else 1
            start = pos[part] + size_of
            pos[part] = end = start + len(body)
            if mtype != was_type or len(body) != len(was):
                return
            if mtype == _CONTINUATION:
                continuation = (i, start, end)
            if body != was:
                places.append(i)
                spans[part].append((start, end))
        if continuation is None or continuation[0] not in places:
            return
        ends = (len(raw), pos[1])  # the first chunk's end; the continuation chunk's last message's (its checksum after)
        for part, (mine, theirs) in enumerate(((raw, last[0]), (second, last[3]))):
            previous = 0
            for start, end in [*spans[part], (ends[part], ends[part])]:
                if mine[previous:start] != theirs[previous:start]:
                    return
                previous = end
        o, n = self.offset_size, self.length_size
        _, start, end = continuation
        if end - start < o + n:
            return
        length = int.from_bytes(raw[start + o:start + o + n], "little")
        if length != len(second):
            return
        self._pair = _PairModel(len(raw), raw, tuple(spans[0]), (start, start + o, start + o + n), length, second[:pos[1]],
                                tuple(spans[1]), decoded, tuple(places))

    def _decoded(self, address: int) -> DecodedHeader:
        """The header at ``address``, decoded by the general reader (versions 1 and 2, continuations, faults)."""
        kept = DecodedHeader()
        try:
            head = self._read(address, 16, up_to=True)
            if head[:4] == _V2_SIGNATURE:
                self._v2_messages(address, head, kept.messages, kept.flags, kept)
                kept.version = 2
            else:
                self._v1_messages(address, head, kept.messages, kept.flags, kept)
                kept.version = 1
        except Exception as exc:  # raised again, after the messages before it, to every asker
            kept.fault = exc
        return kept

    def _first(self, address: int, *types: int) -> tuple[int, bytes] | None:
        """The first message of one of ``types`` in the header at ``address`` (as iterating :meth:`messages`
        until one comes: its fault raised when none comes before it); None when it has none."""
        header = self.header(address)
        first = header.first
        if len(types) == 1:
            place = first.get(types[0])
        else:
            places = [first[t] for t in types if t in first]
            place = min(places) if places else None
        if place is not None:
            return header.messages[place]
        if header.fault is not None:
            raise header.fault
        return None

    def profile(self, address: int, dataset: bool) -> tuple | None:
        """What an HDF5 library makes an object's properties of — a dataset's dataspace, datatype, fill value,
        external storage, layout and filter pipeline messages (``dataset``), or a group's link info, group info
        and filter pipeline messages — each with its flags, in the header's order, less where a dataset's data
        lies (a contiguous layout's address and size, a compact layout's bytes). Two objects of one profile are
        read alike by every HDF5 library: the same shape, datatype, layout class, filters and creation
        properties (the walk checks one and knows the other). None where that cannot be said: a header that
        does not decode whole, a message shared with another object (its body names another), a dataset whose
        layout is not contiguous or compact of version 3 or 4."""
        header = self.header(address)
        if header.fault is not None:
            return None
        memo = header.memo
        if memo is None:
            header.memo = memo = {}
        elif dataset in memo:
            return memo[dataset]
        memo[dataset] = found = self._profile(header, dataset)
        return found

    @staticmethod
    def _profile(header: DecodedHeader, dataset: bool) -> tuple | None:
        kinds = _DATASET_PROPERTIES if dataset else _GROUP_PROPERTIES
        key: list[tuple[int, int, bytes, int]] = []
        layouts = 0
        for (mtype, body), flags in zip(header.messages, header.flags):
            if mtype not in kinds:
                continue
            if flags & _SHARED:
                return None
            size = len(body)
            if dataset and mtype == _LAYOUT:
                layouts += 1
                if size < 4 or body[0] not in (3, 4) or body[1] not in (0, 1):
                    return None
                body = body[:4] if body[1] == 0 else body[:2]  # compact: its version, class, size; contiguous: version, class
            key.append((mtype, flags, body, size))
        return tuple(key) if layouts or not dataset else None

    def attribute_profiles(self, address: int) -> dict[bytes, tuple[tuple, int, bytes | None]] | None:
        """By name, what an HDF5 library makes the type and dataspace of each attribute stored in the header at
        ``address`` of (its attribute message's version, flags, name encoding, datatype and dataspace, as
        bytes: two attributes of one profile have the same type and dataspace), with the number of bytes of data
        its message holds, and those bytes (the message's rest) where its name is stored whole (else None). None
        where that cannot be said of them all: a header that does not decode whole, one whose attribute info
        message names dense storage (an HDF5 library then lists the attributes stored there), an attribute
        message shared with another object or whose datatype or dataspace is, one that does not decode, or two
        of one name."""
        header = self.header(address)
        if header.fault is not None:
            return None
        if header.model is not None:
            alike = _attributes_alike(header, *header.model)
            if alike is not None:
                return alike
        found: dict[bytes, tuple] = {}
        places: dict[int, tuple[bytes, int]] = {}  # of each attribute message: its name, where its data starts
        undefined = (1 << 8 * self.offset_size) - 1
        for place, ((mtype, body), flags) in enumerate(zip(header.messages, header.flags)):
            if mtype == _ATTRIBUTE_INFO:
                at = 2 + (2 if len(body) > 1 and body[1] & 1 else 0)  # version, flags, (maximum creation index)
                if len(body) < at + self.offset_size or self._int(body, at, self.offset_size) != undefined:
                    return None  # its fractal heap: dense storage
                continue
            if mtype != _ATTRIBUTE:
                continue
            if flags & _SHARED or len(body) < 8 or body[0] not in (1, 2, 3):
                return None
            version = body[0]
            name_size, type_size, space_size = _THREE_SIZES(body, 2)
            sharing, encoding, at = (0, 0, 8) if version == 1 else (body[1], body[8] if version == 3 else 0, 9 if version == 3 else 8)
            if sharing & 3 or name_size == 0:
                return None
            padded = _padded_to_8 if version == 1 else _as_it_is
            name = body[at:at + name_size - 1].split(b"\0", 1)[0]  # libhdf5: strndup(name, size - 1)
            # a name stored as libhdf5 writes it: its bytes, then one NUL (none inside)
            whole = len(name) == name_size - 1 and body[at + name_size - 1:at + name_size] == b"\0"
            at += padded(name_size)
            datatype = body[at:at + type_size]
            at += padded(type_size)
            dataspace = body[at:at + space_size]
            at += padded(space_size)
            if at > len(body) or name in found:
                return None
            found[name] = ((version, sharing, encoding, datatype, dataspace), len(body) - at, body[at:] if whole else None)
            places[place] = (name, at)
        if header.memo is None:
            header.memo = {}
        header.memo["attributes"] = (found, places)  # for the headers read by this one (_attributes_alike)
        return found

    def attribute_storage(self, address: int) -> tuple | None:
        """What an HDF5 library counts an object's attributes by: its header's version and attribute info messages
        (each with its flags) — the attribute messages of a header without dense storage, else the name index the
        message names. Two objects alike here are counted alike (or both cannot be: the walk asks of one). None
        where the header does not decode whole."""
        header = self.header(address)
        if header.fault is not None:
            return None
        place = header.first.get(_ATTRIBUTE_INFO)
        if place is None:  # most objects (a dataset of mdiff's): none
            return header.version, ()
        if header.counts[_ATTRIBUTE_INFO] == 1:
            return header.version, ((header.flags[place], header.messages[place][1]),)
        return header.version, tuple((flags, body) for (mtype, body), flags in zip(header.messages, header.flags)
                                     if mtype == _ATTRIBUTE_INFO)

    def compact_links(self, address: int) -> list[tuple[bytes, int, int]] | None:
        """(name, link type 0, address) of each link message of the group whose version 2 header is at ``address``,
        in the header's order, where its links are stored in the header (a link info message without a fractal
        heap, no symbol table) and each message is a hard link as HDF5 libraries write one: version 1, flags of
        the known bits alone, a name of at least one byte and no NUL, an address of the file's size and nothing
        after it. None otherwise (the walk then asks libhdf5)."""
        header = self.header(address)
        if header.fault is not None or header.version != 2 or _SYMBOL_TABLE in header.first \
                or header.counts.get(_LINK_INFO) != 1:
            return None
        memo = header.memo
        if memo is None:
            header.memo = memo = {}
        elif "links" in memo:
            return memo["links"]
        if header.model is not None:
            alike = _links_alike(header, *header.model, self.offset_size)
            if alike is not None:
                memo["links"] = alike
                return alike
        memo["links"] = found = self._link_messages_of(header)
        return found

    def _link_messages_of(self, header: DecodedHeader) -> list[tuple[bytes, int, int]] | None:
        o = self.offset_size
        info = header.messages[header.first[_LINK_INFO]][1]
        at = 2 + (8 if len(info) > 1 and info[1] & 1 else 0)  # version, flags, (maximum creation index)
        if len(info) < at + o or info[at:at + o] != b"\xff" * o:  # a fractal heap: dense storage
            return None
        links: list[tuple[bytes, int, int]] = []
        if _LINK not in header.first:
            return links
        for (mtype, body), flags in zip(header.messages, header.flags):
            if mtype != _LINK:
                continue
            if flags & _SHARED or len(body) < 3 or body[0] != 1 or body[1] & ~0x1F:
                return None
            bits, at = body[1], 2  # version, flags; (link type), (creation order), (name encoding), name length, name
            if bits & 0x08:
                if body[at] != 0:  # not a hard link
                    return None
                at += 1
            at += 8 if bits & 0x04 else 0
            if bits & 0x10:
                if at >= len(body) or body[at] not in (0, 1):
                    return None
                at += 1
            width = 1 << (bits & 3)
            size = int.from_bytes(body[at:at + width], "little")
            at += width
            name = body[at:at + size]
            at += size
            if size == 0 or len(name) != size or name.find(b"\0") >= 0 or at + o != len(body):  # find: see _plain_name
                return None
            links.append((name, 0, int.from_bytes(body[at:], "little")))
        return links

    def link_messages(self, address: int) -> int | None:
        """How many link messages (compact link storage) the header at ``address`` holds; None where it does not
        decode whole."""
        header = self.header(address)
        return None if header.fault is not None else header.counts.get(_LINK, 0)

    def layout_version(self, address: int) -> int | None:
        """The version of the data layout message (0x08) in the object header at ``address``; None without one."""
        layout = self._first(address, _LAYOUT)
        return None if layout is None else self._int(layout[1], 0, 1)

    def datatype_bits(self, address: int) -> int | None:
        """The class bit field (24 bits after the class and version) of the datatype message (0x03) in the object
        header at ``address``; None without one. libhdf5 decodes some bit fields that are not the standard
        type's as the standard type (a float whose bit 6, the second byte order bit, alone is set: as
        little-endian), so §8.2 compares the bits themselves."""
        datatype = self._first(address, _DATATYPE)
        return None if datatype is None else self._int(datatype[1], 1, 3)

    def contiguous_storage(self, address: int) -> tuple[int, int] | None:
        """Where the data of the dataset whose header at ``address`` decodes whole lies, as its data layout message
        records it when that is of version 3 or 4 and of the contiguous class: (its address with the file's base
        added, as libhdf5's H5Dget_offset gives it; its size, as H5Dget_storage_size gives an allocated one). None for
        any other layout, or an address that is not defined (storage not allocated)."""
        header = self.header(address)
        place = header.first.get(_LAYOUT)
        if header.fault is not None or place is None:
            return None
        body = header.messages[place][1]
        o, n = self.offset_size, self.length_size
        if len(body) != 2 + o + n or body[0] not in (3, 4) or body[1] != 1:  # version, class (contiguous), address, size
            return None
        at = int.from_bytes(body[2:2 + o], "little")
        if at == (1 << 8 * o) - 1:
            return None
        return self.base + at, int.from_bytes(body[2 + o:], "little")

    def single_chunk_size(self, address: int) -> int | None:
        """The stored size a chunked dataset's single-chunk index records for its filtered chunk (a layout message of
        version 4, index type 1, with filters), whole: libhdf5 keeps only its low 32 bits. None for other layouts."""
        layout = self._first(address, _LAYOUT)
        if layout is None:
            return None
        body = layout[1]
        if self._int(body, 0, 1) != 4 or self._int(body, 1, 1) != 2 or not self._int(body, 2, 1) & 2:
            return None  # version, class (chunked), flags (a single chunk with filters)
        at = 5 + self._int(body, 3, 1) * self._int(body, 4, 1)  # dimensionality × bytes of each dimension
        return self._int(body, at + 1, self.length_size) if self._int(body, at, 1) == 1 else None

    def link_count(self, address: int) -> int:
        """The reference count of the object whose header is at ``address``."""
        header = self.header(address)
        if header.version == 2:  # decoded already (the walk asks it first): its signature was read
            place = header.first.get(_REFCOUNT)
            if place is not None:
                return self._int(header.messages[place][1], 1, 4)
            if header.fault is not None:
                raise header.fault
            return 1
        head = self._read(address, 16, up_to=True)
        if head[:4] != _V2_SIGNATURE:
            return self._int(head, 4, 4)  # version 1: version, reserved, messages (2), reference count (4)
        refcount = self._first(address, _REFCOUNT)
        return 1 if refcount is None else self._int(refcount[1], 1, 4)  # version (1), count (4)

    def attribute_count(self, address: int) -> int:
        """How many attributes the object at ``address`` has: its attribute messages, and the records of its
        dense storage's name index — which must be a version 2 B-tree of attribute names (type 8) with a
        record size of 17 bytes and a node size of MIN_NODE to MAX_NODE bytes (§8.1): libhdf5 trusts those fields
        (it builds the tree with the callbacks its type byte names, divides by the record size, allocates a
        node of the node size) and crashes on them (tests/fuzz/known.py)."""
        header = self.header(address)
        count = 0
        place = header.first.get(_ATTRIBUTE_INFO)
        if place is not None and header.counts[_ATTRIBUTE_INFO] == 1:  # (the loop below, for its one message)
            count = self._dense_attributes(header.messages[place][1])
        elif place is not None:
            for mtype, body in header.messages[place:]:
                if mtype == _ATTRIBUTE_INFO:
                    count += self._dense_attributes(body)
        if header.fault is not None:
            raise header.fault
        return count + header.counts.get(_ATTRIBUTE, 0)

    def checked_link_count(self, address: int) -> int | None:
        """Checks the link storage of the group whose header is at ``address`` (§8.1) and returns how many links
        it stores densely — the records of its link name index, a version 2 B-tree (type 5) checked as the
        attribute name index is, as is its creation order index (type 6) when it has one; None for a group whose
        links are not stored densely. A symbol table's local heap is checked instead (:meth:`_local_heap`)."""
        message = self._first(address, _SYMBOL_TABLE, _LINK_INFO)
        if message is not None:
            mtype, body = message
            if mtype == _SYMBOL_TABLE:
                o = self.offset_size
                self._symbol_table(self._int(body, 0, o), self._local_heap(self._int(body, o, o)))  # B-tree, heap
                return None
            if body in self._compact_links:
                return None
            o = self.offset_size
            flags = self._int(body, 1, 1)
            at = 2 + (8 if flags & 1 else 0)  # version, flags, (maximum creation index)
            heap, names = self._int(body, at, o), self._int(body, at + o, o)
            undefined = (1 << 8 * o) - 1
            if heap == undefined:
                _remember(self._compact_links, body)
                return None
            self._fractal_heap(heap, "links")
            total = self._btree_records(names, (_LINK_NAME_INDEX,), "link name index")
            if flags & 2:
                order = self._int(body, at + 2 * o, o)
                if order != undefined:
                    self._btree_records(order, (_LINK_ORDER_INDEX,), "link creation order index")
            return total
        return None

    def _local_heap(self, address: int) -> int:
        """The size of the data segment of a symbol table's local heap, once the heap is checked (§8.1): signature
        ``HEAP``, version 0, its data segment within the file, and a free list, followed from its head to the
        offset 1, whose blocks lie in that segment, each with a next offset other than 0, and no more of them than
        the segment holds blocks of two lengths (a list that loops lists more). libhdf5 follows the list with no
        bound: a list that loops has it allocate until memory runs out."""
        o, n = self.offset_size, self.length_size
        head = self._read(address, 8 + 2 * n + o)
        if head[:4] != _HEAP_SIGNATURE or head[4] != 0:
            raise HeaderError("the symbol table's local heap has no HEAP signature of version 0")
        size, at, data = self._int(head, 8, n), self._int(head, 8 + n, n), self._int(head, 8 + 2 * n, o)
        if at == _NO_FREE_BLOCK:
            return size
        segment = self._read(data, size) if size else b""  # libhdf5 reads it whole too
        for _ in range(size // (2 * n)):
            if at + 2 * n > size:
                break
            following, length = self._int(segment, at, n), self._int(segment, at + n, n)
            if following == 0 or at + length > size:
                break
            if following == _NO_FREE_BLOCK:
                return size
            at = following
        raise HeaderError(f"the local heap's free list is bad at offset {at}")

    def _symbol_table(self, root: int, heap_size: int) -> None:
        """The B-tree of a symbol table whose local heap's data segment holds ``heap_size`` bytes (§8.1), read as
        libhdf5 reads it: each node (``TREE``, type 0) whole, at the size of 2K children, of no more children than
        that, at one level below its parent's; each symbol table node (``SNOD``, version 1) whole, at the size of
        2K' entries, of no more entries than that; no node reached twice; and every name offset it records — each
        key of a node, and each entry's — within the heap's data segment. libhdf5 refuses an offset past the
        segment; h5wasm, whose sizes are 32 bits, reads one of 2^32 or more as another."""
        o, n = self.offset_size, self.length_size
        internal_k, leaf_k = self._group_k
        node_size = 8 + 2 * o + 2 * internal_k * o + (2 * internal_k + 1) * n  # header, siblings, children, keys
        entry_size = 2 * o + 24  # name offset, object header address, cache type, reserved, scratch-pad
        leaf_size = 8 + 2 * leaf_k * entry_size
        end = min(self.size - self.base, self.end_of_file_address())
        seen: set[int] = set()
        pending: list[tuple[int, int | None]] = [(root, None)]  # a node's address and level (None: any; -1: SNOD)
        while pending:
            address, level = pending.pop()
            if address in seen:
                raise HeaderError("the symbol table's B-tree reaches a node twice")
            seen.add(address)
            if address + (leaf_size if level == -1 else node_size) > end:
                raise HeaderError("a node of the symbol table's B-tree does not end within the file")
            if level == -1:
                node = self._read(address, leaf_size)
                entries = self._int(node, 6, 2)
                if node[:4] != _SYMBOL_NODE_SIGNATURE or node[4] != 1 or entries > 2 * leaf_k:
                    raise HeaderError("a symbol table node is not one of version 1 of at most 2K entries")
                offsets = [self._int(node, 8 + i * entry_size, o) for i in range(entries)]
            else:
                node = self._read(address, node_size)
                node_level, entries = node[5], self._int(node, 6, 2)
                if (node[:4] != _GROUP_NODE_SIGNATURE or node[4] != 0 or entries > 2 * internal_k
                        or level not in (None, node_level)):
                    raise HeaderError("a node of the symbol table's B-tree is not one of type 0 of at most 2K "
                                      "children at the level below its parent's")
                at = 8 + 2 * o  # keys and children alternate, a key first and last
                offsets = [self._int(node, at + i * (n + o), n) for i in range(entries + 1)]
                pending.extend((self._int(node, at + i * (n + o) + n, o), node_level - 1) for i in range(entries))
            if any(offset >= heap_size for offset in offsets):
                raise HeaderError(f"the symbol table records a name at an offset past its heap's {heap_size} bytes")

    @functools.cached_property
    def _group_k(self) -> tuple[int, int]:
        """The K of a group B-tree's internal nodes and of a symbol table node, as libhdf5 takes them: from a
        version 0 or 1 superblock, else from its extension's B-tree K values message, else its defaults (an
        extension that cannot be read leaves them: libhdf5 refuses such a file whole)."""
        head = self._read(0, 128, up_to=True)
        if head[8] in (0, 1):
            return self._int(head, 18, 2), self._int(head, 16, 2)
        extension = self._int(head, 12 + self.offset_size, self.offset_size)  # after the base address
        try:
            for mtype, body in self.messages(extension):
                if mtype == _BTREE_K:  # version, chunk index K, group internal K, group leaf K
                    return (self._int(body, 3, 2), self._int(body, 5, 2)) if len(body) >= 7 else _DEFAULT_GROUP_K
        except HeaderError:
            pass
        return _DEFAULT_GROUP_K

    def _dense_attributes(self, body: bytes) -> int:
        if body in self._compact_attributes:
            return 0
        o = self.offset_size
        at = 2 + (2 if self._int(body, 1, 1) & 1 else 0)  # version, flags, (maximum creation index)
        heap, names = self._int(body, at, o), self._int(body, at + o, o)
        undefined = (1 << 8 * o) - 1
        if heap == undefined or names == undefined:
            _remember(self._compact_attributes, body)
            return 0
        self._fractal_heap(heap, "attributes")
        total = self._btree_records(names, (_ATTRIBUTE_NAME_INDEX,), "attribute name index")
        if total <= MAX_ATTRIBUTES_PER_OBJECT:  # more is MD511, whatever the records say
            self._attribute_records(names)
        return total

    def _attribute_records(self, names: int) -> None:
        """No record of the attribute name index at ``names`` marks its message shared (§8.1): libhdf5 follows
        such a record into a shared message table, and crashes where the file has none."""
        for record in self._btree_walk(names, "attribute name index"):
            if record[_HEAP_ID_BYTES] & _SHARED:  # after the heap ID: the message's flags
                raise HeaderError("the attribute name index records a shared attribute message")

    def _fractal_heap(self, address: int, what: str) -> None:
        """The header of the fractal heap that holds an object's dense ``what`` (§8.1): signature ``FRHP``, version
        0, a table width of at least 1, a starting block size no larger than its largest direct block's, a root
        block (where it has one) that is one of this heap's (``FHDB``, or ``FHIB`` when the header counts rows of
        it; version 0) at offset 0, and — where it records a B-tree of huge objects — at least one huge object,
        that B-tree's header checked as a name index's is (of type 1 to 4) and each huge object within the file.
        libhdf5 trusts these fields and crashes on a width of 0, on a B-tree of huge objects that its heap says
        holds none (while it releases the heap) and on that B-tree's header as on a name index's; h5wasm, whose
        sizes are 32 bits, reads a length or offset of 2^32 and more as another."""
        o, n = self.offset_size, self.length_size
        head = self._read(address, 22 + 12 * n + 3 * o)
        if head[:4] != _FRACTAL_HEAP_SIGNATURE or head[4] != 0:
            raise HeaderError(f"the fractal heap of the {what} has no FRHP signature of version 0")
        huge_index = self._int(head, 14 + n, o)  # after the heap ID and filter lengths, flags, largest managed object, next huge ID
        huge_objects = self._int(head, 14 + 7 * n + 2 * o, n)
        width = self._int(head, 14 + 10 * n + 2 * o, 2)
        first_block, largest_block = self._int(head, 16 + 10 * n + 2 * o, n), self._int(head, 16 + 11 * n + 2 * o, n)
        if width == 0 or first_block > largest_block:
            raise HeaderError(f"the fractal heap of the {what} has a table width of {width} and blocks of "
                              f"{first_block} to {largest_block} bytes")
        offset_bytes = (self._int(head, 16 + 12 * n + 2 * o, 2) + 7) // 8  # from the heap's largest size, in bits
        root, rows = self._int(head, 20 + 12 * n + 2 * o, o), self._int(head, 20 + 12 * n + 3 * o, 2)
        if root != (1 << 8 * o) - 1:  # its root block: a direct block, or an indirect one with rows of blocks
            block = self._read(root, 5 + o + offset_bytes)
            if (block[:4] != (b"FHIB" if rows else b"FHDB") or block[4] != 0 or self._int(block, 5, o) != address
                    or self._int(block, 5 + o, offset_bytes) != 0):
                raise HeaderError(f"the root block of the fractal heap of the {what} is not one of its heap at offset 0")
        if huge_index != (1 << 8 * o) - 1:
            if huge_objects == 0:
                raise HeaderError(f"the fractal heap of the {what} has an index of huge objects and no huge object")
            what = f"index of huge objects of the {what}"
            self._btree_records(huge_index, _HUGE_OBJECT_INDEXES, what)
            end = min(self.size - self.base, self.end_of_file_address())
            for record in self._btree_walk(huge_index, what):
                start, length = self._int(record, 0, o), self._int(record, o, n)  # first in every type's record
                if start + length > end:
                    raise HeaderError(f"the {what} records a huge object of {length} bytes at {start}, past the "
                                      f"end of the file")

    def _record_size(self, btree_type: int) -> int:
        """The size of a record of a version 2 B-tree of ``btree_type``, as HDF5 libraries write and read it: a
        huge object's address and length (1), with its filter mask and size in memory when filtered (2, 4), and
        its ID when it is not in its heap ID (1, 2); a link's name hash and 7-byte heap ID (5), its creation order
        and heap ID (6); an attribute's 8-byte heap ID, flags, creation order and name hash (8)."""
        o, n = self.offset_size, self.length_size
        return {1: o + 2 * n, 2: o + 3 * n + 4, 3: o + n, 4: o + 2 * n + 4, 5: 4 + 7, 6: 8 + 7, 8: 8 + 1 + 4 + 4}[btree_type]

    def _btree_walk(self, address: int, what: str) -> Iterator[bytes]:
        """Every record of the version 2 B-tree whose header (checked by :meth:`_btree_records`) is at ``address``:
        its nodes read as libhdf5 reads them — a leaf of the header's record size, an internal node with a child
        pointer after its records (the child's address, its record count, and below depth 1 the records under
        it, in as many bytes as libhdf5's largest counts take) — each of the header's type, of no more records
        than a node of its depth holds, and no more records in all than the header gives."""
        o, n = self.offset_size, self.length_size
        head = self._read(address, 18 + o + n)
        btree_type, node_size, size = head[5], self._int(head, 6, 4), self._int(head, 10, 2)
        depth, root, root_records = self._int(head, 12, 2), self._int(head, 16, o), self._int(head, 16 + o, 2)
        total = self._int(head, 18 + o, n)
        if total > _MAX_RECORDS:
            raise HeaderError(f"the {what} holds {total} records")
        most, _, pointers = self._btree_shape(node_size, size, depth)
        count_bytes = pointers[1] - o if depth else 0  # a child's record count, in a child pointer
        seen = 0
        pending = [(root, root_records, depth)]
        while pending:
            node, records, level = pending.pop()
            if records > most[level] or seen + records > total:
                raise HeaderError(f"a node of the {what} records {records} records")
            seen += records
            body = self._read(node, 6 + records * size + ((records + 1) * pointers[level] if level else 0))
            if body[:4] != (_BTREE_INTERNAL if level else _BTREE_LEAF) or body[4] != 0 or body[5] != btree_type:
                raise HeaderError(f"a node of the {what} is not a version 2 B-tree node of type {btree_type}")
            for i in range(records):
                yield body[6 + i * size:6 + (i + 1) * size]
            at = 6 + records * size
            for _ in range(records + 1 if level else 0):
                pending.append((self._int(body, at, o), self._int(body, at + o, count_bytes), level - 1))
                at += pointers[level]

    def _btree_records(self, address: int, btree_types: tuple[int, ...], what: str) -> int:
        """The records in all of the version 2 B-tree whose header is at ``address``, once its header is one of
        a type among ``btree_types`` with records of that type's size in nodes of MIN_NODE to MAX_NODE bytes, and
        a root node of no more records than a node of that size holds (libhdf5 reads as many as the header
        says into a buffer of one node)."""
        o, n = self.offset_size, self.length_size
        head = self._read(address, 18 + o + n)
        if head[:4] != _BTREE_SIGNATURE or head[4] != 0 or head[5] not in btree_types:
            kinds = " or ".join(str(t) for t in btree_types)
            raise HeaderError(f"the {what} is not a version 2 B-tree of type {kinds}")
        node_size, record_size = self._int(head, 6, 4), self._int(head, 10, 2)
        if record_size != self._record_size(head[5]) or not MIN_NODE <= node_size <= MAX_NODE:
            raise HeaderError(f"the {what} has records of {record_size} bytes in nodes of {node_size}")
        depth, root_records, total = self._int(head, 12, 2), self._int(head, 16 + o, 2), self._int(head, 18 + o, n)
        if depth > _MAX_DEPTH:
            raise HeaderError(f"the {what} is {depth} levels deep")
        most, below, _ = self._btree_shape(node_size, record_size, depth)
        if root_records > most[depth] or not root_records <= total <= below[depth] or (depth == 0 and total != root_records):
            raise HeaderError(f"the {what} records {total} records in all, {root_records} in its root node, in a tree "
                              f"of depth {depth} of nodes of {node_size} bytes")
        return total

    def _btree_shape(self, node_size: int, record_size: int, depth: int) -> tuple[list[int], list[int], list[int]]:
        """For each depth of a version 2 B-tree, as libhdf5 reckons it: the records a node holds, the records a
        subtree holds, and the bytes of a child pointer in a node (the child's address, its record count and,
        below depth 1, the records under it, each count in as many bytes as the largest such count takes)."""
        def width(count: int) -> int:  # libhdf5's H5VM_limit_enc_size
            return count.bit_length() // 8 + 1 if count else 1

        most = [(node_size - _BTREE_NODE_PREFIX) // record_size]
        below = [most[0]]
        pointers = [0]
        for level in range(1, depth + 1):
            pointer = self.offset_size + width(most[0]) + (width(below[level - 1]) if level > 1 else 0)
            pointers.append(pointer)
            most.append((node_size - _BTREE_NODE_PREFIX - pointer) // (record_size + pointer))
            below.append((most[level] + 1) * below[level - 1] + most[level])
        return most, below, pointers

    def _v1_messages(self, address: int, first: bytes, found: list[tuple[int, bytes]], flags: list[int],
                     decoded: DecodedHeader | None = None) -> None:
        if len(first) < 16 or first[0] != 1:
            raise HeaderError("not an object header")
        self._blocks([(address + 16, self._int(first, 8, 4), False)], 8, 1, found, flags, decoded)

    def _v2_messages(self, address: int, first: bytes, found: list[tuple[int, bytes]], flags: list[int],
                     decoded: DecodedHeader | None = None) -> None:
        if len(first) < 6 or first[4] != 2:
            raise HeaderError("object header version is not 2")
        header_flags = first[5]
        prefix = 6 + (16 if header_flags & 0x20 else 0) + (4 if header_flags & 0x10 else 0)
        width = 1 << (header_flags & 3)
        head = first if prefix + width <= len(first) else self._read(address, prefix + width)
        blocks = [(address + prefix + width, self._int(head, prefix, width), False)]
        self._blocks(blocks, 6 if header_flags & 0x04 else 4, 2, found, flags, decoded)  # type, size, flags (creation order)

    def _blocks(self, blocks: list[tuple[int, int, bool]], header: int, version: int,
                found: list[tuple[int, bytes]] | None = None, flags: list[int] | None = None,
                decoded: DecodedHeader | None = None) -> list[tuple[int, bytes]]:
        """The messages of a header's ``blocks`` and those they continue into, in order, appended to ``found`` (their
        flags to ``flags``, where each type first comes and how many of it to ``decoded``) as they are decoded: a
        fault raises with those before it in ``found``."""
        found = [] if found is None else found
        flags = [] if flags is None else flags
        first, counts = (decoded.first, decoded.counts) if decoded is not None else ({}, {})
        seen: set[int] = set()
        total = 0  # the blocks of one header do not overlap: together they fit in the file
        next_block = 0
        o, n = self.offset_size, self.length_size
        # each message's type, size and flags in one unpack (a file of 10^5 parameters holds a million messages)
        unpack = (_V2_MESSAGE if header == 4 else _V2_ORDERED_MESSAGE) if version == 2 else _V1_MESSAGE
        while next_block < len(blocks):
            if len(seen) >= _MAX_BLOCKS:
                raise HeaderError("too many object header blocks")
            start, length, continued = blocks[next_block]
            next_block += 1
            if start in seen:
                raise HeaderError("object header continuation cycle")
            seen.add(start)
            total += length
            if length > _MAX_BLOCK or total > self.size:
                raise HeaderError("object header block too large")
            block = self._read(start, length)
            pos, end = 0, len(block)
            if continued and version == 2:
                if block[:4] != _CONTINUATION_SIGNATURE:
                    raise HeaderError("bad continuation block signature")
                pos, end = 4, len(block) - 4  # a continuation chunk's length includes its checksum
            limit = len(block)
            last = end - header  # where the last message's header may start
            further: list[tuple[int, int]] = []  # the continuation chunks this one names
            fine = _append_messages(block, pos, last, limit, unpack, header, o, n, (found, flags, first, counts), further)
            blocks += [(at, size, True) for at, size in further]
            if not fine:
                raise HeaderError("truncated structure")
        return found
