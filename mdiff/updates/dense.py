"""SPEC.md §7.3 ``dense``: a delta of the old and new bit patterns, in the parameter's shape.

Version 1 stores their XOR (``xor``); version 2 (format 1.3) the zigzag of their wrapping integer
difference (``sub``, bit_deltas.py). Both are exact by construction for every dtype — NaN payloads,
signed zeros, infinities and subnormals included — where a float delta ``new - old`` misses by one
rounding on a fraction of a real fine-tune's values. ``bool`` has version 1 only.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from mdiff.format.constants import SUB_MINOR
from mdiff.format.dtypes import DType, as_bits, dtype_of, from_bits
from mdiff.format.onnx_functions import BITS_NAMES, BITS_TYPES, make_model, tensor
from mdiff.errors import InvalidFileError
from mdiff.updates.base import (
    iter_blocks,
    Composition, Problem, Runner, Update, UpdateType, bool_has_version_1, bool_values_problems, expect_datasets,
    no_problems, sha256_hex, stored_as_is, update_schema,
)
from mdiff.updates.bit_deltas import BitDelta, SubDelta, XorDelta

NAME = "dense"
DELTAS: dict[int, type[BitDelta]] = {1: XorDelta, 2: SubDelta}  # version → what its one dataset stores
LATEST = 2


def delta_version(version: int, dtype_name: str) -> int:
    """The version a writer asked for ``version`` writes: ``bool`` has version 1 only (§7.3)."""
    if version not in DELTAS:
        raise ValueError(f"{NAME} has versions {sorted(DELTAS)}, not {version!r}")
    return 1 if dtype_name == "bool" else version


def encode(old: np.ndarray, new: np.ndarray, stats: Mapping | None = None, version: int = 1) -> Update:
    """The dense update taking ``old`` to ``new`` (same shape and dtype, canonical arrays)."""
    version = delta_version(version, dtype_of(new).name)
    return from_delta(DELTAS[version].between(as_bits(old), as_bits(new)), new, stats, sha256_hex(old), version)


def from_delta(delta: np.ndarray, new: np.ndarray, stats: Mapping | None = None, base_sha256: str | None = None,
               version: int = 1, sha256: str | None = None) -> Update:
    """The dense update of ``version`` storing ``delta`` (what that version's delta of old and new is);
    ``sha256``: of ``new``, when the caller has it already."""
    meta = {"type": NAME, "version": version, "shape": list(new.shape), "dtype": dtype_of(new).name,
            "sha256": sha256 or sha256_hex(new)}
    if base_sha256 is not None:
        meta["base_sha256"] = base_sha256
    if stats:
        meta["stats"] = dict(stats)
    return Update(meta, {DELTAS[version].dataset: delta})


def from_xor(xor: np.ndarray, new: np.ndarray, stats: Mapping | None = None, base_sha256: str | None = None) -> Update:
    return from_delta(xor, new, stats, base_sha256, 1)


def _type(version: int) -> UpdateType:
    delta = DELTAS[version]
    key = delta.dataset

    def check_layout(meta, actual) -> Iterator[Problem]:
        dt = Update(meta, {}).dtype
        return expect_datasets({key: (tuple(meta["shape"]), dt.bits)}, actual)

    def check_data(update: Update) -> Iterator[Problem]:
        """Every stored byte decoded, block by block (MD513 when one does not); bool patterns are 0 or 1 (MD409). Values
        of another dtype stored as they are (stored_as_is) have nothing to decode and no rule: they are not read."""
        source = update.data[key]
        if update.dtype.name != "bool" and stored_as_is(source):
            return
        for block in iter_blocks(source):
            if update.dtype.name == "bool":
                problem = next(bool_values_problems(block, key), None)
                if problem:
                    yield problem
                    return

    def apply_numpy(update: Update, base: np.ndarray, scratch: bool) -> np.ndarray:
        bits = as_bits(base)
        out = bits if scratch else np.empty_like(bits)
        delta.apply(bits, update.array(key), out=out)
        return from_bits(out, update.dtype)

    def recover_base(update: Update, result: np.ndarray) -> np.ndarray:
        bits = as_bits(result).copy()
        delta.undo(bits, update.array(key), out=bits)
        return from_bits(bits, update.dtype)

    def checked(update: Update, name: str) -> np.ndarray:
        """The stored delta, refused as apply's result check would refuse it."""
        stored = update.array(key).reshape(-1)
        if update.dtype.name == "bool":  # a 0/1 base stays 0/1 under 0/1 patterns: what apply's result check says
            problem = next(bool_values_problems(stored, key), None)
            if problem:
                raise InvalidFileError("MD409", "the update makes a bool value other than 0 or 1", name)
        return stored

    def fold(change: np.ndarray, update: Update, name: str) -> None:
        """§13.4: this update's delta composed into a run's change (refused as its apply would refuse it)."""
        delta.fold(change, checked(update, name))

    def apply_alone(bits: np.ndarray, update: Update, name: str) -> None:
        """§13.4: a run of this one update applied to the base's flat bits in place (fold and apply in one pass)."""
        delta.apply(bits, checked(update, name), out=bits)

    def apply_together(bits: np.ndarray, stored: np.ndarray, dt: DType) -> np.ndarray | None:
        """A run's bases and deltas laid end to end (UpdateType.apply_together): the delta is of the bit patterns."""
        return delta.apply(bits, stored, out=bits) if stored.dtype == dt.bits else None

    def apply_onnx(update: Update, base: np.ndarray, run: Runner, scratch: bool) -> np.ndarray:
        bits = as_bits(base)
        out = bits if scratch else np.empty_like(bits)
        run(_model_name(version, bits.itemsize), {"base": bits.reshape(-1), key: update.array(key).reshape(-1)},
            out.reshape(-1))
        return from_bits(out, update.dtype)

    return UpdateType(
        name=NAME, version=version, carries_sha256=True, needs_base=True, datasets=(key,),
        schema=update_schema(NAME, carries_sha256=True, reads_base=True, versions=tuple(DELTAS)),
        check_meta=no_problems if version == 1 else bool_has_version_1, check_layout=check_layout, check_data=check_data,
        apply_numpy=apply_numpy, apply_onnx=apply_onnx, onnx_models=lambda: _onnx_models(version),
        # onnxruntime 1.32's BitwiseXor kernel is not vectorised: 1.5–1.8× numpy's in-place XOR
        preferred_engine="numpy", since_minor=SUB_MINOR if version > 1 else 0, delta=delta,
        composition=Composition(key, delta, fold=fold, apply=apply_alone), recover_base=recover_base,
        apply_together=apply_together,
    )


def _model_name(version: int, itemsize: int) -> str:
    return f"{NAME}_{BITS_NAMES[itemsize]}" if version == 1 else f"{NAME}_v{version}_{BITS_NAMES[itemsize]}"


def _onnx_models(version: int) -> dict:
    """Version 1: base, xor: bits(T) [N] (the parameter flattened in C order) → result = base XOR xor.
    Version 2: base, sub: bits(T) [N] → result = base + ((sub >> 1) XOR (0 − (sub AND 1))), wrapping."""
    from onnx import helper

    from mdiff.format.onnx_functions import unzigzag_nodes

    models = {}
    for width, t in BITS_TYPES.items():
        if version == 1:
            doc = "SPEC.md §7.3: bits(result) = bits(base) XOR xor"
            nodes = [helper.make_node("BitwiseXor", ["base", "xor"], ["result"])]
        else:
            doc = "SPEC.md §7.3 version 2: bits(result) = bits(base) + unzigzag(sub) mod 2^w"
            nodes = [*unzigzag_nodes("sub", "difference", t), helper.make_node("Add", ["base", "difference"], ["result"])]
        key = DELTAS[version].dataset
        models[_model_name(version, width)] = make_model(
            _model_name(version, width), doc, nodes,
            [tensor("base", t, ["N"]), tensor(key, t, ["N"])], [tensor("result", t, ["N"])],
        )
    return models


TYPE = _type(1)
TYPE_V2 = _type(2)
