"""Checkpoint files (SPEC.md §10): the model files a diff is made from or applied to.

Formats live in a registry (:data:`FORMATS`), one module each, chosen by file extension:
``.safetensors``, ``.npz``, PyTorch state dicts (``.pt``, ``.pth``, ``.bin``; writing one, or
reading a legacy one, needs ``mdiff[torch]``) and the initializers of ONNX models (``.onnx``); a folder (or the path of its
``*.index.json``) is a model folder (SPEC.md §10.1, :mod:`mdiff.checkpoints.folder`): its
weights, shard by shard, and the files beside them. Another package adds a format by
registering a :class:`CheckpointFormat` — with :func:`register_format`, or under the entry-point
group ``mdiff.checkpoint_formats`` — and touches nothing here. Readers are lazy: opening a file
reads and validates its header only (a PyTorch file's pickle), and :meth:`CheckpointReader.read`
reads the bytes of one tensor, so a checkpoint larger than memory can be
processed one tensor at a time (``.onnx`` files, and legacy non-zip ``.pt``
files, are held in memory whole; see their modules).

Readers fail closed. Whatever a file holds, reading it raises
:class:`~mdiff.errors.CheckpointError` (MD700 unsupported format, MD701
malformed file, MD702 unsupported dtype) rather than another exception,
never allocates more than the file can justify and never reads outside it.
Errors from the operating system (a missing file, no permission) are not
about the file's contents and stay ``OSError``.

Writers are streaming, atomic and deterministic: ``fetch`` is asked for one
tensor at a time, the file appears under its name only once complete, and
the same inputs always give the same bytes. (``.pt`` writers fetch every
tensor before writing, since ``torch.save`` needs the whole dict; ``.onnx``
writers need the base model as ``template``.)

This module is the package's face; the work is done in :mod:`~mdiff.checkpoints.dispatch` (a folder
or a file), :mod:`~mdiff.checkpoints.registry` (which format), :mod:`~mdiff.checkpoints.writing`,
:mod:`~mdiff.checkpoints.base` (the reader a format implements) and
:mod:`~mdiff.checkpoints.reading` (the checks its reader shares), below the format modules.
"""

from __future__ import annotations

from mdiff.checkpoints.base import CheckpointReader, Entry, Fetch
from mdiff.checkpoints.dispatch import load_checkpoint, open_checkpoint, save_state, write_order
from mdiff.checkpoints.registry import (
    FORMATS,
    CheckpointFormat,
    format_of,
    is_folder_input,
    is_folder_output,
    register_format,
    supported_extensions,
)
from mdiff.checkpoints.writing import save_checkpoint, write_checkpoint


__all__ = [
    "CheckpointFormat",
    "CheckpointReader",
    "Entry",
    "FORMATS",
    "Fetch",
    "format_of",
    "is_folder_input",
    "is_folder_output",
    "load_checkpoint",
    "open_checkpoint",
    "register_format",
    "save_checkpoint",
    "save_state",
    "supported_extensions",
    "write_checkpoint",
    "write_order",
]
