"""A commit's syncs (SPEC §13.6): the commit file synced before it gets its name, its folder synced once, after the
rename — not also for the temporary name (issue 32: one fsync less on each commit's serial path)."""

from __future__ import annotations

import os
import stat

import numpy as np

from mdiff.repo import Repository


def test_the_commits_folder_is_synced_once_after_the_file_gets_its_name(tmp_path, monkeypatch):
    repo = Repository.init(tmp_path / "r")
    repo.commit({"w": np.arange(1000, dtype=np.float32)}, "one", date="2026-01-01T00:00:00Z")
    commits = os.stat(repo.dir / "commits")
    synced: list[tuple[str, list[str]]] = []
    real = os.fsync

    def counted(fd: int) -> None:
        found = os.fstat(fd)
        if stat.S_ISDIR(found.st_mode) and (found.st_dev, found.st_ino) == (commits.st_dev, commits.st_ino):
            synced.append(("folder", sorted(os.listdir(repo.dir / "commits"))))
        elif stat.S_ISREG(found.st_mode) and os.path.samefile(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")),
                                                              repo.dir / "commits"):
            synced.append(("file", sorted(os.listdir(repo.dir / "commits"))))
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    new = repo.commit({"w": np.arange(1000, dtype=np.float32) + 1}, "two", date="2026-01-01T00:00:00Z")
    kinds = [kind for kind, _ in synced]
    assert kinds.count("folder") == 1 and kinds[-1] == "folder"
    assert f"{new}.mdiff" in synced[-1][1]  # after the rename
    assert all(f"{new}.mdiff" not in names for kind, names in synced if kind == "file")  # the file: before it
