"""Start-up of the command line: how long a command takes before it does anything.

Each command runs as a user runs it — the console script pip installed beside the interpreter (not
a shim in front of it, such as pyenv's, which starts a shell first), else the one on PATH, else
``python -m mdiff`` — in a fresh process, the commands interleaved and each repeated; the
interpreter alone (``python -c pass``), ``import mdiff`` and ``import numpy`` (issue 27's yardstick:
log and status no slower) are measured beside them, log and status also as ``python -m mdiff``
(the entry point's machinery aside), and the CPU time (user + sys) of each process beside its wall time, so that the figures can be read on a loaded
machine. mdiff's modules are byte-compiled first, as ``pip install`` leaves them (an editable
install under PYTHONDONTWRITEBYTECODE would otherwise compile ~50 modules on every start, ~0.1 s). ``log`` and ``status`` run in a small repository (two
commits of a 4-tensor model, 64 KiB; ``status`` of the checkpoint last committed) whose commits were
seen before: the run has a cache folder of its own, filled before the timing.

    python tools/bench/startup.py [--repeat 15]     # standalone: prints the table
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from startup_timing import RATIO_TARGETS, ROWS, TARGETS, measure, ratio


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    result = measure(args.repeat)
    print(f"{'command':<42} {'median':>8} {'min':>8} {'max':>8} {'CPU':>8} {'/numpy':>7}  target (wall time)")
    for row in ROWS:
        t = result["times"][row]
        verdicts = []
        if row in TARGETS:
            verdicts.append(f"≤ {TARGETS[row]:g} s: {'met' if statistics.median(t) <= TARGETS[row] else 'MISSED'}")
        if row in RATIO_TARGETS:
            verdicts.append(f"≤ {RATIO_TARGETS[row]:g}× numpy: {'met' if ratio(result, row) <= RATIO_TARGETS[row] else 'MISSED'}")
        print(f"{row:<42} {statistics.median(t):8.3f} {min(t):8.3f} {max(t):8.3f} "
              f"{statistics.median(result['cpu'][row]):8.3f} {ratio(result, row):6.2f}×  {'; '.join(verdicts)}")
    print(f"(mdiff run as: {result['command']}; load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
