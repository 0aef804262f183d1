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

import os
import statistics
import sys
from pathlib import Path

from startup_timing import ROWS, TARGETS, measure


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
