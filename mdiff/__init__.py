"""mdiff: incremental changes to model parameters, one HDF5 file per commit.

The public surface is small; everything else is private to the package::

    mdiff.write(path, updates, commit)      # {name: Update} → .mdiff
    mdiff.open(path)                        # → DiffFile: .commit, keys(), [name] → Update (checked when used);
                                            #   an fsspec URL (s3://…) is read in place, by byte ranges
    mdiff.validate(path)                    # → [Finding]
    mdiff.diff(old, new)                    # state dicts (numpy or torch) × 2 → {name: Update}
    mdiff.apply(base, diff)                 # state dict × DiffFile → state dict (numpy or torch, as given)
    mdiff.diff_files(old, new, out)         # checkpoints (files or model folders) → .mdiff
    mdiff.apply_files(base, diff, out)      # checkpoint + .mdiff → checkpoint (file or model folder)

Updates by hand: ``mdiff.dense``, ``mdiff.sparse``, ``mdiff.low_rank``,
``mdiff.replace``, ``mdiff.delete``.

Version control: ``mdiff.Repository.init(dir)`` / ``.find(dir)``, then ``commit``, ``checkout``,
``merge``, ``squash``, ``snapshot``, ``status``, ``diff`` (SPEC.md §13); ``mdiff.Repository.open(URL)``
reads a remote in place, without cloning it (§13.9).

Names are imported on first use (PEP 562): ``import mdiff`` costs nothing until they are, so
that the command line starts at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mdiff.version import __version__ as __version__

# public name → (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "apply_files": ("mdiff.applying", "apply_files"),
    "apply": ("mdiff.applying", "apply_mappings"),
    "diff_files": ("mdiff.diffing", "diff_files"),
    "ApplyError": ("mdiff.errors", "ApplyError"),
    "CheckpointError": ("mdiff.errors", "CheckpointError"),
    "InvalidFileError": ("mdiff.errors", "InvalidFileError"),
    "LimitError": ("mdiff.errors", "LimitError"),
    "MdiffError": ("mdiff.errors", "MdiffError"),
    "RepositoryError": ("mdiff.errors", "RepositoryError"),
    "Author": ("mdiff.format.commit", "Author"),
    "Commit": ("mdiff.format.commit", "Commit"),
    "Finding": ("mdiff.format.findings", "Finding"),
    "Limits": ("mdiff.hdf5walk.limits", "Limits"),
    "DiffFile": ("mdiff.format.reader", "DiffFile"),
    "open": ("mdiff.format.reader", "open_file"),
    "DiffWriter": ("mdiff.format.writer", "DiffWriter"),
    "write": ("mdiff.format.writer", "write"),
    "Update": ("mdiff.updates.base", "Update"),
    "delete": ("mdiff.updates.delete", "encode"),
    "dense": ("mdiff.updates.dense", "encode"),
    "low_rank": ("mdiff.updates.low_rank", "encode"),
    "replace": ("mdiff.updates.replace", "encode"),
    "sparse": ("mdiff.updates.sparse", "encode"),
    "validate": ("mdiff.validation", "validate"),
    "Repository": ("mdiff.repo.repository", "Repository"),
}

if TYPE_CHECKING:
    from mdiff.applying import apply_files
    from mdiff.applying import apply_mappings as apply
    from mdiff.diffing import diff_files
    from mdiff.errors import ApplyError, CheckpointError, InvalidFileError, LimitError, MdiffError, RepositoryError
    from mdiff.format.commit import Author, Commit
    from mdiff.format.findings import Finding
    from mdiff.hdf5walk.limits import Limits
    from mdiff.format.reader import DiffFile
    from mdiff.format.reader import open_file as open
    from mdiff.format.writer import DiffWriter, write
    from mdiff.repo.repository import Repository
    from mdiff.updates.base import Update
    from mdiff.updates.delete import encode as delete
    from mdiff.updates.dense import encode as dense
    from mdiff.updates.low_rank import encode as low_rank
    from mdiff.updates.replace import encode as replace
    from mdiff.updates.sparse import encode as sparse
    from mdiff.validation import validate


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mdiff' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


def diff(old, new) -> dict:
    """{name: Update} taking the state ``old`` to ``new`` exactly; unchanged names are omitted. States are
    mappings of name → numpy array or torch tensor (e.g. ``model.state_dict()``; any device, bfloat16 too)."""
    from mdiff.diffing import diff_mappings
    from mdiff.frameworks import numpy_state

    return dict(diff_mappings(numpy_state(old), numpy_state(new)))


__all__ = [
    "ApplyError", "Author", "CheckpointError", "Commit", "DiffFile", "DiffWriter", "Finding", "InvalidFileError",
    "LimitError", "Limits", "MdiffError", "Repository", "RepositoryError", "Update", "apply", "apply_files", "delete", "dense", "diff", "diff_files",
    "low_rank", "open", "replace", "sparse", "validate", "write",
]
