"""The commands about the command line itself: `mdiff help [COMMAND]` and `mdiff completion SHELL`."""

from __future__ import annotations

import difflib

from mdiff.cli.completion import SHELLS, script
from mdiff.cli.dispatch import subcommands
from mdiff.cli.registry import Commands
from mdiff.cli.usage import UsageError

COMMANDS = Commands()


def help_arguments(p) -> None:
    p.add_argument("topic", nargs="?", default=None, metavar="COMMAND",
                   help="the command to explain (default: list every command)")


@COMMANDS.command("help", help="list the commands, or explain one", arguments=help_arguments,
                  description="Without COMMAND, list every command (as `mdiff --help`); with COMMAND, explain it "
                              "and its options (as `mdiff COMMAND --help`).")
def run_help(args) -> int:
    program = args.program
    if args.topic is None:
        program.print_help()
        return 0
    commands = subcommands(program)
    if args.topic not in commands:
        close = difflib.get_close_matches(args.topic, list(commands), n=3)
        guess = f"; did you mean {' or '.join(close)}?" if close else ""
        raise UsageError(f"no command {args.topic!r}{guess} (`mdiff help` lists them)")
    commands[args.topic].print_help()
    return 0


def completion_arguments(p) -> None:
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash or zsh")


@COMMANDS.command("completion", help="print a shell completion script (bash, zsh)", arguments=completion_arguments,
                  description="Print a script that makes the shell complete mdiff's commands, their options, and "
                              "the branches, tags and remotes of the repository at hand (asked of mdiff as you "
                              "press TAB). bash: `source <(mdiff completion bash)` in ~/.bashrc. zsh: `source "
                              "<(mdiff completion zsh)` in ~/.zshrc, after compinit. Make it again after "
                              "installing a plugin that adds commands.")
def run_completion(args) -> int:
    print(script(args.shell, args.program), end="")
    return 0
