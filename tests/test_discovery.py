"""SPEC.md §13.10: how a command finds its repository (upwards, never past a ceiling folder or a filesystem
boundary) and whose repository it agrees to use (MD809: another user's, unless trusted) — issue 31 item 6."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mdiff.checkpoints import save_checkpoint
from mdiff.errors import RepositoryError
from mdiff.repo import Repository
from tests.test_cli import run
from tests.test_repo import DATE

STRANGER = 12345
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="giving a folder to another user (os.chown) needs root")


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path, monkeypatch):
    """No setting of this machine's user or shell changes what the tests find."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("MDIFF_SAFE_DIRECTORIES", "MDIFF_CEILING_DIRECTORIES", "MDIFF_DISCOVERY_ACROSS_FILESYSTEM",
                 "SUDO_UID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def foreign(tmp_path):
    """A repository with one commit in tmp/shared whose .mdiff another user owns, a checkpoint, and the
    folder below it a command is run from."""
    repo = Repository.init(tmp_path / "shared")
    repo.commit({"w": np.zeros(3, np.float32)}, "theirs", author="Mallory", date=DATE)
    os.chown(repo.dir, STRANGER, STRANGER)
    save_checkpoint(tmp_path / "mine.safetensors", {"w": np.ones(3, np.float32)})
    below = tmp_path / "shared" / "home" / "me"
    below.mkdir(parents=True)
    return repo, below


def _tree(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.lstat().st_uid) for p in folder.rglob("*"))


@needs_root
def test_a_repository_another_user_owns_in_a_parent_folder_is_refused(foreign, tmp_path, capsys, monkeypatch):
    repo, below = foreign
    before = _tree(repo.dir)
    monkeypatch.chdir(below)
    code, out, err = run(capsys, "commit", tmp_path / "mine.safetensors", "-m", "mine")
    assert code == 1 and out == ""
    assert err == (f"mdiff: error MD809: the repository {repo.root} is owned by another user (uid {STRANGER}, not 0): "
                   f"mdiff does not use it (§13.10); if you trust it, run `mdiff config --global --add safe.directory "
                   f"{repo.root}` or set $MDIFF_SAFE_DIRECTORIES={repo.root}\n")
    assert _tree(repo.dir) == before  # nothing written into it
    for argv in (["log"], ["status", tmp_path / "mine.safetensors"], ["log", "-C", repo.root], ["fsck", "-C", below],
                 ["branch"]):
        code, out, err = run(capsys, *argv, "--json") if argv[0] != "branch" else run(capsys, *argv)
        assert code == 1 and "MD809" in out + err, argv
    with pytest.raises(RepositoryError) as info:  # the library too
        Repository.find(below)
    assert info.value.code == "MD809"


@needs_root
def test_a_trusted_repository_is_used(foreign, tmp_path, capsys, monkeypatch):
    repo, below = foreign
    monkeypatch.chdir(below)
    monkeypatch.setenv("MDIFF_SAFE_DIRECTORIES", f"/nowhere:{below}")  # neither is the repository's folder
    assert run(capsys, "log", "--oneline")[0] == 1
    monkeypatch.setenv("MDIFF_SAFE_DIRECTORIES", f"relative:{repo.root}")
    code, out, _ = run(capsys, "log", "--oneline")
    assert code == 0 and out.endswith(" theirs\n")
    monkeypatch.setenv("MDIFF_SAFE_DIRECTORIES", "*")
    assert run(capsys, "log", "--oneline")[0] == 0
    monkeypatch.delenv("MDIFF_SAFE_DIRECTORIES")

    # the user's configuration file, written by `mdiff config`
    config = tmp_path / "config" / "mdiff" / "config"
    code, out, _ = run(capsys, "config", "--global", "--add", "safe.directory", repo.root / "home" / "..", "--json")
    assert code == 0 and json.loads(out) == {"file": str(config), "added": True}
    assert config.read_text() == f"safe.directory = {repo.root}\n"
    code, out, _ = run(capsys, "config", "--global", "--add", "safe.directory", repo.root)
    assert code == 0 and out == f"already in {config}\n"
    assert run(capsys, "config", "--global", "safe.directory") == (0, f"{repo.root}\n", "")
    assert run(capsys, "commit", tmp_path / "mine.safetensors", "-m", "mine", "-q")[0] == 0
    assert run(capsys, "log", "--oneline", "-n", "1")[1].endswith(" mine\n")

    config.write_text("# mine\n[core]\nsafe.directory=*\n")  # other lines are ignored
    assert run(capsys, "log", "--oneline", "-n", "1", "-C", repo.root)[0] == 0
    for argv in (["config", "safe.directory"], ["config", "--global", "user.name"], ["config", "--global"],
                 ["config", "--global", "--add", "safe.directory"], ["config", "--global", "safe.directory", "x"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "mdiff: error:" in err, argv


@needs_root
def test_root_through_sudo_is_the_user_who_ran_sudo(foreign, monkeypatch, capsys):
    repo, below = foreign
    monkeypatch.setenv("SUDO_UID", str(STRANGER))  # the stranger ran `sudo mdiff`: their repository is theirs
    assert run(capsys, "log", "--oneline", "-C", below)[0] == 0
    os.chown(repo.dir, 0, 0)  # and root's own is root's
    assert run(capsys, "log", "--oneline", "-C", below)[0] == 0
    os.chown(repo.dir, STRANGER + 1, 0)  # a third user's is not
    code, _, err = run(capsys, "log", "--oneline", "-C", below)
    assert code == 1 and f"(uid {STRANGER + 1}, not {STRANGER})" in err


def test_the_search_does_not_enter_a_ceiling_folder(tmp_path, monkeypatch, capsys):
    repo = Repository.init(tmp_path / "r")
    start = tmp_path / "r" / "a" / "b"
    start.mkdir(parents=True)
    assert Repository.find(start).root == repo.root
    monkeypatch.setenv("MDIFF_CEILING_DIRECTORIES", f"relative/ignored:{tmp_path / 'r' / 'a'}")
    with pytest.raises(RepositoryError) as info:
        Repository.find(start)
    assert info.value.code == "MD801" and info.value.message == (
        f"no mdiff repository in {start} or its parents (the search does not enter {tmp_path / 'r' / 'a'}: "
        "$MDIFF_CEILING_DIRECTORIES); run `mdiff init`")
    assert Repository.find(tmp_path / "r" / "a").root == repo.root  # the folder it starts in is searched
    monkeypatch.setenv("MDIFF_CEILING_DIRECTORIES", str(start))  # the start itself: no ceiling above it
    assert Repository.find(start).root == repo.root
    monkeypatch.setenv("MDIFF_CEILING_DIRECTORIES", str(tmp_path / "r"))
    assert run(capsys, "log", "-C", start)[0] == 1
    assert Repository.find(repo.root).root == repo.root  # the repository's own folder is searched


@needs_root
def test_the_search_stops_at_a_filesystem_boundary(tmp_path, monkeypatch):
    repo = Repository.init(tmp_path / "r")
    mounted = tmp_path / "r" / "mnt"
    mounted.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "none", str(mounted)],
                                                       capture_output=True).returncode != 0:
        pytest.skip("no second filesystem: mounting a tmpfs is not allowed here")
    try:
        assert os.stat(mounted).st_dev != os.stat(repo.root).st_dev
        (mounted / "work").mkdir()
        with pytest.raises(RepositoryError) as info:
            Repository.find(mounted / "work")
        assert info.value.code == "MD801" and f"does not enter {repo.root}, on another filesystem" in info.value.message
        monkeypatch.setenv("MDIFF_DISCOVERY_ACROSS_FILESYSTEM", "1")
        assert Repository.find(mounted / "work").root == repo.root
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


JS_CLI = Path(__file__).resolve().parents[1] / "tools" / "mdiff-js" / "bin" / "mdiff-js.js"


@needs_root
@pytest.mark.skipif(shutil.which("node") is None or not (JS_CLI.parents[1] / "node_modules" / "h5wasm").is_dir(),
                    reason="mdiff-js needs Node.js 20+ and tools/mdiff-js/node_modules")
def test_mdiff_js_refuses_a_repository_another_user_owns_unless_trusted(foreign, tmp_path):
    repo, _ = foreign
    env = {k: v for k, v in os.environ.items() if k not in ("MDIFF_SAFE_DIRECTORIES", "SUDO_UID")}
    argv = ["node", str(JS_CLI), "checkout", "main", "-o", str(tmp_path / "out.safetensors"), "-C", str(repo.root),
            "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and json.loads(proc.stdout)["error"]["code"] == "MD809"
    assert not (tmp_path / "out.safetensors").exists()
    (tmp_path / "config" / "mdiff").mkdir(parents=True)
    (tmp_path / "config" / "mdiff" / "config").write_text(f"safe.directory = {repo.root}\n")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout)["parameters"] == 1
