#!/usr/bin/env python3
"""Issue 32.5: mdiff at the scale of a 7B model, beside `zstd -3 -T0` and ZipNN on the same files (standalone).

A synthetic model of Llama-7B's shape (hidden 4096, intermediate 11008, 32 layers, vocabulary 32000; bf16,
6.74e9 values, 12.6 GiB) is written as `save_pretrained` writes it — safetensors shards of at most 5 GB with
their index and a config.json — one tensor at a time (never the model in memory), then its successor, every
value changed (base + 1e-3·randn, rounded to bf16). Each step runs in a child process whose CPU time, wall
time and peak resident memory (ru_maxrss) are reported:

  mdiff     init + commit the base folder; commit the successor; checkout HEAD to a folder; read one parameter
            lazily (`Repository.open_state(HEAD).read`)
  zstd      `zstd -3 -T0` of each successor shard; `zstd -d` of each
  ZipNN     each successor tensor delta-compressed against its base tensor, shard by shard; and restored

With --layers N the model has N layers (the same shapes otherwise): the largest shape a disk holds when it
cannot hold two states, a repository and a checkout at once (about 4.7× the model; each step's output is
removed once measured) — the report says which shape ran.

    python tools/bench/large_model.py [--layers 32] [--work DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import measuring  # noqa: E402

HIDDEN, INTERMEDIATE, VOCAB = 4096, 11008, 32000
SHARD_BYTES = 5 * 10**9  # save_pretrained's default max_shard_size, "5GB"


def tensor_specs(layers: int) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter of a Llama model of this size, in save_pretrained's order."""
    specs = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for i in range(layers):
        p = f"model.layers.{i}."
        specs += [(p + "self_attn.q_proj.weight", (HIDDEN, HIDDEN)), (p + "self_attn.k_proj.weight", (HIDDEN, HIDDEN)),
                  (p + "self_attn.v_proj.weight", (HIDDEN, HIDDEN)), (p + "self_attn.o_proj.weight", (HIDDEN, HIDDEN)),
                  (p + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN)), (p + "mlp.up_proj.weight", (INTERMEDIATE, HIDDEN)),
                  (p + "mlp.down_proj.weight", (HIDDEN, INTERMEDIATE)),
                  (p + "input_layernorm.weight", (HIDDEN,)), (p + "post_attention_layernorm.weight", (HIDDEN,))]
    return specs + [("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (VOCAB, HIDDEN))]


def write_model(folder: Path, layers: int, base: Path | None) -> int:
    """The model (``base`` None) or its successor (each tensor of ``base`` + 1e-3·randn) as bf16 shards of at
    most SHARD_BYTES with the index and a config, one tensor in memory at a time; returns its bytes."""
    import ml_dtypes
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file
    from transformers import LlamaConfig

    folder.mkdir(parents=True)
    LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=layers, vocab_size=VOCAB,
                num_attention_heads=32, num_key_value_heads=32).save_pretrained(folder)
    specs = tensor_specs(layers)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in specs:
        nbytes = 2 * int(np.prod(shape))
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    rng = np.random.default_rng(0 if base is None else 1)
    base_index = json.loads((base / "model.safetensors.index.json").read_text())["weight_map"] if base else {}
    weight_map, total = {}, 0
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name, shape in shard:
            if base is None:
                value = (rng.standard_normal(shape, np.float32) * np.float32(0.02)).astype(ml_dtypes.bfloat16)
            else:
                with safe_open(str(base / base_index[name]), "np") as f:
                    old = f.get_tensor(name).astype(np.float32)
                value = (old + np.float32(1e-3) * rng.standard_normal(shape, np.float32)).astype(ml_dtypes.bfloat16)
            tensors[name] = value
            weight_map[name] = file
            total += value.nbytes
        save_file(tensors, str(folder / file), metadata={"format": "pt"})
        del tensors
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                      "weight_map": weight_map}, indent=2))
    return total


def measured(argv: list[str], cwd: Path | None = None) -> dict:
    """A command's wall and CPU time (with its children) and peak resident memory."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if status:
        raise RuntimeError(f"{argv} failed:\n{stderr[-3000:]}")
    # the command's own peak (ru_maxrss: KiB on Linux); children reaped by it count in its CPU
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_rss": usage.ru_maxrss * 1024}


def python(code: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"]


ZIPNN = """
import json, sys, ml_dtypes, numpy as np, zipnn  # ml_dtypes: numpy then knows bfloat16
from pathlib import Path
from safetensors import safe_open
base, new, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
codec = zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16", delta_compressed_type="byte")
index = json.loads((new / "model.safetensors.index.json").read_text())["weight_map"]
out.mkdir(exist_ok=True)
for i, name in enumerate(sorted(index)):
    with safe_open(str(base / index[name]), "np") as f:
        old = f.get_tensor(name).view(np.uint16).tobytes()
    if mode == "compress":
        with safe_open(str(new / index[name]), "np") as f:
            data = f.get_tensor(name).view(np.uint16).tobytes()
        (out / f"{i}.znn").write_bytes(bytes(codec.compress(data, delta_second_data=old)))
    else:
        bytes(codec.decompress((out / f"{i}.znn").read_bytes(), delta_second_data=old))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32, help="decoder layers (32: Llama-7B)")
    parser.add_argument("--work", type=Path, default=None, help="a folder on a disk with ~5× the model free")
    parser.add_argument("--keep", action="store_true", help="keep the files (default: removed at the end)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--write", nargs=3, metavar=("LAYERS", "FOLDER", "BASE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write:
        write_model(Path(args.write[1]), int(args.write[0]), Path(args.write[2]) if args.write[2] else None)
        return 0

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    work = Path(tempfile.mkdtemp(prefix="mdiff-large-", dir=args.work))
    rows: dict[str, dict] = {}
    try:
        log(f"writing the base and its successor ({args.layers} layers)…")
        # in children: a child's peak RSS (ru_maxrss) starts at this process's size when it is forked
        for folder, base in (("base", None), ("new", work / "base")):
            subprocess.run([sys.executable, __file__, "--write", str(args.layers), str(work / folder),
                            str(base) if base else ""], check=True)
        model_bytes = json.loads((work / "new" / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
        os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")  # this checkout's mdiff
        mdiff, repo = [sys.executable, "-m", "mdiff"], str(work / "repo")
        read_one = python("from mdiff.repo import Repository; r = Repository(sys.argv[1]); "
                          "v = r.open_state(r.head()[1]).__enter__(); v.read(sys.argv[2])")
        steps = [  # (the row, a command; rows named twice add up)
            ("mdiff init + commit the base", [*mdiff, "init", repo]),
            ("mdiff init + commit the base", [*mdiff, "commit", "-q", "-C", repo, str(work / "base"), "-m", "base"]),
            ("mdiff commit the successor", [*mdiff, "commit", "-q", "-C", repo, str(work / "new"), "-m", "new"]),
            ("mdiff checkout HEAD to a folder", [*mdiff, "checkout", "-q", "-C", repo, "HEAD", "-o", str(work / "out")]),
            ("mdiff read one parameter lazily", [*read_one, repo, f"model.layers.{min(7, args.layers - 1)}.mlp.up_proj.weight"]),
        ]
        for label, command in steps:
            log(f"{label}…")
            figures = measured(command)
            shutil.rmtree(work / "out", ignore_errors=True)  # the checkout, once measured: the disk holds less
            before = rows.get(label)
            rows[label] = figures if before is None else {
                "wall": before["wall"] + figures["wall"], "cpu": before["cpu"] + figures["cpu"],
                "peak_rss": max(before["peak_rss"], figures["peak_rss"])}
        shards = sorted((work / "new").glob("model-*.safetensors"))
        (work / "zst").mkdir()
        log("zstd -3 -T0…")
        rows["zstd -3 -T0 of the successor's shards"] = measured(
            ["zstd", "-q", "-3", "-T0", "--output-dir-flat", str(work / "zst"), *map(str, shards)])
        log("zstd -d…")
        (work / "unzst").mkdir()
        rows["zstd -d of them"] = measured(["zstd", "-q", "-d", "-f", "--output-dir-flat", str(work / "unzst"),
                                            *map(str, sorted((work / "zst").glob("*.zst")))])
        shutil.rmtree(work / "unzst", ignore_errors=True)
        try:
            import zipnn  # noqa: F401
        except ImportError:
            log("ZipNN is not installed (tools/bench/requirements.txt): left out")
        else:
            log("ZipNN delta…")
            rows["ZipNN delta of each tensor against the base's"] = measured(
                [sys.executable, "-c", ZIPNN, str(work / "base"), str(work / "new"), str(work / "znn"), "compress"])
            rows["ZipNN restore of each"] = measured(
                [sys.executable, "-c", ZIPNN, str(work / "base"), str(work / "new"), str(work / "znn"), "restore"])
        sizes = {"repository": sum(p.stat().st_size for p in (work / "repo" / ".mdiff").rglob("*") if p.is_file()),
                 "zstd": sum(p.stat().st_size for p in (work / "zst").glob("*.zst"))}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = [f"{measuring.machine()}; load {measuring.loadavg()}; {args.layers} layers of Llama-7B's shape, bf16, "
            f"{model_bytes / (1 << 30):.2f} GiB in safetensors shards; repository {sizes['repository'] / 1e9:.2f} GB "
            f"after both commits, zstd of the successor {sizes['zstd'] / 1e9:.2f} GB", "",
            "| step | wall s | CPU s | peak RSS |", "|---|---|---|---|"]
    text += [f"| {label} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['peak_rss'] / (1 << 30):.2f} GiB |" for label, r in rows.items()]
    print("\n".join(text))
    if args.json:
        args.json.write_text(json.dumps({"layers": args.layers, "model_bytes": model_bytes, "sizes": sizes, "rows": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
