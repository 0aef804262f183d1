"""SPEC.md §13.10: how a command finds its repository, and whose repository it agrees to use.

From the working folder (or the folder ``-C`` names) upwards, the first folder holding ``.mdiff/format``
— never past a filesystem boundary, nor into a folder of ``$MDIFF_CEILING_DIRECTORIES`` — as git does
(``GIT_CEILING_DIRECTORIES``, ``GIT_DISCOVERY_ACROSS_FILESYSTEM``). A repository whose ``.mdiff`` folder
another user owns is refused (MD809) unless the user trusts it: ``$MDIFF_SAFE_DIRECTORIES`` or a
``safe.directory`` line of the user's configuration file (git's ``safe.directory``, CVE-2022-24765).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from mdiff.atomic import atomic_output
from mdiff.errors import RepositoryError
from mdiff.repo.names import REPO_DIR

CEILING_ENV = "MDIFF_CEILING_DIRECTORIES"
ACROSS_FILESYSTEM_ENV = "MDIFF_DISCOVERY_ACROSS_FILESYSTEM"
SAFE_ENV = "MDIFF_SAFE_DIRECTORIES"
SAFE_KEY = "safe.directory"


def _resolved(text: str) -> Path | None:
    """An absolute path of a colon-separated list, links resolved; None for an empty or relative entry."""
    if not text or not os.path.isabs(text):
        return None
    return Path(text).resolve()


def ceilings(environ: dict[str, str] | os._Environ[str] = os.environ) -> set[Path]:
    """The folders of ``$MDIFF_CEILING_DIRECTORIES`` (colon-separated absolute paths; others ignored)."""
    return {p for p in map(_resolved, environ.get(CEILING_ENV, "").split(os.pathsep)) if p is not None}


def locate(start: str | os.PathLike[str]) -> Path:
    """The folder holding ``.mdiff/`` that contains ``start``: ``start`` itself, then each parent in turn,
    up to a filesystem boundary (a parent on another device than the folder below it is not searched,
    unless ``$MDIFF_DISCOVERY_ACROSS_FILESYSTEM`` is 1) or a ceiling folder (not searched, nor any above)."""
    here = Path(start).resolve()
    stops = ceilings()
    across = os.environ.get(ACROSS_FILESYSTEM_ENV, "") in ("1", "true", "yes")
    candidate, device = here, _device(here)
    while True:
        if os.path.lexists(candidate / REPO_DIR / "format"):  # whatever it is: check_format says what is wrong
            return candidate
        parent = candidate.parent
        if parent == candidate:
            why = ""
            break
        if parent in stops:
            why = f" (the search does not enter {parent}: ${CEILING_ENV})"
            break
        if not across and _device(parent) != device:
            why = (f" (the search does not enter {parent}, on another filesystem; ${ACROSS_FILESYSTEM_ENV}=1 "
                   "lets it)")
            break
        candidate = parent
    raise RepositoryError("MD801", f"no mdiff repository in {here} or its parents{why}; run `mdiff init`")


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


# ---------------------------------------------------------------- ownership


def config_path() -> Path:
    """The user's configuration file: ``$XDG_CONFIG_HOME/mdiff/config``, else ``~/.config/mdiff/config``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "mdiff" / "config"


def configured_safe_directories() -> list[str]:
    """The values of the ``safe.directory = PATH`` lines of the configuration file (none if it is missing)."""
    try:
        text = config_path().read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == SAFE_KEY and value.strip():
            found.append(value.strip())
    return found


def add_safe_directory(path: str) -> tuple[Path, bool]:
    """Append ``safe.directory = PATH`` to the configuration file (``*``, or ``path`` made absolute, links
    resolved), unless it is there already; returns (the file, whether a line was added)."""
    value = path if path == "*" else str(Path(path).resolve())
    target = config_path()
    if value in configured_safe_directories():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        before = target.read_bytes()
    except FileNotFoundError:
        before = b""
    if before and not before.endswith(b"\n"):
        before += b"\n"
    with atomic_output(target) as out:
        out.write(before + f"{SAFE_KEY} = {value}\n".encode("utf-8"))
    return target, True


def _trusted(root: Path) -> bool:
    listed = [*os.environ.get(SAFE_ENV, "").split(os.pathsep), *configured_safe_directories()]
    for entry in listed:
        if entry == "*":
            return True
        resolved = _resolved(entry)
        if resolved is not None and resolved == root:
            return True
    return False


def effective_owner() -> int | None:
    """The user whose repositories are this process's own: the effective uid, or, for root run through
    sudo, the uid that ran sudo (``$SUDO_UID``), as git has it; None where the platform has no uids."""
    if not hasattr(os, "geteuid"):
        return None
    uid = os.geteuid()
    sudo = os.environ.get("SUDO_UID", "")
    if uid == 0 and sudo.isdigit():
        return int(sudo)
    return uid


def check_owner(root: Path) -> None:
    """MD809 unless the repository at ``root`` (its ``.mdiff`` folder, a link followed) is owned by this
    process's user (:func:`effective_owner`; root through sudo: also root's own) or trusted."""
    me = effective_owner()
    if me is None:
        return
    try:
        owner = os.stat(root / REPO_DIR).st_uid
    except OSError:
        return  # nothing there to trust or refuse: reading it says what is wrong
    if owner == me or (owner == 0 and os.geteuid() == 0) or _trusted(Path(root).resolve()):
        return
    raise RepositoryError(
        "MD809", f"the repository {root} is owned by another user (uid {owner}, not {me}): mdiff does not use it "
                 f"(§13.10); if you trust it, run `mdiff config --global --add safe.directory {shlex.quote(str(root))}` "
                 f"or set ${SAFE_ENV}={shlex.quote(str(root))}")
