"""The synthetic model the benches measure: seeded float32 weights and the fine-tunes made of them
(dense, sparse, low-rank), as numpy or torch state dicts, and the commit they are stored under.

Import it after the repository root is on sys.path (every bench puts it there first): it imports mdiff.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import mdiff
from mdiff.format.dtypes import DTYPES

GIB = 1 << 30
DATE = "2026-01-01T00:00:00Z"  # commit dates: the files are the same run to run
WEIGHT_STD = 0.02  # the synthetic weights are N(0, 0.02²), like an initialised transformer's
CHANGE = 1e-3  # a fine-tune's change, relative to WEIGHT_STD
RANK = 16
DENSITY = 0.01  # sparse variant and every commit of the sparse chain: 1% of the entries


def commit(message: str, parents: tuple[str, ...] = ()) -> mdiff.Commit:
    return mdiff.Commit(message, mdiff.Author("bench"), date=DATE, parents=parents)


def nbytes(state: dict) -> int:
    return sum(a.nbytes for a in state.values())


def to_torch(state: dict) -> dict:
    import torch

    out = {}
    for k, a in state.items():
        if a.dtype == ml_dtypes.bfloat16:
            out[k] = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        else:
            out[k] = torch.from_numpy(a)
    return out


def as_plain(state: dict) -> dict:
    """bfloat16 arrays as uint16 (same bytes) for writers that know no bfloat16."""
    return {k: a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a for k, a in state.items()}


def synthetic_base(tensors: int, rows: int, cols: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = {}
    for i in range(tensors):
        a = rng.standard_normal((rows, cols), dtype=np.float32)
        a *= np.float32(WEIGHT_STD)
        state[f"layers.{i:03d}.weight"] = a
    return state


def dense_variant(base: dict, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for k, a in base.items():
        noise = rng.standard_normal(a.shape, dtype=np.float32)
        noise *= np.float32(WEIGHT_STD * CHANGE)
        noise += a
        out[k] = noise
    return out


def sparse_positions(size: int, rng: np.random.Generator, density: float = DENSITY) -> np.ndarray:
    return np.unique(rng.integers(0, size, max(1, int(size * density)))).astype(np.uint64)


def sparse_step(value: np.ndarray, rng: np.random.Generator):
    """Change a seeded DENSITY of ``value``'s float32 entries in place, and return the update `mdiff commit`
    writes for it by default: sparse version 2 (gaps, SUB deltas; SPEC §7.4) of the entries whose bits moved."""
    from mdiff.updates.bit_deltas import SubDelta
    from mdiff.updates.sparse import from_entries

    flat = value.reshape(-1)
    idx = sparse_positions(flat.size, rng)
    old_bits = flat.view(np.uint32)[idx]
    flat[idx] += rng.standard_normal(idx.size, dtype=np.float32) * np.float32(WEIGHT_STD * CHANGE * 10)
    new_bits = flat.view(np.uint32)[idx]
    keep = old_bits != new_bits
    return from_entries(value, idx[keep], SubDelta.between(old_bits[keep], new_bits[keep]), version=2)


def sparse_variant(base: dict, seed: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for k, a in base.items():
        b = a.copy()
        flat = b.reshape(-1)
        idx = sparse_positions(flat.size, rng)
        flat[idx] += rng.standard_normal(idx.size, dtype=np.float32) * np.float32(WEIGHT_STD * CHANGE * 10)
        out[k] = b
    return out


def low_rank_updates(base: dict, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    updates = {}
    for k, a in base.items():
        m, n = a.shape
        A = rng.standard_normal((m, RANK), dtype=np.float32) * np.float32(0.01)
        B = rng.standard_normal((RANK, n), dtype=np.float32) * np.float32(0.01)
        updates[k] = mdiff.low_rank(A, B, a.shape, DTYPES["float32"], scale=1.0)
    return updates
