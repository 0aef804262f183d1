"""The parent's values for a commit, from the cheapest source that proves them: the checkpoint this
repository last committed, where its tensors still hash to the parent's (§13.4), else the replay.

A commit needs the state of its parent tensor by tensor, to diff against. Replaying it from the history
costs inflating and applying every update since the last snapshot, and grows along a chain; but whoever
commits one checkpoint after another (a training loop, the Trainer's callback, `mdiff commit` of each new
checkpoint folder) has usually just read the parent's values from a file that is still on disk. A tensor
of that file is used only when its sha256 is the one the parent's state records for that parameter — the
same check the replay ends with — so a file changed or removed since costs a hash and falls back, never a
wrong value.

Which checkpoint that was is remembered by the Repository object, and between processes in the user's
cache folder (``$MDIFF_CACHE_DIR``, as the walks: format/walk_cache.py), one small entry per repository:
the commit and the checkpoint's path. An entry only suggests where to look; what is found there is hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mdiff.errors import MdiffError
from mdiff.format.dtypes import DType, canonical, dtype_of
from mdiff.format.walk_cache import WalkCache
from mdiff.repo.changes import open_new_state
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

    def __getitem__(self, name: str) -> np.ndarray:
        expected = self._sha256.get(name)
        if self._predecessor is not None and expected is not None and name in self._predecessor:
            try:
                value = canonical(np.asarray(self._predecessor[name]))
                if (value.shape, dtype_of(value)) == self.view.spec(name) and sha256_hex(value) == expected:
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
    try:
        return open_new_state(stack, path, exclude)
    except (MdiffError, OSError) as exc:
        log.debug("the last committed checkpoint %s cannot be read again: %s", path, exc)
        return None


# (commit id, checkpoint path, exclude globs) of the checkpoint last committed in a repository
LastCommitted = tuple[str, str, tuple[str, ...]]
_MAX_ENTRY_BYTES = 64 << 10


def _cache_and_entry(repository: os.PathLike[str] | str) -> tuple[WalkCache, str] | None:
    cache = WalkCache.default()
    if cache.folder is None:
        return None
    key = hashlib.sha256(os.fsencode(os.path.realpath(repository))).hexdigest()[:32]
    return cache, os.path.join(cache.folder, "last-committed", f"{key}.json")


def _entry_path(repository: os.PathLike[str] | str) -> str | None:
    found = _cache_and_entry(repository)
    return None if found is None else found[1]


def remember(repository: os.PathLike[str] | str, last: LastCommitted) -> None:
    """Keep ``last`` for the next process that commits to ``repository``; quietly nothing where the cache
    folder cannot be written."""
    found = _cache_and_entry(repository)
    if found is None:
        return
    cache, path = found
    temp = f"{path}.{secrets.token_hex(6)}.tmp"
    try:
        cache.make_folders(Path(path).parent)  # the user's own, as every folder of the cache
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            json.dump({"commit": last[0], "path": os.path.abspath(last[1]), "exclude": list(last[2])}, out)
        os.replace(temp, path)
    except OSError as exc:
        log.debug("cannot remember the last committed checkpoint: %s", exc)
        with contextlib.suppress(OSError):
            os.unlink(temp)


def recall(repository: os.PathLike[str] | str) -> LastCommitted | None:
    """What :func:`remember` kept for ``repository``, or None (none, unreadable or malformed: a miss)."""
    found = _cache_and_entry(repository)
    if found is None or not found[0].folders_usable(Path(found[1]).parent):
        return None
    path = found[1]
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as entry_file:
            data = entry_file.read(_MAX_ENTRY_BYTES + 1)
        entry = json.loads(data) if len(data) <= _MAX_ENTRY_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(entry, dict) and isinstance(entry.get("commit"), str) and isinstance(entry.get("path"), str)
            and isinstance(entry.get("exclude"), list) and all(isinstance(g, str) for g in entry["exclude"])):
        return None
    return entry["commit"], entry["path"], tuple(entry["exclude"])
