"""How mdiff writes every file: under a temporary name beside the target, synced, then renamed into
place — so that a reader, or a process killed at any moment, sees the old file or the new one,
never a part. Temporary files are hidden (``.NAME.<random>.tmp``) and created with mode 0o666, so
that the umask decides the permissions, as for any file a user makes; a temporary file never
outlives an error.

What the output path may already name (:func:`check_output`): nothing, or a regular file, which the
new file replaces with the old one's mode (and owner and group, where the process may set them).
Anything else is refused before a byte is written — a rename would replace a device (as root,
``-o /dev/null`` made /dev/null a regular file), a FIFO or a socket with a regular file, and a
symbolic link with a file where the link was, leaving what it points to as it was. A file with
other hard links is replaced too: the other links keep the old content (the rename that makes the
write atomic gives the path a new file; writing into the shared one would change every link's
content at once and, cut short, leave all of them corrupt).
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import secrets
import stat
from collections.abc import Iterator
from typing import BinaryIO

from mdiff.errors import UnsafeOutputError
from mdiff.threads import Writeback
from mdiff.words import count

TEMP_SUFFIX = ".tmp"
log = logging.getLogger(__name__)

__all__ = ["UnsafeOutputError", "atomic_output", "check_output", "create_temp_file", "replace_with"]


_KINDS = [(stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")]


def check_output(path: str | os.PathLike[str]) -> os.stat_result | None:
    """What ``path`` names now, when a new file is to take its place: nothing (None) or a regular file
    (its status); UnsafeOutputError for anything else."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(status.st_mode):
        return status
    kind = next((name for test, name in _KINDS if test(status.st_mode)), "not a regular file")
    why = {
        "a folder": "give the path of a file to write (a file name inside the folder, say)",
        "a symbolic link": "writing would replace the link, not what it points to; give the path of the file itself",
    }.get(kind, "writing would replace it with a regular file; give the path of a file to write")
    raise UnsafeOutputError("MD706", f"the output exists and is {kind}: {why}", os.fspath(path))


def replace_with(temp_path: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename the finished ``temp_path`` onto ``path``: refused unless ``path`` is (still) nothing or a
    regular file, whose mode, owner and group the new file takes. Callers remove ``temp_path`` on error."""
    previous = check_output(path)
    if previous is not None:
        os.chmod(temp_path, stat.S_IMODE(previous.st_mode))
        ours = os.stat(temp_path)
        if (ours.st_uid, ours.st_gid) != (previous.st_uid, previous.st_gid):
            with contextlib.suppress(PermissionError):  # only root may give a file away
                os.chown(temp_path, previous.st_uid, previous.st_gid)
        if previous.st_nlink > 1:
            others = previous.st_nlink - 1
            log.warning("%s had %s; %s the old content (the output is a new file)", os.fspath(path),
                        count(others, "other hard link"), "it keeps" if others == 1 else "they keep")
    os.replace(temp_path, path)


def create_temp_file(directory: str | os.PathLike[str], basename: str) -> tuple[str, int]:
    """A new, empty, hidden file in ``directory`` (the target's folder, so that the rename is atomic):
    (its path, an fd open for writing). An error names the target, ``directory``/``basename``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    if not os.path.isdir(directory):  # say which folder, not the temporary file's name
        raise FileNotFoundError(2, "the folder to write into does not exist; create it first", os.fspath(directory))
    with naming(os.path.join(os.fspath(directory), basename), doing=f"cannot create a file in {os.fspath(directory)}"):
        for _ in range(100):
            temp_path = os.path.join(os.fspath(directory), f".{basename[:200]}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
            try:
                return temp_path, os.open(temp_path, flags, 0o666)
            except FileExistsError:
                continue
    raise FileExistsError(f"could not create a temporary file in {directory}")


def is_internal_name(name: object) -> bool:
    """Whether ``name`` (an OSError's filename) is one mdiff made for its own work, which a message must not
    show: a temporary file or folder's hidden name (``.NAME.<random>.tmp``, alone or in a path) or a
    descriptor's ``/proc/self/fd/N`` (regular_files.reopenable)."""
    if not isinstance(name, (str, bytes, os.PathLike)):
        return False
    text = os.fsdecode(name)
    return text.startswith("/proc/self/fd/") or any(
        part.startswith(".") and part.endswith(TEMP_SUFFIX) for part in text.split(os.sep))


@contextlib.contextmanager
def naming(path: str | os.PathLike[str], staging: str | None = None, doing: str | None = None) -> Iterator[None]:
    """An OSError of the block that names a temporary file, or an entry below ``staging`` (the temporary folder
    the work is done in, or a descriptor's ``/proc/self/fd/N`` the block writes through), is raised naming ``path``
    instead — the file or folder the user knows —, or the same entry below ``path``; ``doing`` says what failed,
    before the system's reason. Errors naming anything else (an input) pass as they are."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, UnsafeOutputError):
            raise
        below = staging.rstrip(os.sep) + os.sep if staging is not None else None
        for name in (exc.filename, exc.filename2):
            inner = os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else ""
            if below is not None and inner.startswith(below):
                rest = inner[len(below):]
                shown = os.fspath(path) if is_internal_name(rest) else os.path.join(os.fspath(path), rest)
                break
            if inner and is_internal_name(inner) and not inner.startswith("/proc/self/fd/"):
                shown = os.fspath(path)
                break
        else:
            raise
        reason = exc.strerror or str(exc)
        raise OSError(exc.errno, f"{doing}: {reason}" if doing else reason, shown) from exc


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a folder by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a rename in ``directory`` durable, where the platform can (not every one can sync a folder)."""
    with contextlib.suppress(OSError):
        fsync_path(directory)


class SyncingWriter(io.BufferedWriter):
    """A buffered file that syncs what it has written on another thread as it goes (threads.Writeback).
    An OSError of a write or a sync names ``shown`` — the file the user named — not its temporary name."""

    def __init__(self, raw: io.FileIO, shown: str | os.PathLike[str] | None = None):
        super().__init__(raw)
        self.writeback = Writeback(lambda: os.fsync(raw.fileno()))
        self.shown = os.fspath(shown) if shown is not None else None

    def write(self, data) -> int:
        try:
            n = super().write(data)
            self.writeback.wrote(n, self.flush)
        except OSError as exc:
            raise self._named(exc) from exc
        return n

    def finish(self) -> None:
        """Flush, wait for the sync in flight, sync the rest."""
        try:
            self.flush()
            self.writeback.wait()
            os.fsync(self.fileno())
        except OSError as exc:
            raise self._named(exc) from exc

    def _named(self, exc: OSError) -> OSError:
        if self.shown is None or (exc.filename is not None and not is_internal_name(exc.filename)):
            return exc
        return OSError(exc.errno, exc.strerror or str(exc), self.shown)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A new file that replaces ``path`` only once completely written and synced; on any exception
    nothing is left behind and ``path`` keeps what it held."""
    path = os.fspath(path)
    check_output(path)  # before anything is written
    directory = os.path.dirname(os.path.abspath(path))
    temp_path, fd = create_temp_file(directory, os.path.basename(path))
    try:
        file = SyncingWriter(io.FileIO(fd, "wb"), path)
    except BaseException:
        os.close(fd)
        os.unlink(temp_path)
        raise
    try:
        try:
            yield file
            file.finish()
        finally:
            file.writeback.wait()  # no sync may outlive the file it syncs
            file.close()
        with naming(path):
            replace_with(temp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise
    fsync_directory(directory)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8) as the whole new content of ``path``, atomically (refs, HEAD)."""
    with atomic_output(path) as file:
        file.write(text.encode("utf-8"))


def exchange(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> bool:
    """Swap two entries of the same file system in one step (Linux ``renameat2(RENAME_EXCHANGE)``, macOS
    ``renamex_np(RENAME_SWAP)``): each path then names what the other named, and no moment exists at which
    either names nothing. False where the platform or the file system cannot (the caller then takes two
    renames); OSError when it could and failed."""
    import ctypes
    import sys

    a, b = os.fsencode(first), os.fsencode(second)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        at_fdcwd, rename_exchange = -100, 2
        result = libc.renameat2(at_fdcwd, a, at_fdcwd, b, rename_exchange)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        result = libc.renamex_np(a, b, 2)  # RENAME_SWAP
    else:
        return False
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):  # not on this system or file system
        return False
    raise OSError(code, os.strerror(code), os.fsdecode(b))
