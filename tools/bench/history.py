#!/usr/bin/env python3
"""Issue 16's history rows: a 20-commit history of the MiniLM fine-tune, mdiff beside its peers in one run.

The fine-tune of tools/bench/minilm.py, step by step: the pretrained all-MiniLM-L6-v2 (float32) and the
state after each of 20 AdamW steps, each saved as a .safetensors file (what a training loop writes). Four
ways to keep those 21 versions, each run in turn on the same files:

  mdiff       Repository.commit of each file, default settings (its snapshot policy included)
  ZipNN       ZipNN 0.5.4's delta mode at its defaults (XOR with the previous version, byte grouping, Huffman), the
              first version compressed whole: a chain, as its delta mode is meant to be used
  zstd-3      each full file compressed with zstd level 3
  git-lfs     each full file stored as it is (a copy)

Every output file is fsynced, inside the timed region. Reported: bytes kept, total write time, and the
time to get back each version as a dict of numpy arrays — mdiff's Repository.checkout, ZipNN's chain
replayed from the first version, zstd-3's file decompressed and parsed — against loading its own
.safetensors file (safetensors.numpy.load_file), per version, interleaved. Targets: the history no larger
than ZipNN's chain (16.1), any revision's checkout ≤ 1.5× loading the full file (16.3).

    python tools/bench/history.py --work /tmp/history-bench [--steps 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import minilm  # noqa: E402  (tools/bench/minilm.py)

CHECKOUT_TARGET, SIZE_TARGET = 1.5, 1.0


def fsynced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def loadavg() -> float:
    return os.getloadavg()[0]


class Mdiff:
    name = "mdiff"

    def __init__(self, root: Path):
        from mdiff.repo import Repository

        self.root, self.ids = root, []
        self.repo = Repository.init(root)

    def write(self, version: int, checkpoint: Path) -> None:
        self.ids.append(self.repo.commit(checkpoint, f"step {version}"))

    def kept(self) -> int:
        return tree_bytes(self.root / ".mdiff")

    def read(self, version: int) -> dict:
        return self.repo.checkout(self.ids[version])


class ZipNNChain:
    name = "ZipNN delta chain"

    def __init__(self, root: Path):
        import zipnn

        root.mkdir()
        self.root, self.previous = root, None
        self.whole = zipnn.ZipNN(input_format="byte", bytearray_dtype="float32")
        self.delta = zipnn.ZipNN(input_format="byte", bytearray_dtype="float32",
                                 delta_compressed_type="byte")

    def write(self, version: int, checkpoint: Path) -> None:
        from safetensors.numpy import load_file

        state = load_file(str(checkpoint))
        blobs = {}
        for name in sorted(state):
            data = state[name].tobytes()
            if self.previous is None:
                blobs[name] = self.whole.compress(data)
            else:
                blobs[name] = self.delta.compress(data, delta_second_data=self.previous[name].tobytes())
        folder = self.root / f"v{version}"
        folder.mkdir()
        for i, name in enumerate(sorted(blobs)):
            fsynced(folder / f"{i}.znn", bytes(blobs[name]))
        (folder / "index.json").write_text(json.dumps({name: [list(state[name].shape), i]
                                                       for i, name in enumerate(sorted(state))}))
        self.previous = state

    def kept(self) -> int:
        return tree_bytes(self.root)

    def read(self, version: int) -> dict:
        index = json.loads((self.root / "v0" / "index.json").read_text())
        state = {}
        for name, (shape, i) in index.items():
            value = bytes(self.whole.decompress((self.root / "v0" / f"{i}.znn").read_bytes()))
            for v in range(1, version + 1):
                value = bytes(self.delta.decompress((self.root / f"v{v}" / f"{i}.znn").read_bytes(),
                                                    delta_second_data=value))
            state[name] = np.frombuffer(value, dtype=np.float32).reshape(shape)
        return state


class Zstd3:
    name = "zstd-3 of each file"

    def __init__(self, root: Path):
        import zstandard

        root.mkdir()
        self.root = root
        self.compressor, self.decompressor = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()

    def write(self, version: int, checkpoint: Path) -> None:
        fsynced(self.root / f"v{version}.safetensors.zst", self.compressor.compress(checkpoint.read_bytes()))

    def kept(self) -> int:
        return tree_bytes(self.root)

    def read(self, version: int) -> dict:
        from safetensors.numpy import load

        return load(self.decompressor.decompress((self.root / f"v{version}.safetensors.zst").read_bytes()))


class Copies:
    name = "git-lfs (a copy of each file)"

    def __init__(self, root: Path):
        root.mkdir()
        self.root = root

    def write(self, version: int, checkpoint: Path) -> None:
        target = self.root / f"v{version}.safetensors"
        shutil.copyfile(checkpoint, target)
        with open(target, "rb+") as f:
            os.fsync(f.fileno())

    def kept(self) -> int:
        return tree_bytes(self.root)

    def read(self, version: int) -> dict:
        from safetensors.numpy import load_file

        return load_file(str(self.root / f"v{version}.safetensors"))


CONTENDERS = (Mdiff, ZipNNChain, Zstd3, Copies)


def checkpoints(work: Path, steps: int, log) -> tuple[list[Path], list[float]]:
    """The fine-tune's versions as .safetensors files (made once, kept in ``work``)."""
    from safetensors.numpy import save_file

    folder = work / "checkpoints"
    paths = [folder / f"v{v}.safetensors" for v in range(steps + 1)]
    done = folder / "losses.json"
    if done.exists() and all(p.exists() for p in paths):
        return paths, json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    losses = []
    for version, (loss, tensors) in enumerate(minilm.trajectory(steps)):
        save_file(minilm.numpy_state(tensors), str(paths[version]))
        if loss is not None:
            losses.append(loss)
        log(f"checkpoint {version}: {paths[version].stat().st_size:,} bytes")
    done.write_text(json.dumps(losses))
    return paths, losses


def same(a: dict, b: dict) -> bool:
    return sorted(a) == sorted(b) and all(np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def run(work: Path, steps: int, log) -> dict:
    from safetensors.numpy import load_file

    paths, losses = checkpoints(work, steps, log)
    result: dict = {"versions": len(paths), "checkpoint_bytes": paths[0].stat().st_size, "losses": losses,
                    "contenders": {}, "load": []}
    stores = []
    for kind in CONTENDERS:  # each writes the whole history in turn (a training run commits as it goes)
        root = work / kind.__name__.lower()
        shutil.rmtree(root, ignore_errors=True)
        gc.collect()
        result["load"].append(loadavg())
        store = kind(root)
        started, cpu = time.perf_counter(), time.process_time()
        per_version = []
        for version, path in enumerate(paths):
            t = time.perf_counter()
            store.write(version, path)
            per_version.append(time.perf_counter() - t)
        entry = {"write_s": time.perf_counter() - started, "write_cpu_s": time.process_time() - cpu,
                 "write_per_version_s": per_version, "bytes": store.kept()}
        result["contenders"][store.name] = entry
        stores.append(store)
        log(f"{store.name}: wrote {len(paths)} versions in {entry['write_s']:.1f} s, {entry['bytes']:,} bytes")
    # reads, interleaved per version: the full file's load, then each contender's checkout of that version
    loads = []
    for version, path in enumerate(paths):
        gc.collect()
        t = time.perf_counter()
        truth = load_file(str(path))
        loads.append(time.perf_counter() - t)
        for store in stores:
            gc.collect()
            t, cpu = time.perf_counter(), time.process_time()
            state = store.read(version)
            elapsed, elapsed_cpu = time.perf_counter() - t, time.process_time() - cpu
            if not same(state, truth):
                raise SystemExit(f"{store.name} gave back another version {version}")
            result["contenders"][store.name].setdefault("read_s", []).append(elapsed)
            result["contenders"][store.name].setdefault("read_cpu_s", []).append(elapsed_cpu)
            del state
        log(f"version {version}: load {loads[-1]:.2f} s, " + ", ".join(
            f"{s.name} {result['contenders'][s.name]['read_s'][-1]:.2f} s" for s in stores))
        del truth
    result["load_file_s"] = loads
    result["load"].append(loadavg())
    return result


def report(r: dict) -> str:
    c = r["contenders"]
    m, z = c["mdiff"], c["ZipNN delta chain"]
    loads = r["load_file_s"]
    ratios = [a / b for a, b in zip(m["read_s"], loads, strict=True)]
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    size_ratio = m["bytes"] / z["bytes"]
    lines = [
        f"The MiniLM fine-tune (tools/bench/minilm.py), {r['versions']} versions (the pretrained model and 20 AdamW "
        f"steps), each a {r['checkpoint_bytes'] / 1e6:.1f} MB .safetensors file; each contender keeps all of them, "
        f"in turn, every file fsynced. Load average {min(r['load']):.1f}–{max(r['load']):.1f}.",
        "",
        "| how | bytes kept | ÷ ZipNN chain | write, all versions | read a version back: median (max) | "
        "read: median CPU | ÷ loading its file: median (max) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in c.items():
        rs = [a / b for a, b in zip(e["read_s"], loads, strict=True)]
        lines.append(f"| {name} | {e['bytes'] / 1e6:.1f} MB | {e['bytes'] / z['bytes']:.3f}× | {e['write_s']:.1f} s "
                     f"(CPU {e['write_cpu_s']:.1f} s) | {statistics.median(e['read_s']):.2f} s "
                     f"({max(e['read_s']):.2f} s) | {statistics.median(e['read_cpu_s']):.2f} s | "
                     f"{statistics.median(rs):.2f}× ({max(rs):.2f}×) |")
    lines += [
        f"| loading a version's own .safetensors file | — | — | — | {statistics.median(loads):.2f} s "
        f"({max(loads):.2f} s) | — | 1 |",
        "",
        "| target | measured | threshold | status |",
        "|---|---|---|---|",
        f"| the 20-commit history, snapshots included, no larger than ZipNN's chain (16.1) | {size_ratio:.3f}× | "
        f"≤ {SIZE_TARGET}× | {'met' if size_ratio <= SIZE_TARGET else '**missed**'} |",
        f"| checkout of any revision ≤ 1.5× loading the full file (16.3) | worst {max(ratios):.2f}× (version "
        f"{worst}), median {statistics.median(ratios):.2f}× | ≤ {CHECKOUT_TARGET}× | "
        f"{'met' if max(ratios) <= CHECKOUT_TARGET else '**missed**'} |",
    ]
    zstd = c.get("zstd-3 of each file")
    if zstd is not None:  # issue 32's: the write against ZipNN's chain, a median checkout against zstd-3's
        median = statistics.median
        lines += [
            f"| write ≤ 1.0× ZipNN's chain (issue 32) | {m['write_s'] / z['write_s']:.2f}× (CPU "
            f"{m['write_cpu_s'] / z['write_cpu_s']:.2f}×) | ≤ 1.0× | "
            f"{'met' if m['write_cpu_s'] <= z['write_cpu_s'] else '**missed**'} (by CPU) |",
            f"| checkout median ≤ 2× zstd-3 of the whole file (issue 32) | {median(m['read_s']) / median(zstd['read_s']):.2f}× "
            f"(CPU {median(m['read_cpu_s']) / median(zstd['read_cpu_s']):.2f}×) | ≤ 2.0× | "
            f"{'met' if median(m['read_cpu_s']) <= 2 * median(zstd['read_cpu_s']) else '**missed**'} (by CPU) |",
        ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", required=True, help="scratch folder (the checkpoints are kept there between runs)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json", help="every figure as JSON")
    args = p.parse_args(argv)
    why = minilm.unavailable()
    if why:
        print(f"history.py: {why}", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} load {loadavg():.1f}] {message}", file=sys.stderr, flush=True)

    result = run(Path(args.work), args.steps, log)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
