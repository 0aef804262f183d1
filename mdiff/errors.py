"""The MdiffError family. Every error carries the code of the SPEC.md rule it enforces."""

from __future__ import annotations


class MdiffError(Exception):
    """Base of every error mdiff raises on bad input.

    ``code`` is a rule code from SPEC.md's validation table (``MD`` + three
    digits); ``path`` locates the offending object (an HDF5 path, a parameter
    name or a file name) when one is known.
    """

    def __init__(self, code: str, message: str, path: str | None = None):
        from mdiff.format.rules import RULES  # the one table of codes

        if code not in RULES:
            raise ValueError(f"unknown rule code {code!r}")
        self.code = code
        self.message = message
        self.path = path
        self.rule = RULES[code]
        super().__init__(f"{code}: {message}" + (f" [{path}]" if path else ""))

    def __reduce__(self):  # pickled with its fields, e.g. from an isolated child process
        return (type(self), (self.code, self.message, self.path))


class InvalidFileError(MdiffError):
    """The .mdiff file breaks a rule of the format (SPEC.md §3–§8)."""


class LimitError(InvalidFileError):
    """The file declares more than the reader's limits allow (SPEC.md §8.3)."""


class ApplyError(MdiffError):
    """A valid diff cannot be applied to this base (SPEC.md §9)."""


class CheckpointError(MdiffError):
    """A checkpoint file cannot be read or written (SPEC.md §10)."""


class RepositoryError(MdiffError):
    """A repository is malformed, corrupt or busy (SPEC.md §13)."""
