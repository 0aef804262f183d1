"""Timing the command line's start-up: the rows measured and their targets, and each command run as a
user runs it, in a fresh process, with wall and CPU time (what tools/bench/startup.py prints and
tools/bench/run.py reports)."""

from __future__ import annotations

import compileall
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROWS = [
    "python -c pass (the interpreter alone)", "python -c 'import mdiff'",
    "mdiff --version", "mdiff --help", "mdiff log (small repository)", "mdiff status (small repository)",
]
# SPEC-independent targets of the project's "everyday trust" issue (seconds, on the bench machine)
TARGETS = {"mdiff --version": 0.2, "mdiff --help": 0.2, "mdiff log (small repository)": 0.5,
           "mdiff status (small repository)": 0.5}


def _mdiff_command() -> list[str]:
    script = shutil.which("mdiff")
    return [script] if script else [sys.executable, "-m", "mdiff"]


def _small_repository(folder: Path) -> Path:
    """A repository of two commits (and a checkpoint equal to HEAD, for status)."""
    import mdiff
    from mdiff.checkpoints import save_checkpoint

    rng = np.random.default_rng(0)
    state = {f"layer{i}.weight": rng.standard_normal((64, 64)).astype(np.float32) for i in range(4)}
    repo = mdiff.Repository.init(folder)
    save_checkpoint(folder / "model.safetensors", state)
    repo.commit(folder / "model.safetensors", message="root", author="bench <bench@example.com>")
    state["layer0.weight"][0, 0] += 1
    save_checkpoint(folder / "model.safetensors", state)
    repo.commit(folder / "model.safetensors", message="one change", author="bench <bench@example.com>")
    return folder / "model.safetensors"


def measure(repeat: int = 15, work: Path | None = None) -> dict:
    """{"times": {row: [wall seconds, …]}, "cpu": {row: [user + sys seconds, …]}} for every row of ROWS,
    a fresh process each."""
    import mdiff

    compileall.compile_dir(str(Path(mdiff.__file__).parent), quiet=1)
    own = work is None
    work = Path(tempfile.mkdtemp(prefix="mdiff-startup-")) if work is None else work
    try:
        checkpoint = _small_repository(work / "repo")
        mdiff_cmd = _mdiff_command()
        commands = {
            ROWS[0]: [sys.executable, "-c", "pass"],
            ROWS[1]: [sys.executable, "-c", "import mdiff"],
            ROWS[2]: mdiff_cmd + ["--version"],
            ROWS[3]: mdiff_cmd + ["--help"],
            ROWS[4]: mdiff_cmd + ["log"],
            ROWS[5]: mdiff_cmd + ["status", str(checkpoint)],
        }
        env = {**os.environ, "MDIFF_AUTHOR": "bench <bench@example.com>"}
        times: dict[str, list[float]] = {row: [] for row in ROWS}
        cpu: dict[str, list[float]] = {row: [] for row in ROWS}
        for rep in range(repeat):
            order = ROWS[rep % len(ROWS):] + ROWS[:rep % len(ROWS)]  # rotated: no row always runs first
            for row in order:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(commands[row], cwd=work / "repo", env=env, capture_output=True)
                elapsed = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode != 0:
                    raise RuntimeError(f"{row} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
                times[row].append(elapsed)
                cpu[row].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        return {"times": times, "cpu": cpu, "command": " ".join(mdiff_cmd)}
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
