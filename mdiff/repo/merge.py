"""SPEC.md §13.7: merge strategies, parameter by parameter.

Floating-point parameters are combined in float64 and rounded once to their
dtype (to nearest, ties to even); the inputs are each branch's own values,
never values already combined — A = 1, B = 3 merged ``weighted:0.5`` is 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdiff.errors import RepositoryError
from mdiff.format.dtypes import as_bits, dtype_of


@dataclass(frozen=True)
class Strategy:
    name: str  # average, weighted, ours, theirs, task-arithmetic
    weight: float = 0.5  # weighted: the weight of ours; task-arithmetic: λ

    @classmethod
    def parse(cls, text: str) -> "Strategy":
        name, _, arg = text.partition(":")
        try:
            if name == "average" and not arg:
                return cls("average", 0.5)
            if name == "weighted" and arg:
                return cls("weighted", float(arg))
            if name in ("ours", "theirs") and not arg:
                return cls(name)
            if name == "task-arithmetic":
                return cls(name, float(arg) if arg else 1.0)
        except ValueError:
            pass
        raise RepositoryError(
            "MD804", f"unknown strategy {text!r}: use average, weighted:ALPHA, ours, theirs or task-arithmetic[:LAMBDA]"
        )

    def combine(self, ours: np.ndarray, theirs: np.ndarray, base: np.ndarray | None) -> np.ndarray:
        """The merged value of a floating-point parameter present, alike in shape and dtype, on both sides."""
        o, t = ours.astype(np.float64), theirs.astype(np.float64)
        if self.name in ("average", "weighted"):
            merged = self.weight * o + (1.0 - self.weight) * t
        else:  # task-arithmetic: base + λ·((ours − base) + (theirs − base))
            assert base is not None  # merge_parameter checks it is there
            b = base.astype(np.float64)
            merged = b + self.weight * ((o - b) + (t - b))
        return merged.astype(ours.dtype)


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(as_bits(a), as_bits(b))


def merge_parameter(
    name: str, ours: np.ndarray | None, theirs: np.ndarray | None, base: np.ndarray | None, strategy: Strategy
) -> tuple[np.ndarray | None, str | None]:
    """(merged value or None for absent, conflict reason or None)."""
    if strategy.name == "ours":
        return ours, None
    if strategy.name == "theirs":
        return theirs, None
    if _same(ours, theirs):
        return ours, None
    if ours is None or theirs is None:
        present = ours if ours is not None else theirs
        side = "ours" if ours is not None else "theirs"
        if base is None:
            return present, None  # added on one side only
        if _same(present, base):
            return None, None  # deleted on the other side, untouched here
        return None, f"deleted on one side, changed in {side}"
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None, f"shape or dtype differ: ours {dtype_of(ours).name}{list(ours.shape)}, theirs {dtype_of(theirs).name}{list(theirs.shape)}"
    if not dtype_of(ours).is_float:
        if base is not None and _same(ours, base):
            return theirs, None
        if base is not None and _same(theirs, base):
            return ours, None
        return None, f"{dtype_of(ours).name} values changed on both sides cannot be averaged"
    if strategy.name == "task-arithmetic" and not (base is not None and base.shape == ours.shape and base.dtype == ours.dtype):
        return None, "task-arithmetic needs the parameter in the merge base, with the same shape and dtype"
    return strategy.combine(ours, theirs, base), None


def merge_whole(ours: bytes | None, theirs: bytes | None, base: bytes | None, strategy: Strategy) -> tuple[bytes | None, str | None]:
    """A file or the layout (§13.7): a change made on one side only — a removal too — is taken; different
    changes on both sides are a conflict, except under ``ours`` and ``theirs``. (merged or None, conflict or None)"""
    if strategy.name == "ours" or ours == theirs:
        return ours, None
    if strategy.name == "theirs":
        return theirs, None
    if ours == base:
        return theirs, None
    if theirs == base:
        return ours, None
    return None, "changed on both sides"
