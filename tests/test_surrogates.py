"""Issue 31 item 7, issue 28 item 3: text that UTF-8 cannot hold (an escaped lone surrogate, `\\ud800`, in
commit.message or meta) makes no command traceback. Since issue 28 a JSON text holding one is refused (SPEC.md
§4.1: MD201 in `commit`), by validate, dump and apply alike; a safetensors output that cannot hold one is refused
with a code (MD703)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import save_checkpoint
from mdiff.errors import CheckpointError
from mdiff.hdf5walk.attributes import write_string
from mdiff.format.commit import Commit

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def surrogates(tmp_path) -> Path:
    path = tmp_path / "s.mdiff"
    mdiff.write(path, {"w": mdiff.replace(np.ones(2, np.float32))},
                Commit(message="aXXXXb", meta={"k": "vYYYY"}, date="2026-01-01T00:00:00Z"))
    with h5py.File(path, "r+") as f:
        text = f.attrs["commit"]
        text = text.decode() if isinstance(text, bytes) else text
        write_string(f, "commit", text.replace("XXXX", "\\ud800").replace("YYYY", "\\udc00"))
    return path


def _mdiff(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mdiff", *map(str, argv)], capture_output=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_validate_dump_and_apply_refuse_a_lone_surrogate_with_md201(surrogates, tmp_path):
    proc = _mdiff("validate", surrogates, "--json")
    assert proc.returncode == 1 and [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["MD201"]
    save_checkpoint(tmp_path / "base.safetensors", {"w": np.zeros(2, np.float32)})
    for argv in (["dump", surrogates], ["apply", tmp_path / "base.safetensors", surrogates, "-o", tmp_path / "out.safetensors"]):
        proc = _mdiff(*argv)
        assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(b"mdiff: error MD201: `commit` is not valid JSON: a string holds a lone surrogate")
        proc = _mdiff(*argv, "--json")
        assert proc.returncode == 1 and json.loads(proc.stdout)["error"]["code"] == "MD201", proc.stdout
    assert not (tmp_path / "out.safetensors").exists()


def test_a_safetensors_header_cannot_hold_a_lone_surrogate(tmp_path):
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(tmp_path / "o.safetensors", {"w": np.ones(2, np.float32)}, {"k": "v\ud800"})
    assert info.value.code == "MD703" and not (tmp_path / "o.safetensors").exists()


def test_a_writer_refuses_a_lone_surrogate_with_its_attributes_code(tmp_path):
    """No writer makes a file its readers refuse (§13.6): a commit message or update member holding a lone surrogate
    (a str from bytes that are not UTF-8) is refused before anything is written, with the attribute's code."""
    from mdiff.errors import InvalidFileError

    value = {"w": mdiff.replace(np.ones(2, np.float32))}
    with pytest.raises(InvalidFileError) as info:
        mdiff.write(tmp_path / "c.mdiff", value, Commit(message="bad\udcff", date="2026-01-01T00:00:00Z"))
    assert info.value.code == "MD201"
    with pytest.raises(InvalidFileError) as info:
        mdiff.write(tmp_path / "u.mdiff", {"w": mdiff.Update({**value["w"].meta, "note": "\ud800"}, value["w"].data)},
                    Commit(date="2026-01-01T00:00:00Z"), check_updates=False)
    assert info.value.code == "MD401"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_commit_with_a_message_that_is_not_utf8_is_md201_without_a_traceback(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    assert _mdiff("-C", repo, "init", "-q").returncode == 0
    save_checkpoint(tmp_path / "s.safetensors", {"w": np.ones(2, np.float32)})
    argv = ["commit", str(tmp_path / "s.safetensors"), "-m", b"bad\xff", "--author", "A <a@b.c>", "-C", str(repo)]
    proc = subprocess.run([sys.executable, "-m", "mdiff", *argv], capture_output=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(b"mdiff: error MD201: attribute 'commit' would hold a lone surrogate"), proc.stderr
    assert sorted(p.name for p in (repo / ".mdiff" / "commits").iterdir()) == []
