"""SPEC.md §3–§4: the root attributes — identity, version, extensions, commit."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mdiff.errors import InvalidFileError
from mdiff.format import canonical_json, commit as commit_module
from mdiff.format.commit import Commit
from mdiff.format.constants import (
    ATTR_COMMIT, ATTR_EXTENSIONS, ATTR_FORMAT, ATTR_VERSION, FORMAT_MAJOR, FORMAT_MINOR, FORMAT_NAME, STATE_DIGEST_MINOR,
    FILES_GROUP, KNOWN_EXTENSIONS, LAYOUT_GROUP, PARAMETERS_GROUP, UPDATE_TYPES_GROUP,
)
from mdiff.format.findings import Finding
from mdiff.hdf5walk.walk import Inventory

_VERSION = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")  # at most 9 digits each
ROOT_ATTRIBUTES = {ATTR_FORMAT, ATTR_VERSION, ATTR_EXTENSIONS, ATTR_COMMIT}


@dataclass(frozen=True)
class Header:
    version: tuple[int, int]
    extensions: tuple[dict, ...]
    commit: Commit | None  # None when the commit attribute is invalid


def parse_header(inventory: Inventory) -> tuple[Header | None, list[Finding]]:
    """The header, or None when the file cannot be read as mdiff 1.x at all."""
    root = inventory.objects["/"]
    attrs = root.attrs
    findings: list[Finding] = []
    if root.kind == "refused":
        return None, []  # its attributes cannot be read (MD513, §8.1): nothing can be read as mdiff
    if {ATTR_FORMAT, ATTR_VERSION} & root.refused_attrs:
        return None, []  # already reported under §8.2; nothing can be read without them
    if attrs.get(ATTR_FORMAT) != FORMAT_NAME:
        return None, [Finding("MD101", "/", f"`format` is {attrs.get(ATTR_FORMAT)!r}, not {FORMAT_NAME!r}")]
    m = _VERSION.fullmatch(attrs.get(ATTR_VERSION, ""))
    if not m:
        return None, [Finding("MD102", "/", f"`format_version` is {attrs.get(ATTR_VERSION)!r}, not MAJOR.MINOR")]
    version = (int(m.group(1)), int(m.group(2)))
    if version[0] != FORMAT_MAJOR:
        return None, [Finding("MD103", "/", f"format version {version[0]}.{version[1]}: this reader reads {FORMAT_MAJOR}.x")]
    newer_minor = version[1] > FORMAT_MINOR
    if newer_minor:
        findings.append(Finding("MD104", "/", f"format version {version[0]}.{version[1]} is newer than "
                                              f"{FORMAT_MAJOR}.{FORMAT_MINOR}; unknown members are ignored"))
    extensions = parse_extensions(attrs.get(ATTR_EXTENSIONS), findings)
    commit = None
    if ATTR_COMMIT not in root.refused_attrs:
        try:
            commit = commit_module.parse_attribute(attrs.get(ATTR_COMMIT), known_members_only=newer_minor)
        except InvalidFileError as exc:
            findings.append(Finding.from_error(exc))
    if commit is not None and commit.state_sha256 is not None and version[1] < STATE_DIGEST_MINOR:
        findings.append(Finding("MD202", "/", f"commit metadata is invalid: member 'state_sha256' exists from format "
                                              f"version 1.{STATE_DIGEST_MINOR}; this file says {version[0]}.{version[1]}"))
        commit = None
    for name in sorted(set(attrs) - ROOT_ATTRIBUTES):
        findings.append(Finding("MD303", "/", f"unknown root attribute {name!r}"))
    added_in_1_1 = (FILES_GROUP, LAYOUT_GROUP)
    for name, member in inventory.objects["/"].children.items():
        if member.kind == "refused":
            continue  # reported once, under §8 (SPEC §12.1)
        if name in added_in_1_1 and version == (1, 0):
            findings.append(Finding("MD306", "/" + name, f"`/{name}` exists from format version 1.1; this file says 1.0"))
        elif name not in (PARAMETERS_GROUP, UPDATE_TYPES_GROUP, *added_in_1_1):
            findings.append(Finding("MD303", "/" + name, "unknown root member"))
    return Header(version, tuple(extensions), commit), findings


def parse_extensions(text: str | None, findings: list[Finding]) -> list[dict]:
    """The extensions of an `extensions` attribute's text (§3.4), and its findings added to ``findings``: MD105 (none
    then), MD106, MD107. A writer checks the text it would write with it (writer.py)."""
    if text is None:
        return []
    try:
        value = canonical_json.loads(text)
    except ValueError as exc:
        findings.append(Finding("MD105", "/", f"`extensions` is not valid JSON: {exc}"))
        return []
    well_formed = isinstance(value, list) and all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("must_understand"), bool)
        for e in value
    )
    if not well_formed or len({e["name"] for e in value}) != len(value):
        findings.append(Finding("MD105", "/", "`extensions` must be an array of {name, must_understand} with unique names"))
        return []
    for e in value:
        if e["name"] in KNOWN_EXTENSIONS:
            continue
        if e["must_understand"]:
            findings.append(Finding("MD106", "/", f"extension {e['name']!r} must be understood; this reader does not know it"))
        else:
            findings.append(Finding("MD107", "/", f"optional extension {e['name']!r} is ignored"))
    return value
