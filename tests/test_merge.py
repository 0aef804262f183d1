"""Three-way merges (SPEC.md §13.7): one-sided changes keep their bits, conflicts stop the merge, and
strategies resolve the conflicts — or every parameter, when asked with --all."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mdiff
from mdiff.cli.main import main
from mdiff.errors import RepositoryError
from mdiff.format.dtypes import DTYPES, as_bits
from mdiff.repo import Repository
from mdiff.repo.remotes import add_remote
from mdiff.repo.transfer import push

DATE = "2026-05-01T00:00:00Z"
AUTHOR = "Tester <t@example.org>"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def layers(seed: int, n: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"encoder.layer.{i}.weight": rng.standard_normal((8, 4)).astype(np.float32) for i in range(n)}


def nudged(state: dict[str, np.ndarray], names, seed: int, scale: float = 1e-3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {**state, **{n: (state[n] + scale * rng.standard_normal(state[n].shape)).astype(state[n].dtype) for n in names}}


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(as_bits(a), as_bits(b))


@pytest.fixture
def repo(tmp_path) -> Repository:
    return Repository.init(tmp_path / "r")


def diverge(repo: Repository, base: dict, ours: dict, theirs: dict) -> tuple[str, str, str]:
    """main: base → ours; branch other: base → theirs; HEAD back on main. (base, ours, theirs) ids."""
    root = repo.commit(base, "base", AUTHOR, DATE)
    repo.set_branch("other", root)
    mine = repo.commit(ours, "ours", AUTHOR, "2026-05-01T00:00:01Z", allow_deletions=True)
    repo.set_head("other")
    other = repo.commit(theirs, "theirs", AUTHOR, "2026-05-01T00:00:02Z", allow_deletions=True)
    repo.set_head("main")
    assert root and mine and other
    return root, mine, other


def test_one_sided_changes_on_both_branches_take_each_sides_bits_exactly(repo):
    base = layers(0)
    names = sorted(base)
    ours = nudged(base, names[:5], 1)
    theirs = nudged(base, names[5:12], 2)
    theirs = {**theirs, names[3]: ours[names[3]]}  # changed alike on both sides
    del theirs[names[15]]  # deleted on one side only
    ours["added.ours"] = np.arange(3, dtype=np.int64)  # added on one side only
    root, mine, other = diverge(repo, base, ours, theirs)
    result = repo.merge("other", date=DATE)
    assert result.how == "merge" and result.conflicts == [] and result.base == root
    assert result.tally == {"ours": 5, "theirs": 8, "alike": 1, "unchanged": 3}
    merged = repo.checkout(result.commit)
    expected = {**ours, **{n: theirs[n] for n in names[5:12]}}
    del expected[names[15]]
    assert sorted(merged) == sorted(expected)
    assert all(bits_equal(merged[n], expected[n]) for n in expected)  # no value recomputed, not one bit moved
    assert repo.parents(result.commit) == (mine, other)
    commit = repo.metadata(result.commit)
    assert commit.meta == {"merge_strategy": "three-way"} and commit.message == "Merge other into main"
    with mdiff.open(repo.commit_path(result.commit)) as recorded:  # only what theirs changed is recorded
        assert sorted(recorded.keys()) == sorted(names[5:12] + [names[15]])


def test_the_diverged_pull_of_the_issue_stops_with_a_conflict_and_commits_nothing(tmp_path, capsys):
    """Both sides changed the same 16 tensors: `mdiff pull` used to average them silently."""
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(tmp_path / "origin"))
    base = layers(0)
    alice.commit(base, "base", AUTHOR, DATE)
    push(alice, "origin", "main")
    bob, _ = Repository.clone(str(tmp_path / "origin"), tmp_path / "bob")
    theirs = alice.commit(nudged(base, base, 1), "A", AUTHOR, "2026-05-01T00:00:01Z")
    push(alice, "origin", "main")
    mine = bob.commit(nudged(base, base, 2, scale=2e-3), "B", AUTHOR, "2026-05-01T00:00:02Z")
    before = sorted(p.name for p in (bob.dir / "commits").iterdir())
    code, out, _ = run(capsys, "pull", "-m", "merge A into B", "-C", bob.root)
    assert code == 1 and bob.head() == ("main", mine)
    assert sorted(p.name for p in (bob.dir / "commits").iterdir()) == sorted(before + [f"{theirs}.blocks", f"{theirs}.mdiff"])  # A's only
    lines = out.splitlines()
    assert "mdiff: error MD804: merging origin/main into main left 16 conflicts; nothing was committed" in lines
    rows = [line.split() for line in lines if line.startswith("  encoder.layer.")]
    assert len(rows) == 16 and all(r[1] == r[4] == "‖Δ‖/‖W‖" for r in rows)
    ratios = [(float(r[3]), float(r[6])) for r in rows]
    assert all(1e-4 < o < 1e-2 and 1e-4 < t < 1e-2 and t < o for o, t in ratios)  # B moved twice as far as A
    assert "  mdiff merge origin/main --strategy average --all" in out
    code, out, _ = run(capsys, "pull", "--json", "-C", bob.root)
    data = json.loads(out)
    assert code == 1 and data["outcome"] == "conflicts" and data["commit"] is None and len(data["conflicts"]) == 16
    assert data["conflicts"][0]["reason"] == "changed differently on both sides"
    code, out, _ = run(capsys, "pull", "--strategy", "average", "-C", bob.root)
    assert code == 0 and "16 conflicts resolved by average" in out
    assert bob.metadata(bob.head()[1]).meta == {"merge_strategy": "average", "merge_scope": "conflicts"}


@pytest.mark.parametrize("strategy,expected_w", [
    ("ours", 1.0), ("theirs", 3.0), ("average", 2.0), ("weighted:0.25", 2.5), ("task-arithmetic", 4.0),
    ("task-arithmetic:0.5", 2.0),
])
def test_strategies_resolve_the_conflicts_only(repo, strategy, expected_w):
    """w conflicts (1 vs 3 from 0); b changed on theirs only; c on ours only: only w follows the strategy."""
    base = {"w": np.zeros(4, np.float32), "b": np.zeros(2, np.float16), "c": np.zeros(2, np.float64)}
    diverge(repo, base, {**base, "w": np.ones(4, np.float32), "c": np.full(2, 5.0)},
            {**base, "w": np.full(4, 3.0, np.float32), "b": np.full(2, 7.0, np.float16)})
    result = repo.merge("other", strategy, date=DATE)
    assert result.conflicts == [] and result.tally == {"resolved": 1, "theirs": 1, "ours": 1}
    merged = repo.checkout(result.commit)
    assert merged["w"].tolist() == [expected_w] * 4 and merged["b"].tolist() == [7.0, 7.0]
    assert merged["c"].tolist() == [5.0, 5.0]


def test_all_applies_the_strategy_to_every_parameter(repo):
    base = {"w": np.zeros(4, np.float32), "b": np.zeros(2, np.float32), "n": np.zeros(2, np.int32)}
    ours = {**base, "w": np.ones(4, np.float32), "n": np.ones(2, np.int32)}
    theirs = {**base, "w": np.full(4, 3.0, np.float32), "b": np.full(2, 4.0, np.float32)}
    diverge(repo, base, ours, theirs)
    result = repo.merge("other", "average", date=DATE, everything=True)
    merged = repo.checkout(result.commit)
    # b changed on theirs only is still averaged with ours (a model soup); n is not floating point: three-way
    assert merged["w"].tolist() == [2.0] * 4 and merged["b"].tolist() == [2.0, 2.0] and merged["n"].tolist() == [1, 1]
    assert repo.metadata(result.commit).meta == {"merge_strategy": "average", "merge_scope": "all"}
    repo.set_branch("main", repo.parents(result.commit)[0])
    whole = repo.merge("other", "theirs", date=DATE, everything=True)  # theirs whole: n back to base
    assert {k: v.tolist() for k, v in repo.checkout(whole.commit).items()} == {k: v.tolist() for k, v in theirs.items()}


def test_added_on_both_sides_or_deleted_and_changed_are_conflicts(repo):
    base = {"w": np.zeros(2, np.float32), "gone": np.zeros(2, np.float32), "both_gone": np.zeros(2, np.float32)}
    ours = {"w": np.zeros(2, np.float32), "gone": np.ones(2, np.float32), "new": np.ones(2, np.float32)}
    theirs = {"w": np.zeros((1, 2), np.float16), "new": np.full(2, 2.0, np.float32)}
    diverge(repo, base, ours, theirs)
    result = repo.merge("other", date=DATE)
    assert [(c.name, c.reason) for c in result.conflicts] == [
        ("gone", "changed in ours, deleted in theirs"), ("new", "added on both sides with different values")]
    assert [(c.ours, c.theirs) for c in result.conflicts] == [("‖Δ‖ = 1.41 (base is zero)", "deleted"), ("added", "added")]
    result = repo.merge("other", "theirs", date=DATE)
    merged = repo.checkout(result.commit)
    assert sorted(merged) == ["new", "w"] and merged["w"].dtype == np.float16 and merged["new"].tolist() == [2.0, 2.0]


def test_an_inexact_value_changed_on_one_side_is_compared_by_its_bits(repo):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    base = {"w": w, "b": np.zeros(3, np.float32)}
    root = repo.commit(base, "root", AUTHOR, DATE)
    repo.set_branch("other", root)
    lora = mdiff.low_rank(rng.standard_normal((8, 2)), rng.standard_normal((2, 6)), (8, 6), DTYPES["float32"], scale=0.5)
    repo.commit(base, "lora", AUTHOR, "2026-05-01T00:00:01Z", explicit={"w": lora})
    repo.set_head("other")
    repo.commit({**base, "b": np.ones(3, np.float32)}, "b", AUTHOR, "2026-05-01T00:00:02Z")
    repo.set_head("main")
    ours = repo.checkout("main")
    result = repo.merge("other", date=DATE)
    assert result.tally == {"ours": 1, "theirs": 1}
    merged = repo.checkout(result.commit)
    assert bits_equal(merged["w"], ours["w"]) and merged["b"].tolist() == [1.0] * 3


def test_ff_only_refuses_a_merge_and_takes_a_fast_forward(repo, capsys):
    base = layers(0, 2)
    diverge(repo, base, nudged(base, base, 1), nudged(base, base, 2))
    with pytest.raises(RepositoryError) as refused:
        repo.merge("other", ff_only=True)
    assert refused.value.code == "MD804" and "not possible to fast-forward" in refused.value.message
    code, _, err = run(capsys, "merge", "--ff-only", "other", "-C", repo.root)
    assert code == 1 and "MD804" in err
    repo.switch("ahead", create=True)
    later = repo.commit(nudged(base, base, 3), "later", AUTHOR, "2026-05-01T00:00:03Z")
    repo.switch("main")
    repo.set_branch("main", repo.parents(later)[0])
    assert repo.merge("ahead", ff_only=True).how == "fast-forward" and repo.head() == ("main", later)


def test_all_without_a_strategy_is_a_usage_error(repo, capsys):
    code, _, err = run(capsys, "merge", "other", "--all", "-C", repo.root)
    assert code == 2 and "--strategy average --all" in err
