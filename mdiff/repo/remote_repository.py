"""SPEC.md §13.9: a repository at a URL read in place — nothing cloned or fetched whole.

A revision is resolved against the remote's refs (§13.3); each commit of its first-parent line is then read
by byte ranges (ranged_file.py): its metadata when the walk reaches it, a parameter's data when that
parameter is read. Reading one parameter of a large commit moves about that parameter's stored bytes.
What is read is verified against the commit's id before anything parses it (§13.2, §13.9): in a format-2
repository leaf by leaf, through the commit's block list (``commits/<id>.blocks``), whose head hashes to the
id; in a format-1 repository, whose ids vouch only for whole files, each commit file is downloaded whole
and hashed first (one warning says so). A branch or tag resolved on the remote is trusted as far as the
remote is; a full id means those bytes. Every exact value is checked against its sha256 too (§13.4), and
the file as a stranger's (§8). Nothing read here is kept: no file, and no walk in the walk cache.
libhdf5 reads in this process, as ``mdiff.open`` does; a fetch, then a local checkout, reads each commit
in an isolated child (§8.5).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format.commit import Commit
from mdiff.format.reader import DiffFile
from mdiff.progress import Progress
from mdiff.ranged_file import BlockMismatch, LeafVerifier, RangedFile, RangeReadError, no_collection
from mdiff.repo.objects import id_of
from mdiff.repo.remote_ends import MAX_COMMIT_FILE_BYTES
from mdiff.repo.remotes import open_end
from mdiff.repo.states import StateView
from mdiff.repo.history import resolve_on_remote

log = logging.getLogger(__name__)


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
        self.repository_format = self._end.check_format()
        self._warned = False
        self._sizes = self._end.commit_sizes()
        self._snapshot_sizes: dict[str, int] | None = None
        self._commits: dict[str, Commit] = {}
        self._opened: list[RangedFile] = []
        self._spooling = False  # while a full checkout reads the files it opens whole: they are spooled

    @property
    def requests(self) -> int:
        return sum(file.requests + (file.verifier.requests if file.verifier else 0) for file in self._opened)

    @property
    def bytes_read(self) -> int:
        """Bytes of the remote's commit files and their block lists read so far."""
        return sum(file.bytes_fetched + (file.verifier.bytes_fetched if file.verifier else 0) for file in self._opened)

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
        self._opened.append(ranged)
        if directory == "commits":
            self._guard(ranged, commit_id)
        if self._spooling:
            ranged.spool()
        try:
            return DiffFile(ranged)  # which reads a remote file's metadata with no garbage collected meanwhile
        except RangeReadError as exc:
            raise RepositoryError(exc.code, str(exc)) from None

    def _guard(self, ranged: RangedFile, commit_id: str) -> None:
        """Have ``ranged`` serve only bytes verified against ``commit_id`` (§13.2, §13.9): leaf by leaf through
        the commit's block list (format 2); else — a format-1 repository, or a commit without a block list —
        downloaded whole and hashed before anything of it is read (MD800 when it is not the commit's)."""
        version = self.repository_format

        def check_whole(fd: int, size: int) -> None:
            got = id_of(fd, size, version)
            if got != commit_id:
                raise BlockMismatch(f"{ranged.name}: the bytes served hash to {(got or 'nothing')[:12]}, not to "
                                    f"commit {commit_id[:12]}")

        ranged.check_whole = check_whole
        if version == 2:
            reader = self._end.blocks_reader(commit_id)
            if reader is not None:
                try:
                    ranged.verifier = LeafVerifier(commit_id, ranged.size, reader, ranged.name)
                    return
                except FileNotFoundError:
                    pass  # no block list there: verified whole, below
                except RangeReadError as exc:  # BlockMismatch (MD800): it lists another size than the id says
                    raise RepositoryError(exc.code, str(exc)) from None
                except RepositoryError:
                    raise
                except Exception as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                    raise RepositoryError("MD801", f"{ranged.name}: its block list cannot be read ({reason})") from None
        if not self._warned:
            self._warned = True
            log.warning("%s: %s, so each commit read is downloaded whole and verified before it is used",
                        self.url, "its commit ids (format 1) vouch only for whole files" if version == 1 else
                        f"commit {commit_id[:12]} has no block list there")
        ranged.spool()

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
                raise RepositoryError(failure.code, str(failure)) from exc
            raise


class _StateInPlace(StateView):
    """A state read in place: a failure of the remote's store is MD801, not the file's error it shows as."""

    repo: RemoteRepository

    def read(self, name: str) -> np.ndarray:
        with self.repo.served():
            return super().read(name)
