"""Start-up (issue 27): `mdiff log`, and `mdiff status` of the checkpoint just committed, of a repository whose
commits were seen before load neither numpy, libhdf5 (h5py) nor jsonschema — each commit's metadata comes
from the user's cache (format/walk_cache.py, SPEC.md §13.2), believed only where the commit file, verified
against its id, holds the kept bytes; the cache folder is used only when it is the user's own and no one
else may write it; fsck never uses it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import save_checkpoint
from mdiff.cli.main import main
from mdiff.format import walk_cache
from mdiff.format.walk_cache import ENV, WalkCache
from mdiff.repo.checkpoint_digest import DTYPE_TAGS, state_digest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "h5py", "jsonschema")
posix_only = pytest.mark.skipif(os.name != "posix", reason="the folder's owner and mode are POSIX's")


def _repository(tmp_path: Path, monkeypatch) -> tuple[Path, Path, list[str]]:
    """Two commits of a small model, made with the cache at tmp_path/cache."""
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    root = tmp_path / "repo"
    repo = mdiff.Repository.init(root)
    rng = np.random.default_rng(0)
    state = {f"layer{i}.weight": rng.standard_normal((8, 8)).astype(np.float32) for i in range(3)}
    checkpoint = root / "model.safetensors"
    save_checkpoint(checkpoint, state)
    ids = [repo.commit(checkpoint, "root", author="A <a@example.com>")]
    state["layer0.weight"][0, 0] += 1
    save_checkpoint(checkpoint, state)
    ids.append(repo.commit(checkpoint, "one change", author="A <a@example.com>"))
    return root, checkpoint, ids


def _metadata_entries(cache: Path) -> dict[str, Path]:
    return {p.stem: p for p in cache.glob("metadata/*/*/*.json")}


def _run(root: Path, *argv: str) -> tuple[int, str, str]:
    """``mdiff ARGV`` in ``root`` in-process (the cache as the environment says)."""
    cwd = os.getcwd()
    os.chdir(root)
    try:
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(argv))
        return status, out.getvalue(), err.getvalue()
    finally:
        os.chdir(cwd)


_CHECK = """
import sys
from mdiff.cli.main import main
for argv in {commands!r}:
    assert main(argv) == 0, argv
loaded = sorted(name for name in sys.modules if name.split(".")[0] in {heavy!r})
assert not loaded, loaded[:10]
"""


def test_log_and_status_of_commits_seen_before_load_neither_numpy_nor_h5py(tmp_path, monkeypatch):
    root, checkpoint, _ = _repository(tmp_path, monkeypatch)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "mdiff", "log"], cwd=root, env=env, check=True, capture_output=True)
    commands = [["log"], ["log", "--oneline", "--all"], ["log", "--json", "-n", "1"], ["status", checkpoint.name],
                ["status", checkpoint.name, "--json"], ["branch"], ["tag"], ["reflog"]]
    done = subprocess.run([sys.executable, "-c", _CHECK.format(commands=commands, heavy=HEAVY)], cwd=root, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "nothing changed" in done.stdout and "one change" in done.stdout


def test_the_kept_metadata_is_what_the_file_says(tmp_path, monkeypatch):
    root, _, ids = _repository(tmp_path, monkeypatch)
    first = _run(root, "log")
    monkeypatch.setenv(ENV, "off")
    assert _run(root, "log") == first  # read from the files themselves
    entries = _metadata_entries(tmp_path / "cache")
    assert set(entries) == set(ids)
    entry = json.loads(entries[ids[1]].read_text())
    assert entry["id"] == ids[1] and json.loads(entry["commit"])["message"] == "one change"
    assert (root / ".mdiff" / "commits" / f"{ids[1]}.mdiff").read_bytes()[entry["at"]:].startswith(entry["commit"].encode())


@pytest.mark.parametrize("damage", [
    pytest.param(lambda e: {**e, "commit": e["commit"].replace("one change", "a forged message")}, id="message-edited"),
    pytest.param(lambda e: {**e, "commit": e["commit"].replace("one change", "one chang!")}, id="same-length-edit"),
    pytest.param(lambda e: {**e, "at": e["at"] + 1}, id="another-offset"),
    pytest.param(lambda e: {**e, "id": "0" * 64}, id="another-id"),
    pytest.param(lambda e: {**e, "commit": 7}, id="not-text"),
    pytest.param(lambda e: {"id": e["id"], "commit": e["commit"]}, id="no-offset"),
])
def test_an_edited_metadata_entry_is_not_believed_and_is_kept_anew(tmp_path, monkeypatch, damage):
    """Issue 31: a cache entry is a statement about the commit file's bytes, bound to them — the kept text
    must lie at the kept offset of the file verified against the id, else the file itself is read."""
    root, _, ids = _repository(tmp_path, monkeypatch)
    good_log = _run(root, "log")
    path = _metadata_entries(tmp_path / "cache")[ids[1]]
    good = json.loads(path.read_text())
    path.write_text(json.dumps(damage(good)))
    status, out, _ = _run(root, "log")
    assert (status, out) == good_log[:2] and "forged" not in out and "chang!" not in out
    assert json.loads(path.read_text()) == good


def test_a_log_reads_no_commit_file_it_has_kept_metadata_for(tmp_path, monkeypatch):
    """Hashed (MD800), not opened: a commit file changed under its name is refused, kept metadata or not."""
    from mdiff.format import reader

    root, _, ids = _repository(tmp_path, monkeypatch)
    _run(root, "log")
    monkeypatch.setattr(reader, "open_diff", lambda *a, **k: pytest.fail("a commit was opened"))
    status, out, _ = _run(root, "log", "--oneline")
    assert status == 0 and "one change" in out
    commits = root / ".mdiff" / "commits"
    (commits / f"{ids[1]}.mdiff").write_bytes((commits / f"{ids[0]}.mdiff").read_bytes())
    status, _, err = _run(root, "log")
    assert status == 1 and "MD800" in err


@posix_only
@pytest.mark.parametrize("where", ["root", "below"])
def test_a_cache_folder_others_may_write_is_not_used_with_one_warning(tmp_path, monkeypatch, where):
    root, _, ids = _repository(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    weak = cache if where == "root" else cache / "metadata"
    weak.chmod(0o770)
    walk_cache._warned.clear()
    path = _metadata_entries(cache)[ids[1]]
    good = json.loads(path.read_text())
    forged = {**good, "commit": good["commit"].replace("one change", "a forged message")}
    path.write_text(json.dumps(forged))  # were it read, it would be found out anyway (see above)
    status, out, err = _run(root, "log")
    assert status == 0 and "one change" in out and "forged" not in out
    assert err.count("writable by group or others") == 1 and str(weak) in err
    assert json.loads(path.read_text()) == forged  # nothing written there either
    status, out, err = _run(root, "log")
    assert status == 0 and "writable" not in err  # one warning a process


@posix_only
def test_the_cache_folders_are_made_the_user_s_own(tmp_path, monkeypatch):
    old = os.umask(0o002)  # a umask that would leave folders group-writable
    try:
        _repository(tmp_path, monkeypatch)
    finally:
        os.umask(old)
    cache = tmp_path / "cache"
    for folder in [cache, *[p for p in cache.rglob("*") if p.is_dir()]]:
        assert folder.stat().st_mode & 0o077 == 0, folder
    assert _metadata_entries(cache)


def test_fsck_neither_reads_nor_fills_the_cache(tmp_path, monkeypatch):
    root, _, _ = _repository(tmp_path, monkeypatch)
    _run(root, "log")
    used: list[str] = []
    for name in ("get_walk", "put_walk", "get_metadata", "put_metadata"):
        monkeypatch.setattr(WalkCache, name, lambda self, *a, _name=name: used.append(_name))
    repo = mdiff.Repository(root)
    assert [repo.metadata(c).message for c in repo.commit_ids()] and used  # any other reader uses the cache
    used.clear()
    fresh = mdiff.Repository(root)
    assert [f for f in fresh.fsck() if f.is_error] == []
    assert used == [] and fresh.use_cache  # on again once fsck is done


def test_status_tells_an_unchanged_checkpoint_by_its_digest_and_a_changed_one_by_reading_it(tmp_path, monkeypatch):
    root, checkpoint, ids = _repository(tmp_path, monkeypatch)
    repo = mdiff.Repository(root)
    assert state_digest(checkpoint) == repo.metadata(ids[1]).state_sha256
    state = {name: value.copy() for name, value in repo.state(ids[1]).items()}
    state["layer2.weight"][1, 1] += 1
    changed = root / "changed.safetensors"
    save_checkpoint(changed, state)
    assert state_digest(changed) != repo.metadata(ids[1]).state_sha256
    status, out, _ = _run(root, "status", changed.name)
    assert status == 0 and "modified  layer2.weight" in out
    status, out, _ = _run(root, "status", checkpoint.name)
    assert status == 0 and out.endswith("nothing changed\n")


@pytest.mark.parametrize("damage", [
    pytest.param(lambda b: b + b"\0", id="a-byte-after-the-last-tensor"),
    pytest.param(lambda b: b[:-1], id="truncated"),
    pytest.param(lambda b: b[:8] + b[8:].replace(b'"F32"', b'"F99"', 1), id="unknown-dtype"),
    pytest.param(lambda b: b"\xff" * 8 + b[8:], id="header-length"),
])
def test_a_file_the_full_reader_would_refuse_has_no_digest(tmp_path, monkeypatch, damage):
    _, checkpoint, _ = _repository(tmp_path, monkeypatch)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(damage(checkpoint.read_bytes()))
    assert state_digest(bad) is None
    assert state_digest(tmp_path) is None  # not a regular file


def test_the_digest_s_dtype_table_is_the_reader_s():
    from mdiff.checkpoints import safetensors

    assert {tag: (d.name, d.itemsize) for tag, d in safetensors._DTYPE_BY_TAG.items()} == DTYPE_TAGS


def test_one_warning_goes_through_logging(tmp_path):
    weak = tmp_path / "weak"
    weak.mkdir(mode=0o700)
    weak.chmod(0o777 if os.name == "posix" else 0o700)
    walk_cache._warned.clear()
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    walk_cache.log.addHandler(handler)
    try:
        for _ in range(3):
            WalkCache(weak).get_metadata("a" * 64, mdiff.Limits())
            WalkCache.default()
    finally:
        walk_cache.log.removeHandler(handler)
    assert [r.levelno for r in records if "writable by group or others" in r.getMessage()] == \
        ([logging.WARNING] if os.name == "posix" else [])
