"""A commit reads its parent's state from the summary the parent's commit kept in the user's cache folder
(mdiff/repo/state_cache.py), believed only where its claims' digest is the parent's `state_sha256` and its
seal is the cache's: a chain committed by a process each hashes the same number of commit files at every
commit, and commits the same ids and snapshots, byte for byte, with or without the cache.

Counted by work, not time: the commit files hashed to check their ids (§13.2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")
from safetensors.numpy import save_file  # noqa: E402

from mdiff.repo import Repository  # noqa: E402
from tests.helpers import drifting_states  # noqa: E402

DATE = "2026-01-01T00:00:00Z"
NAMES = ("a", "b", "c")
COUNT = 18  # past the snapshots of commits 7 and 14 (replaying them would apply 8 times the state's bytes)


def versions(count: int) -> list[dict[str, np.ndarray]]:
    return drifting_states(count, 11, NAMES)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("checkpoints")
    paths = []
    for i, state in enumerate(versions(COUNT)):
        path = folder / f"checkpoint-{i}.safetensors"
        save_file(state, str(path))
        paths.append(str(path))
    return paths


@pytest.fixture
def hashed(hashed_files) -> list[int]:
    """The inodes of the commit files hashed to check their ids, in order (conftest's hashed_files)."""
    return hashed_files


def chain(root: Path, paths: list[str], hashed: list[int], between=None) -> tuple[list[str], list[int], dict[str, bytes]]:
    """Each checkpoint committed by a new Repository object (another process): the ids, the commit files each
    commit hashed, and the snapshots written (by commit id, their bytes). ``between(repo, ids)`` runs before
    each commit after the first two."""
    Repository.init(root)
    ids: list[str] = []
    counts: list[int] = []
    for i, path in enumerate(paths):
        repo = Repository(root)
        if between is not None and i >= 2:
            between(repo, ids)
        hashed.clear()
        ids.append(repo.commit(path, f"v{i}", date=DATE))
        counts.append(len(hashed))
    snapshots = {cid: repo.snapshot_path(cid).read_bytes() for cid in ids if repo.snapshot_path(cid).is_file()}
    return ids, counts, snapshots


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "states").rglob("*.json"))


def test_a_chain_by_processes_hashes_two_commit_files_a_commit_and_commits_the_same_bytes(tmp_path, checkpoints, hashed,
                                                                                         monkeypatch):
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    walked, walked_counts, walked_snapshots = chain(tmp_path / "walked", checkpoints, hashed)
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(tmp_path / "cache"))
    ids, counts, snapshots = chain(tmp_path / "kept", checkpoints, hashed)
    assert ids == walked
    assert snapshots == walked_snapshots and [ids.index(cid) for cid in snapshots] == [7, 14]
    assert counts == [1] + [2] * (COUNT - 1)  # the root's own; then the parent's and its own, every commit
    # without the cache each process walks back to the snapshot: 1, 2, … files of the history, and its own
    assert walked_counts[1:8] == [2, 3, 4, 5, 6, 7, 8] and walked_counts[8] == 2
    assert [path.stem for path in entries(tmp_path / "cache")] == [ids[-1]]  # the tip's: each parent's is dropped


def tamper(cache: Path, how) -> None:
    for path in entries(cache):
        entry = json.loads(path.read_text())
        how(entry)
        path.write_text(json.dumps(entry))


@pytest.mark.parametrize("how", ["costs", "claims", "line", "garbage"])
def test_an_entry_edited_is_not_believed(tmp_path, checkpoints, hashed, monkeypatch, how):
    """An entry edited — its costs (which would move a snapshot), its claims (another parent's), its line, or not
    JSON — changes nothing: the walk serves, the same ids and snapshots."""
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    walked, _, walked_snapshots = chain(tmp_path / "walked", checkpoints, hashed)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(cache))

    def edit(entry: dict) -> None:
        if how == "costs":
            for cost in entry["costs"].values():
                cost[1] *= 100
        elif how == "claims":
            entry["parameters"]["a"][2] = "0" * 64
        elif how == "line":
            entry["line"] = entry["line"][-1:]

    def between(repo, ids):
        if how == "garbage":
            for path in entries(cache):
                path.write_text("{not json")
        else:
            tamper(cache, edit)

    ids, counts, snapshots = chain(tmp_path / "kept", checkpoints, hashed, between)
    assert ids == walked and snapshots == walked_snapshots
    assert counts[2:8] == [3, 4, 5, 6, 7, 8]  # walked: no entry believed


def test_a_resealed_entry_of_other_claims_is_not_believed(tmp_path, checkpoints, hashed, monkeypatch):
    """Claims sealed with the cache's own key but not the parent's state (the parent's `state_sha256` tells)."""
    from mdiff.format import walk_cache

    cache = tmp_path / "cache"
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(cache))
    key = None

    def between(repo, ids):
        nonlocal key
        found = repo.walk_cache()
        key = found._key(create=False)
        for path in entries(cache):
            entry = json.loads(path.read_text())
            entry.pop("seal")
            entry["parameters"]["a"][2] = "0" * 64
            entry["costs"]["a"] = [0, 0]
            path.write_text(json.dumps({**entry, "seal": walk_cache._seal(key, entry)}))

    ids, counts, _ = chain(tmp_path / "kept", checkpoints[:6], hashed, between)
    assert counts[2:] == [3, 4, 5, 6]
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    walked, _, _ = chain(tmp_path / "walked", checkpoints[:6], hashed)
    assert ids == walked


def test_a_cache_folder_others_may_write_is_not_used(tmp_path, checkpoints, hashed, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(cache))

    def between(repo, ids):
        os.chmod(cache / "states", 0o777)

    ids, counts, _ = chain(tmp_path / "kept", checkpoints[:6], hashed, between)
    assert counts[2:] == [3, 4, 5, 6]
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    assert ids == chain(tmp_path / "walked", checkpoints[:6], hashed)[0]


def test_a_snapshot_written_or_dropped_since_is_seen(tmp_path, checkpoints, hashed, monkeypatch):
    """The summary's replay cost holds only while the repository's snapshots along its line are as they were: a
    snapshot written (`mdiff snapshot`) or dropped since sends the next commit back to the walk, whose snapshot
    decisions are then those of a repository without the cache."""
    def between(repo, ids):
        if len(ids) == 3:
            repo.snapshot(ids[-1])
        if len(ids) == 12:
            repo.drop_snapshot([cid for cid in ids if repo.snapshot_path(cid).is_file()][-1])

    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    walked, walked_counts, walked_snapshots = chain(tmp_path / "walked", checkpoints, hashed, between)
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(tmp_path / "cache"))
    ids, counts, snapshots = chain(tmp_path / "kept", checkpoints, hashed, between)
    assert ids == walked and snapshots == walked_snapshots
    assert counts[3] == walked_counts[3] and counts[12] == walked_counts[12]  # walked
    assert counts[4:12] == [2] * 8 and counts[13:] == [2] * (COUNT - 13)


def test_a_parent_value_the_last_checkpoint_no_longer_gives_is_replayed(tmp_path, checkpoints, hashed, monkeypatch):
    """The checkpoint committed last was changed since: the commit written from the summary meets a value it
    cannot take from it, abandons that writing and writes again from the state walked — the same commit."""
    import shutil

    copies = [str(tmp_path / f"c{i}.safetensors") for i in range(6)]
    for source, target in zip(checkpoints, copies):
        shutil.copyfile(source, target)

    def between(repo, ids):  # the last committed checkpoint written over with other values
        save_file(versions(1)[0] | {"a": np.zeros((32, 16), np.float32)}, copies[len(ids) - 1])

    ids, counts, _ = chain(tmp_path / "kept", copies, hashed, between)
    assert counts[2:] == [3, 4, 5, 6]  # walked, from the parent back to the root
    for source, target in zip(checkpoints, copies):
        shutil.copyfile(source, target)
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    assert ids == chain(tmp_path / "walked", copies, hashed)[0]


def test_state_dicts_committed_by_processes(tmp_path, hashed, monkeypatch):
    """No checkpoint to take the parent's values from: they are replayed, the summary still spares the
    snapshot decision's walk of the new commit; the same ids."""
    states = versions(10)

    def commit_all(root):
        Repository.init(root)
        made = []
        for i, state in enumerate(states):
            made.append(Repository(root).commit(state, f"v{i}", date=DATE))
        return made

    ids = commit_all(tmp_path / "kept")
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    assert ids == commit_all(tmp_path / "walked")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_an_entry_someone_else_owns_is_not_believed(tmp_path, checkpoints, hashed, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(cache))

    def between(repo, ids):
        for path in entries(cache):
            os.chown(path, 12345, 12345)

    ids, counts, _ = chain(tmp_path / "kept", checkpoints[:6], hashed, between)
    assert counts[2:] == [3, 4, 5, 6]
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    assert ids == chain(tmp_path / "walked", checkpoints[:6], hashed)[0]
