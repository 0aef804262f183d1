"""SPEC.md §7.3 ``dense``: the XOR of the old and new bit patterns, in the parameter's shape.

XOR of raw bit patterns is exact by construction for every dtype — NaN
payloads, signed zeros, infinities and subnormals included — where an
arithmetic delta ``new - old`` misses by one rounding on a fraction of a real
fine-tune's values. It compresses as well as the arithmetic delta.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from mdiff.format.dtypes import dtype_of, from_bits, xor_bits
from mdiff.updates.base import (
    Problem, Update, UpdateType, bool_values_problems, expect_datasets, no_problems, sha256_hex, update_schema,
)

NAME = "dense"


def encode(old: np.ndarray, new: np.ndarray, stats: Mapping | None = None) -> Update:
    """The dense update taking ``old`` to ``new`` (same shape and dtype, canonical arrays)."""
    return from_xor(xor_bits(old, new), new, stats)


def from_xor(xor: np.ndarray, new: np.ndarray, stats: Mapping | None = None) -> Update:
    meta = {"type": NAME, "version": 1, "shape": list(new.shape), "dtype": dtype_of(new).name, "sha256": sha256_hex(new)}
    if stats:
        meta["stats"] = dict(stats)
    return Update(meta, {"xor": xor})


def _check_layout(meta, actual) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    return expect_datasets({"xor": (tuple(meta["shape"]), dt.bits)}, actual)


def _check_data(update: Update) -> Iterator[Problem]:
    if update.dtype.name == "bool":
        yield from bool_values_problems(update.array("xor"), "xor")


def _apply(update: Update, base: np.ndarray) -> np.ndarray:
    return from_bits(xor_bits(base, update.array("xor")), update.dtype)


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=True, needs_base=True, datasets=("xor",),
    schema=update_schema(NAME, carries_sha256=True),
    check_meta=no_problems, check_layout=_check_layout, check_data=_check_data, apply=_apply,
)
