"""Snapshots (SPEC.md §13.5) that are cheap, honest and tidy: compressed and written when they pay for
themselves; never believed over the commits they stand for (MD807); dropped by hand, and swept with the
temporary files of killed writers by `mdiff gc` (§13.1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.cli.main import main
from mdiff.errors import RepositoryError
from mdiff.format.dtypes import DTYPES
from mdiff.repo import Repository
from mdiff.repo.snapshots import SNAPSHOT_REPLAY_FACTOR
from tests.helpers import bits_equal
from tests.test_repo import DATE, _sparse_chain, big_state, same_state

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo(tmp_path) -> Repository:
    return Repository.init(tmp_path / "r")


def run(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out, _ = capsys.readouterr()
    return code, out


def snapshotted(repo: Repository, made) -> list[int]:
    return [i for i, (cid, _) in enumerate(made) if repo.snapshot_path(cid).exists()]


def lie_in_snapshot(repo: Repository, commit_id: str, state: dict, meta: dict | None = None) -> None:
    """A well-formed snapshot of ``commit_id`` holding ``state``, whatever the commits say."""
    mdiff.write(repo.snapshot_path(commit_id), {k: mdiff.replace(v) for k, v in state.items()},
                mdiff.Commit("snapshot", date=DATE, meta={"snapshot_of": commit_id, **(meta or {})}))


# ---------------------------------------------------------------- cheap (issue 13.8)


def test_snapshots_are_compressed_like_commits(repo):
    w = np.zeros(20_000, np.float32)  # deflates to almost nothing
    repo.commit({"w": w}, "root", date=DATE)
    repo.snapshot()
    path = repo.snapshot_path(repo.head()[1])
    with h5py.File(path, "r") as f:
        assert f["parameters/w/value"].compression == "gzip"
    assert path.stat().st_size < 20_000


def test_the_policy_writes_a_snapshot_once_a_checkout_would_cost_eight_snapshot_reads(repo):
    """w: float32[1000], 4,000 declared bytes; each commit a sparse update of 100 elements (1,200 declared
    bytes, which cost SPARSE_READ_WEIGHT = 3 times a snapshot's bytes to read: 3,600). Reading commit n from
    the root costs 4,000 + 3,600·n: ≥ 8 × 4,000 from n = 8 on; then from that snapshot the same again."""
    from mdiff.repo import snapshots

    assert SNAPSHOT_REPLAY_FACTOR == 8 and snapshots.SPARSE_READ_WEIGHT == 3
    made = _sparse_chain(repo, 17)
    assert repo.replay_cost(made[7][0]) == (8, 4000 + 7 * 1200, 4000)  # the root's updates and 7 commits'
    with repo.open_state(made[7][0]) as view:
        assert view.replay_bytes_by_type() == {"replace": 4000, "sparse": 7 * 1200}
        assert snapshots.read_cost(view) == 4000 + 7 * 3600 < 8 * 4000
    assert snapshotted(repo, made) == [8, 16]
    assert repo.replay_cost(made[17][0]) == (1, 4000 + 1200, 4000)
    with repo.open_state(made[17][0]) as view:
        assert view.snapshot == made[16][0]
    for cid, expected in made:
        assert same_state(repo.checkout(cid), expected)
    with mdiff.open(repo.snapshot_path(made[8][0])) as snapshot:
        assert snapshot.commit.meta == {"snapshot_of": made[8][0]} and snapshot["w"].type == "replace"


def test_small_commits_and_whole_replacements_never_pay_for_a_snapshot(repo):
    made = _sparse_chain(repo, 12, changed=1)  # 36 bytes of reading a commit: ~780 commits before one pays (256)
    assert snapshotted(repo, made) == []
    rng = np.random.default_rng(3)
    for i in range(6):  # each commit replaces w: a checkout reads only the last replace
        value = rng.standard_normal(1000).astype(np.float32)
        repo.commit({"w": value}, f"replaced {i}", date=DATE, explicit={"w": mdiff.replace(value)})
    assert list((repo.dir / "snapshots").iterdir()) == []


# ---------------------------------------------------------------- honest (issue 14.2)


@pytest.mark.parametrize("lie", ["other values", "a parameter more", "a parameter less", "another dtype",
                                 "another shape", "a false meta.inexact"])
def test_a_snapshot_that_disagrees_with_its_commits_is_walked_past_and_reported(repo, capsys, lie):
    made = _sparse_chain(repo, 3)
    target, truth = made[2]
    fake = dict(truth)
    meta = {}
    if lie == "other values":
        fake["w"] = truth["w"] + np.float32(1)
    elif lie == "a parameter more":
        fake["extra"] = np.zeros(2, np.int8)
    elif lie == "a parameter less":
        fake = {"other": truth["w"]}
    elif lie == "another dtype":
        fake["w"] = truth["w"].view(np.int32)
    elif lie == "another shape":
        fake["w"] = truth["w"].reshape(10, 100)
    else:
        meta = {"inexact": '["w"]'}
    lie_in_snapshot(repo, target, fake, meta)
    fresh = Repository.find(repo.root)
    for cid, expected in made:  # the commits' values, never the snapshot's
        assert same_state(fresh.checkout(cid), expected)
    with fresh.open_state(made[3][0]) as view:
        assert view.snapshot is None and view.rejected[target][0] == "MD807"
    findings = fresh.fsck()
    assert [(f.code, f.severity, Path(f.path).name) for f in findings] == [("MD807", "error", f"{target}.mdiff")]
    code, out = run(capsys, "fsck", "-C", repo.root, "--json")
    assert code == 1 and json.loads(out)["sound"] is False
    code, out = run(capsys, "gc", "-C", repo.root, "--json")
    report = json.loads(out)
    assert code == 0 and [r["path"] for r in report["removed"]] == [f"snapshots/{target}.mdiff"]
    assert "MD807" in report["removed"][0]["reason"] and fresh.fsck() == []


def test_an_agreeing_snapshot_is_used_and_one_with_a_damaged_value_is_walked_past(repo):
    made = _sparse_chain(repo, 9)  # a snapshot at 8
    with repo.open_state(made[9][0]) as view:
        assert view.snapshot == made[8][0] and view.rejected == {}
    with h5py.File(repo.snapshot_path(made[8][0]), "r+") as f:  # the data, not the sha256 its metadata records
        data = f["parameters/w/value"]
        data[3] = data[3] + np.float32(1)
    assert same_state(Repository.find(repo.root).checkout(made[9][0]), made[9][1])


def test_an_inexact_value_is_never_taken_from_a_snapshot(repo):
    """No sha256 pins a low_rank result, so a snapshot's bits for it cannot be checked: replayed."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    repo.commit({"w": w, "b": np.ones(3, np.float32)}, "root", date=DATE)
    lora = mdiff.low_rank(rng.standard_normal((8, 2)), rng.standard_normal((2, 6)), (8, 6), DTYPES["float32"], scale=0.5)
    after = repo.commit({"w": w, "b": np.ones(3, np.float32)}, "lora", date=DATE, explicit={"w": lora})
    replayed = repo.checkout(after)
    lie_in_snapshot(repo, after, {"w": np.zeros((8, 6), np.float32), "b": np.ones(3, np.float32)}, {"inexact": '["w"]'})
    fresh = Repository.find(repo.root)
    with fresh.open_state(after) as view:
        assert view.snapshot == after  # it agrees: b is taken from it, w is not
        assert bits_equal(view.read("w"), replayed["w"]) and bits_equal(view.read("b"), replayed["b"])
    assert fresh.fsck() == []


def test_a_snapshot_of_a_commit_not_in_the_repository_is_reported_and_swept(repo):
    made = _sparse_chain(repo, 1)
    ghost = "ab" * 32
    lie_in_snapshot(repo, ghost, made[1][1])
    findings = repo.fsck()
    assert [(f.code, Path(f.path).name) for f in findings] == [("MD303", f"{ghost}.mdiff")]
    assert "not in the repository" in findings[0].message
    assert [item.path.name for item in repo.gc().removed] == [f"{ghost}.mdiff"]


# ---------------------------------------------------------------- tidy (issues 13.8, 14.14)


def test_snapshot_drop(repo, capsys):
    made = _sparse_chain(repo, 2)
    repo.snapshot(made[1][0])
    size = repo.snapshot_path(made[1][0]).stat().st_size
    code, out = run(capsys, "snapshot", "--drop", "HEAD~1", "-C", repo.root, "--json")
    assert code == 0 and json.loads(out) == {"dropped": made[1][0], "bytes_freed": size}
    assert not repo.snapshot_path(made[1][0]).exists()
    code, out = run(capsys, "snapshot", "--drop", "HEAD~1", "-C", repo.root, "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "MD801"
    ghost = "cd" * 32  # a commit no longer in the repository: named by its full id
    lie_in_snapshot(repo, ghost, made[0][1])
    assert repo.drop_snapshot(ghost)[0] == ghost and not repo.snapshot_path(ghost).exists()


def _sizes(paths) -> int:
    total = 0
    for path in paths:
        if path.is_dir():
            total += sum(p.lstat().st_size for p in path.rglob("*"))
        else:
            total += path.lstat().st_size
    return total


def test_gc_removes_temporaries_and_stale_snapshots_and_never_a_commit(repo, capsys):
    made = _sparse_chain(repo, 9)  # main: a snapshot at 8, which stays
    repo.switch("side", create=True, start=made[1][0])
    side = repo.commit({"w": np.ones(1000, np.float32)}, "side", date=DATE)
    repo.snapshot(side)
    repo.switch("main")
    repo.delete_branch("side")  # side's commit: kept by side's reflog (§13.6), and with it its snapshot
    d = repo.dir
    (d / "commits" / ".commit.mdiff.0123456789abcdef.tmp").write_bytes(b"x" * 100)
    (d / "refs" / "heads" / ".main.a81f.tmp").write_text("not a ref\n")
    (d / ".staging").mkdir()
    (d / ".staging" / "w.safetensors").write_bytes(b"y" * 300)
    (d / "tmpab_12cd3").mkdir()  # an earlier mdiff's merge: tempfile.mkdtemp(dir=.mdiff)
    (d / "tmpab_12cd3" / "ours.safetensors").write_bytes(b"z" * 500)
    (d / "snapshots" / f"{made[2][0]}.mdiff").write_bytes(b"garbage")
    (d / "snapshots" / "notes.mdiff").write_bytes(b"not named after a commit")
    (d / "snapshots" / "README").write_text("not a snapshot's name: left alone\n")
    temporaries = [d / "commits" / ".commit.mdiff.0123456789abcdef.tmp", d / "refs" / "heads" / ".main.a81f.tmp",
                   d / ".staging", d / "tmpab_12cd3"]
    stale = [d / "snapshots" / f"{made[2][0]}.mdiff", d / "snapshots" / "notes.mdiff"]
    expected = sorted(str(p.relative_to(d)) for p in temporaries + stale)
    freed = _sizes(temporaries + stale)
    commits = sorted(p.name for p in (d / "commits").iterdir() if not p.name.startswith("."))

    findings = repo.fsck()  # a snapshot of an unreachable commit is harmless: not fsck's business
    assert sorted(str(Path(f.path).relative_to(d)) for f in findings) == sorted(set(expected) - {f"snapshots/{side}.mdiff"})
    assert all(f.code == "MD303" for f in findings)
    assert any("(500 bytes)" in f.message and "tmpab_12cd3" in f.path for f in findings)

    code, out = run(capsys, "gc", "--dry-run", "--json", "-C", repo.root)
    report = json.loads(out)
    assert code == 0 and report["dry_run"] is True and report["bytes_freed"] == freed
    assert sorted(r["path"] for r in report["removed"]) == expected and report["kept"] == []
    assert all(p.exists() for p in temporaries + stale)

    code, out = run(capsys, "gc", "-C", repo.root)
    assert code == 0 and out.strip().endswith(f"({freed} bytes) freed")
    assert not any(p.exists() for p in temporaries + stale)
    assert repo.snapshot_path(made[8][0]).exists() and repo.commit_path(side).exists()
    assert repo.snapshot_path(side).exists()
    assert (d / "snapshots" / "README").exists()
    assert sorted(p.name for p in (d / "commits").iterdir()) == commits
    assert repo.fsck() == [] and same_state(repo.checkout("HEAD"), made[9][1])


def test_gc_takes_the_writers_lock(repo):
    _sparse_chain(repo, 1)
    with repo.lock():
        with pytest.raises(RepositoryError) as info:
            Repository.find(repo.root).gc(wait=False)
    assert info.value.code == "MD803"


KILLED = """
import os, signal, sys
from mdiff.format.writer import DiffWriter
from mdiff.repo import Repository
from tests.test_repo import big_state
written = []
original = DiffWriter.add
def add(self, name, update):  # killed in the middle of writing a file: after its first parameter
    original(self, name, update)
    written.append(name)
    # a commit is written in commits/ through a descriptor of the folder (/proc/self/fd/N): known by its name
    into = "commits" if self.path.name.startswith(".commit.") else self.path.parent.name
    if into == sys.argv[2] and len(written) >= 2:
        self._chunks.drain()  # the parameters' deflated chunks reach the file first (they are written behind `add`)
        os.kill(os.getpid(), signal.SIGKILL)
DiffWriter.add = add
r = Repository.find(sys.argv[1])
if sys.argv[2] == "commits":
    r.merge("side", "average", "merge", date="2026-05-01T00:00:00Z")
else:
    r.snapshot("HEAD")
"""


@pytest.mark.parametrize("where", ["commits", "snapshots"])
def test_a_killed_merge_or_snapshot_leaves_only_hidden_files_which_gc_removes(repo, where):
    """§13.1: whatever a writer killed mid-write leaves in .mdiff/ is named with a leading '.'; fsck
    reports it with its size, gc removes it, and the repository is as it was."""
    repo.commit(big_state(0), "step 0", date=DATE)
    repo.switch("side", create=True)
    repo.commit(big_state(1), "step 1", date=DATE)
    repo.switch("main")
    repo.commit(big_state(2), "step 2", date=DATE)
    before = sorted(p.relative_to(repo.dir) for p in repo.dir.rglob("*"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", KILLED, str(repo.root), where], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    left = sorted(set(p.relative_to(repo.dir) for p in repo.dir.rglob("*")) - set(before))
    assert left and all(any(part.startswith(".") for part in p.parts) for p in left), left
    stray = [f for f in repo.fsck() if f.code == "MD303"]
    assert stray and all(f"({(repo.dir / Path(f.path).relative_to(repo.dir)).stat().st_size} bytes)" in f.message
                         for f in stray)
    assert [f for f in repo.fsck() if f.is_error] == []
    report = repo.gc()
    assert report.bytes_freed > 100_000 and sorted(p.relative_to(repo.dir) for p in repo.dir.rglob("*")) == before
    assert repo.fsck() == [] and same_state(repo.checkout("HEAD"), big_state(2))


def test_many_small_commits_get_a_snapshot_every_snapshot_max_commits(repo, monkeypatch):
    """However small its commits, a replay holds at most SNAPSHOT_MAX_COMMITS commit files open."""
    from mdiff.repo import snapshots

    monkeypatch.setattr(snapshots, "SNAPSHOT_MAX_COMMITS", 5)
    made = _sparse_chain(repo, 11, changed=1)
    assert snapshotted(repo, made) == [4, 9]  # the root and 4 commits; then 5 after the snapshot
    assert same_state(Repository.find(repo.root).checkout("HEAD"), made[-1][1])


@pytest.mark.parametrize("with_snapshot", [False, True])
def test_a_long_walk_holds_open_only_the_commit_files_a_replay_reads(repo, monkeypatch, with_snapshot):
    from mdiff.repo import states

    made = _sparse_chain(repo, 9)  # a snapshot at 8
    if not with_snapshot:
        for path in (repo.dir / "snapshots").iterdir():
            path.unlink()
    monkeypatch.setattr(states, "_KEEP_OPEN", 2)  # the walk closes all but the 3 newest files at once
    fresh = Repository.find(repo.root)
    with fresh.open_state(made[9][0]) as view:
        assert sorted(view._files) == sorted(cid for cid, _ in (made[9:] if with_snapshot else made))
        assert bits_equal(view.read("w"), made[9][1]["w"])
    for cid, expected in made:
        assert same_state(fresh.checkout(cid), expected)


def test_a_model_folder_s_files_are_checked_too(repo, tmp_path):
    """A snapshot of a folder's state agrees only with the files its commits define; a lying one about a
    file is walked past (the files themselves are always read from the commits)."""
    from mdiff.checkpoints import save_checkpoint

    folder = tmp_path / "model"
    folder.mkdir()
    save_checkpoint(folder / "model.safetensors", {"w": np.arange(6, dtype=np.float32)})
    (folder / "config.json").write_text('{"hidden": 6}\n')
    cid = repo.commit(str(folder), "a folder", date=DATE)
    repo.snapshot(cid)
    with repo.open_state(cid) as view:
        assert view.snapshot == cid and set(view.files) == {"config.json"}
        layout = view.layout_bytes
    assert repo.fsck() == []
    updates = {"w": mdiff.replace(np.arange(6, dtype=np.float32))}
    with mdiff.DiffWriter(repo.snapshot_path(cid), mdiff.Commit("snapshot", date=DATE, meta={"snapshot_of": cid})) as w:
        for name, update in updates.items():
            w.add(name, update)
        w.add_file("config.json", mdiff.replace(np.frombuffer(b'{"hidden": 7}\n', np.uint8)))
        if layout is not None:
            w.set_layout(mdiff.replace(np.frombuffer(layout, np.uint8)))
    with Repository.find(repo.root).open_state(cid) as view:
        assert view.snapshot is None and "config.json" in view.rejected[cid][1]
        assert view.files["config.json"] == b'{"hidden": 6}\n'
    assert [f.code for f in repo.fsck()] == ["MD807"]


def test_a_snapshot_from_the_checkpoint_committed_hashes_each_value_once(tmp_path, monkeypatch):
    """The commit that writes a snapshot (§13.5) proves each value it takes from the checkpoint against the state's
    sha256 (repo/parent_values.py): that digest is the `replace` update's, not computed a second time (issue 32,
    session 6: one sha256 of the whole state less on the snapshot's serial path) — the same file, byte for byte,
    as the one written from the history, where each value is hashed as it is encoded."""
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    from mdiff.repo import parent_values, snapshots
    from mdiff.updates import replace
    from tests.helpers import drifting_states

    monkeypatch.setenv("MDIFF_CACHE_DIR", "off")
    hashed: dict[str, list[int]] = {"proved": [], "encoded": []}
    for module, key in ((parent_values, "proved"), (replace, "encoded")):
        def counted(array, real=module.sha256_hex, key=key):
            hashed[key].append(array.nbytes)
            return real(array)
        monkeypatch.setattr(module, "sha256_hex", counted)
    repo = Repository.init(tmp_path / "r")
    ids = []
    for i, state in enumerate(drifting_states(8, 7)):
        path = tmp_path / f"checkpoint-{i}.safetensors"
        save_file(state, str(path))
        for values in hashed.values():
            values.clear()
        ids.append(repo.commit(str(path), f"v{i}", date=DATE))
    assert [cid for cid in ids if repo.snapshot_path(cid).is_file()] == [ids[7]]
    # the parent's three values and the snapshot's three, each proved once; none hashed again to be encoded (what
    # is: the checkpoint's layout, its few bytes of header as the snapshot's `replace`, §5.6)
    assert hashed["proved"] == [32 * 16 * 4] * 6
    with repo.open_state(ids[7]) as view:
        assert hashed["encoded"] == [len(view.layout_bytes)]
    written = repo.snapshot_path(ids[7]).read_bytes()
    snapshots.drop_snapshot(repo, ids[7])
    hashed["encoded"].clear()
    with repo.open_state(ids[7]) as view:
        repo.write_snapshot(ids[7], view)  # from the history: each value hashed as it is encoded
        assert hashed["encoded"] == [32 * 16 * 4] * 3 + [len(view.layout_bytes)]
    assert repo.snapshot_path(ids[7]).read_bytes() == written


def test_a_snapshot_whose_value_the_new_state_lacks_is_written_from_the_walk(tmp_path, monkeypatch):
    """A masked commit's values are not the state dict's (§13.4): the snapshot's writer, reading ahead on a thread of
    its own, meets a value only the state's walk has; the half-written file goes and the snapshot is written again
    from the walk — the same bytes as from the history, no temporary file left."""
    from mdiff.repo import snapshots, state_cache
    from tests.helpers import drifting_states

    monkeypatch.setenv("MDIFF_CACHE_DIR", str(tmp_path / "cache"))
    walks_needed: list[str] = []
    view = state_cache.KnownState.view

    def counted(self):
        import threading
        walks_needed.append(threading.current_thread().name)
        return view(self)

    monkeypatch.setattr(state_cache.KnownState, "view", counted)
    repo = Repository.init(tmp_path / "r")
    ids = []
    for i, state in enumerate(drifting_states(8, 3)):
        masks = None
        if i == 7:
            masks = {name: np.ones(value.shape, bool) for name, value in state.items()}
            masks["a"][0, 0] = False
        ids.append(repo.commit(state, f"v{i}", date=DATE, masks=masks))
    assert [cid for cid in ids if repo.snapshot_path(cid).is_file()] == [ids[7]]
    # "a": the value committed is not the state dict's; "b", read ahead, may have met the same before "a"'s error
    # stopped the reading (ParentValues stops trusting the dict after one value that is not the state's)
    assert walks_needed[:1] == ["mdiff-ahead_0"] and set(walks_needed) == {"mdiff-ahead_0"} and len(walks_needed) <= 2
    assert [p.name for p in (tmp_path / "r" / ".mdiff" / "snapshots").iterdir() if p.name.startswith(".")] == []
    written = repo.snapshot_path(ids[7]).read_bytes()
    snapshots.drop_snapshot(repo, ids[7])
    with repo.open_state(ids[7]) as state_view:
        repo.write_snapshot(ids[7], state_view)
    assert repo.snapshot_path(ids[7]).read_bytes() == written
