"""Implementations under test, seen through the command-line contract of conformance/README.md:

    IMPL validate FILE --json [--limit NAME=N ...]
    IMPL apply BASE DIFF -o OUT --json [--limit NAME=N ...]
    IMPL features                       (optional)
    IMPL apply-many --json [--limit NAME=N ...] BASE DIFF OUT ...   (optional: the claim `apply-many`)
    IMPL checkout REVISION -o OUT -C REPO_DIR --json   (optional: the `repository` feature)
    IMPL merge-file OURS BASE THEIRS -o OUT [--strategy S] [--all] --json   (optional: the `merge` feature)
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Completed:
    """What one command did. ``returncode`` is None when it timed out."""

    returncode: int | None
    stdout: str
    stderr: str


def limit_args(limits: Mapping[str, int]) -> list[str]:
    args: list[str] = []
    for name in sorted(limits):
        args += ["--limit", f"{name}={limits[name]}"]
    return args


class Implementation:
    """An implementation reached through the command-line contract."""

    name = "implementation"
    parallel_safe = True  # whether several commands may run at once

    def run(self, args: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> Completed:
        raise NotImplementedError

    def validate(self, diff: Path, limits: Mapping[str, int] = {}, timeout: float = DEFAULT_TIMEOUT) -> Completed:
        return self.run(["validate", str(diff), "--json", *limit_args(limits)], timeout)

    def apply(self, base: Path, diff: Path, out: Path, limits: Mapping[str, int] = {},
              timeout: float = DEFAULT_TIMEOUT) -> Completed:
        return self.run(["apply", str(base), str(diff), "-o", str(out), "--json", *limit_args(limits)], timeout)

    def apply_many(self, triples: Sequence[tuple[Path, Path, Path]], limits: Mapping[str, int] = {},
                   timeout: float = DEFAULT_TIMEOUT) -> Completed:
        """Several applies in one command, each (BASE, DIFF, OUT) as ``apply`` takes them."""
        files = [str(path) for triple in triples for path in triple]
        return self.run(["apply-many", "--json", *limit_args(limits), *files], timeout)

    def checkout(self, repo: Path, revision: str, out: Path, timeout: float = DEFAULT_TIMEOUT) -> Completed:
        """The state at ``revision`` of the repository in the folder ``repo`` (holding ``.mdiff/``)."""
        return self.run(["checkout", revision, "-o", str(out), "-C", str(repo), "--json"], timeout)

    def merge_file(self, ours: Path, base: Path, theirs: Path, out: Path, strategy: str | None = None,
                   everything: bool = False, timeout: float = DEFAULT_TIMEOUT) -> Completed:
        """Three checkpoints merged (SPEC.md §13.7): ``theirs`` into ``ours`` against ``base``, ``strategy``
        resolving conflicts (or, with ``everything``, applied to all parameters), written to ``out``."""
        options = (["--strategy", strategy] if strategy is not None else []) + (["--all"] if everything else [])
        return self.run(["merge-file", str(ours), str(base), str(theirs), "-o", str(out), *options, "--json"], timeout)

    def features(self) -> frozenset[str] | None:
        """The features the implementation claims; None (it has no `features` command) claims all."""
        done = self.run(["features"], 60)
        if done.returncode != 0:
            return None
        try:
            claimed = json.loads(done.stdout)
        except json.JSONDecodeError:
            claimed = None
        if not (isinstance(claimed, list) and all(isinstance(x, str) for x in claimed)):
            raise ValueError(f"`{self.name} features` exited 0 but did not print a JSON list of strings: "
                             f"{done.stdout[:200]!r}")
        return frozenset(claimed)


class CommandImplementation(Implementation):
    """An implementation run as a command line: ``CommandImplementation("node tools/mdiff-js/bin/mdiff-js.js")``."""

    def __init__(self, command: str | Sequence[str], cwd: str | Path | None = None):
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("empty command")
        self.name = " ".join(shlex.quote(a) for a in self.argv)
        self.cwd = cwd

    def run(self, args: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> Completed:
        try:
            p = subprocess.run([*self.argv, *args], capture_output=True, timeout=timeout, cwd=self.cwd,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            return Completed(None, _text(exc.stdout), _text(exc.stderr))
        return Completed(p.returncode, _text(p.stdout), _text(p.stderr))


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", errors="replace")


class InProcessImplementation(Implementation):
    """A Python command-line ``main(argv) -> int`` run in this process, its output captured: the
    same contract without a process per command. Commands run one at a time (the capture is
    process-wide) and a timeout cannot be enforced."""

    parallel_safe = False

    def __init__(self, main: Callable[[list[str]], int], name: str):
        self.main = main
        self.name = name

    def run(self, args: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> Completed:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = self.main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except Exception as exc:  # a crash is an answer too: exit 1 with a message, as Python's would be
                print(f"Traceback (in process): {type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
        return Completed(code if code is not None else 0, out.getvalue(), err.getvalue())


def reference_command() -> list[str]:
    """The reference implementation as a command: mdiff's own command line."""
    return [sys.executable, "-m", "mdiff.cli.main"]


def reference_in_process() -> InProcessImplementation:
    """mdiff's command line (``mdiff.cli.main.main``) called in this process: the same commands,
    output and exit statuses as :func:`reference_command`, without a Python start-up per command."""
    from mdiff.cli.main import main

    return InProcessImplementation(main, "mdiff (reference, in process)")
