"""A finding: one rule broken at one place (what `mdiff validate` prints)."""

from __future__ import annotations

from dataclasses import dataclass

from mdiff.errors import InvalidFileError, LimitError
from mdiff.rules import RULES

_LIMIT_CODES = {"MD507", "MD508", "MD510", "MD511", "MD512"}


@dataclass(frozen=True)
class Finding:
    code: str
    path: str
    message: str

    @property
    def severity(self) -> str:
        return RULES[self.code].severity

    @property
    def section(self) -> str:
        return RULES[self.code].section

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_json(self) -> dict[str, str]:
        return {
            "code": self.code,
            "severity": self.severity,
            "path": self.path,
            "section": self.section,
            "message": self.message,
        }

    def to_error(self) -> InvalidFileError:
        cls = LimitError if self.code in _LIMIT_CODES else InvalidFileError
        return cls(self.code, self.message, self.path)

    @classmethod
    def from_error(cls, error: InvalidFileError) -> "Finding":
        return cls(error.code, error.path or "/", error.message)
