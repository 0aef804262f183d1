"""A read-only file read by byte ranges as they are asked for: a remote commit read in place (SPEC.md §13.9).

libhdf5 reads a file's metadata in many small pieces that lie close together (its allocator keeps them in
few blocks), and a dataset's chunks in one read each. So small reads go through a cache of aligned pages,
one ranged request per page missed, and a large read is one ranged request of exactly its bytes: reading
one parameter of a large file moves that parameter's stored bytes and a few pages of metadata. A reader
that will read the whole file (a full checkout) gives it :class:`Windows`: a large read then fetches a
window of that many bytes from where it starts, and the reads that follow are served from it — fewer,
larger requests. The windows of all the files a reader holds open are bounded together.
"""

from __future__ import annotations

import contextlib
import gc
import io
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


class Windows:
    """The windows read ahead (``size`` bytes each) of the files that share this object: at most ``kept``
    of them held at once, the least recently used dropped first."""

    def __init__(self, size: int, kept: int = 4):
        self.size, self.kept = size, kept
        self._held: OrderedDict[int, tuple[int, bytes]] = OrderedDict()  # id(file) -> (start, bytes)
        self._lock = threading.Lock()

    def get(self, file: RangedFile, offset: int, end: int) -> bytes | None:
        with self._lock:
            start, data = self._held.get(id(file), (0, b""))
            if not start <= offset or not end <= start + len(data):
                return None
            self._held.move_to_end(id(file))
            return data[offset - start:end - start]

    def put(self, file: RangedFile, start: int, data: bytes) -> None:
        with self._lock:
            self._held[id(file)] = (start, data)
            self._held.move_to_end(id(file))
            while len(self._held) > self.kept:
                self._held.popitem(last=False)

    def drop(self, file: RangedFile) -> None:
        with self._lock:
            self._held.pop(id(file), None)


class RangedFile(io.RawIOBase):
    """``size`` bytes, read through ``fetch(start, end)`` (the bytes of [start, end), which the store
    serves). ``requests`` and ``bytes_fetched`` count what moved; ``failure`` keeps the first failure of
    the store, which libhdf5 reports only as a read error. Safe to read from several threads."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, name: str,
                 release: Callable[[], None] | None = None):
        super().__init__()
        self._fetch, self.size, self.name, self._release = fetch, size, name, release
        self.windows: Windows | None = None  # where large reads fetch ahead (None: exactly what is asked)
        self._position = 0
        self._pages: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.requests = self.bytes_fetched = 0
        self.failure: RangeReadError | None = None

    def close(self) -> None:
        if not self.closed:
            if self.windows is not None:
                self.windows.drop(self)
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

    def _large(self, offset: int, end: int) -> bytes:
        windows = self.windows
        if windows is None or windows.size <= end - offset:
            return self._get(offset, end)
        held = windows.get(self, offset, end)
        if held is not None:
            return held
        data = self._get(offset, min(offset + windows.size, self.size))
        windows.put(self, offset, data)
        return data[:end - offset]

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
