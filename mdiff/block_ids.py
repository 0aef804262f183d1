"""SPEC.md §4.3, §13.2: commit ids of a format-2 repository — a two-level hash tree over a file's bytes.

The file is cut into leaves of 8 KiB (the last may be shorter); each leaf's SHA-256 is a *leaf hash*. The
leaf hashes are taken 128 at a time — one *group* per MiB of the file — and each group's concatenation
hashed: a *group hash*. The id is the SHA-256 of the file's length (8 bytes, big-endian) followed by the
group hashes. The *block list* (``commits/<id>.blocks``) is that hashed text followed by every leaf hash::

    length (8) ‖ group hash 0 … group hash m-1 (32 each) ‖ leaf hash 0 … leaf hash n-1 (32 each)

so its head (8 + 32·m bytes) hashes to the id, each group of leaf hashes to its group hash, and each leaf
to its leaf hash: a reader of a byte range fetches the head once, the groups of leaf hashes the range
touches, and the leaves themselves, and verifies each against the id. Whole files hash on every core
(the shared thread pool; hashlib releases the GIL on buffers of a leaf's size).

The same bytes give the same id; a file of format 1 is named by the SHA-256 of its bytes instead (§4.3).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from mdiff.hdf5walk import positional_io
from mdiff.errors import RepositoryError

LEAF = 8 << 10  # bytes of a leaf
GROUP = 128  # leaves of a group: a group covers 1 MiB of the file
GROUP_BYTES = LEAF * GROUP
HASH = 32
LENGTH_BYTES = 8
_TASK_GROUPS = 8  # groups one task of the pool hashes (8 MiB read and hashed at a time)


def leaf_count(length: int) -> int:
    return -(-length // LEAF)


def group_count(length: int) -> int:
    return -(-length // GROUP_BYTES)


def head_size(length: int) -> int:
    """Bytes of a block list's head (what hashes to the id) for a file of ``length`` bytes."""
    return LENGTH_BYTES + HASH * group_count(length)


def list_size(length: int) -> int:
    """Bytes of the whole block list of a file of ``length`` bytes."""
    return head_size(length) + HASH * leaf_count(length)


def leaf_hashes(data: bytes | memoryview) -> bytes:
    """The leaf hashes of ``data``, which starts at a leaf's start (its last leaf may be short)."""
    view = memoryview(data)
    sha = hashlib.sha256
    return b"".join([sha(view[i:i + LEAF]).digest() for i in range(0, len(view), LEAF)])


def group_hashes(leaves: bytes | memoryview) -> bytes:
    """The group hashes of consecutive leaf hashes starting at a group's start."""
    view = memoryview(leaves)
    sha = hashlib.sha256
    step = GROUP * HASH
    return b"".join([sha(view[i:i + step]).digest() for i in range(0, len(view), step)])


def id_of_head(head: bytes) -> str:
    return hashlib.sha256(head).hexdigest()


@dataclass(frozen=True)
class BlockList:
    """A file's block list: its ``length``, ``groups`` (the group hashes) and, when known, ``leaves``."""

    length: int
    groups: bytes
    leaves: bytes | None = None

    @property
    def head(self) -> bytes:
        return self.length.to_bytes(LENGTH_BYTES, "big") + self.groups

    @property
    def commit_id(self) -> str:
        return id_of_head(self.head)

    def encoded(self) -> bytes:
        """The ``.blocks`` file's bytes (the leaves must be known)."""
        assert self.leaves is not None
        return self.head + self.leaves


def of_fd(fd: int, length: int, keep_leaves: bool = False) -> BlockList | None:
    """The block list of the first ``length`` bytes of ``fd``, hashed 8 MiB at a time on the shared pool;
    None when the file ends sooner."""
    from mdiff.threads import in_pool, shared_pool

    step = GROUP_BYTES * _TASK_GROUPS

    def part(offset: int) -> tuple[bytes, bytes] | None:
        n = min(step, length - offset)
        data = positional_io.pread(fd, n, offset)
        if len(data) != n:
            return None
        leaves = leaf_hashes(data)
        return leaves, group_hashes(leaves)

    offsets = range(0, length, step)
    if len(offsets) <= 1 or in_pool():
        parts = [part(offset) for offset in offsets]
    else:
        pool = shared_pool()
        parts = [future.result() for future in [pool.submit(part, offset) for offset in offsets]]
    if any(p is None for p in parts):
        return None
    done = [p for p in parts if p is not None]
    return BlockList(length, b"".join(p[1] for p in done), b"".join(p[0] for p in done) if keep_leaves else None)


class StreamHasher:
    """The block list of bytes given in order (a fetch as it arrives), leaves kept."""

    def __init__(self) -> None:
        self.length = 0
        self._pending = bytearray()
        self._leaves = bytearray()

    def update(self, data: bytes | memoryview) -> None:
        self.length += len(data)
        self._pending += data
        whole = len(self._pending) - len(self._pending) % LEAF
        if whole >= GROUP_BYTES:
            self._leaves += leaf_hashes(memoryview(self._pending)[:whole])
            del self._pending[:whole]

    def result(self) -> BlockList:
        leaves = bytes(self._leaves) + leaf_hashes(bytes(self._pending))
        return BlockList(self.length, group_hashes(leaves), leaves)


def of_chunks(chunks: Iterable[bytes]) -> BlockList:
    hasher = StreamHasher()
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.result()


def _said(what: str) -> str:
    return f"{what}: " if what else ""


def parse_head(head: bytes, commit_id: str, what: str) -> BlockList:
    """A block list's head as read for ``commit_id``: MD800 when it does not hash to the id, MD801 when it
    does but is not a head (its length disagrees with its count of group hashes)."""
    if id_of_head(head) != commit_id:
        raise RepositoryError("MD800", _said(what) + f"the block list of commit {commit_id[:12]} does not hash to its id")
    if len(head) < LENGTH_BYTES or (len(head) - LENGTH_BYTES) % HASH:
        raise RepositoryError("MD801", _said(what) + f"the block list of commit {commit_id[:12]} is malformed")
    length = int.from_bytes(head[:LENGTH_BYTES], "big")
    if head_size(length) != len(head):
        raise RepositoryError("MD801", _said(what) + f"the block list of commit {commit_id[:12]} is malformed: "
                                       f"{(len(head) - LENGTH_BYTES) // HASH} group hashes for {length} bytes")
    return BlockList(length, bytes(head[LENGTH_BYTES:]))


def parse(data: bytes, commit_id: str, what: str) -> BlockList:
    """A whole ``.blocks`` file: MD800 unless its head hashes to the id and each group of its leaf hashes to
    its group hash; MD801 when it is not a block list."""
    if len(data) < LENGTH_BYTES:
        raise RepositoryError("MD801", _said(what) + f"the block list of commit {commit_id[:12]} is malformed: "
                                       f"{len(data)} bytes")
    length = int.from_bytes(data[:LENGTH_BYTES], "big")
    head = data[:head_size(length)]
    blocks = parse_head(head, commit_id, what)
    leaves = data[len(head):]
    if len(leaves) != HASH * leaf_count(length):
        raise RepositoryError("MD801", _said(what) + f"the block list of commit {commit_id[:12]} is malformed: "
                                       f"{len(leaves) // HASH} leaf hashes for {length} bytes")
    if group_hashes(leaves) != blocks.groups:
        raise RepositoryError("MD800", _said(what) + f"the leaf hashes of commit {commit_id[:12]} do not hash to its id")
    return BlockList(length, blocks.groups, bytes(leaves))

