"""mdiff.hdf5walk: the hardened structure walk of an HDF5 file (SPEC.md §8.1–§8.3), on its own.

It walks a file's objects from the root — every link, object header, attribute, datatype, dataspace,
layout, filter pipeline and chunk index — and refuses what a file must not hold, reading by hand (with
positional reads bounded by the file) the structures libhdf5 trusts and crashes on, before libhdf5
reads them: version 2 B-trees and fractal heaps of dense links and attributes, symbol-table B-trees and
local heaps, datatype class bits, chunk indexes. It reads metadata only, never dataset data, and stops
at the limits. It needs nothing of mdiff: the standard library, numpy and h5py (tests/test_layers.py
holds it to that), so another HDF5 reader can use it as it is.

    from mdiff.hdf5walk import Limits, walk_file

    inventory, findings = walk_file("model.mdiff", Limits(max_objects=10_000))
    for f in findings:
        print(f.code, f.path, f.message)
    node = inventory.objects.get("/parameters/w/xor")   # an ObjectInfo: kind, attrs, dataset, children
    node.dataset.shape, node.dataset.dtype, node.dataset.plan   # where its bytes lie (StoragePlan)

The API:

- :func:`walk_file` (path, limits) and :func:`inspect_structure` (an open ``h5py.File``, its size,
  limits, and optionally ``read_at(n, offset)`` for a file without a descriptor) → ``(Inventory,
  [Finding])``. :class:`LazyWalk` walks all but the members of the groups it is given, each walked by
  ``expand(node)`` when first used.
- :class:`Inventory`: the objects that passed, a tree of :class:`ObjectInfo` (``inventory.objects`` finds
  one by path; ``refused(path)``: present but refused, reported once), each dataset's
  :class:`DatasetInfo` with its :class:`StoragePlan` (contiguous offset, or chunks and filters), and the
  declared bytes of all datasets. ``to_records``/``from_records``: the walk as JSON, for an isolated
  child to hand to its parent (§8.5).
- :class:`Limits` (§8.3: rank, elements, dataset bytes, total bytes, objects, depth, attribute bytes)
  and :data:`DEFAULT_LIMITS`.
- :class:`Finding` (code, path, message). The codes (:data:`CODES`) are SPEC.md's, each an error:
  MD302 a link name that is not UTF-8; MD500 a link that is not hard; MD501 an object that is neither a
  group nor a dataset; MD502 external storage; MD503 a virtual dataset; MD504 a filter off the allowlist
  (deflate, shuffle, fletcher32), bad filter parameters or a chunk that skips a filter; MD505 a datatype
  or dataspace not allowed; MD506 an attribute that is not a scalar fixed-length UTF-8 string; MD507
  rank; MD508 elements or bytes of a dataset; MD509 storage that does not hold the declared bytes
  (unallocated, past the file, chunks not covering the dataset once, extendible); MD510 an attribute
  over the size limit; MD511 objects and attributes over the limit, more than 64 attributes on one
  object, or nesting past the depth limit; MD512 declared bytes of all datasets over the limit; MD513
  something that cannot be read (a structure that does not decode or is unsound); MD514 an object
  reached through more than one link. After MD511 or MD512 nothing more is walked.
- :class:`HeaderReader`, :class:`HeaderError`: an object header and the structures it points to, read
  from the file's bytes (object_header.py).

A refused object is reported once and kept in the inventory as ``kind == "refused"``, so that no other
rule reports it again (SPEC.md §12.1). SPEC.md Appendix C walks through the structures in the order this
package reads them. libhdf5 still opens the file and every object the walk accepts: for a stranger's
file, run the walk in an isolated process with time and memory limits (§8.5; mdiff's isolation.py).

Names are loaded on first use, so that ``from mdiff.hdf5walk import positional_io`` or ``.limits`` does
not import h5py or numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mdiff.hdf5walk.findings import CODES, Finding
    from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits
    from mdiff.hdf5walk.object_header import HeaderError, HeaderReader
    from mdiff.hdf5walk.storage import Chunk, StoragePlan
    from mdiff.hdf5walk.walk import DatasetInfo, Inventory, LazyWalk, ObjectInfo, inspect_structure, walk_file

_EXPORTS = {
    "CODES": "findings", "Finding": "findings", "DEFAULT_LIMITS": "limits", "Limits": "limits",
    "HeaderError": "object_header", "HeaderReader": "object_header", "Chunk": "storage", "StoragePlan": "storage",
    "DatasetInfo": "walk", "Inventory": "walk", "LazyWalk": "walk", "ObjectInfo": "walk",
    "inspect_structure": "walk", "walk_file": "walk",
}
__all__ = ["CODES", "DEFAULT_LIMITS", "Chunk", "DatasetInfo", "Finding", "HeaderError", "HeaderReader", "Inventory",
           "LazyWalk", "Limits", "ObjectInfo", "StoragePlan", "inspect_structure", "walk_file"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
