"""Tensors for tests: every dtype, with the bit patterns that break naive arithmetic."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from mdiff.format.dtypes import DTYPES, as_bits

FLOAT_SPECIALS = {
    # name: (bits of a quiet NaN with payload, -0.0, +inf, -inf, smallest subnormal)
    "float16": [0x7E01, 0x8000, 0x7C00, 0xFC00, 0x0001],
    "bfloat16": [0x7FC1, 0x8000, 0x7F80, 0xFF80, 0x0001],
    "float32": [0x7FC00001, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001],
    "float64": [0x7FF8000000000001, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 0x1],
}


def random_tensor(dtype_name: str, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype_name]
    if dt.kind == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind in ("int", "uint"):
        info = np.iinfo(dt.value)
        return rng.integers(info.min, info.max, size=shape, dtype=dt.value, endpoint=True)
    values = rng.standard_normal(size=shape).astype(np.float32)
    return values.astype(dt.value)


def with_specials(array: np.ndarray, dtype_name: str, offset: int = 0) -> np.ndarray:
    """A copy whose first elements are NaN-with-payload, -0.0, ±inf and a subnormal (rotated by offset)."""
    out = array.copy()
    if dtype_name in FLOAT_SPECIALS and out.size:
        specials = FLOAT_SPECIALS[dtype_name]
        bits = as_bits(out).reshape(-1)
        for i in range(min(len(specials), bits.size)):
            bits[i] = specials[(i + offset) % len(specials)]
    return out


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(as_bits(np.ascontiguousarray(a)), as_bits(np.ascontiguousarray(b)))


ALL_DTYPES = list(DTYPES)
BF16 = ml_dtypes.bfloat16


# Eight bit patterns per dtype, chosen to catch anything that converts values
# instead of copying bytes: NaNs with payloads (quiet and signalling), -0.0,
# infinities, subnormals, extremes.
_FLOAT_BITS = {
    "float16": [0x7E01, 0x7C01, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x3C00],
    "bfloat16": [0x7FC1, 0x7F81, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x3F80],
    "float32": [0x7FC00001, 0x7F800001, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF, 0x3F800000],
    "float64": [
        0x7FF8000000000001,
        0x7FF0000000000001,
        0x8000000000000000,
        0x7FF0000000000000,
        0xFFF0000000000000,
        0x0000000000000001,
        0x800FFFFFFFFFFFFF,
        0x3FF0000000000000,
    ],
}


def special_values(name: str) -> np.ndarray:
    """Eight values of dtype ``name`` that exercise its edge cases."""
    dt = DTYPES[name]
    if name in _FLOAT_BITS:
        return np.array(_FLOAT_BITS[name], dtype=dt.bits).view(dt.value)
    if name == "bool":
        return np.array([True, False, False, True, True, True, False, True])
    info = np.iinfo(dt.value)
    return np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1, 7, info.max // 3], dtype=dt.value)


def commit_id(data: bytes, repository_format: int = 2) -> str:
    """The id of a commit file of these bytes in a repository of that format (SPEC.md §4.3): the SHA-256 of
    its block list (2, what `mdiff init` makes), of the bytes (1)."""
    import hashlib

    from mdiff import block_ids

    return hashlib.sha256(data).hexdigest() if repository_format == 1 else block_ids.of_chunks([data]).commit_id


def plant_commit(repo, data: bytes) -> str:
    """``data`` filed in ``repo`` as a commit under its id (with its block list in a format-2 repository), as
    a hostile repository would hold it; returns the id."""
    from mdiff import block_ids

    cid = commit_id(data, repo.repository_format)
    (repo.dir / "commits" / f"{cid}.mdiff").write_bytes(data)
    if repo.repository_format == 2:
        (repo.dir / "commits" / f"{cid}.blocks").write_bytes(block_ids.of_chunks([data]).encoded())
    return cid


def drifting_states(count: int, seed: int, names=("a", "b", "c")) -> list[dict[str, np.ndarray]]:
    """``count`` states of (32, 16) float32 tensors, each the last plus 1e-3·randn: a fine-tune's checkpoints."""
    rng = np.random.default_rng(seed)
    state = {name: rng.standard_normal((32, 16)).astype(np.float32) for name in names}
    made = [state]
    for _ in range(count - 1):
        state = {k: (v + np.float32(1e-3) * rng.standard_normal(v.shape).astype(np.float32)) for k, v in state.items()}
        made.append(state)
    return made
