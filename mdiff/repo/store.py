"""SPEC.md §13.1–§13.3, §13.6: a repository's folder as one object — commit files (objects.py), refs and
reflogs (refs.py), the writers' lock (lock.py) over the files of ``.mdiff/`` (folder.py) — and how a
repository is made and found (discovery.py); nothing about what the commits mean (states.py, repository.py)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from mdiff.atomic import TEMP_SUFFIX, fsync_directory
from mdiff.errors import RepositoryError
from mdiff.repo import discovery
from mdiff.repo.lock import WriterLock
from mdiff.repo.names import FORMAT, FORMAT_LINES, HEAD_PREFIX, REPO_DIR, format_of
from mdiff.repo.refs import Refs


class Store(Refs, WriterLock):
    """The folder ``.mdiff/`` of a repository (SPEC.md §13.1). ``Store(root, isolation)``: see CommitFiles."""

    @classmethod
    def create(cls, root: Path, branch: str, repository_format: int = FORMAT) -> None:
        """Make ``root/.mdiff`` with an empty ``branch``, atomically; ``repository_format`` says which kind of
        commit ids it holds (§4.3, §13.1: a new repository is of format 2)."""
        cls.check_branch_name(branch)
        if repository_format not in FORMAT_LINES:
            raise RepositoryError("MD801", f"there is no repository format {repository_format} (formats: "
                                           f"{', '.join(map(str, FORMAT_LINES))})")
        directory = Path(root) / REPO_DIR
        if directory.exists():
            raise RepositoryError("MD801", f"{directory} already exists; it is a repository already")
        Path(root).mkdir(parents=True, exist_ok=True)
        staging = Path(root) / f".mdiff-init.{secrets.token_hex(8)}{TEMP_SUFFIX}"
        staging.mkdir(0o777)  # the umask decides, as for any folder
        for sub in ("commits", "snapshots", "refs/heads", "refs/tags"):
            (staging / sub).mkdir(parents=True)
        (staging / "format").write_text(FORMAT_LINES[repository_format], encoding="utf-8")
        (staging / "HEAD").write_text(f"{HEAD_PREFIX}{branch}\n", encoding="utf-8")
        os.replace(staging, directory)  # the repository appears whole or not at all
        fsync_directory(Path(root).resolve())

    @staticmethod
    def locate(start: str | os.PathLike[str]) -> Path:
        """The folder holding ``.mdiff/`` that contains ``start`` (searching upwards, like git, §13.10), if
        this process's user owns it or trusts it (MD809 otherwise)."""
        root = discovery.locate(start)
        discovery.check_owner(root)
        return root

    def check_format(self) -> int:
        """The repository's format (1 or 2: which kind of commit ids it holds, §4.3); MD801 when ``format``
        is missing or says another."""
        text = self._read_small("format")
        if text is None:
            raise RepositoryError("MD801", f"{self.dir / 'format'} is missing")
        version = format_of(text)
        if version is None:
            raise RepositoryError("MD801", f"{self.dir / 'format'} says no repository format this mdiff reads "
                                           f"({' or '.join(repr(line.strip()) for line in FORMAT_LINES.values())})")
        self._repository_format = version
        return version
