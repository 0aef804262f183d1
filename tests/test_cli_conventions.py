"""The command line as git has it: options before the command (`mdiff -C DIR log`, `-q`), `mdiff help
[COMMAND]`, `-q` on every command, and shell completion (bash, zsh) of commands, options and the
repository's names (mdiff/cli/dispatch.py, shell_commands.py, completion.py)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdiff.checkpoints import save_checkpoint
from mdiff.cli.main import build_parser, builtin_commands, main
from mdiff.repo import Repository
from tests.test_repo import DATE, run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo(tmp_path) -> Repository:
    r = Repository.init(tmp_path / "r")
    for i in range(3):
        r.commit({"w": np.arange(4, dtype=np.float32) + i}, f"step {i}", author="A", date=DATE)
    return r


def _commands() -> dict[str, argparse.ArgumentParser]:
    from mdiff.cli.dispatch import subcommands

    return subcommands(build_parser())


# ---------------------------------------------------------------- options before the command
def test_minus_c_before_the_command_runs_it_in_that_folder(repo, tmp_path, capsys):
    here = os.getcwd()
    code, out, err = run(capsys, "-C", repo.root, "log", "--oneline")
    assert (code, err) == (0, "") and [line.split()[-1] for line in out.splitlines()] == ["2", "1", "0"]
    assert os.getcwd() == here  # the working folder is restored
    assert run(capsys, "-C", repo.root, "log", "--oneline")[1] == run(capsys, "log", "--oneline", "-C", repo.root)[1]
    # several: each relative to the one before (as git -C); paths after the command are relative to DIR
    save_checkpoint(repo.root / "next.safetensors", {"w": np.full(4, 7, np.float32)})
    code, out, _ = run(capsys, "-C", tmp_path, "-C", "r", "commit", "next.safetensors", "-m", "from -C", "--author", "A")
    assert code == 0 and out.startswith("[main ") and os.getcwd() == here
    assert repo.metadata(repo.head()[1]).message == "from -C"
    (repo.root / "sub").mkdir()
    assert run(capsys, "-C", repo.root / "sub", "show", "--json")[0] == 0  # the repository is found upwards
    code, out, err = run(capsys, "-C", tmp_path / "missing", "log")
    assert code == 2 and "No such file or directory" in err and os.getcwd() == here
    code, out, err = run(capsys, "-C", tmp_path, "log")
    assert code == 1 and "MD801" in err and os.getcwd() == here  # no repository there


def test_minus_c_before_the_command_as_a_process(repo, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "mdiff", "-C", str(repo.root), "-q", "log", "--oneline"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3 and done.stderr == ""


def test_quiet_before_the_command_is_quiet_after_it(repo, tmp_path, capsys):
    save_checkpoint(tmp_path / "n.safetensors", {"w": np.full(4, 9, np.float32)})
    assert run(capsys, "-q", "commit", tmp_path / "n.safetensors", "-m", "q", "-C", repo.root, "--author", "A") == (0, "", "")
    assert run(capsys, "--quiet", "-C", repo.root, "reset", "HEAD~1") == (0, "", "")
    code, out, _ = run(capsys, "-q", "reflog", "-C", repo.root)  # what was asked for is still printed
    assert code == 0 and out.splitlines()[0].split()[1] == "main@{0}:"


# ---------------------------------------------------------------- help
def test_help_lists_the_commands_and_help_command_is_command_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert run(capsys, "help") == (0, listed, "")
    aliases = {alias for command in builtin_commands() for alias in command.aliases}
    for name in set(_commands()) - aliases:  # an alias is not listed: its command's help names it
        assert f"    {name}" in listed
    for name in ("reflog", "checkout", "help", "completion", "import-peft"):
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        expected = capsys.readouterr().out
        assert run(capsys, "help", name) == (0, expected, "")


def test_help_of_an_unknown_command_is_a_usage_error_with_a_hint(capsys):
    code, out, err = run(capsys, "help", "swich")
    assert (code, out) == (2, "") and "no command 'swich'; did you mean switch?" in err and "mdiff help" in err
    code, out, err = run(capsys, "help", "qqqqq")
    assert code == 2 and "no command 'qqqqq' (" in err


# ---------------------------------------------------------------- -q on every command
def test_every_command_takes_minus_q():
    commands = _commands()
    assert {c.name for c in builtin_commands()} <= set(commands) and len(builtin_commands()) == 34  # migrate (issue 31), view (issue 29)
    missing = [name for name, p in commands.items()
               if not {"-q", "--quiet"} <= set(p._option_string_actions)]
    assert missing == []
    for name, p in commands.items():  # and parses it: the positionals a command needs, then -q
        needs = [a for a in p._actions if not a.option_strings and a.nargs not in ("?", "*")]
        required = [o for a in p._actions if a.option_strings and a.required for o in (a.option_strings[0], "X")]
        words = [("bash" if a.choices else "x") for a in needs] + required
        assert p.parse_args([*words, "-q"]).quiet is True, name


def test_quiet_prints_no_summary_and_keeps_the_exit_status(tmp_path, capsys):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_checkpoint(a, {"w": np.zeros(3, np.float32)})
    save_checkpoint(b, {"w": np.ones(3, np.float32)})
    save_checkpoint(tmp_path / "third.safetensors", {"w": np.full(3, 2, np.float32)})
    r = tmp_path / "r"
    assert run(capsys, "init", "-q", r) == (0, "", "")
    assert (r / ".mdiff" / "format").is_file()
    d = tmp_path / "d.mdiff"
    quiet = [
        (["diff", a, b, "--exit-code", "-q"], 1), (["diff", a, a, "--exit-code", "-q"], 0), (["diff", a, b, "-o", d, "-q"], 0),
        (["validate", d, "-q"], 0), (["apply", a, d, "-o", tmp_path / "c.safetensors", "-q"], 0),
        (["commit", a, "-m", "a", "-C", r, "-q", "--author", "A"], 0),
        (["commit", a, "-m", "a", "-C", r, "-q", "--author", "A"], 1),  # nothing to commit: the status says it
        (["commit", b, "-m", "b", "-C", r, "-q", "--author", "A"], 0),
        (["status", b, "-C", r, "-q", "--exit-code"], 0), (["status", a, "-C", r, "-q", "--exit-code"], 1),
        (["branch", "exp", "-C", r, "-q"], 0), (["switch", "exp", "-C", r, "-q"], 0),
        (["commit", tmp_path / "third.safetensors", "-m", "c", "-C", r, "-q", "--author", "A"], 0),
        (["switch", "main", "-C", r, "-q"], 0),
        (["tag", "v1", "-C", r, "-q"], 0), (["reset", "HEAD~1", "-C", r, "-q"], 0), (["reset", "main@{1}", "-C", r, "-q"], 0),
        (["checkout", "main", "-o", tmp_path / "out.safetensors", "-C", r, "-q"], 0),
        (["snapshot", "-C", r, "-q"], 0), (["merge", "exp", "-C", r, "-q"], 0), (["gc", "-C", r, "-q"], 0),
        (["fsck", "-C", r, "-q"], 0), (["remote", "add", "origin", r, "-C", r, "-q"], 0),
        (["clone", r, tmp_path / "clone", "-q"], 0), (["fetch", "-C", tmp_path / "clone", "-q"], 0),
        (["pull", "-C", tmp_path / "clone", "-q"], 0), (["push", "-C", tmp_path / "clone", "-q"], 0),
    ]
    for argv, status in quiet:
        code, out, err = run(capsys, *argv)
        assert (code, out) == (status, ""), (argv, out, err)
        assert "Traceback" not in err
    # errors still go to stderr; what was asked for, and --json, is still printed
    code, out, err = run(capsys, "reset", "nosuch", "-C", r, "-q")
    assert (code, out) == (1, "") and "MD801" in err
    assert run(capsys, "log", "--oneline", "-C", r, "-q")[1].count("\n") == 3
    code, out, _ = run(capsys, "diff", a, b, "-q", "--json")
    assert code == 0 and json.loads(out)["parameters"]


# ---------------------------------------------------------------- completion
BASH = shutil.which("bash")


def _script(shell: str, capsys) -> str:
    code, out, err = run(capsys, "completion", shell)
    assert code == 0 and err == ""
    return out


@pytest.fixture
def named(repo, tmp_path) -> Repository:
    """A repository with branches main and exp/lora, a tag v1, a remote origin and its main."""
    from mdiff.repo.remotes import add_remote

    repo.set_branch("exp/lora", repo.head()[1])
    repo.tag("v1", "HEAD~1")
    other = Repository.init(tmp_path / "other")
    other.commit({"w": np.zeros(2, np.float32)}, "other", author="A", date=DATE)
    add_remote(repo, "origin", str(other.root))
    repo.fetch("origin")
    return repo


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_bash_completes_commands_options_and_the_repositorys_names(named, tmp_path, capsys):
    script = tmp_path / "mdiff.bash"
    script.write_text(_script("bash", capsys))
    assert subprocess.run([BASH, "-n", str(script)], capture_output=True).returncode == 0

    def complete(*words: str, cwd: Path = named.root) -> list[str]:
        """COMPREPLY after TAB on the command line ``words`` (the last one being completed), in a real bash."""
        program = f"""
            mdiff() {{ "$MDIFF_PYTHON" -m mdiff "$@"; }}
            source {script}
            COMP_WORDS=({' '.join(_quoted(w) for w in words)})
            COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
            COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}
            _mdiff
            printf '%s\\n' "${{COMPREPLY[@]}}"
        """
        env = {**os.environ, "MDIFF_PYTHON": sys.executable,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([BASH, "--norc", "--noprofile", "-c", program], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return sorted(line for line in done.stdout.splitlines() if line)

    assert complete("mdiff", "sw") == ["switch"]
    assert complete("mdiff", "re") == ["reflog", "remote", "reset"]
    assert complete("mdiff", "switch", "") == ["exp/lora", "main"]
    assert complete("mdiff", "switch", "e") == ["exp/lora"]
    assert {"--output", "--quiet", "--json", "--engine", "--remote", "--help"} <= set(complete("mdiff", "checkout", "--"))
    assert complete("mdiff", "checkout", "--e") == ["--engine"]
    assert complete("mdiff", "checkout", "--engine", "") == ["auto", "numpy", "onnx"]
    assert complete("mdiff", "checkout", "v") == ["v1"]
    assert complete("mdiff", "log", "") == ["HEAD", "exp/lora", "main", "origin/main", "v1"]
    assert complete("mdiff", "tag", "") == ["v1"]
    assert complete("mdiff", "push", "") == ["origin"]
    assert complete("mdiff", "push", "origin", "") == ["exp/lora", "main"]
    assert complete("mdiff", "completion", "") == ["bash", "zsh"]
    assert complete("mdiff", "help", "imp") == ["import-peft"]
    assert complete("mdiff", "-") == sorted(["-h", "--help", "--version", "-C", "-q", "--quiet", "--threads"])
    assert complete("mdiff", "-q", "sta") == ["status"]
    # the repository of -C (before or after the command), from anywhere
    assert complete("mdiff", "-C", str(named.root), "switch", "", cwd=tmp_path) == ["exp/lora", "main"]
    assert complete("mdiff", "reset", "-C", str(named.root), "m", cwd=tmp_path) == ["main"]
    assert complete("mdiff", "switch", "", cwd=tmp_path) == []  # no repository: no names, no error
    # a value of an option is not a positional; files and folders where files and folders go
    (named.root / "model.safetensors").write_bytes(b"")
    assert complete("mdiff", "checkout", "-o", "mod") == ["model.safetensors"]
    assert complete("mdiff", "checkout", "-o", "out", "ma") == ["main"]
    assert "model.safetensors" in complete("mdiff", "diff", "") and "main" in complete("mdiff", "diff", "")
    assert complete("mdiff", "log", "-C", "") == [".mdiff"]  # folders only
    assert complete("mdiff", "commit", "-m", "") == []  # a message: nothing to complete


def _quoted(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def test_zsh_script_names_every_command_and_option(capsys):
    script = _script("zsh", capsys)
    assert script.startswith("#compdef mdiff\n") and "compdef _mdiff mdiff" in script
    for name, parser in _commands().items():
        assert f"        '{name}:" in script and f"        '{name}')" in script, name
        for option in parser._option_string_actions:
            if parser._option_string_actions[option].help is not argparse.SUPPRESS:
                assert f"'{option}:" in script, (name, option)
    assert "__complete $kind" in script


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (the script's text is tested above)")
def test_zsh_completes_commands_options_and_the_repositorys_names(named, tmp_path, capsys):
    """The zsh script's own logic, in a real zsh: zsh's completion builtins (_describe, compadd, _files)
    are stood in for by functions that print what they were given, before any filtering by prefix."""
    zsh = shutil.which("zsh")
    script = tmp_path / "_mdiff"
    script.write_text(_script("zsh", capsys))
    assert subprocess.run([zsh, "-n", str(script)], capture_output=True).returncode == 0

    def complete(*words: str, cwd: Path = named.root) -> list[str]:
        program = f"""
            mdiff() {{ "$MDIFF_PYTHON" -m mdiff "$@"; }}
            compdef() {{ :; }}
            _describe() {{ local item; for item in ${{(P)4}}; do print -r -- "${{item%%:*}}"; done; }}
            compadd() {{ [[ $1 == -- ]] && shift; print -rl -- "$@"; }}
            _files() {{ print -r -- "<files $*>"; }}
            source {script}
            words=({' '.join(_quoted(w) for w in words)}); CURRENT=${{#words}}
            _mdiff
        """
        env = {**os.environ, "MDIFF_PYTHON": sys.executable,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([zsh, "-f", "-c", program], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, 1) and done.stderr == "", done.stderr
        return sorted(line for line in done.stdout.splitlines() if line)

    assert {"switch", "checkout", "reflog", "help", "completion"} <= set(complete("mdiff", ""))
    assert complete("mdiff", "switch", "") == ["exp/lora", "main"]
    assert {"--output", "--quiet", "--json", "--engine"} <= set(complete("mdiff", "checkout", "--"))
    assert complete("mdiff", "checkout", "--engine", "") == ["auto", "numpy", "onnx"]
    assert complete("mdiff", "checkout", "-o", "") == ["<files >"]
    assert complete("mdiff", "log", "") == ["HEAD", "exp/lora", "main", "origin/main", "v1"]
    assert complete("mdiff", "push", "") == ["origin"]
    assert complete("mdiff", "-C", str(named.root), "tag", "", cwd=tmp_path) == ["v1"]
    assert complete("mdiff", "-C", "") == ["<files -/>"]
    assert complete("mdiff", "commit", "-m", "") == []


def test_complete_lists_names_without_reading_refs_or_the_heavy_libraries(named, tmp_path):
    """`mdiff __complete KIND [DIR]`: names only (a ref naming no commit is still listed), quickly,
    without numpy or h5py; outside a repository, or on a broken one, nothing and exit 0."""
    (named.dir / "refs" / "heads" / "dangling").write_text("f" * 64 + "\n")
    (named.dir / "refs" / "heads" / "x..y").write_text("f" * 64 + "\n")  # no branch (§13.1): not listed
    (named.dir / "refs" / "heads" / ".main.tmp").write_text("")  # a writer's temporary file
    code = ("import sys; from mdiff.cli.main import main; rc = main(sys.argv[1:]); "
            "print(sorted(m for m in ('numpy', 'h5py', 'onnx') if m in sys.modules), rc, file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def names(*argv: str, cwd: Path = tmp_path) -> tuple[list[str], str]:
        done = subprocess.run([sys.executable, "-c", code, "__complete", *argv], cwd=cwd, env=env, capture_output=True,
                              text=True)
        return done.stdout.splitlines(), done.stderr.strip()

    assert names("branches", str(named.root)) == (["dangling", "exp/lora", "main"], "[] 0")
    assert names("tags", str(named.root)) == (["v1"], "[] 0")
    assert names("remotes", str(named.root)) == (["origin"], "[] 0")
    assert names("refs", cwd=named.root / ".mdiff") == (["HEAD", "dangling", "exp/lora", "main", "v1", "origin/main"], "[] 0")
    assert names("branches", str(tmp_path)) == ([], "[] 0")
    os.chmod(named.dir / "refs" / "heads", 0)
    try:
        if not os.access(named.dir / "refs" / "heads", os.R_OK):  # not as root
            assert names("branches", str(named.root)) == ([], "[] 0")
    finally:
        os.chmod(named.dir / "refs" / "heads", 0o755)
    assert names("nonsense")[1].endswith("[] 2")


@pytest.mark.parametrize("value", [
    {}, [], (), {"a": []}, {"a": {}}, [[[]]], "text", 5, None, True,
    [1, -2, 2.5, -0.0, 1e300, 2 ** 70, "x", None, True, False],
    {"é\ud800": "\x00\n\"\\", "n": [float("nan"), float("inf"), -float("inf")]},
    (1, (2, [3, {"k": (4,)}])),
    {"file": "a.mdiff", "parameters": [{"name": "w", "shape": [4], "stored_bytes": 16, "rel_change": 0.125}]},
    {1: 2}, {"s": {1, 2}}, {"e": np.float32(1)},  # json.dumps's own: a key made a string, its TypeErrors
])
def test_dumps_indented_is_json_dumps_indent_1(value):
    from mdiff.cli.output import dumps_indented

    try:
        want: object = json.dumps(value, indent=1)
    except TypeError as exc:
        want = str(exc)
    try:
        got: object = dumps_indented(value)
    except TypeError as exc:
        got = str(exc)
    assert got == want
