"""SPEC.md §13.1: the files under a repository's ``.mdiff/``, reached without following a link.

The folder may have been prepared by a stranger: every file under ``.mdiff/`` is reached through
folders opened one at a time without following a symbolic link, opened without blocking, required
to be a regular file and read within a bound; no message shows a malformed file's content. Every
write is atomic (temporary file, fsync, rename). This is the floor the refs, the commit files and
the lock stand on; it knows nothing of what the files mean.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from mdiff.atomic import TEMP_SUFFIX, fsync_directory, naming
from mdiff.errors import RepositoryError
from mdiff.regular_files import BINARY, CLOEXEC, DIRECTORY, NOFOLLOW, NONBLOCK, NotRegularFile, kind_of, open_regular
from mdiff.repo.names import MAX_BRANCH_BYTES, MAX_SMALL_FILE_BYTES, REPO_DIR, shown

# os.open and friends relative to an open folder (every POSIX system); elsewhere, paths checked with lstat
_AT = {os.open, os.mkdir, os.rename, os.unlink, os.stat} <= os.supports_dir_fd and os.scandir in os.supports_fd


def rename_in(fd: int | None, prefix: str, source: str, target: str) -> None:
    """Rename ``source`` to ``target`` in one folder (``fd``, or the path ``prefix``), replacing it."""
    if fd is None:
        os.replace(prefix + source, prefix + target)
    else:
        os.rename(source, target, src_dir_fd=fd, dst_dir_fd=fd)  # POSIX rename replaces the target


@contextlib.contextmanager
def removed_on_failure(fd: int | None, prefix: str, temp: str) -> Iterator[None]:
    """The file ``temp`` of a folder (``fd``, or the path ``prefix``) removed again if the block fails: an
    error never leaves a writer's temporary file behind (a killed writer's may stay: §13.1 names them)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(prefix + temp, dir_fd=fd)
        raise


def create_exclusive(fd: int | None, prefix: str, temp: str) -> int:
    """A new file ``temp`` in the folder, opened for writing: never an existing one, never through a link."""
    return os.open(prefix + temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC | BINARY, 0o666, dir_fd=fd)


def write_all(out: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]


class RepositoryFolder:
    """``.mdiff/`` of the repository at ``root``: its files by relative name, no link followed inside it."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / REPO_DIR

    def _shown_path(self, relative: str) -> str:
        return shown(str(self.dir / relative))

    def _not_regular(self, relative: str, kind: str) -> RepositoryError:
        why = ("a reader follows no link inside .mdiff/" if kind == "a symbolic link"
               else "it is not a regular file")
        return RepositoryError("MD801", f"{self._shown_path(relative)} is {kind}: {why} (§13.1)")

    @contextlib.contextmanager
    def _folder(self, parts: Sequence[str], create: bool = False) -> Iterator[tuple[int | None, str]]:
        """(dir_fd, prefix) for the folder ``.mdiff/<parts>``: a name ``prefix + NAME`` relative to
        ``dir_fd`` is a file in it. Each part is a real folder, not a link (MD801 otherwise); a missing
        one is FileNotFoundError, unless ``create`` makes it. ``.mdiff`` itself may be a link."""
        if not _AT:
            path = self.dir
            for i, part in enumerate(parts):
                path = path / part
                if create:
                    with contextlib.suppress(FileExistsError):
                        path.mkdir()
                mode = os.lstat(path).st_mode
                if not stat.S_ISDIR(mode):
                    raise self._not_folder("/".join(parts[:i + 1]), kind_of(mode))
            yield None, str(path) + os.sep
            return
        fd = os.open(self.dir, os.O_RDONLY | DIRECTORY | CLOEXEC)
        try:
            for i, part in enumerate(parts):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=fd)
                try:
                    inner = os.open(part, os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC | NONBLOCK, dir_fd=fd)
                except (FileNotFoundError, PermissionError):
                    raise
                except OSError:
                    raise self._not_folder("/".join(parts[:i + 1]),
                                           kind_of(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)) from None
                os.close(fd)
                fd = inner
            yield fd, ""
        finally:
            os.close(fd)

    def _not_folder(self, relative: str, kind: str) -> RepositoryError:
        why = "a reader follows no link inside .mdiff/" if kind == "a symbolic link" else "a folder belongs there"
        return RepositoryError("MD801", f"{self._shown_path(relative)} is {kind}: {why} (§13.1)")

    def kind(self, relative: str) -> str | None:
        """What ``.mdiff/<relative>`` is ("a regular file", "a folder", "a symbolic link", …), None if missing."""
        *parts, name = relative.split("/")
        try:
            with self._folder(parts) as (fd, prefix):
                return kind_of(os.stat(prefix + name, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return None

    def _open_file(self, relative: str) -> tuple[int, os.stat_result]:
        """(descriptor, fstat) of the regular file ``.mdiff/<relative>``, opened without blocking and
        without following a link; MD801 for anything else; FileNotFoundError when it is missing."""
        *parts, name = relative.split("/")
        with self._folder(parts) as (fd, prefix):
            try:
                return open_regular(prefix + name, follow_links=False, dir_fd=fd)
            except NotRegularFile as exc:
                raise self._not_regular(relative, exc.kind) from None

    def _read_small(self, relative: str, limit: int = MAX_SMALL_FILE_BYTES) -> str | None:
        """The text of ``format``, HEAD or a ref (None when missing): at most ``limit`` bytes read."""
        try:
            fd, _ = self._open_file(relative)
        except FileNotFoundError:
            return None
        try:
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: longer than "
                                           f"{limit} bytes (§13.1)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise RepositoryError("MD801", f"{self._shown_path(relative)} is malformed: not UTF-8 text") from None

    def _write_small(self, relative: str, text: str) -> None:
        """``text`` as the whole new content of ``.mdiff/<relative>``, atomically (temporary file,
        fsync, rename) in its folder, opened without following a link; only a regular file is replaced."""
        self._write_atomic(relative, [text.encode("utf-8")])

    def _write_atomic(self, relative: str, chunks: Iterable[bytes]) -> int:
        """``chunks``, written one after the other, as the whole new content of ``.mdiff/<relative>``,
        atomically, as :meth:`_write_small` writes; returns the bytes written."""
        *parts, name = relative.split("/")
        written = 0
        with naming(self._shown_path(relative)), self._folder(parts, create=True) as (fd, prefix):
            with contextlib.suppress(FileNotFoundError):
                kind = kind_of(os.stat(prefix + name, dir_fd=fd, follow_symlinks=False).st_mode)
                if kind != "a regular file":
                    raise RepositoryError("MD801", f"{self._shown_path(relative)} is {kind}; mdiff replaces only a "
                                                   "regular file there (§13.1)")
            temp = f".{name[:64]}.{secrets.token_hex(8)}{TEMP_SUFFIX}"  # within 255 bytes whatever the name
            out = create_exclusive(fd, prefix, temp)
            with removed_on_failure(fd, prefix, temp):
                try:
                    for data in chunks:
                        write_all(out, data)
                        written += len(data)
                    os.fsync(out)
                finally:
                    os.close(out)
                rename_in(fd, prefix, temp, name)
            self._sync_folder(fd, prefix)
        return written

    @staticmethod
    def _sync_folder(fd: int | None, prefix: str) -> None:
        if fd is None:
            fsync_directory(prefix)
        else:
            with contextlib.suppress(OSError):
                os.fsync(fd)

    def _names_in(self, parts: Sequence[str]) -> list[tuple[str, bool]]:
        """(name, is a real folder) of each entry of ``.mdiff/<parts>``, sorted."""
        with self._folder(parts) as (fd, prefix):
            with os.scandir(fd if fd is not None else prefix) as entries:
                return sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)

    def _names_under(self, parts: list[str]) -> list[str]:
        """The path, relative to ``.mdiff/<parts>``, of every entry below it that is not a folder
        (hidden ones aside: a writer's temporary files, §13.1); FileNotFoundError when it is missing."""
        found: list[str] = []

        def walk(inner_parts: list[str]) -> None:
            for name, is_folder in self._names_in([*parts, *inner_parts]):
                if name.startswith("."):
                    continue  # a writer's temporary file (§13.1)
                inner = [*inner_parts, name]
                if is_folder and len("/".join(inner).encode("utf-8", "surrogateescape")) < MAX_BRANCH_BYTES:
                    walk(inner)
                else:  # a file; or a folder no ref name can reach into, reported as it is
                    found.append("/".join(inner))

        walk([])
        return found

    def remove_entry(self, relative: str) -> None:
        """Remove the entry ``.mdiff/<relative>`` that is not a folder (whatever it is; nothing it points to)."""
        *parts, name = relative.split("/")
        with contextlib.suppress(FileNotFoundError):
            with self._folder(parts) as (fd, prefix):
                os.unlink(prefix + name, dir_fd=fd)
                self._sync_folder(fd, prefix)

    def ref_files(self, folder: str) -> list[str]:
        """The names, relative to ``.mdiff/<folder>``, of the entries below it that are not folders
        (temporary ones aside), sub-folders walked without following a link; [] when it is missing."""
        found: list[str] = []

        def walk(parts: list[str]) -> None:
            for name, is_folder in self._names_in([*folder.split("/"), *parts]):
                if name.startswith("."):
                    continue
                inner = [*parts, name]
                if is_folder and len("/".join(inner).encode("utf-8", "surrogateescape")) < MAX_BRANCH_BYTES:
                    walk(inner)
                elif not is_folder:
                    found.append("/".join(inner))

        with contextlib.suppress(FileNotFoundError):
            walk([])
        return found
