#!/usr/bin/env python3
"""Issue 16's targets 1 (size at the floor) and 2 (speed at disk speed) for mdiff's default codec.

Sizes, on the bench's MiniLM fine-tune (tools/bench/minilm.py, as tools/bench/codec_study.py loads
it: float32, both states cast to bfloat16, and the float32 pair kept on a seeded 1 % of the
values): the file `write_diff` writes with default settings (version-2 dense/sparse updates, run-
length deflate) against the per-tensor floor measured in the same run (codec_floor.floors: each
byte plane of the XOR — and of the SUB — delta compressed alone with the best of lzma-9e and zstd-19),
beside version 1 with the same encoder and the previous default (version 1, zlib level 1).

Speed, each contender in turn, rotated every repetition, with wall time and CPU time (all threads):
  write   write_diff of a synthetic fp32 model (default settings; always fsynced) vs
          safetensors.torch.save_file of the new state + fsync            (target ≤ 1.5×)
  apply   mdiff.apply_files of that diff vs load base and delta with safetensors, numpy add, save
                                                                            (target ≤ 1.0×)
  commit  Repository.commit of the MiniLM fp32 fine-tune on top of a root commit of the base vs
          zstd-3 of the new state's .safetensors file, written + fsynced   (target ≤ 1.5×)

    python tools/bench/codec_targets.py --cache /tmp/minilm.npz --size-gib 0.25 --repeat 3

The floor is the long pole of a first run (~8 CPU minutes; cached beside --cache as FILE.floor.json).
The report goes between its markers in docs/benchmarks.md (run.py keeps the section when it rewrites
the file). On a shared machine, quote ratios and CPU times; wall times move with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import mdiff  # noqa: E402
from mdiff.diffing import write_diff  # noqa: E402
from mdiff.format import writer as writer_module  # noqa: E402

import codec_floor  # noqa: E402  (the MiniLM states and their floor)
import contenders  # noqa: E402  (the apply baseline)
import measuring  # noqa: E402
import report_sections  # noqa: E402
import synthetic_model  # noqa: E402
from measuring import median, timed  # noqa: E402

SECTION_BEGIN, SECTION_END = report_sections.CODEC_TARGETS
DATE = "2026-01-01T00:00:00Z"
VARIANTS = ("fp32", "bf16", "fp32, 1% of values")
SIZE_TARGET = 1.05  # × the XOR floor (issue 16.1)
WRITE_TARGET, APPLY_TARGET, COMMIT_TARGET = 1.5, 1.0, 1.5  # issue 16.2


def float_state(rows) -> dict:
    """codec_study's bit views as the arrays a user has (float32 or bfloat16)."""
    return {name: bits.view(np.float32 if bits.itemsize == 4 else ml_dtypes.bfloat16) for name, bits in rows}


def write_sizes(states: dict, work: Path, log) -> dict:
    """Bytes of the file each setting writes, per variant."""
    settings = {
        "default (v2, Z_RLE)": (2, writer_module.deflate_rle),
        "v1, Z_RLE": (1, writer_module.deflate_rle),
        "previous default (v1, zlib-1)": (1, lambda data: zlib.compress(data, 1)),
    }
    out: dict = {}
    original = writer_module.deflate_rle
    try:
        for variant in VARIANTS:
            old = float_state((n, o) for n, o, _ in states[variant])
            new = float_state((n, nw) for n, _, nw in states[variant])
            out[variant] = {}
            for label, (version, encoder) in settings.items():
                writer_module.deflate_rle = encoder
                path = work / "size.mdiff"
                summary = write_diff(old, new, path, mdiff.Commit("size", date=DATE), update_version=version)
                types: dict = {}
                for kind in summary.parameters.values():
                    types[kind] = types.get(kind, 0) + 1
                out[variant][label] = {"bytes": path.stat().st_size, "types": types}
                path.unlink()
            log(f"  sizes {variant}: " + ", ".join(f"{k} {v['bytes']:,}" for k, v in out[variant].items()))
    finally:
        writer_module.deflate_rle = original
    return out


def speed(states: dict, args, work: Path, log) -> dict:
    from safetensors.numpy import save_file as np_save
    from safetensors.torch import save_file as torch_save
    import zstandard

    tensors = max(1, round(args.size_gib * (1 << 30) / (4096 * 1024 * 4)))
    base = synthetic_model.synthetic_base(tensors, 4096, 1024)
    new = synthetic_model.dense_variant(base)
    model_bytes = synthetic_model.nbytes(new)
    base_path, delta_path = work / "base.safetensors", work / "delta.safetensors"
    np_save(base, base_path)
    np_save({k: new[k] - base[k] for k in base}, delta_path)
    diff_path = work / "dense.mdiff"
    write_diff(base, new, diff_path, mdiff.Commit("dense", date=DATE))
    torch_new = synthetic_model.to_torch(new)
    mini_old = float_state((n, o) for n, o, _ in states["fp32"])
    mini_new = float_state((n, nw) for n, _, nw in states["fp32"])
    mini_path = work / "minilm.safetensors"
    np_save(mini_new, mini_path)
    repo_dir = work / "repo"
    rec: dict = {"write": {}, "apply": {}, "commit": {}}
    out, st_out, zst = work / "w.mdiff", work / "w.safetensors", work / "w.zst"

    def mdiff_write():
        measuring.prime(int(1.25 * model_bytes))
        timed(rec["write"], "write_diff (default settings, fsynced)",
              lambda: write_diff(base, new, out, mdiff.Commit("w", date=DATE)))
        out.unlink()

    def torch_write():
        measuring.prime(int(1.25 * model_bytes))
        timed(rec["write"], "safetensors.torch.save_file + fsync",
              lambda: (torch_save(torch_new, st_out), measuring.fsync_file(st_out)))
        st_out.unlink()

    def mdiff_apply():
        measuring.prime(int(1.25 * model_bytes))
        timed(rec["apply"], "mdiff.apply_files (default)", lambda: mdiff.apply_files(base_path, diff_path, st_out))
        st_out.unlink()

    def baseline_apply():
        measuring.prime(int(3.25 * model_bytes))
        timed(rec["apply"], "baseline: safetensors load ×2, numpy add, save",
              lambda: contenders.baseline_apply(base_path, delta_path, st_out))
        timed(rec["apply"], "fsync of the baseline's output", lambda: measuring.fsync_file(st_out))
        st_out.unlink()

    def mdiff_commit():
        shutil.rmtree(repo_dir, ignore_errors=True)
        repo = mdiff.Repository.init(repo_dir)
        repo.commit(mini_old, "root", date=DATE)  # untimed: the parent a commit is made on
        timed(rec["commit"], "Repository.commit of the MiniLM fine-tune", lambda: repo.commit(mini_new, "step", date=DATE))

    def zstd_commit():
        def run():
            data = zstandard.ZstdCompressor(level=3).compress(mini_path.read_bytes())
            zst.write_bytes(data)
            measuring.fsync_file(zst)
        timed(rec["commit"], "zstd-3 of the full .safetensors, written + fsynced", run)
        zst.unlink()

    groups = [[mdiff_write, torch_write], [mdiff_apply, baseline_apply], [mdiff_commit, zstd_commit]]
    loads = []
    for rep in range(args.repeat):
        for group in groups:
            turn = rep % len(group)
            for fn in group[turn:] + group[:turn]:
                fn()
        loads.append(measuring.loadavg())
        log(f"  speed: repetition {rep + 1}/{args.repeat}, load {loads[-1]}")
    for key, label in (("apply", "baseline: safetensors load ×2, numpy add, save"),):
        fs = rec[key].pop("fsync of the baseline's output")
        rec[key]["baseline + fsync"] = {k: [a + b for a, b in zip(rec[key][label][k], fs[k])] for k in ("wall", "cpu")}
    return {"records": rec, "loads": loads, "tensors": tensors, "model_bytes": model_bytes,
            "diff_bytes": diff_path.stat().st_size, "minilm_bytes": mini_path.stat().st_size}


def ratio_row(target: str, measured: float, threshold: float, how: str) -> str:
    status = "met" if measured <= threshold else "**missed**"
    return f"| {target} | {measured:.3g}× | ≤ {threshold}× | {status} ({measured / threshold:.2f} of the allowance) | {how} |"


def report(r: dict) -> str:
    floors = r["floors"]
    sizes = r["sizes"]
    params = r["parameters"]
    rows = ["## Default codec: issue 16 targets 1 and 2 (`tools/bench/codec_targets.py`)", "",
            f"Measured {r['date']} by `{r['command']}` in {r['seconds']:.0f} s, on {r['machine']}; {r['versions']}. "
            f"Load average (1, 5, 15 min): {r['load_start']} at start, per speed repetition "
            f"{'; '.join(r['speed']['loads'])}. Data: {r['source']}; {params:,} parameters.", "",
            "### Targets", "", "| target | measured | threshold | status | how |", "|---|---|---|---|---|"]
    default = "default (v2, Z_RLE)"
    for variant, label in (("fp32", "MiniLM fp32"), ("bf16", "MiniLM bf16")):
        rows.append(ratio_row(f"{label} ≤ {SIZE_TARGET}× the XOR floor", sizes[variant][default]["bytes"] / floors[variant]["xor"],
                              SIZE_TARGET, "default file bytes ÷ per-tensor floor of the XOR delta (same run)"))
    sparse_now = sizes["fp32, 1% of values"][default]["bytes"]
    sparse_before = sizes["fp32, 1% of values"]["previous default (v1, zlib-1)"]["bytes"]
    rows.append(ratio_row("MiniLM 1 % of values no larger than the previous default", sparse_now / sparse_before, 1.0,
                          "default file bytes ÷ the file of version 1 + zlib-1 (today's default before this change)"))
    spd = r["speed"]["records"]

    def ratio(group, a, b, key="wall"):
        return median(spd[group][a][key]) / median(spd[group][b][key])
    w = ("write", "write_diff (default settings, fsynced)", "safetensors.torch.save_file + fsync")
    a = ("apply", "mdiff.apply_files (default)", "baseline: safetensors load ×2, numpy add, save")
    c = ("commit", "Repository.commit of the MiniLM fine-tune", "zstd-3 of the full .safetensors, written + fsynced")
    gib = r["speed"]["model_bytes"] / (1 << 30)
    rows.append(ratio_row(f"write a dense fp32 diff of {gib:.2f} GiB ≤ {WRITE_TARGET}× safetensors.torch.save_file + fsync",
                          ratio(*w), WRITE_TARGET, f"wall-time ratio (CPU-time ratio {ratio(*w, key='cpu'):.3g}×)"))
    rows.append(ratio_row(f"apply that diff ≤ {APPLY_TARGET}× the baseline", ratio(*a), APPLY_TARGET,
                          f"wall-time ratio, the baseline without fsync (with: {ratio('apply', a[1], 'baseline + fsync'):.3g}×; "
                          f"CPU-time ratio {ratio(*a, key='cpu'):.3g}×)"))
    rows.append(ratio_row(f"commit of the MiniLM fine-tune ≤ {COMMIT_TARGET}× zstd-3 of the full checkpoint", ratio(*c),
                          COMMIT_TARGET, f"wall-time ratio (CPU-time ratio {ratio(*c, key='cpu'):.3g}×)"))
    rows += ["", "\"of the allowance\": measured ÷ threshold; ≤ 1 is met.", "",
             "### Sizes against the floor", "",
             "Floor: per tensor, each byte plane of the delta compressed alone with the best of lzma-9e and zstd-19 "
             "(never above raw), summed (`codec_floor.floors`).", "",
             "| | fp32 | bf16 | fp32, 1 % of values |", "|---|---|---|---|"]

    def cell(n, variant):
        parts = [f"{n / 1e6:.2f} MB ({n / params:.3f} B/param)", f"{n / floors[variant]['xor']:.3f}× XOR floor"]
        if "sub" in floors[variant]:
            parts.append(f"{n / floors[variant]['sub']:.3f}× SUB floor")
        return ", ".join(parts)
    rows.append("| floor, XOR | " + " | ".join(f"{floors[v]['xor'] / 1e6:.2f} MB" for v in VARIANTS) + " |")
    rows.append("| floor, SUB | " + " | ".join(f"{floors[v]['sub'] / 1e6:.2f} MB" if "sub" in floors[v] else "—"
                                              for v in VARIANTS) + " |")
    for label in sizes["fp32"]:
        rows.append(f"| {label} | " + " | ".join(cell(sizes[v][label]["bytes"], v) for v in VARIANTS) + " |")
    rows.append("")
    rows.append("Update types written by default: " + "; ".join(
        f"{v}: {sizes[v][default]['types']}" for v in VARIANTS) + ".")
    rows += ["", "### Speed", "",
             f"Synthetic model: {r['speed']['tensors']} float32 tensors of 4096×1024 ({gib:.2f} GiB), weights "
             f"N(0, 0.02²), every value changed by N(0, (2e-05)²) (tools/bench/run.py's dense variant); its default diff "
             f"{r['speed']['diff_bytes'] / 1e6:.1f} MB. MiniLM checkpoint {r['speed']['minilm_bytes'] / 1e6:.1f} MB. "
             f"{r['repeat']} repetitions, contenders rotated; medians (min–max); CPU = user + sys of every thread.", "",
             "| group | how | wall | CPU |", "|---|---|---|---|"]
    for group, entries in spd.items():
        for label, v in entries.items():
            rows.append(f"| {group} | {label} | {median(v['wall']):.3g} s ({min(v['wall']):.3g}–{max(v['wall']):.3g}) | "
                        f"{median(v['cpu']):.3g} s |")
    return "\n".join(rows) + "\n"


def write_section(doc: Path, text: str) -> None:
    block = f"{SECTION_BEGIN}\n{text}{SECTION_END}\n"
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if SECTION_BEGIN in old and SECTION_END in old:
        head, rest = old.split(SECTION_BEGIN, 1)
        tail = rest.split(SECTION_END, 1)[1].lstrip("\n")
        doc.write_text(head + block + ("\n" + tail if tail else ""), encoding="utf-8")
    else:
        doc.write_text(old.rstrip("\n") + "\n\n" + block, encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", help="npz of the fine-tuned states (codec_study.py's): loaded, or saved there")
    p.add_argument("--floor-cache", help="JSON of floor results (default: beside --cache)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--jobs", type=int, default=2, help="worker processes for the floor")
    p.add_argument("--size-gib", type=float, default=0.25, help="synthetic model of the write/apply rows")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"), help="report to update ('' for none)")
    p.add_argument("--json", help="every figure as JSON")
    args = p.parse_args(argv)
    t0 = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s, load {measuring.loadavg()}] {message}", flush=True)

    r: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": measuring.loadavg(),
               "command": "python tools/bench/codec_targets.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "machine": measuring.machine(), "versions": measuring.versions(), "repeat": args.repeat}
    states, meta = codec_floor.load_states(argparse.Namespace(cache=args.cache, steps=args.steps), log)
    r["source"] = meta["source"]
    r["parameters"] = int(sum(o.size for _, o, _ in states["fp32"]))
    floor_cache = Path(args.floor_cache) if args.floor_cache else (Path(args.cache).with_suffix(".floor.json") if args.cache else None)
    found = codec_floor.floors(states, args.jobs, log, floor_cache)
    r["floors"] = {v: {kind: found["by"][(v, kind)]["floor"] for kind in codec_floor.floor_kinds(v)} for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="codec-targets-") as tmp:
        work = Path(tmp)
        log("sizes")
        r["sizes"] = write_sizes(states, work, log)
        log("speed")
        r["speed"] = speed(states, args, work, log)
    r["seconds"] = time.perf_counter() - t0
    text = report(r)
    print(text)
    if args.doc:
        write_section(Path(args.doc), text)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
