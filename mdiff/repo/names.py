"""SPEC.md §13.1, §13.3: what a repository's names may be — commit ids, branch and tag names, the fixed
lines of ``format`` and HEAD — and how a name read from the file system is shown."""

from __future__ import annotations

import os
import re

REPO_DIR = ".mdiff"
FORMAT_LINES = {1: "mdiff-repository 1\n", 2: "mdiff-repository 2\n"}  # §13.1: what kind of ids it holds (§4.3)
FORMAT = 2  # what a new repository is
FORMAT_LINE = FORMAT_LINES[FORMAT]


def format_of(text: str | None) -> int | None:
    """The repository format ``format``'s text says, None when it says none of them."""
    return next((version for version, line in FORMAT_LINES.items() if line == text), None)


COMMIT_ID = re.compile(r"[0-9a-f]{64}")
ID_LINE = re.compile(r"[0-9a-f]{64}\n")  # a ref or detached HEAD: the id and one newline, nothing else (§13.1)
BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
MAX_BRANCH_BYTES = 255  # a file name's limit on common file systems
HEAD_PREFIX = "ref: refs/heads/"
# format, HEAD and refs are small: a reader reads no more than HEAD naming the longest branch (§13.1)
MAX_SMALL_FILE_BYTES = len(HEAD_PREFIX) + MAX_BRANCH_BYTES + 1


def branch_problem(name: str) -> str | None:
    """Why ``name`` is not a valid branch name (§13.1), or None when it is one."""
    if not BRANCH_NAME.fullmatch(name):
        return ("it is not made of parts [A-Za-z0-9][A-Za-z0-9._-]* joined by /"
                if name.isprintable() else "it holds a character that cannot be shown")
    if ".." in name:
        return "it contains '..'"
    if name.endswith(".lock"):
        return "it ends in '.lock'"
    if len(name.encode("utf-8")) > MAX_BRANCH_BYTES:
        return f"it is longer than {MAX_BRANCH_BYTES} bytes"
    if COMMIT_ID.fullmatch(name):
        return "it looks like a commit id, and a full commit id always means that commit (§13.3)"
    return None


def valid_branch(name: str) -> bool:
    return branch_problem(name) is None


def shown(text: str) -> str:
    """A name read from the file system, printable whatever bytes it holds."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")
