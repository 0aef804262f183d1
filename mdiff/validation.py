"""SPEC.md §12: check a file against every rule; report findings, never raise on a bad file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from mdiff.errors import InvalidFileError
from mdiff.format.commit import Commit
from mdiff.format.dtypes import DType, dtype_named
from mdiff.format.findings import Finding
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits
from mdiff.format.parameters import Parameter
from mdiff.format.reader import FILTER_PLUGINS, DiffFile, _open_regular_file, open_hdf5, read_contents
from mdiff.isolation import Isolation, IsolationFailure, shared_worker, task
from mdiff.ranged_file import no_collection
from mdiff.updates.base import Update, read_small_together


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


@dataclass(frozen=True)
class UpdateSummary:
    """Of an update, what its metadata says: its type, shape, dtype, sha256 (None where it has none), whether its
    type carries a sha256 of its exact result (§7), and the bytes its datasets declare."""

    type: str
    shape: tuple[int, ...]
    dtype: DType
    sha256: str | None
    carries_sha256: bool
    stored_bytes: int

    @classmethod
    def of(cls, update: Update) -> "UpdateSummary":
        return cls(update.type, update.shape, update.dtype, update.sha256, update.update_type.carries_sha256,
                   update.stored_bytes)

    def to_json(self) -> list:
        return [self.type, list(self.shape), self.dtype.name, self.sha256, self.carries_sha256, self.stored_bytes]

    @classmethod
    def from_json(cls, item: object) -> "UpdateSummary":
        """ValueError when ``item`` is not what :meth:`to_json` makes (an isolated child's, checked)."""
        if not (isinstance(item, list) and len(item) == 6):
            raise ValueError("not an update's summary")
        kind, shape, dtype, sha256, carries, stored = item
        if not (isinstance(kind, str) and isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and isinstance(dtype, str) and (sha256 is None or isinstance(sha256, str))
                and isinstance(carries, bool) and type(stored) is int):
            raise ValueError("not an update's summary")
        return cls(kind, tuple(shape), dtype_named(dtype), sha256, carries, stored)


@dataclass(frozen=True)
class Summary:
    """What a valid file holds, as its metadata says — its commit, and each parameter's, file's and the layout's
    update (UpdateSummary) — for a checker that reads no data of it (fsck)."""

    commit: Commit
    parameters: dict[str, UpdateSummary]  # in the file's order
    files: dict[str, UpdateSummary]
    layout: UpdateSummary | None

    @classmethod
    def of(cls, commit: Commit, parameters: Mapping[str, Update], files: Mapping[str, Update],
           layout: Update | None) -> "Summary":
        return cls(commit, {name: UpdateSummary.of(u) for name, u in parameters.items()},
                   {path: UpdateSummary.of(u) for path, u in files.items()},
                   None if layout is None else UpdateSummary.of(layout))

    @classmethod
    def of_diff(cls, diff: DiffFile) -> "Summary":
        return cls.of(diff.commit, {name: diff[name] for name in diff}, diff.files, diff.layout)

    def to_json(self) -> dict:
        return {"commit": self.commit.to_json(),
                "parameters": [[name, u.to_json()] for name, u in self.parameters.items()],
                "files": [[path, u.to_json()] for path, u in self.files.items()],
                "layout": None if self.layout is None else self.layout.to_json()}

    @classmethod
    def from_json(cls, data: object) -> "Summary":
        """ValueError when ``data`` is not what :meth:`to_json` makes."""
        from mdiff.format import commit as commit_module

        try:
            if not isinstance(data, dict) or set(data) != {"commit", "parameters", "files", "layout"}:
                raise ValueError("not a summary")
            commit_module.check(data["commit"])
            commit = Commit.from_json(data["commit"])

            def entries(items: object) -> dict[str, UpdateSummary]:
                if not isinstance(items, list):
                    raise ValueError("not a list of updates")
                out = {}
                for item in items:
                    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)) or item[0] in out:
                        raise ValueError("not a named update")
                    out[item[0]] = UpdateSummary.from_json(item[1])
                return out

            layout = None if data["layout"] is None else UpdateSummary.from_json(data["layout"])
            return cls(commit, entries(data["parameters"]), entries(data["files"]), layout)
        except (InvalidFileError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a summary: {exc}") from None


def validate_and_summarize(path, limits: Limits = DEFAULT_LIMITS, check_data: bool = True,
                           isolation: Isolation | None = None) -> tuple[list[Finding], Summary | None]:
    """:func:`validate`, and, for a file without an error, what its metadata says (Summary), from the same
    reading of it: what a checker that validates a file and then reads its metadata (fsck) would otherwise read
    again — with ``isolation``, in a second child's walk and a parse in this process. None with an error."""
    if isolation is None:
        found: list[Summary] = []
        findings = _validate(path, limits, check_data, found)
        return findings, found[0] if found else None
    try:
        fd, _ = _open_regular_file(path)
    except InvalidFileError as exc:
        return [Finding(exc.code, os.fspath(path), exc.message)], None
    try:
        with no_collection():  # ~10 objects a parameter, all kept (see reader.DiffFile)
            answer = shared_worker(isolation).call("validate-and-summarize", fd, path, asdict(limits), check_data)
            if not isinstance(answer, dict) or set(answer) != {"findings", "summary"}:
                raise ValueError("not findings and a summary")
            findings = [_finding_of(item) for item in answer["findings"]]
            errors = any(x.is_error for x in findings)
            if errors != (answer["summary"] is None):
                raise ValueError("a summary of a file with errors, or none of one without")
            return findings, None if errors else Summary.from_json(answer["summary"])
    except IsolationFailure as failure:
        return [Finding("MD515", os.fspath(path), failure.reason)], None
    except (TypeError, ValueError):
        return [Finding("MD515", os.fspath(path), "the isolated child answered something that is not findings and a summary")], None
    finally:
        os.close(fd)


def _validate_in(worker, path, limits: Limits, check_data: bool) -> list:
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


@task("validate-and-summarize")
def _validate_and_summarize_as_json(path, shown: str, limits: dict, check_data: bool) -> dict:
    found: list[Summary] = []
    findings = _validate(path, Limits(**limits), check_data, found)
    return {"findings": [[x.code, shown if x.path == path else x.path, x.message] for x in findings],
            "summary": found[0].to_json() if found else None}


def _finding_of(item: object) -> Finding:
    """A finding an isolated child sent; ValueError when it is not one."""
    from mdiff.rules import RULES

    if not (isinstance(item, list) and len(item) == 3 and item[0] in RULES and all(isinstance(x, str) for x in item)):
        raise ValueError("not a finding")
    return Finding(*item)


def _validate(path, limits: Limits, check_data: bool, summary: list | None = None) -> list[Finding]:
    """The findings; with ``summary``, what a file without an error holds is appended to it (Summary)."""
    with FILTER_PLUGINS.off(), no_collection():  # see DiffFile: what the walk makes is all kept
        return _validate_file(path, limits, check_data, summary)


def _validate_file(path, limits: Limits, check_data: bool, summary: list | None = None) -> list[Finding]:
    try:
        f, size = open_hdf5(path)
    except InvalidFileError as exc:
        return [Finding("MD100", os.fspath(path), exc.message)]
    try:
        contents = read_contents(f, size, limits)
        findings = list(contents.findings)
        if check_data:
            layout = contents.layout
            sound = [entry for entry in [*contents.parameters.values(), *contents.files.values()] if entry.sound]
            # small ones read thousands at a time (issue 31.3): the same findings
            for entry, update in zip(sound, read_small_together(entry.update for entry in sound)):
                findings += _data_findings(entry, update)
            if layout is not None and layout.sound:
                data = _data_findings(layout)
                findings += data
                # §12.1 rule 6: MD307 once the layout's value passed its own data rules (MD410, MD513) — findings
                # of §8 below /layout (a refused unknown member) do not prevent it
                if layout.update.type == "replace" and not any(x.is_error for x in data):
                    findings += _layout_findings(layout)
        if summary is not None and contents.header is not None and contents.header.commit is not None \
                and not any(x.is_error for x in findings):
            summary.append(Summary.of(contents.header.commit, {n: p.update for n, p in contents.parameters.items()},
                                      {n: p.update for n, p in contents.files.items()},
                                      contents.layout.update if contents.layout is not None else None))
        return findings
    finally:
        f.close()


def _data_findings(entry: Parameter, update: Update | None = None) -> list[Finding]:
    """The value rules of one parameter, file or layout (MD408–MD410, MD513 for data that does not decode);
    ``update``: its update with the data read already (read_small_together)."""
    update = entry.update if update is None else update
    kind = update.update_type
    try:
        return [Finding(code, f"{entry.path}/{dataset}" if dataset else entry.path, message)
                for code, dataset, message in kind.check_data(update)]
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
