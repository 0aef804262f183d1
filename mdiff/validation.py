"""SPEC.md §12: check a file against every rule; report findings, never raise on a bad file."""

from __future__ import annotations

import os
from dataclasses import asdict

from mdiff.errors import InvalidFileError
from mdiff.format.findings import Finding
from mdiff.format.limits import DEFAULT_LIMITS, Limits
from mdiff.format.parameters import Parameter
from mdiff.format.reader import FILTER_PLUGINS, open_hdf5, read_contents
from mdiff.isolation import Isolation, IsolationFailure, shared_worker, task


def validate(path, limits: Limits = DEFAULT_LIMITS, check_data: bool = True, isolation: Isolation | None = None) -> list[Finding]:
    """Every finding for the file at ``path``; an empty list means valid.

    With ``check_data`` the datasets are read too, one parameter at a time, for
    the rules that depend on values (sparse index order, bool values, checksums).
    With ``isolation`` the work runs in a child process with those time and memory
    limits; a crash, hang or runaway allocation is then the finding MD515 — the way to check a
    stranger's file (without it, libhdf5 parses the file in this process).
    """
    if isolation is not None:
        try:
            answer = _validate_in(shared_worker(isolation), path, limits, check_data)
            return [_finding_of(item) for item in answer]
        except IsolationFailure as failure:
            return [Finding("MD515", os.fspath(path), failure.reason)]
        except (TypeError, ValueError):
            return [Finding("MD515", os.fspath(path), "the isolated child answered something that is not findings")]
    return _validate(path, limits, check_data)


def _validate_in(worker, path, limits: Limits, check_data: bool) -> list:
    from mdiff.format.reader import _open_regular_file

    try:
        fd, _ = _open_regular_file(path)
    except InvalidFileError as exc:
        return [[exc.code, os.fspath(path), exc.message]]
    try:
        return worker.call("validate", fd, path, asdict(limits), check_data)
    finally:
        os.close(fd)


@task("validate")
def _validate_as_json(path, shown: str, limits: dict, check_data: bool) -> list[list[str]]:
    return [[x.code, shown if x.path == path else x.path, x.message] for x in _validate(path, Limits(**limits), check_data)]


def _finding_of(item: object) -> Finding:
    """A finding an isolated child sent; ValueError when it is not one."""
    from mdiff.rules import RULES

    if not (isinstance(item, list) and len(item) == 3 and item[0] in RULES and all(isinstance(x, str) for x in item)):
        raise ValueError("not a finding")
    return Finding(*item)


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
            layout = contents.layout
            for entry in [*contents.parameters.values(), *contents.files.values()]:
                if entry.sound:
                    findings += _data_findings(entry)
            if layout is not None and layout.sound:
                data = _data_findings(layout)
                findings += data
                # §12.1 rule 6: MD307 once the layout's value passed its own data rules (MD410, MD513) — findings
                # of §8 below /layout (a refused unknown member) do not prevent it
                if layout.update.type == "replace" and not any(x.is_error for x in data):
                    findings += _layout_findings(layout)
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
