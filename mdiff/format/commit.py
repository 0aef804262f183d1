"""SPEC.md §4: commit metadata, stored as the root attribute ``commit`` (JSON)."""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from mdiff.errors import InvalidFileError
from mdiff.format import canonical_json
from mdiff.format.schemas import first_errors

log = logging.getLogger(__name__)

_DATE_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?Z$"
)

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://mdiff.dev/schemas/commit.schema.json",
    "title": "mdiff commit metadata (SPEC.md §4)",
    "type": "object",
    "required": ["author", "date", "message", "parents", "writer", "meta"],
    "additionalProperties": False,
    "properties": {
        "author": {
            "type": "object",
            "required": ["name", "email"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "email": {"type": "string", "pattern": r"^$|^[^@<>\u0000-\u0020\u007f]+@[^@<>\u0000-\u0020\u007f]+$"},
            },
        },
        "date": {"type": "string", "pattern": _DATE_PATTERN},
        "message": {"type": "string"},
        "parents": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "uniqueItems": True,
        },
        "writer": {
            "type": "object",
            "required": ["name", "version"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "version": {"type": "string", "minLength": 1},
            },
        },
        "meta": {"type": "object", "additionalProperties": {"type": "string"}},
        "state_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
}


def _writer_version() -> str:
    from mdiff.version import __version__

    return __version__


def default_date() -> str:
    """``SOURCE_DATE_EPOCH`` when set (reproducible builds), else now; UTC, whole seconds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None:
        moment = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc)
    else:
        moment = _dt.datetime.now(_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Author:
    name: str
    email: str = ""

    @classmethod
    def parse(cls, text: str) -> "Author":
        """``"Name <mail@host>"`` or a bare name."""
        m = re.fullmatch(r"\s*(.*?)\s*<([^<>]*)>\s*", text)
        return cls(m.group(1), m.group(2)) if m else cls(text.strip())

    @classmethod
    def from_environment(cls) -> "Author | None":
        """Who is committing, found as git finds it: ``$MDIFF_AUTHOR`` ("Name <email>"), else
        ``$MDIFF_AUTHOR_NAME`` and ``$MDIFF_AUTHOR_EMAIL``, else git's ``user.name`` and
        ``user.email``; None when none of them is set."""
        if os.environ.get("MDIFF_AUTHOR", "").strip():
            return cls.parse(os.environ["MDIFF_AUTHOR"])
        name = os.environ.get("MDIFF_AUTHOR_NAME", "").strip() or _git_config("user.name")
        if not name:
            return None
        return cls(name, os.environ.get("MDIFF_AUTHOR_EMAIL", "").strip() or _git_config("user.email"))


UNKNOWN_AUTHOR = Author("unknown")


def resolve_author(author: "Author | str | None") -> Author:
    """``author`` as an Author; None means the environment's (Author.from_environment), else "unknown",
    with a warning saying how to set one."""
    if isinstance(author, Author):
        return author
    if author is not None:
        return Author.parse(author)
    found = Author.from_environment()
    if found is None:
        log.warning("no author is set; the commit records %r (use --author, $MDIFF_AUTHOR_NAME and "
                    "$MDIFF_AUTHOR_EMAIL, or git config user.name and user.email)", UNKNOWN_AUTHOR.name)
        return UNKNOWN_AUTHOR
    return found


def _git_config(key: str) -> str:
    """git's setting ``key`` ("" when git or the setting is missing)."""
    import subprocess

    try:
        done = subprocess.run(["git", "config", "--get", key], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


@dataclass(frozen=True)
class Commit:
    message: str = ""
    author: Author = UNKNOWN_AUTHOR
    date: str = field(default_factory=default_date)
    parents: tuple[str, ...] = ()
    meta: Mapping[str, str] = field(default_factory=dict)
    writer_name: str = "mdiff"
    writer_version: str = field(default_factory=_writer_version)
    # §4.2, format 1.3: sha256 of the digest object of the state the commit makes (§13.4), written by
    # repository writers; None for a file without one
    state_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        obj = {
            "author": {"name": self.author.name, "email": self.author.email},
            "date": self.date,
            "message": self.message,
            "parents": list(self.parents),
            "writer": {"name": self.writer_name, "version": self.writer_version},
            "meta": dict(self.meta),
        }
        if self.state_sha256 is not None:
            obj["state_sha256"] = self.state_sha256
        return obj

    @property
    def minor_version(self) -> int:
        """The lowest minor format version that has every member this commit uses (§3.3)."""
        from mdiff.format.constants import STATE_DIGEST_MINOR

        return STATE_DIGEST_MINOR if self.state_sha256 is not None else 0

    def to_attribute(self) -> str:
        check(self.to_json())
        return canonical_json.dumps(self.to_json())

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Commit":
        return cls(
            message=obj["message"],
            author=Author(obj["author"]["name"], obj["author"]["email"]),
            date=obj["date"],
            parents=tuple(obj["parents"]),
            meta=dict(obj["meta"]),
            writer_name=obj["writer"]["name"],
            writer_version=obj["writer"]["version"],
            state_sha256=obj.get("state_sha256"),
        )


def schema_errors(obj: Any) -> list[str]:
    """Every way ``obj`` breaks §4.2, as messages naming the JSON location."""
    messages = first_errors(SCHEMA, obj)
    if not messages:
        try:  # the pattern cannot see a 31st of February
            _dt.datetime.strptime(obj["date"][:19], "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            messages.append(f"date: {obj['date']!r} is not a calendar date")
    return messages


def check(obj: Any) -> None:
    errors = schema_errors(obj)
    if errors:
        raise InvalidFileError("MD202", "commit metadata is invalid: " + "; ".join(errors), "/")


def parse_attribute(text: str | None, known_members_only: bool = False) -> Commit:
    """The Commit in a ``commit`` attribute value; InvalidFileError on any defect."""
    if text is None:
        raise InvalidFileError("MD200", "root attribute `commit` is missing", "/")
    try:
        obj = canonical_json.loads(text)
    except ValueError as exc:
        raise InvalidFileError("MD201", f"`commit` is not valid JSON: {exc}", "/") from None
    if not isinstance(obj, dict):
        raise InvalidFileError("MD201", f"`commit` is JSON {type(obj).__name__}, not an object", "/")
    if known_members_only:  # a newer minor version may add members (§3.3)
        obj = {k: v for k, v in obj.items() if k in SCHEMA["properties"]}
    check(obj)
    return Commit.from_json(obj)
