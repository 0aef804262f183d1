"""SPEC.md §13.1, §13.6: working records — per branch, the folder or file last committed from or checked out to
on it, and what it held then — so that `mdiff status` without an argument says whether it changed since.

A record is local working information, as git's index is: it lives in ``.mdiff/working/<ref>`` (``<ref>``:
``refs/heads/<branch>``, or ``HEAD`` while HEAD is detached), is never part of a commit, and is neither fetched,
pushed nor cloned. It only tells ``status`` where to look: a missing or malformed one is no record (a malformed
one with a warning), and nothing a commit or checkout does depends on it. It is read as any file of ``.mdiff/``
(no link followed, a regular file, at most :data:`MAX_RECORD_BYTES`), written atomically by the folder layer.

What a record holds of each file — size, modification and change time, inode, sha256 — lets ``status`` look
cheaply: a file whose status is unchanged is taken as unchanged; only the others are hashed, and compared with
the sha256 recorded. A file that moved while it was committed or hashed is recorded without a sha256, and so
counts as changed. A committed ``.safetensors`` file is recorded by its tensors digest instead (:func:`tensors_digest`):
made of the sha256 the commit took of each value it read, so that the commit does not read and hash the file a
second time. This module reads no commit: it needs neither numpy nor libhdf5.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from mdiff.errors import RepositoryError
from mdiff.format.paths import matches_glob
from mdiff.repo.checkpoint_digest import safetensors_tiling, tensor_sha256
from mdiff.repo.folder import RepositoryFolder
from mdiff.repo.names import COMMIT_ID, valid_branch

log = logging.getLogger(__name__)

FOLDER = "working"
FORMAT = "mdiff-working 1"
MAX_RECORD_BYTES = 16 << 20  # ~150 bytes a file: a record of the largest folder it lists
MAX_FILES = 100_000  # files a record lists, and a look at a folder walks, at most
_BLOCK = 1 << 20


@dataclass(frozen=True)
class FileFacts:
    """What a file was when recorded: its status (the cheap check) and its sha256 (None: unknown, e.g. it
    changed while it was committed; such a file counts as changed)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    sha256: str | None
    tensors: str | None = None  # a .safetensors file's instead of its sha256: :func:`tensors_digest`

    @classmethod
    def of(cls, status: os.stat_result, sha256: str | None, tensors: str | None = None) -> FileFacts:
        return cls(status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, sha256, tensors)

    @property
    def known(self) -> bool:
        """Whether what the file held is known (a sha256 or a tensors digest): else it counts as changed."""
        return self.sha256 is not None or self.tensors is not None

    def same_status(self, status: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino) == \
            (status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)


@dataclass(frozen=True)
class WorkingRecord:
    """The folder (or file) at ``path`` as ``action`` ("commit" or "checkout") left it at ``commit``, on ``ref``."""

    ref: str
    action: str
    commit: str
    path: str  # absolute
    kind: str  # "folder" | "file"
    ignore: tuple[str, ...]  # globs of a folder's files that are not part of the state (training state, --exclude)
    files: dict[str, FileFacts]  # by path relative to ``path`` ("/"-separated); a file's: its own name
    time: int  # seconds since 1970 when recorded

    def to_json(self) -> dict:
        return {"format": FORMAT, "ref": self.ref, "action": self.action, "commit": self.commit, "path": self.path,
                "kind": self.kind, "ignore": list(self.ignore), "time": self.time,
                "files": {name: {"size": f.size, "mtime_ns": f.mtime_ns, "ctime_ns": f.ctime_ns, "ino": f.ino,
                                 "sha256": f.sha256, **({"tensors": f.tensors} if f.tensors is not None else {})}
                          for name, f in sorted(self.files.items())}}

    @classmethod
    def from_json(cls, data: object) -> WorkingRecord:
        """The record ``data`` describes; ValueError (saying what) when it is not one."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a JSON object with \"format\": {FORMAT!r}")
        ref, action, commit, path, kind = (data.get(k) for k in ("ref", "action", "commit", "path", "kind"))
        if not (isinstance(ref, str) and (ref == "HEAD" or (ref.startswith("refs/heads/")
                                                            and valid_branch(ref[len("refs/heads/"):])))):
            raise ValueError("\"ref\" is neither refs/heads/<branch> nor HEAD")
        if action not in ("commit", "checkout") or kind not in ("folder", "file"):
            raise ValueError("\"action\" or \"kind\" is unknown")
        if not (isinstance(commit, str) and COMMIT_ID.fullmatch(commit)):
            raise ValueError("\"commit\" is not a commit id")
        if not (isinstance(path, str) and os.path.isabs(path) and path.isprintable()):
            raise ValueError("\"path\" is not an absolute path")
        ignore, files, when = data.get("ignore"), data.get("files"), data.get("time")
        if not (isinstance(ignore, list) and all(isinstance(g, str) for g in ignore)):
            raise ValueError("\"ignore\" is not a list of globs")
        if not isinstance(when, int) or isinstance(when, bool):
            raise ValueError("\"time\" is not a number of seconds")
        if not isinstance(files, dict) or len(files) > MAX_FILES or (kind == "file" and len(files) != 1):
            raise ValueError("\"files\" is not an object of at most one entry a file")
        facts = {}
        for name, entry in files.items():
            if not (_relative_path(name) if kind == "folder" else name == os.path.basename(path)):
                raise ValueError("a name of \"files\" is not a path inside the folder, or the file's own name")
            entry = entry if isinstance(entry, dict) else {}
            numbers = [entry.get(k) for k in ("size", "mtime_ns", "ctime_ns", "ino")]
            sha256, tensors = entry.get("sha256"), entry.get("tensors")
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers) or not all(
                    d is None or (isinstance(d, str) and COMMIT_ID.fullmatch(d)) for d in (sha256, tensors)) or (
                    sha256 is not None and tensors is not None):
                raise ValueError(f"the entry of {name!r} is malformed")
            size, mtime_ns, ctime_ns, ino = (int(n) for n in numbers)  # type: ignore[arg-type]
            facts[name] = FileFacts(size, mtime_ns, ctime_ns, ino, sha256, tensors)
        return cls(ref, action, commit, path, kind, tuple(ignore), facts, when)


@dataclass(frozen=True)
class Since:
    """How the recorded folder or file differs now: ``missing`` (it is gone, or is no longer a folder or a
    file as recorded), or each file that is "modified", "added" or "deleted" since; ``incomplete`` when the
    folder held more files than a look walks (:data:`MAX_FILES`)."""

    missing: bool = False
    files: dict[str, str] = field(default_factory=dict)
    incomplete: bool = False
    # files whose status moved but whose content is the recorded one: their new status, for :func:`refresh`
    refreshed: dict[str, FileFacts] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.missing or bool(self.files) or self.incomplete


def ref_of(branch: str | None) -> str:
    """The ref a record is kept for: the branch's, or HEAD while detached."""
    return f"refs/heads/{branch}" if branch else "HEAD"


# ---------------------------------------------------------------- reading and writing .mdiff/working/
def read(folder: RepositoryFolder, ref: str) -> WorkingRecord | None:
    """The record of ``ref``; None when there is none, or (with a warning) when it cannot be read or is malformed."""
    relative = f"{FOLDER}/{ref}"
    try:
        text = folder._read_small(relative, MAX_RECORD_BYTES)
    except (RepositoryError, OSError) as exc:
        log.warning("ignoring the working record %s: %s", folder._shown_path(relative),
                    exc.message if isinstance(exc, RepositoryError) else exc.strerror or exc)
        return None
    if text is None:
        return None
    try:
        record = WorkingRecord.from_json(json.loads(text))
        if record.ref != ref:
            raise ValueError(f"it is the record of {record.ref}")
    except (ValueError, RecursionError) as exc:
        log.warning("ignoring the working record %s: it is malformed (%s)", folder._shown_path(relative), exc)
        return None
    return record


def write(folder: RepositoryFolder, record: WorkingRecord) -> None:
    """``record`` as the whole new ``.mdiff/working/<ref>``, atomically. The record of a deleted branch in the
    way (a file ``exp`` where ``exp/lora`` goes) is removed first: it belonged to no branch any longer."""
    relative = f"{FOLDER}/{record.ref}"
    data = (json.dumps(record.to_json(), indent=None, separators=(",", ":"), sort_keys=True) + "\n").encode("utf-8")
    parts = relative.split("/")
    for depth in range(2, len(parts)):  # a file where a folder of the path goes
        above = "/".join(parts[:depth])
        if folder.kind(above) == "a regular file":
            folder.remove_entry(above)
    folder._write_atomic(relative, [data])


def hash_ahead(path: str | os.PathLike[str], kind: str, before: Mapping[str, os.stat_result] | None,
               but_safetensors: bool = False) -> dict[str, Future]:
    """Each file of ``before`` (a :func:`scan` of ``path``) hashed on the pool from now on, while a commit reads it:
    :func:`make` takes such a sha256 where the file's status is still ``before``'s, as it takes its own. With
    ``but_safetensors``, not the ``.safetensors`` files: the commit's own hashes of their tensors make their
    digests (:func:`tensors_digest_from`), where they can."""
    from mdiff.threads import in_pool, shared_pool

    if not before or in_pool():
        return {}
    root = os.path.abspath(os.fspath(path))
    pool = shared_pool()
    return {name: pool.submit(_sha256, _target(root, kind, name)) for name in before
            if not (but_safetensors and name.endswith(SAFETENSORS))}


def remember(folder: RepositoryFolder, branch: str | None, action: str, commit_id: str, path: str | os.PathLike[str],
             kind: str, ignore: Sequence[str] = (), before: Mapping[str, os.stat_result] | None = None,
             ahead: Mapping[str, Future] | None = None, values: Mapping[str, Value] | None = None) -> None:
    """Record ``path`` as ``action`` left it at ``commit_id`` on ``branch`` (None: detached HEAD), each file
    hashed; a file whose status moved since ``before`` (its status when the commit began to read it) is recorded
    without a sha256. ``values``: the state the commit made of the files, each parameter's (shape, dtype name,
    sha256), whose hashes make the ``.safetensors`` files' digests. Never raises for the record's sake: a record
    that cannot be made or written is logged, and the commit or checkout it follows stands."""
    try:
        write(folder, make(ref_of(branch), action, commit_id, path, kind, ignore, before, ahead, values))
    except (OSError, RepositoryError, ValueError) as exc:
        log.warning("%s is not recorded for `mdiff status`: %s", os.fspath(path),
                    exc.message if isinstance(exc, RepositoryError) else exc)


def make(ref: str, action: str, commit_id: str, path: str | os.PathLike[str], kind: str, ignore: Sequence[str] = (),
         before: Mapping[str, os.stat_result] | None = None, ahead: Mapping[str, Future] | None = None,
         values: Mapping[str, Value] | None = None) -> WorkingRecord:
    """The record of ``path`` now: every file's status and sha256 (in the shared pool, hashing runs in parallel;
    where ``ahead`` (:func:`hash_ahead`) hashed a file since ``before``, that sha256, the file's status being
    checked against ``before``'s as for any). A ``.safetensors`` file whose every tensor ``values`` (the state a
    commit made of it) holds gets its tensors digest from those hashes instead (:func:`tensors_digest_from`):
    its bytes are not read again. ValueError when a folder holds more than :data:`MAX_FILES` files."""
    root = os.path.abspath(os.fspath(path))
    found, complete = scan(root, kind, ignore)
    if found is None:
        raise ValueError("it is gone")
    if not complete:
        raise ValueError(f"the folder holds more than {MAX_FILES} files")
    ahead = ahead if before is not None else None  # a sha256 hashed ahead stands only on the status before it
    values = values if before is not None else None  # so are the values the commit read
    hashed = {name: ahead[name].result() for name in found if ahead and name in ahead}
    digests = {name: tensors_digest_from(_target(root, kind, name), values) for name in found
               if values is not None and name not in hashed and name.endswith(SAFETENSORS)}
    digests = {name: digest for name, digest in digests.items() if digest is not None}
    rest = iter(_hash_all([_target(root, kind, name) for name in found if name not in hashed and name not in digests]))
    hashes = [None if name in digests else hashed[name] if name in hashed else next(rest) for name in found]
    files = {}
    for (name, status), sha256 in zip(found.items(), hashes):
        try:
            after = os.stat(_target(root, kind, name))
        except OSError:
            after = None
        steady = after is not None and FileFacts.of(status, None).same_status(after) and (
            before is None or (name in before and FileFacts.of(before[name], None).same_status(after)))
        files[name] = FileFacts.of(status, sha256 if steady else None, digests.get(name) if steady else None)
    return WorkingRecord(ref, action, commit_id, root, kind, tuple(ignore), files, int(time.time()))


# ---------------------------------------------------------------- a .safetensors file's tensors digest
SAFETENSORS = ".safetensors"
Value = tuple[tuple[int, ...], str, str | None]  # a parameter's shape, dtype name and sha256 (None: inexact)
_DIGEST_PREFIX = b"mdiff safetensors tensors 1\n"


def _digest(head: bytes, sha256s: Iterable[str]) -> str:
    return hashlib.sha256(_DIGEST_PREFIX + head + b"".join(bytes.fromhex(s) for s in sha256s)).hexdigest()


@contextlib.contextmanager
def _opened(path: str) -> Iterator[int | None]:
    """A descriptor of the regular file at ``path`` (not through a link), closed after; None where there is none."""
    from mdiff.regular_files import NotRegularFile, open_regular

    try:
        fd, _ = open_regular(path)
    except (OSError, NotRegularFile):
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def tensors_digest(path: str) -> str | None:
    """A ``.safetensors`` file's tensors digest: the SHA-256 of a fixed prefix, the file's length field and header,
    and the SHA-256 of each tensor's bytes in the order they lie in the file — as one-to-one with the file's bytes
    as its own sha256, but made of the hashes a commit takes of each value anyway. None where the file is none
    such (:func:`checkpoint_digest.safetensors_tiling`) or cannot be read."""
    with _opened(path) as fd:
        tiling = safetensors_tiling(fd) if fd is not None else None
        if fd is None or tiling is None:
            return None
        hashes = []
        for begin, end, *_ in tiling.tensors:
            sha256 = tensor_sha256(fd, begin, end)
            if sha256 is None:
                return None
            hashes.append(sha256)
    return _digest(tiling.head, hashes)


def tensors_digest_from(path: str, values: Mapping[str, Value]) -> str | None:
    """:func:`tensors_digest` of the ``.safetensors`` file at ``path`` from ``values`` — each parameter's shape,
    dtype and the sha256 of its canonical bytes, as a commit of the file found them — without reading its tensors:
    None (hash the file) unless every tensor of the file is a parameter there of its name, shape and dtype, with
    a sha256. Only the header is read."""
    with _opened(path) as fd:
        tiling = safetensors_tiling(fd) if fd is not None else None
    if tiling is None:
        return None
    hashes = []
    for _, _, name, dtype, shape in tiling.tensors:
        value = values.get(name)
        if value is None or value[2] is None or value[:2] != (tuple(shape), dtype):
            return None
        hashes.append(value[2])
    return _digest(tiling.head, hashes)


# ---------------------------------------------------------------- looking at the folder
def scan(path: str | os.PathLike[str], kind: str, ignore: Iterable[str] = ()) -> tuple[dict[str, os.stat_result] | None, bool]:
    """(the status of every file of the folder or file at ``path`` by relative name — hidden entries and those
    ``ignore`` matches left out, links to regular files followed, anything else not a file skipped —, whether
    the walk saw every file): (None, True) when ``path`` is not (or no longer) such a folder or file."""
    root = os.fspath(path)
    try:
        status = os.stat(root)
    except (FileNotFoundError, NotADirectoryError):
        return None, True
    if kind == "file":
        return ({os.path.basename(root): status}, True) if stat.S_ISREG(status.st_mode) else (None, True)
    if not stat.S_ISDIR(status.st_mode):
        return None, True
    patterns = tuple(ignore)
    found: dict[str, os.stat_result] = {}
    pending = [""]
    while pending:
        prefix = pending.pop()
        try:
            entries = sorted(os.scandir(os.path.join(root, prefix) if prefix else root), key=lambda e: e.name)
        except OSError:
            continue  # a folder that went, or that cannot be listed: its files are missing then
        for entry in entries:
            if entry.name.startswith("."):
                continue
            relative = f"{prefix}/{entry.name}" if prefix else entry.name
            if matches_glob(relative, patterns):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(relative)
                    continue
                info = entry.stat(follow_symlinks=True)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                if len(found) == MAX_FILES:
                    return found, False
                found[relative] = info
    return found, True


def changes_since(record: WorkingRecord) -> Since:
    """What differs between the folder (or file) now and ``record``: status first, then the sha256 of only the
    files whose status moved."""
    found, complete = scan(record.path, record.kind, record.ignore)
    if found is None:
        return Since(missing=True)
    changed = {name: "deleted" for name in record.files if name not in found}
    changed.update({name: "added" for name in found if name not in record.files})
    moved = [name for name in found if name in record.files and not record.files[name].same_status(found[name])]
    unknown = [name for name in found if name in record.files and not record.files[name].known]
    to_hash = [name for name in moved if record.files[name].known]
    for name in unknown:
        changed[name] = "modified"
    refreshed = {}
    paths = [(_target(record.path, record.kind, n), record.files[n].tensors is not None) for n in to_hash]
    for name, digest in zip(to_hash, _hash_all(paths)):
        facts = record.files[name]
        if digest != (facts.tensors if facts.tensors is not None else facts.sha256):
            changed[name] = "modified"
        else:
            refreshed[name] = FileFacts.of(found[name], facts.sha256, facts.tensors)
    if not complete:  # past the walk's end, nothing is known to be deleted
        changed = {name: kind for name, kind in changed.items() if kind != "deleted"}
    return Since(False, dict(sorted(changed.items())), not complete, refreshed)


def refresh(folder: RepositoryFolder, record: WorkingRecord, since: Since) -> None:
    """Keep the new status of the files ``since`` found touched but unchanged (as git refreshes its index), so that
    the next look does not hash them again; quietly nothing where the record cannot be written."""
    if not since.refreshed:
        return
    try:
        if read(folder, record.ref) != record:  # a commit or checkout recorded anew meanwhile: theirs stands
            return
        write(folder, dataclasses.replace(record, files={**record.files, **since.refreshed}))
    except (OSError, RepositoryError) as exc:
        log.debug("the working record of %s is not refreshed: %s", record.ref, exc)


def _target(root: str, kind: str, name: str) -> str:
    return root if kind == "file" else os.path.join(root, *name.split("/"))


def _relative_path(name: object) -> bool:
    parts = name.split("/") if isinstance(name, str) else [""]
    return all(part and not part.startswith(".") and part.isprintable() and os.sep not in part
               and (os.altsep is None or os.altsep not in part) for part in parts)


def _hash_all(paths: Sequence[str | tuple[str, bool]]) -> list[str | None]:
    """The sha256 of each file (None where it cannot be read as a regular file), several at a time; of a
    (path, True), its :func:`tensors_digest`."""
    from mdiff.threads import in_pool, shared_pool

    def one(path: str | tuple[str, bool]) -> str | None:
        if isinstance(path, tuple):
            return tensors_digest(path[0]) if path[1] else _sha256(path[0])
        return _sha256(path)

    if len(paths) <= 1 or in_pool():
        return [one(p) for p in paths]
    return list(shared_pool().map(one, paths))


def _sha256(path: str) -> str | None:
    from mdiff.regular_files import NotRegularFile, open_regular

    try:
        fd, _ = open_regular(path)
    except (OSError, NotRegularFile):
        return None
    digest = hashlib.sha256()
    try:
        while block := os.read(fd, _BLOCK):
            digest.update(block)
    except OSError:
        return None
    finally:
        os.close(fd)
    return digest.hexdigest()
