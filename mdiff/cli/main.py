"""`mdiff` — inspect, check, make and apply .mdiff files; version model weights like git versions code.

The program's commands, in the order `mdiff --help` lists them: those of the modules in BUILTIN (a new
built-in command module is added there), then those a third party added, by
:func:`mdiff.cli.registry.register` or in the ``mdiff.commands`` entry-point group.
"""

from __future__ import annotations

import argparse
import sys

from mdiff.cli import demo_command, file_commands, remote_commands, repo_commands, registry, shell_commands, view_command
from mdiff.cli.dispatch import build_parser as _build_parser, command_word, run
from mdiff.cli.registry import Command

BUILTIN = (file_commands, repo_commands, remote_commands, shell_commands, view_command, demo_command)


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
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["__complete"]:  # what a completion script asks at each TAB: names, quickly (cli/completion.py)
        from mdiff.cli.completion import complete

        return complete(words[1:])
    builtin = builtin_commands()
    word = command_word(words) if words else None
    named = next((command for command in builtin if word in command.names), None)
    if named is not None and word not in ("help", "completion"):
        # A built-in command is the one that runs, whatever else is registered (a name taken keeps its
        # first command): its parser alone is built — not the other commands' (~30 parsers, each asking
        # gettext for its help's words) — and no entry point is looked for (every installed
        # distribution's metadata, tens of ms). help and completion list every command.
        return run(argv, [named])
    commands, problems = registry.collect(builtin, entry_points=words[:1] != ["--version"])
    for problem in problems:
        print(f"mdiff: warning: {problem}", file=sys.stderr)
    return run(argv, commands)

if __name__ == "__main__":
    sys.exit(main())
