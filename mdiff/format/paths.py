"""SPEC.md §5.5: the paths of a model folder's files — what a file may name, and what it may not.

A path comes from a stranger's file and is later written to disk (§10.2), so every rule here
keeps a path inside the folder it is written to, out of hidden folders (``.git/hooks`` runs
code), off device names, and the same on every file system. The same rules hold for the paths
of the weights layout (§5.6) and for the files read from a model folder (§10.1).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

MAX_PATH_BYTES = 4096
MAX_COMPONENTS = 64
MAX_COMPONENT_BYTES = 255

_FORBIDDEN = frozenset('\\:*?"<>|\x7f') | frozenset(chr(c) for c in range(0x20))
_DEVICE_NAMES = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{port}{digit}" for port in ("com", "lpt") for digit in "0123456789¹²³"]
)


def ascii_lower(text: str) -> str:
    """``text`` with the ASCII letters A–Z in lower case and nothing else changed (§5.5's folding)."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def path_problem(path: str) -> str | None:
    """Why ``path`` breaks §5.5's rules (MD304), or None when it is a safe relative path."""
    if not isinstance(path, str):
        return "a path is a string"
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        return "the path is not valid Unicode"
    if not 1 <= size <= MAX_PATH_BYTES:
        return f"the path has {size} bytes in UTF-8; it must have 1 to {MAX_PATH_BYTES}"
    components = path.split("/")
    if len(components) > MAX_COMPONENTS:
        return f"the path has {len(components)} components; at most {MAX_COMPONENTS} are allowed"
    for component in components:
        problem = _component_problem(component)
        if problem:
            return f"{problem} ({'an absolute path' if path.startswith('/') else 'component ' + repr(component)})"
    return None


def _component_problem(component: str) -> str | None:
    if component == "":
        return "an empty component: a path is relative, without leading, trailing or doubled '/'"
    if len(component.encode("utf-8")) > MAX_COMPONENT_BYTES:
        return f"a component longer than {MAX_COMPONENT_BYTES} bytes"
    if component.startswith("."):
        return "a component that starts with '.' ('..', or a hidden entry such as .git)"
    bad = sorted(set(component) & _FORBIDDEN)
    if bad:
        return f"a component that contains {', '.join(repr(c) for c in bad)}"
    if component.endswith((" ", ".")):
        return "a component that ends with a space or a '.'"
    if ascii_lower(component.split(".", 1)[0]) in _DEVICE_NAMES:
        return "a device name"
    return None


def collisions(paths: Iterable[str]) -> list[tuple[str, str, str]]:
    """(path, other path, why) for every pair of ``paths`` that §5.5 forbids together: equal with
    ASCII letters in lower case, or one a folder of the other. Each pair is reported once."""
    found: list[tuple[str, str, str]] = []
    seen: dict[str, str] = {}
    for path in sorted(paths):
        key = ascii_lower(path)
        if key in seen:
            found.append((path, seen[key], "the same path on a case-insensitive file system"))
        else:
            seen[key] = path
    folders: dict[str, str] = {}
    for key, path in seen.items():
        parts = key.split("/")
        for depth in range(1, len(parts)):
            folders.setdefault("/".join(parts[:depth]), path)
    for key, path in sorted(seen.items()):
        if key in folders:
            found.append((path, folders[key], "a file and a folder of the same name"))
    return found


def matches_glob(relative: str, patterns: Sequence[str]) -> bool:
    """Whether a folder's file ``relative`` ("/"-separated) matches one of ``patterns``: a glob of the whole
    path, or, for a glob without ``/``, of the file's name alone (a model folder's --exclude, §10.1)."""
    name = relative.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(relative, p) or ("/" not in p and fnmatch.fnmatchcase(name, p)) for p in patterns)
