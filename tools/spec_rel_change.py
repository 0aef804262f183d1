"""SPEC.md §11's `stats.rel_change` transcribed step by step in plain Python, and the decoder of the values in
conformance/writer/rel_change.json: the oracle that tools/gen_conformance.py (which writes the vectors) and
tests/test_relative_change.py (which runs them) check the reference, mdiff.relative_change, against.

One rounding at a time: binary32 is emulated by rounding each binary64 result — a sum, difference or product of two
binary32 values rounded twice so gives the binary32 result, since 53 ≥ 2·24 + 2.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from mdiff.format.dtypes import DTYPES
from mdiff.relative_change import BLOCK

NARROW = ("float16", "bfloat16", "float32")  # the dtypes whose working format is binary32 (§11)


def _binary32(x: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:  # struct rounds to nearest, then refuses a finite x that became ±inf: that is the result
        return math.copysign(math.inf, x)


def _halving_sum(values: list[float], rounded) -> float:
    width = 1 << (len(values) - 1).bit_length() if len(values) > 1 else 1
    values = values + [0.0] * (width - len(values))
    while len(values) > 1:
        half = len(values) // 2
        values = [rounded(values[k] + values[k + half]) for k in range(half)]
    return values[0]


def spec_section_11(old: np.ndarray, new: np.ndarray) -> float | None:
    """SPEC.md §11's five steps as written, from the values of any dtype: widened (integers rounded to nearest by
    Python's int → float, which is correctly rounded), step 4's binary64 only where C or B is not finite while
    every value is, step 5's clauses in its words (absent where C or B is not finite, even if C is 0)."""
    def widened(values: np.ndarray) -> list[float]:
        if DTYPES[_name(values)].kind == "float":
            with np.errstate(invalid="ignore"):  # a signalling NaN stays a NaN
                return values.astype(np.float64).reshape(-1).tolist()  # exact: every float dtype widens to binary64
        return [float(int(v)) for v in values.reshape(-1).tolist()]

    o, n = widened(old), widened(new)
    binary32 = _name(old) in NARROW
    change, base = _sums(o, n, _binary32 if binary32 else (lambda x: x))
    finite = lambda *xs: all(math.isfinite(x) for x in xs)  # noqa: E731
    if binary32 and not finite(change, base) and finite(*o, *n):
        change, base = _sums(o, n, lambda x: x)
    if not finite(change, base):
        return None
    if base == 0:
        return 0.0 if change == 0 else None
    return math.sqrt(change) / math.sqrt(base)


def _name(values: np.ndarray) -> str:
    return next(name for name, dt in DTYPES.items() if dt.value == values.dtype)


def _sums(old: list[float], new: list[float], rounded) -> tuple[float, float]:
    """§11 steps 1–3: C and B."""
    change = base = 0.0
    for start in range(0, len(old), BLOCK):
        o, n = old[start:start + BLOCK], new[start:start + BLOCK]
        differences = [rounded(b - a) for a, b in zip(o, n)]
        change += _halving_sum([rounded(d * d) for d in differences], rounded)  # d · d: libm's pow may misround
        base += _halving_sum([rounded(a * a) for a in o], rounded)
    return change, base


def vector_values(values: list[str] | dict, dtype: str) -> np.ndarray:
    """The values of a vector of conformance/writer/rel_change.json (conformance/README.md): a list of bit patterns
    in hex, or a formula — element i is Σ ((times · i mod mod) − minus) · 2^scale over its terms, every term and
    sum exact in binary64 and the result exact in the dtype — with `set` replacing elements by bit patterns."""
    dt = DTYPES[dtype]
    if isinstance(values, list):
        return np.array([int(h, 16) for h in values], dt.bits).view(dt.value)
    i = np.arange(values["length"], dtype=np.int64)
    total = np.zeros(values["length"], np.float64)
    for term in values["terms"]:
        total += ((term["times"] * i) % term["mod"] - term["minus"]).astype(np.float64) * 2.0 ** term["scale"]
    bits = total.astype(dt.value).view(dt.bits)
    for index, pattern in values.get("set", []):
        bits[index] = int(pattern, 16)
    return bits.view(dt.value)
