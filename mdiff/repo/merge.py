"""SPEC.md §13.7: three-way merges, the strategies that resolve their conflicts, and the merged state.

Each parameter, file and the layout is decided against the merge base: changed on one side only, it
takes that side's bits exactly; changed differently on both sides, it is a conflict, which a strategy
resolves (or, asked to apply to all parameters, a strategy combines every parameter it can). Whether
two values are the same is decided from the sha256 the commits give exact values, so a merge reads
only what it combines, what it takes from the other side, and inexact values.

Floating-point parameters are combined in float64 and rounded once to their dtype (to nearest, ties
to even); the inputs are each branch's own values, never values already combined — A = 1, B = 3
merged ``weighted:0.5`` is 2.

The three states are anything that offers what a merge reads (:class:`MergeInput`): a repository's
state at a commit (``StateView``), or a checkpoint read through :class:`CheckpointInput` — parameters
only, each compared by its bits — which is how ``mdiff merge-file`` merges three checkpoints without a
repository, by the same code.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from mdiff.errors import RepositoryError
from mdiff.format import layout
from mdiff.format.dtypes import DType, as_bits
from mdiff.format.layout import Layout
from mdiff.repo.claims import StateClaims

if TYPE_CHECKING:
    from mdiff.checkpoints.base import CheckpointReader

Side = Literal["ours", "theirs"]
Spec = tuple[tuple[int, ...], DType]


class MergeFiles(Protocol):
    """The files of a merge's input, by path: their bytes, and their size and sha256 without reading them."""

    def __contains__(self, path: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def __getitem__(self, path: str) -> bytes: ...

    def size(self, path: str) -> int: ...

    def sha256(self, path: str) -> str: ...


class MergeInput(Protocol):
    """What a merge reads of each of its three states (§13.7): the claims (each parameter's shape, dtype
    and sha256 — None where the value is compared by its bits), the values, the files and the layout's
    bytes (None: no layout). A repository's ``StateView`` is one; :class:`CheckpointInput` adapts a
    checkpoint."""

    @property
    def claims(self) -> StateClaims: ...

    @property
    def files(self) -> MergeFiles: ...

    @property
    def layout_bytes(self) -> bytes | None: ...

    def keys(self) -> Iterable[str]: ...

    def __getitem__(self, name: str) -> np.ndarray: ...

    def __contains__(self, name: object) -> bool: ...


class _NoFiles(Mapping[str, bytes]):
    """The files of an input that has none."""

    def __getitem__(self, path: str) -> bytes:
        raise KeyError(path)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def size(self, path: str) -> int:
        raise KeyError(path)

    def sha256(self, path: str) -> str:
        raise KeyError(path)


class CheckpointInput:
    """A checkpoint (an open :class:`~mdiff.checkpoints.CheckpointReader`) as a merge's input: its
    parameters, claimed with no sha256, so that two values are the same when their dtype, shape and bits
    are (§13.7); no files, no layout. Each value is read when the merge needs it."""

    def __init__(self, reader: CheckpointReader) -> None:
        self.reader = reader
        self.path = reader.path
        self._claims: StateClaims | None = None

    @property
    def claims(self) -> StateClaims:
        if self._claims is None:
            self._claims = StateClaims({name: (*self.reader.spec(name), None) for name in self.reader.keys()}, {}, None)
        return self._claims

    @property
    def files(self) -> MergeFiles:
        return _NoFiles()

    @property
    def layout_bytes(self) -> bytes | None:
        return None

    def keys(self) -> Iterable[str]:
        return self.reader.keys()

    def __getitem__(self, name: str) -> np.ndarray:
        return self.reader[name]

    def __contains__(self, name: object) -> bool:
        return name in self.reader


@dataclass(frozen=True)
class Strategy:
    """A way to resolve conflicts (§13.7): ``ours``, ``theirs``, ``average``, ``weighted`` (``weight`` is
    ours' α) or ``task-arithmetic`` (``weight`` is λ); ``text`` is how it was asked for."""

    name: str
    weight: float = 0.5
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> Strategy:
        name, _, arg = text.partition(":")
        try:
            if name == "average" and not arg:
                return cls("weighted", 0.5, text)
            if name == "weighted" and arg and math.isfinite(float(arg)):
                return cls("weighted", float(arg), text)
            if name in ("ours", "theirs") and not arg:
                return cls(name, text=text)
            if name == "task-arithmetic" and (not arg or math.isfinite(float(arg))):
                return cls(name, float(arg) if arg else 1.0, text)
        except ValueError:
            pass
        raise RepositoryError(
            "MD804", f"unknown strategy {text!r}: use ours, theirs, average, weighted:ALPHA or task-arithmetic[:LAMBDA]"
        )

    @property
    def side(self) -> Side | None:
        """The side this strategy takes whole, if it is ``ours`` or ``theirs``."""
        return self.name if self.name in ("ours", "theirs") else None  # type: ignore[return-value]

    def why_not(self, ours: Spec | None, theirs: Spec | None, base: Spec | None) -> str | None:
        """Why this (combining) strategy cannot combine a parameter of these specs, or None if it can."""
        if ours is None or theirs is None:
            return "it is absent on one side"
        if ours != theirs:
            return "its shape or dtype differs between the sides"
        if not ours[1].is_float:
            return f"{ours[1].name} is not a floating-point dtype"
        if self.name == "task-arithmetic" and base != ours:
            return "the merge base lacks it or holds it in another shape or dtype"
        return None

    def combine(self, ours: np.ndarray, theirs: np.ndarray, base: np.ndarray | None) -> np.ndarray:
        """The combined value of a parameter :meth:`why_not` accepts."""
        o, t = ours.astype(np.float64), theirs.astype(np.float64)
        if self.name == "weighted":
            merged = self.weight * o + (1.0 - self.weight) * t
        else:  # task-arithmetic: base + λ·((ours − base) + (theirs − base))
            assert base is not None  # why_not checked it is there
            b = base.astype(np.float64)
            merged = b + self.weight * ((o - b) + (t - b))
        with np.errstate(over="ignore"):  # past the dtype's largest finite number is ±inf (§13.7): no warning
            return merged.astype(ours.dtype)


Outcome = Literal["unchanged", "alike", "ours", "theirs", "resolved", "combined", "conflict"]


@dataclass(frozen=True)
class Decision:
    """What the merge does with one parameter, file or the layout.

    ``outcome``: unchanged (the same in all three states), alike (changed the same way on both sides),
    ours / theirs (changed on that side only), resolved (a conflict the strategy resolved), combined
    (asked for with *all*), conflict. ``source``: the side whose value is taken, or None where the
    strategy computes it or it is a conflict. ``reason``: why it conflicts."""

    outcome: Outcome
    source: Side | None
    reason: str | None = None


@dataclass(frozen=True)
class Conflict:
    """A conflict left after the strategy: the parameter (``file PATH``, ``the weights layout``), why,
    and how each side changed it against the merge base."""

    name: str
    reason: str
    ours: str
    theirs: str


@dataclass(frozen=True)
class MergeResult:
    """What a merge did: ``how`` is ``fast-forward``, ``merge`` or ``conflicts``; ``commit`` the commit the
    branch is now at (None with conflicts: nothing was written); ``tally`` counts each outcome of
    :class:`Decision` over the parameters; ``base`` is the merge base used."""

    commit: str | None
    how: Literal["up to date", "fast-forward", "merge", "conflicts"]
    conflicts: list[Conflict] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)
    base: str | None = None


class MergedState(Mapping[str, np.ndarray]):
    """§13.7: ours, theirs and base combined, parameter by parameter and file by file, on access.

    The inputs are repository states or checkpoints (:class:`MergeInput`). ``strategy`` None is a plain
    three-way merge; ``everything`` applies the strategy to all parameters instead of to the conflicts only."""

    def __init__(self, ours: MergeInput, theirs: MergeInput, base: MergeInput, strategy: Strategy | None = None,
                 everything: bool = False) -> None:
        if everything and strategy is None:
            raise RepositoryError("MD804", "merging all parameters needs a strategy: --strategy ... --all")
        self.ours, self.theirs, self.base, self.strategy, self.everything = ours, theirs, base, strategy, everything
        self._views = {"ours": ours, "theirs": theirs, "base": base}
        self._claims = {side: view.claims.parameters for side, view in self._views.items()}
        self._names = sorted(set(ours.keys()) | set(theirs.keys()) | set(base.keys()))
        self._paths = sorted(set(ours.files) | set(theirs.files) | set(base.files))
        self._decisions: dict[str, Decision] = {}

    # ------------------------------------------------------------ deciding
    def _spec(self, side: str, name: str) -> Spec | None:
        claim = self._claims[side].get(name)
        return None if claim is None else (claim[0], claim[1])

    def _same(self, a: str, b: str, name: str) -> bool:
        ca, cb = self._claims[a].get(name), self._claims[b].get(name)
        if ca is None or cb is None:
            return ca is None and cb is None
        if ca[:2] != cb[:2]:
            return False
        if ca[2] is not None and cb[2] is not None:  # exact values: their sha256 decide (§13.5)
            return ca[2] == cb[2]
        return bool(np.array_equal(as_bits(self._views[a][name]), as_bits(self._views[b][name])))

    def decide(self, name: str) -> Decision:
        """What the merge does with parameter ``name`` (§13.7), from the claims where they decide it."""
        if name not in self._decisions:
            self._decisions[name] = self._decide(name)
        return self._decisions[name]

    def _decide(self, name: str) -> Decision:
        strategy = self.strategy
        if strategy is not None and self.everything and strategy.side:
            return Decision("combined", strategy.side)
        if self._same("ours", "theirs", name):
            return Decision("unchanged" if self._same("ours", "base", name) else "alike", "ours")
        specs = (self._spec("ours", name), self._spec("theirs", name), self._spec("base", name))
        if strategy is not None and self.everything and strategy.why_not(*specs) is None:
            return Decision("combined", None)
        if self._same("ours", "base", name):
            return Decision("theirs", "theirs")
        if self._same("theirs", "base", name):
            return Decision("ours", "ours")
        reason = _conflict_reason(*specs)
        if strategy is None:
            return Decision("conflict", None, reason)
        if strategy.side:
            return Decision("resolved", strategy.side)
        why_not = strategy.why_not(*specs)
        if why_not is None:
            return Decision("resolved", None)
        return Decision("conflict", None, f"{reason}; {strategy.text} cannot combine it: {why_not}")

    def _decide_whole(self, values: tuple[str | None, str | None, str | None]) -> Decision:
        """A file or the layout, by the sha256 of its bytes (None: absent): whole values (§13.7)."""
        ours, theirs, base = values
        strategy = self.strategy
        if strategy is not None and self.everything and strategy.side:
            return Decision("combined", strategy.side)
        if ours == theirs:
            return Decision("unchanged" if ours == base else "alike", "ours")
        if ours == base:
            return Decision("theirs", "theirs")
        if theirs == base:
            return Decision("ours", "ours")
        reason = "changed differently on both sides"
        if strategy is not None and strategy.side:
            return Decision("resolved", strategy.side)
        if strategy is not None:
            return Decision("conflict", None, f"{reason}; only ours or theirs resolves a file or the layout")
        return Decision("conflict", None, reason)

    def decide_file(self, path: str) -> Decision:
        return self._decide_whole(tuple(  # type: ignore[arg-type]
            view.files.sha256(path) if path in view.files else None for view in self._views.values()))

    def decide_layout(self) -> Decision:
        import hashlib

        return self._decide_whole(tuple(  # type: ignore[arg-type]
            None if view.layout_bytes is None else hashlib.sha256(view.layout_bytes).hexdigest()
            for view in self._views.values()))

    # ------------------------------------------------------------ what was decided
    def tally(self) -> Counter[str]:
        """How many parameters each outcome took."""
        return Counter(self.decide(name).outcome for name in self._names)

    def changed_from_ours(self) -> list[str]:
        """The parameters whose merged value may differ from ours: the only ones a merge commit records."""
        return [name for name in self._names if self.decide(name).source != "ours"]

    def conflicts(self) -> list[Conflict]:
        """The conflicts left after the strategy, each with how the sides changed it."""
        found = [Conflict(name, decision.reason or "", self._change("ours", name), self._change("theirs", name))
                 for name in self._names for decision in [self.decide(name)] if decision.outcome == "conflict"]
        for path in self._paths:
            decision = self.decide_file(path)
            if decision.outcome == "conflict":
                found.append(Conflict(f"file {path}", decision.reason or "", *(
                    _file_change(view.files.size(path) if path in view.files else None,
                                 path in self.base.files) for view in (self.ours, self.theirs))))
        decision = self.decide_layout()
        if decision.outcome == "conflict":
            found.append(Conflict("the weights layout", decision.reason or "", "changed", "changed"))
        return found

    def _change(self, side: str, name: str) -> str:
        """How ``side`` changed parameter ``name`` against the merge base, in words and numbers."""
        mine, base = self._spec(side, name), self._spec("base", name)
        if mine is None:
            return "deleted" if base is not None else "absent"
        if base is None:
            return "added"
        if mine != base:
            return f"{_spec_text(base)} → {_spec_text(mine)}"
        value, before = self._views[side][name], self._views["base"][name]
        if not mine[1].is_float:
            changed = int(np.count_nonzero(as_bits(value) != as_bits(before)))
            return f"{changed} of {value.size} values changed"
        delta = float(np.linalg.norm((value.astype(np.float64) - before.astype(np.float64)).ravel()))
        norm = float(np.linalg.norm(before.astype(np.float64).ravel()))
        return f"‖Δ‖/‖W‖ = {delta / norm:.3g}" if norm else f"‖Δ‖ = {delta:.3g} (base is zero)"

    # ------------------------------------------------------------ the merged state
    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        decision = self.decide(name)
        if decision.outcome == "conflict":
            raise KeyError(name)
        if decision.source is not None:
            view = self._views[decision.source]
            if name not in view:
                raise KeyError(name)
            return view[name]
        assert self.strategy is not None  # only a strategy computes a value
        base = self.base[name] if name in self.base else None
        return self.strategy.combine(self.ours[name], self.theirs[name], base)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self._names:
            return False
        decision = self.decide(name)
        return decision.outcome != "conflict" and (decision.source is None or name in self._views[decision.source])

    def __iter__(self) -> Iterator[str]:
        return iter([name for name in self._names if name in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def spec(self, name: str) -> Spec:
        decision = self.decide(name)
        spec = self._spec(decision.source or "ours", name)
        if spec is None:
            raise KeyError(name)
        return spec

    @property
    def files(self) -> dict[str, bytes]:
        merged = {}
        for path in self._paths:
            source = self.decide_file(path).source
            if source is not None and path in self._views[source].files:
                merged[path] = self._views[source].files[path]
        return merged

    @property
    def layout(self) -> Layout | None:
        source = self.decide_layout().source
        value = None if source is None else self._views[source].layout_bytes
        return None if value is None else layout.parse(value)


def _spec_text(spec: Spec) -> str:
    return f"{spec[1].name}{list(spec[0])}"


def _conflict_reason(ours: Spec | None, theirs: Spec | None, base: Spec | None) -> str:
    if ours is None:
        return "deleted in ours, changed in theirs"
    if theirs is None:
        return "changed in ours, deleted in theirs"
    if base is None:
        return "added on both sides with different values"
    if ours != theirs:
        return f"reshaped or retyped differently: ours {_spec_text(ours)}, theirs {_spec_text(theirs)}"
    return "changed differently on both sides"


def _file_change(size: int | None, in_base: bool) -> str:
    if size is None:
        return "deleted"
    return f"{'changed' if in_base else 'added'} ({size:,} bytes)"
