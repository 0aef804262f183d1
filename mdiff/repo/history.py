"""SPEC.md §13.3: naming commits (revisions), walking history, drawing it."""

from __future__ import annotations

import functools
import logging
import re
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mdiff.errors import RepositoryError
from mdiff.repo.names import COMMIT_ID, shown, valid_branch
from mdiff.repo.remotes import REMOTE_NAME, tracking_target

if TYPE_CHECKING:
    from mdiff.format.commit import Commit
    from mdiff.repo.reflog import ReflogEntry
    from mdiff.repo.remote_ends import RemoteEnd
    from mdiff.repo.store import Store


class CommitGraph(Protocol):
    """What walking history reads: each commit's parents (a repository, or a remote read in place)."""

    def parents(self, commit_id: str) -> tuple[str, ...]: ...

    def metadata(self, commit_id: str) -> Commit: ...

log = logging.getLogger(__name__)

# §13.3: NAME, NAME@{N}, @{N} or @, then ~N / ^ moves. No branch, tag or remote name holds '@', '~' or '^' (§13.1).
_REV = re.compile(r"(?P<base>[^~^@]*)(?:@\{(?P<nth>[0-9]+)\}|(?P<at>@))?(?P<moves>(?:~\d*|\^)*)")
_PREFIX = re.compile(r"[0-9a-f]{4,63}")
_FORMS = ("HEAD (or @), a branch, a tag or a commit id (or its first 4+ digits), or REF@{N} (REF's value N moves "
          "ago, from its reflog), optionally followed by ~N or ^")
_PAST_ANY = 10**18  # a count of this many digits is past any history or reflog


def _parse(rev: str) -> tuple[str, int | None, str]:
    """(the name: "HEAD" for `@`, "" for `@{N}`; N of `@{N}`, or None; the moves), MD801 if not a revision."""
    m = _REV.fullmatch(rev.strip())
    if not m or (m.group("at") and m.group("base")) or not (m.group("base") or m.group("nth") or m.group("at")):
        hint = " (@{-N}, @{upstream} and dates are not revisions of mdiff)" if "@{" in rev else ""
        raise RepositoryError("MD801", f"{shown(rev)[:80]!r} is not a revision: {_FORMS}{hint}")
    nth = m.group("nth")
    return ("HEAD" if m.group("at") else m.group("base"), None if nth is None else _count(nth), m.group("moves"))


def _count(digits: str) -> int:
    return int(digits) if len(digits) <= 18 else _PAST_ANY


def reflog_ref(repo: Store, name: str) -> str:
    """The ref whose reflog ``NAME@{N}`` reads (§13.3): ``HEAD`` for HEAD; for the empty name (``@{N}``)
    the current branch's, HEAD's when detached (as git); else the name looked up as a revision's is —
    branch, tag, remote-tracking ref — and then as a branch or tag that no longer exists but whose reflog
    does. MD801 when the name has no reflog (a commit id has none)."""
    if name == "":
        branch = repo.head_ref()[0]
        return f"refs/heads/{branch}" if branch else "HEAD"
    if name == "HEAD":
        return "HEAD"
    if COMMIT_ID.fullmatch(name) or not (valid_branch(name) or "/" in name):
        raise RepositoryError("MD801", f"{shown(name)[:80]!r} has no reflog: only HEAD, branches, tags and "
                                       "remote-tracking refs have one (§13.3)")
    if repo.has_branch(name):
        return f"refs/heads/{name}"
    if repo.has_tag(name):
        return f"refs/tags/{name}"
    remote, _, branch = name.partition("/")
    tracking = f"refs/remotes/{name}" if (REMOTE_NAME.fullmatch(remote) and ".." not in remote
                                          and not remote.endswith(".lock") and valid_branch(branch)) else None
    if tracking is not None and repo.kind(tracking) not in (None, "a folder"):
        return tracking
    for ref in ([f"refs/heads/{name}", f"refs/tags/{name}"] if valid_branch(name) else []) + ([tracking] if tracking else []):
        if repo.kind(f"logs/{ref}") is not None:  # a deleted ref's reflog stays (§13.6)
            return ref
    raise RepositoryError("MD801", f"{shown(name)[:80]!r} is neither a branch, a tag nor a remote-tracking ref, "
                                   "and no reflog of one was left by that name")


def reflog_target(repo: Store, name: str, nth: int) -> str:
    """The commit ``NAME@{nth}`` names (§13.3): the new side of the ``nth`` newest entry of the reflog of
    :func:`reflog_ref`, ``@{0}`` the newest. MD801 when the reflog is missing, malformed or shorter, when
    that move deleted the ref, or when its commit is not in the repository (gc removed it once the entry
    expired). The reflog is read a line at a time, keeping the last ``nth + 1`` entries."""
    ref = reflog_ref(repo, name)
    spelled = f"{shown(name)[:80]}@{{{nth}}}"
    if repo.kind(f"logs/{ref}") is None:
        raise RepositoryError("MD801", f"{spelled}: {ref} has no reflog (.mdiff/logs/{ref}; §13.6)")
    window: deque[ReflogEntry] = deque(maxlen=nth + 1)
    count = 0
    for entry in repo.reflog_entries(ref):
        window.append(entry)
        count += 1
    if count <= nth:
        held = "no entry" if not count else f"only {count} entr{'y' if count == 1 else 'ies'} (@{{0}} to @{{{count - 1}}})"
        raise RepositoryError("MD801", f"{spelled}: the reflog of {ref} holds {held}; `mdiff reflog` lists them")
    entry = window[0]
    if entry.new is None:
        raise RepositoryError("MD801", f"{spelled} is the move that deleted {ref} ({entry.message}): it names no "
                                       f"commit; {shown(name)[:80]}@{{{nth + 1}}} is where it was")
    return repo.existing_commit(entry.new, spelled)


def resolve(repo: Store, rev: str) -> str:
    """A commit id from ``HEAD`` (or ``@``), a full commit id, a branch, a tag, a remote-tracking ref
    (``origin/main``), or a unique prefix (≥ 4 hex digits), looked up in that order (§13.3: a full id
    always means that commit, whatever a ref may be called; a branch wins over a tag of its name, which no
    writer makes); or ``REF@{N}`` / ``@{N}``, the value a ref had N moves ago (:func:`reflog_target`);
    each optionally followed by ``~N`` / ``^`` (N first parents back). A move costs at most
    the history's length: it stops at a root, and parents are read from verified commits (MD800),
    which cannot form a cycle."""
    base, nth, moves = _parse(rev)
    commit_id: str | None
    if nth is not None:
        commit_id = reflog_target(repo, base, nth)
    elif base == "HEAD":
        commit_id = repo.head()[1]
        if commit_id is None:
            raise RepositoryError("MD801", "HEAD has no commit yet; make the first commit")
    elif COMMIT_ID.fullmatch(base):
        commit_id = repo.existing_commit(base, "the revision")
    elif repo.has_branch(base):
        commit_id = repo.branch_target(base)
        if repo.has_tag(base):
            log.warning("%r is a branch and a tag: the branch is meant (§13.3); name the tag's commit by its id "
                        "(`mdiff tag` lists them), and rename one of them", base)
        if _PREFIX.fullmatch(base) and any(c.startswith(base) for c in repo.commit_ids()):
            log.warning("%r is a branch and the first digits of a commit id: the branch is meant (§13.3); give "
                        "more digits, or the full id, to name the commit", base)
    elif repo.has_tag(base):
        commit_id = repo.tag_target(base)
        if _PREFIX.fullmatch(base) and any(c.startswith(base) for c in repo.commit_ids()):
            log.warning("%r is a tag and the first digits of a commit id: the tag is meant (§13.3); give "
                        "more digits, or the full id, to name the commit", base)
    elif "/" in base and (tracked := tracking_target(repo, base)) is not None:
        commit_id = tracked  # a remote-tracking ref, <remote>/<branch> (§13.8)
    elif _PREFIX.fullmatch(base):
        matches = [c for c in repo.commit_ids() if c.startswith(base)]
        if not matches:
            raise RepositoryError("MD801", f"no commit id starts with {base!r}; `mdiff log --all --oneline` lists them")
        if len(matches) > 1:
            raise RepositoryError("MD801", f"{base!r} starts {len(matches)} commit ids "
                                           f"({', '.join(c[:12] for c in matches[:4])}…); give more digits")
        commit_id = matches[0]
    else:
        names = repo.branch_names()
        raise RepositoryError("MD801", f"{shown(base)[:80]!r} is neither a branch, a tag nor a commit id (branches: "
                                       f"{', '.join(names[:8]) or 'none yet'}{' …' if len(names) > 8 else ''})")
    if commit_id is None:  # a ref that is a folder of refs: it names no commit
        raise RepositoryError("MD801", f"{shown(base)[:80]!r} names no commit")
    for move in re.findall(r"~\d*|\^", moves):
        digits = move[1:]
        steps = 1 if not digits else _count(digits)  # past any history
        for _ in range(steps):
            parents = repo.parents(commit_id)
            if not parents:
                raise RepositoryError("MD801", f"{shown(rev)[:80]!r} goes back past a root commit")
            commit_id = parents[0]
    return commit_id


def ancestors(repo: CommitGraph, commit_id: str) -> set[str]:
    """``commit_id`` and every commit reachable from it through any parent."""
    seen: set[str] = set()
    stack = [commit_id]
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            stack.extend(repo.parents(c))
    return seen


def ahead_behind(repo: CommitGraph, ours: str | None, theirs: str) -> tuple[int, int]:
    """(the commits reachable from ``ours`` and not from ``theirs``, the commits reachable from ``theirs`` and
    not from ``ours``), through every parent, as git counts a branch ahead of and behind its upstream. Each
    side's history is walked whole, its commits verified (§13.2), unless the two are one commit."""
    if ours == theirs:
        return 0, 0
    mine = ancestors(repo, ours) if ours is not None else set()
    other = ancestors(repo, theirs)
    return len(mine - other), len(other - mine)


def first_parent_line(repo: CommitGraph, commit_id: str, stop: str | None = None) -> list[str]:
    """``commit_id`` and its first parents back to a root, or to ``stop`` (included)."""
    line = [commit_id]
    while line[-1] != stop:
        parents = repo.parents(line[-1])
        if not parents:
            break
        line.append(parents[0])
    return line


def merge_base(repo: CommitGraph, a: str, b: str) -> str | None:
    """The best common ancestor: a common ancestor that no other common ancestor descends from."""
    common = ancestors(repo, a) & ancestors(repo, b)
    if not common:
        return None
    dominated = set()
    for c in common:
        dominated |= ancestors(repo, c) - {c}
    best = sorted(common - dominated, key=lambda c: (repo.metadata(c).date, c))
    return best[-1]


def readable_refs(store: Store, remotes: bool = True) \
        -> tuple[dict[str, str], dict[str, str], dict[str, str], list[tuple[str, RepositoryError]]]:
    """(branches, tags, tracked, problems): every branch, tag and — with ``remotes`` — remote-tracking
    branch ("<remote>/<branch>") that names a commit, each read on its own, so that one malformed ref
    hides no other; ``problems`` holds (the ref's path under .mdiff/, its error) of each that cannot be
    read."""
    from mdiff.repo.remotes import remote_names

    branches: dict[str, str] = {}
    tags: dict[str, str] = {}
    tracked: dict[str, str] = {}
    problems: list[tuple[str, RepositoryError]] = []

    def each(found: dict[str, str], where: str, names: Callable[[], list[str]],
             target: Callable[[str], str | None], prefix: str = "") -> None:
        try:
            listed = names()
        except RepositoryError as exc:
            problems.append((where, exc))
            return
        for name in listed:
            try:
                commit = target(name)
            except RepositoryError as exc:
                problems.append((f"{where}/{name}", exc))
                continue
            if commit is not None:
                found[prefix + name] = commit

    each(branches, "refs/heads", store.branch_names, store.branch_target)
    each(tags, "refs/tags", store.tag_names, store.tag_target)
    if remotes:
        try:
            names = remote_names(store)
        except RepositoryError as exc:
            problems.append(("remotes", exc))
            names = []
        for remote in names:
            folder = f"refs/remotes/{remote}"
            each(tracked, folder, functools.partial(_tracking_names, store, folder),
                 functools.partial(_tracking_target, store, folder), f"{remote}/")
    return branches, tags, tracked, problems


def _tracking_names(store: Store, folder: str) -> list[str]:
    return [name for name in store.ref_files(folder) if valid_branch(name)]


def _tracking_target(store: Store, folder: str, branch: str) -> str | None:
    return store.read_ref(f"{folder}/{branch}")


def readable_heads(repo: CommitGraph, heads: list[str]) -> tuple[list[str], dict[str, RepositoryError]]:
    """(the heads whose whole history can be read, {commit id: its error} for each commit that cannot):
    a head with an unreadable commit in its history is left out, the others kept — one bad commit
    blinds a walk of every branch to none of the others."""
    good: list[str] = []
    bad: dict[str, RepositoryError] = {}
    readable: set[str] = set()
    for head in heads:
        stack, seen, broken = [head], set(), False
        while stack:
            c = stack.pop()
            if c in seen or c in readable:
                continue
            seen.add(c)
            if c in bad:
                broken = True
                continue
            try:
                repo.metadata(c)
                stack.extend(repo.parents(c))
            except RepositoryError as exc:
                bad[c] = exc
                broken = True
        if not broken:
            readable |= seen
            good.append(head)
    return good, bad


def topological(repo: CommitGraph, heads: list[str]) -> list[str]:
    """Every commit reachable from ``heads``, children before parents, each line of history kept
    together: a merge is followed by its first parent's line, then by the merged line."""
    order: list[str] = []
    done: set[str] = set()
    for head in sorted(heads, key=lambda c: (repo.metadata(c).date, c)):  # the newest head ends up first
        stack = [(head, False)]
        while stack:
            c, expanded = stack.pop()
            if expanded:
                order.append(c)
            elif c not in done:
                done.add(c)
                stack.append((c, True))
                # parents pushed first-parent last, so it is explored first and ends up nearest its child
                stack.extend((p, False) for p in repo.parents(c) if p not in done)
    return order[::-1]


def graph_lines(repo: CommitGraph, heads: list[str], describe: Callable[[str], str]) -> list[str]:
    """A text graph like ``git log --graph``: one ``*`` row per commit, ``|`` for other lines of
    history, ``|\\`` where a merge opens a lane and ``|/`` where lanes join."""
    lanes: list[str] = []
    lines = []
    for c in topological(repo, heads):
        if c not in lanes:
            lanes.append(c)
        for i in reversed([i for i, lane in enumerate(lanes) if lane == c][1:]):  # lanes that end here join
            lines.append(" ".join("|" for _ in range(i)) + "/")
            del lanes[i]
        col = lanes.index(c)
        lines.append(" ".join("*" if i == col else "|" for i in range(len(lanes))) + "  " + describe(c))
        parents = list(repo.parents(c))
        if not parents:
            del lanes[col]
            continue
        lanes[col] = parents[0]
        for p in parents[1:]:
            lanes.insert(col + 1, p)
            lines.append(" ".join("|" for _ in range(col + 1)) + "\\")
    return lines


def resolve_on_remote(end: RemoteEnd, rev: str, sizes: dict[str, int], parents: Callable[[str], tuple[str, ...]]) -> str:
    """The commit ``rev`` names on the remote ``end`` (§13.3: HEAD or @, a full id, a branch, a tag, a unique
    prefix of its commit files — ``sizes``, as ``end.commit_sizes()`` lists them; ``~N`` / ``^`` through
    ``parents``), MD801 when it names none. A remote's reflogs are not read: ``REF@{N}`` is MD801."""

    base, nth, moves = _parse(rev)
    if nth is not None:
        raise RepositoryError("MD801", f"{end.url}: {shown(rev)[:80]!r} names a reflog entry; a remote's reflogs "
                                       "are not read (fetch it, or name the commit by its id)")
    refs = end.refs()
    head = end.head_branch()
    candidates = [] if COMMIT_ID.fullmatch(base) else [f"refs/heads/{head}"] if base == "HEAD" and head else \
        [f"refs/heads/{base}", f"refs/tags/{base}"]
    commit_id = base if COMMIT_ID.fullmatch(base) else next((refs[r] for r in candidates if r in refs), None)
    if commit_id is None and _PREFIX.fullmatch(base):
        matches = [c for c in sizes if c.startswith(base)]
        commit_id = matches[0] if len(matches) == 1 else None
    if commit_id is None:
        raise RepositoryError("MD801", f"{end.url}: {base[:80]!r} names no commit there")
    for move in re.findall(r"~\d*|\^", moves):
        digits = move[1:]
        for _ in range(1 if not digits else _count(digits)):
            found = parents(commit_id)
            if not found:
                raise RepositoryError("MD801", f"{rev[:80]!r} goes back past a root commit")
            commit_id = found[0]
    return commit_id
