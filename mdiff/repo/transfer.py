"""SPEC.md §13.8: moving commits between a repository and a remote — fetch, push, a revision's first-parent line.

Only what the other side lacks moves, a few files at a time (a small thread pool), with progress in
bytes. A fetched commit is written to a temporary file, hashed as it arrives (MD800 when it does not
hash to its name) and opened as a reader would before anything is filed; the fetch files its commits
and moves refs only once every commit a remote ref needs is at hand (MD801 otherwise), so a hostile
or broken remote leaves the local repository as it was. A push uploads every commit the remote lacks
before it moves the remote's ref, by compare-and-swap (MD803 when another pusher was first, or when
the push would not fast-forward and is not forced).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mdiff.errors import RepositoryError
from mdiff.progress import ByteCounter, Progress
from mdiff.repo.remote_ends import MAX_COMMIT_FILE_BYTES, RemoteEnd
from mdiff.repo.remotes import open_end, remote_url, tracking_refs
from mdiff.repo.store import Store

log = logging.getLogger(__name__)

WORKERS = 4


@dataclass
class FetchReport:
    remote: str
    commits: list[str] = field(default_factory=list)  # fetched
    bytes: int = 0
    branches: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # branch → (before, after)
    tags: dict[str, str] = field(default_factory=dict)  # tags created locally
    tags_kept: list[str] = field(default_factory=list)  # local tags that differ from the remote's, kept
    snapshots: list[str] = field(default_factory=list)  # of these commits (with ``snapshots``)
    snapshot_bytes: int = 0


@dataclass
class PushReport:
    remote: str
    branch: str
    before: str | None
    after: str
    commits: list[str] = field(default_factory=list)  # uploaded
    bytes: int = 0
    forced: bool = False
    tags: list[str] = field(default_factory=list)  # created on the remote
    snapshots: list[str] = field(default_factory=list)  # of these commits (with ``snapshots``)
    snapshot_bytes: int = 0


def _in_parallel(items: Iterable[str], sizes: dict[str, int], work: Callable[[str], Any],
                 progress: Progress | None, results: dict[str, Any]) -> None:
    """``results[item] = work(item)`` for each item, on a small thread pool, with progress as each
    completes; once all have stopped, the first error is raised (``results`` holds what succeeded)."""
    items = list(items)
    counter = ByteCounter(progress, {item: sizes.get(item, 0) for item in items})
    guard = threading.Lock()

    def one(item: str) -> None:
        result = work(item)
        with guard:
            results[item] = result
            counter(item)

    with ThreadPoolExecutor(max_workers=min(WORKERS, max(len(items), 1))) as pool:
        futures = [pool.submit(one, item) for item in items]
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error


def same_format(repo: Store, url: str, theirs: int) -> None:
    """MD801 unless the remote's commit ids are of this repository's kind (§4.3: the same commit has another
    id in a repository of the other format, so no commit can move between them)."""
    mine = repo.repository_format
    if theirs != mine:
        raise RepositoryError("MD801", f"{url} is a repository of format {theirs} and this one of format {mine}: their "
                                       "commit ids are of different kinds (SPEC.md §4.3), so no commit moves between "
                                       "them; clone it into a repository of its own")


def _missing_ancestors(store: Store, tips: Iterable[str], have: set[str]) -> list[str]:
    """The commits reachable from ``tips`` that ``have`` lacks, walking no further than ``have``."""
    seen: set[str] = set()
    stack = [tip for tip in tips if tip not in have]
    while stack:
        commit_id = stack.pop()
        if commit_id in seen:
            continue
        seen.add(commit_id)
        stack.extend(p for p in store.parents(commit_id) if p not in have and p not in seen)
    return sorted(seen)


# ---------------------------------------------------------------- fetch
def fetch(repo: Store, remote: str, options: dict | None = None, progress: Progress | None = None,
          snapshots: bool = False, clone: bool = False) -> FetchReport:
    """Copy the commits ``remote`` has and this repository lacks, then set ``refs/remotes/<remote>/*``
    to its branches (removing those of branches it no longer has) and create its tags that are missing
    here (a local tag of that name that differs is kept, with a warning). With ``snapshots``, then copy
    the remote's snapshots of commits here that have none (§13.5: caches their commits vouch for when a
    checkout reads them; one that cannot be opened is left behind, with a warning). ``clone``: the fetch that
    starts a new repository, which records no creation of its refs in reflogs (§13.6, as git's clone)."""
    url = remote_url(repo, remote)
    end = open_end(url, options)
    same_format(repo, url, end.check_format())
    refs = end.refs(known=_known_targets(repo, remote))
    sizes = end.commit_sizes()
    local = set(repo.commit_ids())
    for ref, target in sorted(refs.items()):
        if target not in local and target not in sizes:
            raise RepositoryError("MD801", f"{url}: {ref} names commit {target[:12]}, which the remote does not have")
    wanted = {c: s for c, s in sizes.items() if c not in local}
    for commit_id, size in wanted.items():
        if size > MAX_COMMIT_FILE_BYTES:
            raise RepositoryError("MD801", f"{url}: commit {commit_id[:12]} is listed at {size} bytes, more than any "
                                           f"commit file may hold ({MAX_COMMIT_FILE_BYTES})")
    report = FetchReport(remote)
    received: dict[str, str] = {}  # id → temporary name
    try:
        refused: dict[str, RepositoryError] = {}  # what only matters if the refs reach it

        def receive(commit_id: str) -> str | None:
            try:
                return repo.receive_commit(commit_id, end.read_commit(commit_id), wanted[commit_id])
            except RepositoryError as exc:
                refused[commit_id] = exc
                return None

        _in_parallel(sorted(wanted), wanted, receive, progress, received)
        for commit_id in [c for c, temp in received.items() if temp is None]:
            del received[commit_id]
        reachable = _reachable(repo, url, refs, local, set(received), refused)
        with repo.lock():
            for commit_id in sorted(reachable):  # the others (a killed pusher's, say) are discarded below
                repo.file_received(received.pop(commit_id), commit_id)
                report.commits.append(commit_id)
                report.bytes += wanted[commit_id]
            _set_tracking_refs(repo, remote, refs, report, record=not clone)
    finally:
        for temp in received.values():
            repo.discard_received(temp)
    if snapshots:
        _fetch_snapshots(repo, end, local | set(report.commits), report, progress)
    return report


def _fetch_snapshots(repo: Store, end: RemoteEnd, commits: set[str], report: FetchReport,
                     progress: Progress | None) -> None:
    mine = {name[:-len(".mdiff")] for name in repo.ref_files("snapshots")}
    wanted = {c: size for c, size in end.commit_sizes("snapshots").items()
              if c in commits and c not in mine and size <= MAX_COMMIT_FILE_BYTES}

    def receive(commit_id: str) -> str | None:
        try:
            return repo.receive_commit(commit_id, end.read_commit(commit_id, "snapshots"), wanted[commit_id],
                                       "snapshots")
        except RepositoryError as exc:
            log.warning("the snapshot of %s is left behind: %s", commit_id[:12], exc.message)
            return None

    received: dict[str, str | None] = {}
    _in_parallel(sorted(wanted), wanted, receive, progress, received)
    with repo.lock():
        for commit_id, temp in sorted(received.items()):
            if temp is not None:
                repo.file_received(temp, commit_id, "snapshots")
                report.snapshots.append(commit_id)
                report.snapshot_bytes += wanted[commit_id]


def _reachable(repo: Store, url: str, refs: dict[str, str], local: set[str], received: set[str],
               refused: dict[str, RepositoryError]) -> set[str]:
    """The received commits that the remote's refs reach; unless every commit they reach is here or was
    received (parents of received commits from their verified metadata), the error that refused it
    (MD800, …) or MD801 for one missing. A commit no ref reaches may be refused: it is not filed anyway."""
    seen: set[str] = set()
    stack = sorted(set(refs.values()))
    while stack:
        commit_id = stack.pop()
        if commit_id in seen or commit_id in local:
            continue  # a local commit's ancestors are local (§13.1: a missing one is the repository's MD801)
        seen.add(commit_id)
        if commit_id in refused:
            raise refused[commit_id]
        if commit_id not in received:
            raise RepositoryError("MD801", f"{url}: commit {commit_id[:12]}, which its refs need, is missing there")
        stack.extend(repo.received_parents(commit_id))
    return seen


def _set_tracking_refs(repo: Store, remote: str, refs: dict[str, str], report: FetchReport, record: bool = True) -> None:
    """Move ``refs/remotes/<remote>/*`` to the remote's branches and create its missing tags. All together
    (``move_refs``: each ref and its reflog written and synced as §13.6 says, the syncs of many refs waited for
    together), so that a remote with thousands of refs does not wait on the disk once a ref."""
    before = tracking_refs(repo, remote)
    branches = {ref.removeprefix("refs/heads/"): c for ref, c in refs.items() if ref.startswith("refs/heads/")}
    moves: list[tuple[str, str | None, str]] = []
    here: set[str] = set()  # commits checked to be here: each once, whatever the number of refs naming it

    def check(target: str, ref: str) -> None:
        if target not in here:
            here.add(repo.existing_commit(target, f"ref {ref}"))

    for branch, target in sorted(branches.items()):
        if before.get(branch) != target:
            check(target, f"refs/remotes/{remote}/{branch}")
            moves.append((f"refs/remotes/{remote}/{branch}", target, f"fetch {remote}"))
            report.branches[branch] = (before.get(branch), target)
    for branch in sorted(set(before) - set(branches)):
        moves.append((f"refs/remotes/{remote}/{branch}", None, f"fetch {remote}: gone from the remote"))
        report.branches[branch] = (before[branch], None)
    for ref, target in sorted(refs.items()):
        if not ref.startswith("refs/tags/"):
            continue
        name = ref.removeprefix("refs/tags/")
        mine = repo.read_ref(ref) if repo.kind(ref) not in (None, "a folder") else None
        if mine is None:
            check(target, ref)
            moves.append((ref, target, f"fetch {remote}"))
            report.tags[name] = target
        elif mine != target:
            log.warning("tag %s here names %s, on %s %s: the local tag is kept", name, mine[:12], remote, target[:12])
            report.tags_kept.append(name)
    repo.move_refs(moves, record)


# ---------------------------------------------------------------- push
def push(repo: Store, remote: str, branch: str, force: bool = False, options: dict | None = None,
         progress: Progress | None = None, snapshots: bool = False) -> PushReport:
    """Upload the commits of ``branch`` (and of local tags) the remote lacks — with ``snapshots``, and
    the snapshots of the branch's commits it lacks — then move the remote's branch to it by
    compare-and-swap: refused (MD803) when the remote's branch is not an ancestor (unless ``force``) or
    moved while this push ran. Tags the remote lacks are created there."""
    from mdiff.repo.history import ancestors

    url = remote_url(repo, remote)
    tip = repo.branch_target(branch)
    if tip is None:
        raise RepositoryError("MD801", f"no branch {branch!r} with commits to push")
    end = open_end(url, options)
    same_format(repo, url, end.ensure(branch, repo.repository_format))
    refs = end.refs(known=_known_targets(repo, remote))
    ref = f"refs/heads/{branch}"
    before = refs.get(ref)
    forced = False
    if before is not None and before != tip and (repo.kind(f"commits/{before}.mdiff") is None  # not even here
                                                 or before not in ancestors(repo, tip)):
        if not force:
            raise RepositoryError("MD803", f"{remote}/{branch} has commits that {branch} lacks (not a fast-forward): "
                                           f"`mdiff pull {remote} {branch}` first, or push --force to replace them")
        forced = True
    local_tags = _local_tags(repo)
    tags = {r: c for r, c in local_tags.items() if r not in refs}
    for r in sorted(set(local_tags) & set(refs)):
        if refs[r] != local_tags[r]:
            log.warning("%s on %s names another commit: left as it is", r, remote)
    sizes = end.commit_sizes()
    needed = _missing_ancestors(repo, [tip, *tags.values()], set(sizes))
    local_sizes = {c: repo.commit_path(c).stat().st_size for c in needed}
    report = PushReport(remote, branch, before, tip, forced=forced)
    _upload(repo, end, needed, local_sizes, progress)
    report.commits, report.bytes = needed, sum(local_sizes.values())
    if snapshots:
        theirs = set(end.commit_sizes("snapshots"))
        reach = ancestors(repo, tip)
        mine = sorted(c for name in repo.ref_files("snapshots") if (c := name[:-len(".mdiff")]) in reach
                      and c not in theirs and repo.kind(f"snapshots/{name}") == "a regular file")
        snapshot_sizes = {c: repo.snapshot_path(c).stat().st_size for c in mine}
        _in_parallel(mine, snapshot_sizes, lambda c: end.write_commit(c, repo.snapshot_chunks(c), snapshot_sizes[c],
                                                                      "snapshots"), progress, {})
        report.snapshots, report.snapshot_bytes = mine, sum(snapshot_sizes.values())
    if before != tip:
        end.update_ref(ref, before, tip)  # only now: every commit it needs is there (§13.8)
    for r, target in sorted(tags.items()):
        with contextlib.suppress(RepositoryError):
            end.update_ref(r, None, target)
            report.tags.append(r.removeprefix("refs/tags/"))
    with repo.lock():
        repo.existing_commit(tip, f"ref refs/remotes/{remote}/{branch}")
        repo.move_ref(f"refs/remotes/{remote}/{branch}", tip, f"push {remote} {branch}")
    return report


def _upload(repo: Store, end: RemoteEnd, needed: list[str], sizes: dict[str, int], progress: Progress | None) -> None:
    """Parents before children (§13.8: no commit on the remote lacks its parents, whenever a pusher is
    killed): in waves, each of the commits whose parents are all on the remote already, in parallel."""
    counter = ByteCounter(progress, sizes)
    left = set(needed)

    def blocks(commit_id: str) -> bytes | None:  # §13.8: a format-2 commit goes with its block list
        return repo.commit_blocks(commit_id) if repo.repository_format == 2 else None

    while left:
        wave = sorted(c for c in left if not set(repo.parents(c)) & left)
        _in_parallel(wave, sizes, lambda c: end.write_commit(c, repo.commit_chunks(c), sizes[c], blocks=blocks(c)),
                     lambda item, done, total: counter(item), {})
        left -= set(wave)


def _known_targets(repo: Store, remote: str) -> set[str]:
    """The commits this repository's refs for ``remote`` name — its remote-tracking refs, as the last fetch left
    them, and its tags —: what the remote's refs most often still name, which a listing may vouch for (§13.8).
    Read before the writers' lock, as a hint only: `_set_tracking_refs` reads the refs again under the lock, since
    another fetch may move them in between, and the moves and reflog lines must start from what is there then."""
    known: set[str] = set()
    for name in repo.ref_files(f"refs/remotes/{remote}"):
        with contextlib.suppress(RepositoryError):
            known.add(repo.unchecked_target(f"refs/remotes/{remote}/{name}") or "")
    known.update(_local_tags(repo).values())
    known.discard("")
    return known


def _local_tags(repo: Store) -> dict[str, str]:
    found = {}
    for name in repo.ref_files("refs/tags"):
        with contextlib.suppress(RepositoryError):
            target = repo.read_ref(f"refs/tags/{name}")
            if target is not None:
                found[f"refs/tags/{name}"] = target
    return found


# ---------------------------------------------------------------- reading a remote without cloning it
def fetch_first_parent_line(repo: Store, url: str, rev: str, options: dict | None = None,
                            progress: Progress | None = None) -> str:
    """The commit ``rev`` names on the remote at ``url``, with the commits a checkout of it needs fetched into
    ``repo``: ``rev`` resolved against the remote's refs (§13.3: HEAD, a full id, a branch, a tag, a unique
    prefix of its commit files; ``~N`` / ``^``), then its first parents fetched back to the root, each
    verified as a fetch verifies it (MD800). Only that line of history moves, never the others; each commit
    moves whole, since its id can be checked only against all its bytes (§13.2)."""
    from mdiff.repo.history import resolve_on_remote

    end = open_end(url, options)
    same_format(repo, url, end.check_format())
    sizes = end.commit_sizes()
    counter = ByteCounter(progress, sizes)

    def have(c: str) -> str:
        if repo.kind(f"commits/{c}.mdiff") is None:
            if c not in sizes or sizes[c] > MAX_COMMIT_FILE_BYTES:
                raise RepositoryError("MD801", f"{url}: commit {c[:12]}, which {rev!r} needs, is missing there")
            temp = repo.receive_commit(c, end.read_commit(c), sizes[c])
            with repo.lock():
                repo.file_received(temp, c)
            counter(c)
        return c

    commit_id = resolve_on_remote(end, rev, sizes, lambda c: repo.parents(have(c)))
    line: str | None = commit_id
    while line is not None:  # the first-parent line back to the root: what a checkout replays (§13.4)
        parents = repo.parents(have(line))
        line = parents[0] if parents else None
    return commit_id
