"""SPEC.md §9: applying a diff to a base, parameter by parameter."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
import math
from typing import Any, Iterator, Mapping

import numpy as np

from mdiff.format.dtypes import DType
from mdiff.threads import shared_pool
from mdiff.engines import apply_update
from mdiff.errors import ApplyError
from mdiff.progress import ByteCounter, Progress
from mdiff.updates.base import Update, check_base, read_ahead, verify_all

_RESULTS_IN_FLIGHT = 2
_HASH_INLINE_BYTES = 64 << 10


def plan(base_specs: Mapping[str, tuple[tuple[int, ...], DType]], diff: Mapping[str, Update]):
    """The result's (name, shape, DType) entries in name order, after checking every update
    against the base (MD600, MD601) — before any data is read or written."""
    for name, given in diff.items():
        if given.update_type.needs_base:
            check_base(given, base_specs.get(name), name)
    entries = []
    for name in sorted(set(base_specs) | set(diff)):
        update = diff.get(name)
        if update is None:
            entries.append((name, *base_specs[name]))
        elif update.type != "delete":
            entries.append((name, update.shape, update.dtype))
    return entries


def apply_mappings(base: Mapping[str, Any], diff: Mapping[str, Update], engine: str | None = None,
                   framework: str | None = None) -> dict[str, Any]:
    """The new state as a dict (in memory); every exact result is verified. ``base`` is not modified.

    ``base`` holds numpy arrays or torch tensors (any device); the result is in ``framework`` — "np" or
    "pt" (CPU tensors) — by default the base's own.
    """
    from mdiff.frameworks import check_framework, framework_of, is_torch_tensor, numpy_state, to_framework

    framework = framework or framework_of(base)
    check_framework(framework)
    view: Any = numpy_state(base)
    specs = {}
    for name in view:
        try:
            specs[name] = view.spec(name)
        except TypeError as exc:
            raise ApplyError("MD601", str(exc), name) from None
    entries = plan(specs, diff)
    if hasattr(diff, "read_layout"):
        diff.read_layout()  # §9.1: a malformed layout (MD307) refuses the file, though the result needs none
    result: dict[str, Any] = {}
    for name, _shape, _dtype in entries:
        update = diff.get(name)
        result[name] = view[name] if update is None else apply_update(update, view[name] if name in view else None,
                                                                      name, engine, verify=False)
    verify_all((diff[name], result[name], name) for name, _, _ in entries if name in diff)
    if framework == "np":
        return result
    return {name: base[name].detach().cpu() if name not in diff and is_torch_tensor(base[name])
            else to_framework(value, framework) for name, value in result.items()}


def apply_files(base_path, diff_path, out_path, progress: Progress | None = None, limits=None, engine: str | None = None,
                isolation=None, max_shard_size: int | None = None) -> int:
    """Apply the diff at ``diff_path`` to the checkpoint at ``base_path``, writing ``out_path``.

    The base and the output may be model folders (SPEC.md §10): the base's files are then updated
    by the diff's (§9.1) and written beside the weights, in the diff's layout, or else the base's.
    Every update is checked against the base before anything is written; then one parameter is
    read, updated in its own buffer, verified and written at a time. Returns the number of
    parameters written. With ``isolation`` (an ``mdiff.isolation.Isolation``) the diff's metadata is
    read by a child, and this process reads the diff by the child's findings without libhdf5 (see
    ``mdiff.open``): the way to apply a stranger's diff.
    """
    from mdiff.checkpoints import is_folder_output, open_checkpoint, save_state, write_order
    from mdiff.hdf5walk.limits import DEFAULT_LIMITS
    from mdiff.format.reader import open_diff
    from mdiff.ranged_file import no_collection

    # no_collection: a diff of 10^5 parameters and its base are millions of objects, all kept until the end, that
    # the collector would look at again and again (5 of 13 s of CPU at 10^5 parameters)
    with no_collection(), open_checkpoint(base_path) as base, open_diff(diff_path, limits or DEFAULT_LIMITS, isolation) as diff:
        entries = plan({name: base.spec(name) for name in base.keys()}, diff)
        files = applied_files(base.files, diff.files) if is_folder_output(out_path) else {}
        layout = diff.read_layout() if diff.layout is not None else base.layout
        order = write_order(out_path, entries, layout, max_shard_size)
        done = ByteCounter(progress, ((name, math.prod(shape) * dt.itemsize) for name, shape, dt in entries))
        # Each result is hashed on another core while the next one is made and written; the
        # output takes its name only once every hash has matched.
        checks: deque[Future] = deque()
        # the next update's data is read (and inflated) on other cores while this one is applied
        ahead = read_ahead((name, diff[name]) for name in order if name in diff)

        def fetch(name: str) -> np.ndarray:
            done(name)  # as it is handed to the writer
            update = diff.get(name)
            if update is None:
                return base.read(name)
            ahead_name, update = next(ahead)
            assert ahead_name == name  # save_state fetches in write_order's order
            needs_base = update.update_type.needs_base
            # the base tensor was just read for this purpose alone: the update may overwrite it
            result = apply_update(update, base.read(name) if needs_base else None, name, engine, scratch=True, verify=False)
            assert result is not None  # a deleted parameter is no entry: it is never fetched
            if result.nbytes < _HASH_INLINE_BYTES:  # handing a small hash to a thread costs more than it
                update.verify(result, name)  # takes (a model of 10^5 small experts has mostly these)
                return result
            checks.append(shared_pool().submit(update.verify, result, name))
            while len(checks) > _RESULTS_IN_FLIGHT:  # bounds the results held for their hash
                checks.popleft().result()
            return result

        def all_verified() -> None:
            while checks:
                checks.popleft().result()

        try:
            save_state(out_path, entries, fetch, files=files, layout=layout, template=base_path,
                       max_shard_size=max_shard_size, before_commit=all_verified)
        finally:
            ahead.close()
    return len(entries)


class _AppliedFiles(Mapping[str, bytes]):
    """The base's files with a diff's file updates applied (§9.1), each read and checked when written."""

    def __init__(self, base: Mapping[str, bytes], updates: Mapping[str, Update]):
        self._base, self._updates = base, updates
        self._paths = sorted((set(base) | {p for p, u in updates.items() if u.type == "replace"})
                             - {p for p, u in updates.items() if u.type == "delete"})

    def __getitem__(self, path: str) -> bytes:
        update = self._updates.get(path)
        if update is None:
            return self._base[path]
        result = apply_update(update, None, path)  # verified against its sha256 (MD602)
        assert result is not None
        return result.tobytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def applied_files(base: Mapping[str, bytes] | None, updates: Mapping[str, Update]) -> Mapping[str, bytes]:
    """The files after ``updates`` (§9.1): a `delete` needs the base to hold the file, of its size
    (MD600, MD601) — checked here, before anything is written. A base that is a single checkpoint
    file has no files: only the diff's new files result."""
    if base is None:
        return _AppliedFiles({}, {p: u for p, u in updates.items() if u.type == "replace"})
    for path, update in updates.items():
        if update.type == "delete":
            size = len(base[path]) if path in base and not hasattr(base, "size") else (
                base.size(path) if path in base else None)  # type: ignore[attr-defined]
            check_base(update, None if size is None else ((size,), update.dtype), path)
    return _AppliedFiles(base, updates)
