"""SPEC.md §7.6 ``replace``: the parameter's full new value.

For new parameters, root commits, and changes of shape or dtype — the
only cases where no delta against the base exists.
"""

from __future__ import annotations

import hashlib
from typing import Iterator

import numpy as np

from mdiff.format.dtypes import DType, dtype_of, from_bits, from_storage, to_storage
from mdiff.format.onnx_functions import BITS_NAMES, BITS_TYPES, make_model, tensor
from mdiff.updates.base import (
    iter_blocks,
    Problem, Runner, Update, UpdateType, bool_values_problems, expect_datasets, no_problems, sha256_hex, update_schema,
)

NAME = "replace"


def encode(new: np.ndarray, sha256: str | None = None) -> Update:
    """The update whose value is ``new``; ``sha256``: the value's, where the caller has just computed it from
    these very bytes (a snapshot's writer, from the values it proved, repo/snapshots.py) — else hashed here."""
    dt = dtype_of(new)
    meta = {"type": NAME, "version": 1, "shape": list(new.shape), "dtype": dt.name,
            "sha256": sha256 if sha256 is not None else sha256_hex(new)}
    return Update(meta, {"value": to_storage(new, dt)})


def _check_layout(meta, actual) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    return expect_datasets({"value": (tuple(meta["shape"]), dt.storage)}, actual)


def _check_data(update: Update) -> Iterator[Problem]:
    """The value, read block by block: bools are 0 or 1 (MD409), the bytes hash to `sha256` (MD410; the
    stored bit patterns are the canonical bytes of §6.2)."""
    digest = hashlib.sha256()
    bad_bool = None
    for block in iter_blocks(update.data["value"]):
        if update.dtype.name == "bool" and bad_bool is None:
            bad_bool = next(bool_values_problems(block, "value"), None)
        digest.update(np.ascontiguousarray(block).view(np.uint8).data)
    if bad_bool:
        yield bad_bool
    if digest.hexdigest() != update.sha256:
        yield ("MD410", "value", "the stored value does not match `sha256`")


def _apply_numpy(update: Update, base: np.ndarray | None, scratch: bool) -> np.ndarray:
    return from_storage(update.array("value"), update.dtype)


def _model_name(itemsize: int) -> str:
    return f"{NAME}_{BITS_NAMES[itemsize]}"


def _onnx_models() -> dict:
    """value: bits(T) [N] (flattened in C order) → result = value (the base is not an input)."""
    from onnx import helper

    return {
        _model_name(width): make_model(
            _model_name(width), "SPEC.md §7.6: result = value",
            [helper.make_node("Identity", ["value"], ["result"])], [tensor("value", t, ["N"])], [tensor("result", t, ["N"])],
        )
        for width, t in BITS_TYPES.items()
    }


def _apply_onnx(update: Update, base: np.ndarray | None, run: Runner, scratch: bool) -> np.ndarray:
    value = update.array("value").view(update.dtype.bits)
    out = np.empty_like(value)
    run(_model_name(value.itemsize), {"value": value.reshape(-1)}, out.reshape(-1))
    return from_bits(out, update.dtype)


def _apply_together(bits: None, stored: np.ndarray, dt: DType) -> np.ndarray | None:
    """A run's stored values laid end to end (UpdateType.apply_together): each result is its value."""
    return stored.view(dt.bits) if stored.dtype == dt.storage else None


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=True, needs_base=False, datasets=("value",),
    schema=update_schema(NAME, carries_sha256=True),
    check_meta=no_problems, check_layout=_check_layout, check_data=_check_data,
    apply_numpy=_apply_numpy, apply_onnx=_apply_onnx, onnx_models=_onnx_models,
    preferred_engine="numpy",  # the ONNX function is an Identity: running it only adds a copy
    apply_together=_apply_together,
)
