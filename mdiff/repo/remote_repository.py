"""SPEC.md §13.9: a repository at a URL read in place — nothing cloned or fetched whole.

A revision is resolved against the remote's refs (§13.3); each commit of its first-parent line is then read
by byte ranges (ranged_file.py): its metadata when the walk reaches it, a parameter's data when that
parameter is read. Reading one parameter of a large commit moves about that parameter's stored bytes.
What is read is never checked against a commit's id, which vouches only for a whole file (§13.2): it is
trusted as far as the remote's refs are, checked as a stranger's file (§8), and every exact value is
checked against its sha256 (§13.4). Nothing read here is kept: no file, and no walk in the walk cache.
libhdf5 reads in this process, as ``mdiff.open`` does; a fetch, then a local checkout, reads each commit
in an isolated child (§8.5).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format.commit import Commit
from mdiff.format.reader import DiffFile
from mdiff.progress import Progress
from mdiff.ranged_file import RangedFile, RangeReadError, no_collection
from mdiff.repo.remote_ends import MAX_COMMIT_FILE_BYTES
from mdiff.repo.remotes import open_end
from mdiff.repo.states import StateView
from mdiff.repo.history import resolve_on_remote


class RemoteRepository:
    """The repository at ``url`` (an fsspec URL: a local folder, ``file://``, ``s3://bucket/prefix``, …;
    ``storage_options`` for its filesystem, as for a remote), read in place and read-only::

        remote = mdiff.Repository.open("s3://models/bert")
        with remote.open_state(remote.resolve("main")) as state:
            value = state.read("encoder.layer.0.attention.self.query.weight")

    ``requests`` and ``bytes_read`` count what moved from the remote's commit files so far."""

    def __init__(self, url: str, storage_options: dict | None = None):
        self.url = url
        self._end = open_end(url, storage_options)
        self._end.check_format()
        self._sizes = self._end.commit_sizes()
        self._snapshot_sizes: dict[str, int] | None = None
        self._commits: dict[str, Commit] = {}
        self._opened: list[RangedFile] = []
        self._spooling = False  # while a full checkout reads the files it opens whole: they are spooled

    @property
    def requests(self) -> int:
        return sum(file.requests for file in self._opened)

    @property
    def bytes_read(self) -> int:
        return sum(file.bytes_fetched for file in self._opened)

    # ------------------------------------------------------------ revisions and commits
    def resolve(self, rev: str = "HEAD") -> str:
        """The commit ``rev`` names on the remote (§13.3), MD801 when none."""
        return resolve_on_remote(self._end, rev, self._sizes, self.parents)

    def metadata(self, commit_id: str) -> Commit:
        if commit_id not in self._commits:
            self.open_commit(commit_id).close()
        return self._commits[commit_id]

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.metadata(commit_id).parents

    def open_commit(self, commit_id: str) -> DiffFile:
        """The commit file, read in place: its metadata checked whole (every update's, as a checkout plans
        them), its data when read. MD801 when the remote does not list it (or lists more bytes than any
        commit may hold) or fails to serve it; MD802 when it breaks a rule of the format."""
        size = self._sizes.get(commit_id)
        if size is None or size > MAX_COMMIT_FILE_BYTES:
            raise RepositoryError("MD801", f"{self.url}: commit {commit_id[:12]} is missing there")
        try:
            diff = self._open(commit_id, size, "commits")
        except InvalidFileError as exc:
            raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: {exc.code}: {exc.message}") \
                from exc
        self._commits[commit_id] = diff.commit
        return diff

    def has_snapshot(self, commit_id: str) -> bool:
        if self._snapshot_sizes is None:
            self._snapshot_sizes = self._end.commit_sizes("snapshots")
        return commit_id in self._snapshot_sizes

    def open_snapshot(self, commit_id: str) -> DiffFile:
        """The snapshot of the commit, read in place; InvalidFileError when unusable (§13.5)."""
        size = self._snapshot_sizes.get(commit_id) if self._snapshot_sizes is not None else None
        if size is None or size > MAX_COMMIT_FILE_BYTES:
            raise InvalidFileError("MD100", "unusable snapshot: not listed, or larger than any commit",
                                   f"{self.url} snapshots/{commit_id[:12]}")
        try:
            return self._open(commit_id, size, "snapshots")
        except RepositoryError as exc:
            raise InvalidFileError("MD100", f"unusable snapshot: {exc.message}",
                                   f"{self.url} snapshots/{commit_id[:12]}") from None

    def _open(self, commit_id: str, size: int, directory: str) -> DiffFile:
        ranged = self._end.ranged(commit_id, size, directory)
        if self._spooling:
            ranged.spool()
        self._opened.append(ranged)
        try:
            return DiffFile(ranged)  # which reads a remote file's metadata with no garbage collected meanwhile
        except RangeReadError as exc:
            raise RepositoryError("MD801", str(exc)) from None

    def remember_inexact(self, commit_id: str, names: frozenset[str]) -> None:
        """Nothing is kept of a remote read in place."""

    # ------------------------------------------------------------ states
    def open_state(self, commit_id: str | None, engine: str | None = None) -> StateView:
        """state(commit_id) (§13.4), read lazily; see :class:`StateView`."""
        with self.served():
            return _StateInPlace(self, commit_id, engine)

    def checkout(self, rev: str = "HEAD", output: str | os.PathLike[str] | None = None,
                 template: str | os.PathLike[str] | None = None, progress: Progress | None = None,
                 engine: str | None = None, *, framework: str = "np", max_shard_size: int | None = None,
                 weights_format: str | None = None, force: bool = False) -> dict[str, Any] | list[str]:
        """As :meth:`Repository.checkout`, read in place: MD801 when the remote fails to serve a range. It
        reads about every byte of the files it opens, so each is downloaded whole, in one request, as it is
        opened (RangedFile.spool: into a private temporary file, removed when done)."""
        commit_id = self.resolve(rev)
        self._spooling = True
        try:
            with self.served(), self.open_state(commit_id, engine) as view:
                return view.write(output, template, progress, framework=framework, max_shard_size=max_shard_size,
                                  weights_format=weights_format, force=force)
        finally:
            self._spooling = False

    @contextlib.contextmanager
    def served(self) -> Iterator[None]:
        """A read error inside libhdf5 surfaces as the file's error (MD513, MD602, …): when the store
        failed meanwhile, it is the store's failure that is raised (MD801). No garbage is collected
        meanwhile (ranged_file.no_collection)."""
        try:
            with no_collection():
                yield
        except Exception as exc:
            failure = next((file.failure for file in self._opened if file.failure is not None), None)
            if failure is not None:
                raise RepositoryError("MD801", str(failure)) from exc
            raise


class _StateInPlace(StateView):
    """A state read in place: a failure of the remote's store is MD801, not the file's error it shows as."""

    repo: RemoteRepository

    def read(self, name: str) -> np.ndarray:
        with self.repo.served():
            return super().read(name)
