"""A checkpoint whatever it is, a model folder or one file of a registered format: open or load
it, save a state to it, and the order in which saving fetches tensors."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mdiff.checkpoints.base import CheckpointReader, Entry, Fetch
from mdiff.checkpoints.folder import open_reader as open_folder
from mdiff.checkpoints.folder import WEIGHTS_FORMATS, plan_shards, write_folder
from mdiff.checkpoints.registry import format_module, format_of, is_folder_input, is_folder_output
from mdiff.checkpoints.writing import write_checkpoint
from mdiff.format.layout import Layout


def open_checkpoint(path: str | os.PathLike[str], **options) -> CheckpointReader:
    """Open a checkpoint for lazy reading: a model folder (or its ``*.index.json``), or a file whose
    extension picks the format. ``options`` go to the folder reader (``exclude``, ``max_file_bytes``)."""
    path = os.fspath(path)
    if is_folder_input(path):
        return open_folder(path, **options)
    return format_module(path).open_reader(path)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint, in memory at once (convenient for small files)."""
    with open_checkpoint(path) as reader:
        return {name: reader.read(name) for name in reader.keys()}


def save_state(
    output: str | os.PathLike[str],
    entries: Sequence[Entry],
    fetch: Fetch,
    *,
    files: Mapping[str, bytes] | None = None,
    layout: Layout | None = None,
    template: str | os.PathLike[str] | None = None,
    max_shard_size: int | None = None,
    before_commit: Callable[[], None] | None = None,
    weights_format: str | None = None,
    replace: bool = False,
) -> list[str]:
    """Write a state — tensors, and the files and layout of a model folder — to ``output``: a model
    folder (SPEC.md §10.2) when :func:`is_folder_output`, its weights in ``weights_format``
    (``safetensors`` or ``bin``; default: the layout's), replacing a folder or file there only with
    ``replace`` (``folder.swap_in``); else one checkpoint file, which keeps the layout's tensor order
    and ``__metadata__`` where the layout is one file of exactly these tensors of the output's format
    (so a committed ``.safetensors`` checks out to its own bytes). Returns the paths written (for a
    single file, ``[output]``); files are dropped from a single-file output, which cannot hold them."""
    if is_folder_output(output):
        return write_folder(output, entries, fetch, files or {}, layout, max_shard_size, before_commit,
                            weights_format=weights_format, replace=replace)
    _check_file_format(output, weights_format)
    kept = _single_file_layout(output, entries, layout)
    if kept is not None:
        by_name = {entry[0]: entry for entry in entries}
        entries = [by_name[name] for name in kept.tensors]
    write_checkpoint(output, entries, fetch, kept.metadata if kept else None, template=template,
                     before_commit=before_commit)
    return [os.fspath(output)]


def write_order(
    output: str | os.PathLike[str], entries: Sequence[Entry], layout: Layout | None = None,
    max_shard_size: int | None = None, weights_format: str | None = None,
) -> list[str]:
    """The order in which :func:`save_state` fetches the tensors of ``entries`` (for reading ahead)."""
    if is_folder_output(output):
        plan = plan_shards(entries, layout, max_shard_size, weights_format)
        return [name for shard in plan.shards for name in shard.tensors]
    kept = _single_file_layout(output, entries, layout)
    return list(kept.tensors) if kept is not None else [name for name, _, _ in entries]


def _single_file_layout(output, entries: Sequence[Entry], layout: Layout | None):
    """The layout's one file, when a single output of its format can keep its order and metadata (§10.2): a
    ``.safetensors`` file of a safetensors layout, a ``.pt``/``.pth``/``.bin`` file of a torch layout."""
    if layout is None or len(layout.shards) != 1:
        return None
    fmt = format_of(os.fspath(output))
    if fmt is None or fmt.name != layout.format:
        return None
    shard = layout.shards[0]
    return shard if set(shard.tensors) == {name for name, _, _ in entries} else None


def _check_file_format(output, weights_format: str | None) -> None:
    """A weights format asked of a single file must be the one its extension names."""
    if weights_format is None:
        return
    fmt = format_of(os.fspath(output))
    wanted = WEIGHTS_FORMATS.get(weights_format)
    if wanted is None or fmt is None or fmt.name != wanted:
        raise ValueError(f"weights format {weights_format!r} is for a model folder, or a file of that format; "
                         f"{os.fspath(output)}'s extension chooses its own")
