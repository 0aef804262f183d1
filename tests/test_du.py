"""`mdiff du` (alias `count-objects`), issue 27: is it worth it? What `.mdiff/` stores against what full
checkpoints of every commit's state would take — per commit with -v, and in all; exact bytes with --json."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mdiff.repo import Repository
from mdiff.words import format_size
from tests.test_repo import DATE, run


@pytest.fixture(autouse=True)
def _an_author(monkeypatch):
    monkeypatch.setenv("MDIFF_AUTHOR", "Ada <ada@example.org>")


def nbytes(state: dict[str, np.ndarray]) -> int:
    """A full checkpoint's weights, counted apart from mdiff: elements × the dtype's size."""
    return sum(math.prod(v.shape) * v.dtype.itemsize for v in state.values())


@pytest.fixture
def history(tmp_path):
    """main: root → c2 (w changed, e added) → c3 (b deleted), snapshot at c3; side: root → c4 (w as float64);
    c5 on main after c3, then main reset to c3: c5 is reachable from no ref (its reflog entry keeps it)."""
    repo = Repository.init(tmp_path / "r")
    rng = np.random.default_rng(0)
    root = {"w": rng.standard_normal((10, 20)).astype(np.float32), "b": np.arange(7, dtype=np.int64)}
    c2 = {"w": root["w"] + np.float32(1), "b": root["b"], "e": np.ones((3, 5), ml_dtypes.bfloat16)}
    c3 = {"w": c2["w"], "e": c2["e"]}
    c4 = {"w": root["w"].astype(np.float64), "b": root["b"]}
    c5 = {**c3, "x": np.arange(100, dtype=np.uint8)}
    states = {}
    states[repo.commit(root, "root", date=DATE)] = root
    states[repo.commit(c2, "c2", date=DATE)] = c2
    third = repo.commit(c3, "c3", date=DATE)
    states[third] = c3
    repo.snapshot(third)
    repo.switch("side", create=True, start="HEAD~2")
    side = repo.commit(c4, "c4", date=DATE)
    states[side] = c4
    repo.switch("main")
    lost = repo.commit(c5, "c5", date=DATE)
    states[lost] = c5
    repo.reset(third)
    return repo, states, lost, side


def other_bytes(repo: Repository) -> int:
    """Every regular file of .mdiff/ but the commit files and snapshots."""
    total = 0
    for here, _, files in os.walk(repo.dir):
        for name in files:
            path = Path(here) / name
            if path.parent.name in ("commits", "snapshots") and name.endswith(".mdiff") and not name.startswith("."):
                continue
            total += path.stat().st_size if path.is_file() and not path.is_symlink() else 0
    return total


def test_du_counts_every_commit_s_bytes_and_full_checkpoint_exactly(history, capsys):
    repo, states, lost, side = history
    code, out, _ = run(capsys, "du", "--json", "-C", repo.root)
    assert code == 0
    data = json.loads(out)
    stored = {c: os.path.getsize(repo.commit_path(c)) for c in states}
    rows = {row["id"]: row for row in data["commits"]}
    assert set(rows) == set(states)
    for commit_id, state in states.items():
        row = rows[commit_id]
        assert row["stored_bytes"] == stored[commit_id]
        assert row["checkpoint_bytes"] == nbytes(state), row
        assert row["ratio"] == stored[commit_id] / nbytes(state)
        assert row["reachable"] == (commit_id != lost)
        assert row["message"] == repo.metadata(commit_id).message
    assert [row["id"] for row in data["commits"]][-1] == lost  # the unreachable ones come last
    snapshots = [p for p in (repo.dir / "snapshots").iterdir() if p.suffix == ".mdiff"]
    assert len(snapshots) >= 1
    total = sum(stored.values()) + sum(p.stat().st_size for p in snapshots) + other_bytes(repo)
    assert data["totals"] == {
        "commits": 5, "unreachable": 1, "unreadable": 0, "commit_bytes": sum(stored.values()),
        "unreachable_commit_bytes": stored[lost], "snapshots": len(snapshots),
        "snapshot_bytes": sum(p.stat().st_size for p in snapshots), "other_bytes": other_bytes(repo),
        "repository_bytes": total, "checkpoint_bytes": sum(nbytes(s) for s in states.values()),
        "ratio": total / sum(nbytes(s) for s in states.values())}
    assert nbytes(states[side]) == 10 * 20 * 8 + 7 * 8  # the retyped parameter counts at its new dtype


def test_du_says_it_in_words_and_count_objects_is_du(history, capsys):
    repo, states, lost, _ = history
    code, out, _ = run(capsys, "du", "-C", repo.root)
    totals = json.loads(run(capsys, "du", "--json", "-C", repo.root)[1])["totals"]
    lines = out.splitlines()
    assert code == 0 and lines[0] == (
        f".mdiff/ holds {format_size(totals['repository_bytes'])}: 5 commits in {format_size(totals['commit_bytes'])}, "
        f"1 snapshot in {format_size(totals['snapshot_bytes'])}, other files {format_size(totals['other_bytes'])}")
    assert lines[1].startswith(f"full checkpoints of every commit would take {format_size(totals['checkpoint_bytes'])}: "
                               f".mdiff/ is {totals['ratio']:.1%} of that")
    assert lines[2] == (f"1 commit ({format_size(os.path.getsize(repo.commit_path(lost)))}) is reached by no branch, "
                        "tag or HEAD: `mdiff gc` removes it once no reflog entry keeps it")
    assert run(capsys, "count-objects", "-C", repo.root)[1] == out
    code, verbose, _ = run(capsys, "du", "-v", "-C", repo.root)
    rows = verbose.splitlines()
    assert rows[0].split() == ["COMMIT", "STORED", "CHECKPOINT", "RATIO", "MESSAGE"]
    assert rows[len(states) - 1 + 1] == "unreachable:"
    assert rows[len(states) + 1].split() == [lost[:12], *format_size(os.path.getsize(repo.commit_path(lost))).split(),
                                             *format_size(nbytes(states[lost])).split(),
                                             f"{os.path.getsize(repo.commit_path(lost)) / nbytes(states[lost]):.1%}", "c5"]
    assert verbose.endswith(out)


def test_a_commit_that_cannot_be_read_is_counted_by_its_size_and_its_state_as_unknown(history, capsys):
    repo, states, lost, side = history
    path = repo.commit_path(side)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    code, out, _ = run(capsys, "du", "--json", "-C", repo.root)
    assert code == 0
    rows = {row["id"]: row for row in json.loads(out)["commits"]}
    assert rows[side]["checkpoint_bytes"] is None and rows[side]["stored_bytes"] == len(data)
    assert all(rows[c]["checkpoint_bytes"] == nbytes(s) for c, s in states.items() if c != side)
    code, out, _ = run(capsys, "du", "-C", repo.root)
    assert "1 commit cannot be read (nor the states after them): `mdiff fsck` says why" in out


def test_an_empty_repository(tmp_path, capsys):
    repo = Repository.init(tmp_path / "r")
    code, out, _ = run(capsys, "du", "-C", repo.root)
    assert code == 0 and out.splitlines() == [
        f".mdiff/ holds {format_size(other_bytes(repo))}: 0 commits in 0 B, 0 snapshots in 0 B, other files "
        f"{format_size(other_bytes(repo))}"]
