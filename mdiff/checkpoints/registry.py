"""Which format reads or writes a path: the registry of checkpoint formats (the built-in ones,
:func:`register_format`, the entry-point group ``mdiff.checkpoint_formats``), chosen by file
extension, and whether a path names a model folder instead."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType

from mdiff.errors import CheckpointError


@dataclass(frozen=True)
class CheckpointFormat:
    """A checkpoint format: its name, the file extensions it claims, and the module that reads
    and writes it (imported on first use, so that e.g. torch is imported only for ``.pt`` files).

    The module provides ``open_reader(path) -> CheckpointReader``, ``check_writable(entries,
    metadata, path)`` and ``write(file, entries, fetch, metadata, template)``; a module whose output
    is derived from the base checkpoint sets ``WRITES_FROM_TEMPLATE = True`` and takes ``template``
    in ``check_writable`` too (``.onnx``)."""

    name: str
    extensions: tuple[str, ...]
    module: str
    description: str = ""

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


FORMATS: dict[str, CheckpointFormat] = {}


def register_format(fmt: CheckpointFormat) -> None:
    """Add a checkpoint format; its extensions must not be claimed already."""
    claimed = {ext for other in FORMATS.values() if other.name != fmt.name for ext in other.extensions}
    if claimed & set(fmt.extensions):
        raise ValueError(f"extensions {sorted(claimed & set(fmt.extensions))} are claimed already")
    FORMATS[fmt.name] = fmt


for _fmt in (
    CheckpointFormat("safetensors", (".safetensors",), "mdiff.checkpoints.safetensors", "safetensors, every dtype"),
    CheckpointFormat("npz", (".npz",), "mdiff.checkpoints.npz", "NumPy archives, never unpickled"),
    CheckpointFormat("torch", (".pt", ".pth", ".bin"), "mdiff.checkpoints.torch_pt",
                     "PyTorch state dicts, never unpickled (torch's zip format read without torch)"),
    CheckpointFormat("onnx", (".onnx",), "mdiff.checkpoints.onnx_model", "the initializers of an ONNX model"),
):
    register_format(_fmt)

_ENTRY_POINT_GROUP = "mdiff.checkpoint_formats"
_entry_points_loaded = False


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for point in entry_points(group=_ENTRY_POINT_GROUP):
        register_format(point.load())


def extension(path: str) -> str:
    """``path``'s extension, lower-cased, with its dot (``.safetensors``)."""
    return os.path.splitext(path)[1].lower()


def format_of(path: str) -> CheckpointFormat | None:
    """The registered format that claims ``path``'s extension, or None."""
    _load_entry_points()
    suffix = extension(path)
    return next((fmt for fmt in FORMATS.values() if suffix in fmt.extensions), None)


def supported_extensions() -> list[str]:
    _load_entry_points()
    return [ext for fmt in FORMATS.values() for ext in fmt.extensions]


def is_folder_output(path: str | os.PathLike[str]) -> bool:
    """Whether writing to ``path`` makes a model folder: no registered file extension, a trailing
    separator, or an existing folder."""
    path = os.fspath(path)
    return path.endswith(("/", os.sep)) or os.path.isdir(path) or format_of(path) is None


def format_module(path: str) -> ModuleType:
    """The module of the format that claims ``path``'s extension; MD700 where none does."""
    fmt = format_of(path)
    if fmt is None:
        suffix = extension(path)
        raise CheckpointError(
            "MD700",
            f"unsupported checkpoint extension {suffix or '(none)'!r}; supported: a model folder, or a file "
            f"ending in {', '.join(supported_extensions())} (.pt/.pth/.bin: PyTorch state dicts; .onnx: the "
            "initializers of an ONNX model)",
            path,
        )
    return fmt.load()


def is_folder_input(path: str) -> bool:
    """Whether reading ``path`` reads a model folder: a folder, or the path of its ``*.index.json``."""
    return os.path.isdir(path) or path.endswith(".index.json")
