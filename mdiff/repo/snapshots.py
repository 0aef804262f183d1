"""SPEC.md §13.5: snapshots — the full state at a commit, so that checkouts need not replay from a
root — the reference's policy of when to write one, and dropping one.

A snapshot is a cache: checkouts use it only where it agrees with its commits (states.py), so
writing one is a bet of storage against checkout time, and the policy weighs both (see
SNAPSHOT_REPLAY_FACTOR).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ContextManager

import numpy as np

from mdiff.atomic import fsync_directory
from mdiff.errors import RepositoryError
from mdiff.format import canonical_json
from mdiff.format.commit import Commit
from mdiff.format.writer import DiffWriter
from mdiff.repo.store import Store
from mdiff.threads import one_ahead
from mdiff.updates import replace

if TYPE_CHECKING:
    from mdiff.repo.states import StateView

# A snapshot is written once reading the state at a commit would cost at least this many times reading the
# state from a snapshot (SPEC.md §13.5), the cost counted in bytes of a snapshot's read (read_cost below):
# a checkout then costs at most about this many snapshot reads. A snapshot costs ~0.86× the state on disk
# (gzip) and saves later checkouts the replay of the updates before it. Measured with tools/bench/snapshots.py
# (a 64 MiB model, root + 20 dense commits of ~0.5× a model each once compressed; CPU time of a checkout,
# mean over commits 10–20): no snapshots 3.00 s; k = 2: a snapshot after every commit, 2.60× the bytes,
# 0.87 s; k = 4: 1.48×, 1.04 s; k = 8: 1.16×, 1.41 s; k = 16: 1.08×, 1.79 s; the previous policy
# (uncompressed, >= 8 commits and >= 1 state): 1.19×, 1.30 s. 8 stores less than the previous policy did
# for about the same checkouts.
SNAPSHOT_REPLAY_FACTOR = 8
# ... or once it would apply this many commits, whatever their size: a replay holds their files open.
SNAPSHOT_MAX_COMMITS = 256
# What a reader's time per declared byte is, relative to reading a snapshot's (or a dense update's): a sparse
# update's entries (8-byte gaps and the values) are inflated, then gathered and scattered at spread positions.
# Measured with tools/bench/sparse_chain.py (256 MiB, root + 100 commits of 1 % of every tensor, fresh
# processes, the least of 5 under load): a sparse commit 33 ms for its 8.0 MB declared (4.1 ns a byte), a
# snapshot 0.39 s for its 268 MB (1.45 ns a byte): 2.8×.
SPARSE_READ_WEIGHT = 3
# (What each commit file costs besides its data — its id hashed, §13.2, its kept walk checked, its metadata
# planned — is left out: a checkout of a chain of 101 commits of a 4 KB tensor took 0.095 s, ~1 ms a
# commit, and SNAPSHOT_MAX_COMMITS bounds it.)


def read_cost(view: StateView) -> int:
    """What reading the whole state ``view`` opens costs, in bytes of a snapshot's read: its updates' declared
    bytes (the snapshot's or root's included), a sparse update's weighted by SPARSE_READ_WEIGHT."""
    return sum(size * (SPARSE_READ_WEIGHT if kind == "sparse" else 1) for kind, size in view.replay_bytes_by_type().items())


def inexact_values(store: Store, commit_id: str | None) -> frozenset[str]:
    """The parameters whose value in state(commit_id) an inexact update made (§13.4), from the
    commits' metadata alone, back to the root (a snapshot's `meta.inexact` is a claim, not a fact)."""
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
            line.append(cursor)
            parents = store.parents(cursor)
            cursor = parents[0] if parents else None
        for cid in reversed(line):
            for name, makes_inexact in store.commit_facts(cid).inexact.items():
                (inexact.add if makes_inexact else inexact.discard)(name)
        store.remember_inexact(commit_id, frozenset(inexact))
    return store._inexact[commit_id]


def write_snapshot(store: Store, commit_id: str, state: Mapping[str, np.ndarray]) -> None:
    """Store the full state of ``commit_id`` — parameters, and the files and layout where ``state`` has
    them — so that checkouts start there (§13.5). Compressed as commits are (gzip level 1, shuffled):
    weights deflate to ~0.9 of their size, and a snapshot is read through the same threaded inflater."""
    inexact = sorted(getattr(state, "inexact", None) or inexact_values(store, commit_id))
    meta = Commit("snapshot", date=store.metadata(commit_id).date,
                  meta={"snapshot_of": commit_id, **({"inexact": canonical_json.dumps(inexact)} if inexact else {})})
    files = getattr(state, "files", None) or {}
    layout_bytes = getattr(state, "layout_bytes", None)
    # a value with the sha256 its source just proved it has (ParentValues: a checkpoint's, hashed against the state's)
    # is not hashed again; the next value is read (and hashed) on a thread of its own while this one is written
    checked = getattr(state, "checked", None)
    read: Callable[[str], tuple[np.ndarray, str | None]] = checked if checked is not None else lambda n: (state[n], None)
    # DiffWriter writes a hidden temporary file beside the target and renames it into place when whole
    with DiffWriter(store.snapshot_path(commit_id), meta, "gzip") as writer, \
            contextlib.closing(one_ahead(sorted(state), read)) as values:
        for name, (value, sha256) in values:
            writer.add(name, replace.encode(value, sha256))
            del value  # not kept while the next is read: its chunks in flight hold what they need
        for path in sorted(files):
            writer.add_file(path, replace.encode(np.frombuffer(files[path], np.uint8)))
        if layout_bytes is not None:
            writer.set_layout(replace.encode(np.frombuffer(layout_bytes, np.uint8)))


def drop_snapshot(store: Store, commit_id: str) -> int:
    """Remove the snapshot of ``commit_id``; return its size in bytes (MD801 when there is none)."""
    path = store.snapshot_path(commit_id)
    if not path.is_file() or path.is_symlink():
        raise RepositoryError("MD801", f"there is no snapshot of {commit_id[:12]}")
    size = path.stat().st_size
    path.unlink()
    fsync_directory(path.parent)
    return size


def replay_cost(view: StateView) -> tuple[int, int, int]:
    """What reading the whole state ``view`` opens would apply: (the commits after its snapshot, or all
    of them from the root; the declared bytes of the updates applied, the snapshot's included; the
    state's declared bytes)."""
    return view.commits_after_start, view.replay_bytes(), view.state_bytes()


def is_due(state_bytes: int, cost: int, commits_after_start: int) -> bool:
    """The policy: whether a state of ``state_bytes`` whose read costs ``cost`` (:func:`read_cost`) and applies
    ``commits_after_start`` commits gets a snapshot."""
    return state_bytes > 0 and (cost >= SNAPSHOT_REPLAY_FACTOR * state_bytes or commits_after_start >= SNAPSHOT_MAX_COMMITS)


def snapshot_if_due(store: Store, commit_id: str, open_state: Callable[[], ContextManager[StateView]],
                    values: Callable[[StateView], Mapping[str, np.ndarray]] | None = None) -> bool:
    """Write a snapshot of ``commit_id`` (whose state ``open_state()`` opens) when reading its state would
    cost at least SNAPSHOT_REPLAY_FACTOR times reading it from a snapshot (:func:`read_cost` against the
    state's declared bytes), or apply the updates of at least SNAPSHOT_MAX_COMMITS commits. Returns whether
    it wrote one. ``values(view)``: the state to write, where a commit has its values at hand (each checked
    against the state's sha256), not replayed."""
    with open_state() as view:
        due = is_due(view.state_bytes(), read_cost(view), view.commits_after_start)
        if due:
            write_snapshot(store, commit_id, values(view) if values is not None else view)
    return due
