"""Is it worth it? What a repository's ``.mdiff/`` stores, against what a full checkpoint of every commit's
state would take (`mdiff du`, git's ``count-objects -v``).

A commit's *checkpoint bytes* are its state's weights as a full checkpoint holds them: the sum, over the
state's parameters, of the product of the shape and the dtype's size — what a ``.safetensors`` file of the
state holds beside its header, and what `git lfs` would store for each commit. They come from the commits'
metadata alone (each update's shape and dtype, §13.4), no value is read: each commit's state is its first
parent's with its updates, computed once for all commits along their first-parent tree.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format.commit import Commit
from mdiff.repo.history import topological
from mdiff.repo.store import Store



@dataclass(frozen=True)
class CommitSpace:
    """One commit: the bytes of its file, and of a full checkpoint of its state (None: its state cannot be
    read — its file, or a first parent's, is missing or corrupt: `mdiff fsck` says why)."""

    commit_id: str
    reachable: bool  # from a ref (branches, tags, remote-tracking refs) or HEAD
    stored_bytes: int
    checkpoint_bytes: int | None
    message: str  # its first line; "" when unreadable

    @property
    def ratio(self) -> float | None:
        """Stored bytes per checkpoint byte (None for an empty or unreadable state)."""
        return self.stored_bytes / self.checkpoint_bytes if self.checkpoint_bytes else None


@dataclass(frozen=True)
class Space:
    """Every commit (reachable ones first, children before parents, then the others) and the rest of ``.mdiff/``."""

    commits: list[CommitSpace]
    snapshots: int
    snapshot_bytes: int
    other_bytes: int  # every other regular file of .mdiff/: refs, reflogs, HEAD, working records, leftovers, …

    @property
    def commit_bytes(self) -> int:
        return sum(c.stored_bytes for c in self.commits)

    @property
    def repository_bytes(self) -> int:
        return self.commit_bytes + self.snapshot_bytes + self.other_bytes

    @property
    def checkpoint_bytes(self) -> int:
        """Full checkpoints of every commit whose state could be read."""
        return sum(c.checkpoint_bytes or 0 for c in self.commits)

    @property
    def ratio(self) -> float | None:
        """The whole of ``.mdiff/`` per byte of every commit's full checkpoint."""
        return self.repository_bytes / self.checkpoint_bytes if self.checkpoint_bytes else None

    @property
    def unreadable(self) -> int:
        return sum(c.checkpoint_bytes is None for c in self.commits)

    @property
    def unreached(self) -> list[CommitSpace]:
        """The commits no ref or HEAD reaches (a reflog entry may still keep them from gc)."""
        return [c for c in self.commits if not c.reachable]

    @property
    def unreached_bytes(self) -> int:
        return sum(c.stored_bytes for c in self.unreached)


def measure(store: Store) -> Space:
    """What ``store`` holds (see the module's text). Every commit file is verified (MD800) as it is read; one that
    cannot be read is counted by its size, its state (and its first-parent descendants') as unknown."""
    ids = store.commit_ids()
    sizes = {c: _regular_size(store.commit_path(c)) for c in ids}
    parents: dict[str, tuple[str, ...]] = {}
    for commit_id in ids:
        try:
            parents[commit_id] = store.parents(commit_id)
        except (RepositoryError, InvalidFileError):
            pass  # unreadable: no state, and its parents are unknown
    graph = _Graph(store, parents)
    tips = [t for t in (_ref_targets(store) + [store.head()[1]]) if t in parents]
    reachable = topological(graph, tips)
    reached = set(reachable)
    unreached = [c for c in topological(graph, [c for c in parents if c not in reached]) if c not in reached]
    weights, messages = _checkpoint_bytes(store, parents)
    order = reachable + unreached + sorted(c for c in ids if c not in parents)
    commits = [CommitSpace(c, c in reached, sizes[c], weights.get(c), messages.get(c, "")) for c in order]
    snapshot_files = [p for p in _regular_files(store.dir / "snapshots") if _is_snapshot(p)]
    snapshot_bytes = sum(_regular_size(p) for p in snapshot_files)
    counted = {store.commit_path(c) for c in ids} | set(snapshot_files)
    other = sum(_regular_size(p) for p in _regular_files(store.dir) if p not in counted)
    return Space(commits, len(snapshot_files), snapshot_bytes, other)


class _Graph:
    """The commits whose parents could be read, for history.topological: a parent that is missing or cannot be
    read is left out (it is listed on its own)."""

    def __init__(self, store: Store, parents: dict[str, tuple[str, ...]]):
        self._store, self._parents = store, parents

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return tuple(p for p in self._parents.get(commit_id, ()) if p in self._parents)

    def metadata(self, commit_id: str) -> Commit:
        return self._store.metadata(commit_id)  # read already, with the parents


def _checkpoint_bytes(store: Store, parents: dict[str, tuple[str, ...]]) -> tuple[dict[str, int], dict[str, str]]:
    """(each readable commit's checkpoint bytes, each one's message line): down the first-parent tree from its
    roots, one parameter → bytes map carried along each line (copied only where a line forks)."""
    children: dict[str | None, list[str]] = {}
    for commit_id, its_parents in sorted(parents.items()):
        first = its_parents[0] if its_parents else None
        children.setdefault(first if first is None or first in parents else "", []).append(commit_id)
    weights: dict[str, int] = {}
    messages: dict[str, str] = {}
    stack: list[tuple[str, dict[str, int] | None, int]] = [(c, {}, 0) for c in children.get(None, [])]
    stack += [(c, None, 0) for c in children.get("", [])]  # a first parent not in the repository: unknown state
    while stack:
        commit_id, held, total = stack.pop()
        try:
            with store.open_commit(commit_id) as diff:
                messages[commit_id] = next(iter(diff.commit.message.splitlines()), "")
                if held is not None:
                    for name in diff:
                        update = diff[name]
                        total -= held.pop(name, 0)
                        if update.type != "delete":
                            held[name] = math.prod(update.shape) * update.dtype.itemsize
                            total += held[name]
        except (RepositoryError, InvalidFileError):
            held = None  # this state, and those after it, are unknown
        if held is not None:
            weights[commit_id] = total
        kids = children.get(commit_id, [])
        stack += [(kid, dict(held) if held is not None else None, total) for kid in kids[:-1]]
        if kids:
            stack.append((kids[-1], held, total))  # the last child takes the map itself
    return weights, messages


def _ref_targets(store: Store) -> list[str]:
    """The commits the files below refs/ name (branches, tags, remote-tracking refs); malformed ones skipped."""
    found = []
    for relative in store.all_refs():
        try:
            target = store.ref_file_target(relative)
        except RepositoryError:
            continue
        if target is not None:
            found.append(target)
    return found


def _is_snapshot(path: Path) -> bool:
    return path.parent.name == "snapshots" and path.name.endswith(".mdiff") and not path.name.startswith(".")


def _regular_files(folder: Path) -> Iterator[Path]:
    """Every regular file below ``folder``, no link followed."""
    for here, _, files in os.walk(folder):
        for name in files:
            path = Path(here) / name
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    yield path
            except OSError:
                continue  # gone meanwhile


def _regular_size(path: Path) -> int:
    """The bytes of ``path``: 0 for anything not a regular file (a link, a FIFO, a missing file)."""
    try:
        found = os.lstat(path)
    except OSError:
        return 0
    return found.st_size if stat.S_ISREG(found.st_mode) else 0
