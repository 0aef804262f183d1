"""SPEC.md §13.8: the other end of a remote — a repository (§13.1 layout) at an fsspec URL — read within
bounds, written in the order a pusher must keep (commit files, then the ref), its refs moved only by
compare-and-swap.

Two ends: a local folder is a :class:`~mdiff.repo.store.Store` (every read as safe as a local
repository's, refs moved under its flock lock); any other URL is read through fsspec, and its refs move by
S3 conditional writes (``If-None-Match: *`` to create, ``If-Match: <etag>`` to replace) where the store
has them, else under a lock object created exclusively (``.mdiff/push.lock``, fsspec's ``xb`` mode).
Nothing here sees credentials: the filesystem is built from options the caller gives, and no message
shows them (messages name the URL, which :mod:`mdiff.repo.remotes` checks holds none).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import hashlib
import logging
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from mdiff.hdf5walk import positional_io
from mdiff.errors import RepositoryError
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.ranged_file import RangedFile
from mdiff.repo.names import FORMAT, FORMAT_LINES, HEAD_PREFIX, MAX_SMALL_FILE_BYTES, format_of, valid_branch
from mdiff.repo.store import Store

log = logging.getLogger(__name__)

# A commit file declares at most max_total_bytes of data (§8.3); its metadata is bounded too. A remote
# that lists or serves more for one commit is hostile: nothing more is read.
MAX_COMMIT_FILE_BYTES = DEFAULT_LIMITS.max_total_bytes + (1 << 30)
BLOCK = 8 << 20
_COMMIT_FILE = re.compile(r"([0-9a-f]{64})\.mdiff")
_ID_LINE = re.compile(r"[0-9a-f]{64}\n")
REF_FOLDERS = ("refs/heads", "refs/tags")
MAX_REMOTE_REFS = 100_000  # branches and tags one fetch reads (SPEC.md §13.8)


class RefMoved(RepositoryError):
    """The remote's ref no longer names what the pusher saw (another pusher won): MD803."""

    def __init__(self, ref: str, url: str):
        super().__init__("MD803", f"{ref} on {url} moved while this push ran (another pusher was first); "
                                  "`mdiff pull`, then push again")


class NoRepository(RepositoryError):
    """Nothing at the URL says a repository is there (no ``.mdiff/format``): MD801. ``empty``: nothing at all
    is stored there (an empty prefix, a missing or empty folder: a first push makes one); False: other files are;
    None: unknown."""

    def __init__(self, url: str, empty: bool | None = None, missing_folder: bool = False):
        why = (": the folder does not exist" if missing_folder else ": nothing is stored there" if empty
               else " (no .mdiff/format, though other files are there)" if empty is False else " (no .mdiff/format)")
        hint = " (a first `mdiff push` to it creates one)" if empty else ""
        super().__init__("MD801", f"{url} holds no mdiff repository{why}{hint}")
        self.empty = empty


class NoBucket(RepositoryError):
    """The store says the bucket the URL's path starts in does not exist: MD801. A first push creates no
    bucket either: a bucket is the store's, made with its own tools and settings (region, access, billing)."""

    def __init__(self, url: str, bucket: str):
        super().__init__("MD801", f"{url}: there is no bucket {bucket!r}; create it first (a first push creates "
                                  "a repository in a bucket, not the bucket)")


def _no_such_bucket(exc: BaseException) -> bool:
    """Whether the store's own error under ``exc`` is S3's NoSuchBucket (s3fs keeps botocore's as the cause of
    the FileNotFoundError it raises) — said by the store, not guessed: a bucket these credentials may not
    probe still holds what they may read and write."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict) \
                and response["Error"].get("Code") == "NoSuchBucket":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _remote_error(url: str, what: str, exc: BaseException) -> RepositoryError:
    """A failure of the remote's store, named by its kind only (an exception's text may quote a request)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    return RepositoryError("MD801", f"{url}: cannot {what}: {reason}")


class RemoteEnd(abc.ABC):
    """What fetch, push and clone need of the repository at a URL."""

    url: str

    @abc.abstractmethod
    def check_format(self) -> int:
        """The repository's format (1 or 2: which kind of commit ids it holds, §4.3); MD801 unless a
        repository is there ("holds no mdiff repository" when there is none)."""

    @abc.abstractmethod
    def create(self, branch: str, repository_format: int = FORMAT) -> None:
        """An empty repository whose HEAD names ``branch``, unless one is there."""

    @abc.abstractmethod
    def head_branch(self) -> str | None:
        """The branch the remote's HEAD names (None: detached, or not a valid branch)."""

    @abc.abstractmethod
    def refs(self, known: Iterable[str] = ()) -> dict[str, str]:
        """``refs/heads/<b>`` and ``refs/tags/<t>`` → commit id; names that are no valid branch name ignored.
        ``known``: commit ids the caller's refs name (its remote-tracking refs, its tags), which a listing that
        vouches for a ref's bytes may show a ref to hold without reading it (§13.8)."""

    @abc.abstractmethod
    def commit_sizes(self, directory: str = "commits") -> dict[str, int]:
        """Commit id → bytes, of the files of ``commits/`` (or of ``snapshots/``: the commit a snapshot is of)."""

    @abc.abstractmethod
    def read_commit(self, commit_id: str, directory: str = "commits") -> Iterator[bytes]:
        """The bytes the remote serves for the commit (or snapshot): checked by the receiver, never trusted."""

    @abc.abstractmethod
    def ranged(self, commit_id: str, size: int, directory: str = "commits") -> RangedFile:
        """The commit (or snapshot) file as the remote lists it (``size`` bytes), read in place by byte
        ranges (§13.9): what it serves is never checked against the commit's id."""

    @abc.abstractmethod
    def blocks_reader(self, commit_id: str) -> Callable[[int, int], bytes] | None:
        """What serves byte ranges of the commit's block list (``commits/<id>.blocks``, §13.1), None when the
        remote has none for it; never trusted (ranged_file.LeafVerifier checks what it serves)."""

    @abc.abstractmethod
    def write_commit(self, commit_id: str, chunks: Iterable[bytes], size: int, directory: str = "commits",
                     blocks: bytes | None = None) -> None:
        """The commit (or snapshot) file, made visible under its name only once whole — after its block list
        ``blocks`` (format 2), so that every commit listed has one."""

    @abc.abstractmethod
    def update_ref(self, ref: str, old: str | None, new: str) -> None:
        """Make ``ref`` name ``new`` if it still names ``old`` (None: does not exist); RefMoved otherwise."""

    def ensure(self, branch: str, repository_format: int = FORMAT) -> int:
        """A repository there: the one found (checked), else a new one of ``repository_format`` (a first push
        creates it). Returns its format."""
        try:
            return self.check_format()
        except NoRepository:
            log.info("%s holds no repository: creating one", self.url)
            self.create(branch, repository_format)
            return self.check_format()


def _plain_md5(etag: object) -> str | None:
    """The MD5 an object store's ETag may be of the object's bytes: 32 hex digits, in quotes or not (an S3 object
    written in one PUT, unencrypted or with S3's own keys); None for any other (a multipart upload's
    ``<hex>-<parts>``, none). Whether it is that MD5 is checked when the object is read (an SSE-KMS object's
    ETag has this form and is not)."""
    m = re.fullmatch(r'"?([0-9a-fA-F]{32})"?', etag) if isinstance(etag, str) else None
    return m.group(1).lower() if m else None


def _check_ref_count(url: str, count: int) -> None:
    """MD801 when a remote lists more branches and tags than one fetch reads (§13.8), before any is read."""
    if count > MAX_REMOTE_REFS:
        raise RepositoryError("MD801", f"{url}: the remote has {count:,} branches and tags, more than mdiff reads from "
                                       f"one remote ({MAX_REMOTE_REFS:,}); delete refs there, or fetch from a remote "
                                       "that holds fewer")


class LocalEnd(RemoteEnd):
    """A repository in a local folder: the store's own safe reads, its lock for compare-and-swap."""

    def __init__(self, root: Path, url: str):
        self.url = url
        self.store = Store(root)

    def check_format(self) -> int:
        if not os.path.lexists(self.store.dir / "format"):
            if not os.path.isdir(self.store.root):
                raise NoRepository(self.url, True, missing_folder=True)
            raise NoRepository(self.url, not os.listdir(self.store.root))
        return self.store.check_format()

    def create(self, branch: str, repository_format: int = FORMAT) -> None:
        with contextlib.suppress(RepositoryError):  # made meanwhile by another pusher: checked next
            Store.create(self.store.root, branch, repository_format)

    def head_branch(self) -> str | None:
        return self.store.head_ref()[0]

    def refs(self, known: Iterable[str] = ()) -> dict[str, str]:
        """Every branch and tag: the folders listed, then — unless they are more than mdiff reads from one
        remote (MD801, as FsspecEnd) — each ref read."""
        named = []
        for folder in REF_FOLDERS:
            for name in self.store.ref_files(folder):
                if not valid_branch(name):
                    log.warning("%s: ignoring %s/%r: not a valid name (§13.1)", self.url, folder, name)
                    continue
                named.append(f"{folder}/{name}")
        _check_ref_count(self.url, len(named))
        found = {}
        for relative in named:
            target = self.store.read_ref(relative)
            if target is not None:
                found[relative] = target
        return found

    def commit_sizes(self, directory: str = "commits") -> dict[str, int]:
        ids = (self.store.commit_ids() if directory == "commits" else
               [m.group(1) for name in self.store.ref_files(directory) if (m := _COMMIT_FILE.fullmatch(name))])
        sizes = {}
        for commit_id in ids:
            with contextlib.suppress(OSError):
                sizes[commit_id] = os.lstat(self.store.dir / directory / f"{commit_id}.mdiff").st_size
        return sizes

    def read_commit(self, commit_id: str, directory: str = "commits") -> Iterator[bytes]:
        if directory == "commits":
            return self.store.commit_chunks(commit_id, BLOCK)
        return self.store.snapshot_chunks(commit_id, BLOCK)

    def ranged(self, commit_id: str, size: int, directory: str = "commits") -> RangedFile:
        try:
            fd, _ = self.store._open_file(f"{directory}/{commit_id}.mdiff")
        except FileNotFoundError:
            raise RepositoryError("MD801", f"{self.url} lists or names commit {commit_id[:12]} but does not "
                                           "serve it") from None
        def copy(local: str) -> None:  # a whole file, for a reader that verifies it whole (§13.2)
            with open(local, "wb") as out, open(os.dup(fd), "rb", closefd=True) as source:
                source.seek(0)
                shutil.copyfileobj(source, out, BLOCK)

        return RangedFile(lambda start, end: positional_io.pread(fd, end - start, start), size,
                          f"{self.url} {directory}/{commit_id[:12]}", lambda: os.close(fd), copy)

    def blocks_reader(self, commit_id: str) -> Callable[[int, int], bytes] | None:
        if self.store.kind(f"commits/{commit_id}.blocks") is None:
            return None

        def read(start: int, end: int) -> bytes:
            fd, _ = self.store._open_file(f"commits/{commit_id}.blocks")  # MD801: a link, FIFO, … there
            try:
                return positional_io.pread(fd, end - start, start)
            finally:
                os.close(fd)

        return read

    def write_commit(self, commit_id: str, chunks: Iterable[bytes], size: int, directory: str = "commits",
                     blocks: bytes | None = None) -> None:
        temp = self.store.receive_commit(commit_id, chunks, MAX_COMMIT_FILE_BYTES, directory)
        self.store.file_received(temp, commit_id, directory)

    def update_ref(self, ref: str, old: str | None, new: str) -> None:
        with self.store.lock():
            if self.store.read_ref(ref) != old:
                raise RefMoved(ref, self.url)
            self.store.write_ref(ref, new)


class _AtMost:
    """An fsspec download callback that stops a download past ``limit`` bytes (a store serving more than it
    listed would otherwise fill the disk)."""

    def __init__(self, limit: int):
        self.limit, self.done = limit, 0

    def set_size(self, size: int) -> None:
        if size is not None and size > self.limit:
            raise RepositoryError("MD801", "it is served larger than listed")

    def relative_update(self, inc: int = 1) -> None:
        self.done += inc
        if self.done > self.limit:
            raise RepositoryError("MD801", "it is served larger than listed")

    def absolute_update(self, value: int) -> None:
        self.relative_update(value - self.done)

    def branched(self, path_1: str, path_2: str, **kwargs: Any) -> _AtMost:
        return self

    def branch(self, path_1: str, path_2: str, kwargs: dict) -> None:
        pass

    def call(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _AtMost:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FsspecEnd(RemoteEnd):
    """A repository on any fsspec filesystem (s3://, gs://, memory://, …), every read bounded."""

    def __init__(self, fs: Any, root: str, url: str):
        self.fs, self.url = fs, url
        self.dir = root.rstrip("/") + "/.mdiff"
        self.conditional = "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))

    def _path(self, relative: str) -> str:
        return f"{self.dir}/{relative}"

    def _small(self, relative: str, limit: int = MAX_SMALL_FILE_BYTES) -> tuple[str | None, str | None]:
        """(text, etag) of a small file, None when missing; at most ``limit`` bytes read. The etag is
        read first: content newer than it only makes a compare-and-swap fail, never pass wrongly."""
        path = self._path(relative)
        try:
            self.fs.invalidate_cache(path)
            info = self.fs.info(path)
            if info.get("type") != "file":
                raise RepositoryError("MD801", f"{self.url}: .mdiff/{relative} is not a file")
            data = self.fs.cat_file(path, start=0, end=limit + 1)  # after the etag: see above
        except FileNotFoundError as exc:
            if _no_such_bucket(exc):
                raise NoBucket(self.url, self.fs._strip_protocol(self.dir).split("/", 1)[0]) from None
            return None, None
        except RepositoryError:
            raise
        except Exception as exc:
            raise _remote_error(self.url, f"read .mdiff/{relative}", exc) from None
        if len(data) > limit:
            raise RepositoryError("MD801", f"{self.url}: .mdiff/{relative} is malformed: longer than {limit} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise RepositoryError("MD801", f"{self.url}: .mdiff/{relative} is malformed: not UTF-8 text") from None
        return text, info.get("ETag")

    def check_format(self) -> int:
        text, _ = self._small("format")
        if text is None:
            raise NoRepository(self.url, self._empty())
        version = format_of(text)
        if version is None:
            raise RepositoryError("MD801", f"{self.url}: .mdiff/format says no repository format this mdiff reads "
                                           f"({' or '.join(repr(line.strip()) for line in FORMAT_LINES.values())})")
        return version

    def _empty(self) -> bool | None:
        """Whether nothing at all is stored under the URL's path (None: cannot be told)."""
        root = self.dir.rsplit("/", 1)[0]
        try:
            self.fs.invalidate_cache(root)
            return not self.fs.exists(root)
        except Exception:
            return None

    def create(self, branch: str, repository_format: int = FORMAT) -> None:
        """``format`` and HEAD, each written only if absent (objects need no folders); ``format`` last, as
        it is what says a repository is there."""
        for relative, text in (("HEAD", f"{HEAD_PREFIX}{branch}\n"), ("format", FORMAT_LINES[repository_format])):
            try:
                self._put(relative, text, **({"IfNoneMatch": "*"} if self.conditional else {}))
            except FileExistsError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EEXIST):
                    raise _remote_error(self.url, f"create .mdiff/{relative}", exc) from None

    def head_branch(self) -> str | None:
        text, _ = self._small("HEAD")
        m = re.fullmatch(r"ref: refs/heads/(\S+)\n", text or "")
        return m.group(1) if m and text and text.startswith(HEAD_PREFIX) and valid_branch(m.group(1)) else None

    def _listing(self, relative: str) -> list[dict]:
        path = self._path(relative)
        try:
            self.fs.invalidate_cache(path)
            return list(self.fs.find(path, detail=True, withdirs=False).values())
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise _remote_error(self.url, f"list .mdiff/{relative}", exc) from None

    def _relative(self, entry: dict, folder: str) -> str:
        name = entry["name"]
        prefix = self.fs._strip_protocol(self._path(folder)).rstrip("/") + "/"
        return name[len(prefix):] if name.startswith(prefix) else ""

    def refs(self, known: Iterable[str] = ()) -> dict[str, str]:
        """Every branch and tag: one listing per folder, then the ref files read together — one ranged GET
        each, many in flight (fsspec's batches) — but only those whose bytes the listing does not already
        vouch for (§13.8): an object store lists each object's ETag, which for an object written in one PUT
        is the MD5 of its bytes. A ref whose ETag is the MD5 of ``<id>\\n`` for a ``known`` id holds that id,
        and is not read; of the others, one ref per distinct ETag is read and its bytes checked to hash to
        that ETag — the others of that ETag then hold the same bytes — else (an ETag that is no plain MD5:
        a multipart upload's, an encrypted object's; or bytes that do not hash to it: a ref moved since it
        was listed) every ref of that ETag is read. So 3,000 branches naming a few commits cost the listing
        and a few GETs, and a fetch that finds them as it left them, the listing alone."""
        named: list[tuple[str, str | None]] = []  # (ref, the MD5 its listing vouches for)
        for folder in REF_FOLDERS:
            for entry in self._listing(folder):
                name = self._relative(entry, folder)
                if name.startswith(".") or "/." in name:
                    continue
                if not valid_branch(name):
                    log.warning("%s: ignoring a ref of %s that is not a valid name (§13.1)", self.url, folder)
                    continue
                if entry.get("type", "file") != "file":
                    raise RepositoryError("MD801", f"{self.url}: .mdiff/{folder}/{name} is not a file")
                named.append((f"{folder}/{name}", _plain_md5(entry.get("ETag"))))
        _check_ref_count(self.url, len(named))
        data: dict[str, bytes | None] = {}
        by_md5 = {hashlib.md5(f"{c}\n".encode(), usedforsecurity=False).hexdigest(): f"{c}\n".encode() for c in known}
        groups: dict[str, list[str]] = {}
        each: list[str] = []  # refs read one by one
        for relative, md5 in named:
            if md5 is None:
                each.append(relative)
            elif md5 in by_md5:
                data[relative] = by_md5[md5]
            else:
                groups.setdefault(md5, []).append(relative)
        firsts = [members[0] for members in groups.values()]
        for (md5, members), got in zip(groups.items(), self._read_many(firsts)):
            data[members[0]] = got
            if got is not None and hashlib.md5(got, usedforsecurity=False).hexdigest() == md5:
                data.update(dict.fromkeys(members[1:], got))
            else:  # not the bytes listed (moved or deleted since, or an ETag that is no MD5): each read
                each.extend(members[1:])
        data.update(zip(each, self._read_many(each)))
        log.debug("%s: %d refs listed, %d read", self.url, len(named), len(firsts) + len(each))
        found = {}
        for relative, _ in named:
            got = data[relative]
            if got is None:
                continue  # deleted since listed
            if not _ID_LINE.fullmatch(got.decode("utf-8", "replace")):
                raise RepositoryError("MD801", f"{self.url}: {relative} is malformed: not a commit id and "
                                               "one newline (§13.1)")
            found[relative] = got[:-1].decode()
        return found

    def _read_many(self, relatives: list[str], limit: int = MAX_SMALL_FILE_BYTES) -> list[bytes | None]:
        """The bytes of each small file (None where it is missing), at most ``limit`` each (MD801 past it),
        read concurrently."""
        if not relatives:
            return []
        paths = [self._path(relative) for relative in relatives]
        for path in paths:
            self.fs.invalidate_cache(path)
        try:
            contents = self.fs.cat_ranges(paths, [0] * len(paths), [limit + 1] * len(paths), on_error="return")
        except Exception as exc:
            raise _remote_error(self.url, "read .mdiff/refs", exc) from None
        found: list[bytes | None] = []
        for relative, data in zip(relatives, contents):
            if isinstance(data, FileNotFoundError):
                found.append(None)
                continue
            if isinstance(data, BaseException):
                raise _remote_error(self.url, f"read .mdiff/{relative}", data) from None
            if len(data) > limit:
                raise RepositoryError("MD801", f"{self.url}: .mdiff/{relative} is malformed: longer than {limit} bytes")
            found.append(bytes(data))
        return found

    def commit_sizes(self, directory: str = "commits") -> dict[str, int]:
        sizes = {}
        for entry in self._listing(directory):
            m = _COMMIT_FILE.fullmatch(self._relative(entry, directory))
            if m:
                sizes[m.group(1)] = int(entry.get("size") or 0)
        return sizes

    def read_commit(self, commit_id: str, directory: str = "commits") -> Iterator[bytes]:
        path = self._path(f"{directory}/{commit_id}.mdiff")
        try:
            file = self.fs.open(path, "rb", block_size=BLOCK, cache_type="none")
        except FileNotFoundError:
            raise RepositoryError("MD801", f"{self.url} lists or names commit {commit_id[:12]} but does not "
                                           "serve it") from None
        except Exception as exc:
            raise _remote_error(self.url, f"read commit {commit_id[:12]}", exc) from None
        with file:
            read = 0
            while read <= MAX_COMMIT_FILE_BYTES:
                try:
                    chunk = file.read(BLOCK)
                except Exception as exc:
                    raise _remote_error(self.url, f"read commit {commit_id[:12]}", exc) from None
                if not chunk:
                    return
                read += len(chunk)
                yield chunk

    def ranged(self, commit_id: str, size: int, directory: str = "commits") -> RangedFile:
        path = self._path(f"{directory}/{commit_id}.mdiff")
        return RangedFile(lambda start, end: self.fs.cat_file(path, start=start, end=end), size,
                          f"{self.url} {directory}/{commit_id[:12]}",
                          download=lambda local: self.fs.get_file(path, local, callback=_AtMost(size)))

    def blocks_reader(self, commit_id: str) -> Callable[[int, int], bytes] | None:
        path = self._path(f"commits/{commit_id}.blocks")

        def read(start: int, end: int) -> bytes:
            return self.fs.cat_file(path, start=start, end=end)

        return read  # a missing one: FileNotFoundError on the first read

    def write_commit(self, commit_id: str, chunks: Iterable[bytes], size: int, directory: str = "commits",
                     blocks: bytes | None = None) -> None:
        """An object appears whole or not at all (a multipart upload is invisible until completed): the
        commit is written under its own name, after its block list; one there already has these bytes or is
        refused by readers."""
        path = self._path(f"{directory}/{commit_id}.mdiff")
        try:
            if blocks is not None:
                self.fs.pipe_file(self._path(f"commits/{commit_id}.blocks"), blocks)
            with self.fs.open(path, "wb", block_size=max(BLOCK, 5 << 20)) as file:
                for chunk in chunks:
                    file.write(chunk)
        except RepositoryError:
            raise
        except Exception as exc:
            raise _remote_error(self.url, f"write commit {commit_id[:12]}", exc) from None

    def update_ref(self, ref: str, old: str | None, new: str) -> None:
        if self.conditional:
            self._swap_conditionally(ref, old, new)
        else:
            with self._lock_object():
                text, _ = self._small(ref)
                if (text[:-1] if text else None) != old:
                    raise RefMoved(ref, self.url)
                self._put(ref, new + "\n")

    def _put(self, relative: str, text: str, **conditions: str) -> None:
        try:
            self.fs.pipe_file(self._path(relative), text.encode("utf-8"), **conditions)
        finally:
            self.fs.invalidate_cache(self._path(relative))

    def _swap_conditionally(self, ref: str, old: str | None, new: str) -> None:
        """S3: the ref read with its etag, checked to name ``old``, then written on the condition that it
        is still that object (``If-Match``) — or, to create it, that there is none (``If-None-Match: *``)."""
        text, etag = self._small(ref)
        if (text[:-1] if text and _ID_LINE.fullmatch(text) else None) != old or (text is not None and not etag):
            raise RefMoved(ref, self.url)
        self.conditional_put(ref, new + "\n", etag if text is not None else None)

    def conditional_put(self, relative: str, text: str, etag: str | None) -> None:
        """Write ``.mdiff/<relative>`` only if it is still the object ``etag`` (None: only if there is
        none); RefMoved when the store refuses (412 Precondition Failed)."""
        try:
            self._put(relative, text, **({"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}))
        except FileExistsError:  # s3fs's word for a failed If-None-Match
            raise RefMoved(relative, self.url) from None
        except OSError as exc:  # and EINVAL for a failed If-Match
            if exc.errno in (errno.EINVAL, errno.EEXIST):
                raise RefMoved(relative, self.url) from None
            raise _remote_error(self.url, f"write {relative}", exc) from None

    @contextlib.contextmanager
    def _lock_object(self) -> Iterator[None]:
        """``.mdiff/push.lock``, created exclusively (fsspec's ``xb``), holding a random token; removed
        after. A store that cannot create a file exclusively cannot be pushed to safely: refused."""
        path = self._path("push.lock")
        token = secrets.token_hex(16)
        try:
            with self.fs.open(path, "xb") as file:
                file.write(token.encode())
        except FileExistsError:
            raise RepositoryError("MD803", f"{self.url}: another pusher holds .mdiff/push.lock; try again (a lock "
                                           "left by a killed pusher is removed by hand)") from None
        except (NotImplementedError, ValueError):
            raise RepositoryError("MD801", f"{self.url}: this store can neither write conditionally nor create a "
                                           "file exclusively, so refs cannot be moved safely; push is refused") from None
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                self.fs.rm_file(path)
