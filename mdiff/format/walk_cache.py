"""Structure walks of commit files, kept between processes outside every repository (SPEC.md §13.2).

A commit file is named by the sha256 of its bytes, and its structure walk (§8: every object header,
datatype, dataspace and chunk index, checked by an isolated child, §8.5) is a function of those bytes,
of the limits it was checked under and of this implementation. So once a walk has found a commit file
good, a reader that has verified another file's bytes against the same id (MD800) may read that file
by the kept walk instead of walking it again: a checkout of a long history then pays for each commit's
hash and data, not for a child's walk of each (10–30 ms a file).

The cache lives in the user's cache folder — ``$MDIFF_CACHE_DIR``, else ``$XDG_CACHE_HOME/mdiff``,
else ``~/.cache/mdiff``; ``MDIFF_CACHE_DIR=off`` turns it off — never in ``.mdiff/``, which whoever
handed over a repository could have filled with walks of other bytes. Entries are keyed by the commit
id, the limits and the source of this package (any change of the checks starts a new folder). A
missing, unreadable or malformed entry is a miss; a folder that cannot be written leaves the cache
unused. Only walks without an error are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from mdiff.format.limits import Limits

log = logging.getLogger(__name__)

ENV = "MDIFF_CACHE_DIR"
_OFF = {"off", "0", "none", "false"}
_ID = re.compile(r"[0-9a-f]{64}")
MAX_ENTRY_BYTES = 64 << 20  # a walk is ~1 KB a parameter: 64 MiB holds the walk of any file the default limits admit


class WalkCache:
    """Walks kept as JSON files ``walks/<key>/<id[:2]>/<id>.json`` under ``folder`` (None: no cache)."""

    def __init__(self, folder: Path | None):
        self.folder = folder

    @classmethod
    def default(cls) -> WalkCache:
        """The user's cache (see the module's text), or none where it is turned off or has no home."""
        configured = os.environ.get(ENV)
        if configured is not None:
            return cls(None if configured.strip().lower() in _OFF or not configured.strip() else Path(configured))
        base = os.environ.get("XDG_CACHE_HOME") or (os.path.join(os.path.expanduser("~"), ".cache")
                                                   if os.path.expanduser("~") != "~" else "")
        return cls(Path(base) / "mdiff" if base else None)

    def get(self, commit_id: str, limits: Limits) -> dict | None:
        """The walk kept for ``commit_id`` under ``limits`` (the JSON :meth:`Vetted.to_json` made, without
        its identity), or None."""
        path = self._path(commit_id, limits)
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                data = f.read(MAX_ENTRY_BYTES + 1)
            entry = json.loads(data) if len(data) <= MAX_ENTRY_BYTES else None
        except (OSError, ValueError, RecursionError):
            return None
        return entry if isinstance(entry, dict) and entry.get("id") == commit_id else None

    def put(self, commit_id: str, limits: Limits, walk: dict) -> None:
        """Keep ``walk`` (a :meth:`Vetted.to_json` of a file with no error) for ``commit_id``; quietly
        nothing where the folder cannot be written."""
        path = self._path(commit_id, limits)
        if path is None:
            return
        entry = {key: value for key, value in walk.items() if key != "identity"}
        entry["id"] = commit_id
        temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(temp, "x", encoding="utf-8") as f:
                json.dump(entry, f, separators=(",", ":"))
            os.replace(temp, path)
        except OSError as exc:
            log.debug("walk cache: cannot keep %s: %s", commit_id[:12], exc)
            try:
                temp.unlink()
            except OSError:
                pass

    def _path(self, commit_id: str, limits: Limits) -> Path | None:
        source = _source_digest()
        if self.folder is None or source is None or not _ID.fullmatch(commit_id):
            return None
        key = hashlib.sha256(json.dumps([source, asdict(limits)], sort_keys=True).encode()).hexdigest()[:16]
        return self.folder / "walks" / key / commit_id[:2] / f"{commit_id}.json"


@lru_cache(maxsize=1)
def _source_digest() -> str | None:
    """sha256 over this package's Python sources: any change of what the walk checks is another key.
    None (no cache) where the sources cannot be read, as in a frozen or zipped install."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    try:
        for path in sorted(package.rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    except OSError:
        return None
    return digest.hexdigest() if digest.digest() != hashlib.sha256().digest() else None
