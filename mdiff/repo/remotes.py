"""SPEC.md §13.8: a repository's remotes — names for URLs, kept in ``.mdiff/remotes/<name>`` — their
remote-tracking refs (``.mdiff/refs/remotes/<name>/<branch>``), and the options the store of a URL is
opened with.

A URL is an fsspec URL: a local path or ``file://``, ``s3://bucket/prefix`` (s3fs), or whatever else
fsspec knows. Credentials never enter ``.mdiff/``: a URL that holds any (``user:secret@host``) is
refused, and storage options (``--storage-option KEY=VALUE``, ``$MDIFF_STORAGE_OPTIONS``, or the
store's own environment and configuration, e.g. AWS's) are used for the call only, never written,
printed or logged.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mdiff.errors import RepositoryError
from mdiff.repo.remote_ends import FsspecEnd, LocalEnd, RemoteEnd
from mdiff.repo.names import shown, valid_branch
from mdiff.repo.store import Store

REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_URL_BYTES = 4096
OPTIONS_ENV = "MDIFF_STORAGE_OPTIONS"


def check_remote_name(name: str) -> None:
    if not REMOTE_NAME.fullmatch(name) or ".." in name or name.endswith(".lock") or len(name.encode()) > 255:
        raise RepositoryError("MD801", f"{shown(name)[:80]!r} is not a valid remote name: one part "
                                       "[A-Za-z0-9][A-Za-z0-9._-]*, no '..', not ending in '.lock'")


def check_url(url: str) -> None:
    """MD801 for a URL that cannot be stored: empty, too long, not printable, or holding credentials."""
    if not url or len(url.encode("utf-8", "surrogateescape")) > MAX_URL_BYTES or not url.isprintable():
        raise RepositoryError("MD801", f"a remote URL is printable text of 1 to {MAX_URL_BYTES} bytes")
    parts = urlsplit(url)
    if len(parts.scheme) > 1 and ("@" in parts.netloc or parts.query or parts.fragment):  # a path may hold them
        raise RepositoryError("MD801", "a remote URL holds no user name, password, query or fragment: credentials "
                                       "come from the environment or --storage-option, and are never stored")


def is_local(url: str) -> bool:
    scheme = urlsplit(url).scheme
    return scheme in ("", "file", "local") or (len(scheme) == 1 and os.name == "nt")


def local_path(url: str) -> Path:
    return Path(os.path.abspath(urlsplit(url).path if url.startswith("file://") else url.removeprefix("local://")))


def storage_options(pairs: list[str] | None = None) -> dict[str, Any]:
    """Options for the store's fsspec filesystem: ``$MDIFF_STORAGE_OPTIONS`` (a JSON object), then each
    ``KEY=VALUE`` (VALUE as JSON when it parses, else text; ``a.b=v`` sets ``{"a": {"b": v}}``)."""
    options: dict[str, Any] = {}
    env = os.environ.get(OPTIONS_ENV)
    if env:
        try:
            loaded = json.loads(env)
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict):
            raise RepositoryError("MD801", f"${OPTIONS_ENV} is not a JSON object")
        options.update(loaded)
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise RepositoryError("MD801", "a storage option is KEY=VALUE")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        *outer, last = key.split(".")
        target = options
        for part in outer:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise RepositoryError("MD801", f"storage option {'.'.join(outer)} is not an object")
        target[last] = value
    return options


def open_end(url: str, options: dict[str, Any] | None = None) -> RemoteEnd:
    """The repository at ``url`` (its ``.mdiff/`` inside): a local folder, or an fsspec store."""
    check_url(url)
    if is_local(url):
        return LocalEnd(local_path(url), url)
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **(options or {}))
    except (ImportError, ValueError) as exc:  # no such protocol, or its package is missing
        raise RepositoryError("MD801", f"cannot open {url}: {type(exc).__name__}: "
                                       f"{str(exc).splitlines()[0][:200] if isinstance(exc, ImportError) else 'unknown protocol'}"
                              ) from None
    return FsspecEnd(fs, root, url)


# ---------------------------------------------------------------- the configuration in .mdiff/remotes/
def remote_names(store: Store) -> list[str]:
    return sorted(name for name in store.ref_files("remotes") if REMOTE_NAME.fullmatch(name))


def remote_url(store: Store, name: str) -> str:
    check_remote_name(name)
    text = store._read_small(f"remotes/{name}", MAX_URL_BYTES + 1)
    if text is None:
        known = remote_names(store)
        raise RepositoryError("MD801", f"no remote {name!r} (remotes: {', '.join(known) or 'none'}; "
                                       "`mdiff remote add NAME URL`)")
    if not text.endswith("\n") or "\n" in text[:-1]:
        raise RepositoryError("MD801", f"{store.dir / 'remotes' / name} is malformed: not one line")
    url = text[:-1]
    check_url(url)
    return url


def add_remote(store: Store, name: str, url: str) -> None:
    check_remote_name(name)
    check_url(url)
    if is_local(url):
        url = str(local_path(url))  # a relative path means the same folder from anywhere
    with store.lock():
        if store.kind(f"remotes/{name}") is not None:
            raise RepositoryError("MD801", f"remote {name!r} exists already")
        store._write_small(f"remotes/{name}", url + "\n")


def remove_remote(store: Store, name: str) -> None:
    remote_url(store, name)
    with store.lock():
        for ref in tracking_refs(store, name):
            store.remove_ref(f"refs/remotes/{name}/{ref}")
        store.remove_ref(f"remotes/{name}")


# ---------------------------------------------------------------- remote-tracking refs
def tracking_refs(store: Store, remote: str) -> dict[str, str]:
    """branch → commit id, as the last fetch or push saw ``remote``'s branches."""
    check_remote_name(remote)
    found = {}
    for name in store.ref_files(f"refs/remotes/{remote}"):
        if valid_branch(name):
            target = store.read_ref(f"refs/remotes/{remote}/{name}")
            if target is not None:
                found[name] = target
    return found


def all_tracking_refs(store: Store) -> dict[str, str]:
    """"<remote>/<branch>" → commit id, for every remote."""
    return {f"{remote}/{branch}": target for remote in remote_names(store)
            for branch, target in tracking_refs(store, remote).items()}


def upstream_of(store: Store, branch: str) -> tuple[str, str] | None:
    """("<remote>/<branch>", its commit): the remote-tracking ref ``branch`` follows — ``origin``'s when origin has
    the branch (what `mdiff pull` and `push` default to), else the one remote's that has it —; None when no remote
    has it, or several do and none is origin."""
    found = {}
    for remote in remote_names(store):
        target = tracking_target(store, f"{remote}/{branch}")
        if target is not None:
            found[f"{remote}/{branch}"] = target
    name = f"origin/{branch}" if f"origin/{branch}" in found else next(iter(found)) if len(found) == 1 else None
    return (name, found[name]) if name is not None else None


def tracking_target(store: Store, name: str) -> str | None:
    """The commit the remote-tracking ref ``<remote>/<branch>`` names, or None when there is none."""
    remote, sep, branch = name.partition("/")
    if not sep or not REMOTE_NAME.fullmatch(remote) or not valid_branch(branch):
        return None
    if store.kind(f"refs/remotes/{remote}/{branch}") in (None, "a folder"):
        return None
    return store.read_ref(f"refs/remotes/{remote}/{branch}")
