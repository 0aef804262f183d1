#!/usr/bin/env python3
"""Issue 27.4: a pytorch_model*.bin folder commits as fast as the same state in safetensors (standalone).

The same states are written twice, as transformers 4 and 5 save them: two `pytorch_model-0000k-of-00002.bin`
shards (`torch.save` of a plain dict each) with their index, and two `model-0000k-of-00002.safetensors` shards
with theirs, each beside a config.json; the state is N float32 tensors of 1024×1024 (MiB / 4 of them) and a
norm vector, then its successor (every value + 1e-3 of its scale). Each `mdiff commit` — the root commit of
the first state, then the second state on top — runs in a child process of its own (a fresh repository and
cache folder each round), its CPU time (user + system, its threads and children) measured, and so is the
`mdiff checkout HEAD` to a folder that follows (each folder in the format it was committed in, with this code;
the code before issue 27 wrote safetensors whatever it was given). The code of each ROOT given (a checkout of
mdiff: e.g. the commit before a change, unpacked with `git archive`) runs in turn, the rounds interleaved.
Medians are reported, with the `.bin` ÷ safetensors ratio.

    python tools/bench/bin_folders.py [--mib 200] [--repeat 3] [--work DIR] [ROOT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import measuring  # noqa: E402

DATE = "2026-01-01T00:00:00Z"


def write_folder(folder: Path, kind: str, mib: int, version: int) -> Path:
    """The state (``version`` 1) or its successor (2) as a sharded folder of ``kind`` ("bin" or "safetensors")."""
    import torch
    from safetensors.torch import save_file

    if folder.exists():
        return folder
    generator = torch.Generator().manual_seed(0)
    state = {f"model.layers.{i}.weight": torch.randn(1024, 1024, generator=generator) * 0.02
             for i in range(max(1, mib // 4))}
    state["model.norm.weight"] = torch.ones(1024)
    if version == 2:
        change = torch.Generator().manual_seed(1)
        state = {k: v + 1e-3 * 0.02 * torch.randn(v.shape, generator=change) for k, v in state.items()}
    names = list(state)
    halves = (names[: len(names) // 2], names[len(names) // 2:])
    prefix, suffix = ("pytorch_model", ".bin") if kind == "bin" else ("model", ".safetensors")
    folder.mkdir(parents=True)
    weight_map = {}
    for k, keys in enumerate(halves, 1):
        file = f"{prefix}-{k:05d}-of-00002{suffix}"
        part = {name: state[name].contiguous() for name in keys}
        if kind == "bin":
            torch.save(part, folder / file)
        else:
            save_file(part, folder / file, metadata={"format": "pt"})
        weight_map.update({name: file for name in keys})
    index = {"metadata": {"total_size": sum(t.numel() * 4 for t in state.values())}, "weight_map": weight_map}
    (folder / f"{prefix}{suffix}.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (folder / "config.json").write_text("{}\n")
    return folder


def child_cpu(root: str, argv: list[str], env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "mdiff", *argv], check=True, cwd=root, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="*", default=[str(ROOT)], metavar="ROOT", help="checkouts of mdiff to time (default: this one)")
    parser.add_argument("--mib", type=int, default=200, help="the state's size (default 200 MiB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default=None, help="where the folders and repositories go (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="mdiff-bin-bench-"))
    folders = {(kind, v): write_folder(work / f"{kind}-{v}", kind, args.mib, v) for kind in ("safetensors", "bin") for v in (1, 2)}
    times: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    print(f"load before: {measuring.loadavg()}")
    for _ in range(args.repeat):
        for root in args.roots:
            for kind in ("safetensors", "bin"):
                repo, cache = work / "repo", work / "cache"
                shutil.rmtree(repo, ignore_errors=True)
                shutil.rmtree(cache, ignore_errors=True)
                env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=root)
                subprocess.run([sys.executable, "-m", "mdiff", "init", str(repo)], check=True, cwd=root, env=env,
                               stdout=subprocess.DEVNULL)
                common = ["-C", str(repo), "-q", "--date", DATE, "--author", "bench <bench@example.com>"]
                first = child_cpu(root, ["commit", str(folders[kind, 1]), "-m", "first", *common], env)
                second = child_cpu(root, ["commit", str(folders[kind, 2]), "-m", "second", *common], env)
                out = work / "out"
                shutil.rmtree(out, ignore_errors=True)
                checkout = child_cpu(root, ["checkout", "HEAD", "-o", str(out), "-C", str(repo), "-q"], env)
                times.setdefault((root, kind), []).append((first, second, checkout))
    print(f"load after: {measuring.loadavg()}")
    print(f"{args.mib} MiB, {args.repeat} rounds; CPU s of `mdiff commit` and `mdiff checkout`, medians")
    for root in args.roots:
        for i, what in enumerate(("root commit", "second commit", "checkout")):
            st = measuring.median([t[i] for t in times[root, "safetensors"]])
            bn = measuring.median([t[i] for t in times[root, "bin"]])
            print(f"{root}  {what}: safetensors {st:.2f}, .bin {bn:.2f}, .bin ÷ safetensors {bn / st:.2f}×")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
