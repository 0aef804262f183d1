"""SPEC.md §7.4 ``sparse``: XOR patterns at strictly increasing flat C-order indices (COO).

Indices are uint64 so that any tensor the limits admit can be addressed;
after HDF5's shuffle and deflate a sorted index stream costs one to two
bytes per entry.
"""

from __future__ import annotations

import math
from typing import Iterator, Mapping

import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format.dtypes import as_bits, dtype_of, from_bits, xor_bits
from mdiff.updates.base import (
    Problem, Update, UpdateType, bool_values_problems, expect_datasets, no_problems, sha256_hex, update_schema,
)

NAME = "sparse"
INDEX_DTYPE = np.dtype("<u8")


def encode(old: np.ndarray, new: np.ndarray, stats: Mapping | None = None) -> Update:
    """The sparse update taking ``old`` to ``new``: one entry per element whose bits differ."""
    return from_xor(xor_bits(old, new), new, stats)


def from_xor(xor: np.ndarray, new: np.ndarray, stats: Mapping | None = None) -> Update:
    flat = xor.reshape(-1)
    indices = np.flatnonzero(flat).astype(INDEX_DTYPE)
    return from_entries(new, indices, flat[indices], stats)


def from_entries(new: np.ndarray, indices: np.ndarray, xor: np.ndarray, stats: Mapping | None = None) -> Update:
    meta = {"type": NAME, "version": 1, "shape": list(new.shape), "dtype": dtype_of(new).name, "sha256": sha256_hex(new)}
    if stats:
        meta["stats"] = dict(stats)
    return Update(meta, {"indices": indices, "xor": xor})


def _check_layout(meta, actual) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    yield from expect_datasets({"indices": (None, INDEX_DTYPE), "xor": (None, dt.bits)}, actual)
    if "indices" in actual and "xor" in actual:
        n_idx, n_xor = actual["indices"][0], actual["xor"][0]
        if n_idx != n_xor:
            yield ("MD407", "xor", f"{list(n_xor)} values for {list(n_idx)} indices")
        elif n_idx and n_idx[0] > math.prod(meta["shape"]):
            yield ("MD407", "indices", f"{n_idx[0]} entries for a tensor of {math.prod(meta['shape'])} elements")


def _index_problems(indices: np.ndarray, size: int) -> Iterator[Problem]:
    if indices.size and (np.any(indices[1:] <= indices[:-1]) or indices[-1] >= size):
        yield ("MD408", "indices", f"indices must be strictly increasing and below {size}")


def _check_data(update: Update) -> Iterator[Problem]:
    yield from _index_problems(update.array("indices"), math.prod(update.shape))
    if update.dtype.name == "bool":
        yield from bool_values_problems(update.array("xor"), "xor")


def _apply(update: Update, base: np.ndarray) -> np.ndarray:
    indices = update.array("indices")
    problems = list(_index_problems(indices, base.size))
    if problems:  # an out-of-range index would write outside the tensor
        raise InvalidFileError(problems[0][0], problems[0][2], "indices")
    bits = as_bits(base).copy()
    flat = bits.reshape(-1)
    flat[indices] ^= update.array("xor")
    return from_bits(bits, update.dtype)


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=True, needs_base=True, datasets=("indices", "xor"),
    schema=update_schema(NAME, carries_sha256=True),
    check_meta=no_problems, check_layout=_check_layout, check_data=_check_data, apply=_apply,
)
