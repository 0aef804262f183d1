#!/usr/bin/env python3
"""The long fuzzing run: mutated .mdiff files against mdiff's reader, validator and applier.

    python tools/fuzz.py --count 100000 --seed 1 --jobs 2
    python tools/fuzz.py --minutes 40 --seed 7 --jobs 2 --out fuzz-findings
    python tools/fuzz.py --replay tests/fuzz/regressions/*.mdiff      # one outcome per file
    python tools/fuzz.py --folders --count 5000 --seed 1               # hostile repository folders and checkpoints
    python tools/fuzz.py --remotes --count 2000 --seed 1               # a folder remote's listing of refs changed
    python tools/fuzz.py --differential 2000 --seed 1                  # the reference against mdiff-js
    python tools/fuzz.py --differential 2000 --functions --seed 1      # the same, random embedded functions (§7.8)
    python tools/fuzz.py --sweep dense-storage                          # every byte of dense storage, both implementations
    python tools/fuzz.py --sweep symbol-tables                          # every byte of a symbol table, both implementations
    python tools/fuzz.py --sweep chunk-index                            # every byte of a chunk index's B-tree leaf
    python tools/fuzz.py --sweep dense-internal                         # a dense index's internal node, a heap's indirect block
    python tools/fuzz.py --sweep dataset-headers                        # every byte of a dataset's object header

(--folders, 2026-12-03, seed 11, 2 jobs: 5000 tasks in 152 s — 4541 typed, 459 OK, no failure; the largest
growth of resident memory in one target 3 MiB.)

Each file is read in a worker process with an address-space limit (--memory-gib) and a
limit of CPU time (--timeout; a blocked worker meets a wall-clock watchdog); see tests/fuzz/harness.py for the targets and the outcome classes.
Prints progress and, at the end (or on Ctrl-C), the outcomes by class and by target, class and
code. Every input whose outcome is not OK or TYPED is saved under --out as
<CLASS>/<signature>/<task>.mdiff, with <task>.json beside it (how it was made: seed, operations,
every target's outcome, the worker's log); known bugs (tests/fuzz/known.py) are saved and counted,
and marked as such. Task i depends only on --seed and i: `--start i --count 1` makes the same
file again.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz import harness  # noqa: E402
from tests.fuzz.known import known_bug  # noqa: E402


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:90]


class Tally:
    def __init__(self):
        self.files = 0
        self.by_class = collections.Counter()
        self.by_target = collections.Counter()
        self.signatures: dict[str, dict] = {}
        self.harness_problems = 0
        self.seconds = 0.0
        self.peak = (0.0, None, "")  # the largest resident-memory growth of one target: (MiB, task id, target)

    def add(self, outcome: harness.Outcome) -> list[tuple[dict, str, object]]:
        """Count one file; its failing targets as (result, signature, known bug or None)."""
        self.files += 1
        self.seconds += outcome.seconds
        failures = []
        real = [r for r in outcome.results if not r.get("harness")]
        if len(real) < len(outcome.results):
            self.harness_problems += 1
        worst = max(real, key=lambda r: harness.SEVERITY.index(r["class"])) if real else {"class": "OK"}
        self.by_class[worst["class"]] += 1
        for r in real:
            if r.get("peak_mib", 0) > self.peak[0]:
                self.peak = (r["peak_mib"], outcome.task["id"], r["target"])
            group = r["target"].split(":")[0]
            self.by_target[(group, r["class"], (r.get("code") or "") + ("*" if r.get("alloc") else ""))] += 1
            if r["class"] in harness.FAILURES:
                sig = harness.Outcome.signature(r)
                bug = known_bug(sig, r.get("message", ""))
                entry = self.signatures.setdefault(sig, {"count": 0, "first": outcome.task["id"], "message": r.get("message", ""),
                                                         "known": bug.id if bug else None})
                entry["count"] += 1
                failures.append((r, sig, bug))
        return failures

    def table(self) -> str:
        lines = [f"{self.files} files", "", "outcomes by file (the worst of its targets):"]
        for cls in harness.SEVERITY:
            if self.by_class[cls]:
                lines.append(f"  {cls:<10} {self.by_class[cls]:>8}  {100 * self.by_class[cls] / max(1, self.files):6.2f}%")
        lines += ["", "outcomes by target, class and code (a file counts once per target run):",
                  f"  {'target':<14} {'class':<10} {'code':<6} {'count':>8}"]
        for (group, cls, code), n in sorted(self.by_target.items(), key=lambda kv: (kv[0][0], harness.SEVERITY.index(kv[0][1]), kv[0][2])):
            lines.append(f"  {group:<14} {cls:<10} {code:<6} {n:>8}")
        if any(k[2].endswith("*") for k in self.by_target):
            lines.append("  (* : refused after libhdf5 or onnxruntime failed to allocate a buffer whose size the file gave)")
        if self.signatures:
            lines += ["", "failure signatures:"]
            for sig, e in sorted(self.signatures.items(), key=lambda kv: -kv[1]["count"]):
                mark = f"known bug {e['known']}" if e["known"] else "NEW"
                lines.append(f"  {e['count']:>6}  [{mark}] {sig}\n          first: task {e['first']}: {e['message'][:160]}")
        if self.peak[1] is not None:
            lines.append(f"\nlargest resident-memory growth of one target: {self.peak[0]:.0f} MiB "
                         f"(task {self.peak[1]}, {self.peak[2]})")
        if self.harness_problems:
            lines.append(f"\n{self.harness_problems} files hit a harness problem (the mutation step died or hung)")
        return "\n".join(lines)


def _js_scratch(args, prefix: str) -> Path | None:
    """The scratch folder of a run against mdiff-js; None (said) when mdiff-js cannot run."""
    from tests.fuzz import differential

    if not differential.js_available():
        print("mdiff-js needs node and `npm ci --prefix tools/mdiff-js`", file=sys.stderr)
        return None
    scratch = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix=prefix))
    scratch.mkdir(parents=True, exist_ok=True)
    return scratch


def _differential(args) -> int:
    from tests.fuzz import differential

    scratch = _js_scratch(args, "mdiff-differential-")
    if scratch is None:
        return 2
    started = time.monotonic()

    latest = differential.Tally()

    def progress(t) -> None:
        nonlocal latest
        latest = t
        print(f"{t.files} files, {t.files - t.agree} disagreements, {time.monotonic() - started:.0f} s", flush=True)

    keep = Path(args.out) / "differential"
    try:
        if args.functions:
            tally = differential.run_functions(scratch, args.differential, args.seed, args.start, keep, progress)
        else:
            tally = differential.run(scratch, args.differential, args.seed, args.start, keep, progress,
                                     embedded_only=args.embedded_only,
                                     deadline=started + 60 * args.minutes if args.minutes else None)
    except KeyboardInterrupt:  # stopped (Ctrl-C, kill): the files compared so far
        tally = latest
        print("stopped", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    print(tally.summary())
    print(f"{time.monotonic() - started:.0f} s; disagreeing files kept under {keep}")
    return 1 if tally.files != tally.agree else 0


def _sweep(args) -> int:
    from tests.fuzz import sweep

    scratch = _js_scratch(args, "mdiff-sweep-")
    if scratch is None:
        return 2
    started = time.monotonic()
    try:
        found = sweep.run(scratch, lambda line: print(f"{line} ({time.monotonic() - started:.0f} s)", flush=True),
                          timeout=args.timeout, kind=args.sweep)
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(found)} disagreements, {time.monotonic() - started:.0f} s")
    return 1 if found else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000, help="files to make and read (default 100000)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long, whatever the count")
    parser.add_argument("--seed", type=int, default=1, help="master seed (default 1)")
    parser.add_argument("--start", type=int, default=0, help="first task index (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=harness.DEFAULT_TIMEOUT, help="CPU seconds per file (default 10)")
    parser.add_argument("--memory-gib", type=float, default=harness.DEFAULT_MEMORY / 2**30, help="address space per worker (default 2)")
    parser.add_argument("--out", default="fuzz-findings", help="folder for non-typed inputs (default ./fuzz-findings)")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--keep-known", type=int, default=-1, help="inputs kept per known-bug signature (default -1: all)")
    parser.add_argument("--malloc-check", action="store_true",
                        help="preload glibc's malloc checker into the workers (heap damage then tends to show in the file that "
                             "did it; slower, and some attribute-heavy files become very slow)")
    parser.add_argument("--folders", action="store_true",
                        help="fuzz hostile repository folders and checkpoints instead of .mdiff files (tests/fuzz/folders.py)")
    parser.add_argument("--remotes", action="store_true",
                        help="fuzz a folder remote whose listing of refs its owner changed (the remote family of "
                             "tests/fuzz/folders.py)")
    parser.add_argument("--remote-cap", type=int, default=200, metavar="N",
                        help="with --remotes: the cap of refs a fetch reads in the workers (default 200, as the tests; 0: "
                             "the reference's 100,000 — a listing past it is 100,000 files, seconds per task)")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="read these files instead (one outcome each)")
    parser.add_argument("--differential", type=int, default=None, metavar="N",
                        help="make N files and validate each with the reference and with mdiff-js (tests/fuzz/differential.py): "
                             "report every file on which their verdicts or code sets differ, kept under --out")
    parser.add_argument("--functions", action="store_true",
                        help="with --differential: x-ia3 files with random embedded functions (SPEC.md §7.8) instead")
    parser.add_argument("--embedded-only", action="store_true",
                        help="with --differential: only the seeds that define embedded update types")
    parser.add_argument("--sweep", choices=("dense-storage", "symbol-tables", "chunk-index", "dense-internal", "dataset-headers"), default=None,
                        help="every byte of the structures named, 4 values each, validated by the reference and mdiff-js "
                             "(tests/fuzz/sweep.py): a dense attribute and a dense link storage's heap and B-tree headers, "
                             "root leaves and root block; or a symbol table's B-tree node, symbol table node and local "
                             "heap; a chunk index's version 1 B-tree leaf; a dense link storage's root internal node and root "
                             "indirect block; or a dataset's object header. Reports every file on which they differ")
    parser.add_argument("--sweep-dense-storage", action="store_const", const="dense-storage", dest="sweep",
                        help="the same as --sweep dense-storage")
    parser.add_argument("--tasks", default=None, metavar="I,J,...",
                        help="make and read exactly these tasks of --seed, in this order, in one worker process "
                             "(to reproduce a crash that needs what earlier files did to the process: see 'history')")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill PID: stop, print the tables
    memory = int(args.memory_gib * 2**30)
    if args.replay:
        return _replay(args, memory)
    if args.differential is not None:
        return _differential(args)
    if args.sweep:
        return _sweep(args)
    ids = [int(x) for x in args.tasks.split(",")] if args.tasks else None
    if ids is not None:
        args.jobs, args.count = 1, len(ids)
    out = Path(args.out)
    scratch = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="mdiff-fuzz-"))
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"building the seed corpus in {scratch} ...", flush=True)
    if args.folders or args.remotes:
        from tests.fuzz import folders

        folder_seeds = folders.prepare(scratch)
        manifest_path, manifest = None, [folder_seeds["repository"], *folder_seeds["checkpoints"]]
    else:
        manifest_path = harness.prepare(scratch)
        manifest = json.loads(manifest_path.read_text())
    print(f"{len(manifest)} seeds; {args.count} files from task {args.start}, seed {args.seed}, {args.jobs} jobs, "
          f"{args.timeout:g} s and {args.memory_gib:g} GiB per file", flush=True)
    tally = Tally()
    kept = collections.Counter()
    last = [time.monotonic()]
    deadline = started + 60 * args.minutes if args.minutes else None
    fuzz_started = time.monotonic()

    def on_outcome(outcome: harness.Outcome, current: Path) -> None:
        for r, sig, bug in tally.add(outcome):
            if bug and args.keep_known >= 0 and kept[sig] >= args.keep_known:
                continue
            kept[sig] += 1
            folder = out / r["class"] / _slug(("known-" + bug.id + "-" if bug else "") + sig)
            folder.mkdir(parents=True, exist_ok=True)
            stem = f"task{outcome.task['id']}"
            if current.exists():
                shutil.copyfile(current, folder / f"{stem}.mdiff")
            (folder / f"{stem}.json").write_text(json.dumps({
                "task": outcome.task, "seed_run": args.seed, "ops": outcome.ops, "results": outcome.results,
                "signature": sig, "known_bug": bug.id if bug else None, "log": outcome.log[-4000:],
                "history": outcome.history,
                "sha256": hashlib.sha256(current.read_bytes()).hexdigest() if current.exists() else None,
            }, indent=1, default=str))
            break  # one copy per file
        now = time.monotonic()
        if now - last[0] >= 10:
            last[0] = now
            rate = tally.files / max(1e-9, now - fuzz_started)
            fails = sum(tally.by_class[c] for c in harness.FAILURES)
            print(f"  {tally.files:>7} files  {rate:6.1f}/s  failures {fails}  signatures {len(tally.signatures)} "
                  f"(new {sum(1 for e in tally.signatures.values() if not e['known'])})  respawns {pool.respawns}", flush=True)

    def tasks():
        made = folders.make_remote_tasks(folder_seeds, args.seed, args.count, args.start, cap=args.remote_cap or None) if args.remotes else \
            folders.make_tasks(folder_seeds, args.seed, args.count, args.start) if args.folders else \
            harness.make_tasks(manifest, args.seed, args.count, args.start, ids=ids)
        for task in made:
            if deadline and time.monotonic() > deadline:
                return
            yield task

    pool = harness.Pool(scratch / "workers", manifest_path, jobs=args.jobs, timeout=args.timeout, memory=memory,
                        malloc_check=args.malloc_check)
    try:
        pool.run(tasks(), on_outcome, static=True)
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
    elapsed = time.monotonic() - fuzz_started
    print()
    print(tally.table())
    print(f"\n{tally.files} files in {elapsed:.0f} s: {tally.files / max(1e-9, elapsed):.1f} files/s with {args.jobs} jobs "
          f"(setup {fuzz_started - started:.0f} s); worker respawns {pool.respawns}; non-typed inputs under {out}/")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"summary-seed{args.seed}.json").write_text(json.dumps({
        "files": tally.files, "seconds": elapsed, "jobs": args.jobs, "seed": args.seed, "start": args.start,
        "by_class": tally.by_class, "by_target": [[*k, n] for k, n in sorted(tally.by_target.items())],
        "signatures": tally.signatures,
    }, indent=1))
    if not args.workdir:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if any(not e["known"] for e in tally.signatures.values()) else 0


def _replay(args, memory: int) -> int:
    outcomes = harness.replay_many(args.replay, jobs=args.jobs, timeout=args.timeout, memory=memory)
    status = 0
    for path, outcome in outcomes.items():
        print(f"{os.path.relpath(path)}: {outcome.cls}")
        for r in outcome.results:
            line = f"    {r['target']:<20} {r['class']:<10} {r.get('code') or ''}"
            if r["class"] in harness.FAILURES:
                status = 1
                line += f"  {r.get('type', '')} at {r.get('where', '?')}: {r.get('message', '')[:300]}"
                for frame in r.get("frames", [])[-6:]:
                    line += f"\n        {frame}"
            print(line)
        if outcome.cls in ("CRASH", "HANG") and outcome.log:
            print("    worker log (tail):\n" + "\n".join("      " + x for x in outcome.log.splitlines()[-30:]))
    return status


if __name__ == "__main__":
    sys.exit(main())
