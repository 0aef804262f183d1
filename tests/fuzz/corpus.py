"""The fuzzer's seed corpus and the bases its files are applied to.

Seeds are deterministic: every hostile file of ``tests/invalid_files.py`` (one or more per rule)
and its valid edge cases, plus files written by :func:`mdiff.write` here — every update type,
every dtype, compressed (chunked, shuffle + deflate) and not, several parameters per file, and
an embedded update type (``tests/ia3.py``).

Bases are a function of a file's own metadata (:func:`base_for`): each parameter gets the array
:func:`synth` makes from its name, shape and dtype — exactly the base the generated seeds were
diffed against — or, where ``tests/invalid_files.base_state()`` holds a parameter of that name,
shape and dtype, that one. So an unmutated seed applies cleanly (its sha256 values verify), and a
mutated one still reaches the data path with a base of the shape and dtype it declares.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

import mdiff
from mdiff.format.dtypes import DTYPES, dtype_named

DATE = "2026-01-01T00:00:00Z"
COMMIT = mdiff.Commit("fuzz seed", author=mdiff.Author("Fuzz", "fuzz@example.org"), date=DATE,
                      writer_name="mdiff-fuzz", writer_version="1")
MAX_SYNTH_ELEMENTS = 1 << 20  # bigger declared parameters get no base (the apply is then MD600)
FLOATS = ("float16", "bfloat16", "float32", "float64")


def _invalid_files():
    from tests import invalid_files

    return invalid_files


def synth(name: str, shape, dtype_name: str) -> np.ndarray:
    """The deterministic base tensor of parameter ``name`` with this shape and dtype."""
    shape = tuple(int(d) for d in shape)
    dt = dtype_named(dtype_name)
    key = zlib.crc32(json.dumps([name, list(shape), dtype_name]).encode("utf-8", "surrogatepass"))
    rng = np.random.default_rng(key)
    n = int(np.prod(shape, dtype=object)) if shape else 1
    if dt.kind == "bool":
        return rng.integers(0, 2, size=n).astype(np.bool_).reshape(shape)
    if dt.kind in ("int", "uint"):
        info = np.iinfo(dt.value)
        return rng.integers(info.min, info.max, size=n, dtype=dt.value, endpoint=True).reshape(shape)
    return rng.standard_normal(size=n).astype(np.float32).astype(dt.value).reshape(shape)


def base_for(diff) -> dict[str, np.ndarray]:
    """A base for an open DiffFile: invalid_files' base state, plus a synthesized tensor for every
    parameter whose declared shape and dtype it lacks (when small enough)."""
    base = _invalid_files().base_state()
    for name in list(diff):
        update = diff[name]
        try:
            shape, dt = tuple(int(d) for d in update.shape), update.dtype
        except Exception:  # noqa: BLE001 — a base is a best effort; the targets report errors
            continue
        have = base.get(name)
        if have is not None and have.shape == shape and have.dtype == dt.value:
            continue
        n = 1
        for d in shape:
            n *= d
        if n <= MAX_SYNTH_ELEMENTS:
            try:
                base[name] = synth(name, shape, dt.name)
            except (ValueError, MemoryError):  # e.g. shape [0, 2**62]: no elements, but numpy cannot hold it
                pass
    return base


def _changed(old: np.ndarray, rng: np.random.Generator, fraction: float) -> np.ndarray:
    """A copy of ``old`` with about ``fraction`` of its elements given new bit patterns."""
    new = old.copy()
    if new.size == 0:
        return new
    flat = new.reshape(-1)
    bits = flat.view(np.dtype(f"<u{flat.itemsize}"))
    count = max(1, int(flat.size * fraction))
    idx = rng.choice(flat.size, size=min(count, flat.size), replace=False)
    if new.dtype == np.bool_:
        bits[idx] ^= 1
    else:
        bits[idx] ^= rng.integers(1, 255, size=idx.size).astype(bits.dtype)
    return new


SHAPES = [(), (5,), (3, 4), (2, 3, 4), (0, 3), (64, 40)]  # the last is over 4 KiB: chunked and compressed


def _generated() -> list[tuple[str, dict]]:
    """(seed name, {parameter: Update}) for the generated seeds."""
    out = []
    rng = np.random.default_rng(20260101)
    for t, dtypes in (("dense", DTYPES), ("sparse", DTYPES), ("replace", DTYPES)):
        for i, dtype_name in enumerate(dtypes):
            for shape in (SHAPES[i % 5], SHAPES[5]):
                name = f"{t}.{dtype_name}.{'x'.join(map(str, shape)) or 'scalar'}"
                old = synth(name, shape, dtype_name)
                new = _changed(old, rng, 0.05 if t == "sparse" else 0.5)
                if t == "dense":
                    update = mdiff.dense(old, new)
                elif t == "sparse":
                    update = mdiff.sparse(old, new)
                else:
                    update = mdiff.replace(synth(name + "/new", shape[::-1], dtype_name))
                out.append((f"gen_{t}_{dtype_name}_{len(shape)}d_{'big' if shape == SHAPES[5] else 'small'}", {name: update}))
    for dtype_name in FLOATS:
        for shape, r in (((6, 4), 2), ((3,), 1), ((2, 3, 4), 2), ((64, 48), 3)):
            name = f"low_rank.{dtype_name}.{'x'.join(map(str, shape))}"
            c = np.float64 if dtype_name == "float64" else np.float32
            m, n = shape[0], int(np.prod(shape[1:]))
            A = rng.standard_normal((m, r)).astype(c)
            B = rng.standard_normal((r, n)).astype(c)
            out.append((f"gen_low_rank_{dtype_name}_{len(shape)}d", {name: mdiff.low_rank(A, B, shape, dtype_named(dtype_name), scale=0.25)}))
    for dtype_name in ("bool", "int64", "bfloat16", "float32"):
        name = f"delete.{dtype_name}"
        out.append((f"gen_delete_{dtype_name}", {name: mdiff.delete(synth(name, (3, 2), dtype_name))}))
    # several parameters, every type, one file
    mixed = {}
    for t, dtype_name, shape in (("dense", "float32", (4, 4)), ("sparse", "int16", (10,)), ("replace", "uint8", (3,)),
                                 ("delete", "float64", (2,)), ("low_rank", "bfloat16", (4, 3)), ("dense", "bool", (7,)),
                                 ("sparse", "float16", (64, 40)), ("replace", "int64", ()), ("dense", "uint64", (2, 2))):
        name = f"m/{t}.{dtype_name}"
        old = synth(name, shape, dtype_name)
        if t == "dense":
            mixed[name] = mdiff.dense(old, _changed(old, rng, 0.5))
        elif t == "sparse":
            mixed[name] = mdiff.sparse(old, _changed(old, rng, 0.1))
        elif t == "replace":
            mixed[name] = mdiff.replace(_changed(old, rng, 0.5))
        elif t == "delete":
            mixed[name] = mdiff.delete(old)
        else:
            mixed[name] = mdiff.low_rank(rng.standard_normal((4, 1)).astype(np.float32), rng.standard_normal((1, 3)).astype(np.float32),
                                         shape, dtype_named(dtype_name), scale=2.0)
    out.append(("gen_mixed", mixed))
    out.append(("gen_escaped_names", {n: mdiff.replace(synth(n, (2,), "int8")) for n in ("a/b", ".x", "100% sure", "é\tz", "..")}))
    return out


def _embedded(path: Path) -> None:
    """An embedded update type (IA³ scaling), with a function for three dtypes and parameters using two."""
    from tests import ia3

    base = {"e.f32": synth("e.f32", (8, 6), "float32"), "e.bf16": synth("e.bf16", (4, 3), "bfloat16")}
    scales = {"e.f32": np.full((8, 1), 0.5, np.float32), "e.bf16": np.full((1, 3), 2.0, base["e.bf16"].dtype)}
    ia3.write(path, base, scales, COMMIT)


# Rule cases that crash libhdf5 itself when it reads them (the mutator reads its seeds and donors with
# h5py in the fuzzing process): the reference's walk refuses them before libhdf5 reads the damage (§8.1)
NOT_SEEDS = frozenset({"dense_attribute_index_of_another_type"})


def build_seeds(directory) -> list[dict]:
    """Write every seed into ``directory``; returns the manifest: [{name, path, limits}]."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    inv = _invalid_files()
    manifest = []
    for code, case_id, builder in inv.CASES:
        if case_id in NOT_SEEDS:
            continue
        name = f"inv_{code}_{case_id}"
        path = directory / f"{name}.mdiff"
        builder(path)
        manifest.append({"name": name, "path": str(path), "limits": inv.LIMITS.get(case_id)})
    for case_id, builder in inv.VALID_CASES:
        name = f"inv_{case_id}"
        path = directory / f"{name}.mdiff"
        builder(path)
        manifest.append({"name": name, "path": str(path), "limits": None})
    for i, (name, updates) in enumerate(_generated()):
        path = directory / f"{name}.mdiff"
        mdiff.write(path, updates, COMMIT, "gzip" if i % 3 else "none")
        manifest.append({"name": name, "path": str(path), "limits": None})
    path = directory / "gen_embedded_ia3.mdiff"
    _embedded(path)
    manifest.append({"name": "gen_embedded_ia3", "path": str(path), "limits": None})
    return manifest
