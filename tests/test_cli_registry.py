"""The command line is a registry of commands: a third party adds one without touching mdiff — by a
call to mdiff.cli.registry.register, or by an entry point in the group mdiff.commands — and it runs,
is listed by `mdiff --help`, and has its errors reported as every command's are."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mdiff.cli import registry
from mdiff.cli.main import main
from mdiff.cli.options import add_json
from mdiff.cli.registry import Command
from mdiff.cli.usage import UsageError

ROOT = Path(__file__).resolve().parents[1]


def _greet_arguments(p) -> None:
    p.add_argument("name", help="who to greet")
    p.add_argument("--shout", action="store_true", help="in capitals")
    p.add_argument("--fail", action="store_true", help="raise a usage error")
    add_json(p)  # the shared options are there for a third party's command too


def _greet(args) -> int:
    if args.fail:
        raise UsageError("greet was told to fail")
    text = f"hello, {args.name}"
    print(text.upper() if args.shout else text)
    return 3


@pytest.fixture
def greet(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps help to the terminal's width
    registry.register(Command("greet", help="say hello (a test's command)", run=_greet, arguments=_greet_arguments,
                              description="Print a greeting."))
    yield
    registry.unregister("greet")


def test_a_command_registered_by_a_call_runs_with_its_exit_status(greet, capsys):
    assert main(["greet", "world", "--shout"]) == 3
    assert capsys.readouterr() == ("HELLO, WORLD\n", "")


def test_a_registered_command_is_listed_after_the_built_in_ones_and_has_help(greet, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "    demo       train a small BERT, fine-tune it three ways, commit it all (needs the demo extra)\n" \
           "    greet      say hello (a test's command)\n" in out
    with pytest.raises(SystemExit):
        main(["greet", "--help"])
    assert capsys.readouterr().out == textwrap.dedent("""\
        usage: mdiff greet [-h] [--shout] [--fail] [--json] [-v] [-q] name

        Print a greeting.

        positional arguments:
          name           who to greet

        options:
          -h, --help     show this help message and exit
          --shout        in capitals
          --fail         raise a usage error
          --json         print JSON
          -v, --verbose  say what the library does on stderr (-vv: more)
          -q, --quiet    no progress bar and no summary: only errors, and what was asked for (a log, a
                         list, --json)
        """)


def test_a_registered_commands_errors_are_reported_as_every_commands_are(greet, capsys):
    assert main(["greet", "world", "--fail"]) == 2
    assert capsys.readouterr() == ("", "mdiff: error: greet was told to fail\n")
    assert main(["greet", "world", "--fail", "--json"]) == 2
    assert capsys.readouterr().out == ('{"error": {"code": null, "message": "greet was told to fail", "path": null, '
                                       '"section": null, "hint": null}}\n')
    assert main(["greet"]) == 2
    assert capsys.readouterr().err == ("usage: mdiff greet [-h] [--shout] [--fail] [--json] [-v] [-q] name\n"
                                       "mdiff: error: the following arguments are required: name\n")


def test_a_name_already_taken_keeps_its_first_command():
    registry.register(Command("log", help="not the log", run=_greet))
    try:
        builtin = [Command("log", help="the log", run=_greet)]
        commands, problems = registry.collect(builtin, entry_points=False)
    finally:
        registry.unregister("log")
    assert [(c.name, c.help) for c in commands] == [("log", "the log")]
    assert problems == ["the registered command 'log' was left out: the name is taken"]
    with pytest.raises(ValueError, match="there is already a command 'greet'"):
        commands_ = registry.Commands()
        commands_.add(Command("greet", help="a", run=_greet))
        commands_.add(Command("greet", help="b", run=_greet))


PLUGIN = '''
from mdiff.cli.registry import Command


def arguments(p):
    p.add_argument("name", help="who to greet")


def run(args):
    print(f"hello from a plugin, {args.name}")
    return 0


HELLO = Command("hello", help="say hello (an installed plugin)", run=run, arguments=arguments)
NOT_A_COMMAND = 42
'''


def _distribution(folder: Path, entry_points: str) -> dict[str, str]:
    """A distribution installed in ``folder`` (its module and .dist-info), and the environment that sees it."""
    (folder / "mdiff_hello_plugin.py").write_text(PLUGIN)
    info = folder / "mdiff_hello_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mdiff-hello-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    path = [str(folder), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "COLUMNS": "100"}


def _mdiff(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mdiff", *argv], env=env, capture_output=True, text=True)


def test_a_command_of_an_entry_point_runs_and_is_listed(tmp_path):
    env = _distribution(tmp_path, "[mdiff.commands]\nhello = mdiff_hello_plugin:HELLO\n")
    done = _mdiff(env, "hello", "world")
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello from a plugin, world\n", "")
    listed = _mdiff(env, "--help")
    assert listed.returncode == 0 and listed.stderr == ""
    assert "    push       send a branch's new commits to a remote\n" \
           "    help       list the commands, or explain one\n" in listed.stdout
    assert "    demo       train a small BERT, fine-tune it three ways, commit it all (needs the demo extra)\n" \
           "    hello      say hello (an installed plugin)\n" in listed.stdout
    # help and completion know it too, and the options before a command find it
    helped = _mdiff(env, "help", "hello")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: mdiff hello [-h] [-v] [-q] name\n")
    assert "'hello') _mdiff_options=" in _mdiff(env, "completion", "bash").stdout
    done = _mdiff(env, "-q", "-C", str(tmp_path), "hello", "again")
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello from a plugin, again\n", "")


def test_a_broken_entry_point_is_named_on_stderr_and_the_rest_still_runs(tmp_path):
    env = _distribution(tmp_path, "[mdiff.commands]\nhello = mdiff_hello_plugin:HELLO\n"
                                  "missing = mdiff_no_such_module:X\nnumber = mdiff_hello_plugin:NOT_A_COMMAND\n"
                                  "other = mdiff_hello_plugin:HELLO\n")
    done = _mdiff(env, "hello", "you")
    assert (done.returncode, done.stdout) == (0, "hello from a plugin, you\n")
    assert sorted(done.stderr.splitlines()) == [
        "mdiff: warning: entry point missing = mdiff_no_such_module:X was not loaded: ModuleNotFoundError: "
        "No module named 'mdiff_no_such_module'",
        "mdiff: warning: entry point number = mdiff_hello_plugin:NOT_A_COMMAND is not an mdiff.cli.registry.Command",
        "mdiff: warning: entry point other = mdiff_hello_plugin:HELLO names a command 'hello', not 'other'",
    ]
    # a built-in command does not look for plugins at all (start-up), so the broken ones say nothing
    version = _mdiff(env, "--version")
    assert (version.returncode, version.stderr) == (0, "")


def test_no_module_of_the_command_line_imports_one_that_imports_it_back():
    """Imports anywhere in a module (inside functions too) count: mdiff/cli/ is a graph without cycles."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "mdiff" / "cli").glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        graph[f"mdiff.cli.{path.stem}"] = {n for n in names if n.startswith("mdiff.cli.")}

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for name in graph.get(todo.pop(), ()):
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        return seen

    assert [module for module in graph if module in reaches(module)] == []


def test_an_alias_is_a_name_of_its_command_and_taken_like_one(capsys):
    """`mdiff count-objects` is `mdiff du` (issue 27); a third party's command of that name is left out."""
    from mdiff.cli.main import builtin_commands

    du = next(c for c in builtin_commands() if c.name == "du")
    assert du.aliases == ("count-objects",)
    commands, problems = registry.collect([*builtin_commands(), Command("count-objects", help="x", run=_greet)],
                                          entry_points=False)
    assert problems == ["the built-in command 'count-objects' was left out: the name is taken"]
    with pytest.raises(ValueError, match="already a command 'count-objects'"):
        taken = registry.Commands()
        taken.add(du)
        taken.add(Command("count-objects", help="x", run=_greet))
    with pytest.raises(SystemExit):
        main(["count-objects", "--help"])
    assert "usage: mdiff count-objects [-h] [-C DIR] [--json]" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert "    du         is it worth it?" in listed and "count-objects" not in listed


def test_a_json_error_carries_the_hint_the_text_shows(tmp_path, capsys):
    """`--json` errors say what to do as the text does (issue 31): the hint, in parentheses on stderr, is the
    JSON error's ``hint``."""
    bad = tmp_path / "bad.mdiff"
    bad.write_bytes(b"not an hdf5 file")
    assert main(["dump", str(bad)]) == 2
    hint = "SPEC.md §3.1: the file is not a readable HDF5 file; `mdiff validate FILE` lists every problem"
    assert capsys.readouterr().err.endswith(f"\n  ({hint})\n")
    assert main(["dump", str(bad), "--json"]) == 2
    assert json.loads(capsys.readouterr().out) == {"error": {
        "code": "MD100", "message": "not an .mdiff file: HDF5 cannot open it (file signature not found)",
        "path": str(bad), "section": "3.1", "hint": hint}}
