"""`mdiff` — inspect, check, make and apply .mdiff files."""

from __future__ import annotations

import argparse
import json
import sys

from mdiff import __version__
from mdiff.cli import commands, demo_command, repo_commands
from mdiff.errors import InvalidFileError, MdiffError

EPILOG = """exit status: 0 success; 1 an invalid file or a failed operation; 2 usage error or a file that is not HDF5.
Every error names a rule code (MD###) from SPEC.md's validation table."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdiff", description="Version control for model weights: one .mdiff (HDF5) file per commit.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mdiff {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in commands.REGISTER + repo_commands.REGISTER + demo_command.REGISTER:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except MdiffError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": {"code": exc.code, "message": exc.message, "path": exc.path,
                                        "section": exc.rule.section}}))
        else:
            where = f" [{exc.path}]" if exc.path else ""
            print(f"mdiff: error {exc.code}: {exc.message}{where}", file=sys.stderr)
            hint = "; `mdiff validate FILE` lists every problem" if isinstance(exc, InvalidFileError) else ""
            print(f"  (SPEC.md §{exc.rule.section}: {exc.rule.title}{hint})", file=sys.stderr)
        return 1
    except OSError as exc:  # the operating system's word: a missing file, no permission, a full disk
        print(f"mdiff: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
