"""The update-type registry (SPEC.md §7).

Each type lives in one module that owns its datasets, attribute schema,
checks and math; registering it here is the only other change a new type needs.
A type with several versions (§7.1 `version`) registers each: ``REGISTRY`` names a type's
version 1, ``VERSIONS`` every version of every type.
"""

from __future__ import annotations

from mdiff.updates import delete, dense, low_rank, replace, sparse
from mdiff.updates.base import Update, UpdateType

ALL_TYPES: tuple[UpdateType, ...] = (dense.TYPE, dense.TYPE_V2, sparse.TYPE, sparse.TYPE_V2, low_rank.TYPE, replace.TYPE,
                                     delete.TYPE)
REGISTRY: dict[str, UpdateType] = {t.name: t for t in ALL_TYPES if t.version == 1}
VERSIONS: dict[tuple[str, int], UpdateType] = {(t.name, t.version): t for t in ALL_TYPES}


def get_type(name: str, version: int = 1) -> UpdateType:
    return VERSIONS[(name, version)]


__all__ = ["ALL_TYPES", "REGISTRY", "VERSIONS", "Update", "UpdateType", "get_type"]
