"""SPEC.md §9: applying a diff to a base, parameter by parameter."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
import hashlib
import logging
import math
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from mdiff.format.dtypes import DTYPES, DType
from mdiff.threads import shared_pool
from mdiff.engines import apply_update
from mdiff.errors import ApplyError
from mdiff.progress import ByteCounter, Progress
from mdiff.updates.base import Update, check_base, read_ahead, verify_all, with_data_read

_RESULTS_IN_FLIGHT = 2
_HASH_INLINE_BYTES = 64 << 10
# Small parameters next to each other in the output are applied together (_Batch): at most this many, of at
# most this many bytes of results at once
_BATCH_PARAMETERS = 4096
_BATCH_BYTES = 4 << 20

logger = logging.getLogger(__name__)


def plan(base_specs: Mapping[str, tuple[tuple[int, ...], DType]], diff: Mapping[str, Update]):
    """The result's (name, shape, DType) entries in name order, after checking every update
    against the base (MD600, MD601) — before any data is read or written."""
    new: dict[str, tuple[str, tuple[int, ...], DType]] = {}
    for name, given in diff.items():
        meta = given.meta
        shape, dt = tuple(meta["shape"]), DTYPES[meta["dtype"]]
        if given.update_type.needs_base:
            spec = base_specs.get(name)
            # the same DType object (one each) or none: check_base says what differs
            if spec is None or spec[1] is not dt or tuple(spec[0]) != shape:
                check_base(given, spec, name)
        if meta["type"] != "delete":
            new[name] = (name, shape, dt)
    names = list(base_specs)  # in name order already, as a reader's keys() are: sorted() then only checks it
    names += [name for name in diff if name not in base_specs]
    names.sort()
    entries = []
    for name in names:
        entry = new.get(name)
        if entry is not None:
            entries.append(entry)
        elif name not in diff:
            entries.append((name, *base_specs[name]))
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
    from mdiff.hdf5walk.limits import DEFAULT_LIMITS
    from mdiff.ranged_file import no_collection

    # no_collection: a diff of 10^5 parameters and its base are millions of objects, all kept until the end, that
    # the collector would look at again and again (5 of 13 s of CPU at 10^5 parameters). They are all let go
    # before it runs again (_apply_open returns first): else its first pass would look at each of them once more.
    with no_collection():
        return _apply_open(base_path, diff_path, out_path, progress, limits or DEFAULT_LIMITS, engine, isolation,
                           max_shard_size)


def _apply_open(base_path, diff_path, out_path, progress: Progress | None, limits, engine: str | None, isolation,
                max_shard_size: int | None) -> int:
    from mdiff.checkpoints import is_folder_output, open_checkpoint, save_state, write_order
    from mdiff.format.reader import open_diff

    if isolation is not None:  # the child that reads the diff forked before the base's header is read (isolation.py)
        from mdiff.isolation import shared_worker

        shared_worker(isolation).start()
    with open_checkpoint(base_path) as base, open_diff(diff_path, limits, isolation) as diff:
        updates = diff.updates()  # looked up several times each: once from the file
        entries = plan(base.specs(), updates)
        files = applied_files(base.files, diff.files) if is_folder_output(out_path) else {}
        layout = diff.read_layout() if diff.layout is not None else base.layout
        order = write_order(out_path, entries, layout, max_shard_size)
        done = None if progress is None else ByteCounter(
            progress, ((name, math.prod(shape) * dt.itemsize) for name, shape, dt in entries))
        # Each result is hashed on another core while the next one is made and written; the
        # output takes its name only once every hash has matched.
        checks: deque[Future] = deque()
        # runs of small dense and replace parameters are applied a run at a time (_Batch); the others one by one
        batches = _batches(order, updates, engine)
        # the next update's data is read (and inflated) on other cores while this one is applied
        ahead = read_ahead((name, updates[name]) for name in order if name in updates and name not in batches)

        def fetch(name: str) -> np.ndarray:
            if done is not None:
                done(name)  # as it is handed to the writer
            batch = batches.get(name)
            if batch is not None:
                if batch.results is None and not batch.failed:
                    batch.run(base)
                if batch.results is not None:
                    return batch.results.pop(name)
                return one(name, with_data_read(updates[name]))  # the run failed: each as any other, which says why
            if name not in updates:
                return base.read(name)
            ahead_name, update = next(ahead)
            assert ahead_name == name  # save_state fetches in write_order's order
            return one(name, update)

        def one(name: str, update: Update) -> np.ndarray:
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
        runs = {id(batch): batch for batch in batches.values()}.values()
        logger.debug("applied %d parameters in %d runs (%d applied one by one after their run failed), their stored "
                     "bytes read in %d reads", sum(len(b.names) for b in runs), len(runs), sum(b.failed for b in runs),
                     sum(b.reads for b in runs))
    return len(entries)


def _batchable(update: Update) -> int | None:
    """The bytes of ``update``'s result where it may be applied in a run (_Batch): a small update of a type that
    applies many together (``UpdateType.apply_together``: `dense`, `replace` — types whose result is a
    sha256-verified function of its bytes), of a non-bool dtype (bool results have a check of their own, MD409);
    else None."""
    meta = update.meta
    dt = DTYPES.get(meta["dtype"])
    if dt is None or dt.kind == "bool":
        return None
    nbytes = math.prod(meta["shape"]) * dt.itemsize
    if nbytes >= _HASH_INLINE_BYTES:
        return None
    try:
        kind = update.update_type
    except KeyError:  # no such type here: applied alone, which says so
        return None
    return nbytes if kind.apply_together is not None else None


def _batches(order: Sequence[str], diff: Mapping[str, Update], engine: str | None) -> dict[str, "_Batch"]:
    """The runs of consecutive small parameters of ``order`` (write order) applied together, by each name in them;
    none where ``engine`` is not numpy's (auto's choice for both types), whose arithmetic a run does."""
    found: dict[str, _Batch] = {}
    if engine not in (None, "auto", "numpy"):
        return found
    run: list[str] = []
    updates: list[Update] = []
    run_bytes = 0

    def close() -> None:
        nonlocal run, updates, run_bytes
        if len(run) > 1:
            batch = _Batch(run, updates)
            found.update(dict.fromkeys(run, batch))
        run, updates, run_bytes = [], [], 0

    for name in order:
        update = diff.get(name)
        nbytes = None if update is None else _batchable(update)
        if nbytes is None:
            close()
            continue
        assert update is not None
        run.append(name)
        updates.append(update)
        run_bytes += nbytes
        if len(run) >= _BATCH_PARAMETERS or run_bytes >= _BATCH_BYTES:
            close()
    close()
    return found


class _Batch:
    """A run of small parameters of types that apply many together (`dense`, `replace`), consecutive in write order,
    applied together: their stored bytes read in a few preads (chunk_reader.read_as_rows, read_many), their base values
    in one read where they lie side by side (the base's ``read_joined``, ``read_many``), the parameters of each type
    and dtype applied by one call of the type's ``apply_together`` over their values, and each result hashed against
    its sha256 (§9.2). Anything else — an error anywhere, a result that does not verify
    — and the run is applied one parameter at a time as any other parameter (``failed``), which raises what that
    path raises, for the first parameter that breaks a rule: the same verdict, code and bytes either way."""

    def __init__(self, names: list[str], updates: list[Update]):
        self.names, self.updates = names, updates
        self.results: dict[str, np.ndarray] | None = None
        self.failed = False
        self.reads = 0

    def run(self, base: Any) -> None:
        try:
            self.results = self._results(base)
        except Exception:  # noqa: BLE001 — the one-by-one path finds it again and raises it in its turn
            self.results = None
        self.failed = self.results is None

    def _results(self, base: Any) -> dict[str, np.ndarray] | None:
        together = self._as_rows(base)
        return together if together is not None else self._each_kind(base)

    def _as_rows(self, base: Any) -> dict[str, np.ndarray] | None:
        """The usual run (10^5 experts of one shape): one type, one dtype and one shape (of rank >= 1), each stored
        as it is (chunk_reader.read_as_rows): its stored values read as the rows of one array, its bases as one run of
        the base's bytes, applied by one call of the type's ``apply_together`` and each row hashed — no array, view
        or check of each parameter on the way. None where it is not such a run, or anything fails (the general path
        then, which says why)."""
        from mdiff.format.chunk_reader import read_as_rows
        from mdiff.format.dtypes import dtype_named

        updates = self.updates
        kind = updates[0].update_type
        meta = updates[0].meta
        dtype_name, shape = meta["dtype"], meta["shape"]
        key = kind.datasets[0]
        sources = []
        for update in updates:
            other = update.meta
            if update.update_type is not kind or other["dtype"] != dtype_name or other["shape"] != shape:
                return None
            sources.append(update.data[key])
        stored = read_as_rows(sources)
        if stored is None or kind.apply_together is None or stored.shape != (len(updates), *shape):
            return None
        self.reads = 1
        dt = dtype_named(dtype_name)
        bits = base.read_joined(self.names).view(dt.bits) if kind.needs_base else None
        if bits is not None and bits.size != stored.size:
            return None
        out = kind.apply_together(bits, stored.reshape(-1), dt)
        if out is None:
            return None
        raw, step, sha256 = out.tobytes(), out.nbytes // len(updates), hashlib.sha256  # each row's bytes: a slice
        for at, update in zip(range(0, len(raw), step) if step else [0] * len(updates), updates):
            if sha256(raw[at:at + step]).hexdigest() != update.meta.get("sha256"):
                return None
        return dict(zip(self.names, out.view(dt.value).reshape(stored.shape)))

    def _each_kind(self, base: Any) -> dict[str, np.ndarray] | None:
        """Any other run: the parameters of each type and dtype applied by one call of the type's
        ``apply_together`` over their values laid end to end, then cut and hashed."""
        from mdiff.format.chunk_reader import read_many
        from mdiff.format.dtypes import dtype_named

        updates = self.updates
        kinds = [update.update_type for update in updates]
        metas = [update.meta for update in updates]
        dtypes = [dtype_named(meta["dtype"]) for meta in metas]
        sources = [update.data[kind.datasets[0]] for update, kind in zip(updates, kinds)]
        stored, self.reads = read_many(sources)
        for i, array in enumerate(stored):
            if array is None:  # not read by a plan (compact data, an array): read alone; or a failure (to the caller)
                stored[i] = updates[i].array(kinds[i].datasets[0])
        with_base = [i for i, kind in enumerate(kinds) if kind.needs_base]
        bases = dict(zip(with_base, base.read_many([self.names[i] for i in with_base])))
        results: list[np.ndarray | None] = [None] * len(updates)
        # by type, stored dtype and bits: what one call of a type's apply_together takes laid end to end
        groups: dict[tuple[int, np.dtype, np.dtype], list[int]] = {}
        for i, kind in enumerate(kinds):
            groups.setdefault((id(kind), stored[i].dtype, dtypes[i].bits), []).append(i)  # type: ignore[union-attr]
        for indices in groups.values():
            kind, dt = kinds[indices[0]], dtypes[indices[0]]
            if _alike(indices, dtypes, metas):  # the usual group: one dtype and one shape (of rank >= 1)
                if not self._apply_alike(indices, kind, bases, stored, dt, metas, results):  # type: ignore[arg-type]
                    return None
                continue
            values = np.concatenate([bases[i].view(dt.bits).reshape(-1) for i in indices]) if kind.needs_base else None
            out = kind.apply_together(values, np.concatenate([stored[i].reshape(-1) for i in indices]), dt)  # type: ignore[union-attr, misc]
            if out is None:
                return None
            raw = out.view(np.uint8)
            at = 0
            for i in indices:
                end = at + math.prod(metas[i]["shape"]) * dtypes[i].itemsize
                if hashlib.sha256(raw[at:end].data).hexdigest() != metas[i].get("sha256"):
                    return None
                results[i] = raw[at:end].view(dtypes[i].value).reshape(metas[i]["shape"])
                at = end
        return dict(zip(self.names, results))  # type: ignore[arg-type]

    @staticmethod
    def _apply_alike(indices: list[int], kind: Any, bases: dict[int, np.ndarray], stored: list[np.ndarray],
                     dt: DType, metas: list[Mapping[str, Any]], results: list[np.ndarray | None]) -> bool:
        """The parameters of ``indices``, all of type ``kind``, of dtype ``dt`` and of one shape: applied, cut and
        hashed as rows of one array (numpy's loops, not one slice, view and reshape of each); False where one does
        not verify, or the type cannot take them."""
        shape = tuple(metas[indices[0]]["shape"])
        values = np.concatenate([bases[i] for i in indices], axis=None).view(dt.bits) if kind.needs_base else None
        out = kind.apply_together(values, np.concatenate([stored[i] for i in indices], axis=None), dt)
        if out is None:
            return False
        rows = out.view(dt.value).reshape((len(indices), *shape))
        for i, row, raw in zip(indices, rows, out.view(np.uint8).reshape(len(indices), -1)):
            if hashlib.sha256(raw.data).hexdigest() != metas[i].get("sha256"):
                return False
            results[i] = row
        return True


def _alike(indices: list[int], dtypes: list[DType], metas: list[Mapping[str, Any]]) -> bool:
    """Whether the parameters of ``indices`` have one dtype and one shape, of rank >= 1 (a row of a 2-D array is
    a 1-D array; of a 1-D array, a scalar)."""
    dt, shape = dtypes[indices[0]], metas[indices[0]]["shape"]
    return len(shape) > 0 and all(dtypes[i] is dt and metas[i]["shape"] == shape for i in indices)


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
