"""mdiff: incremental changes to model parameters, one HDF5 file per commit.

The public surface is small; everything else is private to the package::

    mdiff.write(path, updates, commit)      # {name: Update} → .mdiff
    mdiff.open(path)                        # → DiffFile: .commit, keys(), [name] → Update
    mdiff.validate(path)                    # → [Finding]
    mdiff.diff(old, new)                    # state dicts (numpy or torch) × 2 → {name: Update}
    mdiff.apply(base, diff)                 # state dict × DiffFile → state dict (numpy or torch, as given)
    mdiff.diff_files(old, new, out)         # checkpoints (files or model folders) → .mdiff
    mdiff.apply_files(base, diff, out)      # checkpoint + .mdiff → checkpoint (file or model folder)

Updates by hand: ``mdiff.dense``, ``mdiff.sparse``, ``mdiff.low_rank``,
``mdiff.replace``, ``mdiff.delete``.

Version control: ``mdiff.Repository.init(dir)`` / ``.find(dir)``, then ``commit``, ``checkout``,
``merge``, ``squash``, ``snapshot``, ``status``, ``diff`` (SPEC.md §13).
"""

__version__ = "0.1.0"

from mdiff.applying import apply_files
from mdiff.applying import apply_mappings as apply
from mdiff.diffing import diff_files
from mdiff.errors import ApplyError, CheckpointError, InvalidFileError, LimitError, MdiffError, RepositoryError
from mdiff.format.commit import Author, Commit
from mdiff.format.findings import Finding
from mdiff.format.limits import Limits
from mdiff.format.reader import DiffFile
from mdiff.format.reader import open_diff as open
from mdiff.format.writer import DiffWriter, write
from mdiff.updates.base import Update
from mdiff.updates.delete import encode as delete
from mdiff.updates.dense import encode as dense
from mdiff.updates.low_rank import encode as low_rank
from mdiff.updates.replace import encode as replace
from mdiff.updates.sparse import encode as sparse
from mdiff.validate import validate
from mdiff.repo import Repository


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
