"""Where outputs land (issue 14.13): `-o` names a new file or a regular file to replace, keeping its
mode; a device, FIFO, socket, symbolic link or folder is refused before anything is written (exit 2);
no temporary file outlives an error. (mdiff runs as root in CI: no test here touches a real device —
the character device is a node made in tmp_path.)"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.atomic import UnsafeOutputError, atomic_output, check_output
from mdiff.checkpoints import load_checkpoint, save_checkpoint, write_checkpoint
from mdiff.cli.main import main
from mdiff.format.dtypes import dtype_named

DATE = "2026-03-04T05:06:07Z"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture
def project(tmp_path):
    old = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.zeros(4, np.float32)}
    new = {"w": old["w"] + 1, "b": old["b"]}
    save_checkpoint(tmp_path / "old.safetensors", old)
    save_checkpoint(tmp_path / "new.safetensors", new)
    mdiff.write(tmp_path / "d.mdiff", mdiff.diff(old, new), mdiff.Commit("d", date=DATE))
    out = tmp_path / "out"
    out.mkdir()
    return tmp_path, out, new


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _character_device(path: Path) -> Path:
    """A node like /dev/null's (1, 3), made in tmp_path: nothing here opens it."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def _symlink_to_fifo(path: Path) -> Path:
    os.symlink(_fifo(path.parent / "a-fifo"), path)
    return path


def _symlink_to_file(path: Path) -> Path:
    (path.parent / "target.bin").write_bytes(b"keep me")
    os.symlink(path.parent / "target.bin", path)
    return path


SPECIAL = {
    "FIFO": (_fifo, "is a FIFO"),
    "character device": (_character_device, "is a character device"),
    "symlink to a FIFO": (_symlink_to_fifo, "is a symbolic link"),
    "symlink to a file": (_symlink_to_file, "is a symbolic link"),
}
COMMANDS = {
    "diff": lambda d, out: ["diff", d / "old.safetensors", d / "new.safetensors", "-o", out, "--date", DATE],
    "apply": lambda d, out: ["apply", d / "old.safetensors", d / "d.mdiff", "-o", out],
    "merge-file": lambda d, out: ["merge-file", d / "new.safetensors", d / "old.safetensors", d / "old.safetensors", "-o", out],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", list(SPECIAL))
def test_an_output_that_is_not_a_regular_file_is_a_usage_error_and_stays(capsys, project, command, kind):
    """Before: a rename replaced it with a regular file (as root, `diff -o /dev/null` made /dev/null one)."""
    d, out, _ = project
    make, said = SPECIAL[kind]
    target = make(out / ("x.mdiff" if command == "diff" else "x.safetensors"))
    before = os.lstat(target)
    code, _, err = run(capsys, *COMMANDS[command](d, target))
    assert code == 2, err
    assert f"the output exists and {said}" in err
    after = os.lstat(target)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    assert leftovers(out) == []
    if kind == "symlink to a file":
        assert (out / "target.bin").read_bytes() == b"keep me"


def test_checkout_refuses_a_fifo_output_too(capsys, tmp_path):
    repo = mdiff.Repository.init(tmp_path / "p")
    repo.commit({"w": np.ones(3, np.float32)}, "first", author="A <a@example.org>", date=DATE)
    target = _fifo(tmp_path / "state.safetensors")
    code, _, err = run(capsys, "checkout", "main", "-o", target, "-C", tmp_path / "p")
    assert code == 2 and "the output exists and is a FIFO" in err
    assert stat.S_ISFIFO(os.lstat(target).st_mode) and leftovers(tmp_path) == []


def test_diff_into_a_folder_is_a_usage_error_and_leaves_no_temporary_file(capsys, project):
    """Before: libhdf5 wrote `.out.<random>.tmp` beside the folder, the rename failed, the file stayed."""
    d, out, _ = project
    code, _, err = run(capsys, *COMMANDS["diff"](d, out))
    assert code == 2
    assert "the output exists and is a folder: give the path of a file to write" in err
    assert leftovers(d) == [] and list(out.iterdir()) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_replacing_an_output_keeps_its_mode(capsys, project, command):
    """Before: the new file took the umask's mode (0o644 here), dropping a 0o600 file's privacy."""
    d, out, _ = project
    target = out / ("x.mdiff" if command == "diff" else "x.safetensors")
    target.write_bytes(b"old")
    os.chmod(target, 0o600)
    code, _, err = run(capsys, *COMMANDS[command](d, target))
    assert code == 0, err
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert target.read_bytes() != b"old"


def test_a_new_output_takes_the_umask_s_mode(project):
    _, out, new = project
    old_mask = os.umask(0o027)
    try:
        save_checkpoint(out / "n.safetensors", new)
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE(os.stat(out / "n.safetensors").st_mode) == 0o640


def test_a_hard_linked_output_is_replaced_and_the_other_links_keep_the_old_content(capsys, project):
    """Documented: the output is a new file (the atomic rename); writing in place would change every
    link at once and, cut short, corrupt them all. A warning says so."""
    d, out, new = project
    target = out / "x.safetensors"
    target.write_bytes(b"old")
    os.link(target, out / "other-link")
    code, _, err = run(capsys, *COMMANDS["apply"](d, target))
    assert code == 0
    assert "had 1 other hard link; it keeps the old content" in err
    assert (out / "other-link").read_bytes() == b"old"
    assert load_checkpoint(target)["w"].tobytes() == new["w"].tobytes()


def test_a_failing_write_leaves_no_temporary_file_and_the_old_output(tmp_path):
    target = tmp_path / "x.safetensors"
    target.write_bytes(b"old")

    def fetch(name):
        raise RuntimeError("the source went away")

    with pytest.raises(RuntimeError):
        write_checkpoint(target, [("w", (2,), dtype_named("float32"))], fetch)
    assert leftovers(tmp_path) == [] and target.read_bytes() == b"old"
    with pytest.raises(RuntimeError), atomic_output(target) as file:
        file.write(b"partial")
        raise RuntimeError("interrupted")
    assert leftovers(tmp_path) == [] and target.read_bytes() == b"old"


def test_an_output_that_becomes_a_fifo_while_written_is_refused_at_the_rename(tmp_path):
    """DiffWriter.close: a failing rename (or sync) removes the temporary file."""
    target = tmp_path / "x.mdiff"
    writer = mdiff.DiffWriter(target, mdiff.Commit("x", date=DATE))
    writer.add("w", mdiff.replace(np.ones(3, np.float32)))
    os.mkfifo(target)
    with pytest.raises(UnsafeOutputError, match="is a FIFO"):
        writer.close()
    assert leftovers(tmp_path) == [] and stat.S_ISFIFO(os.lstat(target).st_mode)


def test_check_output(tmp_path):
    assert check_output(tmp_path / "absent") is None
    (tmp_path / "f").write_bytes(b"")
    assert stat.S_ISREG(check_output(tmp_path / "f").st_mode)
    with pytest.raises(UnsafeOutputError) as info:
        check_output(tmp_path)
    assert isinstance(info.value, OSError) and info.value.filename == str(tmp_path)


# ---------------------------------------------------------------- issue 27: every error carries its code; no internal names
@pytest.fixture
def committed(tmp_path, monkeypatch):
    monkeypatch.setenv("MDIFF_AUTHOR", "Ada <ada@example.org>")
    repo = mdiff.Repository.init(tmp_path / "p")
    repo.commit({"w": np.arange(6000, dtype=np.float32)}, "first", date=DATE)
    return repo


@pytest.mark.parametrize("kind", ["a folder that is not empty", "a regular file", "a character device",
                                  "a symbolic link"])
def test_a_folder_output_that_must_not_be_replaced_is_md706_and_says_what_it_is(capsys, committed, tmp_path, kind):
    """Before: "the output exists and is not an empty folder" with no code — said of /dev/null too."""
    target = tmp_path / "out"
    if kind == "a folder that is not empty":
        target.mkdir()
        (target / "keep.txt").write_text("mine", encoding="utf-8")
    elif kind == "a regular file":
        target.write_bytes(b"mine")
    elif kind == "a character device":
        _character_device(target)
    else:
        target.symlink_to(tmp_path)
    before = os.lstat(target)
    code, _, err = run(capsys, "checkout", "HEAD", "-o", target, "-C", committed.root)
    assert code == 2, err
    assert f"mdiff: error MD706: the output exists and is {kind}: " in err and "not an empty folder" not in err
    assert os.lstat(target).st_ino == before.st_ino and leftovers(tmp_path) == []
    code, out, _ = run(capsys, "checkout", "HEAD", "-o", target, "-C", committed.root, "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "MD706" and json.loads(out)["error"]["path"] == str(target)


def test_a_file_output_that_must_not_be_replaced_is_md706(capsys, project):
    d, out, _ = project
    target = _fifo(out / "x.safetensors")
    code, _, err = run(capsys, *COMMANDS["apply"](d, target))
    assert code == 2 and "mdiff: error MD706: the output exists and is a FIFO" in err


def _shows_no_internal_name(text: str) -> bool:
    return "/proc/self/fd" not in text and ".tmp" not in text


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="a folder nothing can be created in: Linux's /proc")
@pytest.mark.parametrize("output", ["x.safetensors", "xdir", "d.mdiff"])
def test_an_output_that_cannot_be_created_names_the_output_not_its_temporary_name(capsys, committed, output):
    """Before: `mdiff: error: No such file or directory [/proc/.x.safetensors.94fa1f035ff4aa54.tmp]`."""
    target = f"/proc/{output}"
    argv = (["diff", "HEAD", "HEAD", "-o", target] if output.endswith(".mdiff") else ["checkout", "HEAD", "-o", target])
    code, _, err = run(capsys, *argv, "-C", committed.root)
    assert code == 2 and _shows_no_internal_name(err), err
    assert err.startswith("mdiff: error: cannot create a f") and err.rstrip().endswith(f"[{target}]")


_FULL_DISK = (
    "import resource, signal, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536));"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
    "from mdiff.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="RLIMIT_FSIZE: POSIX")
@pytest.mark.parametrize("what", ["commit", "checkout to a file", "checkout to a folder"])
def test_a_full_disk_names_the_repository_or_the_output_never_a_descriptor(committed, tmp_path, what):
    """Before: `mdiff: error: File too large [/proc/self/fd/9/.commit.mdiff.….tmp]`, or no path at all."""
    import subprocess
    import sys

    big = tmp_path / "big.safetensors"
    save_checkpoint(big, {"w": np.random.default_rng(0).standard_normal(200_000).astype(np.float32)})
    argv = {"commit": ["commit", big, "-m", "too big"], "checkout to a file": ["checkout", "HEAD", "-o", big.parent / "o.safetensors"],
            "checkout to a folder": ["checkout", "HEAD", "-o", tmp_path / "o"]}[what]
    if what != "commit":
        committed.commit(str(big), "big", date=DATE)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", _FULL_DISK, *map(str, argv), "-C", str(committed.root)],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "File too large" in proc.stderr and _shows_no_internal_name(proc.stderr), proc.stderr
    where = {"commit": f"[{committed.dir / 'commits'}]", "checkout to a file": f"[{tmp_path / 'o.safetensors'}]",
             "checkout to a folder": f"[{tmp_path / 'o' / 'model.safetensors'}]"}[what]
    assert proc.stderr.rstrip().endswith(where), proc.stderr
