"""SPEC.md §7.7 ``delete``: the parameter is removed. ``shape`` and ``dtype`` name what is removed."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from mdiff.format.dtypes import dtype_of
from mdiff.updates.base import Problem, Update, UpdateType, no_models, no_problems, update_schema

NAME = "delete"


def encode(old: np.ndarray) -> Update:
    return Update({"type": NAME, "version": 1, "shape": list(old.shape), "dtype": dtype_of(old).name}, {})


def _check_layout(meta, actual) -> Iterator[Problem]:
    return iter(())


def _apply_numpy(update: Update, base: np.ndarray, scratch: bool) -> None:
    return None


def _apply_onnx(update: Update, base: np.ndarray, run, scratch: bool) -> None:
    return None  # nothing to compute: the parameter is gone


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=False, needs_base=True, datasets=(),
    schema=update_schema(NAME, carries_sha256=False),
    check_meta=no_problems, check_layout=_check_layout, check_data=no_problems,
    apply_numpy=_apply_numpy, apply_onnx=_apply_onnx, onnx_models=no_models,
)
