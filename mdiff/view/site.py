"""What `mdiff view` serves: the page's static files and the bytes of the file or repository shown.

The page lives with mdiff-js (``tools/mdiff-js/view/``, its modules importing ``tools/mdiff-js/src/`` and
h5wasm's browser build, ``node_modules/h5wasm/dist/esm/``), and is served at the same relative paths, so
that the page also works from any static server of ``tools/mdiff-js/``. In a checkout those folders are read
where they are; a wheel carries a copy in ``mdiff/view/static/``, which ``setup.py``'s build step makes with
:func:`copy_page` (this module imports only the standard library at load, for that step).

URLs: ``/view/…``, ``/src/…``, ``/node_modules/h5wasm/dist/esm/…`` (the page), ``/api/index.json`` (what is
shown: refs, commits with parents, metadata and sizes) and ``/api/commits/<id>.mdiff`` (a commit file's bytes;
for a single file, ``/api/commits/file.mdiff``). Nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdiff.view.server import TYPES, Resource

if TYPE_CHECKING:
    from mdiff.repo.store import Store

PACKAGED = Path(__file__).resolve().parent / "static"
SOURCE = Path(__file__).resolve().parents[2] / "tools" / "mdiff-js"
H5WASM = "node_modules/h5wasm/dist/esm"
# (folder below the mdiff-js root, the names served from it: "*" every file of a served suffix, recursively)
PAGE_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("view", ("*",)),
    ("src", ("*",)),
    (H5WASM, ("hdf5_hl.js", "hdf5_util.js")),
    ("node_modules/h5wasm", ("LICENSE.txt",)),
)


class PageMissing(FileNotFoundError):
    """The page's files are not where this mdiff looks for them (a checkout without ``npm ci``)."""


def page_root() -> Path:
    """The folder holding ``view/``, ``src/`` and h5wasm's build: the wheel's copy, else the checkout's mdiff-js."""
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


def repository_site(store: Store, selected: str | None = None, root: Path | None = None) -> Site:
    """A repository: every commit of ``.mdiff/commits/`` (reachable ones first, children before parents, as
    `mdiff du` lists them) with its metadata, its file's bytes and its state's as a full checkpoint; the
    branches, tags and HEAD; ``selected`` (default HEAD's commit) opened first."""
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
    index = {"kind": "repository", "name": str(store.root), "refs": refs, "commits": commits,
             "selected": selected or refs["head"] or (commits[0]["id"] if commits else None)}
    return _with_index(index, blobs, root)
