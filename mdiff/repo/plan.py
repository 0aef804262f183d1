"""SPEC.md §13.4: the replay plan of a state — what one pass over the commits' metadata, oldest first,
learns of each parameter (its shape, dtype and the updates since its last ``replace``), file and the
layout — and how a parameter's updates group into runs that compose."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from mdiff.errors import RepositoryError
from mdiff.format.commit import Commit
from mdiff.format.dtypes import DType
from mdiff.format.reader import DiffFile
from mdiff.repo.claims import StateClaims
from mdiff.updates.base import Update, check_base


@dataclass
class Step:
    """One update of a parameter (or file, or the layout) along the walk, and where it comes from."""

    update: Update
    source: str  # the commit id, or "snapshot <id>"
    order: int  # the commit's place along the walk, the root's 0 (a snapshot's step: its commit's)


@dataclass(frozen=True)
class Declared:
    """A dataset's declared shape and dtype, kept once its file is closed."""

    shape: tuple[int, ...]
    dtype: np.dtype


def declared(update: Update) -> Update:
    return Update(update.meta, {k: Declared(tuple(d.shape), np.dtype(d.dtype)) for k, d in update.data.items()},
                  update.kind)


class ClosedCommit(Mapping[str, Update]):
    """What planning reads of a commit file (its metadata), kept after the file is closed; a replay that
    needs its data opens the file again."""

    def __init__(self, diff: DiffFile | ClosedCommit):
        self.commit: Commit = diff.commit
        self._updates = {name: declared(diff[name]) for name in diff}
        self.files: dict[str, Update] = {path: declared(update) for path, update in diff.files.items()}
        self.layout: Update | None = declared(diff.layout) if diff.layout is not None else None

    def __getitem__(self, name: str) -> Update:
        return self._updates[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._updates)

    def __len__(self) -> int:
        return len(self._updates)


@dataclass
class Plan:
    specs: dict[str, tuple[tuple[int, ...], DType]] = field(default_factory=dict)
    history: dict[str, list[Step]] = field(default_factory=dict)  # from the last replace on
    inexact: set[str] = field(default_factory=set)
    files: dict[str, Step] = field(default_factory=dict)  # each path's last `replace`
    layout: Step | None = None
    start: str | None = None  # the commit whose snapshot shortens the histories
    commits_after_start: int = 0  # the commits whose updates a checkout may apply

    def claims(self) -> StateClaims:
        def sha256(name: str) -> str | None:
            return None if name in self.inexact else self.history[name][-1].update.sha256

        return StateClaims({name: (shape, dtype, sha256(name)) for name, (shape, dtype) in self.specs.items()},
                           {path: step.update.sha256 or "" for path, step in self.files.items()},
                           self.layout.update.sha256 if self.layout is not None else None)


def segments(steps: list[Step]) -> Iterator[tuple[Step | None, list[Step]]]:
    """A parameter's history as (head, run) pairs, in order: a head is applied on its own (None: the run
    goes on from the value before it), the run is the longest series of updates after it that compose
    with each other (§13.4: they are merged before the value is touched)."""
    i = 0
    while i < len(steps):
        head = None
        if i == 0 or steps[i].update.update_type.composition is None:
            head, i = steps[i], i + 1
        run: list[Step] = []
        kind = composition_name(steps[i]) if i < len(steps) else None
        while kind is not None and i < len(steps) and composition_name(steps[i]) == kind:
            run.append(steps[i])
            i += 1
        yield head, run


def composition_name(step: Step) -> str | None:
    composition = step.update.update_type.composition
    return None if composition is None else composition.name


def plan_commit(plan: Plan, commit_id: str, diff: DiffFile | ClosedCommit, order: int) -> None:
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
            step = Step(update, commit_id, order)
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
            plan.files[path] = Step(update, commit_id, order)
    if diff.layout is not None:
        plan.layout = None if diff.layout.type == "delete" else Step(diff.layout, commit_id, order)
