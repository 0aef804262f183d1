"""A finding: one rule broken at one place (what `mdiff validate` prints)."""

from __future__ import annotations

from dataclasses import dataclass

from mdiff.errors import InvalidFileError, LimitError
from mdiff.hdf5walk import findings as walk_findings
from mdiff.rules import RULES


@dataclass(frozen=True)
class Finding(walk_findings.Finding):
    """A finding of any rule of SPEC.md §12, with the severity and section its table row gives; the
    structure walk's (mdiff.hdf5walk) become these through :meth:`of`."""

    @classmethod
    def of(cls, finding: walk_findings.Finding) -> "Finding":
        return finding if isinstance(finding, cls) else cls(finding.code, finding.path, finding.message)

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
        cls = LimitError if self.code in walk_findings.LIMIT_CODES else InvalidFileError
        return cls(self.code, self.message, self.path)

    @classmethod
    def from_error(cls, error: InvalidFileError) -> "Finding":
        return cls(error.code, error.path or "/", error.message)
