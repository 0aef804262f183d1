"""SPEC.md §9: applying a diff to a base, parameter by parameter."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Callable, Mapping

import numpy as np

from mdiff.format.dtypes import DType
from mdiff.threads import shared_pool
from mdiff.updates.base import Update, check_base, read_ahead, spec_of, verify_all

Progress = Callable[[str, int, int], None]
_RESULTS_IN_FLIGHT = 2


def plan(base_specs: Mapping[str, tuple[tuple[int, ...], DType]], diff: Mapping[str, Update]):
    """The result's (name, shape, DType) entries in name order, after checking every update
    against the base (MD600, MD601) — before any data is read or written."""
    for name, update in diff.items():
        if update.update_type.needs_base:
            check_base(update, base_specs.get(name), name)
    entries = []
    for name in sorted(set(base_specs) | set(diff)):
        update = diff.get(name)
        if update is None:
            entries.append((name, *base_specs[name]))
        elif update.type != "delete":
            entries.append((name, update.shape, update.dtype))
    return entries


def apply_mappings(base: Mapping[str, np.ndarray], diff: Mapping[str, Update], engine: str | None = None) -> dict[str, np.ndarray]:
    """The new state as a dict (in memory); every exact result is verified. ``base`` is not modified."""
    entries = plan({k: spec_of(v, k) for k, v in base.items()}, diff)
    result = {}
    for name, _shape, _dtype in entries:
        update = diff.get(name)
        result[name] = base[name] if update is None else update.apply(base.get(name), name, engine, verify=False)
    verify_all((diff[name], result[name], name) for name, _, _ in entries if name in diff)
    return result


def apply_files(base_path, diff_path, out_path, progress: Progress | None = None, limits=None, engine: str | None = None,
                isolation=None) -> int:
    """Apply the diff at ``diff_path`` to the checkpoint at ``base_path``, writing ``out_path``.

    Every update is checked against the base before anything is written; then
    one parameter is read, updated in its own buffer, verified and written at
    a time. Returns the number of parameters written. With ``isolation`` (an
    ``mdiff.isolation.Isolation``) the diff's metadata is read by a child first
    (see ``mdiff.open``).
    """
    from mdiff.checkpoints import open_checkpoint, write_checkpoint
    from mdiff.format.limits import DEFAULT_LIMITS
    from mdiff.format.reader import open_diff

    with open_checkpoint(base_path) as base, open_diff(diff_path, limits or DEFAULT_LIMITS, isolation) as diff:
        entries = plan({name: base.spec(name) for name in base.keys()}, diff)
        position = {name: i for i, (name, _, _) in enumerate(entries)}
        # Each result is hashed on another core while the next one is made and written; the
        # output takes its name only once every hash has matched.
        checks: deque[Future] = deque()
        # the next update's data is read (and inflated) on other cores while this one is applied
        ahead = read_ahead((name, diff[name]) for name, _, _ in entries if name in diff)

        def fetch(name: str) -> np.ndarray:
            if progress:
                progress(name, position[name], len(entries))
            update = diff.get(name)
            if update is None:
                return base.read(name)
            ahead_name, update = next(ahead)
            assert ahead_name == name  # write_checkpoint fetches in the entries' order
            needs_base = update.update_type.needs_base
            # the base tensor was just read for this purpose alone: the update may overwrite it
            result = update.apply(base.read(name) if needs_base else None, name, engine, scratch=True, verify=False)
            checks.append(shared_pool().submit(update.verify, result, name))
            while len(checks) > _RESULTS_IN_FLIGHT:  # bounds the results held for their hash
                checks.popleft().result()
            return result

        def all_verified() -> None:
            while checks:
                checks.popleft().result()

        try:
            write_checkpoint(out_path, entries, fetch, template=base_path, before_commit=all_verified)
        finally:
            ahead.close()
    return len(entries)
