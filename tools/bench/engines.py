#!/usr/bin/env python3
"""Engine benchmark: each update type applied to one parameter by numpy in place, by mdiff's
numpy engine and by the ONNX engine (onnxruntime), interleaved, with repetitions.

Prints medians, spread (min–max) and each time as a ratio to plain numpy in place. The
engines are timed without the sha256 verification that `apply` adds (its cost is printed
on its own line), so that the ratio compares the math alone.

    python tools/bench/engines.py [--size 4096] [--repeat 15] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import mdiff  # noqa: E402
from mdiff.engines.onnxruntime_engine import shared_runner  # noqa: E402
from mdiff.format.dtypes import DTYPES  # noqa: E402
from mdiff.updates import REGISTRY  # noqa: E402


def cases(size: int, rng: np.random.Generator):
    """(label, update, baseline: W → None (numpy, in place)) for one size×size float32 parameter."""
    W = rng.standard_normal((size, size), dtype=np.float32)
    new = W + rng.normal(0, 1e-3, W.shape).astype(np.float32)
    dense = mdiff.dense(W, new)
    xor = dense.data["xor"]
    yield "dense", W, dense, lambda w: np.bitwise_xor(w.view(np.uint32), xor, out=w.view(np.uint32))

    idx = np.sort(rng.choice(W.size, W.size // 100, replace=False)).astype(np.uint64)
    few = W.copy()
    few.reshape(-1)[idx] += np.float32(1e-2)
    sparse = mdiff.sparse(W, few)
    values = sparse.data["xor"]

    def numpy_sparse(w):
        flat = w.view(np.uint32).reshape(-1)
        flat[idx] ^= values

    yield "sparse 1%", W, sparse, numpy_sparse

    for r in (8, 64):
        A = rng.standard_normal((size, r), dtype=np.float32)
        B = rng.standard_normal((r, size), dtype=np.float32)
        update = mdiff.low_rank(A, B, W.shape, DTYPES["float32"], scale=0.5)

        def numpy_low_rank(w, A=A, B=B):
            w += np.float32(0.5) * (A @ B)

        yield f"low_rank r={r}", W, update, numpy_low_rank


def measure(size: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    run = shared_runner()
    results = {}
    for label, W, update, baseline in cases(size, rng):
        kind = REGISTRY[update.type]
        work = W.copy()
        contenders = {
            "numpy in place": lambda: baseline(work),
            "mdiff numpy engine": lambda: kind.apply_numpy(update, work, True),
            "mdiff onnx engine": lambda: kind.apply_onnx(update, work, run, True),
        }
        for fn in contenders.values():  # warm up: sessions, page faults, caches
            fn()
        times = {name: [] for name in contenders}
        for _ in range(repeat):  # interleaved, so that drift hits every contender alike
            for name, fn in contenders.items():
                np.copyto(work, W)
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        base = statistics.median(times["numpy in place"])
        results[label] = {
            name: {"median_ms": statistics.median(t) * 1e3, "min_ms": min(t) * 1e3, "max_ms": max(t) * 1e3,
                   "ratio": statistics.median(t) / base}
            for name, t in times.items()
        }
    hashes = []
    for _ in range(repeat):
        start = time.perf_counter()
        hashlib.sha256(W.reshape(-1).view(np.uint8)).hexdigest()
        hashes.append(time.perf_counter() - start)
    results["sha256 verification (per exact result)"] = {"sha256": {"median_ms": statistics.median(hashes) * 1e3,
                                                                   "min_ms": min(hashes) * 1e3, "max_ms": max(hashes) * 1e3,
                                                                   "ratio": float("nan")}}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096, help="the parameter is SIZE × SIZE float32 (default 4096)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure(args.size, args.repeat)
    if args.json:
        print(json.dumps({"size": args.size, "repeat": args.repeat, "results": results}, indent=1))
        return 0
    print(f"one {args.size}×{args.size} float32 parameter ({args.size * args.size * 4 / 2**20:.0f} MiB), "
          f"{args.repeat} interleaved repetitions; median (min–max), ratio to numpy in place")
    for label, row in results.items():
        print(f"\n{label}")
        for name, r in row.items():
            ratio = "" if r["ratio"] != r["ratio"] else f"  {r['ratio']:.2f}×"
            print(f"  {name:<20} {r['median_ms']:8.2f} ms  ({r['min_ms']:.2f}–{r['max_ms']:.2f}){ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
