"""Choosing an update for each parameter (the encoder side of SPEC.md §7; not normative).

Unchanged parameters are omitted; a changed one becomes ``sparse`` or
``dense`` XOR, whichever stores fewer bytes; ``replace`` only where no delta
exists (new parameter, new shape or dtype); ``delete`` for removed ones.
Every choice is exact.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

from mdiff.format.dtypes import as_bits, canonical, dtype_of, xor_bits
from mdiff.progress import ByteCounter, Progress, tensor_bytes
from mdiff.relative_change import relative_change
from mdiff.threads import pool_size, shared_pool
from mdiff.updates import delete, dense, replace, sparse
from mdiff.updates.base import Update, sha256_hex
from mdiff.updates.bit_deltas import SubDelta

# A tensor under this many bytes is hashed on the caller's thread: a pool task's submit and wake-up cost more than
# its sha256 (a model of 10^5 small parameters: two tasks each, ~20 µs of the ~60 µs its diff took)
_HASHED_HERE_BYTES = 64 << 10


UPDATE_VERSIONS = (1, 2)  # of `dense` and `sparse`: 1 stores XOR deltas, 2 (format 1.3) SUB deltas and gaps
DEFAULT_UPDATE_VERSION = 2


def diff_tensor(old: np.ndarray | None, new: np.ndarray | None, version: int = DEFAULT_UPDATE_VERSION,
                base_sha256: str | None = None) -> Update | None:
    """The smallest exact update taking ``old`` to ``new``; None when nothing changed.

    ``None`` for ``old`` means a new parameter; for ``new``, a removed one. ``version``: of the
    `dense` or `sparse` update (a `bool` parameter's is version 1 whatever is asked, §7.3).
    ``base_sha256``: ``old``'s sha256 where the caller has verified it already (a repository's state: §13.4),
    which spares hashing it again.
    """
    if new is None:
        return None if old is None else delete.encode(canonical(old))
    new = canonical(new)
    if old is None:
        return replace.encode(new)
    old = canonical(old)
    if old.shape != new.shape or old.dtype != new.dtype:  # canonical: one numpy dtype per spec dtype
        return replace.encode(new)
    version = dense.delta_version(version, dtype_of(new).name)
    # §7.1 base_sha256 and the result's sha256, hashed on other cores while the delta and its statistics are made
    # (a small tensor's here, once it is known to have changed)
    # with one thread a submitted hash runs at once (threads.Inline): made here, only once a change is found
    hashed_here = new.nbytes < _HASHED_HERE_BYTES or pool_size() <= 1
    base_hash = _known(base_sha256) if base_sha256 is not None else _Later(sha256_hex, old) if hashed_here \
        else shared_pool().submit(sha256_hex, old)
    new_hash = _Later(sha256_hex, new) if hashed_here else shared_pool().submit(sha256_hex, new)
    # nonzero exactly where the bits differ: the XOR, or the zigzagged wrapping difference (zigzag keeps zeros),
    # whose count SubDelta takes block by block as it makes it
    if version == 1:
        delta = xor_bits(old, new)
        changed = int(np.count_nonzero(delta))
    else:
        delta, changed = SubDelta.between_counted(as_bits(old), as_bits(new))
    if changed == 0:
        base_hash.cancel()
        new_hash.cancel()
        return None
    stats: dict[str, int | float] = {"changed": changed}
    rel = relative_change(old, new)
    if rel is not None:
        stats["rel_change"] = rel
    width = new.itemsize
    if changed * (sparse.INDEX_DTYPE.itemsize + width) < new.size * width:
        flat = delta.reshape(-1)
        indices = np.flatnonzero(flat).astype(sparse.INDEX_DTYPE)
        return sparse.from_entries(new, indices, flat[indices], stats, base_hash.result(), version, new_hash.result())
    return dense.from_delta(delta, new, stats, base_hash.result(), version, new_hash.result())


class _Later:
    """A hash made on this thread when asked for (the part of a pool Future diff_tensor uses)."""

    __slots__ = ("_fn", "_array")

    def __init__(self, fn, array: np.ndarray):
        self._fn, self._array = fn, array

    def result(self) -> str:
        return self._fn(self._array)

    def cancel(self) -> bool:
        return True


def _known(sha256: str) -> Future[str]:
    done: Future[str] = Future()
    done.set_result(sha256)
    return done


def file_updates(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> Iterator[tuple[str, Update]]:
    """(path, update) taking the files ``old`` to ``new`` (§5.5): `replace` for a new or changed file,
    `delete` for a removed one. Unchanged files are recognised by their sha256 where a side knows it."""
    for path in sorted(set(old) | set(new)):
        if path not in new:
            yield path, delete.encode(np.empty(_file_size(old, path), np.uint8))
            continue
        data = new[path]
        if path in old and _file_sha256(old, path) == _sha256(data):
            continue
        yield path, replace.encode(np.frombuffer(data, np.uint8))


def _file_size(files: Mapping[str, bytes], path: str) -> int:
    return files.size(path) if hasattr(files, "size") else len(files[path])


def _file_sha256(files: Mapping[str, bytes], path: str) -> str:
    return files.sha256(path) if hasattr(files, "sha256") else _sha256(files[path])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def layout_update(new: bytes | None, old: bytes | None) -> Update:
    """The `/layout` update (§5.6) taking the layout ``old`` to ``new`` (each its JSON bytes, or None)."""
    if new is None:
        return delete.encode(np.empty(len(old or b""), np.uint8))
    return replace.encode(np.frombuffer(new, np.uint8))


def diff_mappings(old: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray], progress: Progress | None = None,
                  update_version: int = DEFAULT_UPDATE_VERSION):
    """Yield (name, update) over the union of names in sorted order; one pair of tensors at a time.
    ``progress`` hears of each parameter's bytes (the new tensor's, or the removed one's) as it is done.
    ``update_version``: of `dense` and `sparse` updates (1 for readers of format 1.2 and older)."""
    names = sorted(set(old) | set(new))
    done = ByteCounter(progress, ((n, tensor_bytes(new if n in new else old, n)) for n in names) if progress else ())
    for name in names:
        update = diff_tensor(old[name] if name in old else None, new[name] if name in new else None, update_version)
        done(name)
        if update is not None:
            yield name, update


@dataclass(frozen=True)
class DiffSummary:
    """What a written diff changes: {parameter: update type}, {file path: update type}, whether the layout."""

    parameters: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    layout_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.parameters or self.files or self.layout_changed)


def write_diff(old: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray], out_path, commit=None,
               compression: str = "gzip", progress: Progress | None = None,
               update_version: int = DEFAULT_UPDATE_VERSION) -> DiffSummary:
    """Write the diff taking the state ``old`` to ``new`` — checkpoint readers, repository states, or
    mappings of arrays — as one .mdiff file, reading one parameter of each at a time. Where both sides
    have files (model folders, repository states) the files are diffed too (SPEC.md §5.5), and the
    weights layout is recorded when ``new`` has one that differs (§5.6). ``update_version`` 1 writes
    `dense` and `sparse` updates that readers of format 1.2 and older read (XOR deltas)."""
    from mdiff.format.writer import DiffWriter

    summary = DiffSummary()
    old_files, new_files = getattr(old, "files", None), getattr(new, "files", None)
    old_layout, new_layout = getattr(old, "layout", None), getattr(new, "layout", None)
    with DiffWriter(out_path, commit, compression) as writer:
        for name, update in diff_mappings(old, new, progress, update_version):
            writer.add(name, update)
            summary.parameters[name] = update.type
        if old_files is not None and new_files is not None:
            for path, update in file_updates(old_files, new_files):
                writer.add_file(path, update)
                summary.files[path] = update.type
        if new_layout is not None:
            new_bytes = new_layout.encode()
            old_bytes = old_layout.encode() if old_layout is not None else None
            if new_bytes != old_bytes:
                writer.set_layout(layout_update(new_bytes, old_bytes))
                object.__setattr__(summary, "layout_changed", True)
    return summary


def diff_files(old_path, new_path, out_path, commit=None, compression: str = "gzip", progress: Progress | None = None,
               update_version: int = DEFAULT_UPDATE_VERSION) -> dict[str, str]:
    """Write the diff between two checkpoints — files or model folders — and return {name: update type}
    of the parameters it changes (see :func:`write_diff`)."""
    from mdiff.checkpoints import open_checkpoint

    with open_checkpoint(old_path) as old, open_checkpoint(new_path) as new:
        return write_diff(old, new, out_path, commit, compression, progress, update_version).parameters
