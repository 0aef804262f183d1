"""``python -m mdiff.conformance.reference``: the reference implementation behind the conformance
contract (conformance/README.md).

It is mdiff's own command line (``mdiff.cli.main``) — the same commands, output and exit
statuses — plus the contract's ``--limit NAME=N`` option of ``validate`` and ``apply`` (SPEC.md
§8.3; names as in the manifest's ``limits``: max_rank, max_elements, max_dataset_bytes,
max_attribute_bytes, max_objects, max_total_bytes), which ``mdiff`` itself does not offer. It
has no ``features`` command, so it claims every feature.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import mdiff
from mdiff.cli import main as cli
from mdiff.format.limits import Limits

LIMIT_NAMES = ("max_rank", "max_elements", "max_dataset_bytes", "max_attribute_bytes", "max_objects", "max_total_bytes")


def _split_limits(argv: list[str]) -> tuple[dict[str, int], list[str]] | str:
    """(limits, the other arguments), or a usage message."""
    limits: dict[str, int] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--limit" or arg.startswith("--limit="):
            if arg == "--limit":
                if i + 1 == len(argv):
                    return "--limit needs NAME=N"
                value, i = argv[i + 1], i + 2
            else:
                value, i = arg[len("--limit="):], i + 1
            name, sep, number = value.partition("=")
            if not sep or name not in LIMIT_NAMES or not number.isdigit():
                return f"bad --limit {value!r}: NAME=N with NAME one of {', '.join(LIMIT_NAMES)}"
            limits[name] = int(number)
        else:
            rest.append(arg)
            i += 1
    return limits, rest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = _split_limits(argv)
    if isinstance(split, str):
        print(f"mdiff: {split}", file=sys.stderr)
        return 2
    limits, rest = split
    if not limits:
        return cli.main(rest)
    chosen = dataclasses.replace(Limits(), **limits)
    # mdiff.cli.commands calls mdiff.validate and mdiff.apply_files through the package: give them the limits.
    saved = mdiff.validate, mdiff.apply_files
    mdiff.validate = functools.partial(saved[0], limits=chosen)
    mdiff.apply_files = functools.partial(saved[1], limits=chosen)
    try:
        return cli.main(rest)
    finally:
        mdiff.validate, mdiff.apply_files = saved


if __name__ == "__main__":
    sys.exit(main())
