"""SPEC.md §7.6 ``replace``: the parameter's full new value.

For new parameters, root commits, and changes of shape or dtype — the
only cases where no delta against the base exists.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from mdiff.format.dtypes import dtype_of, from_storage, to_storage
from mdiff.updates.base import (
    Problem, Update, UpdateType, bool_values_problems, expect_datasets, no_problems, sha256_hex, update_schema,
)

NAME = "replace"


def encode(new: np.ndarray) -> Update:
    dt = dtype_of(new)
    meta = {"type": NAME, "version": 1, "shape": list(new.shape), "dtype": dt.name, "sha256": sha256_hex(new)}
    return Update(meta, {"value": to_storage(new, dt)})


def _check_layout(meta, actual) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    return expect_datasets({"value": (tuple(meta["shape"]), dt.storage)}, actual)


def _check_data(update: Update) -> Iterator[Problem]:
    value = update.array("value")
    if update.dtype.name == "bool":
        yield from bool_values_problems(value, "value")
    if sha256_hex(from_storage(value, update.dtype)) != update.sha256:
        yield ("MD410", "value", "the stored value does not match `sha256`")


def _apply(update: Update, base: np.ndarray | None) -> np.ndarray:
    return from_storage(update.array("value"), update.dtype)


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=True, needs_base=False, datasets=("value",),
    schema=update_schema(NAME, carries_sha256=True),
    check_meta=no_problems, check_layout=_check_layout, check_data=_check_data, apply=_apply,
)
