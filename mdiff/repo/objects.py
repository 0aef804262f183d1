"""SPEC.md §13.1–§13.2, §13.5: commit files named by their sha256, and snapshots.

A commit is parsed only from the bytes that were hashed (§13.2): its file is opened once, hashed
through that descriptor, and read by libhdf5 through the same descriptor (``/proc/self/fd/N``). A
commit is filed under its name only once it is complete, synced and read back as its readers will
read it, so a crash leaves at most a stray temporary file, never a partial commit.

A commit's metadata alone (its parents, message, author, date: what a log shows) comes from the user's
cache (format/walk_cache.py) when a reader of this code found the file good before and the file, hashed
now, holds the kept metadata's very bytes where the entry says: then nothing of libhdf5, numpy or the
isolated child is loaded. The module imports them on first use for that reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from mdiff import block_ids
from mdiff.atomic import TEMP_SUFFIX, naming
from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.format.walk_cache import WalkCache
from mdiff.isolation import Isolation, isolation_supported
from mdiff.hdf5walk.positional_io import pread
from mdiff.regular_files import open_regular, reopenable, same_file
from mdiff.repo.folder import RepositoryFolder, create_exclusive, removed_on_failure, rename_in, write_all
from mdiff.repo.names import COMMIT_ID, FORMAT_LINES, format_of, shown

if TYPE_CHECKING:  # each imported where it is used: a log of commits seen before needs none of them
    from mdiff.format.commit import Commit
    from mdiff.format.reader import DiffFile
    from mdiff.repo.held_files import HeldFiles
    from mdiff.format.writer import DiffWriter
    from mdiff.validation import Summary

_HASH_BLOCK = 1 << 20
# where a commit's `commit` attribute is looked for to keep its metadata (the root object's header: the
# reference writes it within the first kilobyte); one found nowhere in these bytes is not kept
_METADATA_SEARCH_BYTES = 1 << 20


def what_is(directory: str) -> str:
    """What a file of ``commits/`` or ``snapshots/`` is, in words."""
    return "commit file" if directory == "commits" else "snapshot"


def id_of(fd: int, size: int, repository_format: int) -> str | None:
    """The id of the first ``size`` bytes of ``fd`` in a repository of that format (§4.3): the SHA-256 of the
    bytes (format 1), of the block list (format 2, hashed on every core); None if the file ends sooner."""
    if repository_format == 1:
        return _sha256_of(fd, size)
    blocks = block_ids.of_fd(fd, size)
    return blocks.commit_id if blocks is not None else None


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


@dataclass(frozen=True)
class CommitFacts:
    """What a commit's metadata says, kept by id (a commit's content never changes)."""

    commit: Commit  # its metadata
    parents: tuple[str, ...]
    declared_bytes: int  # of its updates' datasets
    inexact: dict[str, bool]  # name → whether the update leaves the value inexact (§13.4)


class CommitFiles(RepositoryFolder):
    """``commits/`` and ``snapshots/``: files written, received, verified and opened; each commit's metadata
    kept by id once read (a commit's content never changes)."""

    def __init__(self, root: Path, isolation: Isolation | None | str = "auto"):
        """``isolation``: how commit and snapshot files are parsed (SPEC §8.5) — by an isolated child, with
        these limits, so that a crafted file from a clone or a remote cannot crash or hang this process
        ("auto": the default limits where the platform can isolate, POSIX); None parses them here."""
        super().__init__(root)
        self.isolation: Isolation | None = (Isolation() if isolation_supported() else None) if isolation == "auto" \
            else isolation  # type: ignore[assignment]
        self._facts: dict[str, CommitFacts] = {}
        # by commit id: the identity and times of the file whose bytes this process hashed to that id (§13.2)
        self._verified: dict[str, os.stat_result] = {}
        self._inexact: dict[str, frozenset[str]] = {}  # by commit id: the inexact values of its state (§13.4)
        self._kept: dict[str, Commit] = {}  # by commit id: metadata from the cache, bound to the verified bytes
        # whether the user's cache of walks and metadata is read and filled (fsck turns it off: its verdicts
        # come from the bytes alone)
        self.use_cache = True
        self._cache: WalkCache | None = None
        self._repository_format: int | None = None
        self._held: HeldFiles | None = None  # commit and snapshot files opened, kept for their next use (held_files.py)

    @property
    def repository_format(self) -> int:
        """1 or 2: which kind of commit ids the repository holds (§4.3, §13.1), read from ``format`` once;
        MD801 when it says neither."""
        if self._repository_format is None:
            text = self._read_small("format")
            version = format_of(text)
            if version is None:
                raise RepositoryError("MD801", f"{self.dir / 'format'} is missing or says no repository format this "
                                               f"mdiff reads ({' or '.join(repr(v.strip()) for v in FORMAT_LINES.values())})")
            self._repository_format = version
        return self._repository_format

    def existing_commit(self, commit_id: str, what: str) -> str:
        if self.kind(f"commits/{commit_id}.mdiff") is None:
            raise RepositoryError("MD801", f"{what} names commit {commit_id[:12]}, which is not in the repository")
        return commit_id

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
        with naming(self.dir / directory, doing=f"{what} {commit_id[:12]} could not be written"), \
                self._folder([directory], create=True) as (fd, prefix):
            out = create_exclusive(fd, prefix, temp)
            with removed_on_failure(fd, prefix, temp), removed_on_failure(fd, prefix, temp + ".blocks"):
                version = self.repository_format if directory == "commits" else 1
                digest = hashlib.sha256() if version == 1 else block_ids.StreamHasher()
                size = 0
                try:
                    for chunk in chunks:
                        size += len(chunk)
                        if size > limit:
                            raise RepositoryError("MD801", f"{what} {commit_id[:12]} is larger than {limit} bytes")
                        digest.update(chunk)
                        write_all(out, chunk)
                    os.fsync(out)
                finally:
                    os.close(out)
                if isinstance(digest, block_ids.StreamHasher):
                    blocks = digest.result()
                    got = blocks.commit_id
                    if got == commit_id:
                        self._write_blocks(fd, prefix, temp + ".blocks", blocks)
                else:
                    got = digest.hexdigest()
                if directory == "commits" and got != commit_id:
                    raise RepositoryError("MD800", f"commit {commit_id[:12]} is corrupt: the {size} bytes received "
                                                   f"hash to {got[:12]}")
                folder = reopenable(fd, self.dir / directory) if fd is not None else prefix
                try:
                    self._read_back(fd, prefix + temp, Path(folder) / temp, directory == "commits", untrusted=True,
                                    known=commit_id if directory == "commits" else None)
                except InvalidFileError as exc:
                    code = "MD802" if directory == "commits" else "MD801"
                    raise RepositoryError(code, f"{what} {commit_id[:12]} is no valid mdiff file: "
                                                f"{exc.code}: {exc.message}") from exc
        return temp

    def file_received(self, temp: str, commit_id: str, directory: str = "commits") -> None:
        """Give the temporary file ``temp`` (from :meth:`receive_commit`) its name: ``<commit_id>.mdiff``."""
        with self._folder([directory]) as (fd, prefix):
            if directory == "commits" and self.kind(f"commits/{temp}.blocks") is not None:
                rename_in(fd, prefix, temp + ".blocks", f"{commit_id}.blocks")  # first: a commit comes with its list
            rename_in(fd, prefix, temp, f"{commit_id}.mdiff")
            self._sync_folder(fd, prefix)

    def received_parents(self, commit_id: str) -> tuple[str, ...]:
        """The parents of a commit :meth:`receive_commit` verified (before it is filed)."""
        return self._facts[commit_id].parents

    def discard_received(self, temp: str, directory: str = "commits") -> None:
        for name in (temp, temp + ".blocks"):
            with contextlib.suppress(FileNotFoundError):
                with self._folder([directory]) as (fd, prefix):
                    os.unlink(prefix + name, dir_fd=fd)

    @staticmethod
    def _write_blocks(fd: int | None, prefix: str, name: str, blocks: block_ids.BlockList) -> None:
        """The block list ``blocks`` as the new file ``name`` of the folder (written and synced)."""
        out = create_exclusive(fd, prefix, name)
        try:
            write_all(out, blocks.encoded())
            os.fsync(out)
        finally:
            os.close(out)

    def blocks_path(self, commit_id: str) -> Path:
        return self.dir / "commits" / f"{commit_id}.blocks"

    def commit_blocks(self, commit_id: str) -> bytes:
        """The block list of a commit of a format-2 repository (§13.1: ``commits/<id>.blocks``), verified
        against the id (MD800): the file's when it is there and verifies, else made from the commit file,
        verified whole (MD800), and written for the next reader (under the lock: see :meth:`keep_blocks`)."""
        length = os.stat(self.commit_path(commit_id), follow_symlinks=False).st_size
        if self.kind(f"commits/{commit_id}.blocks") == "a regular file":
            fd, _ = self._open_file(f"commits/{commit_id}.blocks")
            try:
                data = pread(fd, block_ids.list_size(length) + 1, 0)
            finally:
                os.close(fd)
            with contextlib.suppress(RepositoryError):
                return block_ids.parse(data, commit_id, str(self.blocks_path(commit_id))).encoded()
        with self._verified_commit(commit_id) as (fd, _):
            blocks = block_ids.of_fd(fd, os.fstat(fd).st_size, keep_leaves=True)
        if blocks is None or blocks.commit_id != commit_id:
            raise RepositoryError("MD800", f"commit file {commit_id[:12]} changed while it was read")
        return blocks.encoded()

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
        """The commit's metadata (§4), from its verified file (MD800): from the file's kept metadata where
        the cache has it for these very bytes, else by opening the file (commit_facts)."""
        self.existing_commit(commit_id, "a commit's parent list")  # even when known: the file may have gone since
        facts = self._facts.get(commit_id)
        if facts is not None:
            return facts.commit
        kept = self._kept.get(commit_id) if self.use_cache else None
        if kept is None and self.use_cache:
            kept = self._kept_metadata(commit_id)
        return kept if kept is not None else self.commit_facts(commit_id).commit

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.metadata(commit_id).parents

    def walk_cache(self) -> WalkCache:
        """The user's cache of walks and metadata, looked up once per object; none while use_cache is off."""
        if not self.use_cache:
            return WalkCache(None)
        if self._cache is None:
            self._cache = WalkCache.default()
        return self._cache

    def _kept_metadata(self, commit_id: str) -> Commit | None:
        """The commit's metadata as the cache keeps it, once the commit file is verified (MD800) and holds
        the kept text's bytes at the kept offset; None when there is no such entry (it is then made anew
        when the file is opened). A kept text is checked as the file's attribute is (§4.2)."""
        from mdiff.format.commit import parse_attribute

        entry = self.walk_cache().get_metadata(commit_id, DEFAULT_LIMITS)
        if entry is None:
            return None
        text, at = entry
        data = text.encode("utf-8", "surrogatepass")
        with self._verified_commit(commit_id) as (fd, _):
            if pread(fd, len(data), at) != data:
                return None  # not these bytes' metadata: whoever wrote the entry, it is not believed
        try:
            commit = parse_attribute(text)
        except InvalidFileError:
            return None
        self._kept[commit_id] = commit
        return commit

    def _keep_metadata(self, commit_id: str, fd: int, commit: Commit) -> None:
        """Keep the metadata of the commit file open at ``fd`` (its bytes verified against ``commit_id`` and
        found good under the default limits), with where its bytes lie in the file."""
        cache = self.walk_cache()
        if cache.folder is None:
            return
        from mdiff.format import canonical_json

        text = canonical_json.dumps(commit.to_json())
        at = pread(fd, min(os.fstat(fd).st_size, _METADATA_SEARCH_BYTES), 0).find(text.encode("utf-8"))
        if at >= 0:  # else: an attribute written otherwise than the reference writes it; not kept
            cache.put_metadata(commit_id, DEFAULT_LIMITS, text, at)

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

    def remember_summary(self, commit_id: str, summary: Summary) -> None:
        """What :meth:`_remember` keeps, from what a validator found the commit's verified file to say."""
        self._facts[commit_id] = CommitFacts(
            summary.commit, summary.commit.parents, sum(u.stored_bytes for u in summary.parameters.values()),
            {name: u.type != "delete" and not u.carries_sha256 for name, u in summary.parameters.items()},
        )

    def remember_inexact(self, commit_id: str, names: frozenset[str]) -> None:
        self._inexact[commit_id] = names

    @contextlib.contextmanager
    def commit_file(self, commit_id: str) -> Iterator[str]:
        """A name to read the commit file of ``commit_id`` by, whose bytes hash to the id (§13.2: MD800
        otherwise; MD801 when there is no such regular file). The file is opened once and hashed
        through that descriptor, and the name given reopens that descriptor, so what is read is what
        was hashed even if the file is replaced meanwhile; a file changed in place while it is hashed
        or read (its size, modification or change time moved) is refused (MD800) when the block ends.

        A file this process has hashed already is not hashed again while it is the same file with the same
        size, modification and change time (what §13.2 calls unchanged: any write moves both times, and
        no process can set a change time): a repository's walks reopen the commits of one history often."""
        with self._verified_commit(commit_id) as (_, readable):
            yield readable

    @contextlib.contextmanager
    def _verified_commit(self, commit_id: str) -> Iterator[tuple[int, str]]:
        """:meth:`commit_file`, with the descriptor its bytes were hashed through."""
        relative = f"commits/{commit_id}.mdiff"
        try:
            fd, before = self._open_file(relative)
        except FileNotFoundError:
            raise RepositoryError("MD801", f"commit {commit_id[:12]} is not in the repository") from None
        try:
            known = self._verified.get(commit_id)
            if known is None or not same_file(known, before):  # else: the very file hashed before, unchanged
                got = id_of(fd, before.st_size, self.repository_format)
                if got != commit_id:
                    self._check_unchanged(fd, before, commit_id)
                    raise RepositoryError("MD800", f"commit file {commit_id[:12]} is corrupt: its bytes hash to "
                                                   f"{(got or 'nothing (it ended early)')[:12]}")
                self._check_unchanged(fd, before, commit_id)
                self._verified[commit_id] = before
            path = self.commit_path(commit_id)
            readable = reopenable(fd, path)
            yield fd, readable
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
        from mdiff.format.reader import open_diff

        diff: DiffFile | None = None
        try:
            with self._verified_commit(commit_id) as (fd, readable):
                status = os.fstat(fd)
                if self.use_cache:  # the file opened before in this process, kept while it is that file, unchanged
                    diff = self._held_files().get(("commits", commit_id), status)
                    if diff is not None:
                        if commit_id not in self._facts:
                            self._remember(commit_id, diff)
                        return diff
                try:
                    diff = open_diff(readable, isolation=self.isolation, commit_id=commit_id if self.use_cache else None)
                except InvalidFileError as exc:
                    where = f" [{exc.path}]" if exc.path and exc.path != readable else ""
                    raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: "
                                                   f"{exc.code}: {exc.message}{where}") from exc
                diff.path = os.fspath(self.commit_path(commit_id))
                if commit_id not in self._facts:
                    self._keep_metadata(commit_id, fd, diff.commit)
        except BaseException:
            if diff is not None:
                diff.close()
            raise
        self._remember(commit_id, diff)
        return self._held_files().put(("commits", commit_id), diff, status) if self.use_cache else diff

    def let_go_files(self) -> None:
        """Close the commit and snapshot files kept open for their next use (each once its last use ends): after
        files are removed, so that their space is freed now."""
        if self._held is not None:
            self._held.clear()

    def _held_files(self) -> HeldFiles:
        if self._held is None:
            from mdiff.repo.held_files import HeldFiles

            self._held = HeldFiles()
        return self._held

    def open_snapshot(self, commit_id: str) -> DiffFile:
        """snapshots/<commit_id>.mdiff, opened as §13.1 says (no link followed, without blocking, a
        regular file) — InvalidFileError (MD100) otherwise: an unusable snapshot (§13.5)."""
        from mdiff.format.reader import open_diff

        path = self.snapshot_path(commit_id)
        try:
            fd, status = self._open_file(f"snapshots/{commit_id}.mdiff")
        except RepositoryError as exc:
            raise InvalidFileError("MD100", f"unusable snapshot: {exc.message}", os.fspath(path)) from None
        try:
            kept = self._held_files().get(("snapshots", commit_id), status) if self.use_cache else None
            if kept is not None:  # the very file opened before in this process, unchanged
                return kept
            diff = open_diff(reopenable(fd, path), isolation=self.isolation)
        finally:
            os.close(fd)
        diff.path = os.fspath(path)
        return self._held_files().put(("snapshots", commit_id), diff, status) if self.use_cache else diff

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
        from mdiff.format.writer import SealedWriter

        with self._folder([directory]) as (fd, prefix):
            folder = reopenable(fd, self.dir / directory) if fd is not None else prefix
            temp = f".commit.mdiff.{secrets.token_hex(8)}{TEMP_SUFFIX}"
            # an error names the repository's folder, never the temporary file or the descriptor's /proc path
            with naming(self.dir / directory, folder, f"a new {what_is(directory)} could not be written"):
                os.close(create_exclusive(fd, prefix, temp))  # the name is ours; libhdf5 writes it by name
                with removed_on_failure(fd, prefix, temp):
                    sealed = SealedWriter(os.path.join(folder, temp), commit, compression)
                    with sealed as writer:
                        write(writer)
                        if seal is not None:
                            sealed.seal(seal())
                    with removed_on_failure(fd, prefix, temp + ".blocks"):
                        hashed: list[os.stat_result] = []
                        commit_id = self._read_back(fd, prefix + temp, self.dir / directory / temp,
                                                    directory == "commits", blocks_to=(fd, prefix, temp + ".blocks"),
                                                    hashed=hashed)
                        if directory == "commits" and self.repository_format == 2:
                            rename_in(fd, prefix, temp + ".blocks", f"{commit_id}.blocks")
                    rename_in(fd, prefix, temp, f"{commit_id}.mdiff")
                    if directory == "commits":
                        self._verified_as_written(fd, prefix, commit_id, hashed[0])
            self._sync_folder(fd, prefix)
        return commit_id

    def _verified_as_written(self, fd: int | None, prefix: str, commit_id: str, hashed: os.stat_result) -> None:
        """The commit file this process just wrote, hashed to ``commit_id`` (its status then ``hashed``) and renamed
        to its name under the lock, is taken as verified while it stays as it is now — not hashed again by this
        process's next read of it (the commit's own state, opened to decide on a snapshot: the file's bytes once
        more). Its rename moved only its change time; a file whose inode, size or modification time moved since
        it was hashed is not taken, and is hashed as any other."""
        try:
            now = os.stat(prefix + f"{commit_id}.mdiff", dir_fd=fd, follow_symlinks=False)
        except OSError:
            return
        if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == \
                (hashed.st_dev, hashed.st_ino, hashed.st_size, hashed.st_mtime_ns):
            self._verified[commit_id] = now

    def _read_back(self, folder: int | None, name: str, path: Path, remember: bool, untrusted: bool = False,
                   blocks_to: tuple[int | None, str, str] | None = None, known: str | None = None,
                   hashed: list[os.stat_result] | None = None) -> str:
        """The sha256 of the file ``name`` (relative to ``folder``; ``path`` by its full name) just
        written, which is opened as a reader opens it (the reader's error when it would refuse it);
        with ``remember``, its metadata is kept as a commit's. ``untrusted``: bytes this process did not
        make (a remote's), parsed with the repository's isolation (§8.5). ``blocks_to``: (folder, prefix,
        name) where a commit of a format-2 repository gets its block list written. ``known``: the id, verified
        as the bytes arrived (not hashed again). ``hashed``: a list the file's status, as it was hashed, is appended to."""
        from mdiff.format.reader import open_diff

        fd, before = open_regular(name, follow_links=False, dir_fd=folder)
        if hashed is not None:
            hashed.append(before)
        try:
            if known is not None:
                commit_id = known
            elif remember and self.repository_format == 2:
                blocks = block_ids.of_fd(fd, before.st_size, keep_leaves=True)
                assert blocks is not None  # written and synced by this process, under the lock
                commit_id = blocks.commit_id
                if blocks_to is not None:
                    self._write_blocks(*blocks_to[:2], blocks_to[2], blocks)
            else:
                got = _sha256_of(fd, before.st_size)
                assert got is not None  # written and synced by this process, under the lock
                commit_id = got
            with open_diff(reopenable(fd, path), isolation=self.isolation if untrusted else None,
                           commit_id=commit_id if self.use_cache else None) as diff:
                if remember:
                    self._remember(commit_id, diff)
                    self._keep_metadata(commit_id, fd, diff.commit)
            return commit_id
        finally:
            os.close(fd)

