"""SPEC.md §13.1–§13.3, §13.6: a repository's folder — commit files named by their sha256, branches,
HEAD, the writers' lock — and nothing about what the commits mean.

Every write is atomic (temporary file, fsync, rename) and every change of the repository happens
under one exclusive lock, so a process killed at any moment leaves the repository as it was
before or as it is after, and two writers never interleave.

The folder may have been prepared by a stranger (§13.1): every file under ``.mdiff/`` is reached
through folders opened one at a time without following a symbolic link, opened without blocking,
required to be a regular file and read within a bound; no message shows a malformed file's content.
A commit is parsed only from the bytes that were hashed (§13.2): its file is opened once, hashed
through that descriptor, and read by libhdf5 through the same descriptor (``/proc/self/fd/N``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from mdiff.atomic import TEMP_SUFFIX, fsync_directory
from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format.attributes import overwrite_string
from mdiff.format.commit import Commit
from mdiff.format.constants import ATTR_COMMIT
from mdiff.format.reader import DiffFile, open_diff
from mdiff.isolation import Isolation, isolation_supported
from mdiff.format.writer import DiffWriter
from mdiff.regular_files import (
    BINARY, CLOEXEC, DIRECTORY, NOFOLLOW, NONBLOCK, NotRegularFile, kind_of, open_regular, reopenable, same_file,
)
from mdiff.repo import reflog
from mdiff.repo.reflog import ReflogEntry

log = logging.getLogger(__name__)

REPO_DIR = ".mdiff"
FORMAT_LINE = "mdiff-repository 1\n"
COMMIT_ID = re.compile(r"[0-9a-f]{64}")
_ID_LINE = re.compile(r"[0-9a-f]{64}\n")  # a ref or detached HEAD: the id and one newline, nothing else (§13.1)
BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MAX_BRANCH_BYTES = 255  # a file name's limit on common file systems
HEAD_PREFIX = "ref: refs/heads/"
# format, HEAD and refs are small: a reader reads no more than HEAD naming the longest branch (§13.1)
MAX_SMALL_FILE_BYTES = len(HEAD_PREFIX) + MAX_BRANCH_BYTES + 1
_HASH_BLOCK = 1 << 20
# os.open and friends relative to an open folder (every POSIX system); elsewhere, paths checked with lstat
_AT = {os.open, os.mkdir, os.rename, os.unlink, os.stat} <= os.supports_dir_fd and os.scandir in os.supports_fd


def branch_problem(name: str) -> str | None:
    """Why ``name`` is not a valid branch name (§13.1), or None when it is one."""
    if not BRANCH_NAME.fullmatch(name):
        return ("it is not made of parts [A-Za-z0-9][A-Za-z0-9._-]* joined by /"
                if name.isprintable() else "it holds a character that cannot be shown")
    if ".." in name:
        return "it contains '..'"
    if name.endswith(".lock"):
        return "it ends in '.lock'"
    if len(name.encode("utf-8")) > MAX_BRANCH_BYTES:
        return f"it is longer than {MAX_BRANCH_BYTES} bytes"
    if COMMIT_ID.fullmatch(name):
        return "it looks like a commit id, and a full commit id always means that commit (§13.3)"
    return None


def valid_branch(name: str) -> bool:
    return branch_problem(name) is None


def shown(text: str) -> str:
    """A name read from the file system, printable whatever bytes it holds."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def _sha256_of(fd: int, size: int) -> str | None:
    """The sha256 of the first ``size`` bytes of ``fd`` (from its start); None if the file ends sooner."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(min(_HASH_BLOCK, max(size, 1))))
    done = 0
    with io.FileIO(fd, "rb", closefd=False) as file:
        file.seek(0)
        while done < size:
            n = file.readinto(buffer[:min(len(buffer), size - done)])
            if not n:
                return None
            digest.update(buffer[:n])
            done += n
    return digest.hexdigest()


def _rename(fd: int | None, prefix: str, source: str, target: str) -> None:
    """Rename ``source`` to ``target`` in one folder (``fd``, or the path ``prefix``), replacing it."""
    if fd is None:
        os.replace(prefix + source, prefix + target)
    else:
        os.rename(source, target, src_dir_fd=fd, dst_dir_fd=fd)  # POSIX rename replaces the target


@dataclass(frozen=True)
class CommitFacts:
    """What a commit's metadata says, kept by id (a commit's content never changes)."""

    commit: Commit  # its metadata
    parents: tuple[str, ...]
    declared_bytes: int  # of its updates' datasets
    inexact: dict[str, bool]  # name → whether the update leaves the value inexact (§13.4)


class Store:
    """The folder ``.mdiff/`` of a repository (SPEC.md §13.1)."""

    def __init__(self, root: Path, isolation: Isolation | None | str = "auto"):
        """``isolation``: how commit and snapshot files are parsed (SPEC §8.5) — by an isolated child, with
        these limits, so that a crafted file from a clone or a remote cannot crash or hang this process
        ("auto": the default limits where the platform can isolate, POSIX); None parses them here."""
        self.root = Path(root)
        self.isolation: Isolation | None = (Isolation() if isolation_supported() else None) if isolation == "auto" \
            else isolation  # type: ignore[assignment]
        self.dir = self.root / REPO_DIR
        self._facts: dict[str, CommitFacts] = {}
        self._inexact: dict[str, frozenset[str]] = {}  # by commit id: the inexact values of its state (§13.4)

    @classmethod
    def create(cls, root: Path, branch: str) -> None:
        """Make ``root/.mdiff`` with an empty ``branch``, atomically."""
        cls.check_branch_name(branch)
        directory = Path(root) / REPO_DIR
        if directory.exists():
            raise RepositoryError("MD801", f"{directory} already exists; it is a repository already")
        Path(root).mkdir(parents=True, exist_ok=True)
        staging = Path(root) / f".mdiff-init.{secrets.token_hex(8)}{TEMP_SUFFIX}"
        staging.mkdir(0o777)  # the umask decides, as for any folder
        for sub in ("commits", "snapshots", "refs/heads", "refs/tags"):
            (staging / sub).mkdir(parents=True)
        (staging / "format").write_text(FORMAT_LINE, encoding="utf-8")
        (staging / "HEAD").write_text(f"{HEAD_PREFIX}{branch}\n", encoding="utf-8")
        os.replace(staging, directory)  # the repository appears whole or not at all
        fsync_directory(Path(root).resolve())

    @staticmethod
    def locate(start) -> Path:
        """The folder holding ``.mdiff/`` that contains ``start`` (searching upwards, like git)."""
        here = Path(start).resolve()
        for candidate in (here, *here.parents):
            if os.path.lexists(candidate / REPO_DIR / "format"):  # whatever it is: check_format says what is wrong
                return candidate
        raise RepositoryError("MD801", f"no mdiff repository in {here} or its parents; run `mdiff init`")

    def check_format(self) -> None:
        text = self._read_small("format")
        if text is None:
            raise RepositoryError("MD801", f"{self.dir / 'format'} is missing")
        if text != FORMAT_LINE:
            raise RepositoryError("MD801", f"{self.dir / 'format'} does not say {FORMAT_LINE.strip()!r}")

    @staticmethod
    def check_branch_name(name: str) -> None:
        problem = branch_problem(name)
        if problem:
            raise RepositoryError("MD801", f"{shown(name)!r} is not a valid branch name: {problem}")

    # ------------------------------------------------------------ files under .mdiff/, no link followed
    def _shown_path(self, relative: str) -> str:
        return shown(str(self.dir / relative))

    def _not_regular(self, relative: str, kind: str) -> RepositoryError:
        why = ("a reader follows no link inside .mdiff/" if kind == "a symbolic link"
               else "it is not a regular file")
        return RepositoryError("MD801", f"{self._shown_path(relative)} is {kind}: {why} (§13.1)")

    @contextlib.contextmanager
    def _folder(self, parts: Sequence[str], create: bool = False) -> Iterator[tuple[int | None, str]]:
        """(dir_fd, prefix) for the folder ``.mdiff/<parts>``: a name ``prefix + NAME`` relative to
        ``dir_fd`` is a file in it. Each part is a real folder, not a link (MD801 otherwise); a missing
        one is FileNotFoundError, unless ``create`` makes it. ``.mdiff`` itself may be a link."""
        if not _AT:
            path = self.dir
            for i, part in enumerate(parts):
                path = path / part
                if create:
                    with contextlib.suppress(FileExistsError):
                        path.mkdir()
                mode = os.lstat(path).st_mode
                if not stat.S_ISDIR(mode):
                    raise self._not_folder("/".join(parts[:i + 1]), kind_of(mode))
            yield None, str(path) + os.sep
            return
        fd = os.open(self.dir, os.O_RDONLY | DIRECTORY | CLOEXEC)
        try:
            for i, part in enumerate(parts):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=fd)
                try:
                    inner = os.open(part, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC | NONBLOCK, dir_fd=fd)
                except (FileNotFoundError, PermissionError):
                    raise
                except OSError:
                    raise self._not_folder("/".join(parts[:i + 1]),
                                           kind_of(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)) from None
                os.close(fd)
                fd = inner
            yield fd, ""
        finally:
            os.close(fd)

    def _not_folder(self, relative: str, kind: str) -> RepositoryError:
        why = "a reader follows no link inside .mdiff/" if kind == "a symbolic link" else "a folder belongs there"
        return RepositoryError("MD801", f"{self._shown_path(relative)} is {kind}: {why} (§13.1)")

    def kind(self, relative: str) -> str | None:
        """What ``.mdiff/<relative>`` is ("a regular file", "a folder", "a symbolic link", …), None if missing."""
        *parts, name = relative.split("/")
        try:
            with self._folder(parts) as (fd, prefix):
                return kind_of(os.stat(prefix + name, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return None

    def _open_file(self, relative: str) -> tuple[int, os.stat_result]:
        """(descriptor, fstat) of the regular file ``.mdiff/<relative>``, opened without blocking and
        without following a link; MD801 for anything else; FileNotFoundError when it is missing."""
        *parts, name = relative.split("/")
        with self._folder(parts) as (fd, prefix):
            try:
                return open_regular(prefix + name, follow_links=False, dir_fd=fd)
            except NotRegularFile as exc:
                raise self._not_regular(relative, exc.kind) from None

    def _read_small(self, relative: str, limit: int = MAX_SMALL_FILE_BYTES) -> str | None:
        """The text of ``format``, HEAD or a ref (None when missing): at most ``limit`` bytes read."""
        try:
            fd, _ = self._open_file(relative)
        except FileNotFoundError:
            return None
        try:
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: longer than "
                                           f"{limit} bytes (§13.1)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: not UTF-8 text") from None

    def _write_small(self, relative: str, text: str) -> None:
        """``text`` as the whole new content of ``.mdiff/<relative>``, atomically (temporary file,
        fsync, rename) in its folder, opened without following a link; only a regular file is replaced."""
        self._write_atomic(relative, [text.encode("utf-8")])

    def _write_atomic(self, relative: str, chunks: Iterable[bytes]) -> int:
        """``chunks``, written one after the other, as the whole new content of ``.mdiff/<relative>``,
        atomically, as :meth:`_write_small` writes; returns the bytes written."""
        *parts, name = relative.split("/")
        written = 0
        with self._folder(parts, create=True) as (fd, prefix):
            with contextlib.suppress(FileNotFoundError):
                kind = kind_of(os.stat(prefix + name, dir_fd=fd, follow_symlinks=False).st_mode)
                if kind != "a regular file":
                    raise RepositoryError("MD801", f"{self._shown_path(relative)} is {kind}; mdiff replaces only a "
                                                   "regular file there (§13.1)")
            temp = f".{name[:64]}.{secrets.token_hex(8)}{TEMP_SUFFIX}"  # within 255 bytes whatever the name
            out = os.open(prefix + temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC | BINARY, 0o666,
                          dir_fd=fd)
            try:
                try:
                    for data in chunks:
                        view = memoryview(data)
                        while view:
                            view = view[os.write(out, view):]
                        written += len(data)
                    os.fsync(out)
                finally:
                    os.close(out)
                _rename(fd, prefix, temp, name)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(prefix + temp, dir_fd=fd)
                raise
            self._sync_folder(fd, prefix)
        return written

    @staticmethod
    def _sync_folder(fd: int | None, prefix: str) -> None:
        if fd is None:
            fsync_directory(prefix)
        else:
            with contextlib.suppress(OSError):
                os.fsync(fd)

    def _names_in(self, parts: Sequence[str]) -> list[tuple[str, bool]]:
        """(name, is a real folder) of each entry of ``.mdiff/<parts>``, sorted."""
        with self._folder(parts) as (fd, prefix):
            with os.scandir(fd if fd is not None else prefix) as entries:
                return sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)

    # ------------------------------------------------------------ locking
    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[None]:
        """The one writer lock (§13.6: an exclusive flock on .mdiff/lock, where the platform has flock);
        ``wait=False`` refuses at once (MD803) if another process holds it. The lock file is opened
        without following a link and without blocking, and must be a regular file (MD801)."""
        try:
            import fcntl
        except ImportError:  # no flock: filelock's lock for this platform
            yield from self._portable_lock(wait)
            return
        with self._folder([]) as (folder, prefix):
            try:
                fd = os.open(prefix + "lock", os.O_RDONLY | os.O_CREAT | NOFOLLOW | NONBLOCK | CLOEXEC, 0o644,
                             dir_fd=folder)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
                    raise
                raise self._not_regular("lock", kind_of(os.stat(prefix + "lock", dir_fd=folder,
                                                                follow_symlinks=False).st_mode)) from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise self._not_regular("lock", kind_of(mode))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise RepositoryError("MD803", "another mdiff process is writing to this repository; try again") from None
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _portable_lock(self, wait: bool) -> Iterator[None]:
        from filelock import FileLock, Timeout

        kind = self.kind("lock")
        if kind not in (None, "a regular file"):
            raise self._not_regular("lock", kind)
        held = FileLock(self.dir / "lock", mode=0o644, thread_local=False)
        try:
            held.acquire(timeout=-1 if wait else 0)
        except Timeout:
            raise RepositoryError("MD803", "another mdiff process is writing to this repository; try again") from None
        try:
            yield
        finally:
            held.release()

    # ------------------------------------------------------------ refs
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
        if _ID_LINE.fullmatch(text):
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

    def _names_under(self, parts: list[str]) -> list[str]:
        """The path, relative to ``.mdiff/<parts>``, of every entry below it that is not a folder
        (hidden ones aside: a writer's temporary files, §13.1); FileNotFoundError when it is missing."""
        found: list[str] = []

        def walk(inner_parts: list[str]) -> None:
            for name, is_folder in self._names_in([*parts, *inner_parts]):
                if name.startswith("."):
                    continue  # a writer's temporary file (§13.1)
                inner = [*inner_parts, name]
                if is_folder and len("/".join(inner).encode("utf-8", "surrogateescape")) < MAX_BRANCH_BYTES:
                    walk(inner)
                else:  # a file; or a folder no ref name can reach into, reported as it is
                    found.append("/".join(inner))

        walk([])
        return found

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
        if not _ID_LINE.fullmatch(text):
            raise RepositoryError("MD801", f"{what} ({self._shown_path(relative)}) is malformed: "
                                           "not a commit id and one newline (§13.1)")
        return self.existing_commit(text[:-1], what)

    def _raw_target(self, relative: str) -> str | None:
        """The commit id a ref file holds, without checking that the commit exists; None when the file
        is missing or holds no id (what a reflog records as the old side of a move)."""
        try:
            text = self._read_small(relative)
        except RepositoryError:
            return None
        return text[:-1] if text is not None and _ID_LINE.fullmatch(text) else None

    def existing_commit(self, commit_id: str, what: str) -> str:
        if self.kind(f"commits/{commit_id}.mdiff") is None:
            raise RepositoryError("MD801", f"{what} names commit {commit_id[:12]}, which is not in the repository")
        return commit_id

    def set_branch(self, branch: str, commit_id: str, message: str = "update") -> None:
        """Point ``branch`` at ``commit_id``: the move is recorded in its reflog first (§13.6), so
        that a process killed in between leaves the old commit named there."""
        self.check_branch_name(branch)
        self.move_ref(f"refs/heads/{branch}", commit_id, message)

    def move_ref(self, relative: str, commit_id: str | None, message: str) -> None:
        """Write (or, ``commit_id`` None, delete) the ref file ``.mdiff/<relative>`` — ``refs/`` and a name
        the branch-name rules allow (``refs/tags/v1``, ``refs/remotes/origin/main``) — after appending
        the move to ``logs/<relative>`` (§13.6). The caller holds the writers' lock."""
        if not (relative.startswith("refs/") and BRANCH_NAME.fullmatch(relative) and ".." not in relative
                and not relative.endswith(".lock")):  # each part as §13.1 says (the length: the branch's own)
            raise RepositoryError("MD801", f"{shown(relative)[:80]!r} is not a ref: refs/ and a name of §13.1's form")
        old = self._raw_target(relative)
        self.append_reflog(relative, old, commit_id, message)
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
        """Make HEAD name ``branch``, or ``commit_id`` (detached). A change from or to a detached HEAD is
        recorded in ``logs/HEAD`` (§13.6): a detached HEAD's commits are named by no branch."""
        if branch:
            self.check_branch_name(branch)
        try:
            before = self._read_small("HEAD")
        except RepositoryError:
            before = None  # a malformed HEAD is replaced; it named no commit
        was_detached = before is not None and _ID_LINE.fullmatch(before) is not None
        if was_detached or not branch:
            new = self._raw_target(f"refs/heads/{branch}") if branch else commit_id
            self.append_reflog("HEAD", self._raw_head(before), new, message)
        self._write_small("HEAD", f"{HEAD_PREFIX}{branch}\n" if branch else f"{commit_id}\n")

    def _raw_head(self, text: str | None) -> str | None:
        """The commit id the HEAD text ``text`` leads to, unchecked; None when it leads to none."""
        if text is not None and _ID_LINE.fullmatch(text):
            return text[:-1]
        m = re.fullmatch(r"ref: refs/heads/(\S+)\n", text or "")
        return self._raw_target(f"refs/heads/{m.group(1)}") if m and valid_branch(m.group(1)) else None

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

    # ------------------------------------------------------------ tags
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
        before = self._raw_target(f"refs/tags/{name}") if kind is not None else None
        self.move_ref(f"refs/tags/{name}", commit_id, "tag: moved" if kind is not None else "tag: created")
        return before

    def delete_tag(self, name: str) -> str | None:
        """Remove tag ``name`` (whatever its entry is); returns the commit it named, if it named one."""
        self.check_tag_name(name)
        if self.kind(f"refs/tags/{name}") in (None, "a folder"):
            raise RepositoryError("MD801", f"no tag {name!r}")
        before = self._raw_target(f"refs/tags/{name}")
        self.move_ref(f"refs/tags/{name}", None, "tag: deleted")
        return before

    # ------------------------------------------------------------ reflogs
    def append_reflog(self, ref: str, old: str | None, new: str | None, message: str) -> None:
        """Append a move of ``ref`` (``HEAD``, ``refs/heads/main``) to ``logs/<ref>`` (§13.1), opened
        without following a link and appended to only if it is a regular file (MD801 otherwise)."""
        relative = f"logs/{ref}"
        *parts, name = relative.split("/")
        if self._reflog_blocked(relative):
            log.warning("the move of %s is not recorded: the reflog of a deleted ref is in the way, below %s "
                        "(§13.6); gc removes it once its entries expire", shown(ref), self._shown_path("logs"))
            return
        with self._folder(parts, create=True) as (fd, prefix):
            try:
                out = os.open(prefix + name, os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW | NONBLOCK | CLOEXEC
                              | BINARY, 0o666, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
                    raise
                raise self._not_regular(relative, kind_of(os.stat(prefix + name, dir_fd=fd,
                                                                  follow_symlinks=False).st_mode)) from None
            try:
                mode = os.fstat(out).st_mode
                if not stat.S_ISREG(mode):
                    raise self._not_regular(relative, kind_of(mode))
                reflog.append(out, reflog.encode(old, new, message))
            except reflog.MalformedReflog as exc:
                raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: {exc}; move it "
                                               "away to record new moves") from None
            finally:
                os.close(out)

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

    # ------------------------------------------------------------ other refs: remote-tracking refs, tags (§13.8)
    def read_ref(self, relative: str) -> str | None:
        """The commit id ``.mdiff/<relative>`` holds (a ref: an id and one newline, §13.1), or None when
        it is missing; MD801 when it is malformed or names a commit not in the repository."""
        text = self._read_small(relative)
        if text is None:
            return None
        if not _ID_LINE.fullmatch(text):
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: not a commit id and one "
                                           "newline (§13.1)")
        return self.existing_commit(text[:-1], f"ref {relative}")

    def write_ref(self, relative: str, commit_id: str) -> None:
        """``.mdiff/<relative>`` made to name ``commit_id``, atomically (the caller holds the lock)."""
        self.existing_commit(commit_id, f"ref {relative}")
        self._write_small(relative, commit_id + "\n")

    def remove_ref(self, relative: str) -> None:
        """Remove the entry ``.mdiff/<relative>`` (whatever it is; nothing it points to)."""
        *parts, name = relative.split("/")
        with contextlib.suppress(FileNotFoundError):
            with self._folder(parts) as (fd, prefix):
                os.unlink(prefix + name, dir_fd=fd)
                self._sync_folder(fd, prefix)

    def ref_files(self, folder: str) -> list[str]:
        """The names, relative to ``.mdiff/<folder>``, of the entries below it that are not folders
        (temporary ones aside), sub-folders walked without following a link; [] when it is missing."""
        found: list[str] = []

        def walk(parts: list[str]) -> None:
            for name, is_folder in self._names_in([*folder.split("/"), *parts]):
                if name.startswith("."):
                    continue
                inner = [*parts, name]
                if is_folder and len("/".join(inner).encode("utf-8", "surrogateescape")) < MAX_BRANCH_BYTES:
                    walk(inner)
                elif not is_folder:
                    found.append("/".join(inner))

        with contextlib.suppress(FileNotFoundError):
            walk([])
        return found

    def receive_commit(self, commit_id: str, chunks: Iterable[bytes], limit: int, directory: str = "commits") -> str:
        """Write the bytes ``chunks`` give to a temporary file of ``commits/`` (§13.1: a hidden name),
        hashing them as they come; MD800 when they do not hash to ``commit_id`` (nothing is left), MD801
        when they exceed ``limit`` bytes. The file is then opened as its readers will (their error when
        they would refuse it) and its metadata remembered. Returns the temporary name, which
        :meth:`file_received` makes a commit and :meth:`discard_received` removes. With ``directory``
        "snapshots", a snapshot of that commit: named by its commit, not its hash, so not hashed (§13.5:
        its commits vouch for it when it is read), and MD801 when no reader could open it."""
        if not COMMIT_ID.fullmatch(commit_id):
            raise RepositoryError("MD801", f"{shown(commit_id)[:80]!r} is not a commit id")
        what = "commit" if directory == "commits" else "snapshot of"
        temp = f".receive.{commit_id[:16]}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
        with self._folder([directory], create=True) as (fd, prefix):
            out = os.open(prefix + temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC | BINARY, 0o666,
                          dir_fd=fd)
            try:
                digest, size = hashlib.sha256(), 0
                try:
                    for chunk in chunks:
                        size += len(chunk)
                        if size > limit:
                            raise RepositoryError("MD801", f"{what} {commit_id[:12]} is larger than {limit} bytes")
                        digest.update(chunk)
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(out, view):]
                    os.fsync(out)
                finally:
                    os.close(out)
                if directory == "commits" and digest.hexdigest() != commit_id:
                    raise RepositoryError("MD800", f"commit {commit_id[:12]} is corrupt: the {size} bytes received "
                                                   f"hash to {digest.hexdigest()[:12]}")
                folder = reopenable(fd, self.dir / directory) if fd is not None else prefix
                try:
                    self._read_back(fd, prefix + temp, Path(folder) / temp, directory == "commits", untrusted=True)
                except InvalidFileError as exc:
                    code = "MD802" if directory == "commits" else "MD801"
                    raise RepositoryError(code, f"{what} {commit_id[:12]} is no valid mdiff file: "
                                                f"{exc.code}: {exc.message}") from exc
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(prefix + temp, dir_fd=fd)
                raise
        return temp

    def file_received(self, temp: str, commit_id: str, directory: str = "commits") -> None:
        """Give the temporary file ``temp`` (from :meth:`receive_commit`) its name: ``<commit_id>.mdiff``."""
        with self._folder([directory]) as (fd, prefix):
            _rename(fd, prefix, temp, f"{commit_id}.mdiff")
            self._sync_folder(fd, prefix)

    def received_parents(self, commit_id: str) -> tuple[str, ...]:
        """The parents of a commit :meth:`receive_commit` verified (before it is filed)."""
        return self._facts[commit_id].parents

    def discard_received(self, temp: str, directory: str = "commits") -> None:
        with contextlib.suppress(FileNotFoundError):
            with self._folder([directory]) as (fd, prefix):
                os.unlink(prefix + temp, dir_fd=fd)

    def snapshot_chunks(self, commit_id: str, block: int = 8 << 20) -> Iterator[bytes]:
        """The bytes of ``snapshots/<commit_id>.mdiff`` (a regular file, opened as §13.1 says), in blocks."""
        fd, _ = self._open_file(f"snapshots/{commit_id}.mdiff")
        with io.FileIO(fd, "rb") as file:
            while chunk := file.read(block):
                yield chunk

    def commit_chunks(self, commit_id: str, block: int = 8 << 20) -> Iterator[bytes]:
        """The bytes of the commit file, verified (MD800) as they are read, in blocks."""
        with self.commit_file(commit_id) as readable:
            with open(readable, "rb") as file:
                while chunk := file.read(block):
                    yield chunk

    # ------------------------------------------------------------ commit files
    def commit_path(self, commit_id: str) -> Path:
        return self.dir / "commits" / f"{commit_id}.mdiff"

    def snapshot_path(self, commit_id: str) -> Path:
        return self.dir / "snapshots" / f"{commit_id}.mdiff"

    def has_snapshot(self, commit_id: str) -> bool:
        return self.snapshot_path(commit_id).exists()

    def commit_ids(self) -> list[str]:
        """The id of every entry of commits/ named ``<id>.mdiff`` (whatever it is: reading it says)."""
        names = [name[:-len(".mdiff")] for name, _ in self._names_in(["commits"]) if name.endswith(".mdiff")]
        return sorted(name for name in names if COMMIT_ID.fullmatch(name))

    def metadata(self, commit_id: str) -> Commit:
        return self.commit_facts(commit_id).commit

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.commit_facts(commit_id).parents

    def commit_facts(self, commit_id: str) -> CommitFacts:
        """What the commit's metadata says, read from its verified file once per process (MD800)."""
        self.existing_commit(commit_id, "a commit's parent list")  # even when known: the file may have gone since
        if commit_id not in self._facts:
            self.open_commit(commit_id).close()
        return self._facts[commit_id]

    def _remember(self, commit_id: str, diff: DiffFile) -> None:
        self._facts[commit_id] = CommitFacts(
            diff.commit, diff.commit.parents, sum(diff[name].stored_bytes for name in diff),
            {name: diff[name].type != "delete" and not diff[name].update_type.carries_sha256 for name in diff},
        )

    def remember_inexact(self, commit_id: str, names: frozenset[str]) -> None:
        self._inexact[commit_id] = names

    @contextlib.contextmanager
    def commit_file(self, commit_id: str) -> Iterator[str]:
        """A name to read the commit file of ``commit_id`` by, whose bytes hash to the id (§13.2: MD800
        otherwise; MD801 when there is no such regular file). The file is opened once and hashed
        through that descriptor, and the name given reopens that descriptor, so what is read is what
        was hashed even if the file is replaced meanwhile; a file changed in place while it is hashed
        or read (its size, modification or change time moved) is refused (MD800) when the block ends."""
        relative = f"commits/{commit_id}.mdiff"
        try:
            fd, before = self._open_file(relative)
        except FileNotFoundError:
            raise RepositoryError("MD801", f"commit {commit_id[:12]} is not in the repository") from None
        try:
            got = _sha256_of(fd, before.st_size)
            if got != commit_id:
                self._check_unchanged(fd, before, commit_id)
                raise RepositoryError("MD800", f"commit file {commit_id[:12]} is corrupt: its bytes hash to "
                                               f"{(got or 'nothing (it ended early)')[:12]}")
            self._check_unchanged(fd, before, commit_id)
            path = self.commit_path(commit_id)
            readable = reopenable(fd, path)
            yield readable
            self._check_unchanged(fd, before, commit_id, path if readable == os.fspath(path) else None)
        finally:
            os.close(fd)

    @staticmethod
    def _check_unchanged(fd: int, before: os.stat_result, commit_id: str, path: Path | None = None) -> None:
        after = os.fstat(fd) if path is None else os.stat(path, follow_symlinks=False)
        if not same_file(before, after):
            raise RepositoryError("MD800", f"commit file {commit_id[:12]} changed while it was read")

    def verify(self, commit_id: str) -> None:
        """MD800: the commit file's bytes hash to its name (MD801 when there is no such file)."""
        with self.commit_file(commit_id):
            pass

    def open_commit(self, commit_id: str) -> DiffFile:
        """The commit file, verified (MD800) and opened from the very bytes verified (MD802 when it
        breaks a rule of the format)."""
        diff: DiffFile | None = None
        try:
            with self.commit_file(commit_id) as readable:
                try:
                    diff = open_diff(readable, isolation=self.isolation, commit_id=commit_id)
                except InvalidFileError as exc:
                    where = f" [{exc.path}]" if exc.path and exc.path != readable else ""
                    raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: "
                                                   f"{exc.code}: {exc.message}{where}") from exc
                diff.path = os.fspath(self.commit_path(commit_id))
        except BaseException:
            if diff is not None:
                diff.close()
            raise
        self._remember(commit_id, diff)
        return diff

    def open_snapshot(self, commit_id: str) -> DiffFile:
        """snapshots/<commit_id>.mdiff, opened as §13.1 says (no link followed, without blocking, a
        regular file) — InvalidFileError (MD100) otherwise: an unusable snapshot (§13.5)."""
        path = self.snapshot_path(commit_id)
        try:
            fd, _ = self._open_file(f"snapshots/{commit_id}.mdiff")
        except RepositoryError as exc:
            raise InvalidFileError("MD100", f"unusable snapshot: {exc.message}", os.fspath(path)) from None
        try:
            diff = open_diff(reopenable(fd, path), isolation=self.isolation)
        finally:
            os.close(fd)
        diff.path = os.fspath(path)
        return diff

    def store(self, write: Callable[[DiffWriter], None], commit: Commit, compression: str = "gzip",
              directory: str = "commits", seal: Callable[[], Commit] | None = None) -> str:
        """Write a commit file with ``write``; file it under its sha256; return that id. With ``seal``, the
        commit metadata is ``seal()``, asked for once ``write`` is done: ``commit`` holds its place, with a
        ``state_sha256`` of the same length (§4.2), which the metadata's state digest replaces in place.

        The file is complete, synced, and read back as its readers will read it (the limits of §8.3
        included) before it gets its name, so a crash leaves at most a stray temporary file, never a
        partial commit, and no commit is filed that its readers would refuse. The folder is opened
        without following a link and every name is taken relative to it: nothing lands outside.
        """
        with self._folder([directory]) as (fd, prefix):
            folder = reopenable(fd, self.dir / directory) if fd is not None else prefix
            temp = f".commit.mdiff.{secrets.token_hex(8)}{TEMP_SUFFIX}"
            os.close(os.open(prefix + temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o666,
                             dir_fd=fd))
            try:
                sealed = _SealedWriter(os.path.join(folder, temp), commit, compression)
                with sealed as writer:
                    write(writer)
                    if seal is not None:
                        sealed.seal(seal())
                commit_id = self._read_back(fd, prefix + temp, self.dir / directory / temp, directory == "commits")
                _rename(fd, prefix, temp, f"{commit_id}.mdiff")
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(prefix + temp, dir_fd=fd)
                raise
            self._sync_folder(fd, prefix)
        return commit_id

    def _read_back(self, folder: int | None, name: str, path: Path, remember: bool, untrusted: bool = False) -> str:
        """The sha256 of the file ``name`` (relative to ``folder``; ``path`` by its full name) just
        written, which is opened as a reader opens it (the reader's error when it would refuse it);
        with ``remember``, its metadata is kept as a commit's. ``untrusted``: bytes this process did not
        make (a remote's), parsed with the repository's isolation (§8.5)."""
        fd, before = open_regular(name, follow_links=False, dir_fd=folder)
        try:
            commit_id = _sha256_of(fd, before.st_size)
            assert commit_id is not None  # written and synced by this process, under the lock
            with open_diff(reopenable(fd, path), isolation=self.isolation if untrusted else None,
                           commit_id=commit_id) as diff:
                if remember:
                    self._remember(commit_id, diff)
            return commit_id
        finally:
            os.close(fd)


class _SealedWriter(DiffWriter):
    """A DiffWriter whose commit metadata is completed once the updates are written: a commit's
    `state_sha256` (§4.2) names the state its updates make. The metadata is written first with a
    placeholder of the same length and rewritten where it lies (the file's bytes stay deterministic),
    and the file says the version that has the member (§3.3)."""

    def __init__(self, path, commit: Commit, compression: str):
        super().__init__(path, commit, compression)
        self._minor = max(self._minor, commit.minor_version)

    def seal(self, commit: Commit) -> None:
        overwrite_string(self._file, ATTR_COMMIT, commit.to_attribute())  # ValueError if the length differs
        self._minor = max(self._minor, commit.minor_version)
