#!/usr/bin/env python3
"""Issue 16.2's scale rows: the write and apply ratios of codec_targets.py at several model sizes, and their slopes.

At each size (GiB of float32; 16 MiB tensors of 4096×1024, codec_targets.py's synthetic model and dense change)
the same contenders as codec_targets.py, rotated every repetition, wall and CPU time (all threads):

  write   write_diff (default settings, fsynced)  vs  safetensors.torch.save_file + fsync     (target ≤ 1.5×)
  apply   mdiff.apply_files (default)              vs  load base and delta, numpy add, save     (target ≤ 1.0×)

Then a least-squares line of each contender's median seconds against GiB: the slope (s/GiB) says whether the
cost grows linearly, and the ratio of slopes is the ratio a larger model tends to.

    python tools/bench/speed_scale.py --sizes 0.25,1,4 --repeat 3 [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import mdiff  # noqa: E402
from mdiff.diffing import write_diff  # noqa: E402

import contenders  # noqa: E402  (the apply baseline)
import measuring  # noqa: E402
import synthetic_model  # noqa: E402

WRITE = ("write_diff (default settings, fsynced)", "safetensors.torch.save_file + fsync")
APPLY = ("mdiff.apply_files (default)", "baseline: safetensors load ×2, numpy add, save")


def at_size(gib: float, repeat: int, work: Path, log) -> dict:
    from safetensors.numpy import save_file as np_save
    from safetensors.torch import save_file as torch_save

    tensors = max(1, round(gib * (1 << 30) / (4096 * 1024 * 4)))
    base = synthetic_model.synthetic_base(tensors, 4096, 1024)
    new = synthetic_model.dense_variant(base)
    model_bytes = synthetic_model.nbytes(new)
    base_path, delta_path, diff_path = work / "base.safetensors", work / "delta.safetensors", work / "dense.mdiff"
    np_save(base, base_path)
    np_save({k: new[k] - base[k] for k in base}, delta_path)
    write_diff(base, new, diff_path, mdiff.Commit("dense", date=synthetic_model.DATE))
    torch_new = synthetic_model.to_torch(new)
    rec: dict = {"write": {}, "apply": {}}
    out, st_out = work / "w.mdiff", work / "w.safetensors"

    def mdiff_write():
        measuring.prime(int(1.25 * model_bytes))
        measuring.timed(rec["write"], WRITE[0], lambda: write_diff(base, new, out, mdiff.Commit("w", date=synthetic_model.DATE)))
        out.unlink()

    def torch_write():
        measuring.prime(int(1.25 * model_bytes))
        measuring.timed(rec["write"], WRITE[1], lambda: (torch_save(torch_new, st_out), measuring.fsync_file(st_out)))
        st_out.unlink()

    def mdiff_apply():
        measuring.prime(int(1.25 * model_bytes))
        measuring.timed(rec["apply"], APPLY[0], lambda: mdiff.apply_files(base_path, diff_path, st_out))
        st_out.unlink()

    def baseline_apply():
        measuring.prime(int(3.25 * model_bytes))
        measuring.timed(rec["apply"], APPLY[1], lambda: contenders.baseline_apply(base_path, delta_path, st_out))
        st_out.unlink()

    loads = []
    # the write group first, then the models are let go before the apply group (whose baseline holds three)
    for group, free in (([mdiff_write, torch_write], True), ([mdiff_apply, baseline_apply], False)):
        for rep in range(repeat):
            turn = rep % len(group)
            for fn in group[turn:] + group[:turn]:
                fn()
            loads.append(measuring.loadavg())
            log(f"{gib} GiB: {group[0].__name__} and {group[1].__name__}, repetition {rep + 1}/{repeat}, load {loads[-1]}")
        if free:
            base = new = torch_new = None
    result = {"gib": model_bytes / (1 << 30), "records": rec, "loads": loads, "diff_bytes": diff_path.stat().st_size}
    for path in (base_path, delta_path, diff_path):
        path.unlink()
    return result


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (seconds per GiB, seconds at 0 GiB)."""
    a, b = np.polyfit(np.asarray(xs), np.asarray(ys), 1)
    return float(a), float(b)


def report(points: list[dict]) -> str:
    med = measuring.median
    rows = ["| GiB | write_diff | save_file + fsync | write ratio | apply_files | baseline | apply ratio | load |",
            "|---|---|---|---|---|---|---|---|"]
    for p in points:
        w = [med(p["records"]["write"][k]["wall"]) for k in WRITE]
        a = [med(p["records"]["apply"][k]["wall"]) for k in APPLY]
        rows.append(f"| {p['gib']:.2f} | {w[0]:.2f} s | {w[1]:.2f} s | {w[0] / w[1]:.2f}× | {a[0]:.2f} s | "
                    f"{a[1]:.2f} s | {a[0] / a[1]:.2f}× | {', '.join(p['loads'])} |")
    if len(points) > 1:
        xs = [p["gib"] for p in points]
        rows += ["", "| contender | slope (s per GiB) | intercept (s) |", "|---|---|---|"]
        for group, labels in (("write", WRITE), ("apply", APPLY)):
            for label in labels:
                s, b = slope(xs, [med(p["records"][group][label]["wall"]) for p in points])
                rows.append(f"| {label} | {s:.2f} | {b:.2f} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="0.25,1,4", help="GiB of float32, comma-separated")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="every figure as JSON")
    args = p.parse_args(argv)
    t0 = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s, load {measuring.loadavg()}] {message}", file=sys.stderr, flush=True)

    points = []
    with tempfile.TemporaryDirectory(prefix="speed-scale-") as tmp:
        for gib in (float(s) for s in args.sizes.split(",")):
            points.append(at_size(gib, args.repeat, Path(tmp), log))
    if args.json:
        Path(args.json).write_text(json.dumps(points, indent=1, default=str), encoding="utf-8")
    print(report(points))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
