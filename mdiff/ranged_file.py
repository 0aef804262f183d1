"""A read-only file read by byte ranges as they are asked for: a remote commit read in place (SPEC.md §13.9).

libhdf5 reads a file's metadata in many small pieces that lie close together (its allocator keeps them in
few blocks), and a dataset's chunks in one read each. So small reads go through a cache of aligned pages,
one ranged request per page missed, and a large read is one ranged request of exactly its bytes: reading
one parameter of a large file moves that parameter's stored bytes and a few pages of metadata. A reader
that will read every byte anyway (a full checkout) calls :meth:`RangedFile.spool`: the file is then
downloaded whole, as the store downloads a file (``get_file``: one request, or its parts at once), into a
private temporary file, and every read waits for it — each byte moves once, in one request.

A commit file of a format-2 repository is read only as bytes verified against its id (SPEC.md §13.2):
given a :class:`LeafVerifier`, every read is widened to whole 8 KiB leaves, each checked against its leaf
hash (anchored in the id by the block list) before any of it is served, and verified leaves are kept; a
spooled file is checked whole (``check_whole``) before any of it is served. A leaf that does not verify
is :class:`BlockMismatch` (MD800).
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from mdiff import block_ids
from mdiff.hdf5walk import positional_io

PAGE = 4096  # the unit of small reads: an object header, a B-tree node or a heap block is usually within one
SMALL_READ = 4 * PAGE  # reads up to this size go through the page cache
CACHED_PAGES = 1024  # 4 MiB: libhdf5 keeps its own cache of decoded metadata above this one
CACHED_LEAVES = 512  # 4 MiB of verified leaves, likewise


_collection_lock = threading.Lock()
_collection_paused = 0  # the callers inside no_collection(); the collector is off while there are any
_collection_was_on = False


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No automatic garbage collection, in any thread, while the block runs. libhdf5 reads a remote file
    holding h5py's lock, and the fetch waits on fsspec's event loop thread: a collection started there
    that frees an h5py object would wait for that lock — for ever. Everything that reads a remote file
    through libhdf5 runs in such a block; what became garbage meanwhile is collected after."""
    global _collection_paused, _collection_was_on
    with _collection_lock:
        if _collection_paused == 0:
            _collection_was_on = gc.isenabled()
            gc.disable()
        _collection_paused += 1
    try:
        yield
    finally:
        with _collection_lock:
            _collection_paused -= 1
            if _collection_paused == 0 and _collection_was_on:
                gc.enable()


class RangeReadError(OSError):
    """The store failed to serve a range, or served fewer bytes than the file's listed size promises."""

    code = "MD801"


class BlockMismatch(RangeReadError):
    """The store served bytes that are not the commit's its id names (§13.2): MD800."""

    code = "MD800"


class LeafVerifier:
    """What checks a file's leaves against its commit id (§13.2, block_ids.py): the block list's head,
    fetched and verified on creation (RepositoryError MD800 or MD801), then each group of leaf hashes when a
    read first touches it, verified against the head. ``fetch_list(start, end)`` serves the block list's
    bytes [start, end) (``commits/<id>.blocks``). ``requests`` and ``bytes_fetched`` count what moved."""

    def __init__(self, commit_id: str, size: int, fetch_list: Callable[[int, int], bytes], name: str):
        self.commit_id, self.size, self.name, self._fetch = commit_id, size, name, fetch_list
        head = fetch_list(0, block_ids.head_size(size))
        self.requests, self.bytes_fetched = 1, len(head)
        blocks = block_ids.parse_head(head, commit_id, name)  # MD800 unless it hashes to the id
        if blocks.length != size:
            raise BlockMismatch(f"{name}: the store lists {size} bytes; commit {commit_id[:12]} has {blocks.length}")
        self.groups = blocks.groups
        self._base = len(head)  # where the leaf hashes start
        self._leaves: dict[int, bytes] = {}  # group → its leaf hashes, verified
        self._lock = threading.Lock()

    def _group_leaves(self, first: int, last: int) -> None:
        """Fetch and verify the leaf hashes of groups first..last not held yet (one request per run)."""
        missing = [g for g in range(first, last + 1) if g not in self._leaves]
        while missing:
            run = [missing[0]]
            while len(run) < len(missing) and missing[len(run)] == run[-1] + 1:
                run.append(missing[len(run)])
            missing = missing[len(run):]
            leaves_total = block_ids.leaf_count(self.size)
            start_leaf = run[0] * block_ids.GROUP
            end_leaf = min((run[-1] + 1) * block_ids.GROUP, leaves_total)
            start, end = self._base + block_ids.HASH * start_leaf, self._base + block_ids.HASH * end_leaf
            try:
                data = self._fetch(start, end)
            except Exception as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                raise RangeReadError(f"{self.name}: its block list cannot be read ({reason})") from None
            with self._lock:
                self.requests += 1
                self.bytes_fetched += len(data)
            if len(data) != end - start:
                raise RangeReadError(f"{self.name}: the store served {len(data)} bytes of its block list's "
                                     f"{start}..{end}")
            step = block_ids.GROUP * block_ids.HASH
            for i, group in enumerate(run):
                part = data[i * step:(i + 1) * step]
                if block_ids.group_hashes(part) != self.groups[group * block_ids.HASH:(group + 1) * block_ids.HASH]:
                    raise BlockMismatch(f"{self.name}: its block list does not hash to commit {self.commit_id[:12]}")
                with self._lock:
                    self._leaves[group] = part

    def check(self, first_leaf: int, data: bytes) -> None:
        """BlockMismatch unless ``data`` (whole leaves from ``first_leaf``) are the commit's."""
        count = -(-len(data) // block_ids.LEAF)
        last_leaf = first_leaf + count - 1
        self._group_leaves(first_leaf // block_ids.GROUP, last_leaf // block_ids.GROUP)
        got = block_ids.leaf_hashes(data)
        for i in range(count):
            leaf = first_leaf + i
            group = self._leaves[leaf // block_ids.GROUP]
            at = (leaf % block_ids.GROUP) * block_ids.HASH
            if got[i * block_ids.HASH:(i + 1) * block_ids.HASH] != group[at:at + block_ids.HASH]:
                start = leaf * block_ids.LEAF
                end = min(start + block_ids.LEAF, self.size)
                raise BlockMismatch(f"{self.name}: bytes {start}..{end} are not those of commit {self.commit_id[:12]}")


class _Spool:
    """The whole of ``file``, downloaded by ``download(local_path)`` on a thread of its own into a private
    temporary file; :meth:`read` waits until the download is complete (a store may write its parts in any
    order: the file's size says nothing of what is there). Closing does not wait for the download: the
    thread removes the file when it ends."""

    def __init__(self, file: RangedFile, download: Callable[[str], None]):
        self._file = file
        self._folder = tempfile.mkdtemp(prefix="mdiff-remote-")
        self._path = os.path.join(self._folder, "spool")
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self._complete = False
        self._failure: BaseException | None = None
        self._stopped = self._ended = False  # closed by the reader; the download over (each under _ready)
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._download, args=(download,), name="mdiff-spool", daemon=True)
        self._thread.start()

    def _download(self, download: Callable[[str], None]) -> None:
        try:
            download(self._path)
            size = os.stat(self._path).st_size
            if size != self._file.size:
                raise RangeReadError(f"{self._file.name}: the store served {size} bytes, not the {self._file.size} "
                                     "it lists")
            self._file._count(size)
            if self._file.check_whole is not None:
                self._file.check_whole(self._fd, size)  # BlockMismatch: not the bytes its id names
            with self._ready:
                self._complete = True
        except BaseException as exc:  # kept for the reader waiting on these bytes
            if not isinstance(exc, RangeReadError):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                said = getattr(exc, "message", None)  # a download callback's own refusal (an MdiffError)
                exc = RangeReadError(f"{self._file.name}: cannot be downloaded ({said or reason})")
            self._file.failure = self._file.failure or exc
            with self._ready:
                self._failure = exc
        finally:
            with self._ready:
                self._ended = True
                self._ready.notify_all()
                stopped = self._stopped
            if stopped:  # closed meanwhile: the file is this thread's to remove
                shutil.rmtree(self._folder, ignore_errors=True)

    def wait(self) -> None:
        """Until the download is complete; its failure raised."""
        self.read(0, 0)

    def read(self, offset: int, end: int) -> bytes:
        with self._ready:
            while not self._complete and self._failure is None and not self._stopped:
                self._ready.wait()
            if not self._complete:
                raise self._failure or RangeReadError(f"{self._file.name}: closed while read")
        return positional_io.pread(self._fd, end - offset, offset)

    def close(self) -> None:
        with self._ready:
            self._stopped = True
            ended = self._ended
            self._ready.notify_all()
        os.close(self._fd)
        if ended:  # else the download's thread removes it when it ends
            shutil.rmtree(self._folder, ignore_errors=True)


class RangedFile(io.RawIOBase):
    """``size`` bytes, read through ``fetch(start, end)`` (the bytes of [start, end), which the store
    serves). ``requests`` and ``bytes_fetched`` count what moved; ``failure`` keeps the first failure of
    the store, which libhdf5 reports only as a read error. Safe to read from several threads."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, name: str,
                 release: Callable[[], None] | None = None, download: Callable[[str], None] | None = None):
        """``verifier`` and ``check_whole``, set before the first read, verify what is served (see the module):
        ``check_whole(fd, size)`` raises BlockMismatch unless a spooled file is the commit's."""
        super().__init__()
        self.verifier: LeafVerifier | None = None
        self.check_whole: Callable[[int, int], None] | None = None
        self._leaf_cache: OrderedDict[int, bytes] = OrderedDict()
        self._fetch, self.size, self.name, self._release = fetch, size, name, release
        self._download = download  # the whole file to a local path, in one request (None: ranges only)
        self._spool: _Spool | None = None
        self._position = 0
        self._pages: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.requests = self.bytes_fetched = 0
        self.failure: RangeReadError | None = None

    def close(self) -> None:
        if not self.closed:
            if self._spool is not None:
                self._spool.close()
            if self._release is not None:
                self._release()  # what serves the ranges (a local file's descriptor)
        super().close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._position = base + offset
        return self._position

    def readinto(self, buffer) -> int:
        """libhdf5's read, made holding h5py's lock (see no_collection)."""
        view = memoryview(buffer).cast("B")
        with no_collection():
            end = min(self._position + len(view), self.size)
            if self.verifier is not None and self._spool is None and self._position < end:
                done = 0
                for part in self._verified_parts(self._position, end):  # into the buffer: no joined copy
                    view[done:done + len(part)] = part
                    done += len(part)
            else:
                data = self.pread(len(view), self._position)
                done = len(data)
                view[:done] = data
        self._position += done
        return done

    def pread(self, n: int, offset: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer only at the end of the file)."""
        end = min(offset + n, self.size)
        if offset >= end:
            return b""
        if self.verifier is not None and self._spool is None:
            return b"".join(self._verified_parts(offset, end))
        if end - offset > SMALL_READ:
            return self._large(offset, end)
        first, last = offset // PAGE, (end - 1) // PAGE
        data = b"".join(self._page(index) for index in range(first, last + 1))
        return data[offset - first * PAGE:end - first * PAGE]

    def _verified_parts(self, offset: int, end: int) -> list[memoryview]:
        """Bytes [offset, end), in order, as views of whole leaves, each verified (see the module): those
        kept, and each run of the others fetched in one request. Views, not a joined copy: a large read
        holds its fetched bytes once, then the caller's buffer."""
        assert self.verifier is not None
        leaf = block_ids.LEAF
        first, last = offset // leaf, (end - 1) // leaf
        parts: list[memoryview] = []
        index = first
        while index <= last:
            with self._lock:
                held = self._leaf_cache.get(index)
                if held is not None:
                    self._leaf_cache.move_to_end(index)
            if held is not None:
                parts.append(memoryview(held))
                index += 1
                continue
            stop = index
            while stop < last and stop + 1 not in self._leaf_cache:
                stop += 1
            start_byte, end_byte = index * leaf, min((stop + 1) * leaf, self.size)
            data = self._get(start_byte, end_byte)
            try:
                self.verifier.check(index, data)
            except RangeReadError as exc:
                self.failure = self.failure or exc
                raise
            keep = range(index, stop + 1) if stop - index < 4 else (index, stop)  # a large run: its edges only
            with self._lock:
                for k in keep:
                    self._leaf_cache[k] = data[(k - index) * leaf:(k - index + 1) * leaf]
                while len(self._leaf_cache) > CACHED_LEAVES:
                    self._leaf_cache.popitem(last=False)
            parts.append(memoryview(data))
            index = stop + 1
        surplus = min((last + 1) * leaf, self.size) - end
        parts[-1] = parts[-1][:len(parts[-1]) - surplus]
        parts[0] = parts[0][offset - first * leaf:]
        return parts

    def spool(self) -> None:
        """Download the whole file now, and read it from there (see the module); a file without a download
        (a local folder's) is read by ranges still."""
        if self._download is not None and self._spool is None:
            self._spool = _Spool(self, self._download)

    def ready(self) -> None:
        """Raise now what would fail libhdf5's first reads — the download of a spooled file, the first page
        of another: libhdf5 keeps a file it failed to open half open, and dies with it at exit."""
        if self._spool is not None:
            self._spool.wait()
        else:
            self.pread(PAGE, 0)

    def _large(self, offset: int, end: int) -> bytes:
        if self._spool is not None:
            return self._spool.read(offset, end)
        return self._get(offset, end)

    def _page(self, index: int) -> bytes:
        with self._lock:
            page = self._pages.get(index)
            if page is not None:
                self._pages.move_to_end(index)
                return page
        start, end = index * PAGE, min((index + 1) * PAGE, self.size)
        page = self._spool.read(start, end) if self._spool is not None else self._get(start, end)
        with self._lock:
            self._pages[index] = page
            while len(self._pages) > CACHED_PAGES:
                self._pages.popitem(last=False)
        return page

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self.requests += 1
            self.bytes_fetched += nbytes

    def _get(self, start: int, end: int) -> bytes:
        try:
            data = self._fetch(start, end)
        except Exception as exc:  # the store's own exception: kept, named by its kind only (§13.8)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            failure = RangeReadError(f"{self.name}: bytes {start}..{end} cannot be read ({reason})")
            self.failure = self.failure or failure
            raise failure from None
        self._count(len(data))
        if len(data) != end - start:
            failure = RangeReadError(f"{self.name}: the store served {len(data)} bytes of {start}..{end}, "
                                     f"within the {self.size} it lists")
            self.failure = self.failure or failure
            raise failure
        return data
