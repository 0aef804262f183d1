"""SPEC.md §7.3 ``dense``: the XOR of the old and new bit patterns, in the parameter's shape.

XOR of raw bit patterns is exact by construction for every dtype — NaN
payloads, signed zeros, infinities and subnormals included — where an
arithmetic delta ``new - old`` misses by one rounding on a fraction of a real
fine-tune's values. It compresses as well as the arithmetic delta.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from mdiff.format.dtypes import as_bits, dtype_of, from_bits, xor_bits
from mdiff.format.onnx_functions import BITS_NAMES, BITS_TYPES, make_model, tensor
from mdiff.errors import InvalidFileError
from mdiff.updates.base import (
    iter_blocks,
    Composition, Problem, Runner, Update, UpdateType, bool_values_problems, expect_datasets, no_problems, sha256_hex,
    update_schema, xor_into,
)

NAME = "dense"


def encode(old: np.ndarray, new: np.ndarray, stats: Mapping | None = None) -> Update:
    """The dense update taking ``old`` to ``new`` (same shape and dtype, canonical arrays)."""
    return from_xor(xor_bits(old, new), new, stats, base_sha256=sha256_hex(old))


def from_xor(xor: np.ndarray, new: np.ndarray, stats: Mapping | None = None, base_sha256: str | None = None) -> Update:
    meta = {"type": NAME, "version": 1, "shape": list(new.shape), "dtype": dtype_of(new).name, "sha256": sha256_hex(new)}
    if base_sha256 is not None:
        meta["base_sha256"] = base_sha256
    if stats:
        meta["stats"] = dict(stats)
    return Update(meta, {"xor": xor})


def _check_layout(meta, actual) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    return expect_datasets({"xor": (tuple(meta["shape"]), dt.bits)}, actual)


def _check_data(update: Update) -> Iterator[Problem]:
    """Every stored byte decoded, block by block (MD513 when one does not); bool patterns are 0 or 1 (MD409)."""
    for block in iter_blocks(update.data["xor"]):
        if update.dtype.name == "bool":
            problem = next(bool_values_problems(block, "xor"), None)
            if problem:
                yield problem
                return


def _apply_numpy(update: Update, base: np.ndarray, scratch: bool) -> np.ndarray:
    bits = as_bits(base)
    out = bits if scratch else np.empty_like(bits)
    np.bitwise_xor(bits, update.array("xor"), out=out)
    return from_bits(out, update.dtype)


def _fold(change: np.ndarray, update: Update, name: str) -> None:
    """§13.4: this update's XOR pattern folded into a run's change (refused as its apply would refuse it)."""
    xor = update.array("xor").reshape(-1)
    if update.dtype.name == "bool":  # a 0/1 base stays 0/1 under 0/1 patterns: what apply's result check says
        problem = next(bool_values_problems(xor, "xor"), None)
        if problem:
            raise InvalidFileError("MD409", "the update makes a bool value other than 0 or 1", name)
    np.bitwise_xor(change, xor, out=change)


COMPOSITION = Composition("xor", _fold, xor_into)


def _model_name(itemsize: int) -> str:
    return f"{NAME}_{BITS_NAMES[itemsize]}"


def _onnx_models() -> dict:
    """base, xor: bits(T) [N] (the parameter flattened in C order) → result = base XOR xor."""
    from onnx import helper

    return {
        _model_name(width): make_model(
            _model_name(width), "SPEC.md §7.3: bits(result) = bits(base) XOR xor",
            [helper.make_node("BitwiseXor", ["base", "xor"], ["result"])],
            [tensor("base", t, ["N"]), tensor("xor", t, ["N"])], [tensor("result", t, ["N"])],
        )
        for width, t in BITS_TYPES.items()
    }


def _apply_onnx(update: Update, base: np.ndarray, run: Runner, scratch: bool) -> np.ndarray:
    bits = as_bits(base)
    out = bits if scratch else np.empty_like(bits)
    run(_model_name(bits.itemsize), {"base": bits.reshape(-1), "xor": update.array("xor").reshape(-1)}, out.reshape(-1))
    return from_bits(out, update.dtype)


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=True, needs_base=True, datasets=("xor",),
    schema=update_schema(NAME, carries_sha256=True, reads_base=True),
    check_meta=no_problems, check_layout=_check_layout, check_data=_check_data,
    apply_numpy=_apply_numpy, apply_onnx=_apply_onnx, onnx_models=_onnx_models,
    preferred_engine="numpy",  # onnxruntime 1.32's BitwiseXor kernel is not vectorised: 1.5–1.8× numpy's in-place XOR
    composition=COMPOSITION,
)
