#!/usr/bin/env python3
"""Where the time of mdiff's write, apply and checkout paths goes: py-spy (native frames, idle
included, so that fsync and I/O waits count) around one call of each, on the synthetic model of
tools/bench/run.py.

    python tools/bench/hotspots.py [--size-gib 1] [--ops write-none,write-gzip,apply-none,apply-gzip,read-one,checkout]
                                  [--chain 10] [--out DIR]

For each operation it prints the wall time, then the frames holding the largest share of the
samples inclusively (Python and native) and the hottest leaves, and keeps py-spy's raw collapsed
stacks in DIR (default: a temporary folder) for a flame graph. Needs `pip install py-spy`.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import mdiff  # noqa: E402
import measuring  # noqa: E402
import synthetic_model  # noqa: E402
from mdiff.updates.sparse import from_entries as sparse_from_entries  # noqa: E402

OPS = ("write-none", "write-gzip", "apply-none", "apply-gzip", "read-one", "checkout")
MARKER = "profiled_operation"


def shape(size_gib: float, tensors: int) -> tuple[int, int]:
    return max(1, round(size_gib * synthetic_model.GIB / (tensors * 1024 * 4))), 1024


def prepare(work: Path, size_gib: float, tensors: int, chain: int) -> None:
    rows, cols = shape(size_gib, tensors)
    base = synthetic_model.synthetic_base(tensors, rows, cols)
    new = synthetic_model.dense_variant(base)
    from safetensors.numpy import save_file

    save_file(base, work / "base.safetensors")
    updates = {k: mdiff.dense(base[k], new[k]) for k in sorted(base)}
    del new
    for comp in ("none", "gzip"):
        mdiff.write(work / f"dense-{comp}.mdiff", updates, synthetic_model.commit("dense"), comp)
    del updates
    repo = mdiff.Repository.init(work / "chain")
    names = sorted(base)
    rng = np.random.default_rng(4)
    head = repo.store(lambda w: [w.add(k, mdiff.replace(base[k])) for k in names], synthetic_model.commit("base"))
    for i in range(chain):
        def write(w):
            for k in names:
                flat = base[k].reshape(-1)
                idx = synthetic_model.sparse_positions(flat.size, rng)
                old = flat.view(np.uint32)[idx]
                flat[idx] += rng.standard_normal(idx.size, dtype=np.float32) * np.float32(2e-4)
                xor = old ^ flat.view(np.uint32)[idx]
                w.add(k, sparse_from_entries(base[k], idx[xor != 0], xor[xor != 0]))
        head = repo.store(write, synthetic_model.commit(f"step {i + 1}", (head,)))
    repo.set_branch("main", head)


def child(op: str, work: Path, size_gib: float, tensors: int) -> None:
    """Runs in the profiled process: set up (not counted), then the one operation inside MARKER."""
    if op.startswith("write"):
        rows, cols = shape(size_gib, tensors)
        base = synthetic_model.synthetic_base(tensors, rows, cols)
        new = synthetic_model.dense_variant(base)
        updates = {k: mdiff.dense(base[k], new[k]) for k in sorted(base)}
        del base, new
        run = lambda: mdiff.write(work / "out.mdiff", updates, synthetic_model.commit("bench"), op.split("-")[1])  # noqa: E731
    elif op.startswith("apply"):
        run = lambda: mdiff.apply_files(work / "base.safetensors", work / f"dense-{op.split('-')[1]}.mdiff",  # noqa: E731
                                        work / "out.safetensors")
    elif op == "read-one":
        def run():  # open the large gzip diff and read its middle parameter, 20 times
            for _ in range(20):
                with mdiff.open(work / "dense-gzip.mdiff") as d:
                    names = sorted(d)
                    d[names[len(names) // 2]].array("xor")
    else:
        run = lambda: mdiff.Repository.find(work / "chain").checkout("HEAD")  # noqa: E731

    def profiled_operation():
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    print(json.dumps({"seconds": profiled_operation()}))


_FRAME = re.compile(r"^(?P<name>.*?) \((?P<where>.*)\)$")


def short(frame: str) -> str:
    """'apply (/work/main/mdiff/updates/base.py:123)' → 'apply (mdiff/updates/base.py)'."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    where = re.sub(r":\d+$", "", m.group("where"))
    for cut in ("site-packages/", "/mdiff/", "lib/python3"):
        if cut in where:
            where = ("mdiff/" if cut == "/mdiff/" else "") + where.split(cut, 1)[1]
            break
    return f"{m.group('name')} ({where})"


# A leaf frame's category: the library or system call it is in.
_LEAF_KINDS = [
    ("libz", "zlib deflate/inflate (gzip filter)"), ("libcrypto", "sha256 (OpenSSL)"),
    ("fsync", "fsync"), ("pwrite", "write syscalls"), ("write (libc", "write syscalls"),
    ("pread", "read syscalls"), ("read (libc", "read syscalls"), ("H5Z__filter_shuffle", "HDF5 shuffle filter"),
    ("libhdf5", "HDF5, other"), ("_multiarray_umath", "numpy"), ("libc.so", "libc, other (memcpy, memset, …)"),
]


def leaf_kind(frame: str) -> str:
    for needle, kind in _LEAF_KINDS:
        if needle in frame:
            return kind
    if re.search(r"\.py:\d+\)$", frame) or "<frozen" in frame:
        return "Python code"
    if re.search(r"\.[ch]:\d+\)$", frame):
        return "CPython / extension C code"
    m = re.search(r"\(([^()]*)\)$", frame)
    return m.group(1) if m else frame


def summarise(raw: Path, top: int) -> dict:
    """Shares of the operation's samples: by Python function (inclusive) and by kind of leaf (native)."""
    python: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        hit = next((i for i, f in enumerate(frames) if f.split(" ", 1)[0].endswith(MARKER)), None)
        if hit is None:
            continue
        n = int(count)
        total += n
        inside = frames[hit + 1:]
        for frame in {short(f) for f in inside if ".py:" in f and "<lambda>" not in f}:
            python[frame] += n
        kinds[leaf_kind(inside[-1]) if inside else "Python code"] += n
    share = lambda counter, k: [(f, c / total) for f, c in counter.most_common(k)] if total else []  # noqa: E731
    return {"samples": total, "python": share(python, top), "leaves": share(kinds, top)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=1.0)
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--chain", type=int, default=10, help="sparse commits in the checked-out chain (default 10)")
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", type=Path, default=None, help="keep the raw stacks here")
    p.add_argument("--child", nargs=2, metavar=("OP", "WORKDIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.size_gib, args.tensors)
        return 0
    if shutil.which("py-spy") is None:
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="mdiff-profile-"))
    out = args.out or work
    out.mkdir(parents=True, exist_ok=True)
    try:
        print(f"preparing {args.size_gib:g} GiB ({args.tensors} tensors) and a chain of {args.chain} sparse commits "
              f"in {work} (load {measuring.loadavg()})", file=sys.stderr, flush=True)
        prepare(work, args.size_gib, args.tensors, args.chain)
        for op in args.ops.split(","):
            raw = out / f"{op}.txt"
            cmd = ["py-spy", "record", "--native", "--idle", "--rate", str(args.rate), "--format", "raw", "-o", str(raw),
                   "--", sys.executable, __file__, "--size-gib", str(args.size_gib), "--tensors", str(args.tensors),
                   "--child", op, str(work)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            seconds = json.loads([x for x in done.stdout.splitlines() if x.startswith("{")][-1])["seconds"]
            for leftover in ("out.mdiff", "out.safetensors"):
                (work / leftover).unlink(missing_ok=True)
            s = summarise(raw, args.top)
            print(f"\n=== {op}: {seconds:.2f} s, {s['samples']} samples (load {measuring.loadavg()})")
            print("  where the samples end (leaf frame, by library or system call)")
            for kind, share in s["leaves"]:
                print(f"    {share:6.1%}  {kind}")
            print("  Python functions, inclusive")
            for frame, share in s["python"]:
                print(f"    {share:6.1%}  {frame}")
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
