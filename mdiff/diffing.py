"""Choosing an update for each parameter (the encoder side of SPEC.md §7; not normative).

Unchanged parameters are omitted; a changed one becomes ``sparse`` or
``dense`` XOR, whichever stores fewer bytes; ``replace`` only where no delta
exists (new parameter, new shape or dtype); ``delete`` for removed ones.
Every choice is exact.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from mdiff.format.dtypes import canonical, dtype_of, xor_bits
from mdiff.updates import delete, dense, replace, sparse
from mdiff.updates.base import Update

_BLOCK = 1 << 20


def relative_change(old: np.ndarray, new: np.ndarray) -> float | None:
    """‖new − old‖₂ / ‖old‖₂ in float64, block by block to bound memory; None if not finite."""
    o = old.reshape(-1)
    n = new.reshape(-1)
    change = base = 0.0
    with np.errstate(invalid="ignore", over="ignore"):  # inf − inf: the ratio is dropped below
        for start in range(0, o.size, _BLOCK):
            a = o[start:start + _BLOCK].astype(np.float64)
            d = n[start:start + _BLOCK].astype(np.float64) - a
            change += float(np.dot(d, d))
            base += float(np.dot(a, a))
    if not (math.isfinite(change) and math.isfinite(base)) or base == 0:
        return None if change else 0.0
    return math.sqrt(change) / math.sqrt(base)


def diff_tensor(old: np.ndarray | None, new: np.ndarray | None) -> Update | None:
    """The smallest exact update taking ``old`` to ``new``; None when nothing changed.

    ``None`` for ``old`` means a new parameter; for ``new``, a removed one.
    """
    if new is None:
        return None if old is None else delete.encode(canonical(old))
    new = canonical(new)
    if old is None:
        return replace.encode(new)
    old = canonical(old)
    if old.shape != new.shape or dtype_of(old) != dtype_of(new):
        return replace.encode(new)
    xor = xor_bits(old, new)
    changed = int(np.count_nonzero(xor))
    if changed == 0:
        return None
    stats = {"changed": changed}
    rel = relative_change(old, new)
    if rel is not None:
        stats["rel_change"] = rel
    width = new.itemsize
    if changed * (sparse.INDEX_DTYPE.itemsize + width) < new.size * width:
        return sparse.from_xor(xor, new, stats)
    return dense.from_xor(xor, new, stats)


Progress = Callable[[str, int, int], None]  # (parameter name, index, total)


def diff_mappings(old: Mapping[str, np.ndarray], new: Mapping[str, np.ndarray], progress: Progress | None = None):
    """Yield (name, update) over the union of names in sorted order; one pair of tensors at a time."""
    names = sorted(set(old) | set(new))
    for i, name in enumerate(names):
        if progress:
            progress(name, i, len(names))
        update = diff_tensor(old[name] if name in old else None, new[name] if name in new else None)
        if update is not None:
            yield name, update


def diff_files(old_path, new_path, out_path, commit=None, compression: str = "gzip", progress: Progress | None = None) -> dict[str, str]:
    """Write the diff between two checkpoint files; return {name: update type} of what it holds.

    Reads one parameter of each checkpoint at a time.
    """
    from mdiff.checkpoints import open_checkpoint
    from mdiff.format.writer import DiffWriter

    summary = {}
    with open_checkpoint(old_path) as old, open_checkpoint(new_path) as new:
        with DiffWriter(out_path, commit, compression) as writer:
            for name, update in diff_mappings(old, new, progress):
                writer.add(name, update)
                summary[name] = update.type
    return summary
