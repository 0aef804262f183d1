"""Issue 31 item 8: fsck reports what no writer makes and every reader refuses or ignores — a lock file
that is a (dangling) link, a snapshot that is a FIFO or a link to /dev/zero (§13.1, MD801) — without
opening any of them (a FIFO would block it), and names them by the repository's own path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from mdiff.repo import Repository
from tests.test_repo import DATE

ROOT = Path(__file__).resolve().parents[1]


def _fsck(repo: Repository) -> tuple[int, dict]:
    """`mdiff fsck --json` in a child (a FIFO opened would block it: the timeout fails the test)."""
    proc = subprocess.run([sys.executable, "-m", "mdiff", "fsck", "--json", "-C", str(repo.root)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return proc.returncode, json.loads(proc.stdout)


def test_fsck_reports_a_dangling_lock_link_and_snapshots_that_are_a_fifo_or_a_link(tmp_path):
    repo = Repository.init(tmp_path / "r")
    ids = [repo.commit({"w": np.full(3, i, np.float32)}, f"step {i}", author="A", date=DATE) for i in range(2)]
    assert _fsck(repo) == (0, {"sound": True, "findings": []})
    (repo.dir / "lock").unlink(missing_ok=True)
    os.symlink(tmp_path / "nowhere", repo.dir / "lock")
    os.mkfifo(repo.snapshot_path(ids[0]))
    os.symlink("/dev/zero", repo.snapshot_path(ids[1]))
    code, report = _fsck(repo)
    assert code == 1 and report["sound"] is False
    assert [(f["code"], f["severity"], f["path"]) for f in report["findings"]] == [
        ("MD801", "error", str(repo.dir)),
        ("MD801", "error", str(repo.snapshot_path(ids[0]))),
        ("MD801", "error", str(repo.snapshot_path(ids[1]))),
    ]
    messages = [f["message"] for f in report["findings"]]
    assert messages[0] == (f"{repo.dir / 'lock'} is a symbolic link: every writer refuses to lock it (§13.1, §13.6); "
                           "remove it (a writer makes it again)")
    assert messages[1:] == ["this snapshot is a FIFO, not a regular file (§13.1): checkouts ignore it; `mdiff gc` "
                            "removes it",
                            "this snapshot is a symbolic link, not a regular file (§13.1): checkouts ignore it; "
                            "`mdiff gc` removes it"]
    assert not any("/proc/self/fd" in m for m in messages)
    (repo.dir / "lock").unlink()
    assert sorted(item.path.name for item in repo.gc().removed) == sorted(f"{c}.mdiff" for c in ids)
    assert _fsck(repo) == (0, {"sound": True, "findings": []})
