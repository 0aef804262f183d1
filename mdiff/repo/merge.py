"""SPEC.md §13.7: merge strategies, parameter by parameter, and the merged state they make.

Floating-point parameters are combined in float64 and rounded once to their
dtype (to nearest, ties to even); the inputs are each branch's own values,
never values already combined — A = 1, B = 3 merged ``weighted:0.5`` is 2.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mdiff.errors import RepositoryError
from mdiff.format import layout
from mdiff.format.dtypes import as_bits, dtype_of
from mdiff.format.layout import Layout

if TYPE_CHECKING:
    from mdiff.repo.states import StateView


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


class MergedState(Mapping[str, np.ndarray]):
    """§13.7: ours, theirs and base combined, parameter by parameter and file by file, on access."""

    def __init__(self, ours: StateView, theirs: StateView, base: StateView, strategy: Strategy) -> None:
        self.ours, self.theirs, self.base, self.strategy = ours, theirs, base, strategy
        self._names = sorted(set(ours.keys()) | set(theirs.keys()))
        self._paths = sorted(set(ours.files) | set(theirs.files))

    def _merged(self, name: str) -> tuple[np.ndarray | None, str | None]:
        get = lambda state: state[name] if name in state else None  # noqa: E731
        return merge_parameter(name, get(self.ours), get(self.theirs), get(self.base), self.strategy)

    def _merged_file(self, path: str) -> tuple[bytes | None, str | None]:
        get = lambda state: state.files[path] if path in state.files else None  # noqa: E731
        return merge_whole(get(self.ours), get(self.theirs), get(self.base), self.strategy)

    def _merged_layout(self) -> tuple[bytes | None, str | None]:
        return merge_whole(self.ours.layout_bytes, self.theirs.layout_bytes, self.base.layout_bytes, self.strategy)

    def _conflict(self, name: str) -> str | None:
        """Why ``name`` conflicts, or None — from shapes and dtypes where they decide it (no data read)."""
        if self.strategy.name in ("ours", "theirs"):
            return None  # never a conflict (§13.7)
        if name in self.ours and name in self.theirs:
            spec = self.ours.spec(name)
            if spec == self.theirs.spec(name) and spec[1].is_float and (
                    self.strategy.name != "task-arithmetic" or (name in self.base and self.base.spec(name) == spec)):
                return None  # combined by the strategy, whatever the values
        return self._merged(name)[1]

    def conflicts(self) -> list[tuple[str, str]]:
        found = [(name, reason) for name in self._names for reason in [self._conflict(name)] if reason]
        found += [(f"file {path}", reason) for path in self._paths for _, reason in [self._merged_file(path)] if reason]
        reason = self._merged_layout()[1]
        return found + ([("the weights layout", reason)] if reason else [])

    def __getitem__(self, name: str) -> np.ndarray:
        value, _ = self._merged(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter([n for n in self._names if self._merged(n)[0] is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name in self._names and self._merged(name)[0] is not None

    @property
    def files(self) -> dict[str, bytes]:
        merged = {path: self._merged_file(path)[0] for path in self._paths}
        return {path: value for path, value in merged.items() if value is not None}

    @property
    def layout(self) -> Layout | None:
        value = self._merged_layout()[0]
        return None if value is None else layout.parse(value)
