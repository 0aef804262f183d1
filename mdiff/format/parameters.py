"""SPEC.md §5 and §7.1: the parameter groups, the file groups and the layout (§5.5–§5.6), and their
``update`` attributes."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import h5py
import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format import canonical_json
from mdiff.format.constants import ATTR_UPDATE, BASE_SHA256_MINOR, FILES_GROUP, FORMAT_MINOR, LAYOUT_GROUP, PARAMETERS_GROUP
from mdiff.format.dtypes import dtype_named
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits, shape_problem
from mdiff.format.findings import Finding
from mdiff.format.names import decode_name, encode_name
from mdiff.format.paths import collisions, path_problem
from mdiff.format.schemas import first_errors
from mdiff.format.chunk_reader import DetachedDataset, PlannedDataset, RangeSource, Source
from mdiff.ranged_file import no_collection
from mdiff.hdf5walk.walk import DatasetInfo, Inventory, LazyWalk, ObjectInfo
from mdiff.updates import ALL_TYPES, REGISTRY, VERSIONS
from mdiff.updates.base import Update, UpdateType

PARAMETERS_PATH = "/" + PARAMETERS_GROUP
FILES_PATH = "/" + FILES_GROUP
LAYOUT_PATH = "/" + LAYOUT_GROUP
# Files and the layout are `uint8` vectors that are set or removed, never patched (§5.5).
FILE_TYPES: dict[str, UpdateType] = {name: REGISTRY[name] for name in ("replace", "delete")}


@dataclass(frozen=True)
class Parameter:
    name: str
    path: str  # HDF5 path of its group
    update: Update  # datasets are lazy h5py.Dataset objects
    sound: bool  # no error was found in its metadata or layout


def parse_parameters(
    inventory: Inventory, datasets: Datasets, types: Mapping[str, UpdateType] = REGISTRY, minor: int = FORMAT_MINOR,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[dict[str, Parameter], list[Finding]]:
    """Every parameter group, its update checked against ``types`` (the registry and the file's own)
    and its declared shape against ``limits`` (§8.3), for a file of version 1.``minor``: of a newer minor
    version than this reader's, unknown `update` members are dropped; of an older one, members it did not
    define yet are errors (§3.3)."""
    container = inventory.objects.get(PARAMETERS_PATH)
    if inventory.objects.refused(PARAMETERS_PATH):
        return {}, []  # present, refused under §8 (reported): not missing
    if container is None or container.kind != "group":
        return {}, [Finding("MD300", PARAMETERS_PATH, "the file has no `/parameters` group")]
    return _parse_members(container, datasets, types, minor, limits)


def parse_files(
    inventory: Inventory, datasets: Datasets, minor: int = FORMAT_MINOR, limits: Limits = DEFAULT_LIMITS,
) -> tuple[dict[str, Parameter], list[Finding]]:
    """Every file group of ``/files`` (§5.5), by path: paths checked (MD304), updates restricted to
    `replace`/`delete` of a `uint8` vector (MD305). Empty when the file has no `/files`."""
    container = inventory.objects.get(FILES_PATH)
    if container is None:
        return {}, []
    if container.kind != "group":
        return {}, [Finding("MD305", FILES_PATH, "`/files` must be a group of file groups")]
    files, findings = _parse_members(container, datasets, FILE_TYPES, minor, limits, is_file=True)
    return files, findings


def parse_layout(
    inventory: Inventory, datasets: Datasets, minor: int = FORMAT_MINOR, limits: Limits = DEFAULT_LIMITS,
) -> tuple[Parameter | None, list[Finding]]:
    """The ``/layout`` update (§5.6), or None when the file has none (or it is refused). Its JSON is
    data, checked when read (layout.parse, MD307)."""
    info = inventory.objects.get(LAYOUT_PATH)
    if info is None:
        return None, []
    if info.kind != "group":
        return None, [Finding("MD305", LAYOUT_PATH, "`/layout` must be a group holding an update")]
    findings: list[Finding] = []
    entry = _parse_one(LAYOUT_GROUP, LAYOUT_PATH, info, datasets, findings, FILE_TYPES, minor, limits, is_file=True)
    return entry, findings


def _parse_members(container: ObjectInfo, datasets: Datasets, types: Mapping[str, UpdateType], minor: int,
                   limits: Limits, is_file: bool = False) -> tuple[dict[str, Parameter], list[Finding]]:
    findings = _container_findings(container)
    entries: dict[str, Parameter] = {}
    prefix = container.path
    safe_paths: list[str] = []  # §5.5: the paths compared for collisions, whatever their groups' updates
    memo = _MetaMemo()
    with no_collection():  # what the loop makes is kept: at 10^5 parameters collections cost ~1 s, free nothing
        for link, info in container.children.items():
            if info.kind == "refused":  # reported once, under §8: not decoded, not checked (SPEC §12.1)
                continue
            name = _member_name(prefix, link, findings)
            if name is None:
                continue
            if is_file and info.kind == "group":
                problem = path_problem(name)
                if problem:  # a finding about the name: the group's update is still checked (§12.1 rule 4)
                    findings.append(Finding("MD304", f"{prefix}/{link}", f"file path {name!r}: {problem}"))
                else:
                    safe_paths.append(name)
            path = f"{prefix}/{link}"
            entry = _usual_member(name, path, info, datasets, memo) if memo.templates else None
            if entry is None:
                entry = _parse_member(name, path, info, datasets, findings, types, minor, limits, is_file, memo)
            if entry is not None:
                entries[name] = entry
    for path, other, why in collisions(safe_paths):
        findings.append(Finding("MD304", f"{prefix}/{encode_name(path)}", f"path {path!r} and path {other!r}: {why}"))
    if not _in_utf8_order(entries):
        entries = dict(sorted(entries.items(), key=lambda kv: kv[0].encode("utf-8")))
    return entries, findings


def _container_findings(container: ObjectInfo) -> list[Finding]:
    return [Finding("MD303", container.path, f"unknown attribute {attr!r}") for attr in sorted(container.attrs)]


def _member_name(prefix: str, link: str, findings: list[Finding]) -> str | None:
    """The parameter name (or file path) a member's link name encodes, or None (reported: MD302, and then
    nothing else of the member is looked at, §12.1 rule 4)."""
    try:
        return decode_name(link)
    except InvalidFileError as exc:
        findings.append(Finding("MD302", f"{prefix}/{link}", exc.message))
        return None


def _parse_member(name: str, path: str, info: ObjectInfo, datasets: "Datasets", findings: list[Finding],
                  types: Mapping[str, UpdateType], minor: int, limits: Limits, is_file: bool,
                  memo: _MetaMemo | None = None) -> Parameter | None:
    if info.kind == "refused":  # refused by the structure walk, already reported
        return None
    if info.kind != "group":
        findings.append(Finding("MD301", path, f"a {'file' if is_file else 'parameter'} must be a group"))
        return None
    return _parse_one(name, path, info, datasets, findings, types, minor, limits, is_file, memo)


def _usual_member(name: str, path: str, info: ObjectInfo, datasets_of: Datasets, memo: _MetaMemo) -> Parameter | None:
    """_parse_member's Parameter for the usual member (10^5 experts), in fewer steps: a group whose one attribute is
    an `update` of a text seen before (its template) and whose one member is the dataset its type needs, without
    attributes, of a shape and dtype the template's layout accepts — sound, with no finding (what _parse_group's
    own shortcut makes of it). None for any other member, which then takes _parse_member's path."""
    if info.kind != "group" or info.refused_attrs:
        return None
    attrs, children = info.attrs, info.children
    if len(attrs) != 1 or len(children) != 1:
        return None
    template, hashes = memo.template_of(attrs.get(ATTR_UPDATE))
    if template is None:
        return None
    kind = template.kind
    (only, member), = children.items()
    dataset = member.dataset
    if member.kind != "dataset" or dataset is None or member.attrs or kind.datasets != (only,):
        return None
    assert hashes is not None
    meta = template.filled(hashes)
    if template.layout(meta, {only: (dataset.shape, dataset.dtype)}):
        return None
    return Parameter(name, path, Update(meta, {only: datasets_of.lazy(f"{path}/{only}", dataset)}, kind), True)


class LazyParameters:
    """The parameters of a file whose structure walk deferred the members of ``/parameters``
    (structure.LazyWalk): their names at once, each parameter walked and checked when first asked for."""

    def __init__(self, inventory: Inventory, datasets: Datasets, walk: LazyWalk, types: Mapping[str, UpdateType],
                 limits: Limits, minor: int = FORMAT_MINOR):
        self._walk, self._types, self._limits = walk, types, limits
        self._minor = minor  # the file's minor version (§3.3)
        self._datasets = datasets
        self._memo = _MetaMemo()
        self.findings: list[Finding] = []  # of the container and the names; then of each member read
        self.links: dict[str, str] = {}  # parameter name -> link name, in UTF-8 order of the names
        container = inventory.objects.get(PARAMETERS_PATH)
        self._container = container
        if inventory.objects.refused(PARAMETERS_PATH):
            self._container = None
            return
        if container is None or container.kind != "group":
            self.findings.append(Finding("MD300", PARAMETERS_PATH, "the file has no `/parameters` group"))
            return
        self.findings += _container_findings(container)
        # every name its own link: then the names run in the walk's order of the links, their UTF-8 bytes' (the
        # walk lists a group's members sorted so), and need no check (10^6 encoded again: 0.4 s)
        verbatim = True
        for link, member in container.children.items():
            if member.kind == "refused":  # reported once, under §8 (SPEC §12.1)
                continue
            name = _member_name(PARAMETERS_PATH, link, self.findings)
            if name is not None:
                self.links[name] = link
                verbatim = verbatim and name is link
        if not verbatim and not _in_utf8_order(self.links):
            self.links = dict(sorted(self.links.items(), key=lambda kv: kv[0].encode("utf-8")))

    def parse(self, name: str) -> tuple[Parameter | None, list[Finding]]:
        """The parameter ``name`` (one of ``links``), walked and checked; None when it breaks a rule, and
        the findings either way."""
        assert self._container is not None
        link = self.links[name]
        node = self._container.children[link]
        findings = [Finding.of(x) for x in self._walk.expand(node)] if node.kind == "deferred" else []
        if any(x.is_error for x in findings):
            return None, findings
        info = self._container.children.get(link)
        if info is None:  # refused at its link when walked (reported)
            return None, findings
        entry = _parse_member(name, f"{PARAMETERS_PATH}/{link}", info, self._datasets, findings, self._types,
                              self._minor, self._limits, False, self._memo)
        return entry, findings


def _in_utf8_order(entries: Mapping[str, object]) -> bool:
    """Whether the names already run in UTF-8 byte order (they do when link names do, as in files mdiff
    writes: §5.2's escapes keep the order of every name without `%`, `/`, controls or a leading `.`)."""
    previous = None
    for name in entries:
        encoded = name.encode("utf-8")
        if previous is not None and encoded <= previous:
            return False
        previous = encoded
    return True


def _parse_meta(path: str, text: str | None, findings: list[Finding], types: Mapping[str, UpdateType], minor: int,
                limits: Limits, is_file: bool = False) -> tuple[dict[str, Any], UpdateType] | tuple[None, None]:
    """The ``update`` attribute's JSON and its registered type, or (None, None)."""
    if text is None:
        findings.append(Finding("MD400", path, "attribute `update` is missing"))
        return None, None
    try:
        meta = canonical_json.loads(text)
    except ValueError as exc:
        findings.append(Finding("MD401", path, f"`update` is not valid JSON: {exc}"))
        return None, None
    if not isinstance(meta, dict):
        findings.append(Finding("MD401", path, f"`update` is JSON {type(meta).__name__}, not an object"))
        return None, None
    if not isinstance(meta.get("type"), str):
        findings.append(Finding("MD404", path, "`update` must have a string `type`"))
        return None, None
    kind = types.get(meta["type"])
    if kind is None:
        if is_file:
            findings.append(Finding("MD305", path, f"a {meta['type']!r} update; files and the layout are `replace` or `delete`"))
        else:
            findings.append(Finding("MD402", path, f"unknown update type {meta['type']!r}; known: {sorted(types)}"))
        return None, None
    version = meta.get("version")
    if isinstance(version, float) and version.is_integer():  # §4.1: a number with a zero fraction is an integer
        version = meta["version"] = int(version)
    if isinstance(version, int) and not isinstance(version, bool) and version != kind.version and kind is REGISTRY.get(kind.name):
        kind = VERSIONS.get((kind.name, version), kind)  # a built-in type's other versions (§7.3, §7.4)
    if isinstance(version, int) and not isinstance(version, bool) and version != kind.version:
        findings.append(Finding("MD403", path, f"{kind.name} version {meta.get('version')!r} is not supported (this reader knows {kind.version})"))
        return None, None
    if kind.since_minor > minor:  # §3.3: version 2 of `dense` and `sparse` exists from 1.3
        findings.append(Finding("MD403", path, f"{kind.name} version {kind.version} exists from format version "
                                               f"1.{kind.since_minor}; this file says it is 1.{minor}"))
        return None, None
    if meta.get("dtype") == "bool" and kind.version == 2 and kind.name in ("dense", "sparse"):  # §7.3, §7.4
        findings.append(Finding("MD403", path, f"a bool parameter's {kind.name} update is version 1 (XOR), not 2"))
        return None, None  # a version, so checked before the schema (§12.1 rule 5)
    if minor > FORMAT_MINOR:
        meta = {k: v for k, v in meta.items() if k in kind.schema["properties"]}
    errors = first_errors(kind.schema, meta)
    if errors:
        findings.append(Finding("MD404", path, f"`update` breaks the {kind.name} schema at {errors[0]}"))
        return None, None
    if "base_sha256" in meta and minor < BASE_SHA256_MINOR:  # §3.3: the member's schema is that of the file's version
        findings.append(Finding("MD404", path, f"`update` has `base_sha256`, which exists from format version 1.{BASE_SHA256_MINOR}"))
        return None, None
    meta["shape"] = [int(d) for d in meta["shape"]]  # JSON Schema counts 2.0 as an integer
    if is_file and (meta["dtype"] != "uint8" or len(meta["shape"]) != 1):
        findings.append(Finding("MD305", path, f"a file's update is of a uint8 vector, not {meta['dtype']}{meta['shape']}"))
        return None, None
    return meta, kind


def _parse_one(name: str, path: str, info: ObjectInfo, datasets: "Datasets", all_findings: list[Finding],
               types: Mapping[str, UpdateType], minor: int,
               limits: Limits, is_file: bool = False, memo: _MetaMemo | None = None) -> Parameter | None:
    findings: list[Finding] = []  # this group's alone: whether it is sound is counted here
    try:
        return _parse_group(name, path, info, datasets, findings, types, minor, limits, is_file, memo)
    finally:
        all_findings += findings


def _parse_group(name: str, path: str, info: ObjectInfo, datasets_of: "Datasets", findings: list[Finding],
                 types: Mapping[str, UpdateType], minor: int,
                 limits: Limits, is_file: bool, memo: _MetaMemo | None = None) -> Parameter | None:
    attrs = info.attrs
    if len(attrs) != (ATTR_UPDATE in attrs):  # an attribute other than `update` (most groups: none)
        for attr in sorted(set(attrs) - {ATTR_UPDATE}):
            findings.append(Finding("MD303", path, f"unknown attribute {attr!r}"))
    if ATTR_UPDATE in info.refused_attrs:
        return None  # present but unusable: reported under §8.2
    text = attrs.get(ATTR_UPDATE)
    template: _Template | None = None
    key, hashes = _MetaMemo.split(text) if memo is not None and not findings else (None, None)
    if key is not None:
        assert memo is not None and hashes is not None
        template = memo.templates.get(key)
    meta: dict[str, Any] | None
    kind: UpdateType | None
    if template is not None:  # an `update` of a shape seen before: its outcome is known but for its hashes
        assert hashes is not None
        meta, kind = template.filled(hashes), template.kind
    else:
        meta, kind = _parse_meta(path, text, findings, types, minor, limits, is_file)
        if meta is None or kind is None:  # both or neither
            return None
        problem = shape_problem(meta["shape"], dtype_named(meta["dtype"]).itemsize, limits)
        if problem:  # §8.3 holds the declared shape to a dataset's limits; nothing is compared with it then
            findings.append(Finding(problem[0], path, f"the declared shape: {problem[1]}"))
            return None
        meta_problems = [Finding(code, f"{path}/{dataset}" if dataset else path, message)
                         for code, dataset, message in kind.check_meta(meta)]
        if meta_problems:  # e.g. MD411: the type cannot say what its datasets should be; they are not looked at
            findings += meta_problems
            return None
        if key is not None and not findings:
            assert memo is not None and hashes is not None
            template = memo.record(key, hashes, meta, kind, path, types, minor, limits, is_file)
    # §12.1 rule 5: the members are looked at only once the update passed every check above
    children = info.children
    if template is not None and len(children) == 1 and len(kind.datasets) == 1:
        # the usual group of an `update` seen before (10^5 experts): its one dataset, without attributes, of the
        # shape and dtype its template's layout accepts — what the checks below find of it, in fewer steps
        (only, member_info), = children.items()
        info_of = member_info.dataset
        if only == kind.datasets[0] and member_info.kind == "dataset" and info_of is not None and not member_info.attrs \
                and not template.layout(meta, {only: (info_of.shape, info_of.dtype)}):
            return Parameter(name, path, Update(meta, {only: datasets_of.lazy(f"{path}/{only}", info_of)}, kind), True)
    datasets: dict[str, ObjectInfo] = {}
    refused = set()
    for member, child in info.children.items():
        if child.kind == "dataset" and child.dataset is not None:
            datasets[member] = child
        elif child.kind == "group":
            if member in kind.datasets:  # the required dataset is not there: a group has its name (§7.1)
                findings.append(Finding("MD405", f"{path}/{member}", f"`{member}` is a group; a {kind.name} update needs a dataset"))
                refused.add(member)
        else:
            refused.add(member)  # reported under §8, so not "missing" (MD405) as well
    actual = {k: (d.dataset.shape, d.dataset.dtype) for k, d in datasets.items()}  # type: ignore[union-attr]
    layout = template.layout(meta, actual) if template is not None else list(kind.check_layout(meta, actual))
    for code, dataset, message in layout:
        if not (code == "MD405" and dataset in refused):
            findings.append(Finding(code, f"{path}/{dataset}" if dataset else path, message))
    expected = kind.datasets
    for member, child in info.children.items():
        if member not in expected and child.kind != "refused":  # a refused member is reported once, under §8
            findings.append(Finding("MD303", f"{path}/{member}", f"unknown member of a {kind.name} update"))
    for member, child in datasets.items():
        if child.attrs:
            for attr in sorted(child.attrs):
                findings.append(Finding("MD303", f"{path}/{member}", f"unknown attribute {attr!r}"))
    sound = not any(x.is_error for x in findings) and refused.isdisjoint(expected)
    data = {k: datasets_of.lazy(f"{path}/{k}", child.dataset) for k, child in datasets.items() if k in expected}
    return Parameter(name, path, Update(meta, data, kind), sound)


# ---------------------------------------------------------------- `update` attributes seen before
#
# A file holds one `update` per parameter, and most of them are alike but for their hashes: the same type,
# version, dtype and shape, written in the same canonical text. The hashes are 64 lower-case hex digits that
# only a `pattern` of the schema looks at. So the outcome of a text's checks (_parse_meta, the declared shape,
# check_meta, and check_layout given the datasets' shapes and dtypes) is that of any other text that differs
# from it only in those digits: once a text has passed them all, a text of the same shape is the first one's
# JSON with its own hashes put in. Recorded only where that is so by construction (a built-in type, each hole
# a top-level member whose schema is that pattern) and is seen to be so (the same text with other digits gives
# the same JSON and passes the same checks); anything else, and anything that breaks a rule, takes the full
# path. Measured at 10^5 dense parameters: 0.4 s of JSON decoding and 0.4 s of schema checks become ~0.1 s.

_HOLES = re.compile(r'"([A-Za-z_]*sha256)":"([0-9a-f]{64})"')
_HEX_PATTERN = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_BUILT_IN = frozenset(map(id, ALL_TYPES))


def _is_flat(value: Any) -> bool:
    return isinstance(value, list) and not any(isinstance(v, (list, dict)) for v in value)


class _Template:
    __slots__ = ("kind", "meta", "holes", "copied", "_layouts", "literally")

    def __init__(self, kind: UpdateType, meta: dict[str, Any], holes: tuple[str, ...], key: tuple[str, ...]):
        self.kind, self.meta, self.holes = kind, meta, holes
        # its text as _MetaMemo.split cut it, with 64 lower-case hex digits in each hole (each a group): the parts
        # around the holes, each with the `"name":"` of the hole after it and the closing `"` of the one before it
        literals = ((f'"{rest}' if i else rest) + (f'"{hole}":"' if hole is not None else "")
                    for i, (rest, hole) in enumerate(zip(key[0::2], (*key[1::2], None))))
        self.literally = re.compile("([0-9a-f]{64})".join(map(re.escape, literals)))
        # fresh for each parameter: lists of numbers (`shape`) by a copy, anything deeper by a deep copy
        self.copied = tuple((k, _is_flat(v)) for k, v in meta.items() if isinstance(v, (list, dict)))
        self._layouts: dict[tuple, list] = {}  # check_layout's problems, by the datasets' shapes and dtypes

    def filled(self, hashes: list[str]) -> dict[str, Any]:
        meta = self.meta.copy()
        for hole, value in zip(self.holes, hashes):
            meta[hole] = value
        for k, flat in self.copied:
            meta[k] = meta[k].copy() if flat else copy.deepcopy(meta[k])
        return meta

    def layout(self, meta: dict[str, Any], actual: dict[str, tuple]) -> list:
        """kind.check_layout(meta, actual): of a built-in type, a function of the members other than hashes
        and of ``actual`` alone."""
        key = tuple(actual.items())
        problems = self._layouts.get(key)
        if problems is None:
            problems = list(self.kind.check_layout(meta, actual))
            if len(self._layouts) < _MetaMemo.MAX_LAYOUTS:
                self._layouts[key] = problems
        return problems


class _MetaMemo:
    """The `update` texts of one container's members that passed their checks, by their text less their hashes."""

    MAX_TEMPLATES = 64  # a file whose every `update` differs costs a failed look-up per parameter, no more
    MAX_LAYOUTS = 64

    def __init__(self) -> None:
        self.templates: dict[tuple[str, ...], _Template] = {}
        self.last: _Template | None = None  # the template template_of() found last
        self.recorded = 0  # texts tried as templates (counted work, for tests)

    @staticmethod
    def split(text: object) -> tuple[tuple[str, ...], list[str]] | tuple[None, None]:
        """The text less its hashes (the parts around them and the members' names), and the hashes."""
        if type(text) is not str:
            return None, None
        parts = _HOLES.split(text)
        if len(parts) == 1:
            return None, None
        hashes = parts[2::3]
        del parts[2::3]
        return tuple(parts), hashes

    def record(self, key: tuple[str, ...], hashes: list[str], meta: dict[str, Any], kind: UpdateType, path: str,
               types: Mapping[str, UpdateType], minor: int, limits: Limits, is_file: bool) -> _Template | None:
        """The template of a text that passed every check before its datasets, or None where it cannot be one."""
        if len(self.templates) >= self.MAX_TEMPLATES or id(kind) not in _BUILT_IN:
            return None
        holes = key[1::2]
        properties = kind.schema["properties"]
        if len(set(holes)) != len(holes) or any(properties.get(h) != _HEX_PATTERN or meta.get(h) != v
                                                for h, v in zip(holes, hashes)):
            return None
        self.recorded += 1
        # the same text with other digits in its holes (each its own): the same JSON but for them, the same checks
        others = [f"{i:064x}" for i in range(1, len(holes) + 1)]
        text = key[0] + "".join(f'"{h}":"{v}"{rest}' for h, v, rest in zip(holes, others, key[2::2]))
        scratch: list[Finding] = []
        again, again_kind = _parse_meta(path, text, scratch, types, minor, limits, is_file)
        if again is None or again_kind is not kind or scratch or list(again) != list(meta) or any(
                (again[k] != v) if k not in holes else again[k] != others[holes.index(k)]
                for k, v in meta.items()) or any(repr(again[k]) != repr(meta[k]) for k in meta if k not in holes):
            return None
        if shape_problem(again["shape"], dtype_named(again["dtype"]).itemsize, limits) or any(kind.check_meta(again)):
            return None
        template = self.templates[key] = _Template(kind, again, holes, key)
        return template

    def template_of(self, text: object) -> tuple[_Template, list[str]] | tuple[None, None]:
        """The template of ``text`` (None: none yet) and its hashes, as split() and a look-up find them; a text of
        the shape of the last one found is cut by one match of that template's text (a third of split's time).

        That is split's outcome: the text is the last template's parts with 64 lower-case hex digits in each hole,
        and any text alike but for the digits in its holes is cut at the same places. A match of _HOLES that
        reaches into a hole can only take it whole as its `[0-9a-f]{64}` (whatever the digits), between the `":"`
        and the `"` around it: a hole holds no `"`, so no match begins in it, and a name (`[A-Za-z_]*sha256`)
        cannot end in it, nor at its closing `"`, for want of an `s` and an `h`. Every other try of the
        pattern sees the same characters."""
        last = self.last
        if last is not None and type(text) is str:
            found_here = last.literally.fullmatch(text)
            if found_here is not None:
                return last, list(found_here.groups())
        key, found = self.split(text)
        template = None if key is None else self.templates.get(key)
        if template is None:
            return None, None
        self.last = template
        assert found is not None
        return template, found


class Datasets:
    """Makes each dataset's reader, opened only when it is used (an open HDF5 dataset costs ~17 KB of
    libhdf5's memory; a file may hold 10^5): chunk_reader.py's where the walk planned it, else libhdf5's
    (:meth:`of_file`) — or never libhdf5's, for a file an isolated child walked (:meth:`detached`)."""

    def __init__(self, f: h5py.File | None, fd: Source | None):
        self._file, self._fd = f, fd

    @classmethod
    def of_file(cls, f: h5py.File, source: RangeSource | None = None) -> "Datasets":
        """``source``: how to read the stored bytes of a file libhdf5 reads without a descriptor (a remote
        file read in place): the planned datasets are then read through it, not through libhdf5 — which
        holds its lock while it reads, and a remote read must not wait under that lock."""
        fd: Source | None = source
        if fd is None:
            try:
                fd = f.id.get_vfd_handle()
            except Exception:  # a driver without a file descriptor
                fd = None
        return cls(f, fd)

    @classmethod
    def detached(cls, fd: int) -> "Datasets":
        """Readers of a file this process never hands to libhdf5: each dataset's bytes through its plan,
        or as the child read them (compact data)."""
        return cls(None, fd)

    def lazy(self, path: str, info: DatasetInfo | None) -> DetachedDataset | LazyDataset | PlannedDataset:
        assert info is not None  # only datasets the walk accepted are handed out
        if self._file is None:
            assert self._fd is not None
            return DetachedDataset(path, info.shape, info.dtype, info.stored, info.plan, self._fd, info.inline)
        dataset = LazyDataset(self._file, path, info)
        if info.plan is None or self._fd is None:
            return dataset
        return PlannedDataset(dataset, info.plan, self._fd)


class LazyDataset:
    """An h5py dataset that libhdf5 opens on first use; its shape, dtype, name and stored size are known
    from the structure walk without it."""

    __slots__ = ("_file", "name", "shape", "dtype", "storage_size", "_dataset")

    def __init__(self, f: h5py.File, path: str, info: DatasetInfo):
        self._file = f
        self.name = path
        self.shape = info.shape
        self.dtype = info.dtype
        self.storage_size = info.stored  # bytes in the file, after the filters
        self._dataset: h5py.Dataset | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def _open(self) -> h5py.Dataset:
        if self._dataset is None:
            self._dataset = self._file[self.name]
        return self._dataset

    def __getattr__(self, attribute: str) -> Any:  # the rest of h5py's Dataset
        return getattr(self._open(), attribute)

    def __getitem__(self, selection: Any) -> Any:  # any h5py selection; an array, or a scalar of one
        return self._open()[selection]

    def __len__(self) -> int:
        return len(self._open())

    def read_direct(self, out: np.ndarray, *args: Any, **kwargs: Any) -> None:  # h5py's source_sel, dest_sel
        self._open().read_direct(out, *args, **kwargs)
