"""`mdiff` — inspect, check, make and apply .mdiff files; version model weights like git versions code."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import NoReturn

from mdiff import __version__
from mdiff.cli import commands, demo_command, remote_commands, repo_commands
from mdiff.cli.usage import UsageError
from mdiff.errors import InvalidFileError, MdiffError

# The one map of exit statuses, for every command.
EXIT_OK = 0
EXIT_FAILED = 1  # the input is invalid, the operation was refused or failed; diff/status --exit-code: differences
EXIT_USAGE = 2  # bad arguments, or a file that cannot be read at all (missing, no permission, not HDF5)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # the reader of the output went away (`mdiff log | head`), as for git

EPILOG = """exit status (every command):
  0    success (validate: the file is valid; diff/status --exit-code: no differences)
  1    an invalid file, or a refused or failed operation (every error names a rule code, MD###, of
       SPEC.md §12); diff/status --exit-code: there are differences; commit: nothing to commit
  2    a usage error, or a file that cannot be read at all (missing, no permission, not HDF5: MD100)
  130  interrupted; 141  the output was closed early (e.g. piped into head)
With --json, an error is printed as {"error": {"code", "message", "path", "section"}} on stdout.
-v prints what the library does (-vv more) on stderr."""


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised (so that --json can report them) rather than printed and exited."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mdiff", description="Version control for model weights: one .mdiff (HDF5) file per commit.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mdiff {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for register in commands.REGISTER + repo_commands.REGISTER + remote_commands.REGISTER + demo_command.REGISTER:
        register(sub)
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="count", default=0,
                             help="say what the library does on stderr (-vv: more)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    wants_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        _configure_logging(getattr(args, "verbose", 0))
        return args.run(args)
    except UsageError as exc:
        return _report(wants_json, None, exc.message, None, EXIT_USAGE, usage=exc.usage)
    except MdiffError as exc:
        status = EXIT_USAGE if exc.code == "MD100" else EXIT_FAILED
        hint = None
        if isinstance(exc, InvalidFileError):  # a rule of the format: the spec explains it, validate lists all
            hint = f"SPEC.md §{exc.rule.section}: {exc.rule.title}; `mdiff validate FILE` lists every problem"
        return _report(wants_json, exc.code, exc.message, exc.path, status, section=exc.rule.section, hint=hint)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # the operating system's word: a missing file, no permission, a full disk
        message = exc.strerror or str(exc)
        return _report(wants_json, None, message, exc.filename and os.fspath(exc.filename), EXIT_USAGE)
    except KeyboardInterrupt:
        print("mdiff: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _report(wants_json: bool, code: str | None, message: str, path: str | None, status: int, *,
            section: str | None = None, hint: str | None = None, usage: str | None = None) -> int:
    try:
        if wants_json:
            print(json.dumps({"error": {"code": code, "message": message, "path": path, "section": section}}))
        else:
            if usage:
                print(usage.rstrip(), file=sys.stderr)
            where = f" [{path}]" if path else ""
            print(f"mdiff: error{' ' + code if code else ''}: {message}{where}", file=sys.stderr)
            if hint:
                print(f"  ({hint})", file=sys.stderr)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return status


def _silence_stdout() -> None:
    """After the reader went away: point stdout at /dev/null, so that flushing it at exit is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _configure_logging(verbosity: int) -> None:
    """Warnings of the library always reach stderr; -v adds what it does, -vv everything."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mdiff: %(message)s" if verbosity <= 0 else "mdiff [%(name)s] %(message)s"))
    logger = logging.getLogger("mdiff")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


if __name__ == "__main__":
    sys.exit(main())
