"""Reading a .mdiff file lazily (SPEC.md §3–§8): every structural rule and limit is
checked on open, from metadata alone — or, for a lazy reader, the file as a whole on open and
each parameter's objects when it is first used (§8); data is read only when a parameter is used."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import h5py
import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format.commit import Commit
from mdiff.format.findings import Finding
from mdiff.format.header import Header, parse_header
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits
from mdiff.format.chunk_reader import RangeSource
from mdiff.format.parameters import PARAMETERS_PATH, Datasets, LazyParameters, Parameter, parse_files, parse_layout, parse_parameters
from mdiff.hdf5walk import wire
from mdiff.hdf5walk.walk import WALK_CACHE_BYTES, Inventory, LazyWalk, inspect_structure, set_metadata_cache
from mdiff.format.update_types import parse_update_types
from mdiff.isolation import Isolation, IsolationFailure, shared_worker, task
from mdiff.ranged_file import RangedFile, no_collection
from mdiff.regular_files import NotRegularFile, open_regular, reopenable
from mdiff.rules import RULES
from mdiff.updates import REGISTRY
from mdiff.updates.base import NUMPY_TWINS, Update

if TYPE_CHECKING:
    from mdiff.format.layout import Layout



class _NoFilterPlugins:
    """mdiff's filters are built into libhdf5; a plugin filter would run code a file asks for (§8.5).

    h5py exposes no switch for plugin loading, so the plugin search path is emptied while an mdiff file
    is open, and given back when the last one closes: the rest of the process keeps its plugins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._saved: list[bytes] = []

    def enter(self) -> None:
        with self._lock:
            if self._open == 0:
                self._saved = [h5py.h5pl.get(i) for i in range(h5py.h5pl.size())]
                while h5py.h5pl.size():
                    h5py.h5pl.remove(0)
            self._open += 1

    def leave(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0:
                for path in self._saved:
                    h5py.h5pl.append(path)
                self._saved = []

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()


FILTER_PLUGINS = _NoFilterPlugins()


@dataclass
class Contents:
    """Everything learnt from a file's metadata, with every finding on the way."""

    header: Header | None
    parameters: dict[str, Parameter]
    findings: list[Finding]
    files: dict[str, Parameter] = field(default_factory=dict)  # by path (§5.5)
    layout: Parameter | None = None  # §5.6
    inventory: Inventory | None = None  # the structure walk's (None past a global limit)
    structure_findings: list[Finding] = field(default_factory=list)  # the walk's own findings
    lazy: LazyParameters | None = None  # read_contents(lazy=True): the parameters, each parsed when asked for


def open_hdf5(path: str | os.PathLike[str] | RangedFile) -> tuple[h5py.File, int]:
    """The file, opened read-only, and its size. A missing file or one without permission stays an
    OSError (the operating system's word); anything HDF5 cannot open is MD100, said plainly — a
    FIFO or a device too, found without blocking on it or reading it (libhdf5 then opens the very
    file that was checked: regular_files.reopenable). A :class:`RangedFile` is read through it."""
    if isinstance(path, RangedFile):
        path.ready()  # a store's failure before libhdf5 opens the file, not during
        try:
            with no_collection():
                f = h5py.File(path, "r")
        except (OSError, ValueError) as exc:
            if path.failure is not None:
                raise path.failure from None
            raise InvalidFileError("MD100", f"not an .mdiff file: HDF5 cannot open it ({_hdf5_reason(exc)})",
                                   path.name) from None
        set_metadata_cache(f, WALK_CACHE_BYTES)
        return f, path.size
    fd, found = _open_regular_file(path)
    try:
        f = h5py.File(reopenable(fd, path), "r", locking=False)
    except (OSError, ValueError) as exc:
        raise InvalidFileError("MD100", f"not an .mdiff file: HDF5 cannot open it ({_hdf5_reason(exc)})",
                               os.fspath(path)) from None
    finally:
        os.close(fd)
    set_metadata_cache(f, WALK_CACHE_BYTES)
    return f, found.st_size


def _open_regular_file(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    try:
        return open_regular(path)  # FileNotFoundError, PermissionError: as they are
    except NotRegularFile as exc:
        what = "a folder" if exc.kind == "a folder" else f"{exc.kind}, not a regular file"
        raise InvalidFileError("MD100", f"this is {what}, not an .mdiff file", os.fspath(path)) from None


def _hdf5_reason(exc: Exception) -> str:
    """libhdf5's reason without its noise (buffer addresses, file descriptors, times)."""
    text = str(exc)
    inner = text[text.find("(") + 1:text.rfind(")")] if "(" in text and ")" in text else text
    return inner.split(",")[0].split(":")[0].strip() or type(exc).__name__


@dataclass(frozen=True)
class Vetted:
    """A file's structure walk, as an isolated child made it (§8.5): the parent reads the file by it and
    never hands the file to libhdf5 — provided the file is still the one the child read (``identity``)."""

    identity: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns
    inventory: Inventory
    findings: list[Finding]

    def to_json(self) -> dict:
        return {"identity": list(self.identity), "inventory": self.inventory.to_records(),
                "findings": [[x.code, x.path, x.message] for x in self.findings]}

    @classmethod
    def from_json(cls, data: object) -> "Vetted":
        """ValueError when ``data`` is not what :meth:`to_json` makes."""
        try:
            identity = tuple(data["identity"])  # type: ignore[index]
            findings = [Finding(code, path, message) for code, path, message in data["findings"]]  # type: ignore[index]
            if len(identity) != 4 or not all(type(x) is int for x in identity) or not all(
                    x.code in RULES and isinstance(x.path, str) and isinstance(x.message, str) for x in findings):
                raise ValueError("malformed")
            inventory = Inventory.from_records(data["inventory"])  # type: ignore[index]
        except (TypeError, ValueError, KeyError):
            raise ValueError("not a structure walk") from None
        return cls(identity, inventory, findings)

    def to_wire(self) -> bytes | dict:
        """What an isolated child sends: the compact form (hdf5walk/wire.py), or, for a walk that form cannot
        carry (an integer past 64 bits, a NUL in a name), :meth:`to_json`."""
        try:
            return wire.encode(self.identity, self.inventory, [(x.code, x.path, x.message) for x in self.findings])
        except wire.NotCompact:
            return self.to_json()

    @classmethod
    def from_wire(cls, data: object, identity: tuple[int, int, int, int] | None = None) -> "Vetted":
        """The walk :meth:`to_wire` made (its ``identity`` replaced where given); ValueError when ``data`` is
        not one."""
        if isinstance(data, dict):
            return cls.from_json(data if identity is None else {**data, "identity": list(identity)})
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError("not a structure walk")
        sent, inventory, found = wire.decode(data)
        findings = [Finding(code, path, message) for code, path, message in found]
        if not all(x.code in RULES for x in findings):
            raise ValueError("not a structure walk: a finding of no rule")
        return cls(sent if identity is None else identity, inventory, findings)


def _identity(fd: int) -> tuple[int, int, int, int]:
    return _identity_of(os.fstat(fd))


def _identity_of(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _with_compact_data(f: h5py.File, inventory: Inventory) -> None:
    """Give each compact dataset of the walk its bytes (at most 64 KiB each, in its object header): all that
    a parent reading by the walk cannot read from the file itself without libhdf5."""
    stack = [(inventory.root, "")]
    while stack:
        node, path = stack.pop()
        for name, child in node.children.items():
            stack.append((child, f"{path}/{name}"))
        info = node.dataset
        if info is not None and info.plan is None and info.nbytes:
            out = np.empty(info.shape, info.dtype)
            f[path].read_direct(out)
            node.dataset = replace(info, inline=out.tobytes())


def read_contents(f: h5py.File | None, file_size: int, limits: Limits, vetted: Vetted | None = None,
                  lazy: bool = False, keep_inventory: bool = False, datasets: Datasets | None = None,
                  source: RangeSource | None = None) -> Contents:
    """Everything a file's metadata says, with every finding. With ``lazy``, the members of
    ``/parameters`` are only named (their links checked): ``Contents.lazy`` walks and checks each one
    when asked (a reader that uses a few parameters of many). The walk's inventory is returned with
    ``keep_inventory`` only (~1 KB a parameter that nothing else needs). Without ``f``, the file is read by
    ``vetted`` (the walk of an isolated child) through ``datasets`` (Datasets.detached). ``source``: how a
    file that has no descriptor (a RangedFile) is read where libhdf5 is not needed — object headers'
    bytes, and planned datasets' stored bytes."""
    read_at = source.pread if source is not None else None
    walk = None
    if datasets is None:
        assert f is not None
        datasets = Datasets.of_file(f, source)
    if vetted is not None:
        inventory, findings = vetted.inventory, list(vetted.findings)
    elif lazy:
        assert f is not None
        walk = LazyWalk(f, file_size, limits, frozenset({PARAMETERS_PATH}), read_at)
        inventory, findings = walk.inventory, [Finding.of(x) for x in walk.findings]
    else:
        assert f is not None
        inventory, walked = inspect_structure(f, file_size, limits, read_at)
        findings = [Finding.of(x) for x in walked]
    for code in ("MD511", "MD512"):  # past a limit of the whole file nothing more is looked at or reported (§12.1)
        if any(x.code == code for x in findings):
            return Contents(None, {}, [x for x in findings if x.code == code])
    walk_findings = list(findings)
    header, header_findings = parse_header(inventory)
    findings += header_findings
    if header is None:
        return Contents(None, {}, findings)
    embedded, type_findings = parse_update_types(inventory, datasets, limits)
    lazy_parameters = None
    parameters: dict[str, Parameter]
    if walk is not None:
        lazy_parameters = LazyParameters(inventory, datasets, walk, {**REGISTRY, **embedded}, limits,
                                         header.version[1])
        parameters, parameter_findings = {}, list(lazy_parameters.findings)
    else:
        parameters, parameter_findings = parse_parameters(
            inventory, datasets, {**REGISTRY, **embedded}, minor=header.version[1], limits=limits
        )
    files: dict[str, Parameter] = {}
    layout: Parameter | None = None
    if header.version >= (1, 1):  # in a 1.0 file these groups are MD306 (header.py)
        files, file_findings = parse_files(inventory, datasets, header.version[1], limits)
        layout, layout_findings = parse_layout(inventory, datasets, header.version[1], limits)
        parameter_findings += file_findings + layout_findings
    if not keep_inventory and walk is None and vetted is None:  # made here, needed no more (a caller's is its own)
        inventory.release()
    return Contents(header, parameters, findings + type_findings + parameter_findings, files, layout,
                    inventory if keep_inventory else None, walk_findings, lazy_parameters)


class DiffFile(Mapping[str, Update]):
    """An open .mdiff file: ``commit``, and a mapping from parameter name to its lazy Update.

    Opening raises the first error the file's metadata breaks; ``warnings`` keeps the findings a
    reader may ignore. With ``lazy``, opening checks the file as a whole — every object outside
    ``/parameters``, and the links of ``/parameters`` (SPEC §8) — and each parameter's objects and
    metadata when it is first asked for, before anything of it is read: ``diff[name]`` then raises
    that parameter's first error. Reading one parameter of many then costs that parameter, not the
    file. :meth:`check` checks the rest.

    ``path`` may be a :class:`RangedFile` (a remote file read in place, §13.9): the DiffFile then reads
    it through libhdf5 in this process, owns it and closes it.
    """

    def __init__(self, path: str | os.PathLike[str] | RangedFile, limits: Limits = DEFAULT_LIMITS,
                 vetted: Vetted | None = None, keep_structure: bool = False, lazy: bool = False):
        self._remote = path if isinstance(path, RangedFile) else None
        self.path = path.name if isinstance(path, RangedFile) else os.fspath(path)
        self._file: h5py.File | None = None
        self._fd: int | None = None  # a file read by an isolated child's walk: never handed to libhdf5 here
        FILTER_PLUGINS.enter()
        try:
            if vetted is None:
                self._file, size = open_hdf5(path)
            else:
                assert not isinstance(path, RangedFile)  # an isolated child walks local files only
                self._fd, found = _open_regular_file(path)
                size = found.st_size
        except BaseException:
            if self._remote is not None:
                self._remote.close()
            FILTER_PLUGINS.leave()
            raise
        try:
            if vetted is not None and vetted.identity != self._identity():
                raise InvalidFileError("MD515", "the file changed after the isolated child read it", self.path)
            # the walk and the parse make objects that are all kept, ~10 a parameter: the collector would only look
            # at them again and again (a sixth of the time at 10^5 parameters)
            with no_collection():
                if self._file is None:
                    assert self._fd is not None and vetted is not None
                    contents = read_contents(None, size, limits, vetted, datasets=Datasets.detached(self._fd))
                else:
                    contents = read_contents(self._file, size, limits, lazy=lazy, keep_inventory=keep_structure,
                                             source=self._remote)
            # what an isolated child hands its parent (open_diff); otherwise not kept: it is ~1 KB a parameter
            self.structure = None
            if keep_structure and contents.inventory is not None and self._file is not None:
                _with_compact_data(self._file, contents.inventory)
                self.structure = Vetted(self._identity(), contents.inventory, contents.structure_findings)
            errors = [x for x in contents.findings if x.is_error]
            if self._remote is not None and self._remote.failure is not None:
                raise self._remote.failure  # the store failed, not the file: not a finding of the file
            if errors:
                raise errors[0].to_error()
        except BaseException:
            self._close_file()
            FILTER_PLUGINS.leave()
            raise
        self._closed = False
        self._on_close: Callable[[], None] | None = None  # set on another use of this file (another_use)
        assert contents.header is not None and contents.header.commit is not None  # else an error above
        self.header: Header = contents.header
        self._commit: Commit = contents.header.commit
        self._warnings = [x for x in contents.findings if not x.is_error]
        self._parameters = contents.parameters
        self._lazy = contents.lazy
        self._refused: dict[str, InvalidFileError] = {}  # lazily found errors, raised again on each use
        self._lock = threading.Lock()
        self._files = contents.files
        self._layout = contents.layout

    def _reading(self) -> contextlib.AbstractContextManager:
        """Around libhdf5's reads of metadata: of a remote file, with no garbage collected meanwhile."""
        return no_collection() if self._remote is not None else contextlib.nullcontext()

    def _identity(self) -> tuple[int, int, int, int]:
        try:
            fd = self._fd if self._file is None else self._file.id.get_vfd_handle()
            assert fd is not None
            return _identity(fd)
        except Exception:  # a driver without a file descriptor: never matches a child's walk
            return (-1, -1, -1, -1)

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._remote is not None:
            self._remote.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def isolated(self) -> bool:
        """True when this process reads the file by an isolated child's walk, without libhdf5 (§8.5)."""
        return self._file is None

    @property
    def commit(self) -> Commit:
        return self._commit

    @property
    def version(self) -> str:
        return "%d.%d" % self.header.version

    @property
    def warnings(self) -> list[Finding]:
        """The findings a reader may ignore (a lazy file: of the parts checked so far)."""
        return list(self._warnings)

    def _entry(self, name: str) -> Parameter:
        entry = self._parameters.get(name)
        if entry is not None:
            return entry
        if self._lazy is None or name not in self._lazy.links:
            raise KeyError(name)
        with self._lock:
            if name in self._refused:
                raise self._refused[name]
            entry = self._parameters.get(name)
            if entry is None:
                with self._reading():
                    entry, findings = self._lazy.parse(name)
                self._warnings += [x for x in findings if not x.is_error]
                errors = [x for x in findings if x.is_error]
                if errors or entry is None:
                    error = errors[0].to_error() if errors else InvalidFileError("MD513", "the parameter cannot be read",
                                                                                 f"/parameters/{self._lazy.links[name]}")
                    self._refused[name] = error
                    raise error
                self._parameters[name] = entry
            return entry

    def check(self) -> None:
        """Check every parameter not checked yet (a lazy file); raises the first error."""
        for name in self:
            self._entry(name)

    def __getitem__(self, name: str) -> Update:
        return self._entry(name).update

    def updates(self) -> dict[str, Update]:
        """Every parameter's update, by name, in this mapping's order: ``{name: self[name] for name in self}`` — of a
        file read whole, without a look-up a name."""
        if self._lazy is None:
            return {name: entry.update for name, entry in self._parameters.items()}
        return {name: self[name] for name in self}

    def __contains__(self, name: object) -> bool:
        return name in self._parameters or (self._lazy is not None and name in self._lazy.links)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lazy.links if self._lazy is not None else self._parameters)

    def __len__(self) -> int:
        return len(self._lazy.links if self._lazy is not None else self._parameters)

    def hdf5_path(self, name: str) -> str:
        return self._entry(name).path

    @property
    def files(self) -> dict[str, Update]:
        """The updates of the model folder's files (§5.5), by path: `replace` or `delete` of a uint8 vector."""
        return {path: entry.update for path, entry in self._files.items()}

    @property
    def layout(self) -> Update | None:
        """The update of the weights layout (§5.6), or None when the file leaves it as it is."""
        return self._layout.update if self._layout is not None else None

    def read_layout(self) -> Layout | None:
        """The file's layout (format.layout.Layout) — None when it has no ``/layout`` or deletes it;
        InvalidFileError (MD307) when its JSON is malformed, ApplyError (MD602) when its bytes fail their sha256."""
        from mdiff.format import layout as layout_format

        update = self.layout
        if update is None or update.type == "delete":
            return None
        value = update.apply(None, "/layout", NUMPY_TWINS)  # a `replace` (§5.6), which needs no engine above this floor
        assert value is not None  # only a delete gives None
        return layout_format.parse(value.tobytes())

    def another_use(self, on_close: Callable[[], None]) -> "DiffFile":
        """Another handle on this open file, for one more user (repo/held_files.py keeps files so): all it says is
        this one's, read through this one's descriptor; its ``close`` calls ``on_close`` and closes nothing of this
        one. Only a file read by an isolated child's walk is shared: its reads are positional, with no libhdf5."""
        if not self.isolated or self._closed:
            raise ValueError("only an open file read by an isolated child's walk has other uses")
        other = copy.copy(self)
        other._on_close = on_close
        return other

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._on_close is not None:  # one use of a shared file (another_use): the file stays open
                self._on_close()
                return
            self._close_file()
            FILTER_PLUGINS.leave()

    def __del__(self) -> None:  # a file never closed gives the plugin path back when it is collected
        if getattr(self, "_closed", True) is False:
            self.close()

    def __enter__(self) -> "DiffFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_diff(path: str | os.PathLike[str] | RangedFile, limits: Limits = DEFAULT_LIMITS, isolation: Isolation | None = None, lazy: bool = False,
              commit_id: str | None = None) -> DiffFile:
    """Open a .mdiff file. With ``isolation``, its metadata is read in full (the structure walk, every
    parameter's checks) by a forked child with those time and memory limits, and this process never
    hands the file to libhdf5: a crash or hang of libhdf5 on a crafted file becomes MD515 (§8.5), an
    error of the file is raised as the child found it, and the child's walk — sent back in a compact form
    (hdf5walk/wire.py) — is what this process reads the file by: data through its chunk map (chunk_reader.py), compact data as
    the child read it. That is the way to open a stranger's file.
    With ``lazy`` (and no isolation), each parameter is checked when first used (see DiffFile).
    ``commit_id``: the sha256 the caller has just verified the file's bytes to have (MD800), under which
    an isolated walk is kept and looked up (walk_cache.py, SPEC §13.2)."""
    if isolation is None:
        return DiffFile(path, limits, lazy=lazy)
    if isinstance(path, RangedFile):
        raise ValueError("an isolated child reads local files only: a remote file is read in this process")
    vetted = vet(path, limits, isolation, commit_id)
    try:
        return DiffFile(path, limits, vetted)
    finally:
        vetted.inventory.release()  # read by now: freed at once (see Inventory.release)


def vet(path: str | os.PathLike[str], limits: Limits, isolation: Isolation, commit_id: str | None = None) -> Vetted:
    """The structure walk of the file at ``path``, made by an isolated child, with its findings (MD100 raised
    as the child found it; MD515 when the child crashed, hung, ran out of memory or answered nonsense) —
    or, for a commit file whose bytes the caller verified against ``commit_id``, the walk kept in the walk
    cache from an earlier child's. The child walks (§8) and no more: the rules of §3–§7 are checked here
    when the file is read by the walk (DiffFile), as they would be there — once, not in both processes."""
    from mdiff.format.walk_cache import WalkCache

    cache = WalkCache.default() if commit_id is not None else None
    fd, _ = _open_regular_file(path)
    try:
        if cache is not None and commit_id is not None:
            kept = cache.get_walk(commit_id, limits)
            if kept is not None:
                try:
                    with no_collection():
                        return Vetted.from_wire(kept, _identity(fd))
                except ValueError:
                    pass  # not a walk this code made: walk again (and keep the new one)
        with no_collection():  # the walk's records, decoded and rebuilt: objects that are all kept (see DiffFile)
            answer = shared_worker(isolation).call("vet", fd, path, asdict(limits))
            vetted = Vetted.from_wire(answer)
        if (cache is not None and commit_id is not None and isinstance(answer, memoryview)
                and not any(x.is_error for x in vetted.findings)):
            # from_wire accepted it; a walk answered in JSON (hdf5walk/wire.py could not carry it) is not kept
            cache.put_walk(commit_id, limits, answer)
        return vetted
    except IsolationFailure as failure:
        raise InvalidFileError("MD515", f"reading the metadata in an isolated child: {failure.reason}",
                               os.fspath(path)) from None
    except ValueError:
        raise InvalidFileError("MD515", "reading the metadata in an isolated child: it answered no structure walk",
                               os.fspath(path)) from None
    finally:
        os.close(fd)


def open_file(path: str | os.PathLike[str] | RangedFile, limits: Limits = DEFAULT_LIMITS, isolation: Isolation | None = None, lazy: bool = True,
              storage_options: dict | None = None) -> DiffFile:
    """``mdiff.open``: :func:`open_diff`, lazy unless told otherwise — a reader that uses some parameters
    pays for those (SPEC §8: each is checked in full before anything of it is read); ``lazy=False``
    checks every parameter on open, as appliers and the repository do. ``path`` may be an fsspec URL
    (``s3://bucket/key.mdiff``, with ``storage_options`` for its filesystem): the file is then read in
    place, by byte ranges — the metadata and the parameters used — in this process (§13.9)."""
    if isinstance(path, str) and path.startswith("file://"):
        path = path[len("file://"):]
    elif isinstance(path, str) and "://" in path:
        path = open_url(path, storage_options)
    return open_diff(path, limits, isolation, lazy)


def open_url(url: str, storage_options: dict | None = None) -> RangedFile:
    """The file at an fsspec URL, to be read by byte ranges (OSError when the store cannot say its size)."""
    import fsspec

    fs, where = fsspec.core.url_to_fs(url, **(storage_options or {}))
    info = fs.info(where)
    if info.get("type") != "file" or not isinstance(info.get("size"), int):
        raise InvalidFileError("MD100", "this is not a file with a listed size, not an .mdiff file", url)
    return RangedFile(lambda start, end: fs.cat_file(where, start=start, end=end), info["size"], url)


@task("vet")
def _metadata_only(path: str, shown: str, limits: dict[str, Any]) -> bytes | dict:
    """The file's structure walk (§8.1–§8.3: every object, attribute and limit, with its findings) and its
    compact datasets' bytes, in the compact form (Vetted.to_wire), for the parent to read the file by (vet)."""
    with FILTER_PLUGINS.off():
        f, size = open_hdf5(path)
        try:
            inventory, findings = inspect_structure(f, size, Limits(**limits))
            if not any(x.code in ("MD511", "MD512") for x in findings):  # past those the parent reads nothing
                _with_compact_data(f, inventory)
            return Vetted(_identity(f.id.get_vfd_handle()), inventory, [Finding.of(x) for x in findings]).to_wire()
        finally:
            f.close()
