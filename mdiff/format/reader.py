"""Reading a .mdiff file lazily (SPEC.md §3–§8): every structural rule and limit is
checked on open, from metadata alone — or, for a lazy reader, the file as a whole on open and
each parameter's objects when it is first used (§8); data is read only when a parameter is used."""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import h5py

from mdiff.errors import InvalidFileError
from mdiff.format.commit import Commit
from mdiff.format.constants import BASE_SHA256_MINOR, FORMAT_MINOR
from mdiff.format.findings import Finding
from mdiff.format.header import Header, parse_header
from mdiff.format.limits import DEFAULT_LIMITS, Limits
from mdiff.format.parameters import too_new_member, PARAMETERS_PATH, LazyParameters, Parameter, parse_files, parse_layout, parse_parameters
from mdiff.format.safety_walk import WALK_CACHE_BYTES, Inventory, LazyWalk, inspect_structure, set_metadata_cache
from mdiff.format.update_types import parse_update_types
from mdiff.isolation import Isolation, IsolationFailure, run_isolated
from mdiff.regular_files import NotRegularFile, open_regular, reopenable
from mdiff.updates import REGISTRY
from mdiff.updates.base import Update



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


def open_hdf5(path) -> tuple[h5py.File, int]:
    """The file, opened read-only, and its size. A missing file or one without permission stays an
    OSError (the operating system's word); anything HDF5 cannot open is MD100, said plainly — a
    FIFO or a device too, found without blocking on it or reading it (libhdf5 then opens the very
    file that was checked: regular_files.reopenable)."""
    try:
        fd, found = open_regular(path)  # FileNotFoundError, PermissionError: as they are
    except NotRegularFile as exc:
        what = "a folder" if exc.kind == "a folder" else f"{exc.kind}, not a regular file"
        raise InvalidFileError("MD100", f"this is {what}, not an .mdiff file", os.fspath(path)) from None
    try:
        f = h5py.File(reopenable(fd, path), "r", locking=False)
    except (OSError, ValueError) as exc:
        raise InvalidFileError("MD100", f"not an .mdiff file: HDF5 cannot open it ({_hdf5_reason(exc)})",
                               os.fspath(path)) from None
    finally:
        os.close(fd)
    set_metadata_cache(f, WALK_CACHE_BYTES)
    return f, found.st_size


def _hdf5_reason(exc: Exception) -> str:
    """libhdf5's reason without its noise (buffer addresses, file descriptors, times)."""
    text = str(exc)
    inner = text[text.find("(") + 1:text.rfind(")")] if "(" in text and ")" in text else text
    return inner.split(",")[0].split(":")[0].strip() or type(exc).__name__


@dataclass(frozen=True)
class Vetted:
    """A file's structure walk, as an isolated child made it (§8.5): the parent reads the file by it
    instead of walking it again — provided the file is still the one the child read (``identity``)."""

    identity: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns
    inventory: Inventory
    findings: list[Finding]


def _identity(fd: int) -> tuple[int, int, int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_contents(f: h5py.File, file_size: int, limits: Limits, vetted: Vetted | None = None,
                  lazy: bool = False, keep_inventory: bool = False) -> Contents:
    """Everything a file's metadata says, with every finding. With ``lazy``, the members of
    ``/parameters`` are only named (their links checked): ``Contents.lazy`` walks and checks each one
    when asked (a reader that uses a few parameters of many). The walk's inventory is returned with
    ``keep_inventory`` only (~1 KB a parameter that nothing else needs)."""
    walk = None
    if vetted is not None:
        inventory, findings = vetted.inventory, list(vetted.findings)
    elif lazy:
        walk = LazyWalk(f, file_size, limits, frozenset({PARAMETERS_PATH}))
        inventory, findings = walk.inventory, list(walk.findings)
    else:
        inventory, findings = inspect_structure(f, file_size, limits)
    for code in ("MD511", "MD512"):  # past a limit of the whole file nothing more is looked at or reported (§12.1)
        if any(x.code == code for x in findings):
            return Contents(None, {}, [x for x in findings if x.code == code])
    walk_findings = list(findings)
    header, header_findings = parse_header(inventory)
    findings += header_findings
    if header is None:
        return Contents(None, {}, findings)
    embedded, type_findings = parse_update_types(inventory, f, limits)
    newer_minor = header.version[1] > FORMAT_MINOR
    lazy_parameters = None
    parameters: dict[str, Parameter]
    if walk is not None:
        lazy_parameters = LazyParameters(inventory, f, walk, {**REGISTRY, **embedded}, newer_minor, limits,
                                         header.version[1])
        parameters, parameter_findings = {}, list(lazy_parameters.findings)
    else:
        parameters, parameter_findings = parse_parameters(
            inventory, f, {**REGISTRY, **embedded}, newer_minor=newer_minor, limits=limits
        )
        if header.version < (1, BASE_SHA256_MINOR):
            parameter_findings += _members_too_new(parameters)
    files: dict[str, Parameter] = {}
    layout: Parameter | None = None
    if header.version >= (1, 1):  # in a 1.0 file these groups are MD306 (header.py)
        files, file_findings = parse_files(inventory, f, newer_minor, limits)
        layout, layout_findings = parse_layout(inventory, f, newer_minor, limits)
        parameter_findings += file_findings + layout_findings
    return Contents(header, parameters, findings + type_findings + parameter_findings, files, layout,
                    inventory if keep_inventory else None, walk_findings, lazy_parameters)


def _members_too_new(parameters: dict[str, Parameter]) -> list[Finding]:
    """MD404 for, and without, each parameter whose update has `base_sha256` in a file older than 1.2
    (§3.3: the member's schema is that of the file's version)."""
    findings = []
    for name, parameter in list(parameters.items()):
        problem = too_new_member(parameter)
        if problem is not None:
            findings.append(problem)
            del parameters[name]
    return findings


class DiffFile(Mapping[str, Update]):
    """An open .mdiff file: ``commit``, and a mapping from parameter name to its lazy Update.

    Opening raises the first error the file's metadata breaks; ``warnings`` keeps the findings a
    reader may ignore. With ``lazy``, opening checks the file as a whole — every object outside
    ``/parameters``, and the links of ``/parameters`` (SPEC §8) — and each parameter's objects and
    metadata when it is first asked for, before anything of it is read: ``diff[name]`` then raises
    that parameter's first error. Reading one parameter of many then costs that parameter, not the
    file. :meth:`check` checks the rest.
    """

    def __init__(self, path, limits: Limits = DEFAULT_LIMITS, vetted: Vetted | None = None, keep_structure: bool = False,
                 lazy: bool = False):
        self.path = os.fspath(path)
        FILTER_PLUGINS.enter()
        try:
            self._file, size = open_hdf5(path)
        except BaseException:
            FILTER_PLUGINS.leave()
            raise
        try:
            if vetted is not None and vetted.identity != self._identity():
                vetted = None  # the file changed since the child read it: walk it here
            contents = read_contents(self._file, size, limits, vetted, lazy=lazy and vetted is None,
                                     keep_inventory=keep_structure)
            # what an isolated child hands its parent (open_diff); otherwise not kept: it is ~1 KB a parameter
            self.structure = Vetted(self._identity(), contents.inventory, contents.structure_findings) \
                if keep_structure and contents.inventory is not None else None
            errors = [x for x in contents.findings if x.is_error]
            if errors:
                raise errors[0].to_error()
        except BaseException:
            self._file.close()
            FILTER_PLUGINS.leave()
            raise
        self._closed = False
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

    def _identity(self) -> tuple[int, int, int, int]:
        try:
            return _identity(self._file.id.get_vfd_handle())
        except Exception:  # a driver without a file descriptor: never matches a child's walk
            return (-1, -1, -1, -1)

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

    def __getitem__(self, name: str):
        return self._entry(name).update

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

    def read_layout(self):
        """The file's layout (format.layout.Layout) — None when it has no ``/layout`` or deletes it;
        InvalidFileError (MD307) when its JSON is malformed, ApplyError (MD602) when its bytes fail their sha256."""
        from mdiff.format import layout as layout_format

        update = self.layout
        if update is None or update.type == "delete":
            return None
        value = update.apply(None, "/layout")
        return layout_format.parse(value.tobytes())

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._file.close()
            FILTER_PLUGINS.leave()

    def __del__(self) -> None:  # a file never closed gives the plugin path back when it is collected
        if getattr(self, "_closed", True) is False:
            self.close()

    def __enter__(self) -> "DiffFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_diff(path, limits: Limits = DEFAULT_LIMITS, isolation: Isolation | None = None, lazy: bool = False) -> DiffFile:
    """Open a .mdiff file. With ``isolation``, its metadata is first read in full (the structure walk,
    every parameter's checks) by a forked child with those time and memory limits: a crash or hang of
    libhdf5 on a crafted file then becomes MD515 here (§8.5), and an error of the file is raised
    without this process having parsed it. The child hands its walk back: this process reads the file
    by it instead of walking it again (unless the file changed meanwhile), so that libhdf5 parses
    here only what a read needs — data goes through the walk's chunk map (chunk_reader.py) wherever it can.
    With ``lazy`` (and no isolation), each parameter is checked when first used (see DiffFile)."""
    vetted = None
    if isolation is not None:
        try:
            vetted = run_isolated(_metadata_only, path, limits, limits=isolation)
        except IsolationFailure as failure:
            raise InvalidFileError("MD515", f"reading the metadata in an isolated child: {failure.reason}",
                                   os.fspath(path)) from None
    return DiffFile(path, limits, vetted, lazy=lazy)


def open_file(path, limits: Limits = DEFAULT_LIMITS, isolation: Isolation | None = None, lazy: bool = True) -> DiffFile:
    """``mdiff.open``: :func:`open_diff`, lazy unless told otherwise — a reader that uses some parameters
    pays for those (SPEC §8: each is checked in full before anything of it is read); ``lazy=False``
    checks every parameter on open, as appliers and the repository do."""
    return open_diff(path, limits, isolation, lazy)


def _metadata_only(path, limits: Limits) -> Vetted | None:
    """Open the file (every check of its metadata); its structure walk, for the parent to read by."""
    with DiffFile(path, limits, keep_structure=True) as diff:
        return diff.structure
