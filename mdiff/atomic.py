"""How mdiff writes every file: under a temporary name beside the target, synced, then renamed into
place — so that a reader, or a process killed at any moment, sees the old file or the new one,
never a part. Temporary files are hidden (``.NAME.<random>.tmp``) and created with mode 0o666, so
that the umask decides the permissions, as for any file a user makes.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from mdiff.threads import Writeback

TEMP_SUFFIX = ".tmp"


def create_temp_file(directory: str | os.PathLike[str], basename: str) -> tuple[str, int]:
    """A new, empty, hidden file in ``directory`` (the target's folder, so that the rename is atomic):
    (its path, an fd open for writing)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    if not os.path.isdir(directory):  # say which folder, not the temporary file's name
        raise FileNotFoundError(2, "the folder to write into does not exist; create it first", os.fspath(directory))
    for _ in range(100):
        temp_path = os.path.join(os.fspath(directory), f".{basename[:200]}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
        try:
            return temp_path, os.open(temp_path, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file in {directory}")


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
    """A buffered file that syncs what it has written on another thread as it goes (threads.Writeback)."""

    def __init__(self, raw: io.FileIO):
        super().__init__(raw)
        self.writeback = Writeback(lambda: os.fsync(raw.fileno()))

    def write(self, data) -> int:
        n = super().write(data)
        self.writeback.wrote(n, self.flush)
        return n

    def finish(self) -> None:
        """Flush, wait for the sync in flight, sync the rest."""
        self.flush()
        self.writeback.wait()
        os.fsync(self.fileno())


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A new file that replaces ``path`` only once completely written and synced; on any exception
    nothing is left behind and ``path`` keeps what it held."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    temp_path, fd = create_temp_file(directory, os.path.basename(path))
    file = SyncingWriter(io.FileIO(fd, "wb"))
    try:
        try:
            yield file
            file.finish()
        finally:
            file.writeback.wait()  # no sync may outlive the file it syncs
            file.close()
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise
    fsync_directory(directory)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """For writers that open a file by name (libhdf5): a new temporary path beside ``path``, renamed to
    ``path`` once the block ends without an exception (the writer must have closed and synced it)."""
    target = Path(path)
    temp_path, fd = create_temp_file(target.parent, target.name)
    os.close(fd)
    try:
        yield Path(temp_path)
        os.replace(temp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise
    fsync_directory(target.parent)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8) as the whole new content of ``path``, atomically (refs, HEAD)."""
    with atomic_output(path) as file:
        file.write(text.encode("utf-8"))
