"""`mdiff migrate` (SPEC.md §13.1) on every kind of commit the conformance corpus holds: each valid
format-1 repository case — merges with two parents, every update type, snapshots, tags, a detached HEAD —
copied into format 2 gives the same state at every commit, the same history shape, and a sound repository."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from mdiff.repo.migrate import migrate
from mdiff.repo.repository import Repository

CORPUS = Path(__file__).resolve().parent.parent / "conformance"


def _format_1_cases() -> list[tuple[str, Path]]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    found = []
    for case in manifest["cases"]:
        folder = case["files"].get("repository")
        if case["family"] == "valid" and folder:
            if (CORPUS / folder / ".mdiff" / "format").read_text() == "mdiff-repository 1\n":
                found.append((case["id"], CORPUS / folder))
    return found


CASES = _format_1_cases()


def test_the_corpus_has_format_1_repositories_to_migrate():
    assert len(CASES) >= 8


@pytest.mark.parametrize("folder", [folder for _, folder in CASES], ids=[case for case, _ in CASES])
def test_migrating_a_corpus_repository_keeps_every_state_and_the_history_s_shape(folder, tmp_path):
    shutil.copytree(folder, tmp_path / "old", symlinks=True)
    old = Repository(tmp_path / "old")
    report = migrate(old, tmp_path / "new")
    new = Repository(tmp_path / "new")
    assert new.repository_format == 2
    assert sorted(report.ids) == sorted(old.commit_ids())
    assert len(set(report.ids.values())) == len(report.ids)
    for old_id, new_id in report.ids.items():
        assert new.parents(new_id) == tuple(report.ids[p] for p in old.parents(old_id))
        was, now = old.metadata(old_id), new.metadata(new_id)
        assert dataclasses.replace(now, parents=was.parents) == was  # only the parents' ids change
        before, after = old.checkout(old_id), new.checkout(new_id)
        assert sorted(after) == sorted(before)
        for name, value in before.items():
            assert after[name].dtype == value.dtype and after[name].shape == value.shape
            assert after[name].tobytes() == value.tobytes(), (old_id[:12], name)
    assert {b: t for b, t in new.branches().items()} == {b: report.ids[t] for b, t in old.branches().items() if t}
    assert new.tags() == {t: report.ids[c] for t, c in old.tags().items() if c}
    assert new.fsck() == []
