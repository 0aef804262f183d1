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
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

ROWS = [
    "python -c pass (the interpreter alone)", "python -c 'import mdiff'",
    "mdiff --version", "mdiff --help", "mdiff log (small repository)", "mdiff status (small repository)",
    "python -c 'import numpy'", "python -m mdiff log (small repository)", "python -m mdiff status (small repository)",
]
NUMPY = "python -c 'import numpy'"
# SPEC-independent targets of the project's "everyday trust" issue (seconds, on the bench machine)
TARGETS = {"mdiff --version": 0.2, "mdiff --help": 0.2, "mdiff log (small repository)": 0.5,
           "mdiff status (small repository)": 0.5}
# issue 27: log and status of a small repository whose commits were seen before start no slower than numpy
# is imported (the median wall time's ratio to NUMPY's, measured in the same interleaved run)
RATIO_TARGETS = {"python -m mdiff log (small repository)": 1.0, "python -m mdiff status (small repository)": 1.0,
                 "mdiff log (small repository)": 1.0, "mdiff status (small repository)": 1.0}


def _mdiff_command() -> list[str]:
    """The console script as pip installs it for this interpreter (not a shim in front of it, such as
    pyenv's, which starts a shell first); else the one on PATH; else ``python -m mdiff``."""
    beside = os.path.join(sysconfig.get_path("scripts"), "mdiff")
    if os.access(beside, os.X_OK):
        return [beside]
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


def ratio(result: dict, row: str) -> float:
    """The median wall time of ``row`` over that of ``python -c 'import numpy'`` in the same run."""
    import statistics

    return statistics.median(result["times"][row]) / statistics.median(result["times"][NUMPY])


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
            ROWS[6]: [sys.executable, "-c", "import numpy"],
            ROWS[7]: [sys.executable, "-m", "mdiff", "log"],
            ROWS[8]: [sys.executable, "-m", "mdiff", "status", str(checkpoint)],
        }
        # a cache folder of the run's own, filled by the commits above and by one run of each command
        env = {**os.environ, "MDIFF_AUTHOR": "bench <bench@example.com>", "MDIFF_CACHE_DIR": str(work / "cache")}
        for row in ROWS:
            subprocess.run(commands[row], cwd=work / "repo", env=env, capture_output=True)
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
