"""Issue 31 item 7: text a valid file holds that UTF-8 cannot (an escaped lone surrogate, `\\ud800`, in
commit.message, meta or layout metadata) makes no command traceback: printed with escapes, JSON output
valid, a safetensors output that cannot hold it refused with a code (MD703)."""

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
from mdiff.format.attributes import write_string
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


def test_dump_prints_a_lone_surrogate_escaped(surrogates):
    assert _mdiff("validate", surrogates).returncode == 0
    proc = _mdiff("dump", surrogates)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"meta     k=v\\udc00\n" in proc.stdout and b"    a\\ud800b\n" in proc.stdout
    proc = _mdiff("dump", surrogates, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["commit"]["message"] == "a\ud800b"


def test_a_safetensors_header_cannot_hold_a_lone_surrogate(tmp_path):
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(tmp_path / "o.safetensors", {"w": np.ones(2, np.float32)}, {"k": "v\ud800"})
    assert info.value.code == "MD703" and not (tmp_path / "o.safetensors").exists()
