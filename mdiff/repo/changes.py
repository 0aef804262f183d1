"""What a commit records: the updates that take one state to another (exact diffs, explicit updates,
masked sparse ones), the new state it is made from, and what it amounts to (``CommitSummary``,
``Changes``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mdiff.checkpoints import is_folder_input, open_checkpoint
from mdiff.diffing import diff_tensor
from mdiff.engines import apply_update
from mdiff.errors import RepositoryError
from mdiff.format.dtypes import DType, as_bits, canonical, dtype_of, from_bits, xor_bits
from mdiff.format.layout import Layout
from mdiff.frameworks import numpy_state
from mdiff.threads import one_ahead
from mdiff.updates import replace, sparse
from mdiff.updates.base import Update, sha256_hex
from mdiff.words import count, format_size

if TYPE_CHECKING:
    from mdiff.repo.state_cache import StateSummary
    from mdiff.repo.states import StateView


@dataclass(frozen=True)
class CommitSummary:
    """What a commit recorded, for a line like git's."""

    commit_id: str
    branch: str | None
    changed: int = 0  # parameters
    added: int = 0
    deleted: int = 0
    files: dict[str, str] = field(default_factory=dict)  # path → "modified" | "added" | "deleted"
    layout_changed: bool = False
    stored_bytes: int = 0  # the commit file
    weights_bytes: int = 0  # the new state's tensors
    not_versioned: tuple[str, ...] = ()  # what a committed folder holds that the commit left out (SPEC.md §10.1)
    # the new state's parameters: (shape, dtype name, sha256 or None where inexact), for the working record
    values: Mapping[str, tuple[tuple[int, ...], str, str | None]] = field(default_factory=dict, repr=False,
                                                                           compare=False)
    # the new state's summary, kept for the next commit on top of it (state_cache.py); None: not kept
    state: StateSummary | None = field(default=None, repr=False, compare=False)

    def line(self) -> str:
        files = f", {count(len(self.files), 'file')}" if self.files else ""
        return (f"{self.changed} changed, {self.added} added, {self.deleted} deleted{files}; "
                f"{format_size(self.stored_bytes)} stored for {format_size(self.weights_bytes)} of weights")

    def not_versioned_line(self, shown: int = 8) -> str | None:
        """"not versioned: .gitattributes, .git/, optimizer.pt": what the folder holds that the commit did not
        take — hidden entries, other weights, training state, what --exclude left out; None when nothing."""
        if not self.not_versioned:
            return None
        names = list(self.not_versioned[:shown])
        more = len(self.not_versioned) - len(names)
        return "not versioned: " + ", ".join(names) + (f" and {more} more" if more else "")


@dataclass(frozen=True)
class Changes:
    """What a checkpoint changes against a commit (``status``)."""

    tensors: dict[str, str]  # name → "modified" | "added" | "deleted" | "retyped"
    files: dict[str, str]  # path → "modified" | "added" | "deleted"
    layout_changed: bool

    def __bool__(self) -> bool:
        return bool(self.tensors or self.files or self.layout_changed)


def open_new_state(stack: contextlib.ExitStack, new_state: object, exclude: Iterable[str]) -> Mapping[str, Any]:
    """A checkpoint path (file or model folder) opened lazily, or a state dict seen as numpy arrays."""
    if isinstance(new_state, (str, os.PathLike)):
        path = os.fspath(new_state)
        options = {"exclude": tuple(exclude)} if is_folder_input(path) else {}
        return stack.enter_context(open_checkpoint(path, **options))
    assert isinstance(new_state, Mapping), "a checkpoint path or a state dict"
    return numpy_state(new_state)


class WholeState(Mapping[str, np.ndarray]):
    """A state view as the new state of a commit: its tensors, files and layout."""

    def __init__(self, view: StateView) -> None:
        self._view = view

    def __getitem__(self, name: str) -> np.ndarray:
        return self._view[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._view.keys())

    def __len__(self) -> int:
        return len(self._view)

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self._view.spec(name)

    @property
    def files(self) -> Mapping[str, bytes] | None:
        return self._view.files

    @property
    def layout(self) -> Layout | None:
        return self._view.layout


class Unchanged(WholeState):
    """The state as it is: only explicit updates change it (import-peft)."""

    @property
    def files(self) -> Mapping[str, bytes] | None:
        return None

    @property
    def layout(self) -> Layout | None:
        return None


def masked_update(old: np.ndarray, new: np.ndarray, mask: np.ndarray) -> Update:
    """A sparse update storing exactly the elements ``mask`` selects (FISH-style sparse fine-tuning).

    Changes outside the mask are dropped: the update is then marked lossy, and its sha256 is of
    the state it really produces.
    """
    old, new = canonical(old), canonical(new)
    if mask.shape != new.shape or old.shape != new.shape or old.dtype != new.dtype:
        raise RepositoryError("MD801", f"a sparse mask needs the parameter's shape {list(new.shape)} on both sides")
    indices = np.flatnonzero(mask.reshape(-1)).astype(sparse.INDEX_DTYPE)
    xor = xor_bits(old, new).reshape(-1)
    result_bits = as_bits(old).copy().reshape(-1)
    result_bits[indices] ^= xor[indices]
    result = from_bits(result_bits.reshape(new.shape), dtype_of(new))
    update = sparse.from_entries(result, indices, xor[indices], base_sha256=sha256_hex(old))
    if np.count_nonzero(xor) != np.count_nonzero(xor[indices]):
        update = Update({**update.meta, "lossy": True}, update.data)
    return update


SMALL_BYTES = 64 << 10  # what one_ahead may hold several of at once


def _small_update(update: Update | None) -> bool:
    return update is None or sum(np.asarray(array).nbytes for array in update.data.values()) < SMALL_BYTES


def updates_between(old: Mapping[str, np.ndarray], new: Mapping, explicit: Mapping[str, Update] = {},
                    masks: Mapping[str, np.ndarray] = {}, inexact: frozenset[str] = frozenset(),
                    names: Iterable[str] | None = None, done: Callable[[str], None] | None = None,
                    known_sha256: Mapping[str, str | None] = {}) -> Iterator[tuple[str, Update]]:
    """(name, update) taking ``old`` to ``new``: explicit updates win, masked parameters store just
    their masked elements, the rest are exact diffs. A parameter in ``inexact`` (its value in ``old``
    was made by an inexact update) gets no exact update that reads its base: its result, as a
    ``replace``, instead (§13.4, MD805). ``names``: the parameters to look at (default: all); ``done(name)``
    is called as each has been looked at (progress). ``known_sha256``: the sha256 of ``old``'s values that
    the caller has verified already (a repository's state), which are then not hashed again.

    The next parameter's update is made on another thread while the caller writes this one (a commit's
    writer talks to libhdf5 on its own thread): one parameter ahead, so that about two are in memory."""

    def update_of(name: str) -> Update | None:
        update: Update | None
        if name in explicit:
            update = explicit[name]
        elif name in masks:
            if name not in old or name not in new:
                raise RepositoryError("MD801", f"sparse mask for {name!r}, which is not in both states")
            update = masked_update(old[name], new[name], masks[name])
        else:
            update = diff_tensor(old[name] if name in old else None, new[name] if name in new else None,
                                 base_sha256=known_sha256.get(name))
            if update is None:
                return None
        kind = update.update_type
        if name in inexact and kind.carries_sha256 and kind.needs_base:
            result = apply_update(update, old[name], name)
            assert result is not None  # an update that carries a sha256 has a result
            update = replace.encode(result)
        return update

    order = sorted(set(old) | set(new) | set(explicit)) if names is None else sorted(names)
    for name, update in one_ahead(order, update_of, small=_small_update):
        if done is not None:
            done(name)
        if update is not None:
            yield name, update
