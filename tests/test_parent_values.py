"""A commit reads its parent's values from the checkpoint the repository committed last, where they still hash
to the parent's (mdiff/repo/parent_values.py): the same commits, without replaying the history.

Counted by work, not time: how many values the parent's state replays (StateView.read calls)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

pytest.importorskip("safetensors")
from safetensors.numpy import save_file  # noqa: E402

from mdiff.repo import Repository  # noqa: E402
from mdiff.repo.states import StateView  # noqa: E402
from tests.helpers import drifting_states  # noqa: E402

DATE = "2026-01-01T00:00:00Z"
NAMES = ("a", "b", "c")


def versions(count: int) -> list[dict[str, np.ndarray]]:
    return drifting_states(count, 7, NAMES)


@pytest.fixture
def replays(monkeypatch) -> list[str]:
    """The names whose value a StateView replays from the history."""
    seen: list[str] = []
    read = StateView.read

    def counted(self, name):
        seen.append(name)
        return read(self, name)

    monkeypatch.setattr(StateView, "read", counted)
    return seen


def files(tmp_path, states) -> list[str]:
    paths = []
    for i, state in enumerate(states):
        path = tmp_path / f"checkpoint-{i}.safetensors"
        save_file(state, str(path))
        paths.append(str(path))
    return paths


def commit_all(root, paths, fresh: bool) -> list[str]:
    """Commit each checkpoint in turn: with one Repository object, or a new one for each (another process)."""
    repo = Repository.init(root)
    ids = []
    for i, path in enumerate(paths):
        if fresh:
            repo = Repository(root)
        ids.append(repo.commit(path, f"v{i}", date=DATE))
    return ids


def test_one_object_commits_the_same_ids_without_replaying_the_parent(tmp_path, replays, monkeypatch):
    paths = files(tmp_path, versions(4))
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")  # nothing remembered between objects (processes)
    fresh = commit_all(tmp_path / "fresh", paths, fresh=True)
    replayed_fresh = len(replays)
    replays.clear()
    kept = commit_all(tmp_path / "kept", paths, fresh=False)
    assert kept == fresh
    assert replayed_fresh == 3 * len(NAMES)  # every commit after the root replayed every parent value
    assert replays == []  # the kept object took each parent value from the checkpoint it committed last


def test_another_process_finds_the_checkpoint_committed_last_in_the_cache(tmp_path, replays, monkeypatch):
    """`mdiff commit` of each new checkpoint folder, a process each: the cache folder says which file was
    committed last, and its values are used where they hash to the parent's."""
    paths = files(tmp_path, versions(3))
    ids = commit_all(tmp_path / "repo", paths, fresh=True)
    assert replays == []
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    assert commit_all(tmp_path / "other", paths, fresh=True) == ids
    assert len(replays) == 2 * len(NAMES)


def test_a_malformed_or_foreign_cache_entry_is_a_miss(tmp_path, replays):
    from mdiff.repo import parent_values

    paths = files(tmp_path, versions(3))
    repo = Repository.init(tmp_path / "repo")
    repo.commit(paths[0], "v0", date=DATE)
    entry = parent_values._entry_path(repo.dir)
    for text in ("{", '{"commit": 1}', "[]", '{"commit": "x", "path": "/dev/zero", "exclude": []}'):
        with open(entry, "w") as out:
            out.write(text)
        assert parent_values.recall(repo.dir) == (None if text != '{"commit": "x", "path": "/dev/zero", "exclude": []}'
                                                  else ("x", "/dev/zero", ()))
    # an entry naming the parent and a file that is no checkpoint: replayed, the commit as ever
    head = repo.head()[1]
    with open(entry, "w") as out:
        out.write(f'{{"commit": "{head}", "path": "/dev/zero", "exclude": []}}')
    made = Repository(repo.root).commit(paths[1], "v1", date=DATE)
    assert sorted(replays) == sorted(NAMES)
    other = Repository.init(tmp_path / "other")
    assert [other.commit(p, f"v{i}", date=DATE) for i, p in enumerate(paths[:2])][1] == made


def test_a_checkpoint_changed_since_is_not_believed(tmp_path, replays):
    states = versions(3)
    paths = files(tmp_path, states)
    repo = Repository.init(tmp_path / "repo")
    first = [repo.commit(paths[0], "v0", date=DATE), repo.commit(paths[1], "v1", date=DATE)]
    tampered = dict(states[1], b=states[1]["b"] + np.float32(1))
    save_file(tampered, paths[1])  # the file committed last now holds other values
    replays.clear()
    last = repo.commit(paths[2], "v2", date=DATE)
    # the first value checked ("a", unchanged) is taken; "b" fails its hash, and from then on the history serves
    assert replays == ["b", "c"]
    other = Repository.init(tmp_path / "other")
    save_file(states[1], paths[1])
    assert [other.commit(p, f"v{i}", date=DATE) for i, p in enumerate(paths)] == [*first, last]
    assert {k: v.tolist() for k, v in repo.checkout(last).items()} == {k: v.tolist() for k, v in states[2].items()}


def test_a_removed_checkpoint_or_one_written_over_falls_back_to_the_history(tmp_path, replays):
    states = versions(3)
    paths = files(tmp_path, states)
    repo = Repository.init(tmp_path / "repo")
    repo.commit(paths[0], "v0", date=DATE)
    repo.commit(paths[1], "v1", date=DATE)
    (tmp_path / "checkpoint-1.safetensors").unlink()
    replays.clear()
    repo.commit(paths[2], "v2", date=DATE)
    assert sorted(replays) == sorted(NAMES)
    # one path written over with each new state: its old values are gone, nothing is read from it twice; from
    # the second commit of that path on, the copy kept in the cache folder serves (below)
    same = tmp_path / "model.safetensors"
    again = Repository.init(tmp_path / "again")
    for i, state in enumerate(states):
        save_file(state, str(same))
        replays.clear()
        again.commit(str(same), f"v{i}", date=DATE)
        assert sorted(replays) == (sorted(NAMES) if i == 1 else [])
    assert {k: v.tolist() for k, v in again.checkout("HEAD").items()} == {k: v.tolist() for k, v in states[2].items()}


def _written_over(tmp_path, states, root, fresh: bool, replays: list[str]) -> tuple[list[str], list[list[str]]]:
    """Each state saved over one file and committed (a new Repository object each: another process); the ids
    and, for each commit, the names its parent replayed."""
    same = tmp_path / "model.safetensors"
    repo = Repository.init(root)
    ids, replayed = [], []
    for i, state in enumerate(states):
        save_file(state, str(same))
        replays.clear()
        repo = Repository(root) if fresh else repo
        ids.append(repo.commit(str(same), f"v{i}", date=DATE))
        replayed.append(sorted(replays))
    return ids, replayed


def test_a_file_written_over_is_copied_to_the_cache_and_the_next_process_reads_its_parent_there(tmp_path, replays, monkeypatch):
    """Issue 32: `mdiff commit model.safetensors` after each epoch, a process each. The root's commit and the
    first of the same path replay (nothing is kept yet); from then on each commit keeps a copy of its file in
    the cache folder (the user's only: 0600), and the next reads its parent's values there: no replay, and
    the very ids of a repository that replays every time."""
    from mdiff.repo import parent_values

    states = versions(5)
    ids, replayed = _written_over(tmp_path, states, tmp_path / "repo", True, replays)
    assert replayed == [[], sorted(NAMES), [], [], []]
    copy = parent_values.copy_path(Repository(tmp_path / "repo").dir, "model.safetensors")
    assert copy is not None and stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    assert parent_values.recall(Repository(tmp_path / "repo").dir) == (ids[-1], copy, ())
    assert (tmp_path / "model.safetensors").read_bytes() == open(copy, "rb").read()  # the copy of the last commit
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    other, replayed_off = _written_over(tmp_path, states, tmp_path / "other", True, replays)
    assert other == ids and replayed_off == [[]] + [sorted(NAMES)] * 4


def test_a_copy_changed_since_is_not_believed(tmp_path, replays):
    from mdiff.repo import parent_values

    states = versions(4)
    ids, _ = _written_over(tmp_path, states[:3], tmp_path / "repo", True, replays)
    copy = parent_values.copy_path(Repository(tmp_path / "repo").dir, "model.safetensors")
    assert copy is not None
    save_file(dict(states[2], a=states[2]["a"] + np.float32(1)), copy)  # the copy now holds another "a"
    save_file(states[3], str(tmp_path / "model.safetensors"))
    replays.clear()
    last = Repository(tmp_path / "repo").commit(str(tmp_path / "model.safetensors"), "v3", date=DATE)
    assert replays == list(NAMES)  # "a" fails its hash first: the history serves every value
    fresh, _ = _written_over(tmp_path, states, tmp_path / "fresh", False, replays)
    assert fresh == [*ids, last]


def test_the_cache_keeps_the_copies_of_the_newest_repositories_only(tmp_path, replays):
    """parent_values.MAX_COPIES: each repository's copy replaces its own; past that many repositories, the
    oldest copies are removed (a repository gone leaves no model's bytes behind for good)."""
    from mdiff.repo import parent_values

    states = versions(2)
    copies = []
    for r in range(parent_values.MAX_COPIES + 2):
        _written_over(tmp_path, states, tmp_path / f"repo{r}", True, replays)
        copy = parent_values.copy_path(Repository(tmp_path / f"repo{r}").dir, "model.safetensors")
        assert copy is not None and os.path.exists(copy)
        copies.append(copy)
        os.utime(copy, ns=(r * 10**9, r * 10**9))  # oldest first, whatever the clock's resolution
    kept = [os.path.exists(c) for c in copies]
    assert kept == [False, False] + [True] * parent_values.MAX_COPIES


@pytest.mark.parametrize("repository_format", [1, 2])
def test_a_commit_hashes_the_file_it_wrote_once(tmp_path, hashed_files, monkeypatch, repository_format):
    """The commit file is hashed as it is read back to be named; opening the commit's own state after (to decide
    on a snapshot) takes it as verified, not hashed again — a second pass over every byte the commit wrote. The
    parent's file is hashed once by an object that has not read it yet (a fresh process), none by one that has."""
    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    paths = files(tmp_path, versions(3))
    repo = Repository.init(tmp_path / "repo", repository_format=repository_format)
    root = repo.commit(paths[0], "v0", date=DATE)
    commits = tmp_path / "repo" / ".mdiff" / "commits"

    def inode(commit_id):
        return os.stat(commits / f"{commit_id}.mdiff").st_ino

    assert hashed_files == [inode(root)]
    hashed_files.clear()
    fresh = Repository(tmp_path / "repo")
    second = fresh.commit(paths[1], "v1", date=DATE)
    assert sorted(hashed_files) == sorted([inode(root), inode(second)])  # the parent's, to read it; its own
    hashed_files.clear()
    third = fresh.commit(paths[2], "v2", date=DATE)
    assert hashed_files == [inode(third)]


def test_a_snapshot_is_written_from_the_checkpoint_committed_not_replayed(tmp_path, replays, monkeypatch):
    """The commit that writes a snapshot (§13.5) takes the state's values from the checkpoint it has just read,
    each where it hashes to the state's sha256, instead of replaying the history since the last snapshot: the
    same snapshot, byte for byte, as the replay writes."""
    from mdiff.repo import snapshots

    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    paths = files(tmp_path, versions(10))
    root = tmp_path / "repo"
    ids = commit_all(root, paths, fresh=False)
    repo = Repository(root)
    made = [cid for cid in ids if repo.snapshot_path(cid).is_file()]
    assert made == [ids[7]]  # replaying it would apply 8 times the state's bytes (SNAPSHOT_REPLAY_FACTOR)
    assert replays == []  # neither a parent's value nor the snapshot's was replayed
    written = repo.snapshot_path(ids[7]).read_bytes()
    snapshots.drop_snapshot(repo, ids[7])
    with repo.open_state(ids[7]) as view:
        repo.write_snapshot(ids[7], view)  # from the history
    assert len(replays) == len(NAMES)
    assert repo.snapshot_path(ids[7]).read_bytes() == written


@pytest.fixture
def parent_hashes(monkeypatch) -> list[str]:
    """The parent values ParentValues hashed to prove them (the sha256 of each), its memory of files emptied."""
    from mdiff.repo import parent_values

    parent_values.forget_known()
    seen: list[str] = []
    real = parent_values.sha256_hex

    def counted(value):
        digest = real(value)
        seen.append(digest)
        return digest

    monkeypatch.setattr(parent_values, "sha256_hex", counted)
    yield seen
    parent_values.forget_known()


def test_a_value_read_again_from_the_file_it_was_hashed_from_unchanged_is_not_hashed_again(tmp_path, replays,
                                                                                              parent_hashes,
                                                                                              monkeypatch):
    """Issue 32: the commit before hashed every value it read from its checkpoint; the next commit reads them
    again as its parent's from that very file, unchanged since (same_file, looked at before its values were
    read): no second hash, no replay, the same ids."""
    from mdiff.repo import parent_values

    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    paths = files(tmp_path, versions(4))
    hashed = commit_all(tmp_path / "hashed", paths, fresh=False)
    assert len(parent_hashes) == 3 * len(NAMES)  # files changed a moment ago (RACY_NS): each value hashed
    parent_hashes.clear()
    monkeypatch.setattr(parent_values, "RACY_NS", 0)  # as if written long ago
    known = commit_all(tmp_path / "known", paths, fresh=False)
    assert known == hashed and replays == [] and parent_hashes == []


def test_a_file_changed_after_its_values_were_hashed_is_hashed_again(tmp_path, replays, parent_hashes, monkeypatch):
    from mdiff.repo import parent_values

    monkeypatch.setattr(parent_values, "RACY_NS", 0)
    states = versions(3)
    paths = files(tmp_path, states)
    repo = Repository.init(tmp_path / "repo")
    first = [repo.commit(paths[0], "v0", date=DATE), repo.commit(paths[1], "v1", date=DATE)]
    assert parent_hashes == []
    tampered = dict(states[1], b=states[1]["b"] + np.float32(1))
    save_file(tampered, paths[1])  # the same size: only its times tell
    last = repo.commit(paths[2], "v2", date=DATE)
    # "a" proved by its hash, "b" refused — in each of the commit's two passes (its parent's summary, then the
    # state walked for the values only the history has)
    assert len(parent_hashes) == 4 and parent_hashes[:2] == parent_hashes[2:] and replays == ["b", "c"]
    save_file(states[1], paths[1])
    other = Repository.init(tmp_path / "other")
    assert [other.commit(p, f"v{i}", date=DATE) for i, p in enumerate(paths)] == [*first, last]


def test_the_snapshot_takes_the_values_its_commit_hashed_without_hashing_them_again(tmp_path, replays,
                                                                                     parent_hashes, monkeypatch):
    """The commit that writes a snapshot hashed every value it read; the snapshot reads them again from that
    file, unchanged: not hashed again, and the same snapshot, byte for byte, as one whose values are hashed."""
    from mdiff.repo import parent_values

    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    paths = files(tmp_path, versions(8))
    hashed = commit_all(tmp_path / "hashed", paths, fresh=False)
    assert len(parent_hashes) == 8 * len(NAMES)  # seven parents' values and the snapshot's (ids[7])
    parent_hashes.clear()
    monkeypatch.setattr(parent_values, "RACY_NS", 0)
    known = commit_all(tmp_path / "known", paths, fresh=False)
    assert known == hashed and parent_hashes == [] and replays == []
    snapshot = f"snapshots/{hashed[7]}.mdiff"
    assert (tmp_path / "known" / ".mdiff" / snapshot).read_bytes() == (tmp_path / "hashed" / ".mdiff" / snapshot).read_bytes()
