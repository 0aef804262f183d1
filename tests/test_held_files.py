"""Commit and snapshot files kept open for their next use in the same process (repo/held_files.py, issue 32):
a checkout of a revision opened before opens and parses no file again — while each file is the very file it
was opened from, unchanged (§13.2); anything else is opened, hashed and checked as before."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mdiff.errors import RepositoryError
from mdiff.isolation import isolation_supported
from mdiff.repo import Repository
from tests.test_repo import DATE, same_state
from tests.test_snapshots import lie_in_snapshot

pytestmark = pytest.mark.skipif(not isolation_supported(), reason="only files read by an isolated child are kept")


def _history(repo: Repository, commits: int = 3) -> list[tuple[str, dict]]:
    rng = np.random.default_rng(3)
    current = {f"p{j}": rng.standard_normal(40_000).astype(np.float32) for j in range(3)}
    made = []
    for i in range(commits):
        made.append((repo.commit(current, f"step {i}", date=DATE), dict(current)))
        current = {k: v + np.float32(1e-3) * rng.standard_normal(v.shape).astype(np.float32) for k, v in current.items()}
    return made


def _opened(repo: Repository) -> tuple[int, int]:
    held = repo._held_files()
    return held.opened, held.reused


def test_a_second_checkout_opens_no_file_again(tmp_path):
    repo = Repository.init(tmp_path / "r")
    made = _history(repo)
    repo.snapshot(made[1][0])
    fresh = Repository(tmp_path / "r")  # a process that opened nothing yet
    assert same_state(fresh.checkout(made[2][0]), made[2][1])
    assert _opened(fresh) == (3, 0)  # commits 2 and 1, the snapshot of 1 (where the walk stops)
    assert same_state(fresh.checkout(made[2][0]), made[2][1])
    assert _opened(fresh) == (3, 3)
    assert same_state(fresh.checkout(made[1][0]), made[1][1])  # commit 1 and its snapshot: kept
    assert _opened(fresh) == (3, 5)
    assert same_state(fresh.checkout(made[0][0]), made[0][1])  # the root, not opened before
    assert _opened(fresh) == (4, 5)


def test_a_changed_or_replaced_file_is_opened_again(tmp_path):
    repo = Repository.init(tmp_path / "r")
    made = _history(repo)
    repo.snapshot(made[1][0])
    fresh = Repository(tmp_path / "r")
    fresh.checkout(made[2][0])
    assert _opened(fresh) == (3, 0)
    path = fresh.commit_path(made[2][0])
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns))  # its change time moves: not "unchanged"
    lie_in_snapshot(fresh, made[1][0], made[0][1])  # another file under the snapshot's name: read, and refused
    assert same_state(fresh.checkout(made[2][0]), made[2][1])  # from the commits (MD807: the snapshot lies)
    # commit 2 and the snapshot opened again, commit 1 kept (unchanged), then the root (the snapshot refused by its
    # digest, then by the commits' claims: the new file opened once, kept for the second look)
    assert _opened(fresh) == (3 + 3, 2)


def test_a_corrupt_commit_is_found_though_it_was_opened_before(tmp_path):
    repo = Repository.init(tmp_path / "r")
    made = _history(repo)
    fresh = Repository(tmp_path / "r")
    fresh.checkout(made[2][0])
    path = fresh.commit_path(made[2][0])
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(RepositoryError) as caught:
        fresh.checkout(made[2][0])
    assert caught.value.code == "MD800"


def test_fsck_keeps_nothing_and_reuses_nothing(tmp_path):
    repo = Repository.init(tmp_path / "r")
    made = _history(repo)
    fresh = Repository(tmp_path / "r")
    fresh.checkout(made[2][0])
    before = _opened(fresh)
    assert [f for f in fresh.fsck() if f.is_error] == []
    assert _opened(fresh) == before


def test_a_use_outlives_the_files_being_let_go(tmp_path):
    repo = Repository.init(tmp_path / "r")
    made = _history(repo)
    fresh = Repository(tmp_path / "r")
    with fresh.open_state(made[2][0]) as view:
        kept = [k.diff for k in fresh._held_files()._kept.values()]
        assert len(kept) == 3 and not any(d._closed for d in kept)
        fresh.let_go_files()  # as gc does: closed once no use is open
        assert not any(d._closed for d in kept)
        assert same_state({k: view[k] for k in view.keys()}, made[2][1])  # read through the kept descriptors
    assert all(d._closed for d in kept)
    assert same_state(fresh.checkout(made[2][0]), made[2][1])
    assert _opened(fresh) == (6, 0)
