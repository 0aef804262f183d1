"""SPEC.md §13.1, §13.3, §13.6: refs — HEAD, branches, tags, other refs below ``refs/`` — and their reflogs.

A ref names a commit by its id and one newline; a move of a ref is appended to its reflog before the
ref is written, so that a process killed in between leaves the old commit named there. The caller of
every move holds the writers' lock (lock.py).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from mdiff.atomic import TEMP_SUFFIX, naming
from mdiff.errors import RepositoryError
from mdiff.regular_files import BINARY, CLOEXEC, NOFOLLOW, NONBLOCK, NotRegularFile, kind_of, open_regular
from mdiff.repo import reflog
from mdiff.repo.objects import CommitFiles
from mdiff.repo.names import BRANCH_NAME, HEAD_PREFIX, ID_LINE, MAX_SMALL_FILE_BYTES, branch_problem, shown, valid_branch
from mdiff.repo.folder import create_exclusive, rename_in, write_all
from mdiff.repo.reflog import ReflogEntry

log = logging.getLogger(__name__)

REF_ROUND = 256  # refs moved together by move_refs: at most twice as many descriptors open at once
ROUND_WORKERS = 4  # threads that make a round's files: each costs the kernel's CPU
SYNC_WORKERS = 64  # threads that sync them: each waits on the disk, which commits many syncs at once


class Refs(CommitFiles):
    """The refs of ``.mdiff/`` and their reflogs. They stand on the commit files: a ref that names no commit of
    the repository is refused (MD801)."""

    @staticmethod
    def check_branch_name(name: str) -> None:
        problem = branch_problem(name)
        if problem:
            raise RepositoryError("MD801", f"{shown(name)!r} is not a valid branch name: {problem}")

    def head(self) -> tuple[str | None, str | None]:
        """(branch, commit id) of HEAD; branch is None when HEAD is detached, id None before the first commit."""
        branch, commit_id = self.head_ref()
        return (branch, self.branch_target(branch)) if branch else (None, commit_id)

    def head_ref(self) -> tuple[str | None, str | None]:
        """What HEAD says, the branch it names not read: (branch, None), or (None, commit id) when detached."""
        text = self._read_small("HEAD")
        if text is None:
            raise RepositoryError("MD801", f"{self.dir / 'HEAD'} is missing")
        m = re.fullmatch(r"ref: refs/heads/(\S+)\n", text)
        if m and valid_branch(m.group(1)):
            return m.group(1), None
        if ID_LINE.fullmatch(text):
            return None, self.existing_commit(text[:-1], "HEAD")
        raise RepositoryError("MD801", f"{self.dir / 'HEAD'} is malformed: neither `{HEAD_PREFIX}<branch>` (a valid "
                                       "branch name) nor a commit id, with one newline (§13.1)")

    def ref_names(self) -> list[str]:
        """The name of every entry of refs/heads that is not a folder (hidden ones aside): a branch when
        the name is valid (§13.1); fsck reports the others, which no command reads."""
        try:
            return self._names_under(["refs", "heads"])
        except FileNotFoundError:
            raise RepositoryError("MD801", f"{self.dir / 'refs' / 'heads'} is missing") from None

    def branch_names(self) -> list[str]:
        """The branches, by name, without reading them."""
        return [name for name in self.ref_names() if valid_branch(name)]

    def branches(self) -> dict[str, str | None]:
        return {name: self.branch_target(name) for name in self.branch_names()}

    def has_branch(self, branch: str) -> bool:
        """Whether ``refs/heads/<branch>`` names a branch: a valid name, and an entry that is not a
        folder (which reading then requires to be a well-formed regular file)."""
        return valid_branch(branch) and self.kind(f"refs/heads/{branch}") not in (None, "a folder")

    def branch_target(self, branch: str) -> str | None:
        """The commit ``branch`` points to; None when there is no such branch."""
        self.check_branch_name(branch)
        return self._ref_target(f"refs/heads/{branch}", f"ref {branch!r}")

    def _ref_target(self, relative: str, what: str) -> str | None:
        """The commit the ref file ``.mdiff/<relative>`` names (MD801 when it is malformed or names no
        commit of the repository); None when there is no such file, or it is a folder of refs."""
        try:
            text = self._read_small(relative)
        except RepositoryError:
            if self.kind(relative) == "a folder":
                return None  # a folder of refs (`exp` of `exp/lora`)
            raise
        if text is None:
            return None
        if not ID_LINE.fullmatch(text):
            raise RepositoryError("MD801", f"{what} ({self._shown_path(relative)}) is malformed: "
                                           "not a commit id and one newline (§13.1)")
        return self.existing_commit(text[:-1], what)

    def unchecked_target(self, relative: str) -> str | None:
        """The commit id a ref file holds, without checking that the commit exists; None when the file
        is missing or holds no id (what a reflog records as the old side of a move)."""
        try:
            text = self._read_small(relative)
        except RepositoryError:
            return None
        return text[:-1] if text is not None and ID_LINE.fullmatch(text) else None

    def set_branch(self, branch: str, commit_id: str, message: str = "update") -> None:
        """Point ``branch`` at ``commit_id``: the move is recorded in its reflog first (§13.6), so
        that a process killed in between leaves the old commit named there."""
        self.check_branch_name(branch)
        self.move_ref(f"refs/heads/{branch}", commit_id, message)

    def move_ref(self, relative: str, commit_id: str | None, message: str) -> None:
        """Write (or, ``commit_id`` None, delete) the ref file ``.mdiff/<relative>`` — ``refs/`` and a name
        the branch-name rules allow (``refs/tags/v1``, ``refs/remotes/origin/main``) — after appending
        the move to ``logs/<relative>`` (§13.6). The caller holds the writers' lock."""
        self._check_ref_path(relative)
        old = self.unchecked_target(relative)
        self.append_reflog(relative, old, commit_id, message)
        if relative == self._head_names():  # HEAD moves with the branch it names: its reflog too (§13.6)
            self.append_reflog("HEAD", old, commit_id, message)
        if commit_id is not None:
            self._write_small(relative, commit_id + "\n")
            return
        *parts, name = relative.split("/")
        with self._folder(parts) as (fd, prefix):
            os.unlink(prefix + name, dir_fd=fd)
            self._sync_folder(fd, prefix)
        for depth in range(len(parts), 2, -1):  # folders it leaves empty (`exp` of `exp/lora`): a name again
            with self._folder(parts[:depth - 1]) as (fd, prefix):
                try:
                    os.rmdir(prefix + parts[depth - 1], dir_fd=fd)
                except OSError:
                    break  # not empty (or not a folder): it stays

    @staticmethod
    def _check_ref_path(relative: str) -> None:
        if not (relative.startswith("refs/") and BRANCH_NAME.fullmatch(relative) and ".." not in relative
                and not relative.endswith(".lock")):  # each part as §13.1 says (the length: the branch's own)
            raise RepositoryError("MD801", f"{shown(relative)[:80]!r} is not a ref: refs/ and a name of §13.1's form")

    def move_refs(self, moves: Sequence[tuple[str, str | None, str]], record: bool = True) -> None:
        """Many moves of :meth:`move_ref` — (ref, commit id or None, message) — each recorded and written as it
        records and writes one, as durably (§13.6: each reflog line synced before its ref is written, each ref
        file synced before it is renamed into place, its folder after), but in rounds of REF_ROUND refs: their
        reflog lines appended, then synced together; their new ref files written, then synced together, renamed
        into place, and each folder synced once. The disk's syncs of thousands of refs (a fetch's remote-tracking
        refs) are thus waited for together, and each folder is opened once a round, not once a file. A deletion,
        or a move of the branch HEAD names (its reflog too), is made alone. With ``record`` False (a clone's first
        refs, §13.6) the rounds' moves are not recorded in reflogs. The caller holds the writers' lock."""
        head = self._head_names()
        batch = []
        for relative, commit_id, message in moves:
            if commit_id is None or relative == head:
                self.move_ref(relative, commit_id, message)
            else:
                self._check_ref_path(relative)
                batch.append((relative, commit_id, message))
        with ThreadPoolExecutor(max_workers=min(SYNC_WORKERS, max(1, len(batch)))) as syncs:
            for start in range(0, len(batch), REF_ROUND):
                with _MoveRound(self, syncs) as round_:
                    round_.move(batch[start:start + REF_ROUND], record)

    def create_branch(self, branch: str, commit_id: str, message: str = "branch: created") -> None:
        """A new branch at ``commit_id`` (MD801 if it exists, or a tag has its name: §13.3). The caller
        holds the lock, so that of two writers creating one branch exactly one does (§13.6)."""
        self.check_branch_name(branch)
        kind = self.kind(f"refs/heads/{branch}")
        if kind == "a folder":
            raise RepositoryError("MD801", f"{branch!r} is a folder of branches; choose another name")
        if kind is not None:
            raise RepositoryError("MD801", f"branch {branch!r} exists already")
        if self.has_tag(branch):
            raise RepositoryError("MD801", f"{branch!r} is a tag; a branch of that name would make revisions "
                                           "ambiguous (§13.3): choose another name")
        self.set_branch(branch, commit_id, message)

    def set_head(self, branch: str | None = None, commit_id: str | None = None, message: str = "switch") -> None:
        """Make HEAD name ``branch``, or ``commit_id`` (detached). Every change of HEAD is recorded in
        ``logs/HEAD`` (§13.6) — a switch of branch, detaching, attaching — as the moves of the branch it
        names are (:meth:`move_ref`), so that ``HEAD@{N}`` is where HEAD was N moves ago, as in git."""
        if branch:
            self.check_branch_name(branch)
        try:
            before = self._read_small("HEAD")
        except RepositoryError:
            before = None  # a malformed HEAD is replaced; it named no commit
        text = f"{HEAD_PREFIX}{branch}\n" if branch else f"{commit_id}\n"
        old, new = self._raw_head(before), self.unchecked_target(f"refs/heads/{branch}") if branch else commit_id
        if text != before and (old or new):  # a move of HEAD (a switch between branches without commits is none)
            self.append_reflog("HEAD", old, new, message)
        self._write_small("HEAD", text)

    def _head_names(self) -> str | None:
        """The ref HEAD names (``refs/heads/<branch>``), or None when it is detached, missing or malformed."""
        try:
            text = self._read_small("HEAD")
        except RepositoryError:
            return None
        m = re.fullmatch(r"ref: (refs/heads/(\S+))\n", text or "")
        return m.group(1) if m and valid_branch(m.group(2)) else None

    def _raw_head(self, text: str | None) -> str | None:
        """The commit id the HEAD text ``text`` leads to, unchecked; None when it leads to none."""
        if text is not None and ID_LINE.fullmatch(text):
            return text[:-1]
        m = re.fullmatch(r"ref: refs/heads/(\S+)\n", text or "")
        return self.unchecked_target(f"refs/heads/{m.group(1)}") if m and valid_branch(m.group(1)) else None

    def advance(self, branch: str | None, commit_id: str, message: str = "commit") -> None:
        """Move the current branch — or a detached HEAD — to ``commit_id`` (after a commit)."""
        if branch:
            self.set_branch(branch, commit_id, message)
        else:
            self.set_head(commit_id=commit_id, message=message)

    def delete_branch(self, branch: str) -> None:
        """Remove ``refs/heads/<branch>`` — whatever it is, a link or a FIFO included (its entry is
        removed, nothing it points to) — unless it is the current branch. Its reflog stays, with the
        deletion appended: ``gc`` keeps its commits as long as its entries are young (§13.6)."""
        self.check_branch_name(branch)
        if self.kind(f"refs/heads/{branch}") in (None, "a folder"):
            raise RepositoryError("MD801", f"no branch {branch!r}")
        if self.head()[0] == branch:
            raise RepositoryError("MD801", f"cannot delete {branch!r}: it is the current branch")
        self.move_ref(f"refs/heads/{branch}", None, "branch: deleted")

    @staticmethod
    def check_tag_name(name: str) -> None:
        problem = branch_problem(name)  # tags follow the branch-name rules (§13.1)
        if problem:
            raise RepositoryError("MD801", f"{shown(name)!r} is not a valid tag name: {problem}")

    def tag_names(self) -> list[str]:
        """Every valid tag name of refs/tags (none when the folder is missing: repositories made before
        tags have none)."""
        try:
            return [name for name in self._names_under(["refs", "tags"]) if valid_branch(name)]
        except FileNotFoundError:
            return []

    def tags(self) -> dict[str, str | None]:
        return {name: self.tag_target(name) for name in self.tag_names()}

    def has_tag(self, name: str) -> bool:
        return valid_branch(name) and self.kind(f"refs/tags/{name}") not in (None, "a folder")

    def tag_target(self, name: str) -> str | None:
        """The commit tag ``name`` names; None when there is no such tag."""
        self.check_tag_name(name)
        return self._ref_target(f"refs/tags/{name}", f"tag {name!r}")

    def create_tag(self, name: str, commit_id: str, force: bool = False) -> str | None:
        """Tag ``commit_id`` as ``name``; returns the commit the tag named before (``force`` moves an
        existing tag; MD801 otherwise, and for a branch's name: §13.3). The caller holds the lock."""
        self.check_tag_name(name)
        kind = self.kind(f"refs/tags/{name}")
        if kind == "a folder":
            raise RepositoryError("MD801", f"{name!r} is a folder of tags; choose another name")
        if kind is not None and not force:
            raise RepositoryError("MD801", f"tag {name!r} exists already (-f moves it)")
        if self.has_branch(name):
            raise RepositoryError("MD801", f"{name!r} is a branch; a tag of that name would make revisions "
                                           "ambiguous (§13.3): choose another name")
        before = self.unchecked_target(f"refs/tags/{name}") if kind is not None else None
        self.move_ref(f"refs/tags/{name}", commit_id, "tag: moved" if kind is not None else "tag: created")
        return before

    def delete_tag(self, name: str) -> str | None:
        """Remove tag ``name`` (whatever its entry is); returns the commit it named, if it named one."""
        self.check_tag_name(name)
        if self.kind(f"refs/tags/{name}") in (None, "a folder"):
            raise RepositoryError("MD801", f"no tag {name!r}")
        before = self.unchecked_target(f"refs/tags/{name}")
        self.move_ref(f"refs/tags/{name}", None, "tag: deleted")
        return before

    def append_reflog(self, ref: str, old: str | None, new: str | None, message: str) -> None:
        """Append a move of ``ref`` (``HEAD``, ``refs/heads/main``) to ``logs/<ref>`` (§13.1), opened
        without following a link and appended to only if it is a regular file (MD801 otherwise); synced."""
        relative = f"logs/{ref}"
        opened: list[int] = []

        def kept(fd: int) -> int:
            opened.append(fd)
            return fd

        def close() -> None:
            for fd in opened:
                os.close(fd)

        with contextlib.ExitStack() as stack:
            stack.callback(close)  # after an error too; the folder (entered later) is closed before it
            out = self._open_reflog(relative, lambda parts: stack.enter_context(self._folder(parts, create=True)), kept)
            if out is not None:
                self._append(relative, out, reflog.encode(old, new, message))
                os.fsync(out)

    def _open_reflog(self, relative: str, folder: Callable[[list[str]], tuple[int | None, str]],
                     kept: Callable[[int], int], in_the_way: Callable[[str], bool] | None = None) -> int | None:
        """The reflog ``.mdiff/<relative>`` opened to append to (created if missing), in the folder that ``folder``
        opens; None, with a warning, when the reflog of a deleted ref is in the way (§13.6). MD801 when it is not
        a regular file. ``kept`` is given the descriptor as soon as it is open (the caller closes it)."""
        *parts, name = relative.split("/")
        if (in_the_way or self._reflog_blocked)(relative):
            log.warning("the move of %s is not recorded: the reflog of a deleted ref is in the way, below %s "
                        "(§13.6); gc removes it once its entries expire", shown(relative[len("logs/"):]),
                        self._shown_path("logs"))
            return None
        fd, prefix = folder(parts)
        try:
            out = kept(os.open(prefix + name, os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW | NONBLOCK | CLOEXEC
                               | BINARY, 0o666, dir_fd=fd))
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
                raise
            raise self._not_regular(relative, kind_of(os.stat(prefix + name, dir_fd=fd,
                                                              follow_symlinks=False).st_mode)) from None
        mode = os.fstat(out).st_mode
        if not stat.S_ISREG(mode):
            raise self._not_regular(relative, kind_of(mode))
        return out

    def _append(self, relative: str, fd: int, line: bytes) -> None:
        """``line`` appended to the reflog ``.mdiff/<relative>`` open as ``fd``, not yet synced."""
        try:
            reflog.append(fd, line, sync=False)
        except reflog.MalformedReflog as exc:
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: {exc}; move it "
                                           "away to record new moves") from None

    def _reflog_blocked(self, relative: str) -> bool:
        """Whether the reflog of a deleted ref is where the folders or the file of ``relative`` go: a
        branch `exp` deleted, then `exp/lora` made, or the reverse (a link on the way is MD801)."""
        parts = relative.split("/")
        if any(self.kind("/".join(parts[:i])) == "a regular file" for i in range(2, len(parts))):
            return True
        return self.kind(relative) == "a folder"

    def reflog_entries(self, ref: str) -> Iterator[ReflogEntry]:
        """The entries of ``logs/<ref>``, oldest first (none when it is missing); MD801 for a file that is
        not a regular file or holds a malformed line (§13.1)."""
        relative = f"logs/{ref}"
        try:
            fd, _ = self._open_file(relative)
        except FileNotFoundError:
            return
        try:
            yield from reflog.entries(fd)
        except reflog.MalformedReflog as exc:
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: {exc}") from None
        finally:
            os.close(fd)

    def reflog(self, ref: str | None = None) -> tuple[str, list[ReflogEntry]]:
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

    def reflog_refs(self) -> list[str]:
        """The ref of every file under logs/ (``HEAD``, ``refs/heads/main``, …), whatever its name."""
        try:
            return self._names_under(["logs"])
        except FileNotFoundError:
            return []

    def rewrite_reflog(self, ref: str, keep: Callable[[ReflogEntry], bool]) -> None:
        """Replace ``logs/<ref>`` by its entries that ``keep`` keeps (atomically, an entry at a time), or
        remove it when none is kept (gc). The caller holds the writers' lock."""
        relative = f"logs/{ref}"
        kept = (reflog.encode(e.old, e.new, e.message, e.time) for e in self.reflog_entries(ref) if keep(e))
        if self._write_atomic(relative, kept):
            return
        *parts, name = relative.split("/")
        with self._folder(parts) as (fd, prefix):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(prefix + name, dir_fd=fd)
            self._sync_folder(fd, prefix)

    def all_refs(self) -> list[str]:
        """Every file below refs/ (branches, tags, and refs of any other folder: a remote's), relative
        to ``.mdiff/``: what gc must keep reachable (§13.6)."""
        try:
            return [f"refs/{name}" for name in self._names_under(["refs"])]
        except FileNotFoundError:
            raise RepositoryError("MD801", f"{self.dir / 'refs'} is missing") from None

    def ref_file_target(self, relative: str) -> str | None:
        """The commit the file ``.mdiff/<relative>`` below refs/ names (MD801 when malformed)."""
        return self._ref_target(relative, f"ref {shown(relative)!r}")

    def read_ref(self, relative: str) -> str | None:
        """The commit id ``.mdiff/<relative>`` holds (a ref: an id and one newline, §13.1), or None when
        it is missing; MD801 when it is malformed or names a commit not in the repository."""
        text = self._read_small(relative)
        if text is None:
            return None
        if not ID_LINE.fullmatch(text):
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: not a commit id and one "
                                           "newline (§13.1)")
        return self.existing_commit(text[:-1], f"ref {relative}")

    def write_ref(self, relative: str, commit_id: str) -> None:
        """``.mdiff/<relative>`` made to name ``commit_id``, atomically (the caller holds the lock)."""
        self.existing_commit(commit_id, f"ref {relative}")
        self._write_small(relative, commit_id + "\n")

    def remove_ref(self, relative: str) -> None:
        """Remove the entry ``.mdiff/<relative>`` (whatever it is; nothing it points to)."""
        self.remove_entry(relative)


class _MoveRound:
    """One round of :meth:`Refs.move_refs`: its folders opened once each, the reflogs' lines appended and synced
    together, then the new ref files written and synced together, renamed into place, and each folder synced.
    Every descriptor it opens is closed on leaving it; a temporary file not yet renamed is removed."""

    def __init__(self, refs: Refs, syncs: ThreadPoolExecutor):
        self._refs, self._syncs = refs, syncs
        self._guard = threading.Lock()  # the round's files are made on several threads
        self._stack = contextlib.ExitStack()  # the folders, closed last
        self._folders: dict[tuple[str, ...], tuple[int | None, str]] = {}
        self._blocked: dict[tuple[str, ...], bool] = {}  # a folder of logs/ below a file: a deleted ref's reflog
        self._opened: list[int] = []  # every file descriptor of the round
        self._written: list[tuple[int | None, str, str, str]] = []  # (folder, prefix, temporary name, name) not renamed

    def __enter__(self) -> _MoveRound:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for opened in self._opened:
                os.close(opened)
            for folder, prefix, temp, _ in self._written:  # an error leaves no temporary file
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(prefix + temp, dir_fd=folder)
        finally:
            self._stack.close()

    def move(self, moves: list[tuple[str, str, str]], record: bool) -> None:
        with ThreadPoolExecutor(max_workers=ROUND_WORKERS) as pool:
            logs = [fd for fd in pool.map(self._append, moves) if fd is not None] if record else []
            list(self._syncs.map(os.fsync, logs))  # every line synced before any ref is written
            list(self._syncs.map(os.fsync, list(pool.map(self._write, moves))))
        synced = {(fd, prefix) for fd, prefix, _, _ in self._written}
        with naming(self._refs._shown_path("refs")):
            while self._written:
                fd, prefix, temp, name = self._written[-1]
                rename_in(fd, prefix, temp, name)
                self._written.pop()
        for fd, prefix in synced:
            self._refs._sync_folder(fd, prefix)

    def _kept(self, fd: int) -> int:
        with self._guard:
            self._opened.append(fd)
        return fd

    def _folder(self, parts: list[str]) -> tuple[int | None, str]:
        with self._guard:
            if tuple(parts) not in self._folders:
                self._folders[tuple(parts)] = self._stack.enter_context(self._refs._folder(parts, create=True))
            return self._folders[tuple(parts)]

    def _in_the_way(self, relative: str) -> bool:
        """Refs._reflog_blocked, each folder looked at once a round."""
        *parts, name = relative.split("/")
        with self._guard:
            known = self._blocked.get(tuple(parts))
        if known is None:
            known = any(self._refs.kind("/".join(parts[:i])) == "a regular file" for i in range(2, len(parts) + 1))
            with self._guard:
                self._blocked[tuple(parts)] = known
        if known:
            return True
        fd, prefix = self._folder(parts)
        try:
            return stat.S_ISDIR(os.stat(prefix + name, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def _old_target(self, relative: str) -> str | None:
        """Refs.unchecked_target, read in the folder the round has open."""
        *parts, name = relative.split("/")
        fd, prefix = self._folder(parts)
        try:
            ref, _ = open_regular(prefix + name, follow_links=False, dir_fd=fd)
        except (FileNotFoundError, NotRegularFile):
            return None
        try:
            text = os.read(ref, MAX_SMALL_FILE_BYTES + 1).decode("utf-8", "replace")
        finally:
            os.close(ref)
        return text[:-1] if ID_LINE.fullmatch(text) else None

    def _append(self, move: tuple[str, str, str]) -> int | None:
        relative, commit_id, message = move
        fd = self._refs._open_reflog(f"logs/{relative}", self._folder, self._kept, self._in_the_way)
        if fd is not None:
            self._refs._append(f"logs/{relative}", fd, reflog.encode(self._old_target(relative), commit_id, message))
        return fd

    def _write(self, move: tuple[str, str, str]) -> int:
        relative, commit_id, _ = move
        *parts, name = relative.split("/")
        fd, prefix = self._folder(parts)
        shown_path = self._refs._shown_path(relative)
        with naming(shown_path):
            with contextlib.suppress(FileNotFoundError):
                kind = kind_of(os.stat(prefix + name, dir_fd=fd, follow_symlinks=False).st_mode)
                if kind != "a regular file":
                    raise RepositoryError("MD801", f"{shown_path} is {kind}; mdiff replaces only a regular file "
                                                   "there (§13.1)")
            temp = f".{name[:64]}.{secrets.token_hex(8)}{TEMP_SUFFIX}"  # within 255 bytes, as _write_atomic
            out = self._kept(create_exclusive(fd, prefix, temp))
            with self._guard:
                self._written.append((fd, prefix, temp, name))
            write_all(out, f"{commit_id}\n".encode())
        return out
