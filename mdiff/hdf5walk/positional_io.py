"""Reading at an offset without moving a shared file position: os.pread and os.preadv where the platform
has them (POSIX), else a seek, read and seek back under one lock per process (Windows).

The os functions are looked up at each call, not once at import, so that a process (or a test) without
them takes the fallback whenever they are absent.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

# Why a lock and a seek back, not a descriptor of its own per call: os.dup's copy shares the open file,
# and with it the position (POSIX dup, and DuplicateHandle under the Windows C runtime's _dup, alike), so
# two threads seeking their copies would still move each other's reads. One lock per process keeps every
# fallback read's seek and read together; it guards only the read, so inflating chunks (the costly part)
# still runs on every thread. The position is put back afterwards because libhdf5 without pread (its sec2
# driver on Windows) seeks only when its own record of the position differs from where it wants to read:
# a position left moved would give its next read other bytes. libhdf5's reads do not take this lock; mdiff
# reads libhdf5's descriptor at an offset from the thread that drives libhdf5 (the structure walk) or from
# the pool while that thread waits for it (chunks), never beside a libhdf5 read of its own.
_LOCK = threading.Lock()


def pread(fd: int, n: int, offset: int) -> bytes:
    """Up to ``n`` bytes of ``fd`` at ``offset`` (fewer only at the end of the file), as ``os.pread``."""
    native = getattr(os, "pread", None)
    if native is not None:
        return native(fd, n, offset)
    parts: list[bytes] = []
    with _LOCK:
        here = os.lseek(fd, 0, os.SEEK_CUR)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            while n > 0:  # os.read may give less than asked (Windows caps one read at 2 GiB)
                part = os.read(fd, n)
                if not part:
                    break
                parts.append(part)
                n -= len(part)
        finally:
            os.lseek(fd, here, os.SEEK_SET)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def preadv(fd: int, buffers: Sequence[WriteableBuffer], offset: int) -> int:
    """Fill ``buffers`` in order from ``fd`` at ``offset``, as ``os.preadv``: the number of bytes read
    (fewer than the buffers hold only at the end of the file)."""
    native = getattr(os, "preadv", None)
    if native is not None:
        return native(fd, buffers, offset)
    done = 0
    with _LOCK:
        here = os.lseek(fd, 0, os.SEEK_CUR)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            # readinto, not os.read: a contiguous dataset of gigabytes is read straight into its array
            with io.FileIO(fd, "rb", closefd=False) as raw:
                for buffer in buffers:
                    view = memoryview(buffer).cast("B")
                    filled = 0
                    while filled < len(view):
                        got = raw.readinto(view[filled:])
                        if not got:
                            return done + filled
                        filled += got
                    done += filled
        finally:
            os.lseek(fd, here, os.SEEK_SET)
    return done
