"""The options commands share: each one's argparse shape, and what its value turns into.

Every command takes ``-v``, ``-q`` and ``--threads`` (dispatch adds them); a command adds ``-C``, ``--json``,
``-q`` (to place it in its help), ``--author``, ``--date``, ``--meta``, ``--storage-option``, the reader limits, ... with the
functions here, so that every command spells and explains an option the same way; a new shared option
goes here too. Nothing here imports numpy or h5py: --help stays quick.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
from typing import TYPE_CHECKING

from mdiff.cli.usage import UsageError
from mdiff.engines import ENGINES
from mdiff.hdf5walk.limits import Limits
from mdiff.isolation import DEFAULT_MEMORY_BYTES, DEFAULT_SECONDS_PER_MB, DEFAULT_TIMEOUT_S, Isolation, isolation_supported
from mdiff.threads import ENVIRONMENT, parse_threads

if TYPE_CHECKING:
    from mdiff.repo.repository import Repository
    from mdiff.repo.store import Store

log = logging.getLogger(__name__)

_AUTHOR_DEFAULT = ("$MDIFF_AUTHOR, else $MDIFF_AUTHOR_NAME and $MDIFF_AUTHOR_EMAIL, "
                   "else git config user.name and user.email")
STORAGE_OPTION_HELP = ("an fsspec option for the remote's store (repeatable; VALUE is JSON or text; a.b=v nests), "
                       "e.g. client_kwargs.endpoint_url=http://localhost:9000; also $MDIFF_STORAGE_OPTIONS (a JSON "
                       "object). Credentials: the store's usual environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, …). "
                       "Never stored")


# ---------------------------------------------------------------- every command
def add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="count", default=0, help="say what the library does on stderr (-vv: more)")


def add_json(p: argparse.ArgumentParser, help: str = "print JSON") -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_quiet(p: argparse.ArgumentParser) -> None:
    """-q: no progress bar and no summary on stdout; errors still go to stderr, and what the command was
    asked to show (a log, a listing, --json) is still printed. Every command takes it (dispatch adds it)."""
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar and no summary: only errors, and what was asked for (a log, a list, --json)")


def add_merge_options(p: argparse.ArgumentParser) -> None:
    """--strategy and --all, as `merge` and `pull` take them."""
    p.add_argument("--strategy", default=None, metavar="STRATEGY",
                   help="resolve conflicts: ours, theirs, average, weighted:ALPHA or task-arithmetic[:LAMBDA] "
                        "(default: none — a conflict stops the merge)")
    p.add_argument("--all", dest="everything", action="store_true",
                   help="apply --strategy to every parameter, not only the conflicts (e.g. --strategy average --all "
                        "averages the two models)")


def add_threads(p: argparse.ArgumentParser, after_the_command: bool = False) -> None:
    """--threads N: the pool's threads (mdiff.threads) for this run. The program's parser shows it; a
    command's parser takes it too but leaves it out of its help (one line less on every command's) and
    sets nothing when it is not given, not to undo `mdiff --threads N COMMAND`."""
    if after_the_command:
        p.add_argument("--threads", type=threads_of, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    else:
        p.add_argument("--threads", type=threads_of, default=None, metavar="N",
                       help=f"threads for deflating, inflating and hashing (default: ${ENVIRONMENT}, else one "
                            "per core); 1: all work, syncs too, on one thread; also after the command")


def threads_of(text: str) -> int:
    """--threads's value: a whole number ≥ 1, else a usage error saying what to write."""
    try:
        return parse_threads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---------------------------------------------------------------- the repository
def add_repository(p: argparse.ArgumentParser, help: str = "the repository (default: the one containing .)") -> None:
    p.add_argument("-C", "--repo", default=".", metavar="DIR", help=help)


def add_repository_options(p: argparse.ArgumentParser, json_help: str = "print JSON") -> None:
    """What a command on a repository takes: which repository (-C), --json, and --no-isolation."""
    add_repository(p)
    add_json(p, json_help)
    p.add_argument("--no-isolation", dest="isolate", action="store_false",
                   help="parse commit files with libhdf5 in this process rather than in an isolated child "
                        "(a little faster; only for a repository whose every file you trust: SPEC §8.5)")


def repository_of(args: argparse.Namespace) -> Repository:
    """The repository that -C names (or contains the working folder), isolated unless --no-isolation."""
    from mdiff.repo.repository import Repository

    return Repository.find(args.repo, isolation="auto" if getattr(args, "isolate", True) else None)


def store_of(args: argparse.Namespace) -> Store:
    """The repository as the commands that only read its refs and commits' metadata see it (log, branch
    and tag lists, reflog): its folder (repo/store.py), without Repository's verbs, whose modules load
    numpy and libhdf5 — a log of commits seen before loads neither (repo/objects.py)."""
    from mdiff.repo.store import Store

    store = Store(Store.locate(args.repo), isolation="auto" if getattr(args, "isolate", True) else None)
    store.check_format()
    return store


# ---------------------------------------------------------------- a commit's metadata
def add_author(p: argparse.ArgumentParser, made: str | None = "commit") -> None:
    """--author; ``made`` names what the author made, or None to refer to `commit`'s help."""
    help = (f"who made the {made} (default: {_AUTHOR_DEFAULT})" if made is not None
            else "as for commit (default: $MDIFF_AUTHOR…, else git config user.name/email)")
    p.add_argument("--author", default=None, metavar='"NAME <EMAIL>"', help=help)


def add_date(p: argparse.ArgumentParser, example: bool = False) -> None:
    e_g = ", e.g. 2026-01-31T12:00:00Z " if example else " "
    p.add_argument("--date", default=None, help=f"RFC 3339 UTC date{e_g}(default: $SOURCE_DATE_EPOCH, else now)")


def add_meta(p: argparse.ArgumentParser) -> None:
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="free key-value (repeatable)")


def add_commit_metadata(p: argparse.ArgumentParser) -> None:
    """What a command that makes a commit from scratch takes: a required -m, --author, --date, --meta, -q."""
    p.add_argument("-m", "--message", required=True, help="commit message")
    add_author(p)
    add_date(p)
    add_meta(p)
    add_quiet(p)


def parse_meta(pairs: list[str]) -> dict[str, str]:
    """--meta KEY=VALUE pairs as a dict (a later KEY wins)."""
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta takes KEY=VALUE, not {pair!r}")
        meta[key] = value
    return meta


# ---------------------------------------------------------------- remote stores
def add_storage_option(p: argparse.ArgumentParser, help: str = STORAGE_OPTION_HELP) -> None:
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help=help)


def storage_options_of(args: argparse.Namespace) -> dict:
    """The fsspec options of --storage-option and $MDIFF_STORAGE_OPTIONS, for this call only."""
    from mdiff.repo.remotes import storage_options

    return storage_options(args.storage_option)


# ---------------------------------------------------------------- reading and applying
def add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default=None,
                   help="onnx: the normative ONNX functions on onnxruntime; numpy: their proven-equal twin; "
                        "auto (default): the faster of the two for each update type")


def add_safety_options(p: argparse.ArgumentParser, isolate_default: bool) -> None:
    """The reader limits (--limit), and whether and how the work runs in an isolated child."""
    defaults = ", ".join(f"{f.name}={f.default}" for f in dataclasses.fields(Limits))
    p.add_argument("--limit", action="append", default=[], metavar="NAME=N",
                   help=f"a reader limit (SPEC.md §8.3), repeatable; defaults: {defaults}")
    if isolate_default:
        p.add_argument("--no-isolation", dest="isolate", action="store_false",
                       help="read in this process instead of a child with time and memory limits")
    else:
        p.add_argument("--isolate", action="store_true",
                       help="do the work in a child process with time and memory limits (a crash becomes MD515)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="for the isolated child, plus --timeout-per-mb for each megabyte of the files it reads")
    p.add_argument("--timeout-per-mb", type=float, default=DEFAULT_SECONDS_PER_MB, metavar="SECONDS",
                   help="the isolated child's time limit grows by this much per megabyte of the files it reads "
                        "(default %(default)g): a large valid file is not MD515 for its size")
    p.add_argument("--memory", type=int, default=DEFAULT_MEMORY_BYTES, metavar="BYTES", help="for the isolated child")


def limits_of(args: argparse.Namespace) -> Limits:
    values = {}
    known = {f.name for f in dataclasses.fields(Limits)}
    for pair in args.limit:
        name, sep, value = pair.partition("=")
        if not sep or name not in known or not value.isdigit():
            raise UsageError(f"--limit takes NAME=N with NAME one of {sorted(known)}, not {pair!r}")
        values[name] = int(value)
    return Limits(**values)


def isolation_of(args: argparse.Namespace) -> Isolation | None:
    if args.isolate and not isolation_supported():  # POSIX only: say so, and read in this process
        log.warning("reading in this process: isolating a reader needs fork() and resource limits (POSIX)")
        args.isolate = False
    return Isolation(args.timeout, args.memory, args.timeout_per_mb) if args.isolate else None


# ---------------------------------------------------------------- argument types
def parse_size(text: str) -> int:
    """Bytes from "5GB", "500MB", "10GiB", "123" (as save_pretrained's max_shard_size)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 5GB, 500MB, 2GiB)")
    unit = (m.group(2) or "B").upper()
    factor = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[unit]
    return int(float(m.group(1)) * factor)


def parse_duration(text: str) -> float:
    """Seconds from "now", "never", "90s", "30m", "12h", "14d", "2w" (a bare number: days)."""
    if text.strip().lower() == "now":
        return 0.0
    if text.strip().lower() == "never":
        return float("inf")
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. now, 30m, 12h, 14d, 2w, never)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "": 86400}[m.group(2).lower()]
