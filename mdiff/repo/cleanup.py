"""SPEC.md §13.1, §13.5, §13.6: what a repository holds that nothing needs — the temporary files and
folders of writers that were killed, snapshots no checkout may use, and commits that no ref, HEAD or
young reflog entry reaches and no concurrent writer may be about to name — found for ``fsck`` and
removed by ``gc``. Never a commit that is reachable, nor any commit when what is reachable cannot be
read.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from mdiff.atomic import fsync_directory
from mdiff.errors import MdiffError, RepositoryError
from mdiff.repo.states import StateView
from mdiff.repo.store import Store
from mdiff.validation import validate

# tempfile.mkdtemp's names: merges of earlier mdiff versions staged states in such folders inside .mdiff/
EARLIER_TEMP_FOLDER = re.compile(r"tmp[a-z0-9_]{8}")
SNAPSHOT_FILE = re.compile(r"([0-9a-f]{64})\.mdiff")
# as git's gc.pruneExpire: a commit file younger than this may be a concurrent writer's, not yet named by a ref
DEFAULT_PRUNE_SECONDS = 14 * 86400
# as git's gc.reflogExpireUnreachable: how long a reflog entry keeps the commits it names
DEFAULT_REFLOG_EXPIRE_SECONDS = 30 * 86400


@dataclass(frozen=True)
class Leftover:
    """A file or folder of ``.mdiff/`` that nothing needs (or, in ``GcReport.kept``, that gc left)."""

    path: Path
    size: int  # bytes, of everything under it for a folder
    reason: str


@dataclass
class GcReport:
    removed: list[Leftover] = field(default_factory=list)  # with ``dry_run``: what would be removed
    kept: list[Leftover] = field(default_factory=list)  # what gc could not judge, and why
    dry_run: bool = False
    commits: list[str] = field(default_factory=list)  # the ids of the commits among ``removed``
    expired_entries: int = 0  # reflog entries dropped (with ``dry_run``: that would be)

    @property
    def bytes_freed(self) -> int:
        return sum(item.size for item in self.removed)


def _size(path: Path) -> int:
    """Bytes of a file, a link (itself) or everything under a folder, without following links."""
    if path.is_dir() and not path.is_symlink():
        total = 0
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    pass
        return total
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def temporaries(repo_dir: Path) -> list[Leftover]:
    """Every entry whose name starts with '.' anywhere in ``repo_dir`` (a writer's temporary file or
    folder, §13.1), and the temporary folders an earlier mdiff's merge left at its top."""
    found = []
    for folder, dirs, files in os.walk(repo_dir):  # links are listed, never followed
        here = Path(folder)
        for name in sorted(dirs + files):
            path = here / name
            if name.startswith("."):
                found.append(Leftover(path, _size(path), "a temporary file or folder left by an interrupted writer"))
            elif here == repo_dir and EARLIER_TEMP_FOLDER.fullmatch(name) and path.is_dir() and not path.is_symlink():
                found.append(Leftover(path, _size(path), "a temporary folder left by an interrupted merge of an "
                                                        "earlier mdiff"))
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (here == repo_dir and EARLIER_TEMP_FOLDER.fullmatch(d))]
    return found


def judge_snapshot(repo: Store, path: Path, check_data: bool = True) -> tuple[str, str] | None:
    """None when checkouts may start at the snapshot ``path``; else (code, why not): MD303 for a file
    that is no usable snapshot (invalid, misfiled, of a commit not in the repository), MD807 for one
    that disagrees with its commits (§13.5). Raises the RepositoryError of a chain that cannot be read
    (then nothing can be said of the snapshot)."""
    match = SNAPSHOT_FILE.fullmatch(path.name)
    if match is None:
        return "MD303", "not named <commit id>.mdiff"
    commit_id = match.group(1)
    if path.is_symlink() or not path.is_file():
        return "MD303", "not a regular file"
    if not repo.commit_path(commit_id).is_file():
        return "MD303", f"its commit {commit_id[:12]} is not in the repository"
    errors = [f for f in validate(path, check_data=check_data) if f.is_error]
    if errors:
        return "MD303", f"{errors[0].code}: {errors[0].message}"
    with StateView(repo, commit_id) as view:  # tries the snapshot of commit_id first
        return view.rejected.get(commit_id)


def _ancestors(repo: Store, tips: list[str]) -> set[str]:
    """``tips`` and every commit reachable from them through any parent (each verified: MD800)."""
    seen: set[str] = set()
    while tips:
        commit_id = tips.pop()
        if commit_id not in seen:
            seen.add(commit_id)
            tips += repo.parents(commit_id)
    return seen


def _changed_at(path: Path) -> float:
    """When the file was last written or renamed into place: the later of its modification and
    status-change times (a copy that keeps an old modification time is still new)."""
    found = os.lstat(path)
    return max(found.st_mtime, found.st_ctime)


@dataclass(frozen=True)
class Kept:
    """What gc keeps (§13.6): the commits reachable from a root; and the reflogs with old entries."""

    commits: set[str]
    expiring: dict[str, int]  # ref → how many of its reflog's entries are older than the expiry


def kept(repo: Store, now: float, prune: float, reflog_expire: float) -> Kept:
    """Every commit reachable (through all parents) from a root — a file below refs/ (branches, tags,
    any other refs), HEAD, either side of a reflog entry younger than ``reflog_expire`` seconds, a commit
    file written less than ``prune`` seconds ago — and the reflogs holding older entries. Memory grows
    with the commits, never with a reflog's length. RepositoryError when any of them cannot be read:
    then what is kept is unknown."""
    roots = {target for relative in repo.all_refs() for target in [repo.ref_file_target(relative)] if target}
    head = repo.head()[1]
    roots |= {head} if head else set()
    expiring: dict[str, int] = {}
    present = set(repo.commit_ids())
    for ref in repo.reflog_refs():
        for entry in repo.reflog_entries(ref):
            if now - entry.time < reflog_expire:
                roots.update(c for c in entry.ids() if c in present)  # a commit gc dropped earlier is gone
            else:
                expiring[ref] = expiring.get(ref, 0) + 1
    roots |= {c for c in present if now - _changed_at(repo.commit_path(c)) < prune}
    return Kept(_ancestors(repo, sorted(roots)), expiring)


def collect(repo: Store, dry_run: bool = False, prune: float = DEFAULT_PRUNE_SECONDS,
            reflog_expire: float = DEFAULT_REFLOG_EXPIRE_SECONDS, now: float | None = None) -> GcReport:
    """Remove (or, ``dry_run``, list) the temporaries of ``.mdiff/``, the commits gc need not keep
    (§13.6, :func:`kept`), the reflog entries older than ``reflog_expire`` seconds, and the snapshots no
    checkout may use: unusable ones, lying ones (MD807) and those of commits not kept. The caller
    holds the writers' lock, so no temporary file belongs to a writer at work, and no ref moves."""
    report = GcReport(dry_run=dry_run)
    report.removed += temporaries(repo.dir)
    now = time.time() if now is None else now
    try:
        keep: Kept | None = kept(repo, now, prune, reflog_expire)
    except MdiffError as exc:
        keep = None
        report.kept.append(Leftover(repo.dir / "commits", 0, f"no commit removed: what the refs and reflogs "
                                                             f"reach cannot be read ({exc.code}: {exc.message})"))
    known = keep.commits if keep is not None else None
    if keep is not None:
        for commit_id in repo.commit_ids():
            if commit_id not in keep.commits:
                path = repo.commit_path(commit_id)
                report.removed.append(Leftover(path, _size(path), "a commit no ref, HEAD or young reflog entry "
                                                                  "reaches"))
                report.commits.append(commit_id)
                blocks = repo.blocks_path(commit_id)
                if blocks.is_file() and not blocks.is_symlink():  # after its commit: the list goes with it (§13.1)
                    report.removed.append(Leftover(blocks, _size(blocks), "the block list of a commit gc removes"))
        report.expired_entries = sum(keep.expiring.values())
    folder = repo.dir / "snapshots"
    for path in sorted(folder.glob("*.mdiff")) if folder.is_dir() else []:
        if path.name.startswith("."):
            continue  # a temporary: above
        match = SNAPSHOT_FILE.fullmatch(path.name)
        if match and known is not None and match.group(1) not in known and repo.commit_path(match.group(1)).is_file():
            report.removed.append(Leftover(path, _size(path), "a snapshot of a commit gc does not keep"))
            continue
        try:
            verdict = judge_snapshot(repo, path)
        except RepositoryError as exc:
            report.kept.append(Leftover(path, _size(path), f"its commits cannot be read ({exc.code}: {exc.message})"))
            continue
        if verdict is not None:
            what = "disagrees with its commits" if verdict[0] == "MD807" else "is unusable"
            report.removed.append(Leftover(path, _size(path), f"a snapshot that {what} ({verdict[0]}: {verdict[1]})"))
    if not dry_run:
        if keep is not None:
            for ref in keep.expiring:
                repo.rewrite_reflog(ref, lambda entry: now - entry.time < reflog_expire)
        for item in report.removed:
            if item.path.is_dir() and not item.path.is_symlink():
                shutil.rmtree(item.path, ignore_errors=True)
            else:
                item.path.unlink(missing_ok=True)
        for parent in sorted({item.path.parent for item in report.removed}):
            fsync_directory(parent)
    return report
