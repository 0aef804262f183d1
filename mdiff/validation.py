"""SPEC.md §12: check a file against every rule; report findings, never raise on a bad file."""

from __future__ import annotations

import os

from mdiff.errors import InvalidFileError
from mdiff.format.findings import Finding
from mdiff.format.limits import DEFAULT_LIMITS, Limits
from mdiff.format.parameters import Parameter
from mdiff.format.reader import FILTER_PLUGINS, open_hdf5, read_contents
from mdiff.isolation import Isolation, IsolationFailure, run_isolated


def validate(path, limits: Limits = DEFAULT_LIMITS, check_data: bool = True, isolation: Isolation | None = None) -> list[Finding]:
    """Every finding for the file at ``path``; an empty list means valid.

    With ``check_data`` the datasets are read too, one parameter at a time, for
    the rules that depend on values (sparse index order, bool values, checksums).
    With ``isolation`` the work runs in a child process with those time and memory
    limits; a crash, hang or runaway allocation is then the finding MD515.
    """
    if isolation is not None:
        try:
            return run_isolated(_validate, path, limits, check_data, limits=isolation)
        except IsolationFailure as failure:
            return [Finding("MD515", os.fspath(path), failure.reason)]
    return _validate(path, limits, check_data)


def _validate(path, limits: Limits, check_data: bool) -> list[Finding]:
    with FILTER_PLUGINS.off():
        return _validate_file(path, limits, check_data)


def _validate_file(path, limits: Limits, check_data: bool) -> list[Finding]:
    try:
        f, size = open_hdf5(path)
    except InvalidFileError as exc:
        return [Finding("MD100", os.fspath(path), exc.message)]
    try:
        contents = read_contents(f, size, limits)
        findings = list(contents.findings)
        if check_data:
            layout = [contents.layout] if contents.layout is not None else []
            for entry in [*contents.parameters.values(), *contents.files.values(), *layout]:
                if entry.sound:
                    findings += _data_findings(entry)
            if layout and layout[0].sound and layout[0].update.type == "replace" and not any(
                    x.is_error and x.path.startswith(layout[0].path) for x in findings):
                findings += _layout_findings(layout[0])
        return findings
    finally:
        f.close()


def _data_findings(entry: Parameter) -> list[Finding]:
    """The value rules of one parameter, file or layout (MD408–MD410, MD513 for data that does not decode)."""
    kind = entry.update.update_type
    try:
        return [Finding(code, f"{entry.path}/{dataset}" if dataset else entry.path, message)
                for code, dataset, message in kind.check_data(entry.update)]
    except InvalidFileError as exc:  # a chunk that fails to decode (MD513)
        return [Finding.from_error(exc)]


def _layout_findings(entry: Parameter) -> list[Finding]:
    """MD307: the layout's value is a layout (§5.6)."""
    from mdiff.format import layout

    try:
        layout.parse(entry.update.array("value").tobytes(), entry.path)
    except InvalidFileError as exc:
        return [Finding.from_error(exc)]
    return []


def is_valid(findings: list[Finding]) -> bool:
    return not any(x.is_error for x in findings)
