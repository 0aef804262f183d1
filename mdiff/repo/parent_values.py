"""The parent's values for a commit, from the cheapest source that proves them: the checkpoint this
repository last committed, where its tensors still hash to the parent's (§13.4), else the replay.

A commit needs the state of its parent tensor by tensor, to diff against. Replaying it from the history
costs inflating and applying every update since the last snapshot, and grows along a chain; but a
process that commits one checkpoint after another (a training loop, the Trainer's callback) has
usually just read the parent's values from a file that is still on disk. A tensor of that file is used
only when its sha256 is the one the parent's state records for that parameter — the same check the
replay ends with — so a file changed or removed since costs a hash and falls back, never a wrong value.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from mdiff.errors import MdiffError
from mdiff.format.dtypes import DType, canonical, dtype_of
from mdiff.repo.claims import StateClaims
from mdiff.repo.states import StateFiles, StateView
from mdiff.updates.base import sha256_hex

log = logging.getLogger(__name__)


class ParentValues(Mapping[str, np.ndarray]):
    """The state ``view`` opens, its values read from ``predecessor`` (a checkpoint reader) where they hash to
    what the state records, else replayed by ``view``. Everything else — names, specs, claims, files,
    layout — is the view's."""

    def __init__(self, view: StateView, predecessor: Mapping[str, Any] | None) -> None:
        self.view = view
        self._predecessor = predecessor
        self._sha256 = {name: sha256 for name, (_, _, sha256) in view.claims.parameters.items()}
        self.taken = 0  # values taken from the predecessor (the rest were replayed)

    def __getitem__(self, name: str) -> np.ndarray:
        expected = self._sha256.get(name)
        if self._predecessor is not None and expected is not None and name in self._predecessor:
            try:
                value = canonical(np.asarray(self._predecessor[name]))
                if (value.shape, dtype_of(value)) == self.view.spec(name) and sha256_hex(value) == expected:
                    self.taken += 1
                    return value
                log.debug("%s in the last committed checkpoint is not the parent's: it changed since", name)
            except (MdiffError, OSError, ValueError, KeyError) as exc:  # changed or gone: the history has the value
                log.debug("parent value of %s not read from the last checkpoint: %s", name, exc)
            self._predecessor = None  # one value changed since: the others most likely too, each a wasted hash
        return self.view[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.view.keys())

    def __len__(self) -> int:
        return len(self.view)

    def __contains__(self, name: object) -> bool:
        return name in self.view

    def keys(self) -> Any:
        return self.view.keys()

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self.view.spec(name)

    @property
    def inexact(self) -> frozenset[str]:
        return self.view.inexact

    @property
    def claims(self) -> StateClaims:
        return self.view.claims

    @property
    def files(self) -> StateFiles:
        return self.view.files

    @property
    def layout_bytes(self) -> bytes | None:
        return self.view.layout_bytes


def open_predecessor(stack: contextlib.ExitStack, path: str | os.PathLike[str] | None,
                     exclude: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The checkpoint at ``path`` opened lazily for its tensors, or None when it cannot be (gone, changed
    into something else): the replay serves then."""
    if path is None:
        return None
    from mdiff.repo.changes import open_new_state

    try:
        return open_new_state(stack, path, exclude)
    except (MdiffError, OSError) as exc:
        log.debug("the last committed checkpoint %s cannot be read again: %s", path, exc)
        return None
