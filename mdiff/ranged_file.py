"""A read-only file read by byte ranges as they are asked for: a remote commit read in place (SPEC.md §13.9).

libhdf5 reads a file's metadata in many small pieces that lie close together (its allocator keeps them in
few blocks), and a dataset's chunks in one read each. So small reads go through a cache of aligned pages,
one ranged request per page missed, and a large read is one ranged request of exactly its bytes: reading
one parameter of a large file moves that parameter's stored bytes and a few pages of metadata. A reader
that will read every byte anyway (a full checkout) calls :meth:`RangedFile.spool`: the file is then
downloaded in order, in large requests, into an unnamed local file while it is read, and large reads wait
for their bytes there — each byte moves once, and the download overlaps the decoding.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

PAGE = 4096  # the unit of small reads: an object header, a B-tree node or a heap block is usually within one
SMALL_READ = 4 * PAGE  # reads up to this size go through the page cache
CACHED_PAGES = 1024  # 4 MiB: libhdf5 keeps its own cache of decoded metadata above this one


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


class _Spool:
    """The whole of ``file``, downloaded in order, ``block`` bytes a request, by a thread of its own into an
    unnamed temporary file; :meth:`read` waits until its bytes are there."""

    def __init__(self, file: RangedFile, block: int):
        self._file, self._block = file, block
        self._disk = tempfile.TemporaryFile(prefix="mdiff-remote-")
        self._done = 0
        self._failure: BaseException | None = None
        self._stopped = False
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._download, name="mdiff-spool", daemon=True)
        self._thread.start()

    def _download(self) -> None:
        try:
            while self._done < self._file.size and not self._stopped:
                end = min(self._done + self._block, self._file.size)
                os.pwrite(self._disk.fileno(), self._file._get(self._done, end), self._done)
                with self._ready:
                    self._done = end
                    self._ready.notify_all()
        except BaseException as exc:  # kept for the reader waiting on these bytes
            with self._ready:
                self._failure = exc
                self._ready.notify_all()

    def read(self, offset: int, end: int) -> bytes:
        with self._ready:
            while self._done < end and self._failure is None and not self._stopped:
                self._ready.wait()
            if self._done < end:
                raise self._failure or RangeReadError(f"{self._file.name}: closed while read")
        return os.pread(self._disk.fileno(), end - offset, offset)

    def close(self) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify_all()
        self._thread.join()
        self._disk.close()


class RangedFile(io.RawIOBase):
    """``size`` bytes, read through ``fetch(start, end)`` (the bytes of [start, end), which the store
    serves). ``requests`` and ``bytes_fetched`` count what moved; ``failure`` keeps the first failure of
    the store, which libhdf5 reports only as a read error. Safe to read from several threads."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, name: str,
                 release: Callable[[], None] | None = None):
        super().__init__()
        self._fetch, self.size, self.name, self._release = fetch, size, name, release
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
            data = self.pread(len(view), self._position)
        view[:len(data)] = data
        self._position += len(data)
        return len(data)

    def pread(self, n: int, offset: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer only at the end of the file)."""
        end = min(offset + n, self.size)
        if offset >= end:
            return b""
        if end - offset > SMALL_READ:
            return self._large(offset, end)
        first, last = offset // PAGE, (end - 1) // PAGE
        data = b"".join(self._page(index) for index in range(first, last + 1))
        return data[offset - first * PAGE:end - first * PAGE]

    def spool(self, block: int) -> None:
        """Download the whole file from now on, in order, ``block`` bytes a request (see the module)."""
        if self._spool is None:
            self._spool = _Spool(self, block)

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
        page = self._get(index * PAGE, min((index + 1) * PAGE, self.size))
        with self._lock:
            self._pages[index] = page
            while len(self._pages) > CACHED_PAGES:
                self._pages.popitem(last=False)
        return page

    def _get(self, start: int, end: int) -> bytes:
        try:
            data = self._fetch(start, end)
        except Exception as exc:  # the store's own exception: kept, named by its kind only (§13.8)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            failure = RangeReadError(f"{self.name}: bytes {start}..{end} cannot be read ({reason})")
            self.failure = self.failure or failure
            raise failure from None
        with self._lock:
            self.requests += 1
            self.bytes_fetched += len(data)
        if len(data) != end - start:
            failure = RangeReadError(f"{self.name}: the store served {len(data)} bytes of {start}..{end}, "
                                     f"within the {self.size} it lists")
            self.failure = self.failure or failure
            raise failure
        return data
