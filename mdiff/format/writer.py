"""Writing a .mdiff file (SPEC.md §3–§8, §11): atomically, deterministically, one parameter at a time."""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
import zlib
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import h5py
import numpy as np

from mdiff.atomic import UnsafeOutputError, check_output, create_temp_file, fsync_directory, fsync_path, replace_with
from mdiff.format import canonical_json
from mdiff.hdf5walk.attributes import overwrite_string, write_string
from mdiff.format.commit import Commit
from mdiff.format.constants import (
    ATTR_COMMIT, ATTR_DEFINITION, ATTR_EXTENSIONS, ATTR_FORMAT, ATTR_UPDATE, ATTR_VERSION, BASE_SHA256_MINOR, FILES_GROUP, FILES_MINOR,
    FORMAT_NAME, FORMAT_VERSION, LAYOUT_GROUP, LIBVER, PARAMETERS_GROUP, UPDATE_TYPES_GROUP,
)
from mdiff.errors import InvalidFileError, LimitError
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits
from mdiff.format.names import encode_name
from mdiff.format.schemas import first_errors
from mdiff.format.chunk_reader import Slabs
from mdiff.format.shuffling import shuffle_into  # noqa: F401 - the writer's shuffle (tests import it from here)
from mdiff.updates import REGISTRY, VERSIONS
from mdiff.updates.base import TYPES, Update, UpdateType
from mdiff.threads import Writeback

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

COMPRESSIONS = ("gzip", "none")
logger = logging.getLogger(__name__)
_CHUNK_BYTES = 1 << 20  # 1 MiB chunks: cheap partial reads, good deflate ratio
_SMALLEST_COMPRESSED = 4096  # below this, a chunk index costs more than deflate saves


def chunk_shape(shape: tuple[int, ...], itemsize: int, target_bytes: int = _CHUNK_BYTES) -> tuple[int, ...]:
    """Chunks of about ``target_bytes`` (1 MiB), cut along the leading axes first (C order stays contiguous)."""
    target = max(1, target_bytes // itemsize)
    chunk = list(shape)
    for axis in range(len(chunk)):
        inner = math.prod(chunk[axis + 1:])
        if math.prod(chunk) <= target:
            break
        chunk[axis] = max(1, target // max(1, inner))
    return tuple(chunk)


def deflate_rle(data: ReadableBuffer) -> bytes:
    """A zlib stream of ``data``: level 1, strategy ``Z_RLE`` (matches at distance 1 only) — SPEC.md §8.2, §11.

    Run-length deflate suits the byte planes of a delta (runs of zeros above the changed bits, then
    skewed literals): with SUB deltas it is 0.90× (fp32) and 0.97× (bf16) the XOR floor where default
    deflate is 1.12× / 1.47×, at 1.3× its speed (docs/codec-study.md). Every inflater reads it. The bytes
    are those of zlib 1.x's encoder (§11); zlib-ng's makes the same ones ~1.8× faster, and is used where it
    is installed and agrees (:func:`encoder`).
    """
    lib = encoder()
    compressor = lib.compressobj(1, lib.DEFLATED, 15, 8, lib.Z_RLE)
    return compressor.compress(data) + compressor.flush()


def _stdlib_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
    return compressor.compress(data) + compressor.flush()


def _probes() -> list[bytes]:
    """A few chunks of the kinds a writer deflates (a shuffled float32 SUB delta, sparse bytes, runs, noise,
    a repeated pattern), on which a faster encoder must give zlib's bytes before it is used."""
    rng = np.random.default_rng(11)
    old = rng.standard_normal(16384).astype(np.float32)
    new = (old + 1e-4 * rng.standard_normal(old.size)).astype(np.float32)
    difference = (new.view(np.int32) - old.view(np.int32)).astype(np.int32)
    delta = ((difference << 1) ^ (difference >> 31)).view(np.uint8)
    sparse = np.zeros(70000, np.uint8)
    sparse[rng.integers(0, sparse.size, 500)] = rng.integers(1, 256, 500, dtype=np.uint8)
    runs = np.repeat(rng.integers(0, 3, 2000, dtype=np.uint8) * 90, rng.integers(1, 400, 2000))
    return [delta.reshape(-1, 4).T.tobytes(), sparse.tobytes(), runs.tobytes(),
            rng.integers(0, 256, 40000, dtype=np.uint8).tobytes(), bytes(range(7, 40)) * 3000, b"", b"\0" * 259]


_encoder_lock = threading.Lock()
_encoder: Any = None


def encoder() -> Any:
    """The module whose ``compressobj`` deflates chunks: zlib-ng's (the ``zlib-ng`` package) where it is installed
    and gives stdlib zlib's bytes on :func:`_probes` (tools/deflate_agreement.py checks a broad corpus; the test
    suite a smaller one), else stdlib zlib. Chosen once a process."""
    global _encoder
    if _encoder is None:
        with _encoder_lock:
            if _encoder is None:
                _encoder = _choose_encoder()
    return _encoder


def _choose_encoder() -> Any:
    try:
        from zlib_ng import zlib_ng
    except ImportError:  # pragma: no cover - a dependency; kept for platforms without a wheel
        return zlib
    for data in _probes():
        compressor = zlib_ng.compressobj(1, zlib_ng.DEFLATED, 15, 8, zlib_ng.Z_RLE)
        if compressor.compress(data) + compressor.flush() != _stdlib_deflate(data):
            logger.warning("zlib-ng %s deflates differently from zlib %s: using zlib (slower; SPEC.md §11)",
                           zlib_ng.ZLIBNG_VERSION, zlib.ZLIB_RUNTIME_VERSION)
            return zlib
    return zlib_ng


_scratch = threading.local()


def _scratch_buffer(size: int) -> np.ndarray:
    """This thread's buffer for one chunk being deflated, kept from chunk to chunk: a new one each time
    costs its pages' faults (on the pool, 64 MiB in 1 MiB chunks: 2.3–3.0 GB/s into new buffers, 2.9–3.4
    into this one). What is written there must be used up before the thread's next chunk (deflate copies
    it out)."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _scratch.buffer = np.empty(size, np.uint8)
    return buffer[:size]


class ChunkQueue:
    """Chunks being shuffled and deflated (:func:`deflate_rle`) on the pool, written to their datasets
    strictly in the order they were queued, so that the file's bytes do not depend on which thread
    finished first.

    At most ``window`` chunks are in flight: queuing one more first writes the oldest (waiting for
    it). A dataset's last chunks stay in flight when :meth:`put_array` returns, so that the caller's
    next work (the next parameter's delta, on this thread) overlaps their deflate on the others;
    :meth:`drain` writes them all. The arrays of chunks in flight are kept alive by their tasks.
    """

    # Fixed, not derived from the machine's cores: where a dataset's last chunks are written among the next
    # parameter's objects decides the file's layout, and the bytes must be the same on every machine (§11).
    WINDOW = 8

    def __init__(self, written: Callable[[int], None] | None = None) -> None:
        self._written = written  # told the bytes of each chunk as it reaches the file (writeback)
        self._pending: list = []  # (dataset id, chunk origin, future), oldest first

    def put_array(self, dataset: h5py.Dataset, array: np.ndarray, chunks: tuple[int, ...]) -> None:
        """Queue ``array``'s chunks, in the grid's order.

        The chunks are slabs (chunk_shape cuts one axis), so each is a contiguous run of the array;
        an edge chunk is padded with zeros to its full size, as libhdf5 pads it with the fill value.
        """
        from mdiff.threads import shared_pool

        flat = array.reshape(-1).view(np.uint8)
        itemsize = array.itemsize
        slabs = Slabs(array.shape, chunks, itemsize)
        grid = [math.ceil(d / c) for d, c in zip(array.shape, chunks)]

        def deflate(origin: tuple[int, ...]) -> bytes:
            start, valid = slabs.span(origin)
            data = flat[start:start + valid]
            if itemsize > 1 or valid < slabs.chunk_bytes:
                out = _scratch_buffer(slabs.chunk_bytes)
                shuffle_into(data, itemsize, out)  # with itemsize 1 only the padding: no shuffle filter
                data = out
            return deflate_rle(data.data)

        for index in np.ndindex(*grid):
            origin = tuple(i * c for i, c in zip(index, chunks))
            while len(self._pending) >= self.WINDOW:
                self._write_oldest()
            self._pending.append((dataset.id, origin, shared_pool().submit(deflate, origin)))

    def _write_oldest(self) -> None:
        dataset_id, origin, future = self._pending[0]
        data = future.result()
        del self._pending[0]
        dataset_id.write_direct_chunk(origin, data)
        if self._written is not None:
            self._written(len(data))

    def drain(self) -> None:
        """Write every chunk in flight."""
        while self._pending:
            self._write_oldest()

    def discard(self) -> None:
        """Forget the chunks in flight (the file is being abandoned), letting running tasks finish."""
        pending, self._pending = self._pending, []
        for _, _, future in pending:
            if not future.cancel():
                future.exception()


def _write_deflated(dataset: h5py.Dataset, array: np.ndarray, chunks: tuple[int, ...]) -> None:
    """Write ``array`` chunk by chunk, each shuffled and deflated (:func:`deflate_rle`) on the pool, in
    the grid's order, on every core: what libhdf5's shuffle + deflate pipeline reads back (a test checks it)."""
    queue = ChunkQueue()
    queue.put_array(dataset, array, chunks)
    queue.drain()


# What a writer's refusal of a file past the object limit tells the user to do (§8.3).
_OBJECTS_HINT = ("readers refuse a file of more objects and attributes than their limit (SPEC.md §8.3: three a "
                 "parameter of one dataset, so at most {most:,} such parameters under the default of {limit:,}); "
                 "write the change as several smaller files: diff or commit part of the model at a time")


class DiffWriter:
    """Streams updates into a new .mdiff file; the file appears at ``path`` only on success.

    Use as a context manager; ``add`` one parameter at a time so that only
    one parameter's data need be in memory.

    The writer never writes a file its readers refuse under ``limits`` (SPEC.md §8.3; the default limits unless
    told otherwise, and then only readers given the same limits read the file): what it is given is checked
    before anything of it is written, and past a limit of the whole file — the objects and attributes counted
    as a reader counts them (MD511), the declared bytes of all datasets (MD512) — it refuses the parameter that
    would go past it with a LimitError, and leaves no file.
    """

    def __init__(
        self, path: str | os.PathLike[str], commit: Commit | None = None, compression: str = "gzip", extensions: Iterable[Mapping] = (),
        *, check_updates: bool = True, limits: Limits = DEFAULT_LIMITS,
    ):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
        self._limits = limits
        self._objects = 0  # objects and attributes written, as §8.3 counts them (the root group included)
        self._declared = 0  # declared bytes of every dataset written (§8.3, MD512)
        self.path = Path(path)
        self.compression = compression
        self._names: set[str] = set()
        self._check_updates = check_updates  # off only to make invalid files for tests and conformance
        self._types: dict[str, UpdateType] = {}  # update types this file defines (§7.8)
        self._update_types: h5py.Group | None = None
        self._files: h5py.Group | None = None  # §5.5
        self._file_paths: set[str] = set()
        self._has_layout = False  # §5.6
        # the newest minor version whose additions the file uses (§3.3): the commit's own members first
        self._minor = (commit or Commit()).minor_version
        self._sync_folder_on_close = True  # once the file has its name (close)
        self._writeback = Writeback(lambda: fsync_path(self._tmp))
        # deflated chunks in flight: the next parameter's work overlaps them
        self._chunks = ChunkQueue(self._writeback.wrote)
        commit_text = self._attribute(ATTR_COMMIT, (commit or Commit()).to_attribute())
        extensions = list(extensions)
        check_output(self.path)  # a device, FIFO, link or folder is refused before anything is written
        extensions_text = self._attribute(ATTR_EXTENSIONS, canonical_json.dumps(extensions)) if extensions else None
        if extensions_text is not None and self._check_updates:
            _check_extensions(extensions_text)
        # the root group, its attributes (format, format_version, commit, extensions) and /parameters
        self._reserve(1 + 3 + (extensions_text is not None) + 1, 0, 1, "/")
        tmp, fd = create_temp_file(self.path.parent, self.path.name)  # 0o666: the umask decides, as for any file
        os.close(fd)
        self._tmp = Path(tmp)
        try:
            self._file = h5py.File(self._tmp, "w", libver=LIBVER)
            write_string(self._file, ATTR_FORMAT, FORMAT_NAME)
            write_string(self._file, ATTR_VERSION, FORMAT_VERSION)
            write_string(self._file, ATTR_COMMIT, commit_text)
            if extensions_text is not None:
                write_string(self._file, ATTR_EXTENSIONS, extensions_text)
            self._parameters = self._file.create_group(PARAMETERS_GROUP, track_order=False)
        except BaseException:
            self._tmp.unlink(missing_ok=True)
            raise

    def _attribute(self, name: str, text: str) -> str:
        """``text`` if a reader takes it as an attribute (§8.3: MD510 past the size limit), checked
        before anything is written, so that no writer makes a file its readers refuse."""
        code = {ATTR_COMMIT: "MD201", ATTR_UPDATE: "MD401", ATTR_EXTENSIONS: "MD105"}.get(name, "MD420")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate (a str from undecodable bytes, "\udcff"): §4.1 refuses it
            raise InvalidFileError(code, f"attribute {name!r} would hold a lone surrogate, which no UTF-8 text can "
                                         "hold (§4.1; a command-line argument that is not UTF-8 gives one)") from None
        if not self._check_updates:
            return text
        if size > self._limits.max_attribute_bytes:
            raise LimitError("MD510", f"attribute {name!r} would have {size} bytes; readers refuse more than "
                                      f"{self._limits.max_attribute_bytes} (§8.3)")
        try:
            canonical_json.check_bounds(text)  # what dumps writes and loads refuses: deep nesting, long numbers
        except ValueError as exc:
            raise InvalidFileError(code, f"attribute {name!r} would be JSON that readers refuse: {exc} (§4.1)") from None
        return text

    def _reserve(self, objects: int, declared: int, depth: int, name: str) -> None:
        """Count what is about to be written — ``objects`` objects and attributes, datasets declaring
        ``declared`` bytes, the deepest ``depth`` links below the root — against the limits of the whole file
        (§8.3), before any of it is written: LimitError (MD511, MD512) when a reader would refuse the file."""
        if not self._check_updates:
            return
        limits = self._limits
        if depth > limits.max_depth:
            raise LimitError("MD511", f"{name!r} would lie {depth} links below the root; readers refuse more than "
                                      f"{limits.max_depth} (§8.3)", name)
        if self._objects + objects > limits.max_objects:
            raise LimitError("MD511", f"the file would hold more than {limits.max_objects:,} objects and attributes with "
                                      f"{name!r} ({self._objects:,} before it, {objects} for it); readers refuse it",
                             name, hint=_OBJECTS_HINT.format(most=(DEFAULT_LIMITS.max_objects - 5) // 3,
                                                             limit=DEFAULT_LIMITS.max_objects))
        if self._declared + declared > limits.max_total_bytes:
            raise LimitError("MD512", f"the file's datasets would declare more than {limits.max_total_bytes:,} bytes "
                                      f"together with {name!r} ({self._declared:,} before it, {declared:,} for it); "
                                      "readers refuse it (§8.3)", name,
                             hint="write the change as several smaller files: diff or commit part of the model at a time")
        self._objects += objects
        self._declared += declared

    def add_update_type(self, name: str, definition: Mapping, functions: Mapping[str, bytes]) -> None:
        """Embed an update type of the file's own (SPEC.md §7.8): ``functions`` maps dtype → ONNX model bytes."""
        if self._check_updates:
            self._types[name] = _checked_type(name, definition, functions, self._limits)
        text = self._attribute(ATTR_DEFINITION, canonical_json.dumps(dict(definition)))
        self._reserve((self._update_types is None) + 2 + len(functions), sum(len(f) for f in functions.values()), 3,
                      f"{UPDATE_TYPES_GROUP}/{name}")
        if self._update_types is None:
            self._update_types = self._file.create_group(UPDATE_TYPES_GROUP, track_order=False)
        group = self._update_types.create_group(encode_name(name), track_order=False)
        write_string(group, ATTR_DEFINITION, text)
        from mdiff.updates.embedded import function_dataset  # onnx: for the files that embed a type
        for dtype_name in sorted(functions):
            group.create_dataset(function_dataset(dtype_name), data=np.frombuffer(functions[dtype_name], np.uint8), track_times=False)

    def add(self, name: str, update: Update) -> None:
        if name in self._names:
            raise ValueError(f"parameter {name!r} is added twice")
        if update.type not in self._types and update.type not in REGISTRY and (update.type, update.meta.get("version")) in TYPES:
            raise InvalidFileError("MD402", f"update type {update.type!r} is registered in this process only: a file "
                                            "names SPEC.md's types and its own (§7.1, §7.8)", name)
        if self._check_updates:
            _check_update(name, update, self._types.get(update.type) or update.update_type, self._limits)
        self._reserve(2 + len(update.data), _declared_bytes(update) if self._check_updates else 0, 3, name)  # its group, `update` and datasets
        self._names.add(name)
        if "base_sha256" in update.meta:
            self._minor = max(self._minor, BASE_SHA256_MINOR)
        version = update.meta.get("version")
        built_in = VERSIONS.get((update.type, version)) if type(version) is int and update.type not in self._types else None
        if built_in is not None:
            self._minor = max(self._minor, built_in.since_minor)  # version 2 of dense and sparse: 1.3 (§3.3)
        self._write_update(_new_group(self._parameters, encode_name(name)), update)

    def add_file(self, path: str, update: Update) -> None:
        """A model folder's file (SPEC.md §5.5): ``replace`` with its bytes, or ``delete``, of a uint8 vector.
        Files are added after every parameter, in path order (§11)."""
        if self._check_updates:
            _check_file_update(path, update, self._file_paths, self._limits)
        self._reserve((self._files is None) + 2 + len(update.data), _declared_bytes(update) if self._check_updates else 0, 3, f"{FILES_GROUP}/{path}")
        if self._files is None:
            self._files = self._file.create_group(FILES_GROUP, track_order=False)
        self._file_paths.add(path)
        self._minor = max(self._minor, FILES_MINOR)
        self._write_update(self._files.create_group(encode_name(path), track_order=False), update)

    def set_layout(self, update: Update) -> None:
        """The weights layout (SPEC.md §5.6): ``replace`` with its canonical JSON bytes, or ``delete``."""
        if self._has_layout:
            raise ValueError("the layout is set twice")
        if self._check_updates:
            _check_file_update("layout", update, set(), self._limits)
        self._reserve(2 + len(update.data), _declared_bytes(update) if self._check_updates else 0, 2, LAYOUT_GROUP)
        self._has_layout = True
        self._minor = max(self._minor, FILES_MINOR)
        self._write_update(self._file.create_group(LAYOUT_GROUP, track_order=False), update)

    def _write_update(self, group: h5py.Group, update: Update) -> None:
        write_string(group, ATTR_UPDATE, self._attribute(ATTR_UPDATE, canonical_json.dumps(dict(update.meta))))
        for key in sorted(update.data):
            self._write_dataset(group, key, np.asarray(update.data[key]))
        # no H5Fflush first: it would change where libhdf5 puts metadata (the bytes must not depend on
        # when syncs ran); the data of large datasets reaches the OS as it is written anyway (deflated
        # chunks: as each is written, ChunkQueue tells the writeback)

    def _write_dataset(self, group: h5py.Group, key: str, array: np.ndarray) -> None:
        array = np.asarray(array, order="C")
        if self.compression == "gzip" and array.ndim >= 1 and array.nbytes >= _SMALLEST_COMPRESSED:
            chunks = chunk_shape(array.shape, array.itemsize)
            dataset = group.create_dataset(
                key, shape=array.shape, dtype=array.dtype, chunks=chunks,
                shuffle=array.itemsize > 1, compression="gzip", compression_opts=1, track_times=False,
            )
            self._chunks.put_array(dataset, array, chunks)
        else:
            _new_dataset(group, key, array)
            self._writeback.wrote(array.nbytes)

    def close(self) -> None:
        """Finish the file: flush, fsync, and rename it into place (on any error: no file is left)."""
        try:
            self._chunks.drain()
            if self._minor:
                # §3.3: the lowest version that has what the file uses. Same length as "1.0", so the
                # attribute is rewritten where it lies and the bytes stay deterministic.
                overwrite_string(self._file, ATTR_VERSION, f"1.{self._minor}")
            self._file.close()
            self._writeback.wait()
            fsync_path(self._tmp)
            replace_with(self._tmp, self.path)
        except BaseException as exc:
            self.abort()
            raise _os_error(exc, self.path) from exc
        if self._sync_folder_on_close:
            fsync_directory(self.path.parent.resolve())

    def abort(self) -> None:
        """Discard the file. Closing a file whose writes failed fails again (libhdf5 flushes what it
        could not write): that second error is not the one to report, and the file goes anyway."""
        try:
            self._chunks.discard()
            try:
                self._file.close()
            except (OSError, RuntimeError):
                pass
            self._writeback.wait()  # before the file goes
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "DiffWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
        else:
            self.abort()
            plain = _os_error(exc, self.path)
            if plain is not exc:
                raise plain from exc


class SealedWriter(DiffWriter):
    """A DiffWriter whose commit metadata is completed once the updates are written: a commit's
    `state_sha256` (§4.2) names the state its updates make. The metadata is written first with a
    placeholder of the same length and rewritten where it lies (the file's bytes stay deterministic),
    and the file says the version that has the member (§3.3). (A repository's writer: repo/objects.py.)"""

    def __init__(self, path: str, commit: Commit, compression: str) -> None:
        super().__init__(path, commit, compression)
        self._minor = max(self._minor, commit.minor_version)
        # its file, a temporary name, is renamed to its id and the folder synced after (repo/objects.py: §13.6's order
        # holds): syncing the folder for the temporary name too was one more fsync on each commit's serial path
        self._sync_folder_on_close = False

    def seal(self, commit: Commit) -> None:
        overwrite_string(self._file, ATTR_COMMIT, commit.to_attribute())  # ValueError if the length differs
        self._minor = max(self._minor, commit.minor_version)


_HDF5_ERRNO = re.compile(r"errno = (\d+)")


# h5py's high-level create_group and create_dataset(data=...) cost ~0.1 ms an object in Python around the libhdf5
# calls they make: at 10^5 parameters, seconds. The writer makes those same calls with the same property lists
# (made once), so that libhdf5 writes the same bytes (§11; a test compares them with h5py's own).
@functools.lru_cache(maxsize=1)
def _group_plist() -> h5py.h5p.PropGCID:
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)  # create_group(track_order=False): no creation order
    gcpl.set_obj_track_times(False)
    return gcpl


@functools.lru_cache(maxsize=1)
def _dataset_plist() -> h5py.h5p.PropDCID:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)  # create_dataset(data=..., track_times=False): contiguous
    dcpl.set_obj_track_times(False)
    dcpl.set_attr_creation_order(0)
    return dcpl


@functools.lru_cache(maxsize=2)
def _link_plist(coding: int) -> h5py.h5p.PropLCID:
    """h5py's link creation list for a name of this character set (ASCII where it is, else UTF-8)."""
    from h5py._hl.base import dlcpl

    lcpl = dlcpl.copy()
    lcpl.set_char_encoding(coding)
    return lcpl


@functools.lru_cache(maxsize=64)
def _file_type(dtype: np.dtype) -> h5py.h5t.TypeID:
    return h5py.h5t.py_create(dtype, logical=1)


def _new_group(parent: h5py.Group, name: str) -> h5py.Group:
    """``parent.create_group(name, track_order=False)``, as libhdf5 sees it."""
    try:
        raw, coding = name.encode("ascii"), h5py.h5t.CSET_ASCII
    except UnicodeEncodeError:
        raw, coding = name.encode("utf-8"), h5py.h5t.CSET_UTF8
    if b"/" in raw.lstrip(b"/"):  # never for an encoded name (names.py escapes "/"): h5py's own way, intermediate groups
        return parent.create_group(name, track_order=False)
    return h5py.Group(h5py.h5g.create(parent.id, raw, lcpl=_link_plist(coding), gcpl=_group_plist()))


def _new_dataset(group: h5py.Group, key: str, array: np.ndarray) -> None:
    """``group.create_dataset(key, data=array, track_times=False)`` (contiguous), as libhdf5 sees it."""
    if array.dtype.kind not in "biuf" or array.dtype.metadata:  # strings, enums, h5py's special types: h5py's way
        group.create_dataset(key, data=array, track_times=False)
        return
    space = h5py.h5s.create_simple(array.shape)
    dataset = h5py.h5d.create(group.id, key.encode("ascii"), _file_type(array.dtype), space, dcpl=_dataset_plist())
    try:
        dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, array)
    finally:
        dataset.close()


def _os_error(exc: BaseException, path: Path) -> BaseException:
    """The operating system's reason for a failed write, as an OSError of that errno ("File too large",
    "No space left on device") naming the file — where libhdf5 raised an OSError, or a RuntimeError,
    whose text buries it among times, descriptors and buffer addresses. Anything else as it is."""
    if not isinstance(exc, (OSError, RuntimeError)) or isinstance(exc, UnsafeOutputError):
        return exc
    found = _HDF5_ERRNO.search(str(exc))
    code = exc.errno if isinstance(exc, OSError) and exc.errno else int(found.group(1)) if found else None
    if code is None or (isinstance(exc, OSError) and exc.strerror == os.strerror(code)):  # already plain
        return exc
    return OSError(code, os.strerror(code), os.fspath(path))


def _declared_bytes(update: Update) -> int:
    """The bytes an update's datasets declare, as §8.3's total counts them (an empty one: 0)."""
    return sum(np.asarray(value).nbytes for value in update.data.values())


def _check_extensions(text: str) -> None:
    """The `extensions` text a writer would write, read as a reader reads it (§3.4): MD105 when malformed."""
    from mdiff.format.header import parse_extensions  # only for the files that have extensions

    found: list = []
    parse_extensions(text, found)
    for finding in found:
        if finding.code == "MD105":
            raise InvalidFileError("MD105", f"the extensions given are refused by readers: {finding.message} (§3.4)")


def _checked_type(name: str, definition: Mapping[str, Any], functions: Mapping[str, bytes],
                  limits: Limits = DEFAULT_LIMITS) -> UpdateType:
    """An embedded type, checked as a reader will check it (ValueError otherwise)."""
    from mdiff.updates.embedded import DEFINITION_SCHEMA, TYPE_NAME, check_function, make_type

    problems = [] if TYPE_NAME.fullmatch(name) else [f"name {name!r} is not x-<lower case>"]
    problems += first_errors(DEFINITION_SCHEMA, dict(definition))
    checked: dict[str, tuple[Any, bytes]] = {}
    for dtype_name, data in ([] if problems else sorted(functions.items())):
        model, found = check_function(bytes(data), dtype_name, list(definition["inputs"]), limits)
        problems += [f"{dtype_name}: {code}: {message}" for code, _, message in found]
        if model is not None:
            checked[dtype_name] = (model, bytes(data))
    if problems or not checked:
        raise ValueError(f"update type {name!r} is invalid: " + ("; ".join(problems) or "it has no function"))
    return make_type(name, definition, checked, limits)


def _check_update(name: str, update: Update, kind: UpdateType, limits: Limits = DEFAULT_LIMITS) -> None:
    """The writer never writes an invalid file: the same checks a reader makes, on the metadata —
    §8.3's limits on the shape it declares and on its datasets (LimitError) included."""
    from mdiff.hdf5walk.limits import shape_problem

    try:
        declared = [(update.shape, update.dtype.itemsize)]
    except (KeyError, TypeError, ValueError):  # no shape or dtype, or malformed: the schema says so below
        declared = []
    shapes = declared + [(np.shape(v), np.asarray(v).dtype.itemsize) for v in update.data.values()]
    for shape, itemsize in shapes:
        found = shape_problem(shape, itemsize, limits) if all(isinstance(d, int) for d in shape) else None
        if found:
            raise LimitError(found[0], f"update of {name!r}: {found[1]}; readers refuse it (§8.3)")
    problems = first_errors(kind.schema, dict(update.meta))
    if not problems:
        actual = {k: (np.shape(v), np.asarray(v).dtype) for k, v in update.data.items()}
        problems = [f"{code}: {message}" for code, _, message in (*kind.check_meta(update.meta), *kind.check_layout(update.meta, actual))]
    if problems:
        raise ValueError(f"update of {name!r} is invalid: " + "; ".join(problems))


def _check_file_update(path: str, update: Update, written: set[str], limits: Limits = DEFAULT_LIMITS) -> None:
    """What a reader checks of a file or the layout (MD304, MD305), before it is written."""
    from mdiff.format.paths import collisions, path_problem

    problem = None if path == "layout" else path_problem(path)
    clash = collisions([path, *written]) if path != "layout" else []
    if problem or clash:
        raise ValueError(f"file path {path!r}: {problem or clash[0][2] + ' as ' + repr(clash[0][1])}")
    if update.type not in ("replace", "delete") or update.meta.get("dtype") != "uint8" or len(update.meta.get("shape", ())) != 1:
        raise ValueError(f"file {path!r}: a file is a replace or delete of a uint8 vector, not {update.type}")
    _check_update(path, update, update.update_type, limits)


def write(
    path: str | os.PathLike[str], updates: Mapping[str, Update], commit: Commit | None = None, compression: str = "gzip",
    *, check_updates: bool = True,
) -> None:
    """Write ``updates`` (parameter name → Update) as one .mdiff file; parameters go in name order.

    Every update is checked first (ValueError if invalid) unless ``check_updates`` is False, which
    exists to make deliberately invalid files for tests.
    """
    with DiffWriter(path, commit, compression, check_updates=check_updates) as writer:
        for name in sorted(updates):
            writer.add(name, updates[name])
