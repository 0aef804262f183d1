#!/usr/bin/env python3
"""Issue 32 item 3: the checkout of the end of a sparse chain against one full load, at a size that runs in minutes.

A repository holding a root commit of a synthetic float32 model (TENSORS tensors of 4096 × 1024, 16 MiB each;
--mib picks how many) and --commits sparse commits, each changing 1 % of every tensor, made as run.py's chain
is (`Repository.commit` with every update given: version-2 sparse updates, each commit's state_sha256, and the
snapshots the writer's policy writes). Then, interleaved, each in a fresh child process: `Repository.checkout`
of the last commit into memory, and `safetensors.numpy.load_file` of the same state; wall and CPU time (user +
sys, all threads) of the call alone, after the imports; medians of --repeat. The first checkout (untimed) fills
the user's walk cache, as any earlier checkout or commit of these files would have.

    python tools/bench/sparse_chain.py [--mib 256] [--commits 100] [--repeat 3] [--work DIR] [--profile FILE]
                                       [--source CHECKOUT]

--source: also time the checkout with the mdiff package of another checkout (e.g. a worktree of main), in the
same rotation: an A/B of two versions of the code on the same chain and load.

Target (issue 32): the checkout of commit 100 ≤ 3× a full load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

TARGET = 3.0
ROWS, COLS = 4096, 1024


def build(path: Path, mib: int, commits: int) -> None:
    import mdiff
    from safetensors.numpy import save_file
    from synthetic_model import DATE, sparse_step, synthetic_base

    tensors = max(1, mib * (1 << 20) // (ROWS * COLS * 4))
    state = synthetic_base(tensors, ROWS, COLS)
    repo = mdiff.Repository.init(path)
    author = mdiff.Author("bench")
    rng = np.random.default_rng(4)
    head = repo.commit(state, "base", author=author, date=DATE, explicit={k: mdiff.replace(v) for k, v in state.items()})
    for i in range(commits):
        updates = {k: sparse_step(state[k], rng) for k in state}
        head = repo.commit(state, f"sparse step {i + 1}", author=author, date=DATE, explicit=updates)
    repo.set_branch("main", head)
    save_file(state, str(path / "last.safetensors"))


def snapshot_places(path: Path) -> list[int]:
    """The commits (numbered from the root's 0) whose snapshot the writer's policy wrote."""
    from mdiff.repo import Repository

    repo = Repository.find(path)
    line = [repo.head()[1]]
    while repo.parents(line[-1]):
        line.append(repo.parents(line[-1])[0])
    return [n for n, commit_id in enumerate(reversed(line)) if repo.snapshot_path(commit_id).exists()]


def replayed(path: Path) -> int:
    from mdiff.repo import Repository

    repo = Repository.find(path)
    return repo.replay_cost(repo.head()[1])[0]


def child(kind: str, path: Path, profile: str | None) -> None:
    """One timed call in this (fresh) process; prints {"wall": s, "cpu": s}."""
    from safetensors.numpy import load_file

    from mdiff.repo import Repository  # imported before the clock starts, as load_file is

    def call():
        if kind == "checkout":
            return Repository.find(path).checkout("HEAD")
        return load_file(str(path / "last.safetensors"))

    wall, cpu = time.perf_counter(), time.process_time()
    if profile:
        import cProfile

        cProfile.runctx("call()", globals(), {"call": call}, profile)
    else:
        call()
    print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))


def run_child(kind: str, path: Path, profile: str | None = None, source: Path | None = None) -> dict:
    argv = [sys.executable, __file__, "--child", kind, "--work", str(path)] + (["--profile", profile] if profile else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(source or ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256, help="the model's size in MiB (default 256)")
    parser.add_argument("--commits", type=int, default=100, help="sparse commits after the root (default 100)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="keep the chain here and reuse it (default: a temporary folder)")
    parser.add_argument("--profile", default=None, help="cProfile one more checkout into this file")
    parser.add_argument("--source", type=Path, default=None,
                        help="also time the checkout with the mdiff package of this checkout (an A/B)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.work, args.profile)
        return 0
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mdiff-bench-sparse-")))
        path = work / f"chain-{args.mib}-{args.commits}"
        if not (path / "last.safetensors").is_file():
            start = time.perf_counter()
            build(path, args.mib, args.commits)
            print(f"chain built in {time.perf_counter() - start:.0f} s", flush=True)
        commits = sum(p.stat().st_size for p in (path / ".mdiff" / "commits").rglob("*.mdiff"))
        snaps = sorted((path / ".mdiff" / "snapshots").glob("*.mdiff"))
        print(f"{args.mib} MiB model, root + {args.commits} sparse commits (1 % of every tensor): "
              f"{commits / 1e6:.0f} MB of commits, {len(snaps)} snapshots "
              f"({sum(p.stat().st_size for p in snaps) / 1e6:.0f} MB; after commits {snapshot_places(path) or '-'}), "
              f"the checkout of commit {args.commits} replays {replayed(path)} commits; load {os.getloadavg()[0]:.1f}",
              flush=True)
        run_child("checkout", path)  # fills the walk cache (untimed)
        got: dict[str, list[dict]] = {"checkout": [], "load": [], **({"checkout --source": []} if args.source else {})}
        kinds = list(got)
        for i in range(args.repeat):
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:  # rotated each round
                source = args.source if kind == "checkout --source" else None
                got[kind].append(run_child("load" if kind == "load" else "checkout", path, source=source))
        med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu")} for k, v in got.items()}
        for kind, rows in got.items():
            walls = ", ".join(f"{r['wall']:.2f}" for r in rows)
            cpus = ", ".join(f"{r['cpu']:.2f}" for r in rows)
            print(f"{kind}: wall {med[kind]['wall']:.3f} s ({walls}), CPU {med[kind]['cpu']:.3f} s ({cpus})")
        for m in ("wall", "cpu"):
            ratio = med["checkout"][m] / med["load"][m]
            print(f"checkout ÷ load ({m}): {ratio:.2f}× (target ≤ {TARGET}×: {'met' if ratio <= TARGET else 'missed'})")
            if args.source:
                print(f"checkout --source ÷ load ({m}): {med['checkout --source'][m] / med['load'][m]:.2f}×")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        if args.profile:
            run_child("checkout", path, args.profile)
            print(f"profile of one checkout: {args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
