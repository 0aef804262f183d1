"""The MdiffError family. Every error carries the code of the SPEC.md rule it enforces."""

from __future__ import annotations

import errno

from mdiff.rules import RULES


class MdiffError(Exception):
    """Base of every error mdiff raises on bad input.

    ``code`` is a rule code from SPEC.md's validation table (``MD`` + three
    digits); ``path`` locates the offending object (an HDF5 path, a parameter
    name or a file name) when one is known.
    """

    def __init__(self, code: str, message: str, path: str | None = None, *, hint: str | None = None):
        if code not in RULES:
            raise ValueError(f"unknown rule code {code!r}")
        self.code = code
        self.message = message
        self.path = path
        self.hint = hint  # what the user can do, where the error knows better than its rule's title (the CLI shows it)
        self.rule = RULES[code]
        super().__init__(f"{code}: {message}" + (f" [{path}]" if path else ""))

    def to_json(self) -> list:
        """What an isolated child sends its parent (§8.5): data, never a pickle."""
        return [type(self).__name__, self.code, self.message, self.path]

    @staticmethod
    def from_json(data: object) -> "MdiffError":
        """The error :meth:`to_json` described; ValueError when ``data`` is not such a description."""
        try:
            if not isinstance(data, list) or len(data) != 4:
                raise ValueError("malformed")
            name, code, message, path = (str(data[0]), str(data[1]), data[2], data[3])
            cls = _BY_NAME[name]
            if not (isinstance(message, str) and (path is None or isinstance(path, str))):
                raise ValueError("malformed")
            return cls(code, message, path)
        except (TypeError, ValueError, KeyError):
            raise ValueError("not an mdiff error") from None


class InvalidFileError(MdiffError):
    """The .mdiff file breaks a rule of the format (SPEC.md §3–§8)."""


class LimitError(InvalidFileError):
    """The file declares more than the reader's limits allow (SPEC.md §8.3)."""


class ApplyError(MdiffError):
    """A valid diff cannot be applied to this base (SPEC.md §9)."""


class CheckpointError(MdiffError):
    """A checkpoint file cannot be read or written (SPEC.md §10)."""


class UnsafeOutputError(CheckpointError, FileExistsError):
    """The output path names something a new file or folder must not replace (MD706, SPEC.md §10.2): a folder
    that is not empty, a device, a FIFO, a socket or a symbolic link — or, for a model folder, a file. Raised
    before anything is written; a FileExistsError too, as the operating system's refusal would be."""

    def __init__(self, code: str, message: str, path: str | None = None):
        super().__init__(code, message, path)
        self.errno, self.strerror, self.filename = errno.EEXIST, message, path  # as an OSError says them

    def __str__(self) -> str:
        return Exception.__str__(self)  # "MD706: … [path]", as every MdiffError


class RepositoryError(MdiffError):
    """A repository is malformed, corrupt or busy (SPEC.md §13)."""


_BY_NAME: dict[str, type[MdiffError]] = {
    cls.__name__: cls
    for cls in (MdiffError, InvalidFileError, LimitError, ApplyError, CheckpointError, UnsafeOutputError, RepositoryError)
}
