"""Structure walks and metadata of commit files, kept between processes outside every repository (SPEC.md §13.2).

A commit file is named by the sha256 of its bytes, and its structure walk (§8: every object header,
datatype, dataspace and chunk index, checked by an isolated child, §8.5) is a function of those bytes,
of the limits it was checked under and of this implementation. So once a walk has found a commit file
good, a reader that has verified another file's bytes against the same id (MD800) may read that file
by the kept walk instead of walking it again: a checkout of a long history then pays for each commit's
hash and data, not for a child's walk of each (10–30 ms a file).

A commit's metadata (§4: its `commit` attribute) is kept beside its walk, in an entry of its own, so that
`mdiff log` reads a history seen before with hashlib and json alone (no libhdf5, numpy or child). That
entry is bound to the bytes: it holds the attribute's text and the offset at which those very bytes lie
in the commit file, and is used only where the file, verified against its id, holds them there — an
entry edited to say another message, author or parent is found out and ignored (repo/objects.py).

The cache lives in the user's cache folder — ``$MDIFF_CACHE_DIR``, else where the platform keeps a
user's caches (platformdirs: ``$XDG_CACHE_HOME/mdiff`` or ``~/.cache/mdiff`` on Linux,
``~/Library/Caches/mdiff`` on macOS, ``%LOCALAPPDATA%\\mdiff\\Cache`` on Windows);
``MDIFF_CACHE_DIR=off`` turns it off — never in ``.mdiff/``, which whoever
handed over a repository could have filled with walks of other bytes. That folder, and each folder
below it that an entry lies in, must be the user's own and writable by no one else (group and others):
otherwise it is not used, with one warning. Entries are keyed by the commit id, the limits and the
source of this package (any change of the checks starts a new folder). A missing, unreadable or
malformed entry is a miss; a folder that cannot be written leaves the cache unused. Only walks without
an error are kept.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits

log = logging.getLogger(__name__)

ENV = "MDIFF_CACHE_DIR"
_OFF = {"off", "0", "none", "false"}
_ID = re.compile(r"[0-9a-f]{64}")
MAX_ENTRY_BYTES = 64 << 20  # a sealed JSON entry (a state's claims, repo/state_cache.py)
# A kept walk is the child's compact answer (hdf5walk/wire.py): ~180 bytes an object at 10^5 parameters, each with
# a ~300-byte update text. Any walk up to this many bytes an object the limits admit is kept (a larger one is
# walked again each time, never refused): 512 MB under the default million objects.
MAX_WALK_BYTES_PER_OBJECT = 512
_WALK_MAGIC = b"mdiff walk 1\n"  # then the 32-byte seal, then the walk's bytes
_SEAL_BYTES = 32
MAX_METADATA_BYTES = 4 << 20  # a commit's metadata entry: its attribute's text and where it lies
_FILE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_warned: set[str] = set()  # the folders already warned about in this process: one warning each


def _refusal(found: os.stat_result) -> str | None:
    """Why a folder of the cache, as ``found`` describes it, must not be used; None when it may be: a
    folder that is the user's own and writable by no one else (POSIX: elsewhere, any folder)."""
    if not stat.S_ISDIR(found.st_mode):
        return "is not a folder"
    if os.name != "posix":
        return None
    if found.st_uid != os.geteuid():
        return "is not owned by you"
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by group or others"
    return None


def _warn_once(folder: Path | str, why: str) -> None:
    if str(folder) not in _warned:
        _warned.add(str(folder))
        log.warning("the cache folder %s %s: it is not used (entries there could be anyone's; "
                    "`chmod go-w` it, or set $%s to a folder of your own)", folder, why, ENV)


def usable_root(folder: Path) -> bool:
    """Whether the cache folder ``folder`` may be used: it is missing (it will be made, the user's own), or
    it is a folder (links followed) that is the user's own and writable by no one else — a warning, once,
    when it is not."""
    try:
        found = os.stat(folder)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.debug("cache folder %s cannot be looked at: %s", folder, exc)
        return False
    why = _refusal(found)
    if why is not None and why != "is not a folder":  # a file there: quietly unusable (nothing is kept)
        _warn_once(folder, why)
    return why is None


class WalkCache:
    """Walks kept as files ``walks/<key>/<id[:2]>/<id>.walk`` under ``folder`` (the compact form of an isolated
    child's walk, hdf5walk/wire.py, as its bytes behind a magic line and their seal), commits' metadata as
    ``metadata/<key>/<id[:2]>/<id>.json``, and other sealed JSON entries (None: no cache)."""

    def __init__(self, folder: Path | None):
        self.folder = folder

    @classmethod
    def default(cls) -> WalkCache:
        """The user's cache (see the module's text), or none where it is turned off, has no home, or is a
        folder that someone else owns or may write (with one warning)."""
        folder = configured_folder()
        return cls(folder if folder is not None and usable_root(folder) else None)

    # ------------------------------------------------------------ structure walks
    def get_walk(self, commit_id: str, limits: Limits) -> bytes | None:
        """The walk kept for ``commit_id`` under ``limits`` (the bytes of :meth:`Vetted.to_wire`), or None: missing,
        malformed, too large, or not sealed with this cache's key for this id (another commit's, or edited)."""
        path = self._path("walks", commit_id, limits, ".walk")
        data = self._read_bytes(path, len(_WALK_MAGIC) + _SEAL_BYTES + _walk_limit(limits))
        if data is None or not data.startswith(_WALK_MAGIC) or len(data) < len(_WALK_MAGIC) + _SEAL_BYTES:
            return None
        key = self._key(create=False)
        body = data[len(_WALK_MAGIC) + _SEAL_BYTES:]
        seal = data[len(_WALK_MAGIC):len(_WALK_MAGIC) + _SEAL_BYTES]
        if key is None or not hmac.compare_digest(seal, _walk_seal(key, commit_id, body)):
            return None
        return body

    def put_walk(self, commit_id: str, limits: Limits, walk: bytes | memoryview) -> None:
        """Keep ``walk`` (the bytes :meth:`Vetted.to_wire` made of a file with no error) for ``commit_id``, sealed
        with the cache's key and that id; quietly nothing where the folder cannot be written or the walk is
        over the size kept."""
        if len(walk) > _walk_limit(limits):
            log.debug("cache: the walk of %s is %d bytes: not kept", commit_id[:12], len(walk))
            return
        key = self._key(create=True)
        path = self._path("walks", commit_id, limits, ".walk")
        if key is not None and path is not None:
            self._write_bytes(path, [_WALK_MAGIC, _walk_seal(key, commit_id, walk), walk])

    def _key(self, create: bool) -> bytes | None:
        """The cache's secret (``key``: 32 random bytes, the user's own, mode 0600), made when ``create`` and
        missing; None where there is none to be had. A walk cannot be checked against the bytes it
        describes without walking them again, so a kept walk is believed only under this seal: an entry
        this user's mdiff wrote for that id — never one copied from another commit or edited."""
        if self.folder is None or not self.folders_usable(self.folder):
            return None
        path = self.folder / "key"
        if create and not path.exists():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600)
                with os.fdopen(fd, "w", encoding="ascii") as f:
                    f.write(secrets.token_hex(32))
            except FileExistsError:
                pass  # another process made it first: read it
            except OSError:
                return None
        try:
            fd = os.open(path, os.O_RDONLY | _FILE_FLAGS)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            found = os.fstat(f.fileno())
            if not stat.S_ISREG(found.st_mode) or stat.S_IMODE(found.st_mode) & 0o077 or (
                    os.name == "posix" and found.st_uid != os.geteuid()):
                return None
            text = f.read(65)
        return bytes.fromhex(text.decode("ascii")) if re.fullmatch(rb"[0-9a-f]{64}", text) else None

    # ------------------------------------------------------------ other sealed entries
    def get_sealed(self, kind: str, commit_id: str, limit: int = MAX_ENTRY_BYTES) -> dict | None:
        """An entry :meth:`put_sealed` kept under ``kind`` for ``commit_id`` (its ``id`` and seal dropped), or
        None: missing, malformed, another id's, or not sealed with this cache's key (edited, or not this
        user's mdiff's)."""
        entry = self._read(self._path(kind, commit_id, DEFAULT_LIMITS), limit)
        if not (isinstance(entry, dict) and entry.get("id") == commit_id and isinstance(entry.get("seal"), str)):
            return None
        key = self._key(create=False)
        body = {name: value for name, value in entry.items() if name != "seal"}
        if key is None or not hmac.compare_digest(entry["seal"], _seal(key, body)):
            return None
        del body["id"]
        return body

    def put_sealed(self, kind: str, commit_id: str, entry: dict) -> None:
        """Keep ``entry`` (JSON) under ``kind`` for ``commit_id``, sealed with the cache's key; quietly nothing
        where the folder cannot be written."""
        body = {**entry, "id": commit_id}
        key = self._key(create=True)
        if key is not None:
            self._write(self._path(kind, commit_id, DEFAULT_LIMITS), {**body, "seal": _seal(key, body)})

    def drop_sealed(self, kind: str, commit_id: str) -> None:
        """Remove the entry kept under ``kind`` for ``commit_id``, if any (quietly nothing otherwise)."""
        path = self._path(kind, commit_id, DEFAULT_LIMITS)
        if path is not None and self.folders_usable(path.parent):
            try:
                path.unlink()
            except OSError:
                pass

    # ------------------------------------------------------------ commits' metadata
    def get_metadata(self, commit_id: str, limits: Limits) -> tuple[str, int] | None:
        """(the text of the commit's `commit` attribute, the offset of its UTF-8 bytes in the commit file) as
        kept for ``commit_id`` under ``limits``, or None. A statement about the file's bytes: the caller
        uses it only once it has found those bytes at that offset of the file it verified."""
        entry = self._read(self._path("metadata", commit_id, limits), MAX_METADATA_BYTES)
        if not (isinstance(entry, dict) and set(entry) == {"id", "commit", "at"} and entry["id"] == commit_id
                and isinstance(entry["commit"], str) and type(entry["at"]) is int and entry["at"] >= 0):
            return None
        return entry["commit"], entry["at"]

    def put_metadata(self, commit_id: str, limits: Limits, text: str, at: int) -> None:
        """Keep the commit's metadata ``text``, found at offset ``at`` of the file that hashes to ``commit_id``
        and that this reader found good under ``limits``; nothing when an equal entry is kept already."""
        if self.get_metadata(commit_id, limits) != (text, at):
            self._write(self._path("metadata", commit_id, limits), {"id": commit_id, "commit": text, "at": at})

    # ------------------------------------------------------------ entries
    def _read(self, path: Path | None, limit: int) -> object:
        """The JSON of the entry at ``path``, or None (see :meth:`_read_bytes`; or not JSON)."""
        data = self._read_bytes(path, limit)
        try:
            return json.loads(data) if data is not None else None
        except (ValueError, RecursionError):
            return None

    def _read_bytes(self, path: Path | None, limit: int) -> bytes | None:
        """The bytes of the entry at ``path``, or None: no entry, a folder on the way that is not the user's
        own or that others may write, an entry that is not the user's, or over ``limit`` bytes."""
        if path is None or not self.folders_usable(path.parent):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | _FILE_FLAGS)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                found = os.fstat(f.fileno())
                if not stat.S_ISREG(found.st_mode) or (os.name == "posix" and found.st_uid != os.geteuid()):
                    return None
                if found.st_size > limit:
                    return None
                data = f.read(limit + 1)
            return data if len(data) <= limit else None
        except OSError:
            return None

    def _write(self, path: Path | None, entry: dict) -> None:
        self._write_bytes(path, [json.dumps(entry, separators=(",", ":")).encode("utf-8")])

    def _write_bytes(self, path: Path | None, parts: list[bytes | memoryview]) -> None:
        """Write ``parts`` as the entry at ``path``, whole or not at all (a temporary file renamed)."""
        if path is None:
            return
        temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            self.make_folders(path.parent)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600)
            with os.fdopen(fd, "wb") as f:
                for part in parts:
                    f.write(part)
            os.replace(temp, path)
        except OSError as exc:
            log.debug("cache: cannot keep %s: %s", path.name[:12], exc)
            try:
                temp.unlink()
            except OSError:
                pass

    def _below_root(self, folder: Path) -> list[Path]:
        """The folders from the cache folder's child down to ``folder``."""
        assert self.folder is not None
        parts = folder.relative_to(self.folder).parts
        return [self.folder.joinpath(*parts[:i + 1]) for i in range(len(parts))]

    def folders_usable(self, folder: Path) -> bool:
        """Whether the cache folder and every folder below it down to ``folder`` is the user's own and
        writable by no one else (a folder below it is never a link)."""
        if self.folder is None or not usable_root(self.folder):
            return False
        for below in self._below_root(folder):
            try:
                why = _refusal(os.lstat(below))
            except OSError:
                return False
            if why is not None:
                _warn_once(below, why)
                return False
        return True

    def make_folders(self, folder: Path) -> None:
        """Make the cache folder and the folders below it down to ``folder`` as the user's own (mode 0700);
        OSError when one of them is not usable."""
        assert self.folder is not None
        if not self.folder.is_dir():
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(self.folder, 0o700)
            except FileExistsError:
                pass
        for below in self._below_root(folder):
            try:
                os.mkdir(below, 0o700)
            except FileExistsError:
                pass
        if not self.folders_usable(folder):
            raise OSError(f"{folder} is not a folder of the user's own")

    def _path(self, kind: str, commit_id: str, limits: Limits, suffix: str = ".json") -> Path | None:
        source = _source_digest()
        if self.folder is None or source is None or not _ID.fullmatch(commit_id):
            return None
        key = hashlib.sha256(json.dumps([source, asdict(limits)], sort_keys=True).encode()).hexdigest()[:16]
        return self.folder / kind / key / commit_id[:2] / f"{commit_id}{suffix}"


def _walk_limit(limits: Limits) -> int:
    """The most bytes of a walk kept under ``limits``."""
    return max(MAX_ENTRY_BYTES, MAX_WALK_BYTES_PER_OBJECT * limits.max_objects)


def _walk_seal(key: bytes, commit_id: str, walk: bytes | memoryview) -> bytes:
    """HMAC-SHA256, under the cache's key, of the commit id and the walk's bytes: a walk kept for one id is not
    believed for another."""
    mac = hmac.new(key, b"walk\0" + commit_id.encode("ascii") + b"\0", "sha256")
    mac.update(walk)
    return mac.digest()


def _seal(key: bytes, entry: dict) -> str:
    """HMAC-SHA256 of the entry's canonical JSON under the cache's key."""
    return hmac.new(key, json.dumps(entry, sort_keys=True, separators=(",", ":")).encode("utf-8"), "sha256").hexdigest()


def configured_folder() -> Path | None:
    """The cache folder the environment names (see the module's text), whether or not it may be used."""
    configured = os.environ.get(ENV)
    if configured is not None:
        return None if configured.strip().lower() in _OFF or not configured.strip() else Path(configured)
    import platformdirs  # here, not at the top: only where the folder is computed (start-up time)

    try:
        base = platformdirs.user_cache_dir("mdiff", appauthor=False)
    except (OSError, KeyError, RuntimeError) as exc:  # no home to be found
        log.debug("no user cache folder: %s", exc)
        return None
    return Path(base) if os.path.isabs(base) else None


@lru_cache(maxsize=1)
def _source_digest() -> str | None:
    """sha256 over this package's Python sources: any change of what the walk checks is another key.
    None (no cache) where the sources cannot be read, as in a frozen or zipped install."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    try:
        for path in sorted(package.rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    except OSError:
        return None
    return digest.hexdigest() if digest.digest() != hashlib.sha256().digest() else None
