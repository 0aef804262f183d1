"""Model folders (SPEC.md §10.1–§10.2): a Hugging Face ``save_pretrained`` folder as one checkpoint.

Reading: the weights come from the first of ``model.safetensors.index.json`` (+ its shards),
``model.safetensors``, ``pytorch_model.bin.index.json`` (+ shards), ``pytorch_model.bin``; each
shard is opened by its own format's lazy reader, so a tensor is read from its shard when asked
for and a sharded model is never in memory at once. Every other regular file is a file of the
state (config, tokenizer, README, …), read only when asked for. An index that disagrees with its
shards is MD704; a link out of the folder, a FIFO or device, an unsafe path, or a file over the
size limit is MD705 — all found on open, before anything is read.

Writing: into a hidden temporary folder beside the target, every entry created anew (never
through a link), then renamed into place once complete.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mdiff.atomic import SyncingWriter, exchange, fsync_directory, naming
from mdiff.checkpoints.base import CheckpointReader, Entry, Fetch
from mdiff.checkpoints.registry import format_module
from mdiff.checkpoints.writing import write_entries, write_named_entries, writes_by_name
from mdiff.errors import CheckpointError, UnsafeOutputError
from mdiff.format.dtypes import DType
from mdiff.format.layout import FORMAT, INDEX_SUFFIX, SUFFIXES, TORCH, Layout, Shard
from mdiff.format.paths import collisions, matches_glob, path_problem
from mdiff.regular_files import kind_of

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
TORCH_INDEX = "pytorch_model.bin.index.json"
TORCH_SINGLE = "pytorch_model.bin"
# In the order transformers prefers them (§10.1 step 1): (index, single file).
WEIGHT_KINDS = ((SAFETENSORS_INDEX, SAFETENSORS_SINGLE), (TORCH_INDEX, TORCH_SINGLE))
# Named like weights of step 1: never versioned as files.
_WEIGHT_PATTERNS = ("model*.safetensors", "model*.safetensors.index.json", "pytorch_model*.bin",
                    "pytorch_model*.bin.index.json")
# What transformers' Trainer saves beside a checkpoint to resume training (§10.1 step 2).
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth", "training_args.bin")

DEFAULT_MAX_FILE_BYTES = 128 << 20  # §10.1: larger files are weights or training state, not configuration
DEFAULT_MAX_SHARD_BYTES = 50_000_000_000  # save_pretrained's default max_shard_size, "50GB"
_MAX_INDEX_BYTES = 256 << 20
_READ_BLOCK = 1 << 20


def open_reader(path: str, exclude: Sequence[str] = (), max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> ModelFolderReader:
    return ModelFolderReader(path, exclude, max_file_bytes)


# ---------------------------------------------------------------- reading


class ModelFolderReader(CheckpointReader):
    """A model folder: its weights, shard by shard, and the files beside them (SPEC.md §10.1)."""

    def __init__(self, path: str, exclude: Sequence[str] = (), max_file_bytes: int = DEFAULT_MAX_FILE_BYTES):
        folder, index_name = _folder_and_index(path)
        self.path = folder
        self._guard = _LinkGuard(folder)
        self._shards: dict[str, CheckpointReader] = {}
        try:
            self._weights = _choose_weights(folder, index_name, self._guard)
            self._where = self._open_shards()
            ignored = set(self._weights.files) | ({self._weights.index} if self._weights.index else set())
            self._files = FolderFiles(folder, self._guard, ignored, tuple(exclude), max_file_bytes)
        except BaseException:
            self.close()
            raise

    def _open_shards(self) -> dict[str, str]:
        """Open every shard; tensor name → shard, checked against the index (MD704)."""
        where: dict[str, str] = {}
        for shard in self._weights.files:
            reader = format_module(shard).open_reader(self._guard.resolve(shard, "MD704"))
            self._shards[shard] = reader
            for name in reader.keys():
                if name in where:
                    raise CheckpointError("MD704", f"tensor {name!r} is in {where[name]} and in {shard}", self.path)
                where[name] = shard
        weight_map = self._weights.weight_map
        if weight_map is not None:
            for name, shard in sorted(where.items()):
                if name not in weight_map:
                    raise CheckpointError("MD704", f"{shard} holds tensor {name!r}, which the index does not name",
                                          self.path)
                if weight_map[name] != shard:
                    raise CheckpointError("MD704", f"the index puts tensor {name!r} in {weight_map[name]}, but "
                                                   f"{shard} holds it", self.path)
            for name, shard in sorted(weight_map.items()):
                if name not in where:
                    raise CheckpointError("MD704", f"the index puts tensor {name!r} in {shard}, which does not "
                                                   "hold it", self.path)
        return where

    def _index(self) -> dict[str, str]:
        return self._where

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self._shards[self._entry(name)].spec(name)

    def read(self, name: str) -> np.ndarray:
        return self._shards[self._entry(name)].read(name)

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    @property
    def files(self) -> FolderFiles:
        return self._files

    @property
    def not_versioned(self) -> list[str]:
        """What the folder holds besides its weights and its files (§10.1 step 2), sorted: hidden entries (a
        hidden folder as ``NAME/``, not looked into), other files named like weights, training state, and what
        ``exclude`` left out."""
        return sorted(self._files.skipped)

    @property
    def layout(self) -> Layout | None:
        """The weights' layout (§5.6): shards in path order, each with its tensor order (and, for
        safetensors, its ``__metadata__``); the index's path and ``metadata``. For PyTorch ``.bin``
        weights a ``torch`` layout (revision 11), so that a checkout writes ``.bin`` files again; None
        for an index whose name no layout can hold (``*.index.json`` not ending in ``.bin.index.json``)."""
        weights = self._weights
        if not weights.files:
            return None
        torch = weights.files[0].endswith(".bin")
        if torch and weights.index is not None and not weights.index.endswith(SUFFIXES[TORCH][1]):
            return None
        shards = []
        for path in sorted(weights.files):
            reader = self._shards[path]
            if torch:
                shards.append(Shard(path, tuple(reader.order), None))  # type: ignore[attr-defined]  # torch readers have it
            else:
                own = reader.layout
                assert own is not None  # a safetensors reader always has one
                single = own.shards[0]  # the shard's own order and metadata
                shards.append(Shard(path, single.tensors, single.metadata))
        fmt = TORCH if torch else FORMAT
        if weights.index is None:
            return Layout(tuple(shards), format=fmt)
        return Layout(tuple(shards), weights.index, weights.index_metadata or {}, fmt)

    @property
    def weight_files(self) -> list[str]:
        """The weight files read, the index first when there is one (paths relative to the folder)."""
        return ([self._weights.index] if self._weights.index else []) + list(self._weights.files)

    def close(self) -> None:
        for reader in self._shards.values():
            reader.close()


@dataclass(frozen=True)
class _Weights:
    index: str | None  # the index file's name, when sharded
    files: tuple[str, ...]  # the weight files, in the folder
    weight_map: dict[str, str] | None
    index_metadata: dict | None


def _folder_and_index(path: str) -> tuple[str, str | None]:
    if os.path.isdir(path):
        return path, None
    folder, name = os.path.split(path)
    folder = folder or "."
    if name not in (SAFETENSORS_INDEX, TORCH_INDEX) and not name.endswith(".index.json"):
        raise CheckpointError("MD700", "give a model folder, or the path of its *.index.json", path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "No such folder", folder)
    return folder, name


def _choose_weights(folder: str, index_name: str | None, guard: _LinkGuard) -> _Weights:
    if index_name is not None:
        return _read_index(folder, index_name, guard)
    for index, single in WEIGHT_KINDS:
        has_index, has_single = _exists(folder, index), _exists(folder, single)
        if has_index and has_single:
            raise CheckpointError("MD704", f"the folder holds both {index} and {single}; which are the weights? "
                                           f"Remove one, or give the path of {index}", folder)
        if has_index:
            return _read_index(folder, index, guard)
        if has_single:
            return _Weights(None, (single,), None, None)
    raise CheckpointError(
        "MD704", f"no weights: the folder holds none of {', '.join(n for kind in WEIGHT_KINDS for n in kind)}", folder
    )


def _exists(folder: str, name: str) -> bool:
    return os.path.lexists(os.path.join(folder, name))


def _read_index(folder: str, name: str, guard: _LinkGuard) -> _Weights:
    data = guard.read(name, _MAX_INDEX_BYTES, "MD704")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError("MD704", f"{name} is not a UTF-8 JSON text: {exc}", folder) from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in weight_map.items()):
        raise CheckpointError("MD704", f"{name} has no weight_map of tensor name → shard file name", folder)
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict):
        raise CheckpointError("MD704", f"{name}: metadata is not an object", folder)
    suffix = ".safetensors" if name.endswith(INDEX_SUFFIX) else ".bin"
    shards = sorted(set(weight_map.values()))
    for shard in shards:
        problem = path_problem(shard)
        if problem or "/" in shard:
            raise CheckpointError("MD705", f"{name} names shard {shard!r}: {problem or 'not a file of this folder'}",
                                  folder)
        if not shard.endswith(suffix):
            raise CheckpointError("MD704", f"{name} names shard {shard!r}, which is not a {suffix} file", folder)
        if not _exists(folder, shard):
            raise CheckpointError("MD704", f"{name} names shard {shard}, which is missing from the folder", folder)
    return _Weights(name, tuple(shards), weight_map, metadata)


class _LinkGuard:
    """Opens entries of a folder, following a symbolic link only where §10.1 allows: to a regular file
    inside the folder, or, in a Hugging Face cache snapshot, inside the cache's ``blobs/``."""

    def __init__(self, folder: str):
        self.folder = folder
        real = os.path.realpath(folder)
        self.roots = [real]
        parent = os.path.dirname(real)
        if os.path.basename(parent) == "snapshots":
            self.roots.append(os.path.join(os.path.dirname(parent), "blobs"))

    def resolve(self, relative: str, code: str = "MD705") -> str:
        """The path to open for ``relative``, a regular file (MD705 — or ``code`` — otherwise): the entry
        itself, or the target of an allowed link, resolved (so that opening it follows no further link)."""
        path = os.path.join(self.folder, relative)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise CheckpointError(code, f"{relative} is missing", self.folder) from None
        if stat.S_ISLNK(info.st_mode):
            target = os.path.realpath(path)
            if not any(os.path.commonpath([target, root]) == root for root in self.roots):
                raise CheckpointError("MD705", f"{relative} is a link to {target}, outside the folder; mdiff does not "
                                               "follow it (it could bring any file into the history)", self.folder)
            path, info = target, os.stat(target)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError("MD705", f"{relative} is not a regular file", self.folder)
        return path

    def read(self, relative: str, limit: int, code: str = "MD705") -> bytes:
        """The bytes of ``relative``, at most ``limit`` of them (MD705 beyond)."""
        path = self.resolve(relative, code)
        # O_NOFOLLOW: an entry swapped for a link since it was resolved is refused, not followed
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CheckpointError("MD705", f"{relative} became a link while it was read", self.folder) from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since resolve: not followed
                raise CheckpointError("MD705", f"{relative} is not a regular file", self.folder)
            chunks: list[bytes] = []
            size = 0
            while True:
                block = os.read(fd, _READ_BLOCK)
                if not block:
                    return b"".join(chunks)
                size += len(block)
                if size > limit:
                    raise CheckpointError("MD705", f"{relative} is larger than {limit} bytes", self.folder)
                chunks.append(block)
        finally:
            os.close(fd)


class FolderFiles(Mapping[str, bytes]):
    """The files of a model folder beside its weights (SPEC.md §10.1 step 2), by path; listed and
    checked on open (MD705), each read when asked for."""

    def __init__(self, folder: str, guard: _LinkGuard, ignored: set[str], exclude: tuple[str, ...], max_file_bytes: int):
        self.folder = folder
        self._guard = guard
        self._max = max_file_bytes
        self._sizes: dict[str, int] = {}
        self.skipped: list[str] = []  # what is not versioned, besides the weights read
        for relative, info in _walk(folder, guard, self.skipped):
            if relative in ignored:
                continue
            if matches_glob(relative, _WEIGHT_PATTERNS + TRAINING_STATE + exclude):
                self.skipped.append(relative)
                continue
            problem = path_problem(relative)
            if problem:
                raise CheckpointError("MD705", f"{relative!r} cannot be versioned: {problem}", folder)
            if info.st_size > max_file_bytes:
                raise CheckpointError(
                    "MD705", f"{relative} has {info.st_size} bytes; files beside the weights are versioned up to "
                             f"{max_file_bytes} (weights belong in the model's weight files; leave it out with "
                             f"--exclude {relative!r}, or raise the limit)", folder)
            self._sizes[relative] = info.st_size
        clash = collisions(self._sizes)
        if clash:
            path, other, why = clash[0]
            raise CheckpointError("MD705", f"{path!r} and {other!r}: {why}", folder)

    def __getitem__(self, path: str) -> bytes:
        if path not in self._sizes:
            raise KeyError(path)
        return self._guard.read(path, self._max)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._sizes))

    def __len__(self) -> int:
        return len(self._sizes)

    def size(self, path: str) -> int:
        return self._sizes[path]

    def sha256(self, path: str) -> str:
        return hashlib.sha256(self[path]).hexdigest()


def _walk(folder: str, guard: _LinkGuard, hidden: list[str]) -> Iterator[tuple[str, os.stat_result]]:
    """(path relative to ``folder``, stat of what it names) of every file below it, hidden entries
    skipped — and added to ``hidden``, a folder as ``NAME/`` (what is below it is not looked at); MD705 for
    a FIFO, socket or device, a link to a folder, or a link out."""
    pending = [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(os.path.join(folder, prefix) if prefix else folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                relative = f"{prefix}/{entry.name}" if prefix else entry.name
                if entry.name.startswith("."):
                    hidden.append(relative + ("/" if entry.is_dir(follow_symlinks=False) else ""))
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(relative)
                elif entry.is_symlink():
                    if os.path.isdir(entry.path):
                        raise CheckpointError("MD705", f"{relative} is a link to a folder; mdiff does not follow it",
                                              folder)
                    yield relative, os.stat(guard.resolve(relative))
                elif entry.is_file(follow_symlinks=False):
                    yield relative, entry.stat(follow_symlinks=False)
                else:
                    raise CheckpointError("MD705", f"{relative} is neither a regular file nor a folder (a FIFO, "
                                                   "socket or device)", folder)


# ---------------------------------------------------------------- writing


# The weights a checkout writes (--format): the choice → the layout's format (§5.6).
WEIGHTS_FORMATS = {"safetensors": FORMAT, "bin": TORCH}


def layout_format(weights_format: str | None, layout: Layout | None) -> str:
    """The layout format a folder is written in: ``weights_format`` (``safetensors`` or ``bin``) when given,
    else the committed layout's, else safetensors."""
    if weights_format is not None:
        if weights_format not in WEIGHTS_FORMATS:
            raise ValueError(f"weights format {weights_format!r}: choose one of {', '.join(WEIGHTS_FORMATS)}")
        return WEIGHTS_FORMATS[weights_format]
    return layout.format if layout is not None else FORMAT


def plan_shards(entries: Sequence[Entry], layout: Layout | None, max_shard_bytes: int | None,
                weights_format: str | None = None) -> Layout:
    """The layout to write: ``layout`` when it holds exactly the state's tensors (§10.2) — renamed into the
    other format's files when ``weights_format`` asks for it —, else shards of at most ``max_shard_bytes`` of
    tensor data filled in name order, as save_pretrained names them."""
    fmt = layout_format(weights_format, layout)
    names = {name for name, _, _ in entries}
    if layout is not None and layout.tensors == names:
        return layout if layout.format == fmt else _converted(layout, fmt, entries)
    limit = max_shard_bytes or DEFAULT_MAX_SHARD_BYTES
    groups: list[list[Entry]] = [[]]
    used = 0
    for entry in sorted(entries, key=lambda e: e[0]):
        nbytes = math.prod(entry[1]) * entry[2].itemsize
        if groups[-1] and used + nbytes > limit:
            groups.append([])
            used = 0
        groups[-1].append(entry)
        used += nbytes
    if fmt == TORCH:  # transformers 4's names; a state dict's tensors in name order
        if len(groups) == 1:
            return Layout((Shard(TORCH_SINGLE, tuple(name for name, _, _ in groups[0]), None),), format=TORCH)
        return Layout(tuple(Shard(f"pytorch_model-{i:05d}-of-{len(groups):05d}.bin",
                                  tuple(name for name, _, _ in group), None) for i, group in enumerate(groups, 1)),
                      TORCH_INDEX, {}, TORCH)
    if len(groups) == 1:
        return Layout((Shard(SAFETENSORS_SINGLE, _safetensors_order(groups[0]), {"format": "pt"}),))
    shards = tuple(Shard(f"model-{i:05d}-of-{len(groups):05d}.safetensors", _safetensors_order(group), {"format": "pt"})
                   for i, group in enumerate(groups, 1))
    return Layout(shards, SAFETENSORS_INDEX, {})


def _converted(layout: Layout, fmt: str, entries: Sequence[Entry]) -> Layout:
    """``layout``'s shards as files of the other format: ``model*.safetensors`` ↔ ``pytorch_model*.bin`` (and
    their index), the same tensors in each; safetensors files in the order the safetensors library writes, with
    ``{"format": "pt"}`` as ``__metadata__``, ``.bin`` files in the layout's order."""
    by_name = {entry[0]: entry for entry in entries}
    shards = []
    for shard in layout.shards:
        if fmt == TORCH:
            shards.append(Shard(_renamed(shard.path, fmt), shard.tensors, None))
        else:
            order = _safetensors_order([by_name[name] for name in shard.tensors])
            shards.append(Shard(_renamed(shard.path, fmt), order, {"format": "pt"}))
    index = None
    if layout.index_path is not None:
        index = _renamed(layout.index_path.removesuffix(".index.json"), fmt) + ".index.json"
    return Layout(tuple(shards), index, layout.index_metadata if index else None, fmt)


def _renamed(path: str, fmt: str) -> str:
    """A weights file's path in the other format: ``model-00001-of-00002.safetensors`` ↔
    ``pytorch_model-00001-of-00002.bin``; a file named otherwise keeps its name, with the other suffix."""
    folder, _, name = path.rpartition("/")
    if fmt == TORCH:
        stem = name.removesuffix(SUFFIXES[FORMAT][0])
        name = ("pytorch_" + stem if stem.startswith("model") else stem) + SUFFIXES[TORCH][0]
    else:
        stem = name.removesuffix(SUFFIXES[TORCH][0])
        name = stem.removeprefix("pytorch_") if stem.startswith("pytorch_model") else stem
        name += SUFFIXES[FORMAT][0]
    return f"{folder}/{name}" if folder else name


def _safetensors_order(group: Sequence[Entry]) -> tuple[str, ...]:
    """The order the safetensors library writes tensors in: wider dtypes first, then by name."""
    return tuple(name for name, _, _ in sorted(group, key=lambda e: (-e[2].itemsize, e[0])))


def index_text(layout: Layout, entries: Sequence[Entry]) -> str:
    """The index file (§10.2): the layout's metadata with ``total_size`` recomputed, and the weight map,
    as transformers writes it (two-space indentation, sorted members, a final newline)."""
    metadata = dict(layout.index_metadata or {})
    if "total_size" in metadata or not metadata:
        metadata["total_size"] = sum(math.prod(shape) * dt.itemsize for _, shape, dt in entries)
    weight_map = {name: shard.path for shard in layout.shards for name in shard.tensors}
    return json.dumps({"metadata": metadata, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"


def write_folder(
    output: str | os.PathLike[str],
    entries: Sequence[Entry],
    fetch: Fetch,
    files: Mapping[str, bytes],
    layout: Layout | None,
    max_shard_bytes: int | None = None,
    before_commit: Callable[[], None] | None = None,
    *,
    weights_format: str | None = None,
    replace: bool = False,
) -> list[str]:
    """Write a state as a model folder (SPEC.md §10.2); return the paths written, relative to it.

    The weights are written in ``weights_format`` (``safetensors`` or ``bin``), by default in the committed
    layout's format. Refuses (before writing anything) an output that exists and is not an empty folder —
    unless ``replace``: the folder is then written beside it and swapped in (:func:`swap_in`) —, paths that
    collide (MD304), and ``.bin`` weights without PyTorch (MD700). ``fetch`` is asked for each tensor once,
    shard by shard.
    """
    target = os.fspath(output).rstrip("/" + os.sep) or os.fspath(output)
    plan = plan_shards(entries, layout, max_shard_bytes, weights_format)
    written = [shard.path for shard in plan.shards] + ([plan.index_path] if plan.index_path else [])
    paths = written + sorted(files)
    for path in paths:
        problem = path_problem(path)
        if problem:
            raise CheckpointError("MD304", f"the state's path {path!r}: {problem}", target)
    clash = collisions(paths)
    if clash:
        raise CheckpointError("MD304", f"the state's paths {clash[0][0]!r} and {clash[0][1]!r}: {clash[0][2]}", target)
    if plan.format == TORCH and plan.shards:
        _require_torch(target, weights_format)
    if replace:
        check_replaceable(target)
    else:
        _refuse_existing(target)
    parent = os.path.dirname(os.path.abspath(target))
    with naming(target, doing=f"cannot create a folder in {parent}"):
        staging = _make_staging_folder(parent, os.path.basename(os.path.abspath(target)))
    try:
        with naming(target, staging):  # an error names the output's path, never the staging folder's
            by_name = {entry[0]: entry for entry in entries}
            for shard in plan.shards:
                shard_entries = [by_name[name] for name in shard.tensors]
                if writes_by_name(shard.path):  # torch names the archive's folder after the file it writes
                    with _new_file_by_path(staging, shard.path) as named:
                        write_named_entries(named, shard.path, shard_entries, fetch, shard.metadata)
                else:
                    with _new_file(staging, shard.path) as file:
                        write_entries(file, shard.path, shard_entries, fetch, shard.metadata, None)
            if plan.index_path:
                with _new_file(staging, plan.index_path) as file:
                    file.write(index_text(plan, entries).encode("utf-8"))
            for path in sorted(files):
                with _new_file(staging, path) as file:
                    file.write(files[path])
            if before_commit is not None:
                before_commit()
            _fsync_tree(staging)
            if replace:
                swap_in(staging, target)
            else:
                _refuse_existing(target)
                if os.path.isdir(target):
                    os.rmdir(target)  # empty, checked just above
                os.replace(staging, target)
    except BaseException:
        _remove_tree(staging)
        raise
    fsync_directory(parent)
    return paths


def _require_torch(target: str, weights_format: str | None) -> None:
    """MD700 before anything is written, when ``.bin`` weights are to be written without PyTorch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        why = "--format bin asks for PyTorch .bin weights" if weights_format else \
            "the state's weights are PyTorch .bin files, as its layout records (a pytorch_model*.bin folder committed)"
        raise CheckpointError("MD700", f"{why}, and writing them needs PyTorch, which is not installed: pip install "
                                       "'mdiff[torch]', or write .safetensors instead (checkout --format safetensors; "
                                       "weights_format='safetensors')", target) from None


def check_replaceable(target: str) -> None:
    """What ``--force`` may replace: nothing, a folder or a regular file — not a link, a device, a FIFO or a
    socket, and not a folder that holds the current folder (MD706)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        here, there = os.path.realpath(os.getcwd()), os.path.realpath(target)
        if os.path.commonpath([here, there]) == there:
            raise UnsafeOutputError("MD706", "the output is the current folder or holds it; replacing it would "
                                             "remove the folder this command runs in", target)
        return
    if not stat.S_ISREG(mode):
        raise UnsafeOutputError("MD706", f"the output exists and is {kind_of(mode)}: --force replaces a folder or a "
                                         "regular file, nothing else", target)


def swap_in(new: str, target: str) -> None:
    """Put the complete folder ``new`` (a sibling of ``target``) at ``target``, replacing the folder or file
    there (``check_replaceable``): the two are exchanged in one step where the system can (``atomic.exchange``),
    else the old entry is renamed aside and ``new`` renamed into its place, the old one renamed back should that
    fail. The old entry is removed last. A failure at any point leaves at ``target`` the old entry or the new
    folder, whole — never a mix; only a crash between the two renames of the fallback leaves nothing there, the
    old entry beside it under a hidden name."""
    check_replaceable(target)
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.lexists(target):
        os.rename(new, target)
        return
    if exchange(new, target):
        old = new  # now names what target named
    else:
        old = _make_staging_folder(parent, os.path.basename(os.path.abspath(target)) + ".old")
        os.rmdir(old)  # a free, unique name: rename takes a file there, not into it
        os.rename(target, old)
        try:
            os.rename(new, target)
        except BaseException:
            os.rename(old, target)
            raise
    fsync_directory(parent)
    if os.path.isdir(old) and not os.path.islink(old):
        _remove_tree(old)
    else:
        os.unlink(old)


def _refuse_existing(target: str) -> None:
    """MD706 unless ``target`` is nothing or an empty folder (not a link to one): a model folder replaces
    nothing else."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        if not os.listdir(target):
            return
        raise UnsafeOutputError("MD706", "the output exists and is a folder that is not empty: a model folder is "
                                         "written as a new folder, or into an empty one; remove it or choose "
                                         "another", target)
    raise UnsafeOutputError("MD706", f"the output exists and is {kind_of(mode)}: a path without a checkpoint "
                                     "extension is written as a model folder, new or empty; give one, or a "
                                     "file name ending in .safetensors, .npz, .pt or .onnx", target)


def _make_staging_folder(parent: str, name: str) -> str:
    if not os.path.isdir(parent):
        raise FileNotFoundError(2, "the folder to write into does not exist; create it first", parent)
    for _ in range(100):
        staging = os.path.join(parent, f".{name[:200]}.{secrets.token_hex(8)}.tmp")
        try:
            os.mkdir(staging, 0o777)  # the umask decides, as for any folder
            return staging
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary folder in {parent}")


def _parent_of(root: str, parts: list[str]) -> str:
    """The folder below ``root`` that holds ``parts``' last entry, its folders made here (never followed)."""
    directory = root
    for part in parts[:-1]:
        directory = os.path.join(directory, part)
        if not os.path.isdir(directory) or os.path.islink(directory):
            os.mkdir(directory, 0o777)
    return directory


@contextlib.contextmanager
def _new_file(root: str, relative: str) -> Iterator[SyncingWriter]:
    """A file created anew at ``relative`` below ``root`` (folders made here, nothing followed)."""
    parts = relative.split("/")
    directory = _parent_of(root, parts)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(os.path.join(directory, parts[-1]), flags, 0o666)
    import io

    file = SyncingWriter(io.FileIO(fd, "wb"), os.path.join(directory, parts[-1]))
    try:
        yield file
        file.finish()
    finally:
        file.writeback.wait()
        file.close()


@contextlib.contextmanager
def _new_file_by_path(root: str, relative: str) -> Iterator[str]:
    """A path at which a writer creates the file ``relative`` below ``root`` itself (torch.save by path): in a
    private folder of its own (mode 0700: no one else can put an entry there first), synced once written, then
    moved to its place."""
    parts = relative.split("/")
    directory = _parent_of(root, parts)
    private = tempfile.mkdtemp(prefix=".mdiff-", dir=directory)
    try:
        written = os.path.join(private, parts[-1])
        yield written
        fd = os.open(written, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CheckpointError("MD705", f"{relative} was not written as a regular file", root)
            os.fsync(fd)
        finally:
            os.close(fd)
        final = os.path.join(directory, parts[-1])
        if os.path.lexists(final):
            raise FileExistsError(17, "the state writes this path twice", final)
        os.rename(written, final)
    finally:
        _remove_tree(private)


def _fsync_tree(root: str) -> None:
    for directory, _, _ in os.walk(root):
        fsync_directory(directory)


def _remove_tree(root: str) -> None:
    import shutil

    shutil.rmtree(root, ignore_errors=True)
