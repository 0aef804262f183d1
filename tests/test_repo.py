"""The repository (SPEC.md §13): history, checkout, merges with exact numbers, safety under kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import load_checkpoint, save_checkpoint
from mdiff.cli.main import main
from mdiff.errors import RepositoryError
from mdiff.format.dtypes import DTYPES
from mdiff.repo import Repository
from mdiff.repo.history import graph_lines, resolve
from tests import helpers
from tests.helpers import bits_equal

DATE = "2026-05-01T00:00:00Z"


def state(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layer.w": rng.standard_normal((16, 8)).astype(np.float32),
        "layer.b": rng.standard_normal(8).astype(ml_dtypes.bfloat16),
        "steps": np.array(seed, dtype=np.int64),
    }


def same_state(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(bits_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path) -> Repository:
    return Repository.init(tmp_path / "r")


def test_two_branches_and_a_merge_check_out_bit_exactly(repo):
    s0, s1, s2 = state(0), state(1), state(2)
    c0 = repo.commit(s0, "root", date=DATE)
    repo.set_branch("feature", c0)
    c1 = repo.commit(dict(s1, **{"extra/new": np.ones(3, np.float16)}), "main work", date=DATE)
    repo.set_head("feature")
    s2_feature = dict(s2)
    del s2_feature["steps"]
    c2 = repo.commit(s2_feature, "feature work (drops steps)", date=DATE)
    repo.set_head("main")
    result = repo.merge("feature", "ours", "take ours", date=DATE, everything=True)  # ours whole: steps stays
    merged, conflicts = result.commit, result.conflicts
    assert conflicts == [] and merged
    assert repo.parents(merged) == (c1, c2)
    expected = {c0: s0, c1: dict(s1, **{"extra/new": np.ones(3, np.float16)}), c2: s2_feature,
                merged: dict(s1, **{"extra/new": np.ones(3, np.float16)})}
    for commit_id, want in expected.items():
        repo.verify(commit_id)
        assert same_state(repo.checkout(commit_id), want), commit_id[:12]
        assert mdiff.validate(repo.commit_path(commit_id)) == []
    lines = graph_lines(repo, [merged], lambda c: {c0: "root", c1: "main", c2: "feature", merged: "merge"}[c])
    assert lines == ["*  merge", "|\\", "* |  main", "| *  feature", "|/", "*  root"]


def test_commit_ids_are_the_hash_of_deterministic_files(tmp_path):
    ids = []
    for name in ("a", "b"):
        r = Repository.init(tmp_path / name)
        ids.append(r.commit(state(0), "same", author="Ada <ada@example.org>", date=DATE))
        path = r.commit_path(ids[-1])
        assert helpers.commit_id(path.read_bytes()) == ids[-1]
    assert ids[0] == ids[1]


@pytest.mark.parametrize("strategy,expected", [
    ("weighted:0.5", 2.0), ("average", 2.0), ("weighted:0.25", 2.5), ("ours", 1.0), ("theirs", 3.0),
    ("task-arithmetic", 4.0), ("task-arithmetic:0.5", 2.0),
])
def test_merge_strategies_give_exact_numbers(repo, strategy, expected):
    """A = 1 (ours), B = 3 (theirs), base 0: the formulas of SPEC.md §13.7, each input weighted once."""
    c0 = repo.commit({"w": np.zeros(4, np.float32)}, "base", date=DATE)
    repo.set_branch("other", c0)
    repo.commit({"w": np.ones(4, np.float32)}, "A", date=DATE)
    repo.set_head("other")
    repo.commit({"w": np.full(4, 3.0, np.float32)}, "B", date=DATE)
    repo.set_head("main")
    result = repo.merge("other", strategy, date=DATE)  # w changed on both sides: the strategy resolves it
    assert result.conflicts == [] and result.tally == {"resolved": 1}
    assert repo.checkout(result.commit)["w"].tolist() == [expected] * 4
    meta = repo.metadata(result.commit).meta
    assert (meta["merge_strategy"], meta["merge_scope"]) == (strategy, "conflicts")


def test_merge_conflicts_are_reported_per_parameter_and_nothing_is_committed(repo, capsys):
    c0 = repo.commit({"kept": np.zeros(2, np.float32), "gone": np.zeros(2, np.float32), "n": np.zeros(2, np.int32)}, "base", date=DATE)
    repo.set_branch("other", c0)
    head = repo.commit({"kept": np.zeros((1, 2), np.float32), "gone": np.ones(2, np.float32), "n": np.ones(2, np.int32)}, "ours", date=DATE)
    repo.set_head("other")
    repo.commit({"kept": np.zeros(2, np.float32), "n": np.full(2, 2, np.int32)}, "theirs", date=DATE)
    repo.set_head("main")
    result = repo.merge("other", "average", date=DATE)  # kept: reshaped in ours only, so no conflict
    assert result.commit is None and result.how == "conflicts" and repo.head() == ("main", head)
    assert [(c.name, c.reason, c.ours, c.theirs) for c in result.conflicts] == [
        ("gone", "changed in ours, deleted in theirs; average cannot combine it: it is absent on one side",
         "‖Δ‖ = 1.41 (base is zero)", "deleted"),
        ("n", "changed differently on both sides; average cannot combine it: int32 is not a floating-point dtype",
         "2 of 2 values changed", "2 of 2 values changed")]
    code, out, _ = run(capsys, "merge", "other", "-C", repo.root)
    assert code == 1 and out.splitlines()[:4] == [
        "mdiff: error MD804: merging other into main left 2 conflicts; nothing was committed",
        "  CONFLICT  OURS                       THEIRS                 WHY",
        "  gone      ‖Δ‖ = 1.41 (base is zero)  deleted                changed in ours, deleted in theirs",
        "  n         2 of 2 values changed      2 of 2 values changed  changed differently on both sides"]
    assert "mdiff merge other --strategy ours" in out
    result = repo.merge("other", "theirs", date=DATE)
    assert result.conflicts == [] and set(repo.checkout(result.commit)) == {"kept", "n"}
    assert repo.checkout(result.commit)["kept"].shape == (1, 2)  # ours' change, taken three-way


def test_pipeline_commits_torch_tensors_and_checks_out(repo):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(4, 3).to(torch.bfloat16)
    first = repo.commit(model.state_dict(), "init", date=DATE)
    with torch.no_grad():
        model.weight.add_(1)
    second = repo.commit(model.state_dict(), "step", date=DATE)
    out = repo.checkout(second)
    assert out["weight"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(out["weight"].view(np.uint16), model.weight.detach().view(torch.int16).numpy().view(np.uint16))
    with mdiff.open(repo.commit_path(second)) as diff:
        assert list(diff) == ["weight"]  # the unchanged bias is omitted
    assert repo.parents(second) == (first,)


def test_sparse_mask_stores_exactly_the_masked_elements(repo):
    old = {"w": np.zeros(10, np.float32)}
    repo.commit(old, "base", date=DATE)
    new = {"w": np.arange(10, dtype=np.float32)}
    mask = np.zeros(10, bool)
    mask[[1, 2, 3]] = True
    commit_id = repo.commit(new, "masked", date=DATE, masks={"w": mask})
    with mdiff.open(repo.commit_path(commit_id)) as diff:
        update = diff["w"]
        assert update.type == "sparse" and update.array("indices").tolist() == [1, 2, 3]
        assert update.meta["lossy"] is True  # elements 4..9 changed outside the mask and were dropped
    assert repo.checkout(commit_id)["w"].tolist() == [0, 1, 2, 3, 0, 0, 0, 0, 0, 0]


def test_squash_keeps_the_state_and_only_a_snapshot_matching_a_digest_spares_the_walk_to_the_root(repo):
    ids = [repo.commit(state(i), f"step {i}", date=DATE) for i in range(6)]
    repo.snapshot(ids[3])
    squashed = repo.squash(ids[3][:10], "steps 4-5", date=DATE)
    assert repo.parents(squashed) == (ids[3],) and repo.head() == ("main", squashed)
    assert same_state(repo.checkout("HEAD"), state(5))
    os.chmod(repo.commit_path(ids[1]), 0o644)
    repo.commit_path(ids[1]).write_bytes(b"corrupt")
    for rev in (ids[5], "HEAD"):  # §13.5: step 3's snapshot matches step 3's state_sha256: nothing before it is read
        assert same_state(Repository.find(repo.root).checkout(rev), state(5))
    repo.drop_snapshot(ids[3])
    for rev in (ids[5], "HEAD"):  # without it, every commit to the root is
        with pytest.raises(RepositoryError) as info:
            Repository.find(repo.root).checkout(rev)
        assert info.value.code == "MD800" and ids[1][:12] in info.value.message


def test_revisions(repo):
    ids = [repo.commit(state(i), f"step {i}", date=DATE) for i in range(3)]
    assert resolve(repo, "HEAD") == ids[2] and resolve(repo, "HEAD~2") == ids[0] and resolve(repo, "main^") == ids[1]
    assert resolve(repo, ids[1][:6]) == ids[1]
    for bad in ("HEAD~3", "nope", "zz"):
        with pytest.raises(RepositoryError) as info:
            resolve(repo, bad)
        assert info.value.code == "MD801"


def test_command_line_round_trip(capsys, tmp_path):
    d = tmp_path / "repo"
    assert run(capsys, "init", d)[0] == 0
    for i in range(2):
        save_checkpoint(tmp_path / f"s{i}.safetensors", state(i))
    assert run(capsys, "commit", tmp_path / "s0.safetensors", "-m", "first", "-C", d, "--date", DATE)[0] == 0
    code, out, _ = run(capsys, "status", tmp_path / "s1.safetensors", "-C", d, "--json")
    assert code == 0 and json.loads(out)["changes"] == {"layer.b": "modified", "layer.w": "modified", "steps": "modified"}
    assert run(capsys, "switch", "-c", "exp", "-C", d)[0] == 0
    assert run(capsys, "commit", tmp_path / "s1.safetensors", "-m", "second\n\nbody", "-C", d, "--date", DATE)[0] == 0
    code, out, _ = run(capsys, "log", "--oneline", "-C", d)
    assert code == 0 and out.splitlines()[0].endswith("(HEAD -> exp) second") and out.splitlines()[1].endswith("(main) first")
    code, out, _ = run(capsys, "log", "-C", d)
    assert "Author: unknown" in out and "    body" in out
    code, _, err = run(capsys, "checkout", "main", "-o", tmp_path / "out.npz", "-C", d)
    assert code == 1 and "MD702" in err and "bfloat16" in err  # npz cannot hold bfloat16: said, not crashed
    assert run(capsys, "checkout", "main", "-o", tmp_path / "out.safetensors", "-C", d)[0] == 0
    assert same_state(load_checkpoint(tmp_path / "out.safetensors"), state(0))
    code, out, _ = run(capsys, "diff", "main", "exp", "-C", d)
    assert code == 0 and "3 parameters differ" in out
    code, out, _ = run(capsys, "branch", "-C", d, "--json")
    assert json.loads(out)["current"] == "exp" and set(json.loads(out)["branches"]) == {"main", "exp"}
    code, out, _ = run(capsys, "show", "HEAD", "-C", d)
    assert code == 0 and "second" in out
    code, _, err = run(capsys, "checkout", "nope", "-o", tmp_path / "x.npz", "-C", d)
    assert code == 1 and "MD801" in err


def test_low_rank_factors_from_the_command_line(capsys, tmp_path):
    d = tmp_path / "repo"
    run(capsys, "init", d)
    base = {"w": np.ones((4, 3), np.float32)}
    save_checkpoint(tmp_path / "base.safetensors", base)
    run(capsys, "commit", tmp_path / "base.safetensors", "-m", "base", "-C", d)
    A, B = np.arange(8, dtype=np.float32).reshape(4, 2), np.ones((2, 3), np.float32)
    save_checkpoint(tmp_path / "lora.safetensors", {"A:w": A, "B:w": B, "scale:w": np.array(0.5)})
    tuned = {"w": base["w"] + 0.5 * (A @ B)}
    save_checkpoint(tmp_path / "tuned.safetensors", tuned)
    code, out, err = run(capsys, "commit", tmp_path / "tuned.safetensors", "-m", "lora", "--low-rank", tmp_path / "lora.safetensors", "-C", d, "--json")
    assert code == 0, err
    repo = Repository.find(d)
    with mdiff.open(repo.commit_path(json.loads(out)["commit"])) as diff:
        assert diff["w"].type == "low_rank" and diff["w"].meta["scale"] == 0.5
    assert np.array_equal(repo.checkout("HEAD")["w"], tuned["w"])


def test_concurrent_commits_are_serialised(repo):
    repo.commit(state(0), "base", date=DATE)
    script = (
        "import sys, numpy as np; from mdiff.repo import Repository; from tests.test_repo import state;"
        "r = Repository.find(sys.argv[1]); r.commit(state(int(sys.argv[2])), 'c' + sys.argv[2], date='2026-05-01T00:00:00Z')"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(repo.root), str(i)], env=env) for i in (1, 2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    head = repo.head()[1]
    chain = [head, repo.parents(head)[0]]
    assert {repo.metadata(c).message for c in chain} == {"c1", "c2"}  # both landed, one on top of the other
    with repo.lock():
        with pytest.raises(RepositoryError) as info:
            with repo.lock(wait=False):
                pass
    assert info.value.code == "MD803"


KILLER = """
import sys
from mdiff.repo import Repository
from tests.test_repo import big_state
r = Repository.find(sys.argv[1])
for i in range(1, 1000):
    step = int(r.metadata(r.head()[1]).message.split()[1])
    if i % 3 == 0:  # a side branch merged back with `theirs`: the state becomes the side's
        r.set_branch(f"side{i}", r.head()[1]); r.set_head(f"side{i}")
        r.commit(big_state(step + 1), f"step {step + 1}", date="2026-05-01T00:00:00Z")
        r.set_head("main")
        r.merge(f"side{i}", "theirs", f"step {step + 1} (merged)", date="2026-05-01T00:00:00Z")
    elif i % 3 == 1 and step >= 2:  # squash the last commit onto its parent: same state, shorter history
        r.squash("HEAD~1", f"step {step} (squashed)", date="2026-05-01T00:00:00Z")
    else:
        r.commit(big_state(step + 1), f"step {step + 1}", date="2026-05-01T00:00:00Z")
"""


def big_state(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {f"p{j}": rng.standard_normal(50_000).astype(np.float32) for j in range(4)}


def test_kill_nine_at_any_moment_leaves_the_repository_before_or_after(repo):
    """Commits, merges and squashes killed at random moments: HEAD always names a whole, verified
    commit whose state is exactly the one its message promises."""
    repo.commit(big_state(0), "step 0", date=DATE)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    rng = np.random.default_rng(0)
    for attempt in range(12):
        if repo.head()[0] != "main":  # killed between switching branches: go back, as a user would
            repo.set_head("main")
        proc = subprocess.Popen([sys.executable, "-c", KILLER, str(repo.root)], env=env)
        time.sleep(float(rng.uniform(0.5, 2.5)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        branch, head = repo.head()
        repo.verify(head)
        step = int(repo.metadata(head).message.split()[1])
        assert same_state(repo.checkout(head), big_state(step)), f"attempt {attempt}: HEAD at step {step} is wrong"
        for commit_id in repo.commit_ids():  # no commit file is ever partial
            repo.verify(commit_id)
        assert [f for f in repo.fsck(check_data=False) if f.is_error] == []


def test_a_commit_that_does_not_fit_its_parent_is_refused(repo):
    """MD802: a well-formed commit file (its id matches) whose update needs what the parent lacks."""
    root = repo.commit({"w": np.zeros(3, np.float32)}, "root", date=DATE)
    bad = repo.store(lambda w: w.add("missing", mdiff.dense(np.zeros(2, np.int8), np.ones(2, np.int8))),
                     mdiff.Commit("broken", parents=(root,), date=DATE))
    repo.set_branch("main", bad)
    with pytest.raises(RepositoryError) as info:
        repo.checkout("HEAD")
    assert info.value.code == "MD802" and "MD600" in info.value.message


def test_a_corrupt_commit_file_is_detected_by_its_id(repo):
    first = repo.commit({"w": np.zeros(3, np.float32)}, "root", date=DATE)
    path = repo.commit_path(first)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RepositoryError) as info:
        repo.checkout("HEAD")
    assert info.value.code == "MD800"


def test_fsck_reports_corruption_and_stray_files(repo, capsys):
    ids = [repo.commit(state(i), f"step {i}", date=DATE) for i in range(2)]
    assert run(capsys, "fsck", "-C", repo.root)[0] == 0
    (repo.dir / "commits" / ".commit.abc.mdiff").write_bytes(b"partial")
    path = repo.commit_path(ids[0])
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    code, out, _ = run(capsys, "fsck", "-C", repo.root, "--json")
    report = json.loads(out)
    assert code == 1 and report["sound"] is False
    assert sorted(f["code"] for f in report["findings"]) == ["MD303", "MD800"]


def test_a_full_disk_leaves_the_repository_as_it_was(repo):
    """RLIMIT_FSIZE makes every write past 64 KiB fail, as a full disk would."""
    first = repo.commit(state(0), "small", date=DATE)
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536));"
        "import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        "from mdiff.repo import Repository; from tests.test_repo import big_state;"
        "Repository.find(sys.argv[1]).commit(big_state(1), 'too big', date='2026-05-01T00:00:00Z', allow_deletions=True)"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", script, str(repo.root)], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and ("File too large" in proc.stderr or "OSError" in proc.stderr)
    assert repo.head() == ("main", first) and repo.commit_ids() == [first]
    assert [f for f in repo.fsck() if f.is_error] == []


def _sparse_chain(repo, commits: int, changed: int = 100) -> list[tuple[str, dict]]:
    """A root of one float32[1000] (4000 declared bytes), then commits changing ``changed`` elements
    each, stored as sparse updates (12 declared bytes per element; by default 1,200 a commit, which the
    snapshot policy weighs as 3,600: a snapshot after commit 8, 16, …, tests/test_snapshots.py)."""
    rng = np.random.default_rng(7)
    current = {"w": rng.standard_normal(1000).astype(np.float32)}
    made = [(repo.commit(current, "root", date=DATE), dict(current))]
    for i in range(commits):
        mask = np.zeros(1000, bool)
        mask[rng.choice(1000, changed, replace=False)] = True
        current = {"w": np.where(mask, current["w"] + np.float32(1), current["w"]).astype(np.float32)}
        made.append((repo.commit(current, f"step {i + 1}", date=DATE, masks={"w": mask}), dict(current)))
    return made


@pytest.mark.parametrize("damage", ["not an mdiff file", "bits changed", "another commit's snapshot"])
def test_a_checkout_walks_past_a_snapshot_it_cannot_use(repo, damage):
    """§13.5: a snapshot is a cache; one that is damaged or misfiled changes nothing but the time."""
    made = _sparse_chain(repo, 10)
    snapshot = repo.snapshot_path(made[8][0])  # one of the snapshots `commit` wrote (tests/test_snapshots.py)
    assert snapshot.exists()
    if damage == "not an mdiff file":
        snapshot.write_bytes(b"garbage")
    elif damage == "bits changed":  # the replace data, so only the final sha256 check can tell
        with h5py.File(snapshot, "r+") as f:
            data = f["parameters/w/value"]
            data[0] = data[0] + np.float32(1)
    else:
        repo.write_snapshot(made[8][0], made[3][1])  # the state of another commit under this name
        with mdiff.open(snapshot) as diff:
            meta = dict(diff.commit.meta)
        assert meta["snapshot_of"] == made[8][0]
        os.replace(repo.snapshot_path(made[8][0]), repo.snapshot_path(made[9][0]))
        snapshot = repo.snapshot_path(made[9][0])
    for cid, expected in made:
        assert same_state(repo.checkout(cid), expected)


def test_fsck_reports_a_snapshot_checkouts_would_ignore(repo):
    made = _sparse_chain(repo, 8)
    assert repo.fsck() == []
    os.replace(repo.snapshot_path(made[8][0]), repo.snapshot_path(made[7][0]))
    findings = repo.fsck()
    assert [(f.code, Path(f.path).name) for f in findings] == [("MD303", f"{made[7][0]}.mdiff")]
    assert "checkouts ignore this snapshot" in findings[0].message


def test_a_missing_first_parent_and_padded_refs_are_md801(repo):
    from mdiff.repo.history import resolve

    made = _sparse_chain(repo, 2)
    repo.commit_path(made[1][0]).unlink()
    for action in (lambda: repo.checkout("HEAD"), lambda: resolve(repo, "HEAD~2")):
        with pytest.raises(RepositoryError) as info:
            action()
        assert info.value.code == "MD801" and made[1][0][:12] in info.value.message
    ref = repo.dir / "refs" / "heads" / "main"
    for text in (f" {made[2][0]}\n", f"{made[2][0]}\n\n", f"{made[2][0]}"):
        ref.write_text(text)
        with pytest.raises(RepositoryError) as info:
            repo.head()
        assert info.value.code == "MD801"


def _low_rank_then(repo, then: str):
    """root: w (8×6 float32), b; a low_rank commit of w; then ``then`` changes w once more."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    root = repo.commit({"w": w, "b": np.ones(3, np.float32)}, "root", date=DATE)
    lora = mdiff.low_rank(rng.standard_normal((8, 2)), rng.standard_normal((2, 6)), (8, 6), DTYPES["float32"], scale=0.5)
    after_lora = repo.commit({"w": w, "b": np.ones(3, np.float32)}, "lora", date=DATE, explicit={"w": lora})
    state = repo.checkout(after_lora)
    changed = state["w"].copy()
    changed[0, :] += np.float32(1)
    if then == "commit":
        last = repo.commit({"w": changed, "b": state["b"]}, "after the lora", date=DATE)
    else:  # what a careless writer would store: a dense XOR against the writer's own low_rank bits
        commit = mdiff.Commit("after the lora", date=DATE, parents=(after_lora,))
        last = repo.store(lambda w_: w_.add("w", mdiff.dense(state["w"], changed)), commit)
        repo.set_branch("main", last)
    return root, after_lora, last, changed


def test_after_a_low_rank_commit_the_writer_stores_replace_not_xor(repo):
    _, after_lora, last, changed = _low_rank_then(repo, "commit")
    assert repo.inexact_values(after_lora) == {"w"}
    with mdiff.open(repo.commit_path(last)) as diff:
        assert {name: diff[name].type for name in diff} == {"w": "replace"}
    assert repo.inexact_values(last) == frozenset()
    assert bits_equal(repo.checkout(last)["w"], changed)
    fresh = Repository.find(repo.root)  # no cache: from the files alone
    assert fresh.inexact_values(after_lora) == {"w"} and bits_equal(fresh.checkout("HEAD")["w"], changed)


def test_an_exact_xor_on_a_low_rank_result_is_md805(repo):
    _, after_lora, last, _ = _low_rank_then(repo, "careless")
    with pytest.raises(RepositoryError) as info:
        Repository.find(repo.root).checkout("HEAD")
    assert info.value.code == "MD805" and "'w'" in info.value.message
    # from a snapshot of the low_rank commit too: the snapshot names its inexact values
    repo.snapshot(after_lora)
    with mdiff.open(repo.snapshot_path(after_lora)) as snapshot:
        assert snapshot.commit.meta["inexact"] == '["w"]'
    with pytest.raises(RepositoryError) as info:
        Repository.find(repo.root).checkout("HEAD")
    assert info.value.code == "MD805"


def test_md805_is_checked_before_any_update_of_the_commit_is_applied(repo):
    """§13.4: `a` (first in the file) would fail MD601 inside MD802, but MD805 on `w` comes first."""
    _, after_lora, _, changed = _low_rank_then(repo, "commit")
    mine = repo.checkout(after_lora)["w"]
    wrong_shape = mdiff.dense(np.zeros(4, np.float32), np.ones(4, np.float32))  # `a` is not in the state at all
    commit = mdiff.Commit("both", date=DATE, parents=(after_lora,))
    bad = repo.store(lambda w_: (w_.add("a", wrong_shape), w_.add("w", mdiff.dense(mine, changed))), commit)
    with pytest.raises(RepositoryError) as info:
        Repository.find(repo.root).checkout(bad)
    assert info.value.code == "MD805"


def test_merging_a_descendant_fast_forwards_unless_told_not_to(repo, capsys):
    root = repo.commit(state(0), "root", date=DATE)
    repo.switch("feature", create=True)
    ahead = repo.commit(state(1), "feature work", date=DATE)
    repo.switch("main")
    code, out, _ = run(capsys, "merge", "feature", "-C", repo.root)
    assert code == 0 and out == f"fast-forward: main moved to {ahead[:12]} (feature)\n" and repo.head() == ("main", ahead)
    repo.set_branch("main", root)
    result = repo.merge("feature", date=DATE, fast_forward=False)
    assert result.conflicts == [] and repo.parents(result.commit) == (root, ahead)
    with pytest.raises(RepositoryError) as caught:
        repo.switch("feature", create=True)
    assert caught.value.code == "MD801"
