"""SPEC.md §13.1–§13.3, §13.6: a repository's folder — commit files named by their sha256, branches,
HEAD, the writers' lock — and nothing about what the commits mean.

Every write is atomic (temporary file, fsync, rename) and every change of the repository happens
under one exclusive lock, so a process killed at any moment leaves the repository as it was
before or as it is after, and two writers never interleave.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format.commit import Commit
from mdiff.format.reader import DiffFile, open_diff
from mdiff.atomic import TEMP_SUFFIX, create_temp_file, fsync_directory, write_text
from mdiff.format.writer import DiffWriter

REPO_DIR = ".mdiff"
FORMAT_LINE = "mdiff-repository 1\n"
COMMIT_ID = re.compile(r"[0-9a-f]{64}")
_ID_LINE = re.compile(r"[0-9a-f]{64}\n")  # a ref or detached HEAD: the id and one newline, nothing else (§13.1)
BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def valid_branch(name: str) -> bool:
    return bool(BRANCH_NAME.fullmatch(name)) and ".." not in name and not name.endswith(".lock")


@dataclass(frozen=True)
class CommitFacts:
    """What a commit's metadata says, kept by id (a commit's content never changes)."""

    commit: Commit  # its metadata
    parents: tuple[str, ...]
    declared_bytes: int  # of its updates' datasets
    inexact: dict[str, bool]  # name → whether the update leaves the value inexact (§13.4)


class Store:
    """The folder ``.mdiff/`` of a repository (SPEC.md §13.1)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / REPO_DIR
        self._facts: dict[str, CommitFacts] = {}
        self._inexact: dict[str, frozenset[str]] = {}  # by commit id: the inexact values of its state (§13.4)
        self._verified: dict[str, tuple[int, ...]] = {}  # by commit id: the file's stat when its bytes hashed to it

    @classmethod
    def create(cls, root: Path, branch: str) -> None:
        """Make ``root/.mdiff`` with an empty ``branch``, atomically."""
        if not valid_branch(branch):
            raise RepositoryError("MD801", f"{branch!r} is not a valid branch name")
        directory = Path(root) / REPO_DIR
        if directory.exists():
            raise RepositoryError("MD801", f"{directory} already exists; it is a repository already")
        Path(root).mkdir(parents=True, exist_ok=True)
        staging = Path(root) / f".mdiff-init.{secrets.token_hex(8)}{TEMP_SUFFIX}"
        staging.mkdir(0o777)  # the umask decides, as for any folder
        for sub in ("commits", "snapshots", "refs/heads"):
            (staging / sub).mkdir(parents=True)
        (staging / "format").write_text(FORMAT_LINE, encoding="utf-8")
        (staging / "HEAD").write_text(f"ref: refs/heads/{branch}\n", encoding="utf-8")
        os.replace(staging, directory)  # the repository appears whole or not at all
        fsync_directory(Path(root).resolve())

    @staticmethod
    def locate(start) -> Path:
        """The folder holding ``.mdiff/`` that contains ``start`` (searching upwards, like git)."""
        here = Path(start).resolve()
        for candidate in (here, *here.parents):
            if (candidate / REPO_DIR / "format").is_file():
                return candidate
        raise RepositoryError("MD801", f"no mdiff repository in {here} or its parents; run `mdiff init`")

    def check_format(self) -> None:
        if (self.dir / "format").read_text(encoding="utf-8") != FORMAT_LINE:
            raise RepositoryError("MD801", f"{self.dir / 'format'} does not say {FORMAT_LINE.strip()!r}")

    # ------------------------------------------------------------ locking
    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[None]:
        """The one writer lock (§13.6: an exclusive flock on .mdiff/lock, where the platform has flock);
        ``wait=False`` refuses at once (MD803) if another process holds it."""
        from filelock import FileLock, Timeout

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
        text = (self.dir / "HEAD").read_text(encoding="utf-8")
        m = re.fullmatch(r"ref: refs/heads/(\S+)\n", text)
        if m and valid_branch(m.group(1)):
            return m.group(1), self.branch_target(m.group(1))
        if _ID_LINE.fullmatch(text):
            return None, self._existing(text[:-1], "HEAD")
        raise RepositoryError("MD801", f"HEAD is malformed: {text[:80]!r}")

    def branches(self) -> dict[str, str | None]:
        heads = self.dir / "refs" / "heads"
        found = {}
        for path in sorted(heads.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                name = path.relative_to(heads).as_posix()
                found[name] = self.branch_target(name)
        return found

    def branch_target(self, branch: str) -> str | None:
        path = self.dir / "refs" / "heads" / branch
        if not path.exists():
            return None
        text = path.read_text(encoding="utf-8")
        if not _ID_LINE.fullmatch(text):
            raise RepositoryError("MD801", f"ref {branch!r} is malformed: {text[:80]!r}")
        return self._existing(text[:-1], f"branch {branch!r}")

    def _existing(self, commit_id: str, what: str) -> str:
        if not self.commit_path(commit_id).exists():
            raise RepositoryError("MD801", f"{what} names commit {commit_id[:12]}, which is not in the repository")
        return commit_id

    def set_branch(self, branch: str, commit_id: str) -> None:
        if not valid_branch(branch):
            raise RepositoryError("MD801", f"{branch!r} is not a valid branch name")
        path = self.dir / "refs" / "heads" / branch
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, commit_id + "\n")

    def set_head(self, branch: str | None = None, commit_id: str | None = None) -> None:
        write_text(self.dir / "HEAD", f"ref: refs/heads/{branch}\n" if branch else f"{commit_id}\n")

    def advance(self, branch: str | None, commit_id: str) -> None:
        """Move the current branch — or a detached HEAD — to ``commit_id`` (after a commit)."""
        if branch:
            self.set_branch(branch, commit_id)
        else:
            self.set_head(commit_id=commit_id)

    def delete_branch(self, branch: str) -> None:
        if not valid_branch(branch):
            raise RepositoryError("MD801", f"{branch!r} is not a valid branch name")
        if self.head()[0] == branch:
            raise RepositoryError("MD801", f"cannot delete {branch!r}: it is the current branch")
        path = self.dir / "refs" / "heads" / branch
        if not path.is_file():
            raise RepositoryError("MD801", f"no branch {branch!r}")
        path.unlink()
        fsync_directory(path.parent)

    # ------------------------------------------------------------ commit files
    def commit_path(self, commit_id: str) -> Path:
        return self.dir / "commits" / f"{commit_id}.mdiff"

    def snapshot_path(self, commit_id: str) -> Path:
        return self.dir / "snapshots" / f"{commit_id}.mdiff"

    def commit_ids(self) -> list[str]:
        return sorted(p.stem for p in (self.dir / "commits").glob("*.mdiff") if COMMIT_ID.fullmatch(p.stem))

    def metadata(self, commit_id: str) -> Commit:
        return self.commit_facts(commit_id).commit

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.commit_facts(commit_id).parents

    def commit_facts(self, commit_id: str) -> CommitFacts:
        self._existing(commit_id, "a commit's parent list")  # even when known: the file may have gone since
        if commit_id not in self._facts:
            with open_diff(self.commit_path(commit_id)) as diff:
                self._remember(commit_id, diff)
        return self._facts[commit_id]

    def _remember(self, commit_id: str, diff: DiffFile) -> None:
        self._facts[commit_id] = CommitFacts(
            diff.commit, diff.commit.parents, sum(diff[name].stored_bytes for name in diff),
            {name: diff[name].type != "delete" and not diff[name].update_type.carries_sha256 for name in diff},
        )

    def remember_inexact(self, commit_id: str, names: frozenset[str]) -> None:
        self._inexact[commit_id] = names

    def store(self, write: Callable[[DiffWriter], None], commit: Commit, compression: str = "gzip",
              directory: str = "commits") -> str:
        """Write a commit file with ``write``; file it under its sha256; return that id.

        The file is complete and synced before it gets its name, so a crash leaves at most
        a stray temporary file, never a partial commit.
        """
        target_dir = self.dir / directory
        tmp, fd = create_temp_file(target_dir, "commit.mdiff")
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            with DiffWriter(tmp_path, commit, compression) as writer:
                write(writer)
            commit_id = file_sha256(tmp_path)
            os.replace(tmp_path, target_dir / f"{commit_id}.mdiff")
        except BaseException:
            tmp_path.unlink(missing_ok=True)
            raise
        fsync_directory(target_dir)
        return commit_id

    def verify(self, commit_id: str) -> None:
        """MD800: the commit file's bytes still hash to its name (MD801 when there is no such file)."""
        self._existing(commit_id, "a commit's parent list")
        # Every checkout walks to the root (§13.5): hash a file again only once it may have changed
        # (a write, a rename or a utime changes its ctime, which no user can set). As git's index
        # does, a stamp younger than the clock's coarse granularity proves nothing: not kept.
        st = os.stat(self.commit_path(commit_id))
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if self._verified.get(commit_id) == stamp:
            return
        got = file_sha256(self.commit_path(commit_id))
        if got != commit_id:
            raise RepositoryError("MD800", f"commit file {commit_id[:12]} is corrupt: its bytes hash to {got[:12]}")
        if time.time_ns() - st.st_ctime_ns > 2_000_000_000:
            self._verified[commit_id] = stamp

    def open_commit(self, commit_id: str) -> DiffFile:
        """The commit file, opened (MD802 when it breaks a rule of the format)."""
        try:
            diff = open_diff(self.commit_path(commit_id))
        except InvalidFileError as exc:
            raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: {exc}") from exc
        self._remember(commit_id, diff)
        return diff
