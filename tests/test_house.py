"""The code stays easy to carry on: ruff and mypy pass on mdiff/ (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("tool, argv", [("ruff", ["ruff", "check", "mdiff"]), ("mypy", [sys.executable, "-m", "mypy"])])
def test_linters_pass(tool, argv):
    if shutil.which(tool) is None and tool == "ruff":
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
