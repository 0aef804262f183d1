"""What `mdiff view` serves: the page's static files and the bytes of the file or repository shown.

The page lives with mdiff-js (``tools/mdiff-js/view/``): ``index.html``, ``view.css`` and ``dist/page.js``, one
classic script that ``view/build.mjs`` bundles from the page's modules, its Web Worker, ``src/`` and h5wasm's
browser build (committed, checked up to date by the tests), so that the page also works opened from disk. In a
checkout those files are read where they are; a wheel carries a copy in ``mdiff/view/static/``, which
``setup.py``'s build step makes with :func:`copy_page` (this module imports only the standard library at load,
for that step), with h5wasm's licence (its code is in the bundle).

URLs: ``/view/…`` (the page), ``/node_modules/h5wasm/LICENSE.txt``, ``/api/index.json`` (what is shown: the
repository's format, refs, commits with parents, metadata and sizes, in :func:`graph_order`) and
``/api/commits/<id>.mdiff`` (a commit file's bytes; for a single file, ``/api/commits/file.mdiff``). Nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdiff.view.server import TYPES, Resource

if TYPE_CHECKING:
    from mdiff.repo.store import Store

PACKAGED = Path(__file__).resolve().parent / "static"
SOURCE = Path(__file__).resolve().parents[2] / "tools" / "mdiff-js"
# (folder below the mdiff-js root, the names served from it: "*" every file of a served suffix, recursively)
PAGE_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("view", ("index.html", "view.css")),
    ("view/dist", ("page.js",)),
    ("node_modules/h5wasm", ("LICENSE.txt",)),
)


class PageMissing(FileNotFoundError):
    """The page's files are not where this mdiff looks for them (a checkout without ``npm ci``)."""


def page_root() -> Path:
    """The folder holding ``view/`` and h5wasm's licence: the wheel's copy, else the checkout's mdiff-js."""
    if (PACKAGED / "view" / "index.html").is_file():
        return PACKAGED
    return SOURCE


def page_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(path below ``root``, file) of every file the page needs."""
    for folder, names in PAGE_PARTS:
        base = root / folder
        if names == ("*",):
            if not base.is_dir():
                raise PageMissing(f"the page's folder {base} is missing")
            for here, dirs, files in os.walk(base):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    path = Path(here) / name
                    if not name.startswith(".") and path.suffix in TYPES and not path.is_symlink():
                        yield path.relative_to(root).as_posix(), path
        else:
            for name in names:
                path = base / name
                if not path.is_file():
                    raise PageMissing(f"{path} is missing: install mdiff-js's packages (npm ci --prefix tools/mdiff-js)")
                yield f"{folder}/{name}", path


def copy_page(destination: Path, root: Path = SOURCE) -> list[str]:
    """Copy the page's files from the checkout's mdiff-js into ``destination`` (the wheel's ``static/``)."""
    copied = []
    for relative, path in page_files(root):
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(relative)
    return copied


@dataclass
class Site:
    """Everything the server answers: URL → Resource, and ``/`` → the page."""

    index: dict[str, Any]
    resources: dict[str, Resource] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=lambda: {"/": "/view/"})

    @property
    def description(self) -> str:
        kind = self.index["kind"]
        if kind == "file":
            return f"the file {self.index['name']}"
        if kind == "repository":
            return f"the repository {self.index['name']} ({len(self.index['commits'])} commits)"
        return "the page (drop or pick a .mdiff file on it)"


def _page_resources(root: Path) -> dict[str, Resource]:
    resources = {f"/{relative}": Resource.of_file(path) for relative, path in page_files(root)}
    resources["/view/"] = resources["/view/index.html"]
    return resources


def _with_index(index: dict[str, Any], blobs: dict[str, Resource], root: Path | None) -> Site:
    resources = _page_resources(root or page_root())
    resources["/api/index.json"] = Resource("application/json", data=json.dumps(index, sort_keys=True).encode(), cache=False)
    resources.update(blobs)
    return Site(index, resources)


def page_site(root: Path | None = None) -> Site:
    """The page alone: it shows what is dropped on it."""
    return _with_index({"kind": "none"}, {}, root)


def file_site(path: Path, root: Path | None = None) -> Site:
    """One ``.mdiff`` file (read by the page, checked there)."""
    size = path.stat().st_size
    entry = {"id": "file", "blob": "/api/commits/file.mdiff", "stored_bytes": size}
    index = {"kind": "file", "name": path.name, "selected": "file", "commits": [entry], "refs": {}}
    return _with_index(index, {"/api/commits/file.mdiff": Resource.of_file(path, "application/octet-stream", cache=False)}, root)


def _date_key(entry: dict[str, Any]) -> float:
    """A commit's date as seconds since the epoch, for ordering (a date that does not parse: oldest)."""
    date = entry.get("date")
    if not isinstance(date, str):
        return float("-inf")
    try:
        when = datetime.fromisoformat(date.replace("Z", "+00:00"))
    except ValueError:
        return float("-inf")
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def graph_order(commits: list[dict[str, Any]], refs: dict[str, Any]) -> list[dict[str, Any]]:
    """The history graph's rows, as ``git log --graph`` (topo order) draws them, never by commit id: children
    before parents; from each commit its first parent's line is followed down as far as no other child of a
    commit waits, a merge's other parents after it (depth first: a stack). The lines start at the tips
    (commits no commit of the list names as a parent), taken in this order: reachable before unreachable;
    HEAD's commit; the other branches' tips, by branch name; tags', by tag name; then the newest date first,
    then the message; the id last, for tips that equal in all of these."""
    by_id = {c["id"]: c for c in commits}
    parents = {c["id"]: [p for p in (c.get("parents") or []) if isinstance(p, str) and p in by_id] for c in commits}
    waiting = dict.fromkeys(by_id, 0)  # children not yet placed
    for ps in parents.values():
        for p in dict.fromkeys(ps):
            waiting[p] += 1
    named: dict[str, tuple[int, str]] = {}
    for rank, kind in ((1, "branches"), (2, "tags")):
        for name, target in sorted((refs.get(kind) or {}).items()):
            named.setdefault(target, (rank, name))
    if refs.get("head") in by_id:
        named[refs["head"]] = (0, "")

    def tip_key(c: dict[str, Any]) -> tuple:
        rank, name = named.get(c["id"], (3, ""))
        message = c.get("message") if isinstance(c.get("message"), str) else ""
        return (not c.get("reachable", True), rank, name, -_date_key(c), message, c["id"])

    tips = sorted((c for c in commits if waiting[c["id"]] == 0), key=tip_key)
    stack = [c["id"] for c in reversed(tips)]
    order: list[dict[str, Any]] = []
    while stack:
        here = stack.pop()
        order.append(by_id[here])
        for p in reversed(list(dict.fromkeys(parents[here]))):  # the first parent on top
            waiting[p] -= 1
            if waiting[p] == 0:
                stack.append(p)
    placed = {c["id"] for c in order}
    # a cycle of parents (a hostile repository) leaves commits unplaced: after the others, by the same key
    return order + sorted((c for c in commits if c["id"] not in placed), key=tip_key)


def repository_site(store: Store, selected: str | None = None, root: Path | None = None) -> Site:
    """A repository: every commit of ``.mdiff/commits/`` in :func:`graph_order` with its metadata, its file's
    bytes and its state's as a full checkpoint; the repository's format (which kind of commit ids, §4.3);
    the branches, tags and HEAD; ``selected`` (default HEAD's commit) opened first."""
    from mdiff.errors import MdiffError
    from mdiff.repo.space import measure

    space = measure(store)
    commits, blobs = [], {}
    for c in space.commits:
        entry: dict[str, Any] = {"id": c.commit_id, "reachable": c.reachable, "stored_bytes": c.stored_bytes,
                                 "checkpoint_bytes": c.checkpoint_bytes, "blob": f"/api/commits/{c.commit_id}.mdiff"}
        try:
            entry.update(store.metadata(c.commit_id).to_json())
        except MdiffError as exc:
            entry["error"] = {"code": exc.code, "message": str(exc)}
        commits.append(entry)
        blobs[entry["blob"]] = Resource.of_file(store.commit_path(c.commit_id), "application/octet-stream", cache=False)
    refs: dict[str, Any] = {"branches": {}, "tags": {}, "head": None, "head_branch": None}
    try:
        refs["branches"] = {name: target for name, target in store.branches().items() if target is not None}
        refs["tags"] = {name: target for name, target in store.tags().items() if target is not None}
        refs["head_branch"], refs["head"] = store.head()
    except MdiffError as exc:
        refs["error"] = {"code": exc.code, "message": str(exc)}
    try:
        repository_format: int | None = store.check_format()
    except MdiffError as exc:
        repository_format = None
        refs.setdefault("error", {"code": exc.code, "message": str(exc)})
    commits = graph_order(commits, refs)
    index = {"kind": "repository", "name": str(store.root), "format": repository_format, "refs": refs, "commits": commits,
             "selected": selected or refs["head"] or (commits[0]["id"] if commits else None)}
    return _with_index(index, blobs, root)
