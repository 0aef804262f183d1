"""`mdiff` — inspect, check, make and apply .mdiff files; version model weights like git versions code.

The program's commands, in the order `mdiff --help` lists them: those of the modules in BUILTIN (a new
built-in command module is added there), then those a third party added, by
:func:`mdiff.cli.registry.register` or in the ``mdiff.commands`` entry-point group.
"""

from __future__ import annotations

import argparse
import sys

from mdiff.cli import demo_command, file_commands, remote_commands, repo_commands, registry
from mdiff.cli.dispatch import build_parser as _build_parser, run
from mdiff.cli.registry import Command

BUILTIN = (file_commands, repo_commands, remote_commands, demo_command)


def builtin_commands() -> list[Command]:
    return [command for module in BUILTIN for command in module.COMMANDS]


def all_commands(*, entry_points: bool = True) -> tuple[list[Command], list[str]]:
    """Every command of the program, and a line for each that was left out (see registry.collect)."""
    return registry.collect(builtin_commands(), entry_points=entry_points)


def build_parser() -> argparse.ArgumentParser:
    """The parser of `mdiff` with every command, those of entry points included."""
    return _build_parser(all_commands()[0])


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]) and return its exit status."""
    builtin = builtin_commands()
    words = sys.argv[1:] if argv is None else argv
    # Finding entry points reads every installed distribution's metadata (tens of ms): skip it when the
    # command line names a built-in command, or only asks for the version.
    needs_plugins = not words or words[0] not in {name for command in builtin for name in command.names} | {"--version"}
    commands, problems = registry.collect(builtin, entry_points=needs_plugins)
    for problem in problems:
        print(f"mdiff: warning: {problem}", file=sys.stderr)
    return run(argv, commands)

if __name__ == "__main__":
    sys.exit(main())
