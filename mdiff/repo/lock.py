"""SPEC.md §13.6: the one writers' lock of a repository (``.mdiff/lock``)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from mdiff.errors import RepositoryError
from mdiff.regular_files import CLOEXEC, NOFOLLOW, NONBLOCK, kind_of
from mdiff.repo.folder import RepositoryFolder


class WriterLock(RepositoryFolder):
    """Every change of a repository happens under one exclusive lock, so two writers never interleave."""

    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[None]:
        """The one writer lock (§13.6: an exclusive flock on .mdiff/lock, where the platform has flock);
        ``wait=False`` refuses at once (MD803) if another process holds it. The lock file is opened
        without following a link and without blocking, and must be a regular file (MD801)."""
        try:
            import fcntl
        except ImportError:  # no flock: filelock's lock for this platform
            yield from self._portable_lock(wait)
            return
        with self._folder([]) as (folder, prefix):
            try:
                fd = os.open(prefix + "lock", os.O_RDONLY | os.O_CREAT | NOFOLLOW | NONBLOCK | CLOEXEC, 0o644,
                             dir_fd=folder)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
                    raise
                raise self._not_regular("lock", kind_of(os.stat(prefix + "lock", dir_fd=folder,
                                                                follow_symlinks=False).st_mode)) from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise self._not_regular("lock", kind_of(mode))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise RepositoryError("MD803", "another mdiff process is writing to this repository; try again") from None
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _portable_lock(self, wait: bool) -> Iterator[None]:
        from filelock import FileLock, Timeout

        kind = self.kind("lock")
        if kind not in (None, "a regular file"):
            raise self._not_regular("lock", kind)
        held = FileLock(self.dir / "lock", mode=0o644, thread_local=False)
        try:
            held.acquire(timeout=-1 if wait else 0)
        except Timeout:
            raise RepositoryError("MD803", "another mdiff process is writing to this repository; try again") from None
        try:
            yield
        finally:
            held.release()
