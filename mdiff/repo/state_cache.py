"""The parent's state as the last commit left it, kept between processes (SPEC.md §13.2, §13.4, §13.5).

A commit needs of its parent's state its claims (each parameter's shape, dtype and sha256, each file's
sha256, the layout: §13.5) — to diff against, and to make its own `state_sha256` (§4.2) — and, once it is
written, what reading its own state would cost, to decide whether it gets a snapshot. A fresh process
learns both by walking the history back to the last snapshot, hashing each commit file it opens (§13.2):
commit k after a snapshot hashes k files, so a chain committed by a process each grows between snapshots.

So each commit keeps its state's summary in the user's cache folder (format/walk_cache.py's folder and
rules: the user's own, writable by no one else; an entry unreadable or malformed is absent), and the
next commit on top of it reads it instead of walking:
- the **claims** are believed only when their digest is the `state_sha256` recorded in the parent's own
  commit file, verified against its id (MD800) — a check from bytes, so an entry changes no verdict and no
  byte: what it says is what the walk would find, or it is not used;
- the **replay cost** (each parameter's updates' declared bytes since the start, sparse apart, and the line
  of commits from the snapshot the histories start at, or the root) cannot be checked against bytes, so it
  is sealed as walks are (an HMAC under the cache's own key) and believed only where the repository's
  snapshots along that line are as they were: none after the start, the start's the very file it was.
A commit with a cached parent hashes one commit file of the history (its parent's), whatever the chain; it
then keeps its own entry and drops its parent's, so that the cache holds about one entry a branch tip.
A parent with no `state_sha256`, an inexact value (§13.4: their replay is planned otherwise), no entry or
one that does not match: the walk, as before. Values are never taken from here: the parent's values come
from the checkpoint committed last or the replay (parent_values.py), the latter opened only if needed.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mdiff.errors import MdiffError
from mdiff.format.dtypes import DType, dtype_named
from mdiff.repo.claims import StateClaims
from mdiff.repo.snapshots import SPARSE_READ_WEIGHT
from mdiff.updates.base import Update

if TYPE_CHECKING:
    from mdiff.format.commit import Commit
    from mdiff.format.walk_cache import WalkCache
    from mdiff.repo.states import StateView

log = logging.getLogger(__name__)


class Repository(Protocol):
    """What a summary is kept in and checked against: a repository (repo/objects.py)."""

    dir: Path

    def walk_cache(self) -> WalkCache: ...

    def metadata(self, commit_id: str) -> Commit: ...

    def has_snapshot(self, commit_id: str) -> bool: ...

    def snapshot_path(self, commit_id: str) -> Path: ...

KIND = "states"  # the cache's folder of these entries: states/<key>/<id[:2]>/<id>.json
MAX_ENTRY_BYTES = 64 << 20


@dataclass(frozen=True)
class StateSummary:
    """What a commit needs of a state without reading it: its claims, its layout's bytes (None: no layout),
    each parameter's replay cost — (declared bytes of its sparse updates, of the others) since the start —,
    the line of commits from the start (the commit whose snapshot the histories start at; None: the root)
    to this state's, and the identity of the start's snapshot file."""

    claims: StateClaims
    layout: bytes | None
    costs: dict[str, tuple[int, int]]
    line: tuple[str, ...]
    start: str | None
    start_file: tuple[int, ...] | None

    @property
    def commits_after_start(self) -> int:
        return len(self.line) - 1 if self.start is not None else len(self.line)

    def read_cost(self) -> int:
        """snapshots.read_cost of this state: its updates' declared bytes, sparse ones weighted."""
        return sum(sparse * SPARSE_READ_WEIGHT + other for sparse, other in self.costs.values())

    def state_bytes(self) -> int:
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype, _ in self.claims.parameters.values())


EMPTY = StateSummary(StateClaims({}, {}, None), None, {}, (), None, None)


def summary_of(view: StateView, layout: bytes | None) -> StateSummary | None:
    """The summary of the state ``view`` opened (None with an inexact value: not kept)."""
    claims = view.claims
    if view.commit_id is None:
        return EMPTY
    if any(sha256 is None for _, _, sha256 in claims.parameters.values()):
        return None
    start = view.snapshot
    return StateSummary(claims, layout, view.replay_by_parameter(), tuple(view.line()), start,
                        _snapshot_file(view.repo, start) if start is not None else None)


class Follower:
    """The summary of a commit's state, made from its parent's as its updates are written."""

    def __init__(self, parent: StateSummary) -> None:
        self.parent = parent
        self.costs = dict(parent.costs)
        self.layout = parent.layout

    def add(self, name: str, update: Update) -> None:
        """As states.plan_commit's history: a `delete` ends it, an update without a base starts it anew."""
        if update.type == "delete":
            self.costs.pop(name, None)
            return
        size = update.stored_bytes
        cost = (size, 0) if update.type == "sparse" else (0, size)
        if update.update_type.needs_base:
            sparse, other = self.costs.get(name, (0, 0))
            cost = (sparse + cost[0], other + cost[1])
        self.costs[name] = cost

    def set_layout(self, data: bytes | None) -> None:
        self.layout = data

    def child(self, commit_id: str, claims: StateClaims) -> StateSummary | None:
        if any(sha256 is None for _, _, sha256 in claims.parameters.values()):
            return None
        return StateSummary(_copy(claims), self.layout, self.costs, self.parent.line + (commit_id,),
                            self.parent.start, self.parent.start_file)


def snapshotted(repo: Repository, summary: StateSummary, commit_id: str) -> StateSummary:
    """``summary`` once a snapshot of its commit is written: the histories start there."""
    costs = {name: (0, math.prod(shape) * np.dtype(dtype.storage).itemsize)
             for name, (shape, dtype, _) in summary.claims.parameters.items()}
    return replace(summary, costs=costs, line=(commit_id,), start=commit_id,
                   start_file=_snapshot_file(repo, commit_id))


def _snapshot_file(repo: Any, commit_id: str) -> tuple[int, ...] | None:
    try:
        found = os.stat(repo.snapshot_path(commit_id), follow_symlinks=False)
    except (OSError, AttributeError):
        return None
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _repository_key(repo: Repository) -> str:
    return hashlib.sha256(os.fsencode(os.path.realpath(repo.dir))).hexdigest()[:32]


def _copy(claims: StateClaims) -> StateClaims:
    return StateClaims(dict(claims.parameters), dict(claims.files), claims.layout)


# ------------------------------------------------------------ kept and recalled
def remember(repo: Repository, commit_id: str, summary: StateSummary, parent: str | None = None) -> None:
    """Keep ``summary`` of the state at ``commit_id`` for the next commit on top of it, and forget ``parent``'s:
    the cache holds about one entry per branch tip, not one per commit (a commit on top of a parent whose entry
    is gone walks). Quietly nothing where the cache cannot be written."""
    cache = repo.walk_cache()
    if cache.folder is None:
        return
    if parent is not None:
        cache.drop_sealed(KIND, parent)
    entry = {
        "repository": _repository_key(repo),
        "parameters": {name: [list(shape), dtype.name, sha256] for name, (shape, dtype, sha256)
                       in summary.claims.parameters.items()},
        "files": summary.claims.files,
        "layout": summary.claims.layout,
        "layout_bytes": summary.layout.hex() if summary.layout is not None else None,
        "costs": {name: list(cost) for name, cost in summary.costs.items()},
        "line": list(summary.line),
        "start": summary.start,
        "start_file": list(summary.start_file) if summary.start_file is not None else None,
    }
    cache.put_sealed(KIND, commit_id, entry)


def recall(repo: Repository, commit_id: str) -> StateSummary | None:
    """The summary kept for the state at ``commit_id``, where it is to be believed (see the module's text):
    sealed by this user's mdiff for this repository, its claims' digest the `state_sha256` of the commit's
    verified file, the repository's snapshots along its line as they were. None otherwise (the walk serves)."""
    entry = repo.walk_cache().get_sealed(KIND, commit_id, MAX_ENTRY_BYTES)
    if entry is None:
        return None
    try:
        summary = _parse(entry)
        if entry["repository"] != _repository_key(repo) or not summary.line or summary.line[-1] != commit_id:
            return None
    except (KeyError, TypeError, ValueError, MdiffError) as exc:
        log.debug("state summary of %s not used: %s", commit_id[:12], exc)
        return None
    digest = repo.metadata(commit_id).state_sha256  # from the commit's verified file (MD800)
    if digest is None or summary.claims.digest() != digest:
        log.debug("state summary of %s does not match its state_sha256: not used", commit_id[:12])
        return None
    if summary.layout is not None and hashlib.sha256(summary.layout).hexdigest() != summary.claims.layout:
        return None
    after = summary.line[1:] if summary.start is not None else summary.line
    if any(repo.has_snapshot(cid) for cid in after):
        return None  # a snapshot written since: a checkout starts there now
    if summary.start is not None and (summary.start_file is None or _snapshot_file(repo, summary.start) != summary.start_file):
        return None  # the start's snapshot removed or replaced since
    return summary


def _parse(entry: dict) -> StateSummary:
    parameters: dict[str, tuple[tuple[int, ...], DType, str | None]] = {}
    for name, (shape, dtype, sha256) in entry["parameters"].items():
        if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape) and isinstance(sha256, str)):
            raise ValueError(f"malformed claim of {name!r}")
        parameters[name] = (tuple(shape), dtype_named(dtype), sha256)
    files = entry["files"]
    if not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
        raise ValueError("malformed files")
    layout = entry["layout"]
    if layout is not None and not isinstance(layout, str):
        raise ValueError("malformed layout")
    costs = {name: (int(sparse), int(other)) for name, (sparse, other) in entry["costs"].items()}
    if set(costs) != set(parameters):
        raise ValueError("costs of other parameters than the claims'")
    line = entry["line"]
    start = entry["start"]
    start_file = entry["start_file"]
    if not (isinstance(line, list) and all(isinstance(c, str) for c in line)
            and (start is None or (line and line[0] == start))):
        raise ValueError("malformed line")
    layout_bytes = bytes.fromhex(entry["layout_bytes"]) if entry["layout_bytes"] is not None else None
    return StateSummary(StateClaims(parameters, dict(files), layout), layout_bytes, costs, tuple(line), start,
                        tuple(int(n) for n in start_file) if start_file is not None else None)


# ------------------------------------------------------------ the parent, as known
class WalkNeeded(Exception):
    """A commit written from a :class:`KnownState` needs what only the state's walk has (a value to replay, a
    file's bytes or size): the writing is abandoned, its file removed, and done again from the state opened.
    Not opened there and then: that would read commit files — and fork the isolated reader (§8.5), which
    must never inherit libhdf5's state while a file is being written — in the middle of a write."""


class KnownState:
    """A state from its summary: names, specs, claims, files' sha256 and the layout — nothing read. What only
    the walk has (a value, a file's bytes or size) raises :class:`WalkNeeded`: a commit then opens the state
    and writes again (a parent whose values the last committed checkpoint fails to give; a file deleted)."""

    def __init__(self, summary: StateSummary) -> None:
        self.summary = summary

    def view(self) -> StateView:
        raise WalkNeeded

    def __getitem__(self, name: str) -> np.ndarray:
        return self.view()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.summary.claims.parameters)

    def __contains__(self, name: object) -> bool:
        return name in self.summary.claims.parameters

    def keys(self) -> list[str]:
        return sorted(self.summary.claims.parameters)

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        shape, dtype, _ = self.summary.claims.parameters[name]
        return shape, dtype

    @property
    def inexact(self) -> frozenset[str]:
        return frozenset()  # a summary is kept only of a state without inexact values

    @property
    def claims(self) -> StateClaims:
        return _copy(self.summary.claims)

    @property
    def files(self) -> KnownFiles:
        return KnownFiles(self)

    @property
    def layout_bytes(self) -> bytes | None:
        return self.summary.layout


class KnownFiles(Mapping[str, bytes]):
    """The files of a :class:`KnownState`: their sha256 from the claims, their bytes and sizes from the walk."""

    def __init__(self, state: KnownState) -> None:
        self._state = state

    def __getitem__(self, path: str) -> bytes:
        return self._state.view().files[path]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._state.summary.claims.files))

    def __len__(self) -> int:
        return len(self._state.summary.claims.files)

    def __contains__(self, path: object) -> bool:
        return path in self._state.summary.claims.files

    def size(self, path: str) -> int:
        return self._state.view().files.size(path)

    def sha256(self, path: str) -> str:
        return self._state.summary.claims.files[path]
