"""SPEC.md §13.5: snapshots — the full state at a commit, so that checkouts need not replay from a root —
and the reference's policy of when to write one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import ContextManager
from pathlib import Path

import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format import canonical_json
from mdiff.format.commit import Commit
from mdiff.format.reader import open_diff
from mdiff.atomic import fsync_directory
from mdiff.format.writer import DiffWriter
from mdiff.repo.states import snapshot_inexact
from mdiff.repo.store import Store
from mdiff.updates import replace

SNAPSHOT_MIN_COMMITS = 8  # dense commits are each about a model's size: not a snapshot per commit
SNAPSHOT_MAX_COMMITS = 256  # bounds the files a checkout opens, however small the commits


def inexact_values(store: Store, commit_id: str | None) -> frozenset[str]:
    """The parameters whose value in state(commit_id) an inexact update made (§13.4), from the
    commits' metadata: back to a snapshot (its `meta.inexact`) or a root, then forward."""
    if commit_id is None:
        return frozenset()
    if commit_id not in store._inexact:
        line: list[str] = []
        cursor: str | None = commit_id
        inexact: set[str] = set()
        while cursor is not None:
            if cursor in store._inexact:
                inexact = set(store._inexact[cursor])
                break
            if store.snapshot_path(cursor).exists():
                listed = usable_snapshot_inexact(store.snapshot_path(cursor), cursor)
                if listed is not None:
                    inexact = listed
                    break
            line.append(cursor)
            parents = store.parents(cursor)
            cursor = parents[0] if parents else None
        for cid in reversed(line):
            for name, makes_inexact in store.commit_facts(cid).inexact.items():
                (inexact.add if makes_inexact else inexact.discard)(name)
        store.remember_inexact(commit_id, frozenset(inexact))
    return store._inexact[commit_id]


def usable_snapshot_inexact(path: Path, commit_id: str) -> set[str] | None:
    """The inexact values a snapshot lists, or None when checkouts must walk past it (§13.5)."""
    try:
        with open_diff(path) as snapshot:
            return snapshot_inexact(snapshot, commit_id)
    except InvalidFileError:
        return None


def write_snapshot(store: Store, commit_id: str, state: Mapping[str, np.ndarray]) -> None:
    """Store the full state of ``commit_id`` — parameters, and the files and layout where ``state`` has
    them — so that checkouts start there (§13.5).

    Uncompressed: a snapshot is a cache for speed (weights hardly deflate: ~0.86 of their size,
    at a tenth of the read speed).
    """
    inexact = sorted(inexact_values(store, commit_id))
    meta = Commit("snapshot", date=store.metadata(commit_id).date,
                  meta={"snapshot_of": commit_id, **({"inexact": canonical_json.dumps(inexact)} if inexact else {})})
    files = getattr(state, "files", None) or {}
    layout_bytes = getattr(state, "layout_bytes", None)

    def write(writer: DiffWriter) -> None:
        for name in sorted(state):
            writer.add(name, replace.encode(state[name]))
        for path in sorted(files):
            writer.add_file(path, replace.encode(np.frombuffer(files[path], np.uint8)))
        if layout_bytes is not None:
            writer.set_layout(replace.encode(np.frombuffer(layout_bytes, np.uint8)))

    snapshot_id = store.store(write, meta, compression="none", directory="snapshots")
    os.replace(store.dir / "snapshots" / f"{snapshot_id}.mdiff", store.snapshot_path(commit_id))
    fsync_directory(store.dir / "snapshots")


def replay_cost(store: Store, commit_id: str) -> tuple[int, int, int]:
    """What a checkout of ``commit_id`` replays after its starting point (the nearest snapshot,
    or the state a root commit holds): (commits, their declared update bytes, the starting
    state's declared bytes)."""
    commits = replayed = 0
    cursor = commit_id
    while not store.snapshot_path(cursor).exists():
        facts = store.commit_facts(cursor)
        if not facts.parents:
            return commits, replayed, facts.declared_bytes
        commits, replayed, cursor = commits + 1, replayed + facts.declared_bytes, facts.parents[0]
    with open_diff(store.snapshot_path(cursor)) as snapshot:
        return commits, replayed, sum(snapshot[name].stored_bytes for name in snapshot)


def snapshot_if_due(store: Store, commit_id: str, open_state: Callable[[], ContextManager[Mapping[str, np.ndarray]]]) -> bool:
    """Write a snapshot of ``commit_id`` (whose state ``open_state()`` opens) when a checkout of it would
    replay at least one model's worth of updates after its starting point, and at least
    SNAPSHOT_MIN_COMMITS commits; or SNAPSHOT_MAX_COMMITS commits, whatever their size. Checkouts
    then read at most about one snapshot plus one model's worth of updates. Returns whether it wrote one."""
    commits, replayed, start_bytes = replay_cost(store, commit_id)
    due = commits >= SNAPSHOT_MAX_COMMITS or (commits >= SNAPSHOT_MIN_COMMITS and replayed >= start_bytes)
    if due:
        with open_state() as state:
            write_snapshot(store, commit_id, state)
    return due
