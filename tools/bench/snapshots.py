#!/usr/bin/env python3
"""What snapshots cost and save (SPEC.md §13.5): the figures behind SNAPSHOT_REPLAY_FACTOR.

One history — a root commit of a synthetic model (float32, N(0, 0.02²); 64 MiB by default) and
COMMITS commits that each change every value a little, as a full fine-tune's checkpoints do (dense
updates) — is committed once without snapshots. Then, for each policy, a copy of it (commit files
hard-linked) gets the snapshots that policy would have written after each commit, and the report
gives, per policy: the snapshots written, the repository's bytes, and the time to check out the
last commit (Repository.checkout into memory, a fresh Repository each time, median of --repeat),
with the part of it that is the §13.5 walk: verifying and opening every commit back to the root
and checking the snapshot against them (StateView opened, nothing read), with and without hashing
the commit files (a process that hashed them once skips it).

    python tools/bench/snapshots.py [--mib 64] [--commits 20] [--repeat 3] [--work DIR]

Policies: none; "old" — the reference before this policy (uncompressed, after >= 8 commits
replaying >= 1 state); and k = 2, 4, 8, 16 — compressed, once a checkout would apply >= k states.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mdiff.repo import Repository, snapshots  # noqa: E402
from mdiff.format.commit import Commit  # noqa: E402
from mdiff.format.writer import DiffWriter  # noqa: E402
from mdiff.updates import replace  # noqa: E402

DATE = "2026-01-01T00:00:00Z"
AUTHOR = "bench <bench@example.org>"


def model(mib: int, rng) -> dict[str, np.ndarray]:
    n = mib * (1 << 20) // 4 // 16
    return {f"layer{i}.weight": (rng.standard_normal(n) * 0.02).astype(np.float32) for i in range(16)}


def build(path: Path, mib: int, commits: int) -> list[str]:
    rng = np.random.default_rng(0)
    repo = Repository.init(path)
    state = model(mib, rng)
    ids = [repo.commit(state, "root", author=AUTHOR, date=DATE)]
    for i in range(commits):
        for value in state.values():  # an AdamW step: every value moves by ~1e-4 of its scale
            value += (rng.standard_normal(value.size) * 2e-6).astype(np.float32)
        ids.append(repo.commit(state, f"step {i + 1}", author=AUTHOR, date=DATE))
    return ids


def write_uncompressed(repo: Repository, commit_id: str) -> None:
    """What the reference wrote before: the same file, uncompressed."""
    with repo.open_state(commit_id) as view:
        meta = Commit("snapshot", date=repo.metadata(commit_id).date, meta={"snapshot_of": commit_id})
        with DiffWriter(repo.snapshot_path(commit_id), meta, "none") as writer:
            for name in sorted(view):
                writer.add(name, replace.encode(view.read(name)))


def apply_policy(base: Path, work: Path, ids: list[str], policy) -> Repository:
    """A copy of the history at ``base`` with the snapshots ``policy`` writes after each commit."""
    target = work / f"repo-{policy}"
    shutil.copytree(base, target, copy_function=os.link)
    repo = Repository.find(target)
    for i, commit_id in enumerate(ids):
        if policy == "none" or i == 0:
            continue
        if policy == "old":
            with repo.open_state(commit_id) as view:
                commits, replayed, size = view.commits_after_start, view.replay_bytes(), view.state_bytes()
            if view.snapshot is None:
                commits -= 1  # the old count left the root out
            if commits >= 8 and replayed - size >= size:
                write_uncompressed(repo, commit_id)
        else:
            snapshots.SNAPSHOT_REPLAY_FACTOR = policy
            snapshots.snapshot_if_due(repo, commit_id, lambda c=commit_id: repo.open_state(c))
    return repo


def timed(fn, repeat: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``fn``; CPU time counts every thread and is less sensitive to other
    work on a shared machine."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def repo_bytes(repo: Repository) -> tuple[int, int]:
    size = lambda folder: sum(p.stat().st_size for p in (repo.dir / folder).glob("*.mdiff"))  # noqa: E731
    return size("commits"), size("snapshots")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="the model's size in MiB (default 64)")
    parser.add_argument("--commits", type=int, default=20, help="commits after the root (default 20)")
    parser.add_argument("--repeat", type=int, default=3, help="timings of the last commit (median; default 3)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the history here and reuse it on the next run (default: a temporary folder)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mdiff-bench-snapshots-")))
        saved = snapshots.SNAPSHOT_REPLAY_FACTOR
        snapshots.SNAPSHOT_REPLAY_FACTOR = float("inf")  # the history alone
        base = work / f"base-{args.mib}-{args.commits}"
        if (base / ".mdiff").is_dir():
            repo = Repository.find(base)
            ids = [repo.head()[1]]
            while repo.parents(ids[0]):
                ids.insert(0, repo.parents(ids[0])[0])
        else:
            start = time.perf_counter()
            ids = build(base, args.mib, args.commits)
            print(f"history built in {time.perf_counter() - start:.0f} s")
        later = ids[len(ids) // 2:]
        print(f"a {args.mib} MiB model (16 float32 tensors), root + {args.commits} dense commits; checkout: "
              f"Repository.checkout into memory, a fresh Repository each time; 'last': commit {args.commits}, "
              f"median of {args.repeat}; 'mean': commits {len(ids) - len(later)}–{args.commits}, once each; "
              f"walk: StateView opened (§13.5 walk and check), nothing read", flush=True)
        print("| policy | snapshots at | commits MB | snapshots MB | total vs none | last: wall | CPU | "
              "mean: wall | CPU | vs none (CPU) | walk: wall | CPU | hashes cached: wall |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        baseline: dict[str, float] = {}
        for policy in ["none", "old", 2, 4, 8, 16]:
            repo = apply_policy(base, work, ids, policy)
            snapshotted = [i for i, c in enumerate(ids) if repo.snapshot_path(c).exists()]
            commits, snaps = repo_bytes(repo)
            root = repo.root

            def checkout(commit_id: str, root: Path = root) -> None:
                Repository.find(root).checkout(commit_id)

            def walk_only(repo: Repository | None = None, root: Path = root) -> None:
                (repo or Repository.find(root)).open_state(ids[-1]).close()

            last = timed(functools.partial(checkout, ids[-1]), args.repeat)
            each = [timed(functools.partial(checkout, c), 1) for c in later]
            mean = (statistics.fmean(w for w, _ in each), statistics.fmean(c for _, c in each))
            walk = timed(walk_only, args.repeat)
            warm = Repository.find(root)
            walk_only(warm)
            walk_cached = timed(functools.partial(walk_only, warm), args.repeat)
            if policy == "none":
                baseline = {"size": commits + snaps, "cpu": mean[1]}
            name = {"none": "none", "old": "old (uncompressed, ≥ 8 commits, ≥ 1 state)"}.get(policy, f"k = {policy}")
            print(f"| {name} | {snapshotted or '-'} | {commits / 1e6:.0f} | {snaps / 1e6:.0f} | "
                  f"{(commits + snaps) / baseline['size']:.2f}× | {last[0]:.2f} s | {last[1]:.2f} s | {mean[0]:.2f} s | "
                  f"{mean[1]:.2f} s | {mean[1] / baseline['cpu']:.2f}× | {walk[0]:.2f} s | {walk[1]:.2f} s | "
                  f"{walk_cached[0]:.2f} s |", flush=True)
            shutil.rmtree(repo.root, ignore_errors=True)
        snapshots.SNAPSHOT_REPLAY_FACTOR = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
