"""`mdiff merge-file OURS BASE THEIRS -o OUT`: three checkpoints merged by SPEC.md §13.7 without a repository,
by the same code as a repository's merge (mdiff/repo/merge.py, through CheckpointInput). The merge rule itself
is judged by the conformance corpus's merge cases (tests/test_conformance.py); these tests are the command's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mdiff.checkpoints import load_checkpoint, open_checkpoint, save_checkpoint
from mdiff.cli.main import main
from mdiff.repo import Repository
from mdiff.repo.merge import CheckpointInput, MergedState, Strategy


def states():
    base = {"a": np.array([1.0, 2.0], np.float32), "b": np.array([1, 2], np.int32), "c": np.zeros(2, np.float16)}
    ours = {**base, "a": np.array([1.0, 4.0], np.float32), "c": np.array([0.0, -0.0], np.float16)}
    theirs = {**base, "a": np.array([2.0, 2.0], np.float32), "b": np.array([7, 2], np.int32)}
    return ours, base, theirs


@pytest.fixture
def files(tmp_path):
    paths = []
    for label, state in zip(("ours", "base", "theirs"), states()):
        save_checkpoint(tmp_path / f"{label}.safetensors", state)
        paths.append(str(tmp_path / f"{label}.safetensors"))
    return paths


def test_conflicts_stop_it_and_write_nothing(files, tmp_path, capsys):
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"before")
    assert main(["merge-file", *files, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "MD804: the merge left 1 conflict" in err and "changed differently on both sides" in err
    assert out.read_bytes() == b"before"
    assert main(["merge-file", *files, "-o", str(out), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["outcome"] == "conflicts" and report["output"] is None
    assert [(f["code"], f["severity"], f["path"]) for f in report["findings"]] == [("MD804", "error", "a")]


def test_a_strategy_resolves_the_conflict_and_one_sided_changes_keep_their_bits(files, tmp_path, capsys):
    out = tmp_path / "out.safetensors"
    assert main(["merge-file", *files, "-o", str(out), "--strategy", "average"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 3 parameters, three-way: 1 from theirs, 1 from ours, "
                                              "1 conflict resolved by average")
    merged = load_checkpoint(out)
    ours, _, theirs = states()
    assert merged["a"].tolist() == [1.5, 3.0] and merged["b"].tolist() == [7, 2]
    assert merged["c"].tobytes() == ours["c"].tobytes()  # -0.0: ours' bits, not recomputed
    assert main(["merge-file", *files, "-o", str(out), "--strategy", "average", "--all", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outcome"] == "merged" and report["parameters"] == 3 and report["findings"] == []
    assert not np.signbit(load_checkpoint(out)["c"]).any()  # with --all, -0.0 and +0.0 are averaged: +0.0


def test_usage_errors_and_unreadable_inputs_exit_2(files, tmp_path, capsys):
    out = tmp_path / "out.safetensors"
    assert main(["merge-file", *files, "-o", str(out), "--all"]) == 2
    assert main(["merge-file", *files, "-o", str(out), "--strategy", "median"]) == 2
    assert main(["merge-file", files[0], str(tmp_path), files[2], "-o", str(out)]) == 2  # a folder
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    assert main(["merge-file", files[0], str(bad), files[2], "-o", str(out), "--json"]) == 2
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["error"]["code"] == "MD701"
    assert main(["merge-file", files[0], str(tmp_path / "missing.safetensors"), files[2], "-o", str(out)]) == 2
    assert not out.exists()


def test_the_same_merge_as_a_repository(files, tmp_path):
    """One code path: the repository's merge of the three states and merge-file give the same bits."""
    ours, base, theirs = states()
    repo = Repository.init(tmp_path / "project")
    repo.commit(base, "base", author="A <a@example.org>")
    repo.set_branch("other", repo.head()[1])
    repo.commit(ours, "ours", author="A <a@example.org>")
    repo.set_head(branch="other")
    repo.commit(theirs, "theirs", author="A <a@example.org>")
    repo.set_head(branch="main")
    result = repo.merge("other", "weighted:0.25", author="A <a@example.org>")
    assert result.commit is not None
    out = tmp_path / "out.safetensors"
    assert main(["merge-file", *files, "-o", str(out), "--strategy", "weighted:0.25"]) == 0
    merged, committed = load_checkpoint(out), repo.checkout(result.commit)
    assert set(merged) == set(committed) and all(merged[k].tobytes() == committed[k].tobytes() for k in merged)
    with open_checkpoint(files[0]) as o, open_checkpoint(files[1]) as b, open_checkpoint(files[2]) as t:
        state = MergedState(CheckpointInput(o), CheckpointInput(t), CheckpointInput(b), Strategy.parse("weighted:0.25"))
        assert state.tally() == result.tally
