"""Updates a user supplies by hand on the command line: low-rank factors, sparse masks."""

from __future__ import annotations

import os

import numpy as np

from mdiff.checkpoints import load_checkpoint, open_checkpoint
from mdiff.errors import RepositoryError
from mdiff.updates import low_rank
from mdiff.updates.base import Update


def low_rank_updates(factors_path: str | os.PathLike[str], checkpoint_path: str | os.PathLike[str]) -> dict[str, Update]:
    """``low_rank`` updates from a safetensors file of 'A:<name>', 'B:<name>' and optional 'scale:<name>';
    each parameter's shape and dtype come from the checkpoint being committed."""
    factors = load_checkpoint(factors_path)
    names = sorted({key.split(":", 1)[1] for key in factors if ":" in key})
    unknown = [key for key in factors if key.split(":", 1)[0] not in ("A", "B", "scale") or ":" not in key]
    if unknown:
        raise RepositoryError("MD801", f"factor tensors must be named A:<param>, B:<param> or scale:<param>, not {unknown[:3]}")
    updates = {}
    with open_checkpoint(checkpoint_path) as checkpoint:
        for name in names:
            if f"A:{name}" not in factors or f"B:{name}" not in factors:
                raise RepositoryError("MD801", f"parameter {name!r} needs both A:{name} and B:{name}")
            if name not in checkpoint:
                raise RepositoryError("MD801", f"the checkpoint has no parameter {name!r} for its factors")
            shape, dtype = checkpoint.spec(name)
            scale = float(factors[f"scale:{name}"]) if f"scale:{name}" in factors else 1.0
            updates[name] = low_rank.encode(factors[f"A:{name}"], factors[f"B:{name}"], shape, dtype, scale)
    return updates


def sparse_masks(mask_path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    masks = load_checkpoint(mask_path)
    not_bool = [name for name, m in masks.items() if m.dtype != np.bool_]
    if not_bool:
        raise RepositoryError("MD801", f"sparse masks must be bool tensors; {not_bool[:3]} are not")
    return masks
