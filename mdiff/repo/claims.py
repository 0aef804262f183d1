"""SPEC.md §4.2, §13.5: what the commits' metadata say a state holds (its claims), its digest, and
whether a snapshot agrees with them."""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format import canonical_json
from mdiff.format.commit import Commit
from mdiff.format.dtypes import DType
from mdiff.format.reader import DiffFile
from mdiff.updates.base import Update
from mdiff.validation import Summary


class CommitHistory(Protocol):
    """What the digest check reads: each commit's parents and metadata, and its file."""

    def parents(self, commit_id: str) -> tuple[str, ...]: ...

    def metadata(self, commit_id: str) -> Commit: ...

    def open_commit(self, commit_id: str) -> DiffFile: ...


@dataclass
class StateClaims:
    """What the commits' metadata say the state at a commit holds (§13.5): each parameter's shape, dtype
    and sha256 (None for an inexact value, §13.4), each file's sha256, the layout's (None: no layout)."""

    parameters: dict[str, tuple[tuple[int, ...], DType, str | None]]
    files: dict[str, str]
    layout: str | None

    def digest(self) -> str:
        """§4.2 `state_sha256`: the sha256 of the state's digest object in canonical JSON (Appendix A) —
        ``{"files": {path: sha256}, "layout": sha256 or null, "parameters": {name: {"dtype", "sha256"
        (null: inexact), "shape"}}}``."""
        parameters = self.parameters
        if not all(type(d) is int for shape, _, _ in parameters.values() for d in shape):  # not a state's shapes
            digest_object = {
                "files": dict(self.files),
                "layout": self.layout,
                "parameters": {name: {"dtype": dtype.name, "sha256": sha256, "shape": list(shape)}
                               for name, (shape, dtype, sha256) in parameters.items()},
            }
            return hashlib.sha256(canonical_json.dumps(digest_object).encode("utf-8")).hexdigest()
        # the same text, each parameter's member written at once rather than as a dict of 10^5 dicts that json
        # then sorts and walks: names and strings escaped by json's own encoder, keys in the order it sorts them
        # (by code point), integers as it writes them (int.__repr__)
        text = _string
        members = ",".join([
            f'{text(name)}:{{"dtype":{text(dtype.name)},"sha256":{"null" if sha256 is None else text(sha256)},'
            f'"shape":[{",".join(map(int.__repr__, shape))}]}}'
            for name, (shape, dtype, sha256) in sorted(parameters.items(), key=_by_name)])
        head = canonical_json.dumps({"files": dict(self.files), "layout": self.layout})
        return hashlib.sha256(f'{head[:-1]},"parameters":{{{members}}}}}'.encode("utf-8")).hexdigest()

    def after(self, update: Update, name: str) -> None:
        """The claims once ``update`` of parameter ``name`` is applied (metadata only)."""
        if update.type == "delete":
            self.parameters.pop(name, None)
        else:
            sha256 = update.sha256 if update.update_type.carries_sha256 else None
            self.parameters[name] = (update.shape, update.dtype, sha256)

    def after_file(self, update: Update, path: str) -> None:
        if update.type == "delete":
            self.files.pop(path, None)
        else:
            self.files[path] = update.sha256 or ""

    def after_layout(self, update: Update) -> None:
        self.layout = None if update.type == "delete" else update.sha256


def _by_name(item: tuple[str, object]) -> str:
    return item[0]


_string = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) writes a string as


Claim = tuple[tuple[int, ...], DType, "str | None"]  # a parameter's shape, dtype and sha256 (None: inexact)


@dataclass(frozen=True)
class ClaimChanges:
    """What a commit's updates do to the claims of its first parent's state (§13.5), taken from its file's
    metadata once (what StateClaims.after, after_file and after_layout would do), to apply to claims later
    without the file: None for a deleted parameter or file; ``layout`` None when the commit leaves the
    layout as it is, else the new layout's sha256 in a 1-tuple (None in it: deleted)."""

    parameters: tuple[tuple[str, Claim | None], ...]
    files: tuple[tuple[str, str | None], ...]
    layout: tuple[str | None] | None

    @classmethod
    def of(cls, summary: Summary) -> "ClaimChanges":
        """What a commit's file says (validation.Summary: of a DiffFile, Summary.of_diff)."""
        parameters = tuple((name, None if u.type == "delete" else (u.shape, u.dtype, u.sha256 if u.carries_sha256 else None))
                           for name, u in summary.parameters.items())
        files = tuple((path, None if u.type == "delete" else u.sha256 or "") for path, u in summary.files.items())
        layout = None if summary.layout is None else (None if summary.layout.type == "delete" else summary.layout.sha256,)
        return cls(parameters, files, layout)

    def applied(self, claims: StateClaims) -> None:
        """Apply these changes to ``claims``."""
        for name, claim in self.parameters:
            if claim is None:
                claims.parameters.pop(name, None)
            else:
                claims.parameters[name] = claim
        for path, sha256 in self.files:
            if sha256 is None:
                claims.files.pop(path, None)
            else:
                claims.files[path] = sha256
        if self.layout is not None:
            claims.layout = self.layout[0]


def state_digest_problems(repo: CommitHistory, commit_ids: list[str],
                          changes: Mapping[str, ClaimChanges] | None = None) -> dict[str, str]:
    """MD808 for a checker (§4.2, §13.4): of the commits given, those whose `state_sha256` is not the digest
    of the state their first parent's state and their updates make, with why. Each commit's claims are
    computed once, from its first parent's, its file's metadata alone — or from ``changes``, where the
    checker has taken them already; a commit whose file or first-parent line cannot be read is left out
    (the checker reports it otherwise)."""
    known: dict[str, StateClaims] = {}
    problems: dict[str, str] = {}
    for commit_id in commit_ids:
        try:
            line: list[str] = []
            cursor: str | None = commit_id
            while cursor is not None and cursor not in known:
                line.append(cursor)
                parents = repo.parents(cursor)
                cursor = parents[0] if parents else None
            claims = known[cursor] if cursor is not None else StateClaims({}, {}, None)
            for cid in reversed(line):
                claims = StateClaims(dict(claims.parameters), dict(claims.files), claims.layout)
                taken = changes.get(cid) if changes is not None else None
                if taken is None:
                    with repo.open_commit(cid) as diff:
                        taken = ClaimChanges.of(Summary.of_diff(diff))
                taken.applied(claims)
                known[cid] = claims
        except (RepositoryError, InvalidFileError):
            continue
        digest = repo.metadata(commit_id).state_sha256
        if digest is not None and known[commit_id].digest() != digest:
            problems[commit_id] = (f"its state_sha256 {digest[:12]}… is not the digest of the state its first "
                                   f"parent's state and its updates make ({known[commit_id].digest()[:12]}…)")
    return problems


def snapshot_inexact(snapshot: DiffFile, commit_id: str) -> set[str] | None:
    """§13.5: the inexact values of a usable snapshot of ``commit_id`` — `replace` updates only (of its
    parameters, files and layout), `meta.snapshot_of` its commit, `meta.inexact` well formed —, or None
    for one to walk past."""
    listed = inexact_listed(snapshot.commit.meta)
    updates = [snapshot[name] for name in snapshot] + list(snapshot.files.values())
    updates += [snapshot.layout] if snapshot.layout is not None else []
    usable = (snapshot.commit.meta.get("snapshot_of") == commit_id and listed is not None
              and listed <= set(snapshot) and all(update.type == "replace" for update in updates))
    return listed if usable else None


def snapshot_claims(snapshot: DiffFile) -> StateClaims:
    """What a snapshot holds, as the claims of a state (§13.5): its values' shapes, dtypes and sha256 (None
    for those its `meta.inexact` lists), its files' and its layout's sha256."""
    listed = inexact_listed(snapshot.commit.meta) or set()
    parameters = {name: (snapshot[name].shape, snapshot[name].dtype, None if name in listed else snapshot[name].sha256)
                  for name in snapshot}
    return StateClaims(parameters, {path: update.sha256 or "" for path, update in snapshot.files.items()},
                       snapshot.layout.sha256 if snapshot.layout is not None else None)


def snapshot_disagreement(snapshot: DiffFile, commit_id: str, claims: StateClaims) -> tuple[str, str] | None:
    """None when a checkout may start at the snapshot (§13.5); else why not: ("MD303", …) for a file that
    is not a usable snapshot, ("MD807", …) for one that disagrees with its commits — other names, shapes
    or dtypes than ``claims``, an exact value with another sha256, or other inexact values listed."""
    listed = snapshot_inexact(snapshot, commit_id)
    if listed is None:
        return "MD303", "not `replace` updates of its commit with a well-formed meta (§13.5)"
    held, defined = set(snapshot), set(claims.parameters)
    if held != defined:
        extra, lacking = sorted(held - defined), sorted(defined - held)
        return "MD807", (f"it holds {extra[0]!r}, which the state at {commit_id[:12]} does not" if extra
                         else f"it lacks {lacking[0]!r}, which the state at {commit_id[:12]} holds")
    for name in sorted(held):
        shape, dtype, sha256 = claims.parameters[name]
        update = snapshot[name]
        if (update.shape, update.dtype) != (shape, dtype):
            return "MD807", (f"its {name!r} is {update.dtype.name} {list(update.shape)}, the commits' "
                             f"{dtype.name} {list(shape)}")
        if sha256 is not None and update.sha256 != sha256:
            return "MD807", f"its {name!r} has sha256 {update.sha256}, the commits record {sha256}"
    inexact = {name for name, (_, _, sha256) in claims.parameters.items() if sha256 is None}
    if listed != inexact:
        return "MD807", f"its meta.inexact lists {sorted(listed)}, the commits' inexact values are {sorted(inexact)}"
    files = {path: update.sha256 or "" for path, update in snapshot.files.items()}
    if files != claims.files:
        path = sorted(set(files) ^ set(claims.files) or {p for p in files if files[p] != claims.files[p]})[0]
        return "MD807", f"its file {path!r} differs from the commits' (missing, extra or another sha256)"
    layout = snapshot.layout.sha256 if snapshot.layout is not None else None
    if layout != claims.layout:
        return "MD807", "its weights layout differs from the commits'"
    return None


def inexact_listed(meta: Mapping[str, str]) -> set[str] | None:
    """A snapshot's `meta.inexact` (§13.5) as a set; None when malformed."""
    if "inexact" not in meta:
        return set()
    try:
        names = canonical_json.loads(meta["inexact"])
    except ValueError:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return set(names)
