"""The update-type registry (SPEC.md §7).

Each type lives in one module that owns its datasets, attribute schema,
checks and math; registering it here is the only other change a new type needs.
A type with several versions (§7.1 `version`) registers each: ``REGISTRY`` names a type's
version 1, ``VERSIONS`` every version of every type. These are the types of the specification, the
only ones a file may name besides those it defines itself (§7.8): files are read and written by them.

A third party adds a type with :func:`register_type`, or by naming its ``UpdateType`` in the entry-point
group ``mdiff.update_types`` (loaded the first time a type is not found). Such a type is an in-process
extension: :func:`get_type` and ``Update.update_type`` find it, so updates made in memory with its name
apply, compose and verify as built-in ones do, through any engine that runs it. It never enters a file:
§7.1 lets a file name only the specification's types and its own, and a reader refuses any other
(MD402), so mdiff's reader and writer go by ``REGISTRY``/``VERSIONS`` alone. A type that must travel
with files is embedded in them (§7.8, mdiff.updates.embedded).
"""

from __future__ import annotations

from mdiff.updates import delete, dense, low_rank, replace, sparse
from mdiff.updates.base import TYPES, Update, UpdateType

ALL_TYPES: tuple[UpdateType, ...] = (dense.TYPE, dense.TYPE_V2, sparse.TYPE, sparse.TYPE_V2, low_rank.TYPE, replace.TYPE,
                                     delete.TYPE)
REGISTRY: dict[str, UpdateType] = {t.name: t for t in ALL_TYPES if t.version == 1}
VERSIONS: dict[tuple[str, int], UpdateType] = {(t.name, t.version): t for t in ALL_TYPES}
for _kind in ALL_TYPES:
    TYPES.register(_kind, check=False)  # the specification's own names, which third parties may not take


def get_type(name: str, version: int = 1) -> UpdateType:
    """The type of that name and version this process knows: built-in or registered (KeyError otherwise)."""
    return TYPES[(name, version)]


def register_type(kind: UpdateType) -> UpdateType:
    """Adds a third party's update type (in-process only: see above); ValueError for a name of SPEC.md §7
    or §7.8 (`x-…`), or a name and version registered already."""
    return TYPES.register(kind)


def all_types() -> list[UpdateType]:
    """Every version of every type this process knows: the built-in ones, then third parties'."""
    return TYPES.values()


__all__ = ["ALL_TYPES", "REGISTRY", "VERSIONS", "Update", "UpdateType", "all_types", "get_type", "register_type"]
