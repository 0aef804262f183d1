"""SPEC.md §13.3: naming commits (revisions), walking history, drawing it."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from mdiff.errors import RepositoryError
from mdiff.repo.names import COMMIT_ID, shown
from mdiff.repo.remotes import tracking_target

if TYPE_CHECKING:
    from mdiff.format.commit import Commit
    from mdiff.repo.remote_ends import RemoteEnd
    from mdiff.repo.store import Store


class CommitGraph(Protocol):
    """What walking history reads: each commit's parents (a repository, or a remote read in place)."""

    def parents(self, commit_id: str) -> tuple[str, ...]: ...

    def metadata(self, commit_id: str) -> Commit: ...

log = logging.getLogger(__name__)

_REV = re.compile(r"(?P<base>[^~^]+)(?P<moves>(?:~\d*|\^)*)")
_PREFIX = re.compile(r"[0-9a-f]{4,63}")


def resolve(repo: Store, rev: str) -> str:
    """A commit id from ``HEAD``, a full commit id, a branch, a tag, a remote-tracking ref (``origin/main``),
    or a unique prefix (≥ 4 hex digits), looked up in that order (§13.3: a full id always means that
    commit, whatever a ref may be called; a branch wins over a tag of its name, which no writer makes),
    each optionally followed by ``~N`` / ``^`` (N first parents back). A move costs at most
    the history's length: it stops at a root, and parents are read from verified commits (MD800),
    which cannot form a cycle."""
    m = _REV.fullmatch(rev.strip())
    if not m:
        raise RepositoryError("MD801", f"{shown(rev)[:80]!r} is not a revision: HEAD, a branch, a tag or a commit id (or its first "
                                       "4+ digits), optionally followed by ~N or ^")
    base = m.group("base")
    commit_id: str | None
    if base == "HEAD":
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
    for move in re.findall(r"~\d*|\^", m.group("moves")):
        digits = move[1:]
        steps = 1 if not digits else int(digits) if len(digits) <= 18 else 10**18  # past any history
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
    """The commit ``rev`` names on the remote ``end`` (§13.3: HEAD, a full id, a branch, a tag, a unique
    prefix of its commit files — ``sizes``, as ``end.commit_sizes()`` lists them; ``~N`` / ``^`` through
    ``parents``), MD801 when it names none."""

    m = _REV.fullmatch(rev.strip())
    if not m:
        raise RepositoryError("MD801", f"{rev[:80]!r} is not a revision")
    base, refs = m.group("base"), end.refs()
    head = end.head_branch()
    candidates = [] if COMMIT_ID.fullmatch(base) else [f"refs/heads/{head}"] if base == "HEAD" and head else \
        [f"refs/heads/{base}", f"refs/tags/{base}"]
    commit_id = base if COMMIT_ID.fullmatch(base) else next((refs[r] for r in candidates if r in refs), None)
    if commit_id is None and _PREFIX.fullmatch(base):
        matches = [c for c in sizes if c.startswith(base)]
        commit_id = matches[0] if len(matches) == 1 else None
    if commit_id is None:
        raise RepositoryError("MD801", f"{end.url}: {base[:80]!r} names no commit there")
    for move in re.findall(r"~\d*|\^", m.group("moves")):
        digits = move[1:]
        for _ in range(1 if not digits else int(digits) if len(digits) <= 18 else 10**18):
            found = parents(commit_id)
            if not found:
                raise RepositoryError("MD801", f"{rev[:80]!r} goes back past a root commit")
            commit_id = found[0]
    return commit_id
