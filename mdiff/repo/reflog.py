"""SPEC.md §13.1, §13.6: reflogs — the append-only record of every move of a ref, kept in
``.mdiff/logs/<ref>`` (``logs/refs/heads/main``, ``logs/HEAD``), so that a branch moved back
(``reset``, ``branch -f``) or deleted can be found again and ``gc`` keeps what it names for a while.

One line per move: ``<old id> <new id> <unix seconds> <message>\\n``, a missing side (a ref created or
deleted) written as 64 zeros. Only the line format lives here; the store opens the files (§13.1).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Iterator

from mdiff.hdf5walk.positional_io import pread

NO_COMMIT = "0" * 64  # the side of a move where the ref did not exist
MAX_MESSAGE_BYTES = 1000
MAX_LINE_BYTES = 64 + 1 + 64 + 1 + 20 + 1 + MAX_MESSAGE_BYTES + 1
_LINE = re.compile(rb"([0-9a-f]{64}) ([0-9a-f]{64}) (0|[1-9][0-9]{0,19}) ([^\x00-\x1f\x7f]*)\n")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_BLOCK = 1 << 16


@dataclass(frozen=True)
class ReflogEntry:
    old: str | None  # None: the ref did not exist before
    new: str | None  # None: the ref was deleted
    time: int  # seconds since 1970-01-01T00:00:00Z
    message: str

    def ids(self) -> tuple[str, ...]:
        return tuple(c for c in (self.old, self.new) if c is not None)


class MalformedReflog(ValueError):
    """A complete line that is not ``<old> <new> <seconds> <message>``; ``line`` counts from 1 (None:
    the last line, found from the end)."""

    def __init__(self, line: int | None, why: str):
        super().__init__(f"{'its last line' if line is None else f'line {line}'} {why}")
        self.line = line


def encode(old: str | None, new: str | None, message: str, when: int | None = None) -> bytes:
    """The line recording a move from ``old`` to ``new``; the message loses its control characters
    (a line is one line) and is cut to MAX_MESSAGE_BYTES at a character boundary."""
    text = _CONTROL.sub(" ", message).strip().encode("utf-8", "replace")[:MAX_MESSAGE_BYTES]
    text = text.decode("utf-8", "ignore").encode("utf-8")
    stamp = int(time.time()) if when is None else when
    return f"{old or NO_COMMIT} {new or NO_COMMIT} {stamp} ".encode() + text + b"\n"


def _entry(line: bytes, number: int) -> ReflogEntry:
    m = _LINE.fullmatch(line)
    if m is None:
        raise MalformedReflog(number, "is not `<old id> <new id> <seconds> <message>` (§13.1)")
    try:
        message = m.group(4).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedReflog(number, "is not UTF-8 text") from None
    old, new = (None if g == NO_COMMIT.encode() else g.decode() for g in (m.group(1), m.group(2)))
    return ReflogEntry(old, new, int(m.group(3)), message)


def entries(fd: int) -> Iterator[ReflogEntry]:
    """The entries of the reflog open as ``fd``, oldest first, read a block at a time (a line is at most
    MAX_LINE_BYTES: MalformedReflog otherwise). An unterminated last line — a writer killed while
    appending — is no entry."""
    pending = b""
    number = 0
    while True:
        block = os.read(fd, _BLOCK)
        if not block:
            return
        pending += block
        *lines, pending = pending.split(b"\n")
        for line in lines:
            number += 1
            if len(line) + 1 > MAX_LINE_BYTES:
                raise MalformedReflog(number, f"is longer than {MAX_LINE_BYTES} bytes")
            yield _entry(line + b"\n", number)
        if len(pending) >= MAX_LINE_BYTES:
            raise MalformedReflog(number + 1, f"is longer than {MAX_LINE_BYTES} bytes")


def append(fd: int, line: bytes, sync: bool = True) -> None:
    """Append ``line`` to the reflog open (read-write, O_APPEND) as ``fd``, synced (unless ``sync`` is False:
    the caller syncs it before it writes the ref). An unterminated last line left by a killed writer is cut
    off first, so that it never joins the new one. The caller holds the writers' lock (§13.6)."""
    size = os.fstat(fd).st_size
    if size and pread(fd, 1, size - 1) != b"\n":
        start = max(0, size - MAX_LINE_BYTES)
        tail = pread(fd, size - start, start)
        cut = tail.rfind(b"\n")
        if cut < 0 and start > 0:
            raise MalformedReflog(None, f"is longer than {MAX_LINE_BYTES} bytes")
        os.ftruncate(fd, start + cut + 1)
    view = memoryview(line)
    while view:
        view = view[os.write(fd, view):]
    if sync:
        os.fsync(fd)
