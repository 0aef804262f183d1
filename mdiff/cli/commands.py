"""One function per command: add its arguments, then run it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys

import mdiff
from mdiff.cli.progress import ProgressBar
from mdiff.cli.usage import UsageError
from mdiff.engines import ENGINES
from mdiff.errors import InvalidFileError
from mdiff.format.limits import Limits
from mdiff.isolation import (
    DEFAULT_MEMORY_BYTES, DEFAULT_TIMEOUT_S, Isolation, IsolationFailure, isolation_supported, run_isolated,
)

log = logging.getLogger(__name__)

# Everything heavier (numpy, h5py, onnx) is imported by the command that runs, not to build --help.


# ---------------------------------------------------------------- reading untrusted files safely
def add_safety_options(p, isolate_default: bool) -> None:
    defaults = ", ".join(f"{f.name}={f.default}" for f in dataclasses.fields(Limits))
    p.add_argument("--limit", action="append", default=[], metavar="NAME=N",
                   help=f"a reader limit (SPEC.md §8.3), repeatable; defaults: {defaults}")
    if isolate_default:
        p.add_argument("--no-isolation", dest="isolate", action="store_false",
                       help="read in this process instead of a child with time and memory limits")
    else:
        p.add_argument("--isolate", action="store_true",
                       help="do the work in a child process with time and memory limits (a crash becomes MD515)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS", help="for the isolated child")
    p.add_argument("--memory", type=int, default=DEFAULT_MEMORY_BYTES, metavar="BYTES", help="for the isolated child")


def limits_of(args) -> Limits:
    values = {}
    known = {f.name for f in dataclasses.fields(Limits)}
    for pair in args.limit:
        name, sep, value = pair.partition("=")
        if not sep or name not in known or not value.isdigit():
            raise UsageError(f"--limit takes NAME=N with NAME one of {sorted(known)}, not {pair!r}")
        values[name] = int(value)
    return Limits(**values)


def isolation_of(args) -> Isolation | None:
    if args.isolate and not isolation_supported():  # POSIX only: say so, and read in this process
        log.warning("reading in this process: isolating a reader needs fork() and resource limits (POSIX)")
        args.isolate = False
    return Isolation(args.timeout, args.memory) if args.isolate else None


# ---------------------------------------------------------------- validate
def add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check files against every rule of SPEC.md",
                       description="Check .mdiff files against every rule of SPEC.md. One line per finding: "
                                   "code, severity, HDF5 path, spec section, message.")
    p.add_argument("files", nargs="+", metavar="FILE", help="the .mdiff files to check")
    p.add_argument("--json", action="store_true", help="one JSON object per file: {file, valid, findings}")
    p.add_argument("--structure-only", "--no-data", dest="no_data", action="store_true",
                   help="check the structure and metadata only, without reading the data (quicker; a file whose "
                        "data is corrupt can then pass: the output says so)")
    add_safety_options(p, isolate_default=True)
    p.set_defaults(run=run_validate)


def run_validate(args) -> int:
    status = 0
    reports = []
    for path in args.files:
        findings = mdiff.validate(path, limits_of(args), not args.no_data, isolation_of(args))
        valid = not any(f.is_error for f in findings)
        if any(f.code == "MD100" for f in findings):
            status = 2
        elif not valid:
            status = max(status, 1)
        if args.json:
            reports.append({"file": path, "valid": valid, "data_checked": not args.no_data,
                            "findings": [f.to_json() for f in findings]})
        else:
            for f in findings:
                print(f"{path}: {f.code} {f.severity} {f.path} §{f.section} {f.message}")
            scope = "; structure only, the data was not read" if args.no_data else ""
            print(f"{path}: {'valid' if valid else 'INVALID'}"
                  f" ({sum(f.is_error for f in findings)} errors, {sum(not f.is_error for f in findings)} warnings{scope})")
    if args.json:
        print(json.dumps(reports if len(reports) != 1 else reports[0], indent=1))
    return status


# ---------------------------------------------------------------- dump
def add_dump(sub) -> None:
    p = sub.add_parser("dump", help="show a diff's commit and what it changes",
                       description="Show a .mdiff file's commit metadata, one line per parameter, and totals.")
    p.add_argument("file", metavar="FILE", help="the .mdiff file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--values", type=int, default=0, metavar="N", help="show the first N values of each dataset")
    add_safety_options(p, isolate_default=True)
    p.set_defaults(run=run_dump)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def run_dump(args) -> int:
    from mdiff.describe import describe

    isolation = isolation_of(args)
    if isolation is not None:  # a stranger's file: a libhdf5 crash becomes MD515, not a dead shell command
        try:
            info = run_isolated(describe, args.file, args.values, limits_of(args), limits=isolation)
        except IsolationFailure as failure:
            raise InvalidFileError("MD515", failure.reason, args.file) from None
    else:
        info = describe(args.file, values=args.values, limits=limits_of(args))
    return print_description(args, info)


def print_description(args, info: dict) -> int:
    """What describe() says of a file, as `dump` (and a repository's `show`) prints it."""
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    c = info["commit"]
    print(f"file     {info['file']}  (mdiff {info['format_version']}, {_size(info['totals']['file_bytes'])})")
    print(f"author   {c['author']['name']}" + (f" <{c['author']['email']}>" if c['author']['email'] else ""))
    print(f"date     {c['date']}")
    print(f"parents  {' '.join(c['parents']) or '(root commit)'}")
    print(f"writer   {c['writer']['name']} {c['writer']['version']}")
    for k, v in sorted(c["meta"].items()):
        print(f"meta     {k}={v}")
    print()
    for line in c["message"].splitlines() or ["(no message)"]:
        print(f"    {line}")
    print()
    rows = [("NAME", "TYPE", "SHAPE", "DTYPE", "STORED", "DETAILS")]
    for p in info["parameters"]:
        details = []
        if "nnz" in p:
            details.append(f"nnz={p['nnz']} density={p['density']:.4g}")
        if "rank" in p:
            details.append(f"rank={p['rank']} scale={p['scale']:g}")
        if "rel_change" in p:
            details.append(f"rel_change={p['rel_change']:.3g}")
        if p.get("lossy"):
            details.append("LOSSY")
        rows.append((p["name"], p["type"], "x".join(map(str, p["shape"])) or "()", p["dtype"], _size(p["stored_bytes"]), " ".join(details)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row, r in enumerate(rows):
        print("  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5])
        if row and args.values:
            for key, vals in info["parameters"][row - 1]["values"].items():
                print(f"    {key}: {vals}")
    if info["files"]:
        print(f"\nfiles beside the weights ({len(info['files'])}):")
        for f in info["files"]:
            size = f"{_size(f['size'])}, {_size(f['stored_bytes'])} stored" if f["type"] == "replace" else "removed"
            print(f"  {f['type']:<8} {f['path']}  ({size})")
    layout = info["layout"]
    if layout is not None:
        shards = "removed" if layout["type"] == "delete" else (
            f"{len(layout['files'])} file{'s' if len(layout['files']) != 1 else ''}"
            + (f" with index {layout['index']}" if layout["index"] else f": {', '.join(layout['files'])}"))
        print(f"\nweights layout: {shards}")
    t = info["totals"]
    by_type = ", ".join(f"{n} {k}" for k, n in t["by_type"].items())
    print(f"\n{t['parameters']} parameters ({by_type or 'none'}); {_size(t['stored_bytes'])} stored, "
          f"{_size(t['data_bytes'])} uncompressed")
    for w in info["warnings"]:
        print(f"warning {w['code']} {w['path']}: {w['message']}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- diff
def _parse_meta(pairs: list[str]) -> dict[str, str]:
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta takes KEY=VALUE, not {pair!r}")
        meta[key] = value
    return meta


def add_diff(sub) -> None:
    p = sub.add_parser("diff", help="the diff between two checkpoints, commits, or one of each",
                       description="Write OLD → NEW as one .mdiff file (-o), or list what differs. OLD and NEW are "
                                   "checkpoints — model folders (their config, tokenizer and other files are diffed "
                                   "too) or files (.safetensors, .npz, .pt/.pth/.bin, .onnx) — or, inside a "
                                   "repository, revisions (a branch, a commit id, HEAD~2, ...): `mdiff diff HEAD "
                                   "model/` shows what a folder changes against HEAD. Unchanged parameters are "
                                   "omitted; each changed one is stored exactly (sparse or dense integer deltas, "
                                   "whichever is smaller; replace for new shapes; --update-version 1 for XOR).")
    p.add_argument("old", metavar="OLD", help="a checkpoint (file or model folder), or a revision")
    p.add_argument("new", metavar="NEW", help="a checkpoint (file or model folder), or a revision")
    p.add_argument("-o", "--output", metavar="OUT.mdiff", help="the diff file to write (default: only list the changes); "
                                                               "an existing regular file is replaced, keeping its mode; "
                                                               "a device, FIFO, link or folder is refused")
    p.add_argument("-C", "--repo", default=".", metavar="DIR", help="the repository, for revisions (default: the one containing .)")
    p.add_argument("-m", "--message", default="", help="the diff's commit message")
    p.add_argument("--author", default=None, metavar='"NAME <EMAIL>"',
                   help="who made the diff (default: $MDIFF_AUTHOR, else $MDIFF_AUTHOR_NAME and $MDIFF_AUTHOR_EMAIL, "
                        "else git config user.name and user.email)")
    p.add_argument("--date", default=None, help="RFC 3339 UTC date, e.g. 2026-01-31T12:00:00Z "
                                                 "(default: $SOURCE_DATE_EPOCH, else now)")
    p.add_argument("--parent", action="append", default=[], metavar="COMMIT_ID", help="parent commit id (repeatable)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="free key-value (repeatable)")
    p.add_argument("--compression", choices=["gzip", "none"], default="gzip",
                   help="gzip (shuffle + run-length deflate level 1, readable everywhere; the default) or none (fastest)")
    p.add_argument("--update-version", type=int, choices=[1, 2], default=2,
                   help="version of dense and sparse updates: 2 (integer deltas, smaller; format 1.3, the default) "
                        "or 1 (XOR deltas: for readers of format 1.2 and older)")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when there are differences, 0 when none (like git)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run_diff)


def _looks_like_a_path(text: str) -> bool:
    from mdiff.checkpoints import format_of

    return os.sep in text or "/" in text or text.endswith(".index.json") or format_of(text) is not None


def run_diff(args) -> int:
    import contextlib
    import tempfile

    from mdiff.checkpoints import open_checkpoint
    from mdiff.diffing import write_diff
    from mdiff.format.commit import Commit, default_date, resolve_author

    with contextlib.ExitStack() as stack:
        repo = None

        def operand(text: str):
            nonlocal repo
            if os.path.exists(text):
                return stack.enter_context(open_checkpoint(text))
            if _looks_like_a_path(text):  # a mistyped file, not a revision
                raise FileNotFoundError(2, "no such checkpoint file or model folder", text)
            from mdiff.repo.history import resolve
            from mdiff.repo.repository import Repository

            repo = repo or Repository.find(args.repo)
            return stack.enter_context(repo.open_state(resolve(repo, text)))

        old, new = operand(args.old), operand(args.new)
        commit = Commit(message=args.message or f"diff {args.old}..{args.new}", author=resolve_author(args.author),
                        date=args.date or default_date(), parents=tuple(args.parent), meta=_parse_meta(args.meta))
        output = args.output or os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "diff.mdiff")
        bar = ProgressBar("diff", enabled=False if args.quiet else None)
        try:
            summary = write_diff(old, new, output, commit, args.compression, progress=bar,
                                 update_version=args.update_version)
        finally:
            bar.close()
        size = os.path.getsize(output)
    counts = {t: sum(1 for v in summary.parameters.values() if v == t) for t in sorted(set(summary.parameters.values()))}
    if args.json:
        print(json.dumps({"output": args.output, "bytes": size if args.output else None, "parameters": summary.parameters,
                          "counts": counts, "files": summary.files, "layout_changed": summary.layout_changed}))
    elif args.output:
        listed = ", ".join(f"{n} {t}" for t, n in counts.items()) or "no changes"
        files = f"; {len(summary.files)} files" if summary.files else ""
        print(f"wrote {args.output}: {len(summary.parameters)} parameters changed ({listed}){files}, {_size(size)}")
    else:
        for name, kind in summary.parameters.items():
            print(f"  {kind:<9} {name}")
        for path, kind in summary.files.items():
            print(f"  {kind:<9} file {path}")
        if summary.layout_changed:
            print("  changed   the weights' shard layout")
        print(f"{len(summary.parameters)} parameters{f' and {len(summary.files)} files' if summary.files else ''} "
              f"differ between {args.old} and {args.new}")
    return 1 if args.exit_code and summary else 0


# ---------------------------------------------------------------- apply
def add_apply(sub) -> None:
    p = sub.add_parser("apply", help="apply a diff to a checkpoint",
                       description="Apply DIFF to BASE and write OUT: a checkpoint file, or a model folder when OUT "
                                   "has no checkpoint extension (with BASE's files updated by DIFF's). Every update is "
                                   "checked against BASE first; every exact result is verified by its sha256.")
    p.add_argument("base", metavar="BASE", help="the checkpoint the diff was made from: a file or a model folder")
    p.add_argument("diff", metavar="DIFF", help="the .mdiff file")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="a checkpoint file (an existing regular file is replaced, keeping its mode; a device, FIFO, "
                        "link or folder is refused), or a new model folder (absent or empty)")
    p.add_argument("--max-shard-size", type=_size_argument, default=None, metavar="SIZE",
                   help="for a model folder whose layout does not fit the result: the largest shard (default 50GB)")
    add_safety_options(p, isolate_default=False)
    p.add_argument("--no-isolation", dest="preflight", action="store_false",
                   help="skip reading DIFF's metadata in a child process first (by default a libhdf5 crash "
                        "on a crafted file is caught there and becomes MD515)")
    p.add_argument("--engine", choices=ENGINES, default=None,
                   help="onnx: the normative ONNX functions on onnxruntime; numpy: their proven-equal twin; "
                        "auto (default): the faster of the two for each update type")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run_apply)


def run_apply(args) -> int:
    bar = ProgressBar("apply", enabled=False if args.quiet else None)
    try:
        count = apply_maybe_isolated(args, bar)
    finally:
        bar.close()
    if args.json:
        print(json.dumps({"output": args.output, "parameters": count}))
    else:
        print(f"wrote {args.output}: {count} parameters, verified")
    return 0


def _size_argument(text: str) -> int:
    from mdiff.cli.repo_commands import parse_size

    return parse_size(text)


def apply_maybe_isolated(args, bar) -> int:
    isolation = isolation_of(args)
    work = (args.base, args.diff, args.output, None if isolation else bar, limits_of(args), args.engine)
    if isolation is None:
        preflight = Isolation(args.timeout, args.memory) if args.preflight and isolation_supported() else None
        return mdiff.apply_files(*work, isolation=preflight, max_shard_size=args.max_shard_size)
    try:
        return run_isolated(mdiff.apply_files, *work, None, args.max_shard_size, limits=isolation)
    except IsolationFailure as failure:
        raise InvalidFileError("MD515", failure.reason, args.diff) from None


REGISTER = [add_validate, add_dump, add_diff, add_apply]
