"""Run a command line over a set of commands: build the parser, dispatch, and turn errors into exit statuses."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterable
from typing import NoReturn

from mdiff import __version__
from mdiff import threads
from mdiff.cli.options import add_quiet, add_threads, add_verbose
from mdiff.cli.registry import Command
from mdiff.cli.usage import UsageError
from mdiff.errors import InvalidFileError, MdiffError

# The one map of exit statuses, for every command.
EXIT_OK = 0
EXIT_FAILED = 1  # the input is invalid, the operation was refused or failed; diff/status --exit-code: differences
EXIT_USAGE = 2  # bad arguments, or a file that cannot be read at all (missing, no permission, not HDF5)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # the reader of the output went away (`mdiff log | head`), as for git
# errors about the command line's own paths: a file that cannot be read at all, an output that must not be replaced
USAGE_CODES = frozenset({"MD100", "MD706"})

EPILOG = """exit status (every command):
  0    success (validate: the file is valid; diff/status --exit-code: no differences)
  1    an invalid file, or a refused or failed operation (every error names a rule code, MD###, of
       SPEC.md §12); diff/status --exit-code: there are differences; commit: nothing to commit
  2    a usage error, a file that cannot be read at all (missing, no permission, not HDF5: MD100), or an
       output that must not be replaced (a folder that is not empty, a device, FIFO or link: MD706)
  130  interrupted; 141  the output was closed early (e.g. piped into head)
With --json, an error is printed as {"error": {"code", "message", "path", "section"}} on stdout.
-v prints what the library does (-vv more) on stderr; -q prints no progress and no summary.
Before the command: -C DIR (run as if started in DIR, as git -C), -q, --threads N.
`mdiff help COMMAND` explains a command; `mdiff completion bash` (or zsh) prints a completion script."""


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised (so that --json can report them) rather than printed and exited."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self)


# The options before the command (`mdiff -C DIR -q log`) that take a value.
_GLOBAL_WITH_A_VALUE = ("-C", "--threads")


def command_word(words: list[str]) -> str | None:
    """The word of ``words`` that names the command: the first after the options before it (-C DIR,
    --threads N, -q); None when there is none."""
    i = 0
    while i < len(words):
        word = words[i]
        if word in _GLOBAL_WITH_A_VALUE:
            i += 2
        elif word.startswith("-") and word != "-" and word != "--version":
            i += 1  # -CDIR, --threads=N, -q, --quiet, or a mistake argparse will name
        else:
            return word
    return None


def build_parser(commands: Iterable[Command]) -> argparse.ArgumentParser:
    """`mdiff` with one subcommand per command, in the order given, each taking -v, -q and --threads as
    well (-C DIR, -q and --threads before the command too)."""
    parser = _Parser(
        prog="mdiff", description="Version control for model weights: one .mdiff (HDF5) file per commit.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mdiff {__version__}")
    parser.add_argument("-C", dest="chdir", action="append", default=[], metavar="DIR",
                        help="run as if mdiff was started in DIR (as git -C; several: each relative to the one before)")
    parser.add_argument("-q", "--quiet", dest="quiet_before_the_command", action="store_true",
                        help="as -q after the command: no progress and no summary, only errors and what was asked for")
    add_threads(parser)
    parser.set_defaults(program=parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for command in commands:
        for name in command.names:  # an alias parses as its command, and is not listed (its help says it)
            if name == command.name:
                p = sub.add_parser(name, help=command.help, description=command.description)
            else:  # argparse lists a sub-command given help=, and only those
                p = sub.add_parser(name, description=command.description)
            command.arguments(p)
            add_verbose(p)
            if "-q" not in p._option_string_actions and "--quiet" not in p._option_string_actions:
                add_quiet(p)  # every command takes -q (one that prints nothing but what was asked for ignores it)
            add_threads(p, after_the_command=True)
            p.set_defaults(run=command.run)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of each command of the program's ``parser``, by name, in help order."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def run(argv: list[str] | None, commands: Iterable[Command]) -> int:
    """Parse ``argv`` (default: sys.argv[1:]), run the command it names and return the exit status;
    an error is printed (as JSON on stdout with --json), never raised, but for a bug's traceback.
    With -C DIR the command runs in DIR, and the working folder is restored afterwards."""
    parser = build_parser(commands)
    wants_json = "--json" in (sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # text a file holds that UTF-8 cannot (a lone surrogate): escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    started_in = None
    try:
        args = parser.parse_args(argv)
        if args.quiet_before_the_command:
            args.quiet = True
        _configure_logging(getattr(args, "verbose", 0))
        _check_threads(args.threads)
        if args.chdir:
            started_in = os.getcwd()
            for folder in args.chdir:
                os.chdir(folder)
        with threads.threads_for(args.threads):
            return args.run(args)
    except UsageError as exc:
        return _report(wants_json, None, exc.message, None, EXIT_USAGE, usage=exc.usage)
    except MdiffError as exc:
        status = EXIT_USAGE if exc.code in USAGE_CODES else EXIT_FAILED
        hint = exc.hint
        if hint is None and isinstance(exc, InvalidFileError):  # a rule of the format: the spec explains it, validate lists all
            hint = f"SPEC.md §{exc.rule.section}: {exc.rule.title}; `mdiff validate FILE` lists every problem"
        return _report(wants_json, exc.code, exc.message, _shown(exc.path), status, section=exc.rule.section, hint=hint)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # the operating system's word: a missing file, no permission, a full disk
        message = exc.strerror or str(exc)
        return _report(wants_json, None, message, _shown(exc.filename), EXIT_USAGE)
    except KeyboardInterrupt:
        print("mdiff: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if started_in is not None:
            os.chdir(started_in)


def _shown(path: object) -> str | None:
    """The path an error names, for a message — none where it is a name mdiff made for its own work (a
    temporary file, a descriptor's /proc/self/fd/N), which the user never gave and cannot find."""
    from mdiff.atomic import is_internal_name  # on error only: start-up stays quick

    if not path or is_internal_name(path):
        return None
    return os.fsdecode(path) if isinstance(path, (bytes, os.PathLike)) else str(path)


def _report(wants_json: bool, code: str | None, message: str, path: str | None, status: int, *,
            section: str | None = None, hint: str | None = None, usage: str | None = None) -> int:
    try:
        if wants_json:
            print(json.dumps({"error": {"code": code, "message": message, "path": path, "section": section, "hint": hint}}))
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


def _check_threads(chosen: int | None) -> None:
    """Without --threads, a $MDIFF_THREADS that is not a number is a usage error now, before any work,
    rather than a ValueError at the pool's first use."""
    if chosen is None:
        try:
            threads.configured_threads()
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _configure_logging(verbosity: int) -> None:
    """Warnings of the library always reach stderr; -v adds what it does, -vv everything."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mdiff: %(message)s" if verbosity <= 0 else "mdiff [%(name)s] %(message)s"))
    logger = logging.getLogger("mdiff")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
