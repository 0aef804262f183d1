"""Issue 31 item 4: one unreadable commit or ref blinds a listing to none of the others — `log --all` and
`branch -a` show every readable branch, then report each unreadable commit or ref with its code (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mdiff.repo import Repository
from tests.helpers import plant_commit
from tests.test_cli import run
from tests.test_repo import DATE

ROOT = Path(__file__).resolve().parents[1]
CRASHER = ROOT / "tests" / "fuzz" / "regressions" / "crash-hdf5-dense-links-iterate-seed9-task1462.mdiff"


@pytest.fixture
def side_broken(tmp_path):
    """main: two commits; tag v0 on the first; side branch `evil`: one commit its reader refuses (MD802, its
    file a crafted HDF5 file filed under its true sha256)."""
    repo = Repository.init(tmp_path / "r")
    ids = [repo.commit({"w": np.full(3, i, np.float32)}, f"step {i}", author="A", date=DATE) for i in range(2)]
    with repo.lock():
        repo.create_tag("v0", ids[0])
    data = CRASHER.read_bytes()
    bad = plant_commit(repo, data)
    repo.set_branch("evil", bad)
    return repo, ids, bad


def test_log_all_shows_main_and_reports_the_unreadable_commit(side_broken, capsys):
    repo, ids, bad = side_broken
    code, out, err = run(capsys, "log", "--all", "--oneline", "-C", repo.root)
    assert code == 1
    assert out == f"*  {ids[1][:12]} (HEAD -> main) step 1\n*  {ids[0][:12]} (tag: v0) step 0\n"
    assert err.startswith(f"mdiff: error MD802: commit {bad[:12]} cannot be applied: MD513: ") and err.count("\n") == 1
    assert err.endswith(f" [{repo.commit_path(bad)}]\n")

    code, out, _ = run(capsys, "log", "--all", "--json", "-C", repo.root)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and [line.get("id") for line in lines] == [ids[1], ids[0], None]
    assert lines[2]["error"]["code"] == "MD802" and lines[2]["error"]["path"] == str(repo.commit_path(bad))
    assert lines[2]["error"]["section"] == "13.4"
    assert run(capsys, "log", "--oneline", "-C", repo.root)[0] == 0  # HEAD's history alone is sound
    code, _, err = run(capsys, "log", "evil", "-C", repo.root)
    assert code == 1 and "MD802" in err


def test_one_malformed_ref_hides_no_other(side_broken, capsys):
    repo, ids, bad = side_broken
    (repo.dir / "refs" / "heads" / "broken").write_text("not a commit id\n")
    (repo.dir / "refs" / "tags" / "gone").write_text("ab" * 32 + "\n")
    (repo.dir / "remotes").mkdir()
    (repo.dir / "remotes" / "origin").write_text("/nowhere\n")
    (repo.dir / "refs" / "remotes" / "origin").mkdir(parents=True)
    (repo.dir / "refs" / "remotes" / "origin" / "main").write_text(ids[0] + "\n")
    (repo.dir / "refs" / "remotes" / "origin" / "bad").write_text("xx\n")
    code, out, err = run(capsys, "branch", "-a", "-C", repo.root)
    assert code == 1
    assert out == (f"  evil                 {bad[:12]}\n* main                 {ids[1][:12]}\n"
                   f"  remotes/origin/main  {ids[0][:12]}\n")
    assert [line.split(": ")[1] for line in err.splitlines()] == ["error MD801"] * 2
    assert "ref 'broken'" in err and "refs/remotes/origin/bad" in err
    code, out, err = run(capsys, "log", "--all", "--oneline", "-C", repo.root)
    assert code == 1
    assert out == f"*  {ids[1][:12]} (HEAD -> main) step 1\n*  {ids[0][:12]} (origin/main, tag: v0) step 0\n"
    assert [line.split(": ")[1] for line in err.splitlines()] == ["error MD801"] * 3 + ["error MD802"]
