"""SPEC.md §13.4–§13.5: the state at a commit, read parameter by parameter.

Opening a :class:`StateView` walks first parents back to a root — or, for a commit with a
`state_sha256` (§4.2), only back to the newest commit whose snapshot matches its own `state_sha256` —,
checks every commit file's id (MD800), and makes one pass over the commits' *metadata*, oldest first: every update is checked
against the state it will meet (MD600/MD601 → MD802, MD805), so the final state's names, shapes
and dtypes are known before any tensor is read. Reading a tensor then applies just the updates
of that parameter, in order: a model is never in memory whole, and a commit of a model folder or
a checkout to one holds about one tensor at a time.

The claims at the commit are checked against its `state_sha256` when it has one (MD808): so the state is
the same from a snapshot or from the root. Without digests, a snapshot (§13.5) shortens a parameter's
history only once the walk has shown that it agrees with its commits: the same names, shapes and dtypes as the state the commits define at its
commit, each exact value with the sha256 the commits record (MD807 otherwise, and the walk goes
on as if it were not there). Inexact values are never taken from a snapshot: they are replayed.

A `replace` (or `delete`) makes every earlier update of its parameter irrelevant, so the
history of a parameter starts at its last `replace`. XOR updates (dense, sparse) compose (§13.4):
a run of them is folded into one change (``Change``, the arithmetic in the update types) while the
value it starts from is read on another core, and applied to that value once. XOR maps a wrong
start to a wrong result element for element, so only the run's last sha256 is checked; a value is
checked where no run follows it, and at the end.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
import logging
import math
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mdiff.checkpoints import CheckpointReader
from mdiff.engines import apply_update
from mdiff.errors import ApplyError, InvalidFileError, RepositoryError
from mdiff.format.dtypes import DType
from mdiff.format.layout import Layout
from mdiff.format.reader import DiffFile
from mdiff.threads import in_pool, one_ahead, shared_pool
from mdiff.repo.claims import StateClaims, snapshot_claims, snapshot_disagreement, snapshot_inexact
from mdiff.repo.plan import ClosedCommit, Plan, Step, plan_commit, segments
from mdiff.repo.replay_parts import StepFailed, parts_plan, read_parts
from mdiff.updates.base import Change, check_base, read_ahead, spec_of

if TYPE_CHECKING:
    from mdiff.progress import Progress


class CommitSource(Protocol):
    """What a StateView reads commits through: a repository (its verified files), or a remote read in
    place (remote_repository.py)."""

    def open_commit(self, commit_id: str) -> DiffFile: ...

    def open_snapshot(self, commit_id: str) -> DiffFile: ...

    def has_snapshot(self, commit_id: str) -> bool: ...

    def remember_inexact(self, commit_id: str, names: frozenset[str]) -> None: ...

_FOLD_AHEAD_BYTES = 32 << 20  # of a run's updates read ahead while it is folded (small sparse ones keep every core busy)
_SMALL_VALUE_BYTES = 64 << 10  # values one_ahead may hold several of at once (many small parameters)
_KEEP_OPEN = 128  # commit files a walk keeps open (the newest): the others are read, closed, reopened if needed

logger = logging.getLogger(__name__)


def _small_value(value: np.ndarray) -> bool:
    return value.nbytes < _SMALL_VALUE_BYTES


class SnapshotUnusable(Exception):
    """A snapshot that is not a valid file of `replace` updates for its commit, or whose values fail their checks."""


class StateView(CheckpointReader):
    """state(commit) (SPEC.md §13.4) as a lazy, read-only mapping of name → numpy array, with the
    state's ``files`` and ``layout``; use as a context manager (it keeps the commit files open)."""

    def __init__(self, repo: CommitSource, commit_id: str | None, engine: str | None = None):
        self.repo = repo
        self.commit_id = commit_id
        self.path = f"commit {commit_id[:12]}" if commit_id else "the empty state"
        self.engine = engine
        self.rejected: dict[str, tuple[str, str]] = {}  # snapshots walked past: commit id → (code, why)
        self._opened = contextlib.ExitStack()  # the snapshot in use
        self._files: dict[str, contextlib.ExitStack] = {}  # the commit files held open, by id
        self._by_digest: tuple[str, DiffFile] | None = None  # a snapshot that matches its commit's state_sha256
        try:
            self._chain = self._walk(short=True)
            self._plan = self._make_plan(snapshots=True)
            self._hold()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ the metadata pass
    def _walk(self, short: bool) -> list[tuple[str, DiffFile | ClosedCommit]]:
        """The commits from the root to this one, oldest first, each file's id verified (MD800) and its
        metadata read: the state is defined by all of them (§13.4), and a snapshot is checked against them
        (§13.5). With ``short``, and a `state_sha256` on this commit (§4.2), the walk stops at the newest
        commit whose snapshot matches that commit's `state_sha256` (§13.5): it then starts there. The newest
        files stay open; older ones are closed once read (their data is seldom needed)."""
        chain: list[tuple[str, DiffFile | ClosedCommit]] = []  # newest first
        cursor = self.commit_id
        while cursor is not None:
            diff = self._open(cursor)
            if len(self._files) > _KEEP_OPEN:
                chain.append((cursor, ClosedCommit(diff)))
                self._files.pop(cursor).close()
            else:
                chain.append((cursor, diff))
            digest = diff.commit.state_sha256
            if short and digest is not None and chain[0][1].commit.state_sha256 is not None \
                    and self.repo.has_snapshot(cursor) and self._start_by_digest(cursor, digest):
                break
            parents = diff.commit.parents
            cursor = parents[0] if parents else None
        return chain[::-1]

    def _start_by_digest(self, commit_id: str, digest: str) -> bool:
        """§13.5: whether the snapshot of ``commit_id`` holds exactly the state its `state_sha256` names,
        with no inexact value (those are replayed from the commits, so the walk goes on); kept open if so."""
        snapshots = contextlib.ExitStack()
        try:
            snapshot = snapshots.enter_context(self.repo.open_snapshot(commit_id))  # no link followed (§13.1)
        except InvalidFileError as exc:
            self.rejected[commit_id] = ("MD303", f"not a usable mdiff file: {exc}")
            return False
        listed = snapshot_inexact(snapshot, commit_id)
        if listed is None:
            self.rejected[commit_id] = ("MD303", "not `replace` updates of its commit with a well-formed meta (§13.5)")
        elif not listed:
            if snapshot_claims(snapshot).digest() == digest:
                self._by_digest = (commit_id, snapshot)
                self._opened.enter_context(snapshots)
                return True
            self.rejected[commit_id] = ("MD807", "its contents differ from the state its commit's state_sha256 names")
            logger.warning("the snapshot of %s disagrees with its commit's state_sha256: not used (MD807)",
                           commit_id[:12])
        snapshots.close()
        return False

    def _open(self, commit_id: str) -> DiffFile:
        stack = contextlib.ExitStack()
        diff = stack.enter_context(self.repo.open_commit(commit_id))  # from bytes that match its id (MD800)
        self._files[commit_id] = stack
        return diff

    def _hold(self) -> None:
        """Hold open exactly the commit files whose data the plan reads: reopen (verified again) those
        closed, close the others (their metadata is kept for a later plan)."""
        plan = self._plan
        steps = [step for history in plan.history.values() for step in history] + list(plan.files.values())
        steps += [plan.layout] if plan.layout is not None else []
        needed = {step.source for step in steps if not step.source.startswith("snapshot ")}
        for order, (commit_id, diff) in enumerate(self._chain):
            if commit_id in self._files and commit_id not in needed:
                self._chain[order] = (commit_id, ClosedCommit(diff))
                self._files.pop(commit_id).close()
            elif commit_id in needed and commit_id not in self._files:
                self._chain[order] = (commit_id, self._open(commit_id))
        reopened = {commit_id: diff for commit_id, diff in self._chain if commit_id in needed}
        for name, history in plan.history.items():
            for step in history:
                if step.source in reopened:
                    step.update = reopened[step.source][name]
        for path, step in plan.files.items():
            if step.source in reopened:
                step.update = reopened[step.source].files[path]
        if plan.layout is not None and plan.layout.source in reopened:
            layout = reopened[plan.layout.source].layout
            assert layout is not None  # the step came from it
            plan.layout.update = layout

    def _replan(self) -> None:
        """§13.5: a snapshot whose values fail their checks is walked past; the state is the same without it."""
        logger.warning("a value read from the snapshot of %s, or replayed from it, fails its check: read again "
                       "from the root", (self._plan.start or "")[:12])
        self._plan = self._make_plan(snapshots=False)
        self._hold()

    def _make_plan(self, snapshots: bool) -> Plan:
        """The plan of every parameter's history, its claims checked against this commit's `state_sha256`
        (MD808): from the snapshot the walk stopped at, else from the root (the walk completed first)."""
        if snapshots and self._by_digest is not None:
            plan = self._plan_from_snapshot(*self._by_digest)
            if self._digest_problem(plan) is None:
                return plan
            logger.warning("the state planned from the snapshot of %s differs from the state_sha256 of %s: read "
                           "again from the root", self._by_digest[0][:12], (self.commit_id or "")[:12])
        self._by_digest = None
        if self._chain and self._chain[0][1].commit.parents:  # a short walk: the rest of the way to the root
            for stack in self._files.values():
                stack.close()
            self._files.clear()
            self._chain = self._walk(short=False)
        plan = self._plan_from_root(snapshots)
        problem = self._digest_problem(plan)
        if problem is not None:
            raise RepositoryError("MD808", problem)
        return plan

    def _digest_problem(self, plan: Plan) -> str | None:
        """Why the plan's claims are not the state this commit's `state_sha256` names (§4.2), or None."""
        digest = self._chain[-1][1].commit.state_sha256 if self._chain else None
        if digest is None or plan.claims().digest() == digest:
            return None
        return (f"commit {(self.commit_id or '')[:12]} records state_sha256 {digest[:12]}…, but its first parent's "
                f"state and its updates make a state whose digest is {plan.claims().digest()[:12]}…")

    def _plan_from_snapshot(self, commit_id: str, snapshot: DiffFile) -> Plan:
        """The plan from a snapshot that matches its commit's `state_sha256` (the chain's first commit), and
        the commits after it."""
        plan = Plan(start=commit_id, commits_after_start=len(self._chain) - 1)
        source = f"snapshot {commit_id[:12]}"
        for name in snapshot:
            update = snapshot[name]
            plan.specs[name] = (update.shape, update.dtype)
            plan.history[name] = [Step(update, source, 0)]
        plan.files = {path: Step(update, source, 0) for path, update in snapshot.files.items()}
        plan.layout = Step(snapshot.layout, source, 0) if snapshot.layout is not None else None
        for order, (commit_id_after, diff) in enumerate(self._chain[1:], start=1):
            try:
                plan_commit(plan, commit_id_after, diff, order)
            except ApplyError as exc:
                raise RepositoryError("MD802", f"commit {commit_id_after[:12]} cannot be applied: {exc}") from exc
        if self.commit_id is not None:
            self.repo.remember_inexact(self.commit_id, frozenset(plan.inexact))
        return plan

    def _plan_from_root(self, snapshots: bool) -> Plan:
        plan = Plan(commits_after_start=len(self._chain))
        claims: dict[int, StateClaims] = {}  # at each commit that has a snapshot file
        with_snapshot = {i for i, (commit_id, _) in enumerate(self._chain)
                         if snapshots and self.repo.has_snapshot(commit_id)}
        for order, (commit_id, diff) in enumerate(self._chain):
            try:
                plan_commit(plan, commit_id, diff, order)
            except ApplyError as exc:
                raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be applied: {exc}") from exc
            if order in with_snapshot:
                claims[order] = plan.claims()
        for order in sorted(claims, reverse=True):  # the newest snapshot that agrees with its commits
            if self._start_at_snapshot(plan, order, claims[order]):
                break
        if self.commit_id is not None:
            self.repo.remember_inexact(self.commit_id, frozenset(plan.inexact))
        return plan

    def _start_at_snapshot(self, plan: Plan, order: int, claims: StateClaims) -> bool:
        """Shorten each exact parameter's history to the snapshot of the commit at ``order``, when the
        snapshot agrees with ``claims`` (the commits' word for that state); say whether it did."""
        commit_id = self._chain[order][0]
        snapshots = contextlib.ExitStack()
        try:
            snapshot = snapshots.enter_context(self.repo.open_snapshot(commit_id))  # no link followed (§13.1)
        except InvalidFileError as exc:
            self.rejected[commit_id] = ("MD303", f"not a usable mdiff file: {exc}")
            return False
        problem = snapshot_disagreement(snapshot, commit_id, claims)
        if problem is not None:
            snapshots.close()
            self.rejected[commit_id] = problem
            if problem[0] == "MD807":
                logger.warning("the snapshot of %s disagrees with its commits (%s): not used (MD807)",
                               commit_id[:12], problem[1])
            return False
        self._opened.enter_context(snapshots)
        source = f"snapshot {commit_id[:12]}"
        for name, steps in plan.history.items():
            if steps[0].order > order or claims.parameters[name][2] is None:
                continue  # set afresh after the snapshot's commit, or inexact there (replayed, §13.5)
            plan.history[name] = [Step(snapshot[name], source, order)] + [s for s in steps if s.order > order]
        plan.start = commit_id
        plan.commits_after_start = len(self._chain) - 1 - order
        return True

    def write(self, output: str | os.PathLike[str] | None = None, template: str | os.PathLike[str] | None = None,
              progress: Progress | None = None, *, framework: str = "np", max_shard_size: int | None = None,
              weights_format: str | None = None, force: bool = False) -> dict[str, Any] | list[str]:
        """Every tensor, each read and verified once: without ``output`` a dict (of numpy arrays, or of
        ``framework``'s tensors); with it, written as a checkpoint file or a model folder (SPEC.md §10.2)
        and the paths written returned (see Repository.checkout)."""
        from mdiff.checkpoints import save_state, write_order
        from mdiff.frameworks import check_framework, to_framework
        from mdiff.progress import ByteCounter, tensor_bytes

        check_framework(framework)
        names = self.keys()
        done = ByteCounter(progress, ((name, tensor_bytes(self, name)) for name in names) if progress else ())
        if output is None:
            result: dict[str, Any] = {}
            with contextlib.closing(one_ahead(names, self.read, small=_small_value)) as values:  # the next read while this one is kept
                for name, value in values:
                    result[name] = to_framework(value, framework)
                    done(name)
            return result

        entries = [(name, *self.spec(name)) for name in names]
        layout = self.layout
        order = write_order(output, entries, layout, max_shard_size, weights_format)
        with contextlib.closing(one_ahead(order, self.read, small=_small_value)) as values:

            def fetch(name: str) -> np.ndarray:  # the next tensor is read while the writer writes this one
                ahead_name, value = next(values)
                assert ahead_name == name  # save_state fetches in write_order's order
                done(name)
                return value

            return save_state(output, entries, fetch, files=self.files, layout=layout, template=template,
                              max_shard_size=max_shard_size, weights_format=weights_format, replace=force)

    # ------------------------------------------------------------ tensors
    def _index(self) -> dict[str, tuple[tuple[int, ...], DType]]:
        return self._plan.specs

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self._entry(name)

    @property
    def inexact(self) -> frozenset[str]:
        """The parameters whose value an inexact update made (§13.4)."""
        return frozenset(self._plan.inexact)

    @property
    def snapshot(self) -> str | None:
        """The commit whose snapshot shortens the histories, if one does."""
        return self._plan.start

    @property
    def commits_after_start(self) -> int:
        """The commits after the snapshot used (all of them, from the root, without one)."""
        return self._plan.commits_after_start

    @property
    def claims(self) -> StateClaims:
        """What the commits' metadata say this state holds (§13.5)."""
        return self._plan.claims()

    def replay_bytes(self) -> int:
        """The declared bytes of every update that reading every parameter applies (a snapshot's included)."""
        return sum(self.replay_bytes_by_type().values())

    def replay_bytes_by_type(self) -> dict[str, int]:
        """:meth:`replay_bytes` by update type (`replace`, `dense`, `sparse`, …): what the snapshot policy weighs."""
        by_type: dict[str, int] = {}
        for steps in self._plan.history.values():
            for step in steps:
                by_type[step.update.type] = by_type.get(step.update.type, 0) + step.update.stored_bytes
        return by_type

    def replay_by_parameter(self) -> dict[str, tuple[int, int]]:
        """Per parameter, the declared bytes of the updates reading it applies: (sparse ones, all others) —
        what :meth:`replay_bytes_by_type` sums, kept by parameter so that a child's can follow (state_cache.py)."""
        costs: dict[str, tuple[int, int]] = {}
        for name, steps in self._plan.history.items():
            sparse = sum(step.update.stored_bytes for step in steps if step.update.type == "sparse")
            costs[name] = (sparse, sum(step.update.stored_bytes for step in steps) - sparse)
        return costs

    def line(self) -> list[str]:
        """The commits from the snapshot the histories start at (or the root) to this one, oldest first."""
        ids = [commit_id for commit_id, _ in self._chain]
        return ids[ids.index(self._plan.start):] if self._plan.start in ids else ids

    def state_bytes(self) -> int:
        """The declared bytes of the state's tensors."""
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype in self._plan.specs.values())

    def read(self, name: str) -> np.ndarray:
        """The parameter's value: its updates applied in order, each exact result checked (§13.4)."""
        self._entry(name)
        try:
            return self._replay(name)
        except SnapshotUnusable:
            self._replan()
            return self._replay(name)

    def _replay(self, name: str) -> np.ndarray:
        """The parameter's history applied segment by segment (see :func:`segments`): each segment's head
        is applied on another core while the run of updates after it is folded into one change (§13.4),
        which then meets the head's value once; a value's sha256 is checked where no run follows it.
        A `replace` and a run of dense and sparse updates after it (replay_parts.py) are read a part at a time instead."""
        in_parts = self._in_parts(name)
        if in_parts is not None:
            return in_parts
        value: np.ndarray | None = None
        pending: Step | None = None  # the step whose sha256 the value must have, once checked
        for head, run in segments(self._plan.history[name]):
            if head is not None and pending is not None:
                self._verify(pending, value, name)
            job: Future | None = None
            if head is not None and run and not in_pool():  # a pool thread must not wait on the pool
                job = shared_pool().submit(self._applied, head, value, name)
            elif head is not None:
                value = self._applied(head, value, name)
            try:
                change = self._folded(run, name)
            finally:  # the head's read must end before its file may be closed
                value = value if job is None else job.result()
            if head is not None:
                pending = head if head.update.update_type.carries_sha256 else None
            if change is not None:
                with self._failure(run[0], name):
                    check_base(run[0].update, spec_of(value, name), name)
                assert value is not None  # checked just above (MD600)
                with self._failure(run[-1], name):  # a run of one update is applied here, not folded
                    value = change.applied_to(value)
                pending = run[-1]
        if pending is not None:
            self._verify(pending, value, name)
        assert value is not None  # the planned history never ends in a delete
        return value

    def _in_parts(self, name: str) -> np.ndarray | None:
        """The value read in parts (replay_parts.py) where its history is a `replace` and a run of dense and
        sparse updates it can read so; None where it is not (the general replay reads it)."""
        if self.engine not in (None, "auto", "numpy"):  # another engine was asked for: its math is run
            return None
        pairs = list(segments(self._plan.history[name]))
        if len(pairs) != 1 or pairs[0][0] is None:
            return None
        head, run = pairs[0]
        assert head is not None
        plan = parts_plan(head.update, [step.update for step in run])
        if plan is None:
            return None
        if run:
            with self._failure(run[0], name):
                check_base(run[0].update, (head.update.shape, head.update.dtype), name)
        try:
            value, digest = read_parts(plan, name)
        except StepFailed as failed:
            with self._failure(head if failed.index < 0 else run[failed.index], name):
                raise failed.error from None
        last = run[-1] if run else head
        if digest != last.update.sha256:
            self._verify(last, value, name)  # hashes it again, and raises as the general replay would
        return value

    def _applied(self, step: Step, value: np.ndarray | None, name: str) -> np.ndarray | None:
        """One update applied to ``value`` (whose buffer it may overwrite), its sha256 left to the caller."""
        with self._failure(step, name):
            return apply_update(step.update, value, name, self.engine, scratch=True, verify=False, check_base_sha256=False)

    def _folded(self, run: list[Step], name: str) -> Change | None:
        """The run's updates folded into one change (§13.4), each read while the one before is folded."""
        if not run:
            return None
        change: Change | None = None
        ahead = read_ahead(((step.source, step.update) for step in run), ahead_bytes=_FOLD_AHEAD_BYTES)
        try:
            for step in run:
                with self._failure(step, name):
                    _, update = next(ahead)
                    if change is None:
                        change = Change.fold_first(update, name)
                    else:
                        change.fold(update, name)
        finally:
            ahead.close()
        return change

    @contextlib.contextmanager
    def _failure(self, step: Step, name: str) -> Iterator[None]:
        """A step's failure reported as §13.4 says: MD802, or (from a snapshot) the snapshot walked past."""
        try:
            yield
        except (InvalidFileError, ApplyError) as exc:
            if step.source.startswith("snapshot "):  # a damaged cache: a walk without it tells
                raise SnapshotUnusable(self._plan.start) from exc
            raise RepositoryError("MD802", f"{step.source} cannot be applied to {name!r}: {exc}") from exc

    def _verify(self, step: Step, value: np.ndarray | None, name: str) -> None:
        try:
            step.update.verify(value, name)
        except ApplyError as exc:
            if self._plan.start is not None:  # the snapshot, or a commit after it: a walk without it tells
                raise SnapshotUnusable(self._plan.start) from exc
            raise RepositoryError("MD802", f"{name!r} in the state at {self.commit_id and self.commit_id[:12]} "
                                           f"fails its check ({step.source}): {exc}") from exc

    # ------------------------------------------------------------ files and layout
    @property
    def files(self) -> StateFiles:
        """The state's files (§5.5), by path; each read, and checked against its sha256, when asked for."""
        return StateFiles(self)

    def _file_bytes(self, step: Step, path: str) -> bytes:
        """A file's (or the layout's) last `replace`, read from its commit (a snapshot saves nothing here)."""
        try:
            value = apply_update(step.update, None, path, self.engine)
            assert value is not None  # a replace
            return value.tobytes()
        except (InvalidFileError, ApplyError) as exc:
            raise RepositoryError("MD802", f"{step.source}: file {path!r} fails its check: {exc}") from exc

    @property
    def layout_bytes(self) -> bytes | None:
        step = self._plan.layout
        return None if step is None else self._file_bytes(step, "/layout")

    @property
    def layout(self) -> Layout | None:
        """The state's weights layout (§5.6), or None."""
        from mdiff.format import layout

        data = self.layout_bytes
        if data is None:
            return None
        try:
            return layout.parse(data)
        except InvalidFileError as exc:
            source = self._plan.layout.source if self._plan.layout else "?"
            raise RepositoryError("MD802", f"{source}: {exc.message}") from exc

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        for stack in self._files.values():
            stack.close()
        self._files.clear()
        self._opened.close()


class StateFiles(Mapping[str, bytes]):
    """The files of a :class:`StateView`, by path."""

    def __init__(self, view: StateView):
        self._view = view

    def __getitem__(self, path: str) -> bytes:
        return self._view._file_bytes(self._view._plan.files[path], path)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._view._plan.files))

    def __len__(self) -> int:
        return len(self._view._plan.files)

    def size(self, path: str) -> int:
        return self._view._plan.files[path].update.shape[0]

    def sha256(self, path: str) -> str:
        """Known from the metadata: nothing is read."""
        sha = self._view._plan.files[path].update.sha256
        assert sha is not None  # a file's last update is a replace, which carries it
        return sha


