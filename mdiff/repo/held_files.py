"""Commit and snapshot files this process has opened, kept open and parsed for its next use of them (§13.2).

Opening a file costs the same each time: its walk (an isolated child's, §8.5, or the walk cache's copy of
one, read and rebuilt), and the parse and checks of every parameter's metadata (§3–§7) — 20–50 ms a MiniLM
file of ~100 parameters, five to eight files a checkout of a history with snapshots. A repository's checkouts
and commits reopen the same few files again and again; the file once opened is kept here instead, with the
identity and times of the very file it was opened from (``same_file``: device, inode, size, modification and
change times — what §13.2 calls unchanged, as ``CommitFiles`` already trusts for a file it has hashed), and
given again while the file under that name is that very file, unchanged. What is read through it is read from
its own descriptor, of that file. Only files read by an isolated child's walk (no libhdf5 handle in this
process) are kept: their reads are positional and may be shared.

Each user gets its own use of the kept :class:`DiffFile` (``DiffFile.another_use``), whose ``close`` ends that
use; the kept file closes once it is let go (a newer one replaces it, or the bounds are reached) and no use is open.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from mdiff.format.reader import DiffFile
from mdiff.regular_files import same_file

MAX_FILES = 32  # kept open at once (each holds a descriptor)
MAX_PARAMETERS = 1 << 16  # of all files kept (each parameter's parse: ~10 small objects)


@dataclass
class _Kept:
    diff: DiffFile
    status: os.stat_result  # of the file the diff was opened from, as it was then
    users: int = 0
    let_go: bool = False  # no longer handed out: closed when its last user closes
    lock: threading.Lock = field(default_factory=threading.Lock)

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            close = self.let_go and self.users == 0
        if close:
            self.diff.close()

    def drop(self) -> None:
        with self.lock:
            self.let_go = True
            close = self.users == 0
        if close:
            self.diff.close()


class HeldFiles:
    """The kept files of one ``CommitFiles``, by (folder, commit id); bounded by MAX_FILES and MAX_PARAMETERS,
    the least recently used let go first."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # files handed out from a new open (put), for tests
        self.reused = 0  # files handed out again (get), for tests

    def get(self, key: tuple[str, str], status: os.stat_result) -> DiffFile | None:
        """A use of the file kept under ``key`` when it was opened from the file ``status`` describes, unchanged;
        None otherwise (a kept file of another or changed file is let go)."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            if not same_file(kept.status, status):
                del self._kept[key]
            else:
                self._kept.move_to_end(key)
                with kept.lock:
                    kept.users += 1
                self.reused += 1
                return kept.diff.another_use(kept.release)
        kept.drop()
        return None

    def put(self, key: tuple[str, str], diff: DiffFile, status: os.stat_result) -> DiffFile:
        """Keep ``diff`` (just opened from the file ``status`` describes) when it may be shared, and return the
        caller's use of it; ``diff`` itself when it is not kept."""
        if not diff.isolated or len(diff) > MAX_PARAMETERS:
            return diff
        kept = _Kept(diff, status, users=1)
        dropped: list[_Kept] = []
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                dropped.append(old)
            self._kept[key] = kept
            total = sum(len(k.diff) for k in self._kept.values())
            while len(self._kept) > MAX_FILES or total > MAX_PARAMETERS:
                _, oldest = self._kept.popitem(last=False)
                total -= len(oldest.diff)
                dropped.append(oldest)
            self.opened += 1
        for each in dropped:
            each.drop()
        return kept.diff.another_use(kept.release)

    def clear(self) -> None:
        """Let every kept file go (each closes once its last use ends)."""
        with self._lock:
            dropped = list(self._kept.values())
            self._kept.clear()
        for each in dropped:
            each.drop()
