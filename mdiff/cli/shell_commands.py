"""The commands about the command line itself: `mdiff help [COMMAND]`, `mdiff completion SHELL`, and the user's
settings, `mdiff config --global` (the repositories trusted although another user owns them: SPEC.md §13.10)."""

from __future__ import annotations

import difflib
import json

from mdiff.cli.completion import SHELLS, script
from mdiff.cli.dispatch import subcommands
from mdiff.cli.options import add_json
from mdiff.cli.output import print_result
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


def config_arguments(p) -> None:
    p.add_argument("key", nargs="?", default=None, metavar="KEY", help="the setting: safe.directory (§13.10)")
    p.add_argument("value", nargs="?", default=None, metavar="VALUE",
                   help="with --add: the value to add (for safe.directory, a repository's folder, or *)")
    p.add_argument("--global", dest="user", action="store_true",
                   help="the user's configuration file ($XDG_CONFIG_HOME/mdiff/config), the only one mdiff has")
    p.add_argument("--add", action="store_true", help="add VALUE to KEY's values")
    add_json(p)


@COMMANDS.command("config", help="list or add the user's settings (safe.directory)", arguments=config_arguments,
                  description="`mdiff config --global --add safe.directory DIR` trusts the repository in DIR although "
                              "another user owns it (`*`: every repository); `mdiff config --global safe.directory` "
                              "lists the folders trusted (SPEC.md §13.10; $MDIFF_SAFE_DIRECTORIES adds more).")
def run_config(args) -> int:
    from mdiff.repo import discovery

    if not args.user:
        raise UsageError("mdiff keeps only the user's settings: give --global")
    if args.key != discovery.SAFE_KEY:
        raise UsageError(f"the only setting is {discovery.SAFE_KEY} (got {args.key!r})" if args.key
                         else f"name the setting: {discovery.SAFE_KEY}")
    if args.add:
        if args.value is None:
            raise UsageError(f"--add needs a value: mdiff config --global --add {discovery.SAFE_KEY} DIR")
        path, added = discovery.add_safe_directory(args.value)
        print_result(args, {"file": str(path), "added": added},
                     f"{'added to' if added else 'already in'} {path}")
        return 0
    if args.value is not None:
        raise UsageError(f"give --add to add a value: mdiff config --global --add {discovery.SAFE_KEY} {args.value}")
    values = discovery.configured_safe_directories()
    if args.json:
        print(json.dumps({discovery.SAFE_KEY: values}))
    else:
        for value in values:
            print(value)
    return 0
