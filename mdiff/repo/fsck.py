"""SPEC.md §13: checking a whole repository (``fsck``), one checker per rule, each reporting and going on.

The checkers run in the order of the rules they check, and the findings come in that order: the
folder's fixed files (§13.1), refs and ref names (§13.1, §13.3), reflogs (§13.6), remotes (§13.8),
commit files (§13.2), state digests (§4.2, MD808), snapshots (§13.5), and what killed writers left
(§13.1, §13.6). Every verdict comes from the bytes: a commit is validated as ``validate`` would,
through the descriptor its id was checked on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from mdiff.errors import RepositoryError
from mdiff.hdf5walk.positional_io import pread
from mdiff.format.findings import Finding
from mdiff.progress import ByteCounter, Progress
from mdiff.ranged_file import no_collection
from mdiff.repo import cleanup
from mdiff.repo.claims import ClaimChanges, state_digest_problems
from mdiff.repo.names import branch_problem, shown
from mdiff.repo.remotes import REMOTE_NAME, remote_url
from mdiff.repo.store import Store
from mdiff.validation import validate_and_summarize


def fsck(store: Store, check_data: bool = True, progress: Progress | None = None) -> list[Finding]:
    """Every problem of the repository in ``store`` (see Repository.fsck). The user's cache of walks and
    metadata (format/walk_cache.py) is neither read nor filled meanwhile: every verdict is the bytes'."""
    was, store.use_cache = store.use_cache, False
    try:
        return RepositoryCheck(store, check_data, progress).run()
    finally:
        store.use_cache = was


def _file_size(path: Path) -> int:
    found = path.lstat()
    return found.st_size if stat.S_ISREG(found.st_mode) else 0


class RepositoryCheck:
    """One fsck run: its checkers, in the order of the rules, and the findings they make."""

    def __init__(self, store: Store, check_data: bool, progress: Progress | None) -> None:
        self.store, self.check_data, self.progress = store, check_data, progress
        self.findings: list[Finding] = []
        self.commit_ids: list[str] = []
        # by commit id: what each commit found sound changes in the claims of its state (§4.2), taken as it is
        # checked, so that the digests' check does not read every commit again
        self.changes: dict[str, ClaimChanges] = {}
        self._done: Callable[[str], None] = lambda path: None

    def _report(self, exc: RepositoryError, where: Path | str) -> None:
        self.findings.append(Finding(exc.code, str(where), exc.message))

    def run(self) -> list[Finding]:
        self.check_fixed_files()
        try:
            branch_files = self.store.ref_names()
            self.commit_ids = self.store.commit_ids()
        except RepositoryError as exc:  # refs/heads or commits/ is not a folder: nothing more to look at
            self._report(exc, self.store.dir)
            return self.findings
        self.check_refs("branch", "heads", branch_files, self.store.branch_target)
        self.check_refs("tag", "tags", self._tag_files(), self.store.tag_target)
        self.check_reflogs()
        self.check_remotes()
        snapshot_files = sorted((self.store.dir / "snapshots").glob("*.mdiff"))
        if self.progress:
            files = [self.store.commit_path(c) for c in self.commit_ids] + snapshot_files
            self._done = ByteCounter(self.progress, ((str(p), _file_size(p)) for p in files))
        self.check_commits()
        self.check_block_lists()
        self.check_state_digests()
        self.check_snapshots(snapshot_files)
        self.check_leftovers()
        return self.findings

    def check_fixed_files(self) -> None:
        """§13.1: ``format`` says the repository's version; HEAD names a branch or a commit (the branch it
        names is checked with the refs)."""
        for check in (self.store.check_format, self.store.head_ref, self._check_lock):
            try:
                check()
            except RepositoryError as exc:
                self._report(exc, self.store.dir)

    def _check_lock(self) -> None:
        """§13.1, §13.6: the lock file is missing or a regular file; a link (dangling or not), FIFO, device
        or folder there is MD801, which every writer refuses. Looked at, never opened."""
        kind = self.store.kind("lock")
        if kind not in (None, "a regular file"):
            raise RepositoryError("MD801", f"{self.store.dir / 'lock'} is {kind}: every writer refuses to lock it "
                                           "(§13.1, §13.6); remove it (a writer makes it again)")

    def _tag_files(self) -> list[str]:
        try:
            return self.store._names_under(["refs", "tags"])
        except FileNotFoundError:
            return []  # a repository made before tags
        except RepositoryError as exc:
            self._report(exc, self.store.dir / "refs" / "tags")
            return []

    def check_refs(self, what: str, folder: str, names: list[str], target: Callable[[str], str | None]) -> None:
        """§13.1, §13.3: every ref file has a valid name and names a commit of the repository."""
        for name in names:
            malformed = branch_problem(name)
            try:
                if malformed:
                    raise RepositoryError("MD801", f"{shown(name)!r} is not a valid {what} name ({malformed}): no "
                                                   "revision names it; rename or delete it")
                target(name)
            except RepositoryError as exc:
                self._report(exc, shown(str(self.store.dir / "refs" / folder / name)))

    def check_reflogs(self) -> None:
        """§13.6: every reflog is a regular file of well-formed lines."""
        try:
            logs = self.store.reflog_refs()
        except RepositoryError as exc:
            self._report(exc, self.store.dir / "logs")
            return
        for ref in logs:
            try:
                for _ in self.store.reflog_entries(ref):
                    pass
            except RepositoryError as exc:
                self._report(exc, shown(str(self.store.dir / "logs" / ref)))

    def check_remotes(self) -> None:
        """§13.8: each remote's URL file and remote-tracking refs well formed, each ref naming a commit here."""
        store = self.store
        try:
            remotes = store.ref_files("remotes")
            tracked = store.ref_files("refs/remotes")
        except RepositoryError as exc:
            self._report(exc, store.dir)
            return
        for name in remotes:
            try:
                remote_url(store, name)
            except RepositoryError as exc:
                self._report(exc, shown(str(store.dir / "remotes" / name)))
        for name in tracked:
            remote, _, branch = name.partition("/")
            try:
                if not REMOTE_NAME.fullmatch(remote) or branch_problem(branch):
                    raise RepositoryError("MD801", f"{shown(name)!r} is not <remote>/<branch>: no revision names it")
                store.read_ref(f"refs/remotes/{name}")
            except RepositoryError as exc:
                self._report(exc, shown(str(store.dir / "refs" / "remotes" / name)))

    def check_commits(self) -> None:
        """§13.2: each commit file hashes to its name (MD800) and is a valid mdiff file, read from the bytes
        that were hashed; its parents are in the repository."""
        store, known = self.store, set(self.commit_ids)
        for commit_id in self.commit_ids:
            path = store.commit_path(commit_id)
            self._done(str(path))
            try:
                # what is made here is kept (the summary, the claims' changes: ~10 objects a parameter) or freed by
                # its count: the collector would only look at it again and again (~0.35 s of 10^5 parameters)
                with store.commit_file(commit_id) as readable, no_collection():
                    # validated, and what its metadata says taken from the same reading (by one isolated child)
                    findings, summary = validate_and_summarize(readable, check_data=self.check_data,
                                                               isolation=store.isolation)
                    # reported at the commit's file, the object in it named first
                    problems = [Finding(f.code, str(path), f.message if f.path == readable else f"{f.path}: {f.message}")
                                for f in findings if f.is_error]
                    if not problems and summary is not None:
                        store.remember_summary(commit_id, summary)
                        self.changes[commit_id] = ClaimChanges.of(summary)
            except RepositoryError as exc:
                self._report(exc, path)
                continue
            self.findings += problems
            if not problems:
                for parent in store.parents(commit_id):
                    if parent not in known:
                        self.findings.append(Finding("MD801", str(path), f"parent {parent[:12]} is not in the repository"))

    def check_block_lists(self) -> None:
        """§13.1–§13.2: a format-2 commit's ``commits/<id>.blocks``, where there is one, is its block list:
        its head hashes to the id and its leaf hashes to the head (MD800), it is one (MD801), and it is the
        commit file's (MD800). A commit without one is sound: a block list is made from the file."""
        store = self.store
        try:
            if store.repository_format != 2:
                return
        except RepositoryError:
            return  # reported with format
        from mdiff import block_ids

        for commit_id in self.commit_ids:
            relative = f"commits/{commit_id}.blocks"
            kind = store.kind(relative)
            if kind is None:
                continue
            path = store.blocks_path(commit_id)
            try:
                if kind != "a regular file":
                    raise RepositoryError("MD801", f"{path} is {kind}: a block list is a regular file (§13.1)")
                fd, before = store._open_file(relative)
                try:
                    data = pread(fd, before.st_size + 1, 0)
                finally:
                    os.close(fd)
                listed = block_ids.parse(data, commit_id, "")
                with store._verified_commit(commit_id) as (commit_fd, _):
                    made = block_ids.of_fd(commit_fd, os.fstat(commit_fd).st_size, keep_leaves=True)
                if made is None or made.encoded() != listed.encoded():
                    raise RepositoryError("MD800", f"{path} is not the block list of the commit file")
            except RepositoryError as exc:
                if exc.message.startswith(f"commit file {commit_id[:12]} "):
                    continue  # the commit file itself: reported by check_commits
                self._report(exc, path)

    def check_state_digests(self) -> None:
        """§4.2: a commit's `state_sha256` is the digest of the state its chain makes (MD808)."""
        present = [c for c in self.commit_ids if self.store.commit_path(c).is_file()]
        for commit_id, why in state_digest_problems(self.store, present, self.changes).items():
            self.findings.append(Finding("MD808", str(self.store.commit_path(commit_id)), why))

    def check_snapshots(self, snapshot_files: list[Path]) -> None:
        """§13.1, §13.5: a snapshot is a regular file (MD801: a link, FIFO or device there is never opened)
        that agrees with its commits (MD807); an unusable one is a warning (MD303): checkouts ignore it."""
        for path in snapshot_files:
            if path.name.startswith("."):
                continue  # a temporary file: check_leftovers
            self._done(str(path))
            kind = self.store.kind(f"snapshots/{path.name}")
            if kind != "a regular file":  # not opened (§13.1): no writer makes one, a stranger's may hang a reader
                self.findings.append(Finding("MD801", str(path), f"this snapshot is {kind}, not a regular file "
                                                                 "(§13.1): checkouts ignore it; `mdiff gc` removes it"))
                continue
            try:
                verdict = cleanup.judge_snapshot(self.store, path, self.check_data)
            except RepositoryError:
                continue  # its commits cannot be read: reported by check_commits
            if verdict is not None and verdict[0] == "MD807":
                self.findings.append(Finding("MD807", str(path), f"this snapshot disagrees with its commits: "
                                                                 f"{verdict[1]}; checkouts walk past it, `mdiff gc` "
                                                                 "removes it"))
            elif verdict is not None:
                self.findings.append(Finding("MD303", str(path), f"checkouts ignore this snapshot ({verdict[1]}); "
                                                                 "`mdiff gc` removes it"))

    def check_leftovers(self) -> None:
        """§13.1, §13.6: temporary files and folders of killed writers, harmless (MD303), with their sizes."""
        for stray in cleanup.temporaries(self.store.dir):
            self.findings.append(Finding("MD303", str(stray.path), f"{stray.reason} ({stray.size} bytes); `mdiff gc` "
                                                                   "removes it"))
