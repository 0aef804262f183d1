"""Start-up of the command line: how long a command takes before it does anything.

Each command runs as a user runs it — the installed console script when there is one on PATH,
else ``python -m mdiff`` — in a fresh process, the commands interleaved and each repeated; the
interpreter alone (``python -c pass``) and ``import mdiff`` are measured beside them, and the CPU
time (user + sys) of each process beside its wall time, so that the figures can be read on a loaded
machine. mdiff's modules are byte-compiled first, as ``pip install`` leaves them (an editable
install under PYTHONDONTWRITEBYTECODE would otherwise compile ~50 modules on every start, ~0.1 s). ``log`` and ``status`` run in a small repository (two
commits of a 4-tensor model, 64 KiB).

    python tools/bench/startup.py [--repeat 15]     # standalone: prints the table
"""

from __future__ import annotations

import compileall
import os
import resource
import shutil
import statistics
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


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    result = measure(args.repeat)
    print(f"{'command':<42} {'median':>8} {'min':>8} {'max':>8} {'CPU':>8}  target (wall time)")
    for row in ROWS:
        t = result["times"][row]
        target = TARGETS.get(row)
        verdict = "" if target is None else f"≤ {target:g} s: {'met' if statistics.median(t) <= target else 'MISSED'}"
        print(f"{row:<42} {statistics.median(t):8.3f} {min(t):8.3f} {max(t):8.3f} "
              f"{statistics.median(result['cpu'][row]):8.3f}  {verdict}")
    print(f"(mdiff run as: {result['command']}; load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
