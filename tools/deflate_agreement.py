#!/usr/bin/env python3
"""Does zlib-ng's deflate give the bytes of stdlib zlib's, level 1 with strategy ``Z_RLE`` (SPEC.md §11)?

mdiff's writer deflates each shuffled chunk with zlib-ng where it is installed, because it is ~1.8× faster;
§11 asks for the bytes of zlib 1.x's level-1 ``Z_RLE`` deflate whatever encoder makes them. This tool
deflates a generated corpus of chunks of the kinds a writer meets — shuffled SUB (zigzag) and XOR deltas
of float32, bfloat16 and float16 values changed at many magnitudes, sparse changes, all zeros, constant
runs, random bytes, text-like bytes, at every size up to the 1 MiB chunk and at the sizes around deflate's
internal boundaries — with both encoders and reports every chunk whose bytes differ.

    python tools/deflate_agreement.py [--chunks 2000] [--seed 0] [--minutes M]

``--minutes`` keeps generating (seed after seed) until that time has passed: the long run. Exit status 1
when any chunk differs (each printed with its seed, index and kind, to be made again). tests/test_writer_
deflate.py runs a small corpus of the same generator in the suite.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Iterator

import numpy as np

CHUNK = 1 << 20  # the writer's chunk size (mdiff/format/writer.py)
# sizes where deflate's own structures turn over: its 32 KiB window, the 16 Ki-symbol block buffer
# (memLevel 8), the 258-byte longest match, the 64 KiB stored-block limit, and the smallest chunk written
_BOUNDARIES = (0, 1, 2, 3, 4, 257, 258, 259, 260, 4095, 4096, 4097, 16383, 16384, 16385, 32767, 32768, 32769,
               49149, 65535, 65536, 65537, 131072, 262144, 524288, CHUNK - 1, CHUNK)
KINDS = ("sub-f32", "sub-bf16", "sub-f16", "xor-f32", "sparse", "zeros", "runs", "random", "text", "repeat")


def _shuffled(data: np.ndarray, itemsize: int) -> bytes:
    """libhdf5's shuffle of whole elements: byte plane k of every element, one plane after another."""
    flat = data.reshape(-1).view(np.uint8)
    return flat.reshape(-1, itemsize).T.tobytes() if itemsize > 1 else flat.tobytes()


def _deltas(rng: np.random.Generator, n: int, dtype: str, scale: float, xor: bool) -> tuple[np.ndarray, int]:
    """Bit deltas of ``n`` values changed by ``scale``·randn (relative), as the writer stores them."""
    if dtype == "f32":
        old = rng.standard_normal(n).astype(np.float32) * np.float32(rng.choice([1e-3, 0.02, 1, 50]))
        new = (old + (old * scale * rng.standard_normal(n)).astype(np.float32)).astype(np.float32)
        a, b, width = old.view(np.uint32), new.view(np.uint32), 4
    else:  # 16-bit: float16, or bfloat16 as the top half of a float32
        old32 = rng.standard_normal(n).astype(np.float32)
        new32 = (old32 * (1 + scale * rng.standard_normal(n))).astype(np.float32)
        if dtype == "bf16":
            a, b = (old32.view(np.uint32) >> 16).astype(np.uint16), (new32.view(np.uint32) >> 16).astype(np.uint16)
        else:
            a, b = old32.astype(np.float16).view(np.uint16), new32.astype(np.float16).view(np.uint16)
        width = 2
    if xor:
        return a ^ b, width
    difference = (b - a).view(np.int32 if width == 4 else np.int16)
    zigzag = (difference << 1) ^ (difference >> (8 * width - 1))
    return zigzag.view(np.uint32 if width == 4 else np.uint16), width


def make_chunk(rng: np.random.Generator, kind: str, size: int) -> bytes:
    """One chunk of ``kind`` of ``size`` bytes (the stored chunk: shuffled where the kind has elements)."""
    scale = float(10.0 ** rng.uniform(-8, 0))
    if kind in ("sub-f32", "sub-bf16", "sub-f16", "xor-f32"):
        dtype = kind.split("-")[1]
        width = 4 if dtype == "f32" else 2
        delta, width = _deltas(rng, max(1, -(-size // width)), dtype, scale, kind.startswith("xor"))
        return _shuffled(delta, width)[:size] if size % width == 0 else delta.view(np.uint8).tobytes()[:size]
    if kind == "sparse":  # a few changed values among zeros (a sparse fine-tune's dense delta)
        out = np.zeros(size, np.uint8)
        hits = rng.integers(0, max(1, size), int(rng.integers(0, 1 + size // int(rng.choice([16, 256, 4096])))))
        out[hits[hits < size]] = rng.integers(1, 256, hits[hits < size].size, dtype=np.uint8)
        return _shuffled(out[:size // 4 * 4].view(np.uint32), 4) + out[size // 4 * 4:].tobytes()
    if kind == "zeros":
        return bytes(size)
    if kind == "runs":  # runs of random lengths of a few byte values (padding, masks, repeated planes)
        out = np.empty(size, np.uint8)
        at = 0
        while at < size:
            length = int(rng.geometric(1 / float(rng.choice([2, 30, 300, 3000]))))
            out[at:at + length] = rng.integers(0, 4) * 85
            at += length
        return out.tobytes()
    if kind == "random":
        return rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    if kind == "text":  # a skewed alphabet, as JSON or names in a files' update
        letters = np.frombuffer(b"eeeettaoinshrdlu ,.\n{}\"abc0123", np.uint8)
        return letters[rng.integers(0, letters.size, size)].tobytes()
    # repeat: a short pattern repeated (distance > 1 matches that Z_RLE must not take)
    pattern = rng.integers(0, 256, int(rng.integers(2, 40)), dtype=np.uint8).tobytes()
    return (pattern * (size // len(pattern) + 1))[:size]


def corpus(seed: int, count: int) -> Iterator[tuple[str, bytes]]:
    """``count`` chunks: every boundary size of every kind first (seed 0 only), then random kinds and sizes."""
    rng = np.random.default_rng(seed)
    made = 0
    if seed == 0:
        for size in _BOUNDARIES:
            for kind in KINDS:
                if made == count:
                    return
                made += 1
                yield f"{kind} {size}", make_chunk(rng, kind, size)
    while made < count:
        kind = KINDS[int(rng.integers(0, len(KINDS)))]
        size = int(rng.choice([rng.integers(0, 4097), rng.integers(0, 65537), rng.integers(0, CHUNK + 1), CHUNK]))
        made += 1
        yield f"{kind} {size}", make_chunk(rng, kind, size)


def stdlib_deflate(data: bytes) -> bytes:
    encoder = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
    return encoder.compress(data) + encoder.flush()


def zlib_ng_deflate(data: bytes) -> bytes:
    from zlib_ng import zlib_ng

    encoder = zlib_ng.compressobj(1, zlib_ng.DEFLATED, 15, 8, zlib_ng.Z_RLE)
    return encoder.compress(data) + encoder.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000, help="chunks per seed")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--minutes", type=float, default=0, help="keep going, seed after seed, this long")
    args = parser.parse_args(argv)
    from zlib_ng import zlib_ng

    print(f"stdlib zlib {zlib.ZLIB_RUNTIME_VERSION}, zlib-ng {zlib_ng.ZLIBNG_VERSION}", flush=True)
    end = time.monotonic() + 60 * args.minutes
    seed, chunks, nbytes, differ = args.seed, 0, 0, 0
    while True:
        for index, (kind, data) in enumerate(corpus(seed, args.chunks)):
            chunks, nbytes = chunks + 1, nbytes + len(data)
            if stdlib_deflate(data) != zlib_ng_deflate(data):
                differ += 1
                print(f"DIFFERENT: seed {seed} chunk {index} ({kind})", flush=True)
        print(f"seed {seed}: {chunks} chunks, {nbytes / 2**20:.0f} MiB so far, {differ} differ", flush=True)
        seed += 1
        if time.monotonic() >= end:
            break
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
