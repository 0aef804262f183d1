"""The commands of the command line: what a command is, and where the program finds them.

A command is a name, a line of help, a function that adds its arguments to its parser and a handler
that runs it. Built-in modules list theirs in a module-level :class:`Commands` (``@COMMANDS.command``);
a third party adds one without touching mdiff, either by calling :func:`register` before the command
line runs, or by naming a :class:`Command` in the ``mdiff.commands`` entry-point group of its
distribution (the entry point's name is the command's)::

    [project.entry-points."mdiff.commands"]
    hello = "mdiff_hello:HELLO"          # HELLO = Command("hello", help=..., run=..., arguments=...)

This module imports no command module: they import it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

Handler = Callable[[argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]

ENTRY_POINT_GROUP = "mdiff.commands"


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of a command that takes none."""


@dataclass(frozen=True)
class Command:
    """One command: ``mdiff NAME ...`` parsed by what ``arguments`` adds, then run by ``run``, whose
    return value is the exit status. ``aliases``: other names it answers to (`mdiff count-objects` is `du`)."""

    name: str
    help: str
    run: Handler
    arguments: Arguments = no_arguments
    description: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


class Commands:
    """Commands in the order they were added, each name once."""

    def __init__(self) -> None:
        self._by_name: dict[str, Command] = {}

    def add(self, command: Command) -> Command:
        taken = [name for name in command.names if name in self]
        if taken:
            raise ValueError(f"there is already a command {taken[0]!r}")
        self._by_name[command.name] = command
        return command

    def remove(self, name: str) -> None:
        del self._by_name[name]

    def command(self, name: str, *, help: str, arguments: Arguments = no_arguments,
                description: str | None = None, aliases: tuple[str, ...] = ()) -> Callable[[Handler], Handler]:
        """A decorator that adds its function as the handler of a new command, and returns it unchanged."""

        def decorate(run: Handler) -> Handler:
            self.add(Command(name, help, run, arguments, description, aliases))
            return run

        return decorate

    def __iter__(self) -> Iterator[Command]:
        return iter(list(self._by_name.values()))

    def __contains__(self, name: object) -> bool:
        """Whether a command has ``name`` as its name or an alias."""
        return any(name in command.names for command in self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)


# The commands added by a call, for this process: they follow the built-in ones.
REGISTERED = Commands()


def register(command: Command) -> Command:
    """Add a command to the command line of this process (after the built-in ones)."""
    return REGISTERED.add(command)


def unregister(name: str) -> None:
    """Remove a command that :func:`register` added."""
    REGISTERED.remove(name)


def entry_point_commands() -> tuple[list[Command], list[str]]:
    """The commands of the installed distributions' ``mdiff.commands`` entry points, and a line for
    each entry point that could not be loaded (a broken plugin must not take the program down)."""
    from importlib.metadata import entry_points  # here: it costs start-up, and most runs need no plugin

    found: list[Command] = []
    problems: list[str] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name} = {point.value}"
        try:
            command = point.load()
        except Exception as exc:  # whatever a third party's import raises
            problems.append(f"{where} was not loaded: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(command, Command):
            problems.append(f"{where} is not an mdiff.cli.registry.Command")
        elif command.name != point.name:
            problems.append(f"{where} names a command {command.name!r}, not {point.name!r}")
        else:
            found.append(command)
    return found, problems


def collect(builtin: Iterable[Command], *, entry_points: bool = True) -> tuple[list[Command], list[str]]:
    """Every command in help order — ``builtin``, then those registered by call, then (if asked) those
    of entry points — and a line for each one left out: a name already taken keeps its first command."""
    plugins, problems = entry_point_commands() if entry_points else ([], [])
    commands: dict[str, Command] = {}
    taken: set[str] = set()
    for source, group in (("built-in", builtin), ("registered", REGISTERED), ("entry point", plugins)):
        for command in group:
            if taken.intersection(command.names):
                problems.append(f"the {source} command {command.name!r} was left out: the name is taken")
            else:
                commands[command.name] = command
                taken.update(command.names)
    return list(commands.values()), problems
