"""SPEC.md §7.5 ``low_rank``: ``new = base + scale · (A @ B)``, A m×r, B r×n (LoRA-style).

A parameter of shape (d0, d1, …) is viewed as the matrix d0 × (d1·d2·…) in
C order (a 1-D parameter as d0 × 1). Arithmetic is in float32 (float64 for
float64 parameters), and the result is rounded to the parameter's dtype,
to nearest, ties to even. Summation order is free, so results agree between
appliers only within the tolerance of :func:`within_tolerance`; this type
carries no result sha256, and its factors carry their own.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format.dtypes import DType
from mdiff.format.onnx_functions import VALUE_TYPES, make_model, tensor
from mdiff.updates.base import Problem, Runner, Update, UpdateType, expect_datasets, sha256_hex, update_schema

NAME = "low_rank"
_SHA = {"type": "string", "pattern": "^[0-9a-f]{64}$"}


def compute_dtype(dt: DType) -> np.dtype:
    return np.dtype("<f8") if dt.name == "float64" else np.dtype("<f4")


def matrix_shape(shape) -> tuple[int, int]:
    return shape[0], math.prod(shape[1:])


def encode(A: np.ndarray, B: np.ndarray, shape, dtype: DType, scale: float = 1.0, lossy: bool = True,
           base_sha256: str | None = None) -> Update:
    """A low-rank update from explicit factors (e.g. LoRA's ``lora_B`` as A and ``lora_A`` as B);
    ``base_sha256``: the sha256 of the (exact) base value it is meant for, when known (§7.1)."""
    c = compute_dtype(dtype)
    A = np.ascontiguousarray(A, dtype=c)
    B = np.ascontiguousarray(B, dtype=c)
    meta = {
        "type": NAME, "version": 1, "shape": list(shape), "dtype": dtype.name,
        "scale": float(scale), "A_sha256": sha256_hex(A), "B_sha256": sha256_hex(B),
    }
    if lossy:
        meta["lossy"] = True
    if base_sha256 is not None:
        meta["base_sha256"] = base_sha256
    return Update(meta, {"A": A, "B": B})


def _check_meta(meta) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    if not dt.is_float or len(meta["shape"]) == 0:
        yield ("MD411", "", f"low_rank needs a floating-point parameter of rank >= 1, not {dt.name}{meta['shape']}")


def _check_layout(meta, actual) -> Iterator[Problem]:
    dt = Update(meta, {}).dtype
    if not dt.is_float or len(meta["shape"]) == 0:
        return
    c = compute_dtype(dt)
    if not ("A" in actual and "B" in actual):  # §7.5: their shapes are checked together, or not at all
        yield from expect_datasets({"A": ((), c), "B": ((), c)}, actual, shapes=False)
        return
    m, n = matrix_shape(meta["shape"])
    r = actual["A"][0][1] if len(actual["A"][0]) == 2 else 1
    if not 1 <= r <= max(1, min(m, n)):
        yield ("MD407", "A", f"rank {r} is not between 1 and min(m, n) = {min(m, n)}")
    yield from expect_datasets({"A": ((m, r), c), "B": ((r, n), c)}, actual)


def _check_data(update: Update) -> Iterator[Problem]:
    for key in ("A", "B"):
        if sha256_hex(update.array(key)) != update.meta[f"{key}_sha256"]:
            yield ("MD410", key, f"factor {key} does not match `{key}_sha256`")


def _checked_factors(update: Update) -> tuple[np.ndarray, np.ndarray]:
    """A and B, refused (MD410) unless they match their sha256: no result sha256 protects them."""
    factors = update.array("A"), update.array("B")
    for key, factor in zip(("A", "B"), factors):
        if sha256_hex(factor) != update.meta[f"{key}_sha256"]:
            raise InvalidFileError("MD410", f"factor {key} does not match `{key}_sha256`", key)
    return factors


def _apply_numpy(update: Update, base: np.ndarray, scratch: bool) -> np.ndarray:
    c = compute_dtype(update.dtype)
    m, n = matrix_shape(update.shape)
    A, B = _checked_factors(update)
    acc = A @ B
    acc *= c.type(update.meta["scale"])
    acc += base.reshape(m, n).astype(c)
    return acc.astype(update.dtype.value).reshape(update.shape)


def _model_name(dt_name: str) -> str:
    return f"{NAME}_{dt_name}"


def _onnx_models() -> dict:
    """base: T [m, n], A: C [m, r], B: C [r, n], scale: C scalar → result: T [m, n].

    Casts between T and C are explicit, so no runtime needs float16 or bfloat16
    arithmetic kernels: all arithmetic is in C, and the last Cast rounds to
    nearest, ties to even.
    """
    from onnx import helper

    models = {}
    for name in ("float16", "bfloat16", "float32", "float64"):
        t = VALUE_TYPES[name]
        c = VALUE_TYPES["float64" if name == "float64" else "float32"]
        nodes = [
            helper.make_node("MatMul", ["A", "B"], ["product"]),
            helper.make_node("Mul", ["product", "scale"], ["change"]),
        ]
        if t == c:
            nodes.append(helper.make_node("Add", ["base", "change"], ["result"]))
        else:
            nodes += [
                helper.make_node("Cast", ["base"], ["base_c"], to=c),
                helper.make_node("Add", ["base_c", "change"], ["sum"]),
                helper.make_node("Cast", ["sum"], ["result"], to=t),
            ]
        models[_model_name(name)] = make_model(
            _model_name(name), "SPEC.md §7.5: result = round_T(base_C + scale_C * (A @ B))", nodes,
            [tensor("base", t, ["m", "n"]), tensor("A", c, ["m", "r"]), tensor("B", c, ["r", "n"]), tensor("scale", c, [])],
            [tensor("result", t, ["m", "n"])],
        )
    return models


def _apply_onnx(update: Update, base: np.ndarray, run: Runner, scratch: bool) -> np.ndarray:
    c = compute_dtype(update.dtype)
    m, n = matrix_shape(update.shape)
    A, B = _checked_factors(update)
    matrix = base.reshape(m, n)
    out = matrix if scratch else np.empty_like(matrix)
    run(_model_name(update.dtype.name), {"base": matrix, "A": A, "B": B, "scale": np.array(update.meta["scale"], c)}, out)
    return out.reshape(update.shape)


def _ulp(values: np.ndarray, value_dtype: np.dtype) -> np.ndarray:
    """Spacing of ``value_dtype`` at each |value| (float64), subnormals included."""
    import ml_dtypes

    info = ml_dtypes.finfo(value_dtype) if value_dtype == ml_dtypes.bfloat16 else np.finfo(value_dtype)
    exponent = np.floor(np.log2(np.maximum(np.abs(values), float(info.smallest_normal))))
    return np.exp2(exponent - info.nmant)


def within_tolerance(result: np.ndarray, base: np.ndarray, update: Update) -> bool:
    """SPEC.md §7.5's tolerance: |y − R| ≤ ulp_T(R) + γ·(|base| + |scale|·Σ_k |A_ik|·|B_kj|),
    γ = (r + 2)·u / (1 − (r + 2)·u).

    R is the exact value, computed here in float64 (float64 parameters
    are compared against a float64 result, which bounds R within the same
    margin); u is the unit roundoff of the compute dtype.
    """
    c = compute_dtype(update.dtype)
    m, n = matrix_shape(update.shape)
    A = update.array("A").astype(np.float64)
    B = update.array("B").astype(np.float64)
    scale = update.meta["scale"]
    b64 = base.reshape(m, n).astype(np.float64)
    exact = b64 + scale * (A @ B)
    magnitude = np.abs(b64) + abs(scale) * (np.abs(A) @ np.abs(B))
    u = np.finfo(c).eps / 2
    k = (A.shape[1] + 2) * u
    bound = _ulp(exact, update.dtype.value) + k / (1 - k) * magnitude
    got = result.reshape(m, n).astype(np.float64)
    same_special = (np.isnan(got) & np.isnan(exact)) | (got == exact)
    return bool(np.all(same_special | (np.abs(got - exact) <= bound)))


TYPE = UpdateType(
    name=NAME, version=1, carries_sha256=False, needs_base=True, datasets=("A", "B"),
    schema=update_schema(
        NAME, carries_sha256=False, reads_base=True,
        properties={"scale": {"type": "number"}, "A_sha256": _SHA, "B_sha256": _SHA},
        required=["scale", "A_sha256", "B_sha256"],
    ),
    check_meta=_check_meta, check_layout=_check_layout, check_data=_check_data,
    apply_numpy=_apply_numpy, apply_onnx=_apply_onnx, onnx_models=_onnx_models,
)
