"""The parent's values for a commit, from the cheapest source that proves them: the checkpoint this
repository last committed, where its tensors still hash to the parent's (§13.4), else the replay.

A commit needs the state of its parent tensor by tensor, to diff against. Replaying it from the history
costs inflating and applying every update since the last snapshot, and grows along a chain; but whoever
commits one checkpoint after another (a training loop, the Trainer's callback, `mdiff commit` of each new
checkpoint folder) has usually just read the parent's values from a file that is still on disk. A tensor
of that file is used only when its sha256 is the one the parent's state records for that parameter — the
same check the replay ends with — so a file changed or removed since costs a hash and falls back, never a
wrong value.

Which checkpoint that was is remembered by the Repository object, and between processes in the user's
cache folder (``$MDIFF_CACHE_DIR``, as the walks: format/walk_cache.py), one small entry per repository:
the commit and the checkpoint's path. An entry only suggests where to look; what is found there is hashed.

Where one checkpoint file is committed again and again at one path (``mdiff commit model.safetensors``
after each epoch, the file written over in between), the parent's values are gone from it by the next
commit, which would replay the history back to the last snapshot — more each commit. So once a
repository's commits are seen writing over their file, each such commit keeps a copy of the file it
committed in the cache folder (:func:`keep_copy`: one per repository, replaced by the next, those of the
newest 4 repositories kept; copied by the kernel, where it can, and only where the disk keeps twice its size
free), and the next commit reads the
parent's values from that copy — hashed as any predecessor's, so a copy changed since is never believed.

The commit that writes a snapshot (§13.5) reads the new state's values the same way, from the checkpoint it has
just committed (a :class:`ParentValues` of its own state), instead of replaying the history since the last
snapshot: each where it hashes to the sha256 the state records, so the snapshot is the same, byte for byte.

A commit hashes every value it reads from its checkpoint (the new state's sha256); the next commit would read
those values again from that file as its parent's and hash them again. So this process remembers, for the
single-file checkpoints it committed last (:func:`watch`, :func:`learn`; :data:`MAX_KNOWN` files), each
tensor's sha256 with the identity and times of the file it was read from (``same_file``, what §13.2 calls
unchanged, as repo/held_files.py does), taken before any value was read; a value read again from that very
file, still unchanged once it has been read (an ``fstat`` a value), is then not hashed again — by the snapshot
the commit writes, and by the next commit. A write within the file system's timestamp granularity of the change
before it could leave the times as they were (the "racy" case of git's index): a file changed less than
:data:`RACY_NS` before it was looked at is not remembered, so that any later write moves its change time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mdiff.checkpoints.safetensors import SafetensorsReader
from mdiff.errors import MdiffError
from mdiff.format.dtypes import DType, canonical, dtype_of
from mdiff.format.walk_cache import WalkCache
from mdiff.regular_files import same_file
from mdiff.repo.changes import open_new_state
from mdiff.repo.claims import StateClaims
from mdiff.repo.state_cache import KnownFiles, KnownState
from mdiff.repo.states import StateFiles, StateView
from mdiff.updates.base import sha256_hex

log = logging.getLogger(__name__)


class ParentValues(Mapping[str, np.ndarray]):
    """The state ``view`` opens, its values read from ``predecessor`` (a checkpoint reader) where they hash to
    what the state records, else replayed by ``view``. Everything else — names, specs, claims, files,
    layout — is the view's."""

    def __init__(self, view: StateView | KnownState, predecessor: Mapping[str, Any] | None) -> None:
        self.view = view
        self._predecessor = predecessor
        self._sha256 = {name: sha256 for name, (_, _, sha256) in view.claims.parameters.items()}
        self._known = _known_of(predecessor)  # what this process hashed of that very file, unchanged since

    def __getitem__(self, name: str) -> np.ndarray:
        return self.checked(name)[0]

    def checked(self, name: str) -> tuple[np.ndarray, str | None]:
        """The value of ``name``, and the sha256 just computed from its bytes where the predecessor gave it (None
        where the view did): a snapshot's writer takes that as the value's, instead of hashing it again."""
        expected = self._sha256.get(name)
        if self._predecessor is not None and expected is not None and name in self._predecessor:
            try:
                value = canonical(np.asarray(self._predecessor[name]))
                if (value.shape, dtype_of(value)) == self.view.spec(name) \
                        and (self._unchanged(name, expected) or sha256_hex(value) == expected):
                    return value, expected
                log.debug("%s in the last committed checkpoint is not the parent's: it changed since", name)
            except (MdiffError, OSError, ValueError, KeyError) as exc:  # changed or gone: the history has the value
                log.debug("parent value of %s not read from the last checkpoint: %s", name, exc)
            self._predecessor = None  # one value changed since: the others most likely too, each a wasted hash
        return self.view[name], None

    def _unchanged(self, name: str, expected: str) -> bool:
        """Whether the value of ``name`` just read from the predecessor is the one this process hashed to
        ``expected`` (:func:`learn`): the file looked at after the read is still that very file, unchanged."""
        if self._known is None or self._known[1].get(name) != expected:
            return False
        status = _status(self._predecessor)
        return status is not None and same_file(self._known[0], status)

    def __iter__(self) -> Iterator[str]:
        return iter(self.view.keys())

    def __len__(self) -> int:
        return len(self.view)

    def __contains__(self, name: object) -> bool:
        return name in self.view

    def keys(self) -> Any:
        return self.view.keys()

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self.view.spec(name)

    @property
    def inexact(self) -> frozenset[str]:
        return self.view.inexact

    @property
    def claims(self) -> StateClaims:
        return self.view.claims

    @property
    def files(self) -> StateFiles | KnownFiles:
        return self.view.files

    @property
    def layout_bytes(self) -> bytes | None:
        return self.view.layout_bytes


def open_predecessor(stack: contextlib.ExitStack, path: str | os.PathLike[str] | None,
                     exclude: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The checkpoint at ``path`` opened lazily for its tensors, or None when it cannot be (gone, changed
    into something else): the replay serves then."""
    if path is None:
        return None
    try:
        return open_new_state(stack, path, exclude)
    except (MdiffError, OSError) as exc:
        log.debug("the last committed checkpoint %s cannot be read again: %s", path, exc)
        return None


RACY_NS = 2_000_000_000  # a file changed less than this before it was looked at may change unseen (coarse times)
MAX_KNOWN = 4  # files whose tensors' hashes this process remembers
_known: OrderedDict[tuple[int, int], tuple[os.stat_result, dict[str, str]]] = OrderedDict()
_watched: OrderedDict[tuple[int, int], os.stat_result] = OrderedDict()  # looked at, values not yet learned
_known_lock = threading.Lock()


def _status(reader: object) -> os.stat_result | None:
    """The identity and times of the one file ``reader`` reads its tensors from, where it is such a reader."""
    if not isinstance(reader, SafetensorsReader):
        return None
    try:
        return reader.status()
    except (OSError, ValueError):  # closed
        return None


def watch(reader: object) -> None:
    """Look at the checkpoint file ``reader`` reads before any of its values are read, for :func:`learn`;
    nothing where it cannot be trusted to show a later change (not one file, or changed within
    :data:`RACY_NS` of now)."""
    now = time.time_ns()
    status = _status(reader)
    if status is None or now - max(status.st_mtime_ns, status.st_ctime_ns) < RACY_NS:
        return
    with _known_lock:
        _watched[(status.st_dev, status.st_ino)] = status
        _watched.move_to_end((status.st_dev, status.st_ino))
        while len(_watched) > MAX_KNOWN:
            _watched.popitem(last=False)


def learn(reader: object, values: Mapping[str, tuple[Any, Any, str | None]]) -> None:
    """Remember ``values`` (name → (shape, dtype, sha256)) — the sha256 a commit computed of each value it read
    from ``reader`` — for the next use of that file (the snapshot of this commit's state, the next commit's
    parent), where :func:`watch` looked at it before its values were read and it is still that very file,
    unchanged."""
    status = _status(reader)
    if status is None:
        return
    key = (status.st_dev, status.st_ino)
    with _known_lock:
        watched = _watched.pop(key, None)
        if watched is None or not same_file(watched, status):
            return
        _known[key] = (watched, {name: sha256 for name, (_, _, sha256) in values.items() if sha256 is not None})
        _known.move_to_end(key)
        while len(_known) > MAX_KNOWN:
            _known.popitem(last=False)


def _known_of(reader: object) -> tuple[os.stat_result, Mapping[str, str]] | None:
    """The status and tensors' sha256 :func:`learn` remembered of the file ``reader`` reads, where it is that very
    file, unchanged (``same_file``) — to be looked at again after each value is read; None otherwise."""
    status = _status(reader)
    if status is None:
        return None
    with _known_lock:
        found = _known.get((status.st_dev, status.st_ino))
    return found if found is not None and same_file(found[0], status) else None


def forget_known() -> None:
    """Forget every file's remembered hashes (tests)."""
    with _known_lock:
        _known.clear()
        _watched.clear()


# (commit id, checkpoint path, exclude globs) of the checkpoint last committed in a repository
LastCommitted = tuple[str, str, tuple[str, ...]]
_MAX_ENTRY_BYTES = 64 << 10


def _cache_and_entry(repository: os.PathLike[str] | str) -> tuple[WalkCache, str] | None:
    cache = WalkCache.default()
    if cache.folder is None:
        return None
    key = hashlib.sha256(os.fsencode(os.path.realpath(repository))).hexdigest()[:32]
    return cache, os.path.join(cache.folder, "last-committed", f"{key}.json")


def _entry_path(repository: os.PathLike[str] | str) -> str | None:
    found = _cache_and_entry(repository)
    return None if found is None else found[1]


def remember(repository: os.PathLike[str] | str, last: LastCommitted) -> None:
    """Keep ``last`` for the next process that commits to ``repository``; quietly nothing where the cache
    folder cannot be written."""
    found = _cache_and_entry(repository)
    if found is None:
        return
    cache, path = found
    temp = f"{path}.{secrets.token_hex(6)}.tmp"
    try:
        cache.make_folders(Path(path).parent)  # the user's own, as every folder of the cache
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            json.dump({"commit": last[0], "path": os.path.abspath(last[1]), "exclude": list(last[2])}, out)
        os.replace(temp, path)
    except OSError as exc:
        log.debug("cannot remember the last committed checkpoint: %s", exc)
        with contextlib.suppress(OSError):
            os.unlink(temp)


def recall(repository: os.PathLike[str] | str) -> LastCommitted | None:
    """What :func:`remember` kept for ``repository``, or None (none, unreadable or malformed: a miss)."""
    found = _cache_and_entry(repository)
    if found is None or not found[0].folders_usable(Path(found[1]).parent):
        return None
    path = found[1]
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as entry_file:
            data = entry_file.read(_MAX_ENTRY_BYTES + 1)
        entry = json.loads(data) if len(data) <= _MAX_ENTRY_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(entry, dict) and isinstance(entry.get("commit"), str) and isinstance(entry.get("path"), str)
            and isinstance(entry.get("exclude"), list) and all(isinstance(g, str) for g in entry["exclude"])):
        return None
    return entry["commit"], entry["path"], tuple(entry["exclude"])


_COPY_NAME = "state"  # the copy of a repository's file written over: last-committed/<key>.state<suffix>


def copy_path(repository: os.PathLike[str] | str, committed: str | os.PathLike[str]) -> str | None:
    """Where :func:`keep_copy` keeps the copy of ``committed`` for ``repository`` (None without a cache folder)."""
    found = _cache_and_entry(repository)
    if found is None:
        return None
    return f"{found[1][:-len('.json')]}.{_COPY_NAME}{Path(os.fspath(committed)).suffix}"


def keep_copy(repository: os.PathLike[str] | str, last: LastCommitted) -> LastCommitted:
    """``last`` with the path of a copy of its checkpoint file in the cache folder, for the next commit to read
    the parent's values from once the file is written over; ``last`` unchanged where none can be made (a
    folder, no usable cache folder, less than twice the file's size free there, an error)."""
    from mdiff.regular_files import NotRegularFile, open_regular

    found = _cache_and_entry(repository)
    target = copy_path(repository, last[1])
    if found is None or target is None or not os.path.isfile(last[1]):
        return last
    cache = found[0]
    temp = f"{target}.{secrets.token_hex(6)}.tmp"
    try:
        source, status = open_regular(last[1])
    except (OSError, NotRegularFile) as exc:
        log.debug("no copy of %s: %s", last[1], exc)
        return last
    try:
        cache.make_folders(Path(target).parent)
        if shutil.disk_usage(Path(target).parent).free < 2 * status.st_size:
            log.debug("no copy of %s: the cache folder's disk has less than twice its size free", last[1])
            return last
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            _copy(source, out, status.st_size)
        finally:
            os.close(out)
        os.replace(temp, target)
        _forget_old_copies(Path(target))
    except OSError as exc:
        log.debug("no copy of %s: %s", last[1], exc)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return last
    finally:
        os.close(source)
    return last[0], target, last[2]


MAX_COPIES = 4  # kept in the cache folder, of as many repositories (the newest); older ones are removed


def _forget_old_copies(kept: Path) -> None:
    """Remove all but the :data:`MAX_COPIES` newest copies (``kept``, just written, among them): a repository
    gone or no longer committed to leaves no model's bytes behind for good."""
    copies = []
    for entry in os.scandir(kept.parent):
        if f".{_COPY_NAME}." in entry.name and not entry.name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                copies.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
    copies.sort(reverse=True)
    for _, path in copies[MAX_COPIES:]:
        if path != os.fspath(kept):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _copy(source: int, out: int, size: int) -> None:
    """``size`` bytes of ``source`` from its start into ``out``: in the kernel (copy_file_range), else read and written."""
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    while done < size and copy_range is not None:
        try:
            n = copy_range(source, out, size - done, done, done)
        except OSError:  # another file system, or not supported: the plain way from where it stopped
            break
        if n <= 0:
            break
        done += n
    while done < size:
        block = os.pread(source, min(16 << 20, size - done), done)
        if not block:
            raise OSError(f"the file ended {size - done} bytes early while it was copied")
        os.pwrite(out, block, done)
        done += len(block)


def writes_over(repository: os.PathLike[str] | str, last: LastCommitted | None, new_state: object) -> bool:
    """Whether committing ``new_state`` after ``last`` is a repository's file written over: the same path
    again, or a commit after one whose copy was kept."""
    if last is None or not isinstance(new_state, (str, os.PathLike)):
        return False
    same = os.path.realpath(last[1]) == os.path.realpath(os.fspath(new_state))
    return same or last[1] == copy_path(repository, last[1])
