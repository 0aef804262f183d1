"""Comparing an implementation's result with the expected one: bit for bit, except low_rank
parameters, which must lie within SPEC.md §7.5's bound (precomputed per element in the case's
bounds file: a float64 tensor [*shape, 2] of lower and upper ends; NaN, NaN means "a NaN")."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from mdiff.checkpoints import load_checkpoint
from mdiff.format.dtypes import dtype_of

MAX_PROBLEMS = 5


def read_state(path: str | Path) -> dict[str, np.ndarray]:
    """A checkpoint, read with the reference's fail-closed reader (CheckpointError if malformed)."""
    return load_checkpoint(path)


def within_bounds(y: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Element-wise: y lies in [lower, upper] (exactly, in binary64), or is NaN where both are NaN."""
    with np.errstate(invalid="ignore"):
        v = np.asarray(y).astype(np.float64)
    lo, hi = bounds[..., 0], bounds[..., 1]
    return np.where(np.isnan(lo), np.isnan(v), (lo <= v) & (v <= hi))


def _describe(name: str) -> str:
    return repr(name)


def compare_states(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
                   bounds: Mapping[str, np.ndarray] | None = None) -> list[str]:
    """Every way ``got`` differs from ``expected`` (at most a few); empty when they agree."""
    bounds = bounds or {}
    problems: list[str] = []
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing:
        problems.append(f"missing parameters: {', '.join(map(_describe, missing[:5]))}")
    if extra:
        problems.append(f"unexpected parameters: {', '.join(map(_describe, extra[:5]))}")
    for name in sorted(set(got) & set(expected)):
        if len(problems) >= MAX_PROBLEMS:
            break
        g, e = got[name], expected[name]
        gd, ed = dtype_of(g).name, dtype_of(e).name
        if gd != ed or g.shape != e.shape:
            problems.append(f"{_describe(name)}: {gd}{list(g.shape)}, expected {ed}{list(e.shape)}")
            continue
        if name in bounds:
            ok = within_bounds(g, bounds[name])
            if not ok.all():
                i = np.unravel_index(int(np.argmin(ok)), ok.shape)
                lo, hi = bounds[name][i]
                problems.append(f"{_describe(name)}: {int((~ok).sum())} elements outside SPEC.md §7.5's bound; at "
                                f"{list(map(int, i))}: {g[i]!r}, allowed [{lo!r}, {hi!r}]")
            continue
        gb, eb = np.ascontiguousarray(g).tobytes(), np.ascontiguousarray(e).tobytes()
        if gb != eb:
            gbits = np.frombuffer(gb, np.dtype(f"<u{g.itemsize}"))
            ebits = np.frombuffer(eb, np.dtype(f"<u{g.itemsize}"))
            diff = np.flatnonzero(gbits != ebits)
            k = int(diff[0])
            problems.append(f"{_describe(name)}: {len(diff)} elements differ bit for bit; first at flat index {k}: "
                            f"bits {int(gbits[k]):#x}, expected {int(ebits[k]):#x}")
    return problems


def compare_files(got: Path, expected: Path, bounds: Path | None = None) -> list[str]:
    try:
        got_state = read_state(got)
    except Exception as exc:  # anything the output makes the reader do is the output's fault
        return [f"the output is not a readable .safetensors checkpoint: {exc}"]
    return compare_states(got_state, read_state(expected), read_state(bounds) if bounds else None)
