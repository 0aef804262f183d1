"""The update-type registry (SPEC.md §7).

Each type lives in one module that owns its datasets, attribute schema,
checks and math; registering it here is the only other change a new type needs.
"""

from __future__ import annotations

from mdiff.updates import delete, dense, low_rank, replace, sparse
from mdiff.updates.base import Update, UpdateType

REGISTRY: dict[str, UpdateType] = {t.name: t for t in (dense.TYPE, sparse.TYPE, low_rank.TYPE, replace.TYPE, delete.TYPE)}


def get_type(name: str) -> UpdateType:
    return REGISTRY[name]


__all__ = ["REGISTRY", "Update", "UpdateType", "get_type"]
