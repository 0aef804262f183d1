"""Opening a file that must be a regular file, from a folder a stranger may have prepared: without
blocking on a FIFO, without reading a device, and — where the caller says so — without following a
symbolic link; then reading back the very file that was checked.

A check by name followed by an open by name can be raced (the name may be swapped for a FIFO or
another file in between), so the file is opened once, checked with ``fstat`` on that descriptor, and
whoever reads it later reopens the descriptor itself (``/proc/self/fd/N`` on Linux) rather than the
name.
"""

from __future__ import annotations

import contextlib
import os
import stat

NONBLOCK = getattr(os, "O_NONBLOCK", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
BINARY = getattr(os, "O_BINARY", 0)
_PROC_FD = "/proc/self/fd"


class NotRegularFile(Exception):
    """The path names something other than a regular file; ``kind`` says what, for a message."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words ("a FIFO", "a symbolic link", …)."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return words
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True,
                 dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """(descriptor open for reading, its fstat) of the regular file at ``path`` (relative to ``dir_fd``
    when given). Never blocks: a FIFO is opened non-blocking and refused, like a device, a socket or a
    folder (NotRegularFile). With ``follow_links=False`` a symbolic link as the last component is
    refused too. A missing file or one without permission stays an OSError."""
    flags = os.O_RDONLY | NONBLOCK | CLOEXEC | BINARY | (0 if follow_links else NOFOLLOW)
    if not follow_links and not NOFOLLOW:  # no O_NOFOLLOW on this platform: look first (racy, but the best there is)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise NotRegularFile("a symbolic link")
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except (FileNotFoundError, PermissionError):
        raise
    except OSError:  # ELOOP: a link where none is followed; ENXIO: a socket; …
        try:
            mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_links).st_mode
        except OSError:
            raise NotRegularFile("not a regular file") from None
        raise NotRegularFile(kind_of(mode)) from None
    try:
        found = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(found.st_mode):
        os.close(fd)
        raise NotRegularFile(kind_of(found.st_mode))
    return fd, found


def reopenable(fd: int, path: str | os.PathLike[str]) -> str:
    """A name that opens the file ``fd`` is open on, for a library that opens files by name (libhdf5):
    the descriptor's own ``/proc/self/fd/N`` where the platform has one, else ``path`` (whose identity
    the caller then compares with :func:`same_file`)."""
    return f"{_PROC_FD}/{fd}" if os.path.isdir(_PROC_FD) else os.fspath(path)


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two fstat results are of one file with the same content: device, inode, size, and the
    modification and change times (any write changes both, and a process cannot set a change time)."""
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == \
        (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)
