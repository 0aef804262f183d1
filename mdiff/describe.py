"""What `mdiff dump` shows: a file's commit and, per parameter, what it changes — as plain data."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from mdiff.format.dtypes import from_storage
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits
from mdiff.format.reader import open_diff
from mdiff.isolation import Isolation
from mdiff.ranged_file import no_collection
from mdiff.updates.base import Update


def _stored_bytes(update: Update) -> int:
    """Bytes the datasets occupy in the file (after compression): as the structure walk measured them
    (opening each dataset in libhdf5 to ask would cost ~17 KB and ~0.2 ms each)."""
    total = 0
    for ds in update.data.values():
        size = getattr(ds, "storage_size", None)
        total += int(ds.id.get_storage_size()) if size is None else size
    return total


_NO_DETAILS = frozenset({"dense", "replace", "delete"})  # types whose details come of `stats` and `lossy` alone


def _details(update: Update) -> dict[str, Any]:
    meta = update.meta
    if meta["type"] in _NO_DETAILS and "stats" not in meta and "lossy" not in meta:  # most of 10^5 small parameters
        return {}
    numel = math.prod(update.shape)
    out: dict[str, Any] = {}
    stats = meta.get("stats", {})
    if update.type == "sparse":
        nnz = int(update.data["gaps" if "gaps" in update.data else "indices"].shape[0])  # one per entry (§7.4)
        out["nnz"] = nnz
        out["density"] = nnz / numel if numel else 0.0
    elif "changed" in stats:
        out["nnz"] = stats["changed"]
        out["density"] = stats["changed"] / numel if numel else 0.0
    if update.type == "low_rank":
        out["rank"] = int(update.data["A"].shape[1])
        out["scale"] = update.meta["scale"]
    if "rel_change" in stats:
        out["rel_change"] = stats["rel_change"]
    if update.meta.get("lossy"):
        out["lossy"] = True
    return out


def _first_values(update: Update, count: int) -> dict[str, list]:
    values = {}
    for key, ds in sorted(update.data.items()):
        n = min(count, int(np.prod(ds.shape)))
        flat = _head(ds, n)
        if key == "value" and update.dtype.is_float:  # float16/bfloat16 are stored as bit patterns
            flat = from_storage(flat, update.dtype).astype(np.float64)
        values[key] = flat.tolist()
    return values


def _head(ds, n: int) -> np.ndarray:
    """The first n elements in C order, reading no more rows than needed."""
    if ds.ndim == 0:
        return np.asarray(ds[()]).reshape(-1)[:n]
    if n == 0:
        return np.empty(0, ds.dtype)
    row = math.prod(ds.shape[1:]) or 1
    rows = min(ds.shape[0], -(-n // row))
    return np.asarray(ds[:rows]).reshape(-1)[:n]


def describe(path, values: int = 0, limits: Limits = DEFAULT_LIMITS, isolation: Isolation | None = None) -> dict[str, Any]:
    """What ``mdiff dump`` shows of the file at ``path`` (JSON-able). ``isolation``: see ``mdiff.open``."""
    with no_collection(), open_diff(path, limits, isolation) as diff:  # see DiffFile: what is made here is all kept
        parameters = []
        for name, update in diff.items():
            entry: dict[str, Any] = {
                "name": name, "type": update.type, "shape": list(update.shape), "dtype": update.dtype.name,
                "stored_bytes": _stored_bytes(update), "data_bytes": update.stored_bytes,
            }
            details = _details(update)
            if details:
                entry.update(details)
            if values:
                entry["values"] = _first_values(update, values)
            parameters.append(entry)
        files = [{"path": file_path, "type": update.type, "size": update.shape[0], "stored_bytes": _stored_bytes(update)}
                 for file_path, update in diff.files.items()]
        return {
            "file": os.fspath(path),
            "format_version": diff.version,
            "commit": diff.commit.to_json(),
            "parameters": parameters,
            "files": files,
            "layout": _layout(diff),
            "totals": {
                "parameters": len(parameters),
                "stored_bytes": sum(p["stored_bytes"] for p in parameters),
                "data_bytes": sum(p["data_bytes"] for p in parameters),
                "file_bytes": os.path.getsize(path),
                "by_type": {t: sum(1 for p in parameters if p["type"] == t) for t in sorted({p["type"] for p in parameters})},
            },
            "warnings": [w.to_json() for w in diff.warnings],
        }


def _layout(diff) -> dict[str, Any] | None:
    """What the file says of the weights layout (§5.6): None when it leaves it as it is."""
    update = diff.layout
    if update is None:
        return None
    if update.type == "delete":
        return {"type": "delete"}
    layout = diff.read_layout()
    return {"type": "replace", "files": [shard.path for shard in layout.shards], "index": layout.index_path}
