"""Checkpoint files (SPEC.md §10): the model files a diff is made from or applied to.

Formats live in a registry (:data:`FORMATS`), one module each, chosen by file extension:
``.safetensors``, ``.npz``, PyTorch state dicts (``.pt``, ``.pth``, ``.bin``; needs
``mdiff[torch]``) and the initializers of ONNX models (``.onnx``); a folder (or the path of its
``*.index.json``) is a model folder (SPEC.md §10.1, :mod:`mdiff.checkpoints.folder`): its
weights, shard by shard, and the files beside them. Another package adds a format by
registering a :class:`CheckpointFormat` — with :func:`register_format`, or under the entry-point
group ``mdiff.checkpoint_formats`` — and touches nothing here. Readers are lazy: opening a file
reads and validates its header only, and :meth:`CheckpointReader.read`
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
"""

from __future__ import annotations

import abc
import importlib
import io
import math
import operator
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import BinaryIO, TypeVar

import numpy as np

from mdiff.atomic import atomic_output
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DType, dtype_of
from mdiff.format.layout import Layout

__all__ = [
    "CheckpointFormat",
    "CheckpointReader",
    "Entry",
    "FORMATS",
    "Fetch",
    "is_folder_output",
    "load_checkpoint",
    "open_checkpoint",
    "register_format",
    "save_checkpoint",
    "save_state",
    "supported_extensions",
    "write_checkpoint",
]

Entry = tuple[str, tuple[int, ...], DType]
_Reader = TypeVar("_Reader", bound="CheckpointReader")
Fetch = Callable[[str], np.ndarray]

# numpy 1.x cannot create arrays of more dimensions than this (numpy 2 allows
# 64); refusing more keeps every file we accept loadable by both.
MAX_RANK = 32

# numpy refuses arrays whose byte size (zero dimensions aside) exceeds this.
_MAX_ARRAY_BYTES = int(np.iinfo(np.intp).max)

# Large reads go in slices of this size so that file objects that read via a
# temporary bytes object (zip members) never hold a second copy of a tensor.
_READ_CHUNK = 1 << 24


class CheckpointReader(Mapping):
    """A checkpoint file opened for reading; use as a context manager.

    It is a read-only mapping of name → array in which each access reads that one
    tensor. A reader holds one file position, so it is not safe to share between threads.
    """

    path: str

    @abc.abstractmethod
    def _index(self) -> Mapping[str, object]:
        """Name → whatever the format keeps per tensor (ValueError once closed)."""

    def keys(self) -> list[str]:  # type: ignore[override]  # a sorted list: what every caller wants
        """Tensor names, sorted by Python string order."""
        return sorted(self._index())

    def _entry(self, name: str):
        try:
            return self._index()[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in {self.path}") from None

    @abc.abstractmethod
    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        """Shape and dtype of tensor ``name``, without reading its data."""

    @abc.abstractmethod
    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a C-contiguous array of dtype ``spec(name)[1].value``."""

    @property
    @abc.abstractmethod
    def metadata(self) -> dict[str, str]:
        """The file's free-form string metadata (empty where the format has none)."""

    @property
    def files(self) -> Mapping[str, bytes] | None:
        """The files beside the weights, by path (SPEC.md §5.5) — for a model folder; None for a
        checkpoint that says nothing about files (a single file): a commit of it keeps them as they are."""
        return None

    @property
    def layout(self) -> Layout | None:
        """How the weights are laid out as files (SPEC.md §5.6), where the format has one; else None."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Release the file; further reads fail."""

    def __getitem__(self, name: str) -> np.ndarray:
        return self.read(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index()

    def __len__(self) -> int:
        return len(self._index())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __enter__(self: _Reader) -> _Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# ---------------------------------------------------------------- the registry


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
                     "PyTorch state dicts, torch.load(weights_only=True)"),
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


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def format_of(path: str) -> CheckpointFormat | None:
    """The registered format that claims ``path``'s extension, or None."""
    _load_entry_points()
    suffix = _extension(path)
    return next((fmt for fmt in FORMATS.values() if suffix in fmt.extensions), None)


def supported_extensions() -> list[str]:
    _load_entry_points()
    return [ext for fmt in FORMATS.values() for ext in fmt.extensions]


def is_folder_output(path: str | os.PathLike[str]) -> bool:
    """Whether writing to ``path`` makes a model folder: no registered file extension, a trailing
    separator, or an existing folder."""
    path = os.fspath(path)
    return path.endswith(("/", os.sep)) or os.path.isdir(path) or format_of(path) is None


def _format_module(path: str) -> ModuleType:
    fmt = format_of(path)
    if fmt is None:
        suffix = _extension(path)
        raise CheckpointError(
            "MD700",
            f"unsupported checkpoint extension {suffix or '(none)'!r}; supported: a model folder, or a file "
            f"ending in {', '.join(supported_extensions())} (.pt/.pth/.bin: PyTorch state dicts; .onnx: the "
            "initializers of an ONNX model)",
            path,
        )
    return fmt.load()


def _is_folder_input(path: str) -> bool:
    return os.path.isdir(path) or path.endswith(".index.json")


def open_checkpoint(path: str | os.PathLike[str], **options) -> CheckpointReader:
    """Open a checkpoint for lazy reading: a model folder (or its ``*.index.json``), or a file whose
    extension picks the format. ``options`` go to the folder reader (``exclude``, ``max_file_bytes``)."""
    path = os.fspath(path)
    if _is_folder_input(path):
        from mdiff.checkpoints import folder

        return folder.open_reader(path, **options)
    return _format_module(path).open_reader(path)


def write_checkpoint(
    path: str | os.PathLike[str],
    entries: Sequence[tuple[str, Sequence[int], DType]],
    fetch: Fetch,
    metadata: Mapping[str, str] | None = None,
    *,
    template: str | os.PathLike[str] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> None:
    """Write a checkpoint atomically, fetching one tensor at a time.

    ``entries`` lists ``(name, shape, dtype)`` in file order; ``fetch(name)``
    is called once per entry, in that order, and must return an array of that
    shape and dtype (ValueError otherwise). On any exception no file is left
    behind and an existing ``path`` keeps its previous contents.

    ``template`` is the checkpoint the result derives from (the base of an
    applied diff). Formats that store more than tensors use it: an ``.onnx``
    output is the template model with its initializers replaced, and cannot
    be written without one (MD703). Other formats ignore it.

    ``before_commit`` runs once every tensor is written, before the file takes
    its name: an exception from it leaves no file behind either.
    """
    path = os.fspath(path)
    write = _prepared_writer(path, entries, fetch, metadata, template)  # refusals before any file exists
    with atomic_output(path) as file:
        write(file)
        if before_commit is not None:
            before_commit()


def write_entries(
    file: BinaryIO,
    path: str,
    entries: Sequence[tuple[str, Sequence[int], DType]],
    fetch: Fetch,
    metadata: Mapping[str, str] | None = None,
    template: str | os.PathLike[str] | None = None,
) -> None:
    """Write a checkpoint of the format ``path``'s extension names into an open ``file``, checked as
    :func:`write_checkpoint` checks (a model folder writes its shards so)."""
    _prepared_writer(path, entries, fetch, metadata, template)(file)


def _prepared_writer(path, entries, fetch, metadata, template) -> Callable[[BinaryIO], None]:
    module = _format_module(path)
    checked_entries = _checked_entries(entries)
    checked_metadata = _checked_metadata(metadata)
    if getattr(module, "WRITES_FROM_TEMPLATE", False):
        module.check_writable(checked_entries, checked_metadata, path, template)
    else:
        module.check_writable(checked_entries, checked_metadata, path)
    shapes = {name: (shape, dt) for name, shape, dt in checked_entries}

    def checked_fetch(name: str) -> np.ndarray:
        shape, dt = shapes[name]
        return _canonical_fetched(fetch(name), name, shape, dt)

    return lambda file: module.write(file, checked_entries, checked_fetch, checked_metadata, template)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint, in memory at once (convenient for small files)."""
    with open_checkpoint(path) as reader:
        return {name: reader.read(name) for name in reader.keys()}


def save_checkpoint(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write in-memory tensors; names are sorted so the bytes do not depend on dict order."""
    entries: list[Entry] = []
    for name in sorted(tensors):
        array = tensors[name]
        entries.append((name, tuple(np.shape(array)), _dtype_or_value_error(array, name)))
    write_checkpoint(path, entries, lambda name: tensors[name], metadata)


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
) -> list[str]:
    """Write a state — tensors, and the files and layout of a model folder — to ``output``: a model
    folder (SPEC.md §10.2) when :func:`is_folder_output`, else one checkpoint file, which keeps
    the layout's tensor order and ``__metadata__`` where the layout is one file of exactly these
    tensors (so a committed ``.safetensors`` checks out to its own bytes). Returns the paths
    written (for a single file, ``[output]``); files are dropped from a single-file output, which
    cannot hold them."""
    if is_folder_output(output):
        from mdiff.checkpoints import folder

        return folder.write_folder(output, entries, fetch, files or {}, layout, max_shard_size, before_commit)
    kept = _single_file_layout(output, entries, layout)
    if kept is not None:
        by_name = {entry[0]: entry for entry in entries}
        entries = [by_name[name] for name in kept.tensors]
    write_checkpoint(output, entries, fetch, kept.metadata if kept else None, template=template,
                     before_commit=before_commit)
    return [os.fspath(output)]


def write_order(
    output: str | os.PathLike[str], entries: Sequence[Entry], layout: Layout | None = None,
    max_shard_size: int | None = None,
) -> list[str]:
    """The order in which :func:`save_state` fetches the tensors of ``entries`` (for reading ahead)."""
    if is_folder_output(output):
        from mdiff.checkpoints import folder

        return [name for shard in folder.plan_shards(entries, layout, max_shard_size).shards for name in shard.tensors]
    kept = _single_file_layout(output, entries, layout)
    return list(kept.tensors) if kept is not None else [name for name, _, _ in entries]


def _single_file_layout(output, entries: Sequence[Entry], layout: Layout | None):
    """The layout's one file, when a single .safetensors output can keep its order and metadata (§10.2)."""
    if layout is None or _extension(os.fspath(output)) != ".safetensors" or len(layout.shards) != 1:
        return None
    shard = layout.shards[0]
    return shard if set(shard.tensors) == {name for name, _, _ in entries} else None


# ------------------------------------------------- argument checks (writers)


def _dtype_or_value_error(array: object, name: str) -> DType:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"tensor {name!r} is a {type(array).__name__}, not a numpy array")
    try:
        return dtype_of(array)
    except KeyError:
        raise ValueError(f"tensor {name!r} has dtype {array.dtype}, which mdiff does not support") from None


def _checked_entries(entries: Sequence[tuple[str, Sequence[int], DType]]) -> list[Entry]:
    checked: list[Entry] = []
    seen: set[str] = set()
    for name, shape, dt in entries:
        if not is_valid_name(name):
            raise ValueError(f"tensor name {name!r} is not a non-empty, valid Unicode string")
        if name in seen:
            raise ValueError(f"tensor name {name!r} appears twice")
        if not isinstance(dt, DType):
            raise ValueError(f"dtype of tensor {name!r} is {dt!r}, not an mdiff DType")
        dims = _checked_dims(shape, name)
        if len(dims) > MAX_RANK:
            raise ValueError(f"tensor {name!r} has {len(dims)} dimensions; readers accept at most {MAX_RANK}")
        seen.add(name)
        checked.append((name, dims, dt))
    return checked


def _checked_dims(shape: Sequence[int], name: str) -> tuple[int, ...]:
    # operator.index accepts numpy integers (shapes read from HDF5 are such), not floats.
    try:
        dims = tuple(operator.index(d) for d in shape if not isinstance(d, (bool, np.bool_)))
    except TypeError:
        dims = ()
    if len(dims) != len(shape) or any(d < 0 for d in dims):
        raise ValueError(f"shape of tensor {name!r} is {shape!r}, not non-negative integers")
    return dims


def _checked_metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    for key, value in metadata.items():
        if not (isinstance(key, str) and isinstance(value, str)):
            raise ValueError(f"metadata must map str to str; got {key!r}: {value!r}")
        if not (is_valid_unicode(key) and is_valid_unicode(value)):
            raise ValueError(f"metadata entry {key!r} is not valid Unicode")
    # Sorted: the bytes written must not depend on the mapping's order.
    return {key: metadata[key] for key in sorted(metadata)}


def _canonical_fetched(array: object, name: str, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    actual = _dtype_or_value_error(array, name)
    assert isinstance(array, np.ndarray)
    result: np.ndarray
    if actual.name != dt.name:
        raise ValueError(f"fetch({name!r}) returned dtype {actual.name}, the entry says {dt.name}")
    if tuple(array.shape) != shape:
        raise ValueError(f"fetch({name!r}) returned shape {array.shape}, the entry says {shape}")
    # astype, not ascontiguousarray: the latter turns 0-d arrays into 1-d.
    result = array.astype(dt.value, order="C", copy=False)
    if dt.kind == "bool" and result.size and int(result.view(np.uint8).max()) > 1:
        result = result.view(np.uint8) != 0  # a bool stored as 0x00/0x01 only
    return result


def is_valid_unicode(text: str) -> bool:
    """Whether ``text`` can be stored as UTF-8 (it has no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_valid_name(name: object) -> bool:
    """A tensor name mdiff can carry: a non-empty string of valid Unicode."""
    return isinstance(name, str) and name != "" and is_valid_unicode(name)


# ------------------------------------------------- shared reader helpers


def open_regular_file(path: str) -> io.FileIO:
    """Open ``path`` unbuffered for reading; MD701 unless it is a regular file."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckpointError("MD701", "not a regular file; give the path of a checkpoint file", path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def checked_shape(dims: object, itemsize: int, path: str, name: str) -> tuple[int, ...]:
    """``dims`` as a shape numpy can allocate, or MD701 saying why not."""
    if not isinstance(dims, (list, tuple)):
        raise CheckpointError("MD701", f"tensor {name!r}: shape is {dims!r}, not a list of integers", path)
    if len(dims) > MAX_RANK:
        raise CheckpointError(
            "MD701", f"tensor {name!r} has {len(dims)} dimensions; at most {MAX_RANK} are supported", path
        )
    size = itemsize
    for dim in dims:
        # type() rather than isinstance(): JSON true/false must not pass as 1/0.
        if type(dim) is not int or dim < 0:
            raise CheckpointError(
                "MD701", f"tensor {name!r}: shape {dims!r} is not a list of non-negative integers", path
            )
        size *= max(dim, 1)  # numpy bounds the product of the non-zero dimensions
        if size > _MAX_ARRAY_BYTES:
            raise CheckpointError("MD701", f"tensor {name!r}: shape {dims!r} is too large for any array", path)
    return tuple(dims)


def element_count(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def fill_from(
    readinto: Callable[[memoryview], int | None], target: np.ndarray | bytearray, path: str, name: str
) -> None:
    """Fill a C-contiguous array or a bytearray from a stream; MD701 if the stream ends first."""
    view = target.reshape(-1).view(np.uint8).data if isinstance(target, np.ndarray) else memoryview(target)
    filled = 0
    while filled < len(view):
        count = readinto(view[filled : filled + _READ_CHUNK])
        if not count:
            raise CheckpointError(
                "MD701",
                f"the file ends inside tensor {name!r}; it is truncated or was changed while open",
                path,
            )
        filled += count


def refuse_invalid_bools(array: np.ndarray, path: str, name: str) -> None:
    """A bool is stored as byte 0 or 1; anything else would make numpy misbehave."""
    if array.dtype == np.bool_ and array.size and int(array.view(np.uint8).max()) > 1:
        raise CheckpointError(
            "MD701", f"bool tensor {name!r} holds a byte other than 0 or 1; the file is corrupt", path
        )
