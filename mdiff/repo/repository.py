"""SPEC.md §13: a repository — version control for model weights — as one facade.

``Repository`` is the store (store.py: commit files, refs, reflogs, the lock) with the verbs on top —
commit, checkout, status, branches and tags, merge, squash, snapshots, diff, gc, fsck, import-peft,
clone, fetch, push, pull — each composed from the modules below it: states.py (the lazy state at a
commit), changes.py (what a commit records), history.py (revisions), merge.py, snapshots.py,
cleanup.py, fsck.py, transfer.py. None of them imports this module. A model is read and written one
tensor at a time, never held whole. (~560 lines: thirty verbs with their documentation, each a few lines
of composition; the work is in the modules below.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload
from urllib.parse import urlsplit

import numpy as np

from mdiff.checkpoints.folder import TRAINING_STATE
from mdiff.checkpoints.registry import is_folder_input, is_folder_output
from mdiff.diffing import file_updates
from mdiff.errors import RepositoryError, UnsafeOutputError
from mdiff.format.commit import Author, Commit, default_date, resolve_author
from mdiff.format.dtypes import xor_bits
from mdiff.format.findings import Finding
from mdiff.format.layout import Layout
from mdiff.pages import no_huge_pages, recycling
from mdiff.format.writer import DiffWriter
from mdiff.frameworks import check_framework, numpy_state
from mdiff.isolation import Isolation
from mdiff.progress import ByteCounter, Progress, tensor_bytes
from mdiff.repo import cleanup, snapshots, state_cache, transfer, working
from mdiff.repo.changes import Changes, CommitSummary, Unchanged, WholeState, open_new_state, updates_between
from mdiff.repo.cleanup import DEFAULT_PRUNE_SECONDS, DEFAULT_REFLOG_EXPIRE_SECONDS, GcReport
from mdiff.repo.fsck import fsck
from mdiff.repo.history import ancestors, first_parent_line, merge_base, reflog_ref, resolve
from mdiff.repo.merge import MergedState, MergeResult, Strategy
from mdiff.repo.names import COMMIT_ID, FORMAT
from mdiff.repo.parent_values import ParentValues, keep_copy, learn, open_predecessor, recall, remember, watch, writes_over
from mdiff.repo.reflog import ReflogEntry
from mdiff.repo.remotes import add_remote, open_end, tracking_refs
from mdiff.repo.state_cache import KnownState
from mdiff.repo.states import StateView
from mdiff.repo.store import Store
from mdiff.repo.transfer import FetchReport
from mdiff.updates import replace
from mdiff.updates.base import Update

if TYPE_CHECKING:
    from mdiff.repo.remote_repository import RemoteRepository

__all__ = ["Changes", "CommitSummary", "Repository"]

log = logging.getLogger(__name__)

# a checkpoint path (a file or a model folder), or a state dict of numpy arrays or torch tensors
NewState = str | os.PathLike[str] | Mapping[str, Any]
AuthorLike = Author | str | None  # None: the environment's, as git finds it


# holds the place of a commit's `state_sha256` until its updates are written (§4.2): the same length
_PLACEHOLDER_DIGEST = "0" * 64


class _NothingToCommit(Exception):
    pass


class Repository(Store):
    """A directory holding ``.mdiff/``; see SPEC.md §13 for the layout.

    States are given as a checkpoint path (a file, or a model folder with the files beside its
    weights) or as an in-memory state dict of numpy arrays or torch tensors.
    """

    # (commit id, checkpoint path, exclude) of the checkpoint this object committed last: the next commit on
    # top of it reads the parent's values there where they still hash to the parent's (parent_values.py)
    _last_committed: tuple[str, str, tuple[str, ...]] | None = None

    # ------------------------------------------------------------ creation and discovery
    @classmethod
    def init(cls, root: str | os.PathLike[str] = ".", branch: str = "main", isolation: Isolation | None | str = "auto",
             repository_format: int = FORMAT) -> Repository:
        """A new repository in ``root``, of ``repository_format`` (2: commit ids by block list; 1: the SHA-256 of
        the whole file, as before revision 12 — SPEC.md §4.3)."""
        Store.create(Path(root), branch, repository_format)
        return cls(Path(root), isolation)

    @staticmethod
    def open(url: str, storage_options: dict | None = None) -> RemoteRepository:
        """The repository at ``url`` (an fsspec URL or a local folder), read in place without cloning it:
        only the byte ranges a read needs move (SPEC.md §13.9; see RemoteRepository)."""
        from mdiff.repo.remote_repository import RemoteRepository

        return RemoteRepository(url, storage_options)

    @classmethod
    def find(cls, start: str | os.PathLike[str] = ".", isolation: Isolation | None | str = "auto") -> Repository:
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
    def commit(self, new_state: NewState, message: str, author: AuthorLike = None, date: str | None = None,
               meta: Mapping[str, str] | None = None,
               explicit: Mapping[str, Update] | None = None, progress: Progress | None = None, wait: bool = True,
               masks: Mapping[str, np.ndarray] | None = None, *, allow_empty: bool = False,
               allow_deletions: bool = False, exclude: Iterable[str] = ()) -> str | None:
        """Commit a new state on the current branch; returns the new commit id, or None when the state
        equals HEAD's (nothing is written unless ``allow_empty``). See :meth:`make_commit`."""
        summary = self.make_commit(new_state, message, author, date, meta, explicit, progress, wait, masks,
                                   allow_empty=allow_empty, allow_deletions=allow_deletions, exclude=exclude)
        return summary.commit_id if summary else None

    def make_commit(self, new_state: NewState, message: str, author: AuthorLike = None, date: str | None = None,
                    meta: Mapping[str, str] | None = None,
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
        # a commit's buffers are streamed once: no compaction for them, and the pages of the last commit's (pages.py)
        with self.lock(wait), no_huge_pages(), recycling():
            branch, head = self.head()
            watched = _watched(new_state, exclude)  # the folder or file, for `mdiff status` (working.py)
            # the files hashed while they are read — but a .safetensors file whose tensors the commit hashes anyway:
            # its record takes their hashes (working.tensors_digest_from), unless the commit is not of its values
            exact = not explicit and not masks
            ahead = working.hash_ahead(watched[0], watched[1], watched[3], but_safetensors=exact) if watched else {}
            with contextlib.ExitStack() as stack:
                new = open_new_state(stack, new_state, exclude)
                if exact:  # before any value is read: its hashes, for the snapshot and the next commit (learn)
                    watch(new)
                mine = self._last_committed  # else another process's, from the cache folder
                last = mine if mine is not None and mine[0] == head else recall(self.dir)
                over = head is not None and last is not None and last[0] == head and writes_over(self.dir, last, new_state)
                predecessor = open_predecessor(stack, last[1], last[2]) if last and head and last[0] == head \
                    and not _same_path(last[1], new_state) else None  # a file written over holds the new state
                # the parent's state from the summary its commit kept, where it is to be believed: no walk —
                # unless its values are to be replayed (no checkpoint committed last to take them from)
                known = state_cache.recall(self, head) if head is not None else state_cache.EMPTY
                parent: StateView | KnownState | None = KnownState(known) \
                    if known is not None and (predecessor is not None or head is None) else None
                masks = {k: np.asarray(numpy_state(masks)[k], dtype=bool) for k in masks} if masks else {}
                fields = _author_fields(author, date, meta)
                for _ in range(2):
                    if parent is None:
                        parent = stack.enter_context(self.open_state(head))
                        known = known or state_cache.summary_of(parent, parent.layout_bytes)
                    try:
                        summary = self._write_commit(
                            ParentValues(parent, predecessor), new, message, (head,) if head else (), explicit or {},
                            progress, masks, allow_empty=allow_empty, allow_deletions=allow_deletions, branch=branch,
                            follower=state_cache.Follower(known) if known is not None else None, **fields)
                        break
                    except state_cache.WalkNeeded:  # a value to replay: written again, from the state walked
                        log.debug("the parent's state is walked: a value or file only its history has")
                        parent = None
                if summary is not None:  # what a folder holds that the commit left out (dot files, …)
                    summary = dataclasses.replace(summary, not_versioned=tuple(getattr(new, "not_versioned", ())))
            if summary is None:  # nothing committed, nothing to record: what has not started is not hashed
                for future in ahead.values():
                    future.cancel()
            if summary is not None:
                self.advance(branch, summary.commit_id, f"commit: {message.splitlines()[0] if message else ''}")
                if summary.state is not None:  # for the next commit on top of this one, in any process
                    state_cache.remember(self, summary.commit_id, summary.state, head)
                if watched is not None:
                    working.remember(self, branch, "commit", summary.commit_id, *watched, ahead=ahead,
                                     values=summary.values if exact else None)
            made = summary.commit_id if summary is not None else head
            self._last_committed = (made, os.fspath(new_state), tuple(exclude)) \
                if made and isinstance(new_state, (str, os.PathLike)) else None
            if self._last_committed is not None and summary is not None:
                if over:  # the file will be written over again: the next commit reads its parent's values from a copy
                    self._last_committed = keep_copy(self.dir, self._last_committed)
                remember(self.dir, self._last_committed)
        return summary

    def _write_commit(self, old: StateView | ParentValues, new: Mapping[str, Any], message: str, parents: tuple[str, ...],
                      explicit: Mapping[str, Update], progress: Progress | None, masks: Mapping[str, np.ndarray] = {},
                      *, allow_empty: bool = True, allow_deletions: bool = True, snapshot: bool = True,
                      branch: str | None = None, only: Iterable[str] | None = None,
                      follower: state_cache.Follower | None = None, **commit_fields: Any) -> CommitSummary | None:
        """Write the commit taking ``old`` (the first parent's state) to ``new``; None if nothing changed.
        ``only`` limits the parameters looked at (the others are taken as unchanged). ``follower``: the parent
        state's summary, which then becomes the new state's (the summary's ``state``; state_cache.py)."""
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
        known_sha256 = {name: sha256 for name, (_, _, sha256) in claims.parameters.items()}  # read values match them

        def write(writer: DiffWriter) -> None:
            nonlocal layout_changed
            for name, update in updates_between(old, new, explicit, masks, frozenset(inexact), names, done, known_sha256):
                writer.add(name, update)
                claims.after(update, name)
                if follower is not None:
                    follower.add(name, update)
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
                    if follower is not None:
                        follower.set_layout(encoded)
                    layout_changed = True
            if not (allow_empty or any(counts.values()) or file_kinds or layout_changed):
                raise _NothingToCommit

        meta = Commit(message, parents=parents, state_sha256=_PLACEHOLDER_DIGEST, **commit_fields)
        try:
            commit_id = self.store(write, meta, seal=lambda: dataclasses.replace(meta, state_sha256=claims.digest()))
        except _NothingToCommit:
            return None
        self.remember_inexact(commit_id, frozenset(inexact))
        if not explicit and not masks and only is None:  # the sha256 of each value it read from a file watched
            learn(new, claims.parameters)
        # from the commit's own state, read back: what checkouts will see. Not for a root commit: its updates are
        # the values themselves, read once — never SNAPSHOT_REPLAY_FACTOR (> 1) times its bytes, nor from
        # SNAPSHOT_MAX_COMMITS (> 1) commits — and opening its state to find that out walked the whole file
        # again (a root of 10^5 parameters: a quarter of `mdiff commit`'s time)
        state = follower.child(commit_id, claims) if follower is not None and only is None else None
        # its values from the new state the commit read, where they hash to the state's; its names, claims and
        # replay cost from its summary where it has one (no walk), else from its state opened
        if snapshot and parents and state is None:
            snapshots.snapshot_if_due(self, commit_id, lambda: self.open_state(commit_id),
                                      lambda view: ParentValues(view, new))
        elif snapshot and parents and state is not None \
                and snapshots.is_due(state.state_bytes(), state.read_cost(), state.commits_after_start):
            try:
                snapshots.write_snapshot(self, commit_id, ParentValues(KnownState(state), new))
                state = state_cache.snapshotted(self, state, commit_id)
            except state_cache.WalkNeeded:  # a value the new state did not give: from the state walked
                wrote = snapshots.snapshot_if_due(self, commit_id, lambda: self.open_state(commit_id),
                                                  lambda view: ParentValues(view, new))
                state = state_cache.snapshotted(self, state, commit_id) if wrote else None
        weights = sum(math.prod(shape) * dt.itemsize for shape, dt in specs.values())
        values = {name: (shape, dtype.name, sha256) for name, (shape, dtype, sha256) in claims.parameters.items()}
        return CommitSummary(commit_id, branch, counts["changed"], counts["added"], counts["deleted"], file_kinds,
                             layout_changed, os.path.getsize(self.commit_path(commit_id)), weights, values=values,
                             state=state)

    # ------------------------------------------------------------ checkout and status
    @overload
    def checkout(self, rev: str = ..., output: None = None, template: None = None, progress: Progress | None = None,
                 engine: str | None = None, *, framework: str = "np", max_shard_size: int | None = None,
                 weights_format: str | None = None, force: bool = False) -> dict[str, Any]: ...

    @overload
    def checkout(self, rev: str, output: str | os.PathLike[str], template: str | os.PathLike[str] | None = None,
                 progress: Progress | None = None, engine: str | None = None, *, framework: str = "np",
                 max_shard_size: int | None = None, weights_format: str | None = None,
                 force: bool = False) -> list[str]: ...

    @overload
    def checkout(self, rev: str = ..., *, output: str | os.PathLike[str],
                 template: str | os.PathLike[str] | None = None, progress: Progress | None = None,
                 engine: str | None = None, framework: str = "np", max_shard_size: int | None = None,
                 weights_format: str | None = None, force: bool = False) -> list[str]: ...

    def checkout(self, rev: str = "HEAD", output: str | os.PathLike[str] | None = None,
                 template: str | os.PathLike[str] | None = None, progress: Progress | None = None,
                 engine: str | None = None, *, framework: str = "np", max_shard_size: int | None = None,
                 weights_format: str | None = None, force: bool = False) -> dict[str, Any] | list[str]:
        """The state at ``rev``. Without ``output``: a dict of numpy arrays (``framework="pt"``: torch
        tensors that ``load_state_dict(strict=True)`` accepts for a committed state dict). With it: written
        to a checkpoint file (.safetensors, .npz, .pt, .onnx with the base model as ``template``) or, for
        a path without such an extension, a model folder with the state's files (SPEC.md §10.2); returns
        the paths written, and remembered for `mdiff status` as the working copy of the branch ``rev`` names
        (``main``, ``main~2``), else of the current branch (working.py). A folder's weights are written as
        they were committed — ``.safetensors``, or ``pytorch_model*.bin`` for a folder of ``.bin`` weights —
        unless ``weights_format`` (``"safetensors"`` or ``"bin"``) says otherwise. A folder output that exists
        and is not empty is refused (MD706), unless ``force``: the new folder is then written beside it and
        swapped in once complete (the old one, or a file there, removed), so that a failure leaves the old one
        as it was; never a folder that holds the repository."""
        check_framework(framework)
        if force and output is not None:
            self._refuse_replacing_the_repository(output)
        commit_id = resolve(self, rev)
        with recycling(), self.open_state(commit_id, engine) as view:  # values' pages of values gone (pages.py)
            written = view.write(output, template, progress, framework=framework, max_shard_size=max_shard_size,
                                 weights_format=weights_format, force=force)
            # each value written was checked against its sha256: a .safetensors file written of them is recorded
            # by those hashes (working.tensors_digest_from, its header read), not by reading it back whole
            values = {name: (tuple(shape), dtype.name, sha256)
                      for name, (shape, dtype, sha256) in view.claims.parameters.items()}
        if output is not None:
            kind = "folder" if is_folder_output(output) else "file"
            ignore = TRAINING_STATE if kind == "folder" else ()
            written_status = working.scan(output, kind, ignore)[0]  # as the checkout left the files
            working.remember(self, self._branch_of(rev), "checkout", commit_id, output, kind, ignore,
                             before=written_status, values=values)
        return written

    def _branch_of(self, rev: str) -> str | None:
        """The branch a revision is on: the one it names (``main``, ``main~2``), else the current one (None:
        a detached HEAD)."""
        base = re.split(r"[~^]", rev.strip(), maxsplit=1)[0]
        if base != "HEAD" and self.has_branch(base):
            return base
        return self.head_ref()[0]

    def _refuse_replacing_the_repository(self, output: str | os.PathLike[str]) -> None:
        there = os.path.realpath(output)
        if os.path.isdir(there) and os.path.commonpath([there, os.path.realpath(self.dir)]) == there:
            raise UnsafeOutputError("MD706", "the output holds this repository; --force would remove it",
                                    os.fspath(output))

    def status(self, checkpoint: NewState, exclude: Iterable[str] = (), progress: Progress | None = None) -> Changes:
        """What a checkpoint (a file or a model folder) changes against HEAD."""
        with contextlib.ExitStack() as stack:
            new: Any = open_new_state(stack, checkpoint, exclude)
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
        with self.lock(wait):
            branch, before = self.head()
            target = resolve(self, rev)
            self.advance(branch, target, f"reset: moving to {rev}")
        return branch, before, target

    def force_branch(self, branch: str, rev: str, wait: bool = True) -> tuple[str | None, str]:
        """Point ``branch`` at ``rev``, creating it or moving it wherever it was (the current branch
        too: there is no working tree to disagree with it). Returns (its commit before, after)."""
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
        self.check_tag_name(name)
        with self.lock(wait):
            target = resolve(self, rev)
            return self.create_tag(name, target, force), target

    def untag(self, name: str, wait: bool = True) -> str | None:
        """Delete tag ``name``; returns the commit it named."""
        with self.lock(wait):
            return self.delete_tag(name)

    def reflog(self, ref: str | None = None) -> tuple[str, list[ReflogEntry]]:
        """(the ref, its reflog entries newest first — entry N is what ``NAME@{N}`` names, §13.3): ``HEAD``,
        ``refs/…``, a name looked up as ``NAME@{N}`` looks it up (a branch, a tag, a remote-tracking ref,
        or one deleted whose reflog stays), or the current branch (HEAD's log when detached) by default."""
        if ref is None or not ref.startswith("refs/"):
            ref = reflog_ref(self, ref or "")
        else:
            self.check_branch_name(ref)  # refs/heads/… and refs/tags/… are names of that form
        return ref, list(self.reflog_entries(ref))[::-1]

    # ------------------------------------------------------------ merge, squash, snapshot, diff
    def merge(self, rev: str, strategy: str | None = None, message: str | None = None, author: AuthorLike = None,
              date: str | None = None, meta: Mapping[str, str] | None = None, progress: Progress | None = None, wait: bool = True,
              fast_forward: bool = True, *, everything: bool = False, ff_only: bool = False) -> MergeResult:
        """Merge ``rev`` into the current branch (§13.7): a three-way merge against the best common
        ancestor, whose commit has parents (HEAD, rev).

        A parameter, file or the layout changed on one side only takes that side's bits; one changed
        differently on both sides is a conflict, which ``strategy`` (ours, theirs, average, weighted:α,
        task-arithmetic[:λ]) resolves where it can — or, with ``everything``, applies to all parameters.
        With conflicts left nothing is written and the result lists them. When HEAD is an ancestor of
        ``rev`` the branch just moves there (a fast-forward, as git does) unless ``fast_forward`` is
        False; ``ff_only`` refuses anything else (MD804). The three states are read a parameter at a
        time, and only where the commits' sha256 do not decide."""
        chosen = None if strategy is None else Strategy.parse(strategy)
        with self.lock(wait):
            branch, head = self.head()
            theirs_id = resolve(self, rev)
            if head is None:
                raise RepositoryError("MD804", "nothing to merge into: the current branch has no commit")
            if theirs_id == head or theirs_id in ancestors(self, head):
                raise RepositoryError("MD804", f"{rev} is already merged into {branch or 'HEAD'}")
            if fast_forward and head in ancestors(self, theirs_id):
                self.advance(branch, theirs_id, f"merge {rev}: fast-forward")
                return MergeResult(theirs_id, "fast-forward")
            if ff_only:
                raise RepositoryError("MD804", f"{branch or 'HEAD'} and {rev} have diverged: not possible to fast-forward "
                                               "(merge without --ff-only to make a merge commit)")
            base_id = merge_base(self, head, theirs_id)
            with self.open_state(head) as ours, self.open_state(theirs_id) as theirs, \
                    self.open_state(base_id) as base:
                merged = MergedState(ours, theirs, base, chosen, everything)
                conflicts = merged.conflicts()
                if conflicts:
                    return MergeResult(None, "conflicts", conflicts=conflicts, tally=merged.tally(), base=base_id)
                fields = _author_fields(author, date, meta)
                how = "three-way" if chosen is None else chosen.text
                fields["meta"].setdefault("merge_strategy", how)
                if chosen is not None:
                    fields["meta"].setdefault("merge_scope", "all" if everything else "conflicts")
                text = message or f"Merge {rev} into {branch or 'HEAD'}" + (f" ({how}{', all' if everything else ''})"
                                                                            if chosen is not None else "")
                summary = self._write_commit(ours, merged, text, (head, theirs_id), {}, progress,
                                             only=merged.changed_from_ours(), **fields)
                tally = merged.tally()
            assert summary is not None
            self.advance(branch, summary.commit_id, f"merge {rev}: {how}{' (all)' if everything else ''}")
        return MergeResult(summary.commit_id, "merge", tally=tally, base=base_id)

    def squash(self, rev: str, message: str, author: AuthorLike = None, date: str | None = None,
               meta: Mapping[str, str] | None = None,
               wait: bool = True) -> str:
        """Replace the commits after ``rev`` on the current branch by one commit on top of ``rev``
        holding the same state; the branch then points to it (the old commits stay in the store)."""
        with self.lock(wait):
            branch, head = self.head()
            onto = resolve(self, rev)
            if head is None or onto == head or onto not in first_parent_line(self, head, stop=onto):
                raise RepositoryError("MD801", f"{rev} is not an earlier commit of the current branch")
            with self.open_state(onto) as before, self.open_state(head) as final:
                summary = self._write_commit(before, WholeState(final), message, (onto,), {}, None,
                                             **_author_fields(author, date, meta))
            assert summary is not None
            self.advance(branch, summary.commit_id, f"squash onto {rev}")
        return summary.commit_id

    def snapshot(self, rev: str = "HEAD", wait: bool = True) -> str:
        """Store the full state of ``rev`` so that checkouts of it and its descendants start there."""
        commit_id = resolve(self, rev)
        with self.lock(wait):
            with self.open_state(commit_id) as view:
                snapshots.write_snapshot(self, commit_id, view)
        return commit_id

    def drop_snapshot(self, rev: str, wait: bool = True) -> tuple[str, int]:
        """Remove the snapshot of ``rev`` — a revision, or the full id of a commit no longer in the
        repository —; return (the commit id, the bytes freed). MD801 when it has none."""
        with self.lock(wait):
            commit_id = rev if COMMIT_ID.fullmatch(rev) and self.snapshot_path(rev).is_file() else resolve(self, rev)
            try:
                return commit_id, snapshots.drop_snapshot(self, commit_id)
            finally:
                self.let_go_files()

    def gc(self, dry_run: bool = False, wait: bool = True, prune: float = DEFAULT_PRUNE_SECONDS,
           reflog_expire: float = DEFAULT_REFLOG_EXPIRE_SECONDS) -> GcReport:
        """Remove what ``.mdiff/`` holds that nothing needs (§13.6): temporary files and folders of
        interrupted writers (names starting with '.', §13.1, and the tmpXXXXXXXX folders of earlier
        merges); commits that no ref, HEAD or reflog entry younger than ``reflog_expire`` seconds
        reaches, once their file is older than ``prune`` seconds (a concurrent writer's, not yet named
        by a ref, is younger); reflog entries older than ``reflog_expire``; and snapshots that are
        unusable, disagree with their commits (MD807) or belong to a commit not kept. Never a commit
        that is kept; none at all when what is kept cannot be known. ``dry_run``: only say what would go."""
        with self.lock(wait):
            try:
                return cleanup.collect(self, dry_run, prune=prune, reflog_expire=reflog_expire)
            finally:
                self.let_go_files()  # what was removed is freed now, not when this process ends

    def diff(self, rev_a: str, rev_b: str, output: str | os.PathLike[str], message: str = "", compression: str = "gzip") -> dict[str, str]:
        """Write the diff taking ``rev_a``'s state to ``rev_b``'s as a standalone .mdiff file; return
        {parameter: update type}."""
        from mdiff.diffing import write_diff
        with self.open_state(resolve(self, rev_a)) as a, self.open_state(resolve(self, rev_b)) as b:
            return write_diff(a, b, output, Commit(message or f"diff {rev_a}..{rev_b}"), compression).parameters

    # ------------------------------------------------------------ integrity
    def fsck(self, check_data: bool = True, progress: Progress | None = None) -> list[Finding]:
        """Every problem of the repository (SPEC.md §13): corrupt or invalid commit files, missing
        parents, malformed refs and ref names, anything under .mdiff/ that is not a regular file where one
        belongs (each reported, and the check goes on), commits whose `state_sha256` is not their state's digest
        (MD808), snapshots that disagree with their commits (MD807).
        Returns Findings; unusable snapshots and the temporary files and folders a killed writer left are
        reported as warnings (MD303), with their sizes — they are harmless, and ``gc`` removes them.
        ``progress`` hears of the bytes of the commit and snapshot files checked. One checker per rule: fsck.py."""
        return fsck(self, check_data, progress)

    # ------------------------------------------------------------ remotes (§13.8)
    @classmethod
    def clone(cls, url: str, directory: str | os.PathLike[str] | None = None, options: dict[str, Any] | None = None,
              progress: Progress | None = None, snapshots: bool = False) -> tuple[Repository, FetchReport]:
        """A new repository in ``directory`` (default: the URL's last name) with ``url`` as its remote
        ``origin``, every commit fetched, and the remote's current branch (else ``main``) made the local one.
        If anything fails, the folder is removed again (when this call made it)."""
        end = open_end(url, options)
        version = end.check_format()
        branch = end.head_branch() or "main"
        target = Path(directory) if directory else Path(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1] or "repository")
        made_folder = not target.exists()
        repo = cls.init(target, branch, repository_format=version)
        try:
            add_remote(repo, "origin", url)
            report = transfer.fetch(repo, "origin", options, progress, snapshots, clone=True)
            tracked = report.branches.get(branch, (None, None))[1]  # every branch is new here
            with repo.lock():
                if tracked is not None:
                    repo.set_branch(branch, tracked)
        except BaseException:
            shutil.rmtree(target if made_folder else repo.dir, ignore_errors=True)
            raise
        return repo, report

    def fetch(self, remote: str, options: dict[str, Any] | None = None, progress: Progress | None = None,
              snapshots: bool = False) -> FetchReport:
        """Fetch ``remote``'s commits and refs (see transfer.fetch)."""
        return transfer.fetch(self, remote, options, progress, snapshots)

    def push(self, remote: str, branch: str, force: bool = False, options: dict[str, Any] | None = None,
             progress: Progress | None = None, snapshots: bool = False) -> transfer.PushReport:
        """Push ``branch`` to ``remote`` (see transfer.push)."""
        return transfer.push(self, remote, branch, force, options, progress, snapshots)

    def pull(self, remote: str, branch: str | None = None, strategy: str | None = None,
             options: dict[str, Any] | None = None, progress: Progress | None = None, *, everything: bool = False,
             ff_only: bool = False, **merge_fields: Any) -> tuple[FetchReport, MergeResult]:
        """Fetch ``remote``, then bring ``<remote>/<branch>`` (default: the current branch's name) into the
        current branch: moved there when it has no commit or is an ancestor (a fast-forward), else merged
        as :meth:`merge` merges (three-way; ``strategy`` for the conflicts, or all parameters with
        ``everything``; ``ff_only`` refuses a merge, MD804). Returns (fetch report, what happened: its
        ``how`` is ``up to date``, ``fast-forward``, ``merge`` or ``conflicts``)."""
        report = transfer.fetch(self, remote, options, progress)
        current, head = self.head()
        branch = branch or current
        if branch is None:
            raise RepositoryError("MD801", "HEAD is detached: name the branch to pull")
        theirs = tracking_refs(self, remote).get(branch)
        if theirs is None:
            raise RepositoryError("MD801", f"{remote} has no branch {branch!r}")
        if head is not None and (theirs == head or theirs in ancestors(self, head)):
            return report, MergeResult(head, "up to date")
        if head is None or head in ancestors(self, theirs):
            with self.lock():
                if self.head() != (current, head):
                    raise RepositoryError("MD803", "the current branch moved while pulling; pull again")
                self.advance(current, theirs, f"pull {remote} {branch}: fast-forward")
            return report, MergeResult(theirs, "fast-forward")
        return report, self.merge(f"{remote}/{branch}", strategy, progress=progress, everything=everything,
                                  ff_only=ff_only, **merge_fields)

    @classmethod
    def fetch_revision(cls, url: str, rev: str, cache: str | os.PathLike[str], options: dict[str, Any] | None = None,
                       progress: Progress | None = None) -> tuple[Repository, str]:
        """(a repository in ``cache`` holding the commits a checkout of ``rev`` needs, the commit ``rev``
        names on the remote at ``url``): see transfer.fetch_first_parent_line. ``cache`` is a folder this
        call may create a repository in, and reuses."""
        folder = Path(cache)
        version = open_end(url, options).check_format()
        repo = cls(folder) if (folder / ".mdiff" / "format").exists() else cls.init(folder, repository_format=version)
        repo.check_format()
        return repo, transfer.fetch_first_parent_line(repo, url, rev, options, progress)

    # ------------------------------------------------------------ PEFT
    def import_peft(self, adapter_dir: str | os.PathLike[str], base_checkpoint: str | os.PathLike[str],
                    message: str | None = None, author: AuthorLike = None, date: str | None = None,
                    meta: Mapping[str, str] | None = None, wait: bool = True) -> list[str]:
        """Commit a PEFT LoRA adapter as ``low_rank`` updates (with the adapter's scale and names mapped
        to the base checkpoint's). On an empty branch the base checkpoint is committed first, as the
        root; otherwise HEAD must hold the base's values of every parameter the adapter changes."""
        from mdiff.checkpoints import open_checkpoint
        from mdiff.integrations.peft import lora_updates_from_checkpoint

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
                summary = self._write_commit(state, Unchanged(state), text, (head,), updates, None, only=updates,
                                             **fields)
            assert summary is not None
            self.advance(branch, summary.commit_id, f"import-peft: {text.splitlines()[0] if text else ''}")
        return made + [summary.commit_id]


def _author_fields(author: AuthorLike, date: str | None, meta: Mapping[str, str] | None) -> dict[str, Any]:
    """The commit's author (given, else the environment's, as git finds it), date and meta."""
    return {"date": date or default_date(), "meta": dict(meta or {}), "author": resolve_author(author)}


def _watched(state: NewState, exclude: Iterable[str]) -> tuple[str, str, tuple[str, ...], dict | None] | None:
    """(path, kind, ignore globs, each file's status now) of the folder or file a commit reads ``state`` from,
    for its working record — taken before the commit reads it, so that a file that moves meanwhile is recorded
    as unknown —; None for a state in memory."""
    if not isinstance(state, (str, os.PathLike)):
        return None
    path = os.fspath(state)
    if is_folder_input(path):
        folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
        ignore = TRAINING_STATE + tuple(exclude)
        return folder, "folder", ignore, working.scan(folder, "folder", ignore)[0]
    return path, "file", (), working.scan(path, "file")[0]


def _same_path(path: str, state: NewState) -> bool:
    return isinstance(state, (str, os.PathLike)) and os.path.realpath(path) == os.path.realpath(os.fspath(state))
