#!/usr/bin/env python3
"""A short end-to-end run of mdiff's file commands, without training (`mdiff demo` is the full tour).

Makes a small model checkpoint and a fine-tuned variant (a few dense changes, a
1% sparse change, a bfloat16 layer, an added and a removed parameter), then
runs the CLI: diff → dump → validate → apply, and proves the result is the
fine-tuned checkpoint bit for bit.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

from mdiff.checkpoints import save_checkpoint


def mdiff(*args) -> None:
    print(f"\n$ mdiff {' '.join(map(str, args))}", flush=True)
    subprocess.run([sys.executable, "-m", "mdiff.cli.main", *map(str, args)], check=True)


def main() -> int:
    rng = np.random.default_rng(0)
    base = {
        "embed.weight": rng.standard_normal((1000, 64)).astype(np.float32),
        "block.0.attn.weight": rng.standard_normal((64, 64)).astype(np.float32),
        "block.0.mlp.weight": rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16),
        "head.bias": np.zeros(10, np.float32),
        "old.buffer": np.arange(8, dtype=np.int64),
    }
    tuned = dict(base)
    tuned["block.0.attn.weight"] = base["block.0.attn.weight"] + rng.normal(0, 1e-3, (64, 64)).astype(np.float32)
    embed = base["embed.weight"].copy()
    rows = rng.choice(embed.size, embed.size // 100, replace=False)
    embed.reshape(-1)[rows] += np.float32(0.01)
    tuned["embed.weight"] = embed
    tuned["block.0.mlp.weight"] = (base["block.0.mlp.weight"].astype(np.float32) * 1.01).astype(ml_dtypes.bfloat16)
    del tuned["old.buffer"]
    tuned["head.scale"] = np.ones(10, np.float32)

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        save_checkpoint(d / "base.safetensors", base)
        save_checkpoint(d / "tuned.safetensors", tuned)
        mdiff("diff", d / "base.safetensors", d / "tuned.safetensors", "-o", d / "step1.mdiff",
              "-m", "fine-tune: 1% of the embedding, all of attention", "--author", "Example <example@mdiff.dev>",
              "--date", "2026-12-02T00:00:00Z", "--meta", "lr=1e-3")
        mdiff("dump", d / "step1.mdiff")
        mdiff("validate", d / "step1.mdiff")
        mdiff("apply", d / "base.safetensors", d / "step1.mdiff", "-o", d / "result.safetensors")
        digest = {p: hashlib.sha256((d / p).read_bytes()).hexdigest()[:16] for p in ("tuned.safetensors", "result.safetensors")}
        full = (d / "tuned.safetensors").stat().st_size
        diff_size = (d / "step1.mdiff").stat().st_size
        print(f"\nfull checkpoint {full:,} bytes; diff {diff_size:,} bytes ({diff_size / full:.1%})")
        print(f"sha256 tuned  {digest['tuned.safetensors']}…\nsha256 result {digest['result.safetensors']}…")
        if digest["tuned.safetensors"] != digest["result.safetensors"]:
            print("MISMATCH: apply did not reproduce the fine-tuned checkpoint", file=sys.stderr)
            return 1
        print("apply reproduced the fine-tuned checkpoint bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
