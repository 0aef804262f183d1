"""SPEC.md §13.4–§13.5: the state at a commit, read parameter by parameter.

Opening a :class:`StateView` walks first parents back to a root or to a usable snapshot, checks
every commit file's id (MD800), and makes one pass over the commits' *metadata*, oldest first:
every update is checked against the state it will meet (MD600/MD601 → MD802, MD805), so the
final state's names, shapes and dtypes are known before any tensor is read. Reading a tensor
then applies just the updates of that parameter, in order: a model is never in memory whole,
and a commit of a model folder or a checkout to one holds about one tensor at a time.

A `replace` (or `delete`) makes every earlier update of its parameter irrelevant, so the
history of a parameter starts at its last `replace`. An XOR update (dense, sparse) maps a wrong
base to a wrong result element for element, so a value's sha256 is checked only where the next
update is not another XOR, and at the end: along a chain of XOR updates only the last sha256 is
checked (§13.4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mdiff.checkpoints import CheckpointReader
from mdiff.errors import ApplyError, InvalidFileError, RepositoryError
from mdiff.format import canonical_json
from mdiff.format.dtypes import DType
from mdiff.format.layout import Layout
from mdiff.format.reader import DiffFile
from mdiff.updates.base import Update, check_base, read_ahead

if TYPE_CHECKING:
    from mdiff.repo.repository import Repository

_XOR_TYPES = ("dense", "sparse")


class SnapshotUnusable(Exception):
    """A snapshot that is not a valid file of `replace` updates for its commit, or whose values fail their checks."""


@dataclass
class _Step:
    """One update of a parameter (or file, or the layout) along the walk, and where it comes from."""

    update: Update
    source: str  # the commit id, or "snapshot <id>"


@dataclass
class _Plan:
    specs: dict[str, tuple[tuple[int, ...], DType]] = field(default_factory=dict)
    history: dict[str, list[_Step]] = field(default_factory=dict)  # from the last replace on
    inexact: set[str] = field(default_factory=set)
    files: dict[str, _Step] = field(default_factory=dict)  # each path's last `replace`
    layout: _Step | None = None
    start: str | None = None  # the commit whose snapshot the walk starts at


class StateView(CheckpointReader):
    """state(commit) (SPEC.md §13.4) as a lazy, read-only mapping of name → numpy array, with the
    state's ``files`` and ``layout``; use as a context manager (it keeps the commit files open)."""

    def __init__(self, repo: Repository, commit_id: str | None, engine: str | None = None):
        self.repo = repo
        self.commit_id = commit_id
        self.path = f"commit {commit_id[:12]}" if commit_id else "the empty state"
        self.engine = engine
        self._opened = contextlib.ExitStack()
        try:
            self._plan = self._make_plan(snapshots=True)
        except SnapshotUnusable:
            self._replan()
        except BaseException:
            self._opened.close()
            raise

    # ------------------------------------------------------------ the metadata pass
    def _replan(self) -> None:
        """§13.5: an unusable snapshot is walked past; the state is the same without it."""
        self._opened.close()
        self._opened = contextlib.ExitStack()
        try:
            self._plan = self._make_plan(snapshots=False)
        except BaseException:
            self._opened.close()
            raise

    def _make_plan(self, snapshots: bool) -> _Plan:
        repo = self.repo
        chain: list[tuple[str, DiffFile]] = []  # newest first
        cursor = self.commit_id
        while cursor is not None and not (snapshots and repo.snapshot_path(cursor).exists()):
            diff = self._opened.enter_context(repo.open_commit(cursor))  # from bytes that match its id (MD800)
            chain.append((cursor, diff))
            parents = diff.commit.parents
            cursor = parents[0] if parents else None
        plan = _Plan(start=cursor)
        if cursor is not None:
            self._plan_snapshot(plan, cursor)
        for commit_id, diff in reversed(chain):
            try:
                _plan_commit(plan, commit_id, diff)
            except ApplyError as exc:
                raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: {exc}") from exc
        if self.commit_id is not None:
            repo.remember_inexact(self.commit_id, frozenset(plan.inexact))
        return plan

    def _plan_snapshot(self, plan: _Plan, commit_id: str) -> None:
        try:
            snapshot = self._opened.enter_context(self.repo.open_snapshot(commit_id))  # no link followed (§13.1)
        except InvalidFileError as exc:
            raise SnapshotUnusable(commit_id) from exc
        listed = snapshot_inexact(snapshot, commit_id)
        if listed is None:
            raise SnapshotUnusable(commit_id)
        source = f"snapshot {commit_id[:12]}"
        plan.inexact = set(listed)
        for name in snapshot:
            update = snapshot[name]
            plan.specs[name] = (update.shape, update.dtype)
            plan.history[name] = [_Step(update, source)]
        for path, update in snapshot.files.items():
            if update.type != "replace":
                raise SnapshotUnusable(commit_id)
            plan.files[path] = _Step(update, source)
        if snapshot.layout is not None:
            if snapshot.layout.type != "replace":
                raise SnapshotUnusable(commit_id)
            plan.layout = _Step(snapshot.layout, source)

    # ------------------------------------------------------------ tensors
    def _index(self) -> dict[str, tuple[tuple[int, ...], DType]]:
        return self._plan.specs

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self._entry(name)

    @property
    def inexact(self) -> frozenset[str]:
        """The parameters whose value an inexact update made (§13.4)."""
        return frozenset(self._plan.inexact)

    def read(self, name: str) -> np.ndarray:
        """The parameter's value: its updates applied in order, each exact result checked (§13.4)."""
        self._entry(name)
        try:
            return self._replay(name)
        except SnapshotUnusable:
            self._replan()
            return self._replay(name)

    def _replay(self, name: str) -> np.ndarray:
        steps = self._plan.history[name]
        value: np.ndarray | None = None
        pending: _Step | None = None  # the step whose sha256 the value must have, once checked
        ahead = read_ahead((step.source, step.update) for step in steps)
        try:
            for step, (_, update) in zip(steps, ahead, strict=True):
                if pending is not None and update.type not in _XOR_TYPES:
                    self._verify(pending, value, name)
                try:
                    value = update.apply(value, name, self.engine, scratch=True, verify=False)
                except (InvalidFileError, ApplyError) as exc:
                    raise RepositoryError("MD802", f"{step.source} cannot be applied to {name!r}: {exc}") from exc
                pending = step if update.update_type.carries_sha256 else None
        finally:
            ahead.close()
        if pending is not None:
            self._verify(pending, value, name)
        assert value is not None  # the planned history never ends in a delete
        return value

    def _verify(self, step: _Step, value: np.ndarray | None, name: str) -> None:
        try:
            step.update.verify(value, name)
        except ApplyError as exc:
            if self._plan.start is not None:  # the snapshot, or a commit after it: a walk without it tells
                raise SnapshotUnusable(self._plan.start) from exc
            raise RepositoryError("MD802", f"{name!r} in the state at {self.commit_id and self.commit_id[:12]} "
                                           f"fails its check ({step.source}): {exc}") from exc

    # ------------------------------------------------------------ files and layout
    @property
    def files(self) -> StateFiles:
        """The state's files (§5.5), by path; each read, and checked against its sha256, when asked for."""
        return StateFiles(self)

    def _file_bytes(self, step: _Step, path: str) -> bytes:
        try:
            value = step.update.apply(None, path, self.engine)
            assert value is not None  # a replace
            return value.tobytes()
        except (InvalidFileError, ApplyError) as exc:
            if step.source.startswith("snapshot"):
                self._replan()
                return self._file_bytes(self._plan.files[path], path)
            raise RepositoryError("MD802", f"{step.source}: file {path!r} fails its check: {exc}") from exc

    @property
    def layout_bytes(self) -> bytes | None:
        step = self._plan.layout
        return None if step is None else self._file_bytes(step, "/layout")

    @property
    def layout(self) -> Layout | None:
        """The state's weights layout (§5.6), or None."""
        from mdiff.format import layout

        data = self.layout_bytes
        if data is None:
            return None
        try:
            return layout.parse(data)
        except InvalidFileError as exc:
            source = self._plan.layout.source if self._plan.layout else "?"
            raise RepositoryError("MD802", f"{source}: {exc.message}") from exc

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        self._opened.close()


class StateFiles(Mapping[str, bytes]):
    """The files of a :class:`StateView`, by path."""

    def __init__(self, view: StateView):
        self._view = view

    def __getitem__(self, path: str) -> bytes:
        return self._view._file_bytes(self._view._plan.files[path], path)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._view._plan.files))

    def __len__(self) -> int:
        return len(self._view._plan.files)

    def size(self, path: str) -> int:
        return self._view._plan.files[path].update.shape[0]

    def sha256(self, path: str) -> str:
        """Known from the metadata: nothing is read."""
        sha = self._view._plan.files[path].update.sha256
        assert sha is not None  # a file's last update is a replace, which carries it
        return sha


def _plan_commit(plan: _Plan, commit_id: str, diff: DiffFile) -> None:
    """One commit's metadata against the state it meets (§13.4): MD805 for every update first, then
    MD600/MD601 for each (raised as ApplyError, reported by the caller as MD802)."""
    for name in diff:
        kind = diff[name].update_type
        if name in plan.inexact and kind.carries_sha256 and kind.needs_base:
            raise RepositoryError("MD805", f"commit {commit_id[:12]}: a {kind.name} update of {name!r}, whose value an "
                                           "inexact update made (appliers agree on it only within a tolerance)")
    for name in diff:
        update = diff[name]
        kind = update.update_type
        if kind.needs_base:
            check_base(update, plan.specs.get(name), name)
        if update.type == "delete":
            del plan.specs[name]
            del plan.history[name]
        else:
            plan.specs[name] = (update.shape, update.dtype)
            step = _Step(update, commit_id)
            plan.history[name] = [step] if not kind.needs_base else plan.history[name] + [step]
        if update.type == "delete" or kind.carries_sha256:
            plan.inexact.discard(name)
        else:
            plan.inexact.add(name)
    for path, update in diff.files.items():
        if update.type == "delete":
            held = plan.files.get(path)
            check_base(update, (held.update.shape, held.update.dtype) if held else None, path)
            del plan.files[path]
        else:
            plan.files[path] = _Step(update, commit_id)
    if diff.layout is not None:
        plan.layout = None if diff.layout.type == "delete" else _Step(diff.layout, commit_id)


def snapshot_inexact(snapshot: DiffFile, commit_id: str) -> set[str] | None:
    """§13.5: the inexact values of a usable snapshot of ``commit_id`` — `replace` updates only,
    `meta.snapshot_of` its commit, `meta.inexact` well formed —, or None for one to walk past."""
    listed = inexact_listed(snapshot.commit.meta)
    usable = (snapshot.commit.meta.get("snapshot_of") == commit_id and listed is not None
              and listed <= set(snapshot) and all(snapshot[name].type == "replace" for name in snapshot))
    return listed if usable else None


def inexact_listed(meta: Mapping[str, str]) -> set[str] | None:
    """A snapshot's `meta.inexact` (§13.5) as a set; None when malformed."""
    if "inexact" not in meta:
        return set()
    try:
        names = canonical_json.loads(meta["inexact"])
    except ValueError:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return set(names)
