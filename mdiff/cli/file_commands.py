"""The commands on files: validate, dump, diff, apply and merge-file — .mdiff files and checkpoints, no
repository needed (diff also takes a repository's revisions)."""

from __future__ import annotations

import json
import os
import sys

import mdiff
from mdiff.cli.options import (
    add_author, add_date, add_engine, add_json, add_merge_options, add_meta, add_quiet, add_repository, add_safety_options, isolation_of,
    limits_of, parse_meta, parse_size,
)
from mdiff.cli.output import count, differ, dumps_indented, format_size, print_description, quiet
from mdiff.cli.progress import ProgressBar
from mdiff.cli.registry import Commands
from mdiff.errors import InvalidFileError
from mdiff.isolation import Isolation, IsolationFailure, input_bytes, isolation_supported, run_isolated

COMMANDS = Commands()

# Everything heavier (numpy, h5py, onnx) is imported by the command that runs, not to build --help.


# ---------------------------------------------------------------- validate
def validate_arguments(p) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="the .mdiff files to check")
    add_json(p, "one JSON object per file: {file, valid, findings}")
    p.add_argument("--structure-only", "--no-data", dest="no_data", action="store_true",
                   help="check the structure and metadata only, without reading the data (quicker; a file whose "
                        "data is corrupt can then pass: the output says so)")
    add_safety_options(p, isolate_default=True)


@COMMANDS.command("validate", help="check files against every rule of SPEC.md", arguments=validate_arguments,
                  description="Check .mdiff files against every rule of SPEC.md. One line per finding: "
                              "code, severity, HDF5 path, spec section, message.")
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
            if not quiet(args):
                print(f"{path}: {'valid' if valid else 'INVALID'}"
                      f" ({count(sum(f.is_error for f in findings), 'error')}, "
                      f"{count(sum(not f.is_error for f in findings), 'warning')}{scope})")
    if args.json:
        print(dumps_indented(reports if len(reports) != 1 else reports[0]))
    return status


# ---------------------------------------------------------------- dump
def dump_arguments(p) -> None:
    p.add_argument("file", metavar="FILE", help="the .mdiff file")
    add_json(p, "machine-readable output")
    p.add_argument("--values", type=int, default=0, metavar="N", help="show the first N values of each dataset")
    add_safety_options(p, isolate_default=True)


@COMMANDS.command("dump", help="show a diff's commit and what it changes", arguments=dump_arguments,
                  description="Show a .mdiff file's commit metadata, one line per parameter, and totals.")
def run_dump(args) -> int:
    from mdiff.describe import describe

    isolation = isolation_of(args)
    if isolation is not None:  # a stranger's file: a libhdf5 crash becomes MD515, not a dead shell command
        try:
            info = run_isolated(describe, args.file, args.values, limits_of(args), limits=isolation,
                                work_bytes=input_bytes(args.file))
        except IsolationFailure as failure:
            raise InvalidFileError("MD515", failure.reason, args.file) from None
    else:
        info = describe(args.file, values=args.values, limits=limits_of(args))
    return print_description(args, info)


# ---------------------------------------------------------------- diff
def diff_arguments(p) -> None:
    p.add_argument("old", metavar="OLD", help="a checkpoint (file or model folder), or a revision")
    p.add_argument("new", metavar="NEW", help="a checkpoint (file or model folder), or a revision")
    p.add_argument("-o", "--output", metavar="OUT.mdiff", help="the diff file to write (default: only list the changes); "
                                                               "an existing regular file is replaced, keeping its mode; "
                                                               "a device, FIFO, link or folder is refused")
    add_repository(p, "the repository, for revisions (default: the one containing .)")
    p.add_argument("-m", "--message", default="", help="the diff's commit message")
    add_author(p, made="diff")
    add_date(p, example=True)
    p.add_argument("--parent", action="append", default=[], metavar="COMMIT_ID", help="parent commit id (repeatable)")
    add_meta(p)
    p.add_argument("--compression", choices=["gzip", "none"], default="gzip",
                   help="gzip (shuffle + run-length deflate level 1, readable everywhere; the default) or none (fastest)")
    p.add_argument("--update-version", type=int, choices=[1, 2], default=2,
                   help="version of dense and sparse updates: 2 (integer deltas, smaller; format 1.3, the default) "
                        "or 1 (XOR deltas: for readers of format 1.2 and older)")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when there are differences, 0 when none (like git)")
    add_json(p, "print a JSON summary")
    add_quiet(p)


def _looks_like_a_path(text: str) -> bool:
    from mdiff.checkpoints import format_of

    return os.sep in text or "/" in text or text.endswith(".index.json") or format_of(text) is not None


@COMMANDS.command("diff", help="the diff between two checkpoints, commits, or one of each", arguments=diff_arguments,
                  description="Write OLD → NEW as one .mdiff file (-o), or list what differs. OLD and NEW are "
                              "checkpoints — model folders (their config, tokenizer and other files are diffed "
                              "too) or files (.safetensors, .npz, .pt/.pth/.bin, .onnx) — or, inside a "
                              "repository, revisions (a branch, a commit id, HEAD~2, ...): `mdiff diff HEAD "
                              "model/` shows what a folder changes against HEAD. Unchanged parameters are "
                              "omitted; each changed one is stored exactly (sparse or dense integer deltas, "
                              "whichever is smaller; replace for new shapes; --update-version 1 for XOR).")
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
                        date=args.date or default_date(), parents=tuple(args.parent), meta=parse_meta(args.meta))
        output = args.output or os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "diff.mdiff")
        with ProgressBar.of(args, "diff") as bar:
            summary = write_diff(old, new, output, commit, args.compression, progress=bar,
                                 update_version=args.update_version)
        size = os.path.getsize(output)
    counts = {t: sum(1 for v in summary.parameters.values() if v == t) for t in sorted(set(summary.parameters.values()))}
    if args.json:
        print(json.dumps({"output": args.output, "bytes": size if args.output else None, "parameters": summary.parameters,
                          "counts": counts, "files": summary.files, "layout_changed": summary.layout_changed}))
    elif quiet(args):  # as git diff --quiet: the exit status (with --exit-code) says it
        pass
    elif args.output:
        listed = ", ".join(f"{n} {t}" for t, n in counts.items()) or "no changes"
        files = f"; {count(len(summary.files), 'file')}" if summary.files else ""
        print(f"wrote {args.output}: {count(len(summary.parameters), 'parameter')} changed ({listed}){files}, "
              f"{format_size(size)}")
    else:
        for name, kind in summary.parameters.items():
            print(f"  {kind:<9} {name}")
        for path, kind in summary.files.items():
            print(f"  {kind:<9} file {path}")
        if summary.layout_changed:
            print("  changed   the weights' shard layout")
        print(f"{differ(len(summary.parameters), len(summary.files))} between {args.old} and {args.new}")
    return 1 if args.exit_code and summary else 0


# ---------------------------------------------------------------- apply
def apply_arguments(p) -> None:
    p.add_argument("base", metavar="BASE", help="the checkpoint the diff was made from: a file or a model folder")
    p.add_argument("diff", metavar="DIFF", help="the .mdiff file")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="a checkpoint file (an existing regular file is replaced, keeping its mode; a device, FIFO, "
                        "link or folder is refused), or a new model folder (absent or empty)")
    p.add_argument("--max-shard-size", type=parse_size, default=None, metavar="SIZE",
                   help="for a model folder whose layout does not fit the result: the largest shard (default 50GB)")
    add_safety_options(p, isolate_default=False)
    p.add_argument("--no-isolation", dest="preflight", action="store_false",
                   help="skip reading DIFF's metadata in a child process first (by default a libhdf5 crash "
                        "on a crafted file is caught there and becomes MD515)")
    add_engine(p)
    add_json(p, "print a JSON summary")
    add_quiet(p)


@COMMANDS.command("apply", help="apply a diff to a checkpoint", arguments=apply_arguments,
                  description="Apply DIFF to BASE and write OUT: a checkpoint file, or a model folder when OUT "
                              "has no checkpoint extension (with BASE's files updated by DIFF's). Every update is "
                              "checked against BASE first; every exact result is verified by its sha256.")
def run_apply(args) -> int:
    with ProgressBar.of(args, "apply") as bar:
        parameters = apply_maybe_isolated(args, bar)
    if args.json:
        print(json.dumps({"output": args.output, "parameters": parameters}))
    elif not quiet(args):
        print(f"wrote {args.output}: {count(parameters, 'parameter')}, verified")
    return 0


def apply_maybe_isolated(args, bar) -> int:
    isolation = isolation_of(args)
    work = (args.base, args.diff, args.output, None if isolation else bar, limits_of(args), args.engine)
    if isolation is None:
        preflight = Isolation(args.timeout, args.memory, args.timeout_per_mb) if args.preflight and isolation_supported() else None
        return mdiff.apply_files(*work, isolation=preflight, max_shard_size=args.max_shard_size)
    try:
        return run_isolated(mdiff.apply_files, *work, None, args.max_shard_size, limits=isolation,
                            work_bytes=input_bytes(args.base, args.diff))
    except IsolationFailure as failure:
        raise InvalidFileError("MD515", failure.reason, args.diff) from None



# ---------------------------------------------------------------- merge-file
def merge_file_arguments(p) -> None:
    p.add_argument("ours", metavar="OURS", help="the current checkpoint (a file): what you have")
    p.add_argument("base", metavar="BASE", help="the checkpoint both were made from (their common ancestor); a file "
                                                "with no tensors when they have none")
    p.add_argument("theirs", metavar="THEIRS", help="the other checkpoint, to merge into OURS")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the merged checkpoint file (an existing regular file is replaced, keeping its mode); nothing "
                        "is written when conflicts are left")
    add_merge_options(p)
    add_json(p, "print a JSON summary; conflicts as findings {code: MD804, severity, path: the parameter, ...}")


@COMMANDS.command("merge-file", help="merge two checkpoints three-way against their common ancestor",
                  arguments=merge_file_arguments,
                  description="Merge THEIRS into OURS parameter by parameter, three-way against BASE (SPEC.md §13.7, "
                              "git merge-file's order), without a repository: a parameter changed on one side only "
                              "takes that side's bits exactly; one changed differently on both sides is a conflict, "
                              "and a conflict stops the merge (exit 1, OUT not written) unless --strategy resolves "
                              "it: ours, theirs, average, weighted:ALPHA (ALPHA·ours + (1−ALPHA)·theirs), "
                              "task-arithmetic[:λ] (base + λ·((ours−base) + (theirs−base))), computed in float64 and "
                              "rounded once to the dtype. --all applies the strategy to every parameter. Inputs and "
                              "OUT are checkpoint files (.safetensors, .npz, .pt, ...); exit 2 when an input cannot "
                              "be read.")
def run_merge_file(args) -> int:
    import contextlib

    from mdiff.checkpoints import is_folder_input, open_checkpoint, write_checkpoint
    from mdiff.cli.merge_report import merge_file_data, merge_file_lines
    from mdiff.cli.usage import UsageError
    from mdiff.errors import CheckpointError, RepositoryError
    from mdiff.repo.merge import CheckpointInput, MergedState, Strategy

    if args.everything and args.strategy is None:
        raise UsageError("--all applies a strategy to every parameter: give one, e.g. --strategy average --all")
    try:
        strategy = None if args.strategy is None else Strategy.parse(args.strategy)
    except RepositoryError as exc:
        raise UsageError(exc.message) from None
    for path in (args.ours, args.base, args.theirs):
        if is_folder_input(path):
            raise UsageError(f"{path}: merge-file merges checkpoint files; model folders (with their files and "
                             "layout) merge in a repository: `mdiff merge`")
    try:
        with contextlib.ExitStack() as stack:
            ours, base, theirs = (CheckpointInput(stack.enter_context(open_checkpoint(path)))
                                  for path in (args.ours, args.base, args.theirs))
            merged = MergedState(ours, theirs, base, strategy, args.everything)
            conflicts = merged.conflicts()
            names = [] if conflicts else list(merged)
            if not conflicts:
                write_checkpoint(args.output, [(name, *merged.spec(name)) for name in names], merged.__getitem__)
            tally = merged.tally()
    except CheckpointError as exc:
        if exc.code == "MD703":  # the merged state cannot be written to OUT's format: a refusal
            raise
        return _unreadable(args, exc)  # an input that is not a checkpoint this reads: exit 2, as for a missing file
    data = merge_file_data(args.output, conflicts, tally, len(names))
    lines = merge_file_lines(args.output, conflicts, tally, len(names), args.strategy, args.everything)
    if args.json:
        print(json.dumps(data))
    else:
        print("\n".join(lines), file=sys.stderr if conflicts else sys.stdout)
    return 1 if conflicts else 0


def _unreadable(args, exc) -> int:
    """An input that cannot be read: exit 2 (conformance/README.md's merge-file), reported as every error is."""
    if args.json:
        print(json.dumps({"error": {"code": exc.code, "message": exc.message, "path": exc.path,
                                    "section": exc.rule.section}}))
    else:
        print(f"mdiff: error {exc.code}: {exc.message}" + (f" [{exc.path}]" if exc.path else ""), file=sys.stderr)
    return 2
