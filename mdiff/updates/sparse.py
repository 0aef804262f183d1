"""SPEC.md §7.4 ``sparse``: deltas of the bit patterns at strictly increasing flat C-order positions (COO).

Version 1 stores the positions (``indices``) and XOR patterns (``xor``); version 2 (format 1.3) the
gaps between positions (``gaps``: the first position, then each next one's distance minus one) and
SUB deltas (``sub``, bit_deltas.py): sorted positions as gaps take about a third fewer bytes after
deflate. Both are uint64 so that any tensor the limits admit can be addressed. ``bool`` has version
1 only.
"""

from __future__ import annotations

import math
from typing import Iterator, Mapping

import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format.constants import SUB_MINOR
from mdiff.format.dtypes import as_bits, dtype_of, from_bits
from mdiff.format.onnx_functions import BITS_NAMES, BITS_TYPES, INT64, make_model, tensor
from mdiff.updates.base import (
    Composition, Problem, Runner, Update, UpdateType, bool_has_version_1, bool_values_problems, expect_datasets,
    no_problems, sha256_hex, update_schema,
)
from mdiff.updates.bit_deltas import BitDelta, SubDelta, XorDelta
from mdiff.updates.dense import delta_version

NAME = "sparse"
INDEX_DTYPE = np.dtype("<u8")
DELTAS: dict[int, type[BitDelta]] = {1: XorDelta, 2: SubDelta}  # version → what its values store
POSITIONS = {1: "indices", 2: "gaps"}  # version → how its positions are stored
LATEST = 2


def encode(old: np.ndarray, new: np.ndarray, stats: Mapping | None = None, version: int = 1) -> Update:
    """The sparse update taking ``old`` to ``new``: one entry per element whose bits differ."""
    version = delta_version(version, dtype_of(new).name)
    old_bits, new_bits = as_bits(old).reshape(-1), as_bits(new).reshape(-1)
    indices = np.flatnonzero(old_bits != new_bits).astype(INDEX_DTYPE)
    delta = DELTAS[version].between(old_bits[indices], new_bits[indices])
    return from_entries(new, indices, delta, stats, sha256_hex(old), version)


def from_xor(xor: np.ndarray, new: np.ndarray, stats: Mapping | None = None, base_sha256: str | None = None) -> Update:
    flat = xor.reshape(-1)
    indices = np.flatnonzero(flat).astype(INDEX_DTYPE)
    return from_entries(new, indices, flat[indices], stats, base_sha256)


def from_entries(new: np.ndarray, indices: np.ndarray, delta: np.ndarray, stats: Mapping | None = None,
                 base_sha256: str | None = None, version: int = 1, sha256: str | None = None) -> Update:
    """The sparse update of ``version`` changing the elements at ``indices`` (strictly increasing) by
    ``delta`` (that version's delta of the old and new patterns there); ``sha256``: of ``new``, when the
    caller has it already."""
    meta = {"type": NAME, "version": version, "shape": list(new.shape), "dtype": dtype_of(new).name,
            "sha256": sha256 or sha256_hex(new)}
    if base_sha256 is not None:
        meta["base_sha256"] = base_sha256
    if stats:
        meta["stats"] = dict(stats)
    positions = indices if version == 1 else gaps_of(indices)
    return Update(meta, {POSITIONS[version]: positions, DELTAS[version].dataset: delta})


def gaps_of(indices: np.ndarray) -> np.ndarray:
    """Strictly increasing positions as gaps: gaps[0] = indices[0], gaps[j] = indices[j] − indices[j−1] − 1."""
    gaps = np.asarray(indices, INDEX_DTYPE).copy()
    if gaps.size > 1:
        gaps[1:] = np.diff(gaps) - np.uint64(1)
    return gaps


def indices_of(gaps: np.ndarray) -> np.ndarray:
    """The positions stored gaps mean, in wrapping uint64 arithmetic: a running sum that passes
    2^64 − 1 (or a gap of 2^64 − 1, whose + 1 wraps to 0) leaves a position not above the one before
    it, which the MD408 check of strictly increasing positions refuses."""
    indices = np.asarray(gaps, INDEX_DTYPE).copy()
    if indices.size > 1:
        indices[1:] += np.uint64(1)
    return np.cumsum(indices, dtype=INDEX_DTYPE, out=indices)


def positions_of(update: Update) -> np.ndarray:
    """The flat positions a sparse update of either version changes, as stored (not checked: MD408 is
    the applier's and validator's)."""
    if "gaps" in update.data:
        return indices_of(update.array("gaps"))
    return update.array("indices")


def _index_problems(indices: np.ndarray, size: int, dataset: str = "indices") -> Iterator[Problem]:
    if indices.size and (np.any(indices[1:] <= indices[:-1]) or indices[-1] >= size):
        what = "indices must be" if dataset == "indices" else "the positions the gaps make (their running sum) must be"
        yield ("MD408", dataset, f"{what} strictly increasing and below {size}")


def _type(version: int) -> UpdateType:
    delta = DELTAS[version]
    key, position_key = delta.dataset, POSITIONS[version]

    def positions(update: Update) -> np.ndarray:
        stored = update.array(position_key)
        return stored if version == 1 else indices_of(stored)

    def check_layout(meta, actual) -> Iterator[Problem]:
        dt = Update(meta, {}).dtype
        both = position_key in actual and key in actual  # §7.4: their shapes are checked together, or not at all
        yield from expect_datasets({position_key: (None, INDEX_DTYPE), key: (None, dt.bits)}, actual, shapes=both)
        if both:
            n_idx, n_values = actual[position_key][0], actual[key][0]
            if n_idx != n_values:
                yield ("MD407", key, f"{list(n_values)} values for {list(n_idx)} {position_key}")
            elif n_idx and n_idx[0] > math.prod(meta["shape"]):
                yield ("MD407", position_key, f"{n_idx[0]} entries for a tensor of {math.prod(meta['shape'])} elements")

    def check_data(update: Update) -> Iterator[Problem]:
        yield from _index_problems(positions(update), math.prod(update.shape), position_key)
        values = update.array(key)  # every stored byte decoded (MD513 when one does not: SPEC §12.1), bool or not
        if update.dtype.name == "bool":
            yield from bool_values_problems(values, key)

    def checked_indices(update: Update, size: int) -> np.ndarray:
        """The positions, refused (MD408) if out of order or range: they address memory."""
        indices = positions(update)
        problems = list(_index_problems(indices, size, position_key))
        if problems:
            raise InvalidFileError(problems[0][0], problems[0][2], position_key)
        return indices

    def apply_numpy(update: Update, base: np.ndarray, scratch: bool) -> np.ndarray:
        indices = checked_indices(update, base.size)
        bits = as_bits(base) if scratch else as_bits(base).copy()
        flat = bits.reshape(-1)
        # checked below the tensor's size, so < 2**63: as int64 numpy indexes without converting (2.5–4.5× faster)
        at = indices.view(np.int64)
        old = flat[at]
        flat[at] = delta.apply(old, update.array(key), out=old)
        return from_bits(bits, update.dtype)

    def recover_base(update: Update, result: np.ndarray) -> np.ndarray:
        bits = as_bits(result).copy()
        flat = bits.reshape(-1)
        at = checked_indices(update, flat.size).view(np.int64)
        old = flat[at]
        flat[at] = delta.undo(old, update.array(key), out=old)
        return from_bits(bits, update.dtype)

    def entries(update: Update, name: str, size: int) -> tuple[np.ndarray, np.ndarray]:
        """§13.4: this update's positions and stored deltas, for a run's change (MD408, MD409 as its apply)."""
        at = checked_indices(update, size).view(np.int64)
        values = update.array(key)
        if update.dtype.name == "bool":
            problem = next(bool_values_problems(values, key), None)
            if problem:
                raise InvalidFileError("MD409", "the update makes a bool value other than 0 or 1", name)
        return at, values

    def apply_onnx(update: Update, base: np.ndarray, run: Runner, scratch: bool) -> np.ndarray:
        stored = update.array(position_key)
        checked_indices(update, base.size)
        bits = as_bits(base) if scratch else as_bits(base).copy()
        flat = bits.reshape(-1)
        # The output is bound onto the input's buffer: ScatterElements then skips copying the base.
        run(_model_name(version, bits.itemsize), {"base": flat, position_key: stored, key: update.array(key)}, flat)
        return from_bits(bits, update.dtype)

    return UpdateType(
        name=NAME, version=version, carries_sha256=True, needs_base=True, datasets=(position_key, key),
        schema=update_schema(NAME, carries_sha256=True, reads_base=True, versions=tuple(DELTAS)),
        check_meta=no_problems if version == 1 else bool_has_version_1, check_layout=check_layout, check_data=check_data,
        apply_numpy=apply_numpy, apply_onnx=apply_onnx, onnx_models=lambda: _onnx_models(version),
        # onnxruntime 1.32's ScatterElements passes over the whole base even when the output is bound
        # onto it: 1% changes of a 4096×1024 float32 tensor took 1.1–2.4 ms vs numpy's 0.25–0.45 ms.
        preferred_engine="numpy", since_minor=SUB_MINOR if version > 1 else 0, delta=delta,
        # composes with dense updates of its version: both are deltas of bit patterns of one kind (§7.3, §7.4)
        composition=Composition(key, delta, entries=entries), recover_base=recover_base,
    )


def _model_name(version: int, itemsize: int) -> str:
    return f"{NAME}_{BITS_NAMES[itemsize]}" if version == 1 else f"{NAME}_v{version}_{BITS_NAMES[itemsize]}"


def _onnx_models(version: int) -> dict:
    """Version 1: base: bits(T) [N] (the parameter flattened in C order), indices: uint64 [k], xor: bits(T) [k]
    → result [N]: a gather, an XOR of the k gathered elements, and a scatter back.
    Version 2: base [N], gaps: uint64 [k], sub: bits(T) [k] → result [N]: the positions are the running
    sum of gaps + 1 (the first gap as it is), then a gather, a wrapping add of unzigzag(sub), a scatter.
    The model assumes positions a reader has checked (§7.4, MD408) before it runs."""
    from onnx import helper

    from mdiff.format.onnx_functions import unzigzag_nodes

    models = {}
    for width, t in BITS_TYPES.items():
        if version == 1:
            doc = "SPEC.md §7.4: bits(result)[indices[j]] = bits(base)[indices[j]] XOR xor[j]"
            nodes = [
                helper.make_node("Cast", ["indices"], ["positions"], to=INT64),
                helper.make_node("Gather", ["base", "positions"], ["old"], axis=0),
                helper.make_node("BitwiseXor", ["old", "xor"], ["new"]),
            ]
            inputs = [tensor("base", t, ["N"]), tensor("indices", BITS_TYPES[8], ["k"]), tensor("xor", t, ["k"])]
        else:
            doc = ("SPEC.md §7.4 version 2: indices = running sum of gaps[0], gaps[j] + 1; "
                   "bits(result)[indices[j]] = bits(base)[indices[j]] + unzigzag(sub[j]) mod 2^w")
            nodes = [
                helper.make_node("Cast", ["gaps"], ["gaps64"], to=INT64),
                helper.make_node("Constant", [], ["one64"], value=helper.make_tensor("one64", INT64, [], [1])),
                helper.make_node("Constant", [], ["axis0"], value=helper.make_tensor("axis0", INT64, [], [0])),
                helper.make_node("Add", ["gaps64", "one64"], ["steps"]),
                helper.make_node("CumSum", ["steps", "axis0"], ["ends"]),
                helper.make_node("Sub", ["ends", "one64"], ["positions"]),
                helper.make_node("Gather", ["base", "positions"], ["old"], axis=0),
                *unzigzag_nodes("sub", "difference", t),
                helper.make_node("Add", ["old", "difference"], ["new"]),
            ]
            inputs = [tensor("base", t, ["N"]), tensor("gaps", BITS_TYPES[8], ["k"]), tensor("sub", t, ["k"])]
        nodes.append(helper.make_node("ScatterElements", ["base", "positions", "new"], ["result"], axis=0))
        models[_model_name(version, width)] = make_model(
            _model_name(version, width), doc, nodes, inputs, [tensor("result", t, ["N"])],
        )
    return models


TYPE = _type(1)
TYPE_V2 = _type(2)
