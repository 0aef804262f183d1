"""SPEC.md §13.1: a format-1 repository copied into a new repository of format 2 — `mdiff migrate DEST`.

Every commit gets a new id (a format-2 id hashes other bytes, and each commit names its parents' ids), so
the old repository is left as it is and a new one is made beside it: each commit, verified (MD800), is
copied with its parents' new ids written over the old ones in its `commit` attribute — ids are 64 digits
in both formats, so the attribute keeps its length and nothing else of the file moves — then filed as a
fetched commit is (verified against its new id, read back as its readers will read it). Branches, tags
and HEAD follow, each ref moved once (its reflog starts there). Reflogs, snapshots (caches: `mdiff snapshot`
makes them again), remotes and working records are not copied: they name old ids or other repositories.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mdiff import block_ids
from mdiff.errors import RepositoryError
from mdiff.progress import ByteCounter, Progress
from mdiff.repo.store import Store

CHUNK = 8 << 20


@dataclass
class Migration:
    """What a migration made: ``ids`` old → new, for every commit copied; the refs it set."""

    destination: Path
    ids: dict[str, str] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    head: str = ""  # the branch HEAD names, or the (new) commit it is detached at
    snapshots_dropped: int = 0


def _order(source: Store, commits: list[str]) -> list[str]:
    """Parents before children (each commit's metadata read from its verified file: MD800)."""
    parents = {c: source.parents(c) for c in commits}
    known = set(commits)
    done: list[str] = []
    placed: set[str] = set()
    for commit_id in commits:
        stack = [(commit_id, False)]
        while stack:
            c, expanded = stack.pop()
            if c in placed:
                continue
            if expanded:
                placed.add(c)
                done.append(c)
                continue
            stack.append((c, True))
            for p in parents[c]:
                if p not in known:
                    raise RepositoryError("MD801", f"commit {c[:12]} names parent {p[:12]}, which is not in the "
                                                   "repository: fix it (`mdiff fsck`) before migrating")
                if p not in placed:
                    stack.append((p, False))
    return done


def _chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            yield chunk


def migrate(source: Store, destination: str | os.PathLike[str], progress: Progress | None = None) -> Migration:
    """A new format-2 repository in ``destination`` (which holds none: MD801 otherwise) with every commit of
    the format-1 repository ``source`` (MD801 when it is of format 2 already), its branches, tags and HEAD."""
    import h5py

    from mdiff.hdf5walk.attributes import overwrite_string
    from mdiff.format.constants import ATTR_COMMIT
    from mdiff.repo.remote_ends import MAX_COMMIT_FILE_BYTES

    if source.repository_format != 1:
        raise RepositoryError("MD801", f"{source.dir} is of format {source.repository_format} already: nothing to migrate")
    target = Path(destination)
    head_branch, head_commit = source.head_ref()
    Store.create(target, head_branch or "main", 2)
    new = Store(target, source.isolation)
    report = Migration(target)
    commits = source.commit_ids()
    counter = ByteCounter(progress, {c: source.commit_path(c).stat().st_size for c in commits})
    try:
        with tempfile.TemporaryDirectory(prefix="mdiff-migrate-") as work:
            for commit_id in _order(source, commits):
                meta = source.metadata(commit_id)
                copy = os.path.join(work, "commit.mdiff")
                with source.commit_file(commit_id) as readable:  # verified (MD800), read from those bytes
                    shutil.copyfile(readable, copy)
                if meta.parents:
                    moved = dataclasses.replace(meta, parents=tuple(report.ids[p] for p in meta.parents))
                    with h5py.File(copy, "r+") as f:
                        overwrite_string(f, ATTR_COMMIT, moved.to_attribute())  # same length: ids are 64 digits
                new_id = block_ids.of_chunks(_chunks(copy)).commit_id
                temp = new.receive_commit(new_id, _chunks(copy), MAX_COMMIT_FILE_BYTES)
                with new.lock():
                    new.file_received(temp, new_id)
                report.ids[commit_id] = new_id
                counter(commit_id)
        with new.lock():
            for branch, target_id in source.branches().items():
                if target_id is not None:
                    new.set_branch(branch, report.ids[target_id], "migrate: from format 1")
                    report.branches[branch] = report.ids[target_id]
            for tag, target_id in source.tags().items():
                if target_id is not None:  # as it is, even beside a branch of its name (create_tag refuses that)
                    new.check_tag_name(tag)
                    new.move_ref(f"refs/tags/{tag}", report.ids[target_id], "migrate: from format 1")
                    report.tags[tag] = report.ids[target_id]
            if head_commit is not None:
                new.set_head(commit_id=report.ids[head_commit], message="migrate: from format 1")
                report.head = report.ids[head_commit]
            else:
                report.head = head_branch or "main"
    except BaseException:
        shutil.rmtree(target / ".mdiff", ignore_errors=True)
        raise
    report.snapshots_dropped = sum(1 for name in source.ref_files("snapshots") if name.endswith(".mdiff"))
    return report
