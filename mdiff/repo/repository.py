"""SPEC.md §13: a repository — commit files named by their sha256, branches, HEAD, snapshots.

Every write is atomic (temporary file, fsync, rename) and every change of the
repository happens under one exclusive lock, so a process killed at any moment
leaves the repository as it was before or as it is after, and two writers never
interleave.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from mdiff.applying import apply_mappings
from mdiff.errors import ApplyError, InvalidFileError, RepositoryError
from mdiff.format import canonical_json
from mdiff.format.commit import Commit
from mdiff.format.reader import DiffFile, open_diff
from mdiff.format.writer import DiffWriter, fsync_path
from mdiff.updates import replace
from mdiff.updates.base import Update, read_ahead, verify_all

REPO_DIR = ".mdiff"
FORMAT_LINE = "mdiff-repository 1\n"
COMMIT_ID = re.compile(r"[0-9a-f]{64}")
_ID_LINE = re.compile(r"[0-9a-f]{64}\n")  # a ref or detached HEAD: the id and one newline, nothing else (§13.1)
BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
Progress = Callable[[str, int, int], None]
SNAPSHOT_MIN_COMMITS = 8  # dense commits are each about a model's size: not a snapshot per commit
SNAPSHOT_MAX_COMMITS = 256  # bounds the files a checkout opens, however small the commits
_KEEP_OPEN = 64  # commit files a checkout keeps open between finding its chain and replaying it


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def valid_branch(name: str) -> bool:
    return bool(BRANCH_NAME.fullmatch(name)) and ".." not in name and not name.endswith(".lock")


class Repository:
    """A directory holding ``.mdiff/``; see SPEC.md §13 for the layout."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / REPO_DIR
        # by commit id (a commit's content never changes): its parents and its updates' declared bytes
        self._facts: dict[str, _CommitFacts] = {}
        self._inexact: dict[str, frozenset[str]] = {}  # by commit id: the inexact values of its state (§13.4)

    # ------------------------------------------------------------ creation and discovery
    @classmethod
    def init(cls, root=".", branch: str = "main") -> "Repository":
        if not valid_branch(branch):
            raise RepositoryError("MD801", f"{branch!r} is not a valid branch name")
        repo = cls(Path(root))
        if repo.dir.exists():
            raise RepositoryError("MD801", f"{repo.dir} already exists; it is a repository already")
        repo.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".mdiff-init.", dir=repo.root))
        for sub in ("commits", "snapshots", "refs/heads"):
            (staging / sub).mkdir(parents=True)
        (staging / "format").write_text(FORMAT_LINE, encoding="utf-8")
        (staging / "HEAD").write_text(f"ref: refs/heads/{branch}\n", encoding="utf-8")
        os.replace(staging, repo.dir)  # the repository appears whole or not at all
        fsync_path(repo.root.resolve())
        return repo

    @classmethod
    def find(cls, start=".") -> "Repository":
        """The repository containing ``start`` (searching upwards, like git)."""
        here = Path(start).resolve()
        for candidate in (here, *here.parents):
            if (candidate / REPO_DIR / "format").is_file():
                repo = cls(candidate)
                repo._check_format()
                return repo
        raise RepositoryError("MD801", f"no mdiff repository in {here} or its parents; run `mdiff init`")

    def _check_format(self) -> None:
        if (self.dir / "format").read_text(encoding="utf-8") != FORMAT_LINE:
            raise RepositoryError("MD801", f"{self.dir / 'format'} does not say {FORMAT_LINE.strip()!r}")

    # ------------------------------------------------------------ locking
    @contextlib.contextmanager
    def lock(self, wait: bool = True) -> Iterator[None]:
        """The one writer lock; ``wait=False`` refuses at once (MD803) if another process holds it."""
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise RepositoryError("MD803", "another mdiff process is writing to this repository; try again") from None
                raise
            yield
        finally:
            os.close(fd)  # closing releases the lock

    # ------------------------------------------------------------ refs
    def head(self) -> tuple[str | None, str | None]:
        """(branch, commit id) of HEAD; branch is None when HEAD is detached, id None before the first commit."""
        text = (self.dir / "HEAD").read_text(encoding="utf-8")
        m = re.fullmatch(r"ref: refs/heads/(\S+)\n", text)
        if m and valid_branch(m.group(1)):
            return m.group(1), self.branch_target(m.group(1))
        if _ID_LINE.fullmatch(text):
            return None, self._existing(text[:-1], "HEAD")
        raise RepositoryError("MD801", f"HEAD is malformed: {text[:80]!r}")

    def branches(self) -> dict[str, str]:
        heads = self.dir / "refs" / "heads"
        found = {}
        for path in sorted(heads.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                name = path.relative_to(heads).as_posix()
                found[name] = self.branch_target(name)
        return found

    def branch_target(self, branch: str) -> str | None:
        path = self.dir / "refs" / "heads" / branch
        if not path.exists():
            return None
        text = path.read_text(encoding="utf-8")
        if not _ID_LINE.fullmatch(text):
            raise RepositoryError("MD801", f"ref {branch!r} is malformed: {text[:80]!r}")
        return self._existing(text[:-1], f"branch {branch!r}")

    def _existing(self, commit_id: str, what: str) -> str:
        if not self.commit_path(commit_id).exists():
            raise RepositoryError("MD801", f"{what} names commit {commit_id[:12]}, which is not in the repository")
        return commit_id

    def set_branch(self, branch: str, commit_id: str) -> None:
        if not valid_branch(branch):
            raise RepositoryError("MD801", f"{branch!r} is not a valid branch name")
        path = self.dir / "refs" / "heads" / branch
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, commit_id + "\n")

    def set_head(self, branch: str | None = None, commit_id: str | None = None) -> None:
        _write_atomically(self.dir / "HEAD", f"ref: refs/heads/{branch}\n" if branch else f"{commit_id}\n")

    def delete_branch(self, branch: str) -> None:
        if self.head()[0] == branch:
            raise RepositoryError("MD801", f"cannot delete {branch!r}: it is the current branch")
        path = self.dir / "refs" / "heads" / branch
        if not path.exists():
            raise RepositoryError("MD801", f"no branch {branch!r}")
        path.unlink()
        fsync_path(path.parent)

    # ------------------------------------------------------------ commits
    def commit_path(self, commit_id: str) -> Path:
        return self.dir / "commits" / f"{commit_id}.mdiff"

    def snapshot_path(self, commit_id: str) -> Path:
        return self.dir / "snapshots" / f"{commit_id}.mdiff"

    def commit_ids(self) -> list[str]:
        return sorted(p.stem for p in (self.dir / "commits").glob("*.mdiff") if COMMIT_ID.fullmatch(p.stem))

    def metadata(self, commit_id: str) -> Commit:
        with open_diff(self.commit_path(commit_id)) as diff:
            return diff.commit

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self._commit_facts(commit_id).parents

    def _commit_facts(self, commit_id: str) -> "_CommitFacts":
        self._existing(commit_id, "a commit's parent list")  # even when known: the file may have gone since
        if commit_id not in self._facts:
            with open_diff(self.commit_path(commit_id)) as diff:
                self._remember(commit_id, diff)
        return self._facts[commit_id]

    def _remember(self, commit_id: str, diff: DiffFile) -> None:
        self._facts[commit_id] = _CommitFacts(
            diff.commit.parents, sum(diff[name].stored_bytes for name in diff),
            {name: diff[name].type != "delete" and not diff[name].update_type.carries_sha256 for name in diff},
        )

    def store(self, write: Callable[[DiffWriter], None], commit: Commit, compression: str = "gzip", directory: str = "commits") -> str:
        """Write a commit file with ``write``; file it under its sha256; return that id.

        The file is complete and synced before it gets its name, so a crash leaves at most
        a stray temporary file, never a partial commit.
        """
        target_dir = self.dir / directory
        fd, tmp = tempfile.mkstemp(prefix=".commit.", suffix=".mdiff", dir=target_dir)
        os.close(fd)
        tmp_path = Path(tmp)
        try:
            with DiffWriter(tmp_path, commit, compression) as writer:
                write(writer)
            commit_id = file_sha256(tmp_path)
            os.replace(tmp_path, target_dir / f"{commit_id}.mdiff")
        except BaseException:
            tmp_path.unlink(missing_ok=True)
            raise
        fsync_path(target_dir)
        return commit_id

    def verify(self, commit_id: str) -> None:
        """MD800: the commit file's bytes still hash to its name (MD801 when there is no such file)."""
        self._existing(commit_id, "a commit's parent list")
        got = file_sha256(self.commit_path(commit_id))
        if got != commit_id:
            raise RepositoryError("MD800", f"commit file {commit_id[:12]} is corrupt: its bytes hash to {got[:12]}")

    # ------------------------------------------------------------ states
    def state(self, commit_id: str | None, progress: Progress | None = None, engine: str | None = None) -> dict[str, np.ndarray]:
        """The full state at a commit (§13.4): from the nearest snapshot or root, apply the
        first-parent chain forward, each diff touching only the parameters it changes."""
        if commit_id is None:
            return {}
        try:
            return self._state(commit_id, progress, engine, snapshots=True)
        except _SnapshotUnusable:  # §13.5: a snapshot is a cache; without it the result is the same
            return self._state(commit_id, progress, engine, snapshots=False)

    def _state(self, commit_id: str, progress, engine, snapshots: bool) -> dict[str, np.ndarray]:
        chain: list[tuple[str, DiffFile | None]] = []
        cursor: str | None = commit_id
        with contextlib.ExitStack() as opened:
            while cursor is not None and not (snapshots and self.snapshot_path(cursor).exists()):
                self.verify(cursor)  # a commit file is trusted only while its bytes match its id
                diff = opened.enter_context(self._open_commit(cursor))
                parents = diff.commit.parents
                if len(chain) >= _KEEP_OPEN:  # a long chain: reopened when its turn comes
                    diff.close()
                    diff = None
                chain.append((cursor, diff))
                cursor = parents[0] if parents else None
            return self._replay(commit_id, cursor, chain, progress, engine)

    def _open_commit(self, commit_id: str) -> DiffFile:
        try:
            diff = open_diff(self.commit_path(commit_id))
        except InvalidFileError as exc:
            raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: {exc}") from exc
        self._remember(commit_id, diff)
        return diff

    def _replay(self, commit_id: str, start: str | None, chain, progress, engine) -> dict[str, np.ndarray]:
        cursor = start
        # An XOR update (dense, sparse) maps a wrong base to a wrong result, element for element: so
        # the sha256 of a parameter's intermediate value need not be checked when the next update of
        # that parameter is another XOR — the later check covers it. Checking every intermediate
        # value made the 100th commit of a sparse chain cost 100 full hashes of the model. The
        # snapshot's values are the first links of those chains.
        state: dict[str, np.ndarray] = {}
        pending: dict[str, Update] = {}
        inexact: set[str] = set()
        if cursor is not None:
            try:
                with open_diff(self.snapshot_path(cursor)) as snapshot:
                    listed = _snapshot_inexact(snapshot, cursor)
                    if listed is None:
                        raise _SnapshotUnusable(cursor)
                    inexact |= listed
                    for name in snapshot:
                        state[name] = snapshot[name].apply(None, name, engine, verify=False)
                        pending[name] = _detached(snapshot[name])
            except (InvalidFileError, ApplyError) as exc:
                raise _SnapshotUnusable(cursor) from exc
        for i, (cid, kept) in enumerate(reversed(chain)):
            if progress:
                progress(cid[:12], i, len(chain))
            if kept is None:
                self.verify(cid)
            try:
                with kept or open_diff(self.commit_path(cid)) as diff, \
                        contextlib.closing(read_ahead((name, diff[name]) for name in diff)) as updates:
                    for name in diff:  # §13.4: before any of the commit's updates is applied
                        kind = diff[name].update_type
                        if name in inexact and kind.carries_sha256 and kind.needs_base:
                            raise RepositoryError(
                                "MD805", f"commit {cid[:12]}: a {kind.name} update of {name!r}, whose value an "
                                         "inexact update made (appliers agree on it only within a tolerance)")
                    for name, update in updates:
                        kind = update.update_type
                        if name in pending and update.type not in ("dense", "sparse"):
                            pending.pop(name).verify(state[name], name)
                        result = update.apply(state.get(name), name, engine, scratch=True, verify=False)
                        if result is None:
                            del state[name]
                            pending.pop(name, None)
                            inexact.discard(name)
                            continue
                        state[name] = result
                        if kind.carries_sha256:
                            pending[name] = _detached(update)
                            inexact.discard(name)
                        else:
                            pending.pop(name, None)
                            inexact.add(name)
            except (InvalidFileError, ApplyError) as exc:
                raise RepositoryError("MD802", f"commit {cid[:12]} cannot be applied: {exc}") from exc
        try:
            verify_all((update, state[name], name) for name, update in pending.items())
        except ApplyError as exc:
            if start is not None:  # the snapshot, or a commit after it: a walk without snapshots tells
                raise _SnapshotUnusable(start) from exc
            raise RepositoryError("MD802", f"the state at {commit_id[:12]} fails its check: {exc}") from exc
        self._inexact[commit_id] = frozenset(inexact)
        return state

    def inexact_values(self, commit_id: str | None) -> frozenset[str]:
        """The parameters whose value in state(commit_id) an inexact update made (§13.4), from the
        commits' metadata: back to a snapshot (its `meta.inexact`) or a root, then forward."""
        if commit_id is None:
            return frozenset()
        if commit_id not in self._inexact:
            line, cursor, inexact = [], commit_id, set()
            while cursor is not None:
                if cursor in self._inexact:
                    inexact = set(self._inexact[cursor])
                    break
                if self.snapshot_path(cursor).exists():
                    listed = _usable_snapshot_inexact(self.snapshot_path(cursor), cursor)
                    if listed is not None:
                        inexact = listed
                        break
                line.append(cursor)
                parents = self.parents(cursor)
                cursor = parents[0] if parents else None
            for cid in reversed(line):
                for name, makes_inexact in self._commit_facts(cid).inexact.items():
                    (inexact.add if makes_inexact else inexact.discard)(name)
            self._inexact[commit_id] = frozenset(inexact)
        return self._inexact[commit_id]

    def write_snapshot(self, commit_id: str, state: Mapping[str, np.ndarray]) -> None:
        """Store the full state of ``commit_id`` so that checkouts start there (§13.5).

        Uncompressed: a snapshot is a cache for speed (weights hardly deflate: ~0.86 of their size,
        at a tenth of the read speed).
        """
        inexact = sorted(self.inexact_values(commit_id))
        meta = Commit("snapshot", date=self.metadata(commit_id).date,
                      meta={"snapshot_of": commit_id, **({"inexact": canonical_json.dumps(inexact)} if inexact else {})})
        snapshot_id = self.store(
            lambda w: [w.add(name, replace.encode(state[name])) for name in sorted(state)], meta,
            compression="none", directory="snapshots",
        )
        os.replace(self.dir / "snapshots" / f"{snapshot_id}.mdiff", self.snapshot_path(commit_id))
        fsync_path(self.dir / "snapshots")


    def replay_cost(self, commit_id: str) -> tuple[int, int, int]:
        """What a checkout of ``commit_id`` replays after its starting point (the nearest snapshot,
        or the state a root commit holds): (commits, their declared update bytes, the starting
        state's declared bytes)."""
        commits = replayed = 0
        cursor: str | None = commit_id
        while not self.snapshot_path(cursor).exists():
            facts = self._commit_facts(cursor)
            if not facts.parents:
                return commits, replayed, facts.declared_bytes
            commits, replayed, cursor = commits + 1, replayed + facts.declared_bytes, facts.parents[0]
        with open_diff(self.snapshot_path(cursor)) as snapshot:
            return commits, replayed, sum(snapshot[name].stored_bytes for name in snapshot)

    def snapshot_if_due(self, commit_id: str, state: Mapping[str, np.ndarray]) -> bool:
        """Write a snapshot of ``commit_id`` (whose state is ``state``) when a checkout of it would
        replay at least one model's worth of updates after its starting point, and at least
        SNAPSHOT_MIN_COMMITS commits; or SNAPSHOT_MAX_COMMITS commits, whatever their size. Checkouts
        then read at most about one snapshot plus one model's worth of updates. Returns whether it wrote one."""
        commits, replayed, start_bytes = self.replay_cost(commit_id)
        due = commits >= SNAPSHOT_MAX_COMMITS or (commits >= SNAPSHOT_MIN_COMMITS and replayed >= start_bytes)
        if due:
            self.write_snapshot(commit_id, state)
        return due


@dataclass(frozen=True)
class _CommitFacts:
    """What a commit's metadata says, kept by id (a commit's content never changes)."""

    parents: tuple[str, ...]
    declared_bytes: int  # of its updates' datasets
    inexact: dict[str, bool]  # name → whether the update leaves the value inexact (§13.4)


def _snapshot_inexact(snapshot: DiffFile, commit_id: str) -> set[str] | None:
    """§13.5: the inexact values of a usable snapshot of ``commit_id`` — `replace` updates only,
    `meta.snapshot_of` its commit, `meta.inexact` well formed —, or None for one to walk past."""
    listed = _inexact_listed(snapshot.commit.meta)
    usable = (snapshot.commit.meta.get("snapshot_of") == commit_id and listed is not None
              and listed <= set(snapshot) and all(snapshot[name].type == "replace" for name in snapshot))
    return listed if usable else None


def _usable_snapshot_inexact(path: Path, commit_id: str) -> set[str] | None:
    try:
        with open_diff(path) as snapshot:
            return _snapshot_inexact(snapshot, commit_id)
    except InvalidFileError:
        return None


def _inexact_listed(meta: Mapping[str, str]) -> set[str] | None:
    """A snapshot's `meta.inexact` (§13.5) as a set; None when malformed."""
    if "inexact" not in meta:
        return set()
    try:
        names = canonical_json.loads(meta["inexact"])
    except ValueError:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return set(names)


class _SnapshotUnusable(Exception):
    """A snapshot that is not a valid file of `replace` updates for its commit, or whose state fails its checks."""


def masked_update(old: np.ndarray, new: np.ndarray, mask: np.ndarray) -> Update:
    """A sparse update storing exactly the elements ``mask`` selects (FISH-style sparse fine-tuning).

    Changes outside the mask are dropped: the update is then marked lossy, and its sha256 is of
    the state it really produces.
    """
    from mdiff.format.dtypes import as_bits, canonical, from_bits, xor_bits
    from mdiff.updates import sparse

    old, new = canonical(old), canonical(new)
    if mask.shape != new.shape or old.shape != new.shape or old.dtype != new.dtype:
        raise RepositoryError("MD801", f"a sparse mask needs the parameter's shape {list(new.shape)} on both sides")
    indices = np.flatnonzero(mask.reshape(-1)).astype(sparse.INDEX_DTYPE)
    xor = xor_bits(old, new).reshape(-1)
    result_bits = as_bits(old).copy().reshape(-1)
    result_bits[indices] ^= xor[indices]
    result = from_bits(result_bits.reshape(new.shape), dtype_of_array(new))
    update = sparse.from_entries(result, indices, xor[indices])
    if np.count_nonzero(xor) != np.count_nonzero(xor[indices]):
        update.meta["lossy"] = True
    return update


def dtype_of_array(array: np.ndarray):
    from mdiff.format.dtypes import dtype_of

    return dtype_of(array)


def _detached(update: Update) -> Update:
    """The update without its datasets: enough to verify a result after its file is closed."""
    return Update(update.meta, {}, update.kind)


def updates_between(old: Mapping[str, np.ndarray], new: Mapping, explicit: Mapping[str, Update] = {},
                    masks: Mapping[str, np.ndarray] = {}, inexact: frozenset[str] = frozenset()) -> Iterable[tuple[str, Update]]:
    """(name, update) taking ``old`` to ``new``: explicit updates win, masked parameters store just
    their masked elements, the rest are exact diffs. A parameter in ``inexact`` (its value in ``old``
    was made by an inexact update) gets no exact update that reads its base: its result, as a
    ``replace``, instead (§13.4, MD805)."""
    from mdiff.diffing import diff_tensor

    for name in sorted(set(old) | set(new) | set(explicit)):
        if name in explicit:
            update = explicit[name]
        elif name in masks:
            if name not in old or name not in new:
                raise RepositoryError("MD801", f"sparse mask for {name!r}, which is not in both states")
            update = masked_update(old[name], new[name], masks[name])
        else:
            update = diff_tensor(old.get(name), new[name] if name in new else None)
            if update is None:
                continue
        kind = update.update_type
        if name in inexact and kind.carries_sha256 and kind.needs_base:
            update = replace.encode(update.apply(old[name], name))
        yield name, update


# ---------------------------------------------------------------- work on a repository (the verbs)


def _as_numpy_state(state: Mapping) -> Mapping[str, np.ndarray]:
    """A state dict of numpy arrays or torch tensors, seen as numpy arrays (torch read on access)."""

    class _View(Mapping):
        def __getitem__(self, name):
            value = state[name]
            if isinstance(value, np.ndarray):
                return value
            from mdiff.checkpoints.torch_pt import tensor_to_numpy

            return tensor_to_numpy(value)

        def __iter__(self):
            return iter(state)

        def __len__(self):
            return len(state)

    return _View()


@contextlib.contextmanager
def checkpoint_state(path) -> Iterator[Mapping[str, np.ndarray]]:
    from mdiff.checkpoints import open_checkpoint

    with open_checkpoint(path) as reader:
        yield reader


def _commit(repo: Repository, new: Mapping, message: str, parents: tuple[str, ...], explicit: Mapping[str, Update],
            progress: Progress | None, masks: Mapping[str, np.ndarray] = {}, old: Mapping | None = None,
            snapshots: bool = True, **commit_fields) -> tuple[str, dict[str, str]]:
    if old is None:
        old = repo.state(parents[0] if parents else None)
    inexact = set(repo.inexact_values(parents[0] if parents else None))
    meta = Commit(message, parents=parents, **commit_fields)
    summary: dict[str, str] = {}
    names = sorted(set(old) | set(new) | set(explicit))
    position = {n: i for i, n in enumerate(names)}

    def write(writer: DiffWriter) -> None:
        for name, update in updates_between(old, new, explicit, masks, frozenset(inexact)):
            if progress:
                progress(name, position[name], len(names))
            writer.add(name, update)
            summary[name] = update.type
            if update.type == "delete" or update.update_type.carries_sha256:
                inexact.discard(name)
            else:
                inexact.add(name)

    commit_id = repo.store(write, meta)
    repo._inexact[commit_id] = frozenset(inexact)
    if snapshots:
        repo.snapshot_if_due(commit_id, new)
    return commit_id, summary


def _author_fields(author, date, meta) -> dict:
    from mdiff.format.commit import Author, default_date

    fields = {"date": date or default_date(), "meta": dict(meta or {})}
    if author is not None:
        fields["author"] = author if isinstance(author, Author) else Author.parse(author)
    return fields


def commit(repo: Repository, new_state, message: str, author=None, date: str | None = None, meta=None,
           explicit: Mapping[str, Update] | None = None, progress: Progress | None = None, wait: bool = True,
           masks: Mapping[str, np.ndarray] | None = None) -> str:
    """Commit a new state on the current branch: a checkpoint path, or an in-memory state dict of
    numpy arrays or torch tensors. ``explicit`` supplies updates by hand (e.g. low-rank factors);
    ``masks`` (name → bool array) stores just the masked elements of those parameters; every
    other parameter is diffed exactly. Returns the new commit id."""
    with repo.lock(wait):
        branch, head = repo.head()
        with contextlib.ExitStack() as stack:
            if isinstance(new_state, (str, os.PathLike)):
                new = stack.enter_context(checkpoint_state(new_state))
            else:
                new = _as_numpy_state(new_state)
            masks = {k: np.asarray(_as_numpy_state(masks)[k], dtype=bool) for k in masks} if masks else {}
            commit_id, _ = _commit(repo, new, message, (head,) if head else (), explicit or {}, progress, masks,
                                   **_author_fields(author, date, meta))
        if branch:
            repo.set_branch(branch, commit_id)
        else:
            repo.set_head(commit_id=commit_id)
    return commit_id


def checkout(repo: Repository, rev: str = "HEAD", output=None, template=None, progress: Progress | None = None,
             engine: str | None = None):
    """The state at ``rev``: written to ``output`` (.safetensors, .npz, .pt, .onnx with the base
    model as ``template``) when given, else returned as a dict of numpy arrays."""
    from mdiff.checkpoints import write_checkpoint
    from mdiff.format.dtypes import dtype_of
    from mdiff.repo.history import resolve

    state = repo.state(resolve(repo, rev), progress, engine)
    if output is None:
        return state
    entries = [(name, state[name].shape, dtype_of(state[name])) for name in sorted(state)]
    write_checkpoint(output, entries, state.__getitem__, template=template)
    return None


def status(repo: Repository, checkpoint) -> dict[str, str]:
    """What a checkpoint changes against HEAD: {name: "modified" | "added" | "deleted" | "retyped"}."""
    from mdiff.format.dtypes import dtype_of, xor_bits

    head = repo.state(repo.head()[1])
    changes = {}
    with checkpoint_state(checkpoint) as new:
        for name in sorted(set(head) | set(new)):
            if name not in new:
                changes[name] = "deleted"
            elif name not in head:
                changes[name] = "added"
            else:
                a, b = head[name], new[name]
                if a.shape != b.shape or dtype_of(a) != dtype_of(b):
                    changes[name] = "retyped"
                elif np.count_nonzero(xor_bits(a, b)):
                    changes[name] = "modified"
    return changes


def merge(repo: Repository, rev: str, strategy: str = "average", message: str | None = None, author=None,
          date: str | None = None, meta=None, progress: Progress | None = None, wait: bool = True) -> tuple[str | None, list]:
    """Merge ``rev`` into the current branch (§13.7): a commit with parents (HEAD, rev).

    Returns (commit id, []) — or (None, conflicts) with nothing written when some parameters
    conflict under the strategy; each conflict is (name, reason).
    """
    from mdiff.repo.history import merge_base, resolve
    from mdiff.repo.merge import Strategy

    chosen = Strategy.parse(strategy)
    with repo.lock(wait):
        branch, head = repo.head()
        theirs_id = resolve(repo, rev)
        if head is None:
            raise RepositoryError("MD804", "nothing to merge into: the current branch has no commit")
        if theirs_id == head or theirs_id in _ancestors(repo, head):
            raise RepositoryError("MD804", f"{rev} is already merged into {branch or 'HEAD'}")
        base_id = merge_base(repo, head, theirs_id)
        # Each state is materialised once, to a file, then read one parameter at a time:
        # three states are never in memory together.
        with tempfile.TemporaryDirectory(dir=repo.dir) as tmp:
            paths = {}
            for label, cid in (("ours", head), ("theirs", theirs_id), ("base", base_id)):
                paths[label] = Path(tmp) / f"{label}.safetensors"
                checkout(repo, cid, paths[label]) if cid else _empty_checkpoint(paths[label])
            with checkpoint_state(paths["ours"]) as ours, checkpoint_state(paths["theirs"]) as theirs, \
                    checkpoint_state(paths["base"]) as base:
                conflicts, merged_names = [], sorted(set(ours) | set(theirs))
                for name in merged_names:
                    _, reason = _merged(name, ours, theirs, base, chosen)
                    if reason:
                        conflicts.append((name, reason))
                if conflicts:
                    return None, conflicts

                class _Merged(Mapping):
                    def __getitem__(self, name):
                        value, _ = _merged(name, ours, theirs, base, chosen)
                        if value is None:
                            raise KeyError(name)
                        return value

                    def __iter__(self):
                        return iter([n for n in merged_names if _merged(n, ours, theirs, base, chosen)[0] is not None])

                    def __len__(self):
                        return sum(1 for _ in self)

                fields = _author_fields(author, date, meta)
                fields["meta"].setdefault("merge_strategy", strategy)
                text = message or f"Merge {rev} into {branch or 'HEAD'} ({strategy})"
                commit_id, _ = _commit(repo, _Merged(), text, (head, theirs_id), {}, progress, **fields)
        if branch:
            repo.set_branch(branch, commit_id)
        else:
            repo.set_head(commit_id=commit_id)
    return commit_id, []


def _merged(name, ours, theirs, base, strategy):
    from mdiff.repo.merge import merge_parameter

    get = lambda m: m[name] if name in m else None  # noqa: E731
    return merge_parameter(name, get(ours), get(theirs), get(base), strategy)


def _ancestors(repo, commit_id):
    from mdiff.repo.history import ancestors

    return ancestors(repo, commit_id)


def _empty_checkpoint(path: Path) -> None:
    from mdiff.checkpoints import save_checkpoint

    save_checkpoint(path, {})


def squash(repo: Repository, rev: str, message: str, author=None, date: str | None = None, meta=None,
           wait: bool = True) -> str:
    """Replace the commits after ``rev`` on the current branch by one commit on top of ``rev``
    holding the same state; the branch then points to it (the old commits stay in the store)."""
    from mdiff.repo.history import first_parent_line, resolve

    with repo.lock(wait):
        branch, head = repo.head()
        onto = resolve(repo, rev)
        if head is None or onto == head or onto not in first_parent_line(repo, head, stop=onto):
            raise RepositoryError("MD801", f"{rev} is not an earlier commit of the current branch")
        final = repo.state(head)
        commit_id, _ = _commit(repo, final, message, (onto,), {}, None, **_author_fields(author, date, meta))
        if branch:
            repo.set_branch(branch, commit_id)
        else:
            repo.set_head(commit_id=commit_id)
    return commit_id


def snapshot(repo: Repository, rev: str = "HEAD", wait: bool = True) -> str:
    """Store the full state of ``rev`` so that checkouts of it and its descendants start there."""
    from mdiff.repo.history import resolve

    commit_id = resolve(repo, rev)
    with repo.lock(wait):
        repo.write_snapshot(commit_id, repo.state(commit_id))
    return commit_id


def diff_revisions(repo: Repository, rev_a: str, rev_b: str, output, message: str = "", compression: str = "gzip") -> dict[str, str]:
    """Write the diff taking ``rev_a``'s state to ``rev_b``'s as a standalone .mdiff file."""
    from mdiff.repo.history import resolve

    a, b = repo.state(resolve(repo, rev_a)), repo.state(resolve(repo, rev_b))
    summary = {}
    with DiffWriter(output, Commit(message or f"diff {rev_a}..{rev_b}"), compression) as writer:
        for name, update in updates_between(a, b):
            writer.add(name, update)
            summary[name] = update.type
    return summary


Repository.commit = commit
Repository.checkout = checkout
Repository.status = status
Repository.merge = merge
Repository.squash = squash
Repository.snapshot = snapshot
Repository.diff = diff_revisions


def fsck(repo: Repository, check_data: bool = True) -> list:
    """Every problem of the repository (SPEC.md §13): corrupt or invalid commit files, missing
    parents, malformed refs. Returns Findings; stray temporary files left by a killed writer are
    reported as warnings (MD303) — they are harmless and may be deleted."""
    from mdiff.format.findings import Finding
    from mdiff.validate import validate

    findings = []
    try:
        repo._check_format()
        repo.head()
        repo.branches()
    except RepositoryError as exc:
        findings.append(Finding(exc.code, str(repo.dir), exc.message))
    known = set(repo.commit_ids())
    for commit_id in sorted(known):
        path = repo.commit_path(commit_id)
        try:
            repo.verify(commit_id)
        except RepositoryError as exc:
            findings.append(Finding(exc.code, str(path), exc.message))
            continue
        problems = [f for f in validate(path, check_data=check_data) if f.is_error]
        findings += problems
        if not problems:
            for parent in repo.parents(commit_id):
                if parent not in known:
                    findings.append(Finding("MD801", str(path), f"parent {parent[:12]} is not in the repository"))
    for path in sorted((repo.dir / "snapshots").glob("*.mdiff")):
        problems = [f for f in validate(path, check_data=check_data) if f.is_error]
        if problems or _usable_snapshot_inexact(path, path.stem) is None:
            why = problems[0].message if problems else "not `replace` updates of its commit with a well-formed meta (§13.5)"
            findings.append(Finding("MD303", str(path), f"checkouts ignore this snapshot ({why}); it may be deleted"))
    for folder in ("commits", "snapshots", "refs/heads", "."):
        for stray in sorted((repo.dir / folder).glob(".*.tmp")) + sorted((repo.dir / folder).glob(".commit.*.mdiff")):
            findings.append(Finding("MD303", str(stray), "a temporary file left by an interrupted writer; it may be deleted"))
    return findings


Repository.fsck = fsck


def import_peft(repo: Repository, adapter_dir, base_checkpoint, message: str | None = None, author=None,
                date: str | None = None, meta=None, wait: bool = True) -> list[str]:
    """Commit a PEFT LoRA adapter as ``low_rank`` updates (with the adapter's scale and names mapped
    to the base checkpoint's). On an empty branch the base checkpoint is committed first, as the
    root; otherwise HEAD must hold the base's values of every parameter the adapter changes."""
    from mdiff.format.dtypes import xor_bits
    from mdiff.peft import lora_updates_from_checkpoint

    updates = lora_updates_from_checkpoint(adapter_dir, base_checkpoint)
    made = []
    if repo.head()[1] is None:
        made.append(repo.commit(base_checkpoint, f"base: {os.path.basename(os.fspath(base_checkpoint))}", author, date, meta,
                                wait=wait))
    with repo.lock(wait):
        branch, head = repo.head()
        state = repo.state(head)
        with checkpoint_state(base_checkpoint) as base:
            for name in updates:
                if name in base and (name not in state or state[name].shape != base[name].shape
                                     or np.count_nonzero(xor_bits(state[name], base[name]))):
                    raise RepositoryError("MD802", f"HEAD's {name!r} is not the adapter's base; switch to the branch "
                                                   "that holds the base model")
        fields = _author_fields(author, date, meta)
        fields["meta"].setdefault("peft_adapter", os.path.basename(os.path.normpath(os.fspath(adapter_dir))))
        text = message or f"import PEFT adapter {fields['meta']['peft_adapter']}"
        commit_id, _ = _commit(repo, state, text, (head,), updates, None, old=state, **fields)
        if branch:
            repo.set_branch(branch, commit_id)
        else:
            repo.set_head(commit_id=commit_id)
    return made + [commit_id]


Repository.import_peft = import_peft
