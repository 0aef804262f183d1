"""Choosing an update for each parameter (the encoder side of SPEC.md §7; not normative).

Unchanged parameters are omitted; a changed one becomes ``sparse`` or
``dense`` XOR, whichever stores fewer bytes; ``replace`` only where no delta
exists (new parameter, new shape or dtype); ``delete`` for removed ones.
Every choice is exact.
"""

from __future__ import annotations

import math
import hashlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

from mdiff.format.dtypes import as_bits, canonical, dtype_of, xor_bits
from mdiff.progress import ByteCounter, Progress, tensor_bytes
from mdiff.threads import in_parts, shared_pool
from mdiff.updates import delete, dense, replace, sparse
from mdiff.updates.base import Update, sha256_hex
from mdiff.updates.bit_deltas import SubDelta

_BLOCK = 1 << 20
# A tensor under this many bytes is hashed on the caller's thread: a pool task's submit and wake-up cost more than
# its sha256 (a model of 10^5 small parameters: two tasks each, ~20 µs of the ~60 µs its diff took)
_HASHED_HERE_BYTES = 64 << 10


def relative_change(old: np.ndarray, new: np.ndarray) -> float | None:
    """‖new − old‖₂ / ‖old‖₂, block by block to bound memory; None if not finite.

    Informative (§7.1 `stats`), so it is computed in float32 where the values fit it — 20× less CPU
    than float64, which cost more than the XOR, sha256 and compression together — with the blocks'
    sums added in float64; float64 and integer tensors, and any whose float32 sums overflow, in float64."""
    o = old.reshape(-1)
    n = new.reshape(-1)
    wide = o.dtype == np.float64 or o.dtype.kind in "iub"
    if not wide:
        ratio = _norm_ratio(o, n, np.float32)
        if ratio is not None or not _has_finite_overflow(o, n):
            return ratio
    return _norm_ratio(o, n, np.float64)


def _norm_ratio(o: np.ndarray, n: np.ndarray, compute: type) -> float | None:
    blocks = [(0.0, 0.0)] * -(-o.size // _BLOCK)  # each block's (change, base), added below in block order

    def part(first: int, last: int) -> None:  # whole blocks, on the pool beside the other parts (in_parts)
        block = min(_BLOCK, last - first)
        d: np.ndarray = np.empty(block, compute)  # one buffer for every block's difference (and, if needed, its conversion)
        a = d if o.dtype == compute else np.empty(block, compute)
        with np.errstate(invalid="ignore", over="ignore"):  # inf − inf: the ratio is dropped below
            for start in range(first, last, _BLOCK):
                stop = min(start + _BLOCK, last)
                if o.dtype == compute:  # no conversion: the blocks are read where they lie
                    old_block, new_block = o[start:stop], n[start:stop]
                    diff = np.subtract(new_block, old_block, out=d[:stop - start])
                else:
                    old_block = a[:stop - start]
                    old_block[...] = o[start:stop]
                    diff = d[:stop - start]
                    diff[...] = n[start:stop]
                    np.subtract(diff, old_block, out=diff)
                blocks[start // _BLOCK] = (float(np.dot(diff, diff)), float(np.dot(old_block, old_block)))

    in_parts(o.size, 1, part, part_bytes=_BLOCK)  # a part is one block: the sums are those of one thread
    change = base = 0.0
    for block_change, block_base in blocks:
        change += block_change
        base += block_base
    if not (math.isfinite(change) and math.isfinite(base)) or base == 0:
        return None if change else 0.0
    return math.sqrt(change) / math.sqrt(base)


def _has_finite_overflow(o: np.ndarray, n: np.ndarray) -> bool:
    """True when every value is finite (so a non-finite float32 sum was an overflow float64 avoids)."""
    return bool(np.isfinite(o).all() and np.isfinite(n).all())


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
    hashed_here = new.nbytes < _HASHED_HERE_BYTES
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
