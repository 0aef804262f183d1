"""SPEC.md §13: a repository — version control for model weights. The verbs (commit, checkout, status,
merge, squash, snapshot, diff, fsck, import-peft) over the store (store.py) and the lazy states
(states.py): a model is read and written one tensor at a time, never held whole."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mdiff.errors import RepositoryError
from mdiff.format.commit import Commit, default_date, resolve_author
from mdiff.format.dtypes import dtype_of, xor_bits
from mdiff.format.layout import Layout
from mdiff.format.writer import DiffWriter
from mdiff.frameworks import check_framework, numpy_state
from mdiff.progress import ByteCounter, Progress, tensor_bytes
from mdiff.repo import snapshots
from mdiff.repo.cleanup import DEFAULT_PRUNE_SECONDS, DEFAULT_REFLOG_EXPIRE_SECONDS, GcReport
from mdiff.repo.states import StateView
from mdiff.format.reader import open_diff
from mdiff.isolation import Isolation
from mdiff.repo.store import Store, branch_problem, shown
from mdiff.diffing import file_updates
from mdiff.updates import replace
from mdiff.updates.base import Update, sha256_hex

if TYPE_CHECKING:
    from mdiff.repo.remote_repository import RemoteRepository



@dataclass(frozen=True)
class CommitSummary:
    """What a commit recorded, for a line like git's."""

    commit_id: str
    branch: str | None
    changed: int = 0  # parameters
    added: int = 0
    deleted: int = 0
    files: dict[str, str] = field(default_factory=dict)  # path → "modified" | "added" | "deleted"
    layout_changed: bool = False
    stored_bytes: int = 0  # the commit file
    weights_bytes: int = 0  # the new state's tensors

    def line(self) -> str:
        parts = [f"{self.changed} changed, {self.added} added, {self.deleted} deleted"]
        if self.files:
            parts[0] += f", {len(self.files)} file{'s' if len(self.files) != 1 else ''}"
        unit, scale = ("MB", 1e6) if max(self.stored_bytes, self.weights_bytes) >= 1e6 else ("kB", 1e3)
        return (f"{parts[0]}; {self.stored_bytes / scale:.1f} {unit} stored for "
                f"{self.weights_bytes / scale:.1f} {unit} of weights")


@dataclass(frozen=True)
class Changes:
    """What a checkpoint changes against a commit (``status``)."""

    tensors: dict[str, str]  # name → "modified" | "added" | "deleted" | "retyped"
    files: dict[str, str]  # path → "modified" | "added" | "deleted"
    layout_changed: bool

    def __bool__(self) -> bool:
        return bool(self.tensors or self.files or self.layout_changed)


# holds the place of a commit's `state_sha256` until its updates are written (§4.2): the same length
_PLACEHOLDER_DIGEST = "0" * 64


class _NothingToCommit(Exception):
    pass


class Repository(Store):
    """A directory holding ``.mdiff/``; see SPEC.md §13 for the layout.

    States are given as a checkpoint path (a file, or a model folder with the files beside its
    weights) or as an in-memory state dict of numpy arrays or torch tensors.
    """

    # ------------------------------------------------------------ creation and discovery
    @classmethod
    def init(cls, root=".", branch: str = "main", isolation: Isolation | None | str = "auto") -> Repository:
        Store.create(Path(root), branch)
        return cls(Path(root), isolation)

    @staticmethod
    def open(url: str, storage_options: dict | None = None) -> RemoteRepository:
        """The repository at ``url`` (an fsspec URL or a local folder), read in place without cloning it:
        only the byte ranges a read needs move (SPEC.md §13.9; see RemoteRepository)."""
        from mdiff.repo.remote_repository import RemoteRepository

        return RemoteRepository(url, storage_options)

    @classmethod
    def find(cls, start=".", isolation: Isolation | None | str = "auto") -> Repository:
        """The repository containing ``start`` (searching upwards, like git). ``isolation``: see Store."""
        repo = cls(Store.locate(start), isolation)
        repo.check_format()
        return repo

    # ------------------------------------------------------------ states
    def open_state(self, commit_id: str | None, engine: str | None = None) -> StateView:
        """state(commit_id) (§13.4), read lazily: names, shapes and dtypes at once, each tensor when read."""
        return StateView(self, commit_id, engine)

    def state(self, commit_id: str | None, engine: str | None = None) -> dict[str, np.ndarray]:
        """The full state at a commit, in memory (every tensor read and verified)."""
        with self.open_state(commit_id, engine) as view:
            return {name: view.read(name) for name in view.keys()}

    def inexact_values(self, commit_id: str | None) -> frozenset[str]:
        return snapshots.inexact_values(self, commit_id)

    def replay_cost(self, commit_id: str) -> tuple[int, int, int]:
        """(commits after the snapshot a checkout starts at, or from the root; declared bytes it applies;
        the state's declared bytes)."""
        with self.open_state(commit_id) as view:
            return snapshots.replay_cost(view)

    def write_snapshot(self, commit_id: str, state: Mapping[str, np.ndarray]) -> None:
        snapshots.write_snapshot(self, commit_id, state)

    # ------------------------------------------------------------ commit
    def commit(self, new_state, message: str, author=None, date: str | None = None, meta=None,
               explicit: Mapping[str, Update] | None = None, progress: Progress | None = None, wait: bool = True,
               masks: Mapping[str, np.ndarray] | None = None, *, allow_empty: bool = False,
               allow_deletions: bool = False, exclude: Iterable[str] = ()) -> str | None:
        """Commit a new state on the current branch; returns the new commit id, or None when the state
        equals HEAD's (nothing is written unless ``allow_empty``). See :meth:`make_commit`."""
        summary = self.make_commit(new_state, message, author, date, meta, explicit, progress, wait, masks,
                                   allow_empty=allow_empty, allow_deletions=allow_deletions, exclude=exclude)
        return summary.commit_id if summary else None

    def make_commit(self, new_state, message: str, author=None, date: str | None = None, meta=None,
                    explicit: Mapping[str, Update] | None = None, progress: Progress | None = None,
                    wait: bool = True, masks: Mapping[str, np.ndarray] | None = None, *, allow_empty: bool = False,
                    allow_deletions: bool = False, exclude: Iterable[str] = ()) -> CommitSummary | None:
        """Commit a new state on the current branch and say what it recorded.

        ``new_state`` is a checkpoint path — a file, or a model folder (its files beside the weights
        are committed too; ``exclude`` leaves out more of them, by glob) — or a state dict of numpy
        arrays or torch tensors (files stay as they are). ``explicit`` supplies updates by hand (e.g.
        low-rank factors); ``masks`` (name → bool array) stores just the masked elements of those
        parameters; every other parameter is diffed exactly. A state lacking half or more of the
        parent's parameters is refused (MD806) unless ``allow_deletions`` — it is usually one shard
        of a sharded model. Returns None, writing nothing, when nothing changed, unless ``allow_empty``.
        """
        with self.lock(wait):
            branch, head = self.head()
            with contextlib.ExitStack() as stack:
                new = _open_new_state(stack, new_state, exclude)
                old = stack.enter_context(self.open_state(head))
                masks = {k: np.asarray(numpy_state(masks)[k], dtype=bool) for k in masks} if masks else {}
                summary = self._write_commit(
                    old, new, message, (head,) if head else (), explicit or {}, progress, masks,
                    allow_empty=allow_empty, allow_deletions=allow_deletions, branch=branch,
                    **_author_fields(author, date, meta))
            if summary is not None:
                self.advance(branch, summary.commit_id, f"commit: {message.splitlines()[0] if message else ''}")
        return summary

    def _write_commit(self, old: StateView, new: Mapping, message: str, parents: tuple[str, ...],
                      explicit: Mapping[str, Update], progress: Progress | None, masks: Mapping[str, np.ndarray] = {},
                      *, allow_empty: bool = True, allow_deletions: bool = True, snapshot: bool = True,
                      branch: str | None = None, only: Iterable[str] | None = None,
                      **commit_fields) -> CommitSummary | None:
        """Write the commit taking ``old`` (the first parent's state) to ``new``; None if nothing changed.
        ``only`` limits the parameters looked at (the others are taken as unchanged)."""
        lost = [name for name in old.keys() if name not in new and name not in explicit]
        if lost and not allow_deletions and 2 * len(lost) >= len(old):
            shown = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
            raise RepositoryError(
                "MD806", f"this commit would delete {len(lost)} of the {len(old)} parameters of its parent ({shown}). "
                         "Is it one shard of a sharded model? Commit the model folder, or its *.index.json, instead; "
                         "if you mean to delete them, commit with --allow-deletions")
        inexact = set(old.inexact)
        specs = {name: old.spec(name) for name in old.keys()}  # becomes the new state's, update by update
        counts = {"changed": 0, "added": 0, "deleted": 0}
        names = sorted(set(old.keys()) | set(new) | set(explicit)) if only is None else sorted(only)
        done = ByteCounter(progress, ((n, tensor_bytes(new if n in new else old, n) if n not in explicit else
                                       math.prod(explicit[n].shape) * explicit[n].dtype.itemsize) for n in names)
                           if progress else ())
        new_files = getattr(new, "files", None)
        new_layout: Layout | None = getattr(new, "layout", None)
        file_kinds: dict[str, str] = {}
        layout_changed = False
        claims = old.claims  # becomes the new state's, for its digest (§4.2 `state_sha256`)

        def write(writer: DiffWriter) -> None:
            nonlocal layout_changed
            for name, update in updates_between(old, new, explicit, masks, frozenset(inexact), names, done):
                writer.add(name, update)
                claims.after(update, name)
                counts["deleted" if update.type == "delete" else "changed" if name in old else "added"] += 1
                if update.type == "delete":
                    del specs[name]
                else:
                    specs[name] = (update.shape, update.dtype)
                if update.type == "delete" or update.update_type.carries_sha256:
                    inexact.discard(name)
                else:
                    inexact.add(name)
            if new_files is not None:
                for path, update in file_updates(old.files, new_files):
                    writer.add_file(path, update)
                    claims.after_file(update, path)
                    file_kinds[path] = ("deleted" if update.type == "delete"
                                        else "modified" if path in old.files else "added")
            if new_layout is not None:
                encoded = new_layout.encode()
                if encoded != old.layout_bytes:
                    layout_update = replace.encode(np.frombuffer(encoded, np.uint8))
                    writer.set_layout(layout_update)
                    claims.after_layout(layout_update)
                    layout_changed = True
            if not (allow_empty or any(counts.values()) or file_kinds or layout_changed):
                raise _NothingToCommit

        meta = Commit(message, parents=parents, state_sha256=_PLACEHOLDER_DIGEST, **commit_fields)
        try:
            commit_id = self.store(write, meta, seal=lambda: dataclasses.replace(meta, state_sha256=claims.digest()))
        except _NothingToCommit:
            return None
        self.remember_inexact(commit_id, frozenset(inexact))
        if snapshot:  # from the commit's own state, read back: what checkouts will see
            snapshots.snapshot_if_due(self, commit_id, lambda: self.open_state(commit_id))
        weights = sum(math.prod(shape) * dt.itemsize for shape, dt in specs.values())
        return CommitSummary(commit_id, branch, counts["changed"], counts["added"], counts["deleted"], file_kinds,
                             layout_changed, os.path.getsize(self.commit_path(commit_id)), weights)

    # ------------------------------------------------------------ checkout and status
    def checkout(self, rev: str = "HEAD", output=None, template=None, progress: Progress | None = None,
                 engine: str | None = None, *, framework: str = "np", max_shard_size: int | None = None):
        """The state at ``rev``. Without ``output``: a dict of numpy arrays (``framework="pt"``: torch
        tensors that ``load_state_dict(strict=True)`` accepts for a committed state dict). With it: written
        to a checkpoint file (.safetensors, .npz, .pt, .onnx with the base model as ``template``) or, for
        a path without such an extension, a model folder with the state's files (SPEC.md §10.2); returns
        the paths written."""
        from mdiff.repo.history import resolve

        check_framework(framework)
        with self.open_state(resolve(self, rev), engine) as view:
            return view.write(output, template, progress, framework=framework, max_shard_size=max_shard_size)

    def status(self, checkpoint, exclude: Iterable[str] = (), progress: Progress | None = None) -> Changes:
        """What a checkpoint (a file or a model folder) changes against HEAD."""
        with contextlib.ExitStack() as stack:
            new: Any = _open_new_state(stack, checkpoint, exclude)
            head = stack.enter_context(self.open_state(self.head()[1]))
            tensors = {}
            names = sorted(set(head.keys()) | set(new))
            done = ByteCounter(progress, ((n, tensor_bytes(new if n in new else head, n)) for n in names) if progress else ())
            for name in names:
                done(name)
                if name not in new:
                    tensors[name] = "deleted"
                elif name not in head:
                    tensors[name] = "added"
                elif head.spec(name) != new.spec(name):
                    tensors[name] = "retyped"
                elif np.count_nonzero(xor_bits(head[name], new[name])):
                    tensors[name] = "modified"
            files = {}
            new_files = getattr(new, "files", None)
            if new_files is not None:
                for path, update in file_updates(head.files, new_files):
                    files[path] = "deleted" if update.type == "delete" else "modified" if path in head.files else "added"
            new_layout = getattr(new, "layout", None)
            layout_changed = new_layout is not None and new_layout.encode() != head.layout_bytes
        return Changes(tensors, files, layout_changed)

    # ------------------------------------------------------------ branches
    def switch(self, branch: str, create: bool = False, start: str | None = None, wait: bool = True) -> None:
        """Make ``branch`` the current branch (commits go there); with ``create``, make it first, at ``start``
        (a revision; default HEAD)."""
        from mdiff.repo.history import resolve

        self.check_branch_name(branch)
        with self.lock(wait):
            if create:
                if self.has_branch(branch):
                    raise RepositoryError("MD801", f"branch {branch!r} exists already; switch to it without creating it")
                target = resolve(self, start) if start else self.head()[1]
                if target is None:
                    raise RepositoryError("MD801", "make a first commit before creating branches")
                self.create_branch(branch, target, f"branch: created from {start or 'HEAD'}")
            elif not self.has_branch(branch):
                raise RepositoryError("MD801", f"no branch {branch!r}; `mdiff switch -c {branch}` creates it")
            else:
                self.branch_target(branch)  # a malformed ref is refused before HEAD names it
            self.set_head(branch, message=f"switch to {branch}")

    def reset(self, rev: str, wait: bool = True) -> tuple[str | None, str | None, str]:
        """Move the current branch (or a detached HEAD) to ``rev`` — any commit, back or forth; nothing
        else changes (mdiff has no working tree). The move is in the reflog (§13.6), so ``reflog``
        shows where it was. Returns (branch, its commit before, after)."""
        from mdiff.repo.history import resolve

        with self.lock(wait):
            branch, before = self.head()
            target = resolve(self, rev)
            self.advance(branch, target, f"reset: moving to {rev}")
        return branch, before, target

    def force_branch(self, branch: str, rev: str, wait: bool = True) -> tuple[str | None, str]:
        """Point ``branch`` at ``rev``, creating it or moving it wherever it was (the current branch
        too: there is no working tree to disagree with it). Returns (its commit before, after)."""
        from mdiff.repo.history import resolve

        self.check_branch_name(branch)
        with self.lock(wait):
            target = resolve(self, rev)
            if not self.has_branch(branch):
                self.create_branch(branch, target, f"branch: created at {rev}")
                return None, target
            before = self.branch_target(branch)
            self.set_branch(branch, target, f"branch: forced to {rev}")
        return before, target

    def tag(self, name: str, rev: str = "HEAD", force: bool = False, wait: bool = True) -> tuple[str | None, str]:
        """Tag ``rev`` as ``name`` (``refs/tags/<name>``, §13.1); ``force`` moves an existing tag.
        Returns (the commit it named before, if any; the commit it names)."""
        from mdiff.repo.history import resolve

        self.check_tag_name(name)
        with self.lock(wait):
            target = resolve(self, rev)
            return self.create_tag(name, target, force), target

    def untag(self, name: str, wait: bool = True) -> str | None:
        """Delete tag ``name``; returns the commit it named."""
        with self.lock(wait):
            return self.delete_tag(name)

    def reflog(self, ref: str | None = None) -> tuple[str, list]:
        """(the ref, its reflog entries newest first): a branch name, ``HEAD``, ``refs/…``, or the
        current branch (HEAD's log when detached) by default."""
        if ref is None:
            current = self.head_ref()[0]
            ref = f"refs/heads/{current}" if current else "HEAD"
        elif ref != "HEAD" and not ref.startswith("refs/"):
            self.check_branch_name(ref)
            ref = f"refs/heads/{ref}"
        elif ref.startswith("refs/"):
            self.check_branch_name(ref)  # refs/heads/… and refs/tags/… are names of that form
        return ref, list(self.reflog_entries(ref))[::-1]

    # ------------------------------------------------------------ merge, squash, snapshot, diff
    def merge(self, rev: str, strategy: str = "average", message: str | None = None, author=None,
              date: str | None = None, meta=None, progress: Progress | None = None, wait: bool = True,
              fast_forward: bool = True) -> tuple[str | None, list]:
        """Merge ``rev`` into the current branch (§13.7): a commit with parents (HEAD, rev).

        Returns (commit id, []) — or (None, conflicts) with nothing written when some parameters or
        files conflict under the strategy; each conflict is (name, reason). The three states are read
        a parameter at a time. When HEAD is an ancestor of ``rev`` the branch just moves to it (a
        fast-forward, as git does; the id returned is ``rev``'s) unless ``fast_forward`` is False.
        """
        from mdiff.repo.history import ancestors, merge_base, resolve
        from mdiff.repo.merge import Strategy

        chosen = Strategy.parse(strategy)
        with self.lock(wait):
            branch, head = self.head()
            theirs_id = resolve(self, rev)
            if head is None:
                raise RepositoryError("MD804", "nothing to merge into: the current branch has no commit")
            if theirs_id == head or theirs_id in ancestors(self, head):
                raise RepositoryError("MD804", f"{rev} is already merged into {branch or 'HEAD'}")
            if fast_forward and head in ancestors(self, theirs_id):
                self.advance(branch, theirs_id, f"merge {rev}: fast-forward")
                return theirs_id, []
            base_id = merge_base(self, head, theirs_id)
            with self.open_state(head) as ours, self.open_state(theirs_id) as theirs, \
                    self.open_state(base_id) as base:
                merged = _MergedState(ours, theirs, base, chosen)
                conflicts = merged.conflicts()
                if conflicts:
                    return None, conflicts
                fields = _author_fields(author, date, meta)
                fields["meta"].setdefault("merge_strategy", strategy)
                text = message or f"Merge {rev} into {branch or 'HEAD'} ({strategy})"
                summary = self._write_commit(ours, merged, text, (head, theirs_id), {}, progress, **fields)
            assert summary is not None
            self.advance(branch, summary.commit_id, f"merge {rev} ({strategy})")
        return summary.commit_id, []

    def squash(self, rev: str, message: str, author=None, date: str | None = None, meta=None,
               wait: bool = True) -> str:
        """Replace the commits after ``rev`` on the current branch by one commit on top of ``rev``
        holding the same state; the branch then points to it (the old commits stay in the store)."""
        from mdiff.repo.history import first_parent_line, resolve

        with self.lock(wait):
            branch, head = self.head()
            onto = resolve(self, rev)
            if head is None or onto == head or onto not in first_parent_line(self, head, stop=onto):
                raise RepositoryError("MD801", f"{rev} is not an earlier commit of the current branch")
            with self.open_state(onto) as before, self.open_state(head) as final:
                summary = self._write_commit(before, _WholeState(final), message, (onto,), {}, None,
                                             **_author_fields(author, date, meta))
            assert summary is not None
            self.advance(branch, summary.commit_id, f"squash onto {rev}")
        return summary.commit_id

    def snapshot(self, rev: str = "HEAD", wait: bool = True) -> str:
        """Store the full state of ``rev`` so that checkouts of it and its descendants start there."""
        from mdiff.repo.history import resolve

        commit_id = resolve(self, rev)
        with self.lock(wait):
            with self.open_state(commit_id) as view:
                snapshots.write_snapshot(self, commit_id, view)
        return commit_id

    def drop_snapshot(self, rev: str, wait: bool = True) -> tuple[str, int]:
        """Remove the snapshot of ``rev`` — a revision, or the full id of a commit no longer in the
        repository —; return (the commit id, the bytes freed). MD801 when it has none."""
        from mdiff.repo.history import resolve
        from mdiff.repo.store import COMMIT_ID

        with self.lock(wait):
            commit_id = rev if COMMIT_ID.fullmatch(rev) and self.snapshot_path(rev).is_file() else resolve(self, rev)
            return commit_id, snapshots.drop_snapshot(self, commit_id)

    def gc(self, dry_run: bool = False, wait: bool = True, prune: float = DEFAULT_PRUNE_SECONDS,
           reflog_expire: float = DEFAULT_REFLOG_EXPIRE_SECONDS) -> GcReport:
        """Remove what ``.mdiff/`` holds that nothing needs (§13.6): temporary files and folders of
        interrupted writers (names starting with '.', §13.1, and the tmpXXXXXXXX folders of earlier
        merges); commits that no ref, HEAD or reflog entry younger than ``reflog_expire`` seconds
        reaches, once their file is older than ``prune`` seconds (a concurrent writer's, not yet named
        by a ref, is younger); reflog entries older than ``reflog_expire``; and snapshots that are
        unusable, disagree with their commits (MD807) or belong to a commit not kept. Never a commit
        that is kept; none at all when what is kept cannot be known. ``dry_run``: only say what would go."""
        from mdiff.repo import cleanup

        with self.lock(wait):
            return cleanup.collect(self, dry_run, prune=prune, reflog_expire=reflog_expire)

    def diff(self, rev_a: str, rev_b: str, output, message: str = "", compression: str = "gzip") -> dict[str, str]:
        """Write the diff taking ``rev_a``'s state to ``rev_b``'s as a standalone .mdiff file; return
        {parameter: update type}."""
        from mdiff.diffing import write_diff
        from mdiff.repo.history import resolve

        with self.open_state(resolve(self, rev_a)) as a, self.open_state(resolve(self, rev_b)) as b:
            return write_diff(a, b, output, Commit(message or f"diff {rev_a}..{rev_b}"), compression).parameters

    # ------------------------------------------------------------ integrity
    def fsck(self, check_data: bool = True, progress: Progress | None = None) -> list:
        """Every problem of the repository (SPEC.md §13): corrupt or invalid commit files, missing
        parents, malformed refs and ref names, anything under .mdiff/ that is not a regular file where one
        belongs (each reported, and the check goes on), commits whose `state_sha256` is not their state's digest
        (MD808), snapshots that disagree with their commits (MD807).
        Returns Findings; unusable snapshots and the temporary files and folders a killed writer left are
        reported as warnings (MD303), with their sizes — they are harmless, and ``gc`` removes them.
        ``progress`` hears of the bytes of the commit and snapshot files checked."""
        from mdiff.format.findings import Finding
        from mdiff.repo import cleanup
        from mdiff.validation import validate

        def size(path: Path) -> int:
            found = path.lstat()
            return found.st_size if stat.S_ISREG(found.st_mode) else 0

        findings = []
        for check in (self.check_format, self.head_ref):  # the branch HEAD names: with the refs, below
            try:
                check()
            except RepositoryError as exc:
                findings.append(Finding(exc.code, str(self.dir), exc.message))
        try:
            refs = self.ref_names()
            commit_ids = self.commit_ids()
        except RepositoryError as exc:  # refs/heads or commits/ is not a folder: nothing more to look at
            return findings + [Finding(exc.code, str(self.dir), exc.message)]
        def tag_files() -> list[str]:  # listed after the branches are checked: findings in that order
            try:
                return self._names_under(["refs", "tags"])
            except FileNotFoundError:
                return []  # a repository made before tags
            except RepositoryError as exc:
                findings.append(Finding(exc.code, str(self.dir / "refs" / "tags"), exc.message))
                return []

        for what, folder, names, target in (("branch", "heads", lambda: refs, self.branch_target),
                                            ("tag", "tags", tag_files, self.tag_target)):
            for name in names():
                malformed = branch_problem(name)
                try:
                    if malformed:
                        raise RepositoryError("MD801", f"{shown(name)!r} is not a valid {what} name ({malformed}): no "
                                                       "revision names it; rename or delete it")
                    target(name)
                except RepositoryError as exc:
                    findings.append(Finding(exc.code, shown(str(self.dir / "refs" / folder / name)), exc.message))
        try:
            logs = self.reflog_refs()
        except RepositoryError as exc:
            findings.append(Finding(exc.code, str(self.dir / "logs"), exc.message))
            logs = []
        for ref in logs:
            try:
                for _ in self.reflog_entries(ref):
                    pass
            except RepositoryError as exc:
                findings.append(Finding(exc.code, shown(str(self.dir / "logs" / ref)), exc.message))
        findings += _remote_findings(self)
        snapshot_files = sorted((self.dir / "snapshots").glob("*.mdiff"))
        files = [self.commit_path(c) for c in commit_ids] + snapshot_files
        done = ByteCounter(progress, ((str(p), size(p)) for p in files) if progress else ())
        known = set(commit_ids)
        for commit_id in commit_ids:
            path = self.commit_path(commit_id)
            done(str(path))
            try:
                with self.commit_file(commit_id) as readable:
                    # reported at the commit's file, the object in it named first
                    problems = [Finding(f.code, str(path), f.message if f.path == readable else f"{f.path}: {f.message}")
                                for f in validate(readable, check_data=check_data, isolation=self.isolation)
                                if f.is_error]
                    if not problems:
                        with open_diff(readable, isolation=self.isolation) as diff:
                            self._remember(commit_id, diff)
            except RepositoryError as exc:
                findings.append(Finding(exc.code, str(path), exc.message))
                continue
            findings += problems
            if not problems:
                for parent in self.parents(commit_id):
                    if parent not in known:
                        findings.append(Finding("MD801", str(path), f"parent {parent[:12]} is not in the repository"))
        from mdiff.repo.states import state_digest_problems

        for commit_id, why in state_digest_problems(self, [c for c in commit_ids if self.commit_path(c).is_file()]).items():
            findings.append(Finding("MD808", str(self.commit_path(commit_id)), why))
        for path in snapshot_files:
            if path.name.startswith("."):
                continue  # a temporary file: below
            done(str(path))
            kind = self.kind(f"snapshots/{path.name}")
            if kind != "a regular file":  # not opened (§13.1)
                findings.append(Finding("MD303", str(path), f"checkouts ignore this snapshot (it is {kind}); "
                                                            "`mdiff gc` removes it"))
                continue
            try:
                verdict = cleanup.judge_snapshot(self, path, check_data)
            except RepositoryError:
                continue  # its commits cannot be read: reported above
            if verdict is not None and verdict[0] == "MD807":
                findings.append(Finding("MD807", str(path), f"this snapshot disagrees with its commits: {verdict[1]}; "
                                                            "checkouts walk past it, `mdiff gc` removes it"))
            elif verdict is not None:
                findings.append(Finding("MD303", str(path), f"checkouts ignore this snapshot ({verdict[1]}); "
                                                            "`mdiff gc` removes it"))
        for stray in cleanup.temporaries(self.dir):
            findings.append(Finding("MD303", str(stray.path), f"{stray.reason} ({stray.size} bytes); `mdiff gc` "
                                                              "removes it"))
        return findings

    # ------------------------------------------------------------ PEFT
    def import_peft(self, adapter_dir, base_checkpoint, message: str | None = None, author=None,
                    date: str | None = None, meta=None, wait: bool = True) -> list[str]:
        """Commit a PEFT LoRA adapter as ``low_rank`` updates (with the adapter's scale and names mapped
        to the base checkpoint's). On an empty branch the base checkpoint is committed first, as the
        root; otherwise HEAD must hold the base's values of every parameter the adapter changes."""
        from mdiff.checkpoints import open_checkpoint
        from mdiff.peft import lora_updates_from_checkpoint

        updates = lora_updates_from_checkpoint(adapter_dir, base_checkpoint)
        made = []
        if self.head()[1] is None:
            root = self.commit(base_checkpoint, f"base: {os.path.basename(os.fspath(base_checkpoint))}", author, date,
                               meta, wait=wait, allow_empty=True)
            assert root is not None
            made.append(root)
        with self.lock(wait):
            branch, head = self.head()
            with self.open_state(head) as state, open_checkpoint(base_checkpoint) as base:
                for name in updates:
                    if name in base and (name not in state or state.spec(name) != base.spec(name)
                                         or np.count_nonzero(xor_bits(state[name], base[name]))):
                        raise RepositoryError("MD802", f"HEAD's {name!r} is not the adapter's base; switch to the "
                                                       "branch that holds the base model")
                fields = _author_fields(author, date, meta)
                fields["meta"].setdefault("peft_adapter", os.path.basename(os.path.normpath(os.fspath(adapter_dir))))
                text = message or f"import PEFT adapter {fields['meta']['peft_adapter']}"
                assert head is not None  # the base was committed above
                summary = self._write_commit(state, _Unchanged(state), text, (head,), updates, None, only=updates,
                                             **fields)
            assert summary is not None
            self.advance(branch, summary.commit_id, f"import-peft: {text.splitlines()[0] if text else ''}")
        return made + [summary.commit_id]


def _remote_findings(store: Store) -> list:
    """§13.8: each remote's URL file and remote-tracking refs well formed, each ref naming a commit here."""
    from mdiff.format.findings import Finding
    from mdiff.repo.remotes import REMOTE_NAME, remote_url

    findings = []
    try:
        remotes = store.ref_files("remotes")
        tracked = store.ref_files("refs/remotes")
    except RepositoryError as exc:
        return [Finding(exc.code, str(store.dir), exc.message)]
    for name in remotes:
        try:
            remote_url(store, name)
        except RepositoryError as exc:
            findings.append(Finding(exc.code, shown(str(store.dir / "remotes" / name)), exc.message))
    for name in tracked:
        remote, _, branch = name.partition("/")
        try:
            if not REMOTE_NAME.fullmatch(remote) or branch_problem(branch):
                raise RepositoryError("MD801", f"{shown(name)!r} is not <remote>/<branch>: no revision names it")
            store.read_ref(f"refs/remotes/{name}")
        except RepositoryError as exc:
            findings.append(Finding(exc.code, shown(str(store.dir / "refs" / "remotes" / name)), exc.message))
    return findings


# ---------------------------------------------------------------- states a commit is made from


def _open_new_state(stack: contextlib.ExitStack, new_state, exclude: Iterable[str]) -> Mapping:
    """A checkpoint path (file or model folder) opened lazily, or a state dict seen as numpy arrays."""
    if isinstance(new_state, (str, os.PathLike)):
        from mdiff.checkpoints import _is_folder_input, open_checkpoint

        path = os.fspath(new_state)
        options = {"exclude": tuple(exclude)} if _is_folder_input(path) else {}
        return stack.enter_context(open_checkpoint(path, **options))
    return numpy_state(new_state)


class _WholeState(Mapping):
    """A state view as the new state of a commit: its tensors, files and layout."""

    def __init__(self, view: StateView):
        self._view = view

    def __getitem__(self, name):
        return self._view[name]

    def __iter__(self):
        return iter(self._view.keys())

    def __len__(self):
        return len(self._view)

    def spec(self, name):
        return self._view.spec(name)

    @property
    def files(self):
        return self._view.files

    @property
    def layout(self):
        return self._view.layout


class _Unchanged(_WholeState):
    """The state as it is: only explicit updates change it (import-peft)."""

    @property
    def files(self):
        return None

    @property
    def layout(self):
        return None


class _MergedState(Mapping):
    """§13.7: ours, theirs and base combined, parameter by parameter and file by file, on access."""

    def __init__(self, ours: StateView, theirs: StateView, base: StateView, strategy):
        self.ours, self.theirs, self.base, self.strategy = ours, theirs, base, strategy
        self._names = sorted(set(ours.keys()) | set(theirs.keys()))
        self._paths = sorted(set(ours.files) | set(theirs.files))

    def _merged(self, name: str):
        from mdiff.repo.merge import merge_parameter

        get = lambda state: state[name] if name in state else None  # noqa: E731
        return merge_parameter(name, get(self.ours), get(self.theirs), get(self.base), self.strategy)

    def _merged_file(self, path: str):
        from mdiff.repo.merge import merge_whole

        get = lambda state: state.files[path] if path in state.files else None  # noqa: E731
        return merge_whole(get(self.ours), get(self.theirs), get(self.base), self.strategy)

    def _merged_layout(self):
        from mdiff.repo.merge import merge_whole

        return merge_whole(self.ours.layout_bytes, self.theirs.layout_bytes, self.base.layout_bytes, self.strategy)

    def _conflict(self, name: str) -> str | None:
        """Why ``name`` conflicts, or None — from shapes and dtypes where they decide it (no data read)."""
        if self.strategy.name in ("ours", "theirs"):
            return None  # never a conflict (§13.7)
        if name in self.ours and name in self.theirs:
            spec = self.ours.spec(name)
            if spec == self.theirs.spec(name) and spec[1].is_float and (
                    self.strategy.name != "task-arithmetic" or (name in self.base and self.base.spec(name) == spec)):
                return None  # combined by the strategy, whatever the values
        return self._merged(name)[1]

    def conflicts(self) -> list[tuple[str, str]]:
        found = [(name, reason) for name in self._names for reason in [self._conflict(name)] if reason]
        found += [(f"file {path}", reason) for path in self._paths for _, reason in [self._merged_file(path)] if reason]
        reason = self._merged_layout()[1]
        return found + ([("the weights layout", reason)] if reason else [])

    def __getitem__(self, name):
        value, _ = self._merged(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self):
        return iter([n for n in self._names if self._merged(n)[0] is not None])

    def __len__(self):
        return sum(1 for _ in self)

    def __contains__(self, name):
        return name in self._names and self._merged(name)[0] is not None

    @property
    def files(self) -> dict[str, bytes]:
        merged = {path: self._merged_file(path)[0] for path in self._paths}
        return {path: value for path, value in merged.items() if value is not None}

    @property
    def layout(self) -> Layout | None:
        from mdiff.format import layout

        value = self._merged_layout()[0]
        return None if value is None else layout.parse(value)


# ---------------------------------------------------------------- updates between two states


def masked_update(old: np.ndarray, new: np.ndarray, mask: np.ndarray) -> Update:
    """A sparse update storing exactly the elements ``mask`` selects (FISH-style sparse fine-tuning).

    Changes outside the mask are dropped: the update is then marked lossy, and its sha256 is of
    the state it really produces.
    """
    from mdiff.format.dtypes import as_bits, canonical, from_bits
    from mdiff.updates import sparse

    old, new = canonical(old), canonical(new)
    if mask.shape != new.shape or old.shape != new.shape or old.dtype != new.dtype:
        raise RepositoryError("MD801", f"a sparse mask needs the parameter's shape {list(new.shape)} on both sides")
    indices = np.flatnonzero(mask.reshape(-1)).astype(sparse.INDEX_DTYPE)
    xor = xor_bits(old, new).reshape(-1)
    result_bits = as_bits(old).copy().reshape(-1)
    result_bits[indices] ^= xor[indices]
    result = from_bits(result_bits.reshape(new.shape), dtype_of(new))
    update = sparse.from_entries(result, indices, xor[indices], base_sha256=sha256_hex(old))
    if np.count_nonzero(xor) != np.count_nonzero(xor[indices]):
        update = Update({**update.meta, "lossy": True}, update.data)
    return update


def updates_between(old: Mapping[str, np.ndarray], new: Mapping, explicit: Mapping[str, Update] = {},
                    masks: Mapping[str, np.ndarray] = {}, inexact: frozenset[str] = frozenset(),
                    names: Iterable[str] | None = None, done: Callable[[str], None] | None = None,
                    ) -> Iterable[tuple[str, Update]]:
    """(name, update) taking ``old`` to ``new``: explicit updates win, masked parameters store just
    their masked elements, the rest are exact diffs. A parameter in ``inexact`` (its value in ``old``
    was made by an inexact update) gets no exact update that reads its base: its result, as a
    ``replace``, instead (§13.4, MD805). ``names``: the parameters to look at (default: all); ``done(name)``
    is called as each has been looked at (progress)."""
    from mdiff.diffing import diff_tensor

    for name in sorted(set(old) | set(new) | set(explicit)) if names is None else sorted(names):
        update: Update | None
        if name in explicit:
            update = explicit[name]
        elif name in masks:
            if name not in old or name not in new:
                raise RepositoryError("MD801", f"sparse mask for {name!r}, which is not in both states")
            update = masked_update(old[name], new[name], masks[name])
        else:
            update = diff_tensor(old[name] if name in old else None, new[name] if name in new else None)
            if update is None:
                if done is not None:
                    done(name)
                continue
        if done is not None:
            done(name)
        kind = update.update_type
        if name in inexact and kind.carries_sha256 and kind.needs_base:
            from mdiff.engines import apply_update

            result = apply_update(update, old[name], name)
            assert result is not None  # an update that carries a sha256 has a result
            update = replace.encode(result)
        yield name, update


def _author_fields(author, date, meta) -> dict[str, Any]:
    """The commit's author (given, else the environment's, as git finds it), date and meta."""
    return {"date": date or default_date(), "meta": dict(meta or {}), "author": resolve_author(author)}
