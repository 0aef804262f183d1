"""Repository commands (SPEC.md §13): init, commit, log, show, checkout, status, branch, switch,
merge, squash, snapshot, gc, fsck, import-peft, tag, reset, reflog. Each is a thin layer over mdiff.repo."""

from __future__ import annotations

import argparse
import json

from typing import TYPE_CHECKING

from mdiff.cli.progress import ProgressBar
from mdiff.cli.usage import UsageError
from mdiff.errors import InvalidFileError, RepositoryError

if TYPE_CHECKING:
    from mdiff.repo.repository import Repository


def _repo(args) -> Repository:
    from mdiff.repo.repository import Repository

    return Repository.find(args.repo, isolation="auto" if getattr(args, "isolate", True) else None)


def _common(p, json_help: str = "print JSON") -> None:
    p.add_argument("-C", "--repo", default=".", metavar="DIR", help="the repository (default: the one containing .)")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--no-isolation", dest="isolate", action="store_false",
                   help="parse commit files with libhdf5 in this process rather than in an isolated child "
                        "(a little faster; only for a repository whose every file you trust: SPEC §8.5)")


def _commit_metadata_options(p) -> None:
    p.add_argument("-m", "--message", required=True, help="commit message")
    p.add_argument("--author", default=None, metavar='"NAME <EMAIL>"',
                   help="who made the commit (default: $MDIFF_AUTHOR, else $MDIFF_AUTHOR_NAME and $MDIFF_AUTHOR_EMAIL, "
                        "else git config user.name and user.email)")
    p.add_argument("--date", help="RFC 3339 UTC date (default: $SOURCE_DATE_EPOCH, else now)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="free key-value (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _meta(pairs):
    from mdiff.cli.commands import _parse_meta

    return _parse_meta(pairs)


def _print(args, data, text: str) -> None:
    print(json.dumps(data) if args.json else text)


# ---------------------------------------------------------------- init
def add_init(sub) -> None:
    p = sub.add_parser("init", help="create a repository", description="Create an mdiff repository (a .mdiff folder).")
    p.add_argument("directory", nargs="?", default=".", metavar="DIR", help="the project folder to hold .mdiff/ (default: .)")
    p.add_argument("-b", "--branch", default="main", help="the first branch (default: main)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run_init)


def run_init(args) -> int:
    from mdiff.repo.repository import Repository

    repo = Repository.init(args.directory, args.branch)
    _print(args, {"repository": str(repo.dir)}, f"initialised an empty mdiff repository in {repo.dir} (branch {args.branch})")
    return 0


# ---------------------------------------------------------------- commit
CHECKPOINT_HELP = ("a model folder (save_pretrained's: model.safetensors or its shards and index, or pytorch_model*.bin; "
                   "the config, tokenizer and other files beside the weights are versioned too), its *.index.json, or "
                   "a file: .safetensors, .npz, .pt/.pth/.bin, .onnx")


def _exclude_option(p) -> None:
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave files of a model folder that match GLOB out (repeatable; the training state Trainer "
                        "saves — optimizer.pt, scheduler.pt, rng_state*.pth, … — is left out always)")


def add_commit(sub) -> None:
    p = sub.add_parser("commit", help="commit a checkpoint or model folder on the current branch",
                       description="Diff CHECKPOINT against HEAD's state and record the changes as a new commit. "
                                   "Unchanged parameters are omitted; changed ones are stored exactly (sparse or "
                                   "dense integer deltas, whichever is smaller), unless given explicitly with --low-rank. "
                                   "Prints what it recorded, like git: parameters changed, added and deleted, and "
                                   "the bytes stored for the model's weights.")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help=CHECKPOINT_HELP)
    _commit_metadata_options(p)
    p.add_argument("--allow-empty", action="store_true", help="commit even when nothing changed (default: exit 1)")
    p.add_argument("--allow-deletions", action="store_true",
                   help="commit a state that lacks half or more of HEAD's parameters (refused by default, MD806: "
                        "it is usually one shard of a sharded model)")
    _exclude_option(p)
    p.add_argument("--low-rank", metavar="FACTORS.safetensors",
                   help="store these parameters as low_rank updates: tensors 'A:<name>' (m×r), 'B:<name>' (r×n) "
                        "and optionally 'scale:<name>' (0-d); mdiff never guesses a rank")
    p.add_argument("--sparse-mask", metavar="MASK.safetensors",
                   help="store these parameters as sparse updates of the True elements of bool tensors '<name>'; "
                        "changes outside a mask are dropped and the update is marked lossy")
    p.add_argument("--no-wait", action="store_true", help="fail at once if another process is committing")
    _common(p)
    p.set_defaults(run=run_commit)


def run_commit(args) -> int:
    from mdiff.repo.explicit_updates import low_rank_updates, sparse_masks

    repo = _repo(args)
    explicit = low_rank_updates(args.low_rank, args.checkpoint) if args.low_rank else {}
    masks = sparse_masks(args.sparse_mask) if args.sparse_mask else {}
    bar = ProgressBar("commit", enabled=False if args.quiet else None)
    try:
        summary = repo.make_commit(args.checkpoint, args.message, args.author, args.date, _meta(args.meta), explicit,
                                   progress=bar, wait=not args.no_wait, masks=masks, allow_empty=args.allow_empty,
                                   allow_deletions=args.allow_deletions, exclude=args.exclude)
    finally:
        bar.close()
    if summary is None:
        _print(args, {"commit": None, "reason": "nothing changed"},
               f"nothing to commit: {args.checkpoint} holds HEAD's state (--allow-empty commits anyway)")
        return 1
    data = {"commit": summary.commit_id, "branch": summary.branch, "changed": summary.changed, "added": summary.added,
            "deleted": summary.deleted, "files": summary.files, "layout_changed": summary.layout_changed,
            "stored_bytes": summary.stored_bytes, "weights_bytes": summary.weights_bytes}
    first_line = args.message.splitlines()[0] if args.message else ""
    _print(args, data, f"[{summary.branch or 'detached'} {summary.commit_id[:12]}] {first_line}\n {summary.line()}")
    return 0


# ---------------------------------------------------------------- log / show
def add_log(sub) -> None:
    p = sub.add_parser("log", help="show the history graph",
                       description="Show the commits reachable from REV (default HEAD), newest first, with merges drawn as a graph.")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="where to start (default HEAD)")
    p.add_argument("--oneline", action="store_true", help="one line per commit")
    p.add_argument("--all", action="store_true", help="every branch and tag, not only REV")
    p.add_argument("-n", "--max-count", type=int, default=None, metavar="N", help="show at most N commits")
    p.add_argument("--stat", action="store_true",
                   help="under each commit, what it changes: parameters by update type, with the share of values "
                        "changed, and files")
    _common(p, "one JSON object per commit (id, parents, author, date, message, meta)")
    p.set_defaults(run=run_log)


def _tracking(repo) -> dict[str, str]:
    """The remote-tracking branches, "<remote>/<branch>" → commit id (SPEC.md §13.8)."""
    from mdiff.repo.remotes import all_tracking_refs

    return all_tracking_refs(repo)


def run_log(args) -> int:
    from mdiff.repo.history import graph_lines, resolve, topological  # on use: it brings h5py and numpy

    repo = _repo(args)
    targets = {name: target for name, target in repo.branches().items() if target is not None}
    targets.update(_tracking(repo))  # shown, and with --all walked, as git shows origin/main
    heads = sorted(set(targets.values())) if args.all else [resolve(repo, args.rev)]
    labels: dict[str, list[str]] = {}
    for name, target in targets.items():
        labels.setdefault(target, []).append(name)
    tags = {name: target for name, target in repo.tags().items() if target is not None}
    if args.all:
        heads = sorted(set(heads) | set(tags.values()))
    for name, target in tags.items():
        labels.setdefault(target, []).append(f"tag: {name}")
    head_branch, head_id = repo.head()
    shown = topological(repo, heads)[:args.max_count] if args.max_count is not None else None
    if args.json:
        for c in shown if shown is not None else topological(repo, heads):
            m = repo.metadata(c)
            entry = {"id": c, "branches": [b for b in labels.get(c, []) if not b.startswith("tag: ")],
                     "tags": [t.removeprefix("tag: ") for t in labels.get(c, []) if t.startswith("tag: ")], **m.to_json()}
            if args.stat:
                entry["stat"] = _commit_stat(repo, c)
            print(json.dumps(entry))
        return 0

    def describe(c: str) -> str:
        m = repo.metadata(c)
        refs = [("HEAD -> " + b if b == head_branch and c == head_id else b) for b in labels.get(c, [])]
        tag = f" ({', '.join(refs)})" if refs else ""
        first = m.message.splitlines()[0] if m.message else ""
        if args.oneline:
            return f"{c[:12]}{tag} {first}"
        lines = [f"commit {c}{tag}"]
        if len(m.parents) > 1:
            lines.append("Merge:  " + " ".join(p[:12] for p in m.parents))
        lines += [f"Author: {m.author.name}" + (f" <{m.author.email}>" if m.author.email else ""), f"Date:   {m.date}", ""]
        lines += ["    " + line for line in (m.message.splitlines() or [""])]
        if args.stat:
            lines += [""] + ["   " + line for line in _stat_lines(_commit_stat(repo, c))]
        return "\n".join(lines)

    lines = graph_lines(repo, heads, describe)
    if shown is not None:
        lines = _first_commits(lines, len(shown))
    for line in lines:
        head, _, rest = line.partition("  ")
        if "\n" in rest:  # the full form: continue the graph's lanes down the commit's lines
            first, *more = rest.split("\n")
            print(f"{head}  {first}")
            lanes = head.replace("*", "|")
            for extra in more + [""]:
                print(f"{lanes}  {extra}".rstrip())
        else:
            print(line)
    return 0


def _first_commits(lines: list[str], count: int) -> list[str]:
    """The graph's lines up to (not including) its ``count + 1``-th commit row."""
    seen = 0
    for i, line in enumerate(lines):
        if "*" in line.partition("  ")[0]:
            seen += 1
            if seen > count:
                return lines[:i]
    return lines


def _commit_stat(repo, commit_id: str) -> dict:
    """What a commit changes, from its verified file's metadata (no data is read)."""
    from mdiff.describe import describe

    with repo.commit_file(commit_id) as readable:
        info = describe(readable)
    return {"parameters": [{k: p[k] for k in ("name", "type", "stored_bytes", "density") if k in p} for p in info["parameters"]],
            "files": {f["path"]: f["type"] for f in info["files"]}, "stored_bytes": info["totals"]["file_bytes"]}


def _stat_lines(stat: dict) -> list[str]:
    from mdiff.cli.commands import _size

    rows = stat["parameters"]
    width = min(max((len(p["name"]) for p in rows), default=0), 60)
    lines = []
    for p in rows:
        share = f"{p['density']:.1%} changed" if "density" in p else ""
        name = p["name"] if len(p["name"]) <= width else "…" + p["name"][-(width - 1):]
        lines.append(f"{name:<{width}} | {p['type']:<8} {_size(p['stored_bytes']):>10}  {share}".rstrip())
    lines += [f"file {path} | {kind}" for path, kind in stat["files"].items()]
    types: dict[str, int] = {}
    for p in rows:
        types[p["type"]] = types.get(p["type"], 0) + 1
    by_type = ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
    files = f", {len(stat['files'])} files" if stat["files"] else ""
    lines.append(f"{len(rows)} parameters ({by_type or 'none'}){files}; {_size(stat['stored_bytes'])}")
    return lines


def add_show(sub) -> None:
    p = sub.add_parser("show", help="show a commit (like dump)", description="Show a commit's metadata and what it changes, as `mdiff dump` does.")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="the commit (default HEAD)")
    p.add_argument("--values", type=int, default=0, metavar="N", help="show the first N values of each dataset")
    _common(p)
    p.set_defaults(run=run_show)


def run_show(args) -> int:
    from mdiff.cli.commands import print_description
    from mdiff.describe import describe
    from mdiff.repo.history import resolve  # on use: it brings h5py and numpy

    repo = _repo(args)
    commit_id = resolve(repo, args.rev)
    with repo.commit_file(commit_id) as readable:  # the bytes shown are those that hash to the id (MD800)
        try:
            info = describe(readable, values=args.values, isolation=repo.isolation)
        except InvalidFileError as exc:
            raise RepositoryError("MD802", f"commit {commit_id[:12]} cannot be read: {exc.code}: {exc.message}") from None
    info["file"] = str(repo.commit_path(commit_id))
    if not args.json:
        print(f"commit {commit_id}")
    return print_description(args, info)


# ---------------------------------------------------------------- checkout / status
def parse_size(text: str) -> int:
    """Bytes from "5GB", "500MB", "10GiB", "123" (as save_pretrained's max_shard_size)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 5GB, 500MB, 2GiB)")
    unit = (m.group(2) or "B").upper()
    factor = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[unit]
    return int(float(m.group(1)) * factor)


def add_checkout(sub) -> None:
    p = sub.add_parser("checkout", help="write the state at a commit to a checkpoint or model folder",
                       description="Reconstruct the state at REV and write it to OUT: a model folder when OUT has no "
                                   "checkpoint extension (the committed shards, index, config and tokenizer files; "
                                   "transformers' from_pretrained loads it), else a file (.safetensors, .npz, .pt, or "
                                   ".onnx with --template BASE.onnx). Every exact update is verified by its sha256.")
    p.add_argument("rev", metavar="REV", help="a revision: HEAD, a branch, a commit id or prefix, with ~N or ^")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="a new (or empty) folder, or a checkpoint file (an existing regular file is replaced, "
                        "keeping its mode; a device, FIFO, link or folder is refused)")
    p.add_argument("--max-shard-size", type=parse_size, default=None, metavar="SIZE",
                   help="for a folder whose committed shard layout no longer fits: the largest shard, e.g. 5GB "
                        "(default 50GB, as save_pretrained)")
    p.add_argument("--template", metavar="BASE.onnx", help="for .onnx output: the model whose initializers are replaced")
    p.add_argument("--engine", choices=["auto", "onnx", "numpy"], default=None,
                   help="onnx: the normative ONNX functions on onnxruntime; numpy: their proven-equal twin; "
                        "auto (default): the faster of the two for each update type")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--remote", metavar="URL",
                   help="check out REV of the repository at URL without cloning it: only the commits of REV's "
                        "first-parent line move, each verified, into a temporary folder (SPEC.md §13.8)")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="with --remote: an fsspec option for its store (as for `mdiff fetch`); never stored")
    p.add_argument("--lazy", action="store_true",
                   help="with --remote: read the commits in place, by byte ranges — their metadata and the data "
                        "the state needs — instead of fetching each whole; every value is still verified by its "
                        "sha256, but commit ids are not (they vouch only for whole files: SPEC.md §13.9)")
    _common(p)
    p.set_defaults(run=run_checkout)


def run_checkout(args) -> int:
    import contextlib
    import tempfile

    from mdiff.repo.history import resolve  # on use: it brings h5py and numpy

    if args.lazy and not args.remote:
        raise UsageError("--lazy reads a remote in place: give it with --remote URL")
    bar = ProgressBar("checkout", enabled=False if args.quiet else None)
    moved: dict = {}
    with contextlib.ExitStack() as stack:
        stack.callback(bar.close)
        if args.lazy:
            from mdiff.repo.remote_repository import RemoteRepository
            from mdiff.repo.remotes import storage_options

            remote = RemoteRepository(args.remote, storage_options(args.storage_option))
            commit_id = remote.resolve(args.rev)
            written = remote.checkout(commit_id, args.output, template=args.template, progress=bar,
                                      engine=args.engine, max_shard_size=args.max_shard_size)
            moved = {"requests": remote.requests, "bytes_read": remote.bytes_read}
        elif args.remote:
            from mdiff.repo.remotes import storage_options
            from mdiff.repo.transfer import fetch_revision

            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="mdiff-remote-"))
            repo, commit_id = fetch_revision(args.remote, args.rev, cache, storage_options(args.storage_option), bar)
        else:
            repo = _repo(args)
            commit_id = resolve(repo, args.rev)
        if not args.lazy:
            written = repo.checkout(commit_id, args.output, template=args.template, progress=bar,
                                    engine=args.engine, max_shard_size=args.max_shard_size)
    what = f"{len(written)} files" if len(written) > 1 or written != [args.output] else ""
    how = (f"; read in place: {moved['bytes_read']:,} bytes in {moved['requests']} requests, every value verified, "
           "commit ids not" if moved else ", verified")
    _print(args, {"commit": commit_id, "output": args.output, "written": written, **moved},
           f"wrote {args.output}{f' ({what})' if what else ''}: the state at {commit_id[:12]}{how}")
    return 0


def add_status(sub) -> None:
    p = sub.add_parser("status", help="what a checkpoint or model folder changes against HEAD",
                       description="List the parameters and files CHECKPOINT adds, deletes or changes against HEAD's state.")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help=CHECKPOINT_HELP)
    _exclude_option(p)
    p.add_argument("--exit-code", action="store_true", help="exit 1 when CHECKPOINT differs from HEAD, 0 when not (like git)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(run=run_status)


def run_status(args) -> int:
    repo = _repo(args)
    branch, head = repo.head()
    bar = ProgressBar("status", enabled=False if args.quiet else None)
    try:
        changes = repo.status(args.checkpoint, exclude=args.exclude, progress=bar)
    finally:
        bar.close()
    if args.json:
        print(json.dumps({"branch": branch, "head": head, "changes": changes.tensors, "files": changes.files,
                          "layout_changed": changes.layout_changed}))
        return 1 if args.exit_code and changes else 0
    print(f"on branch {branch or '(detached)'} at {head[:12] if head else '(no commit yet)'}")
    for name, kind in changes.tensors.items():
        print(f"  {kind:<9} {name}")
    for path, kind in changes.files.items():
        print(f"  {kind:<9} file {path}")
    if changes.layout_changed:
        print("  changed   the weights' shard layout")
    if not changes:
        print("nothing changed")
    else:
        counts = [f"{len(changes.tensors)} parameters"] + ([f"{len(changes.files)} files"] if changes.files else [])
        print(f"{' and '.join(counts)} differ")
    return 1 if args.exit_code and changes else 0


# ---------------------------------------------------------------- branches
def add_branch(sub) -> None:
    p = sub.add_parser("branch", help="list, create, move or delete branches",
                       description="Without NAME, list branches; with NAME, create it at REV (default HEAD); with -f, "
                                   "create it or move it to REV wherever it was (the current branch too: mdiff has "
                                   "no working tree, so only the ref moves; its reflog keeps where it was).")
    p.add_argument("name", nargs="?", metavar="NAME", help="the branch to create (or, with -d, delete; with -f, move)")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="where the branch starts or moves to (default HEAD)")
    p.add_argument("-d", "--delete", action="store_true", help="delete NAME (its reflog stays: `mdiff reflog NAME`)")
    p.add_argument("-f", "--force", action="store_true", help="move NAME to REV even if it exists")
    p.add_argument("-a", "--all", action="store_true", help="list remote-tracking branches (REMOTE/BRANCH) too")
    _common(p)
    p.set_defaults(run=run_branch)


def run_branch(args) -> int:
    from mdiff.repo.history import resolve  # on use: it brings h5py and numpy

    repo = _repo(args)
    if args.name is None:
        current = repo.head()[0]
        branches = repo.branches()
        tracked = _tracking(repo) if args.all else {}
        if args.json:
            print(json.dumps({"current": current, "branches": branches, **({"remotes": tracked} if args.all else {})}))
            return 0
        for name, target in branches.items():
            print(f"{'*' if name == current else ' '} {name:<20} {target[:12] if target else '(no commit)'}")
        for name, target in tracked.items():
            print(f"  remotes/{name:<12} {target[:12]}")
        return 0
    if args.delete:
        with repo.lock():
            repo.delete_branch(args.name)
        _print(args, {"deleted": args.name}, f"deleted branch {args.name}")
        return 0
    if args.force:
        before, target = repo.force_branch(args.name, args.rev)
        _print(args, {"branch": args.name, "commit": target, "before": before},
               f"branch {args.name} {'moved from ' + before[:12] + ' to' if before else 'created at'} {target[:12]}")
        return 0
    repo.check_branch_name(args.name)
    target = resolve(repo, args.rev)
    with repo.lock():  # the check that it is new and the write, as one step
        repo.create_branch(args.name, target)
    _print(args, {"branch": args.name, "commit": target}, f"created branch {args.name} at {target[:12]}")
    return 0


def add_switch(sub) -> None:
    p = sub.add_parser("switch", help="make another branch current",
                       description="Make BRANCH the current branch (commits go there). With -c, create it first, at START (default HEAD).")
    p.add_argument("branch", metavar="BRANCH", help="the branch to commit on from now")
    p.add_argument("start", nargs="?", default=None, metavar="START", help="with -c: where the new branch starts (default HEAD)")
    p.add_argument("-c", "--create", action="store_true", help="create BRANCH first")
    _common(p)
    p.set_defaults(run=run_switch)


def run_switch(args) -> int:
    if args.start and not args.create:
        raise UsageError("START is for a new branch: mdiff switch -c BRANCH START")
    repo = _repo(args)
    repo.switch(args.branch, create=args.create, start=args.start)
    _print(args, {"branch": args.branch}, f"switched to {'a new ' if args.create else ''}branch {args.branch}")
    return 0


# ---------------------------------------------------------------- merge / squash / snapshot
def add_merge(sub) -> None:
    p = sub.add_parser("merge", help="merge a branch into the current one",
                       description="Merge REV into the current branch with a strategy (SPEC.md §13.7): average, "
                                   "weighted:ALPHA (ALPHA·ours + (1−ALPHA)·theirs), ours, theirs, task-arithmetic[:λ] "
                                   "(base + λ·((ours−base) + (theirs−base))). Conflicts are listed per parameter and "
                                   "nothing is committed.")
    p.add_argument("rev", metavar="REV", help="the branch or commit to merge into the current branch")
    p.add_argument("--strategy", default="average", metavar="STRATEGY",
                   help="average (the default), weighted:ALPHA, ours, theirs or task-arithmetic[:LAMBDA]")
    p.add_argument("-m", "--message", default=None, help="the commit message (default: Merge REV into BRANCH (STRATEGY))")
    p.add_argument("--author", default=None, metavar='"NAME <EMAIL>"',
                   help="as for commit (default: $MDIFF_AUTHOR…, else git config user.name/email)")
    p.add_argument("--date", help="RFC 3339 UTC date (default: $SOURCE_DATE_EPOCH, else now)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="free key-value (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-ff", dest="fast_forward", action="store_false",
                   help="make a merge commit even when the current branch is an ancestor of REV (default: fast-forward)")
    _common(p)
    p.set_defaults(run=run_merge)


def run_merge(args) -> int:
    from mdiff.repo.history import resolve  # on use: it brings h5py and numpy

    repo = _repo(args)
    bar = ProgressBar("merge", enabled=False if args.quiet else None)
    try:
        theirs = resolve(repo, args.rev)
        commit_id, conflicts = repo.merge(args.rev, args.strategy, args.message, args.author, args.date, _meta(args.meta), bar,
                                          fast_forward=args.fast_forward)
    finally:
        bar.close()
    if conflicts:
        if args.json:
            print(json.dumps({"error": {"code": "MD804", "conflicts": [{"parameter": n, "reason": r} for n, r in conflicts]}}))
        else:
            print(f"mdiff: error MD804: {len(conflicts)} conflicts; nothing was committed:")
            for name, reason in conflicts:
                print(f"  {name}: {reason}")
            print("  (use --strategy ours or theirs to take one side)")
        return 1
    assert commit_id is not None  # no conflicts: a commit was made, or the branch fast-forwarded
    if commit_id == theirs:  # a new merge commit never has the id of what it merges
        _print(args, {"commit": commit_id, "fast_forward": True}, f"fast-forwarded to {args.rev}: {commit_id[:12]}")
    else:
        _print(args, {"commit": commit_id, "fast_forward": False}, f"merged {args.rev}: {commit_id[:12]}")
    return 0


def add_squash(sub) -> None:
    p = sub.add_parser("squash", help="replace the commits after REV by one",
                       description="Replace the current branch's commits after REV by a single commit with the same state.")
    p.add_argument("rev", metavar="REV", help="the earlier commit of the current branch that the squashed commit follows")
    _commit_metadata_options(p)
    _common(p)
    p.set_defaults(run=run_squash)


def run_squash(args) -> int:
    repo = _repo(args)
    commit_id = repo.squash(args.rev, args.message, args.author, args.date, _meta(args.meta))
    _print(args, {"commit": commit_id}, f"squashed onto {args.rev}: {commit_id[:12]}")
    return 0


def add_snapshot(sub) -> None:
    p = sub.add_parser("snapshot", help="store (or drop) the full state at a commit for fast checkouts",
                       description="Store the full state at REV (compressed), so that checking out REV or its "
                                   "descendants reads it instead of replaying every update since the root — once the "
                                   "commits have shown that it holds their values (SPEC.md §13.5). `mdiff commit` "
                                   "writes one by itself when a checkout would apply eight times the model's size.")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV",
                   help="the commit (default HEAD); with --drop, also the full id of a commit no longer in the repository")
    p.add_argument("--drop", action="store_true", help="remove REV's snapshot instead (checkouts replay the commits)")
    _common(p)
    p.set_defaults(run=run_snapshot)


def run_snapshot(args) -> int:
    repo = _repo(args)
    if args.drop:
        commit_id, freed = repo.drop_snapshot(args.rev)
        _print(args, {"dropped": commit_id, "bytes_freed": freed},
               f"dropped the snapshot of {commit_id[:12]} ({freed} bytes freed)")
        return 0
    commit_id = repo.snapshot(args.rev)
    _print(args, {"snapshot": commit_id}, f"snapshot stored for {commit_id[:12]}")
    return 0


def add_gc(sub) -> None:
    p = sub.add_parser("gc", help="remove unreachable commits, temporary files and snapshots no checkout needs",
                       description="Remove what .mdiff/ holds that nothing needs (SPEC.md §13.6): commits that no "
                                   "branch, tag or other ref, HEAD, or reflog entry younger than --reflog-expire "
                                   "reaches, once their file is older than --prune (a commit a concurrent writer "
                                   "has just written, before a ref names it, stays); reflog entries older than "
                                   "--reflog-expire; the temporary files and folders that interrupted writers left "
                                   "(names starting with '.', and the tmpXXXXXXXX folders of earlier merges); and "
                                   "snapshots that are unusable, disagree with their commits (MD807) or belong to a "
                                   "commit not kept. A reachable commit is never removed, and no commit at all when a "
                                   "ref, reflog or commit on the way cannot be read. Waits for the writers' lock.")
    p.add_argument("-n", "--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument("--prune", type=parse_duration, default="14d", metavar="AGE",
                   help="remove an unreachable commit only if its file is older than AGE (default 14d, as git's "
                        "gc.pruneExpire; `now` for no grace): e.g. 30m, 12h, 14d, 2w, never")
    p.add_argument("--reflog-expire", type=parse_duration, default="30d", metavar="AGE",
                   help="reflog entries older than AGE are dropped and keep no commit (default 30d, as git's "
                        "gc.reflogExpireUnreachable); `now` drops them all, `never` keeps them")
    _common(p, "print JSON: removed (path, bytes, reason), kept, bytes_freed, dry_run, commits_removed, "
               "reflog_entries_expired")
    p.set_defaults(run=run_gc)


def run_gc(args) -> int:
    from mdiff.cli.commands import _size

    repo = _repo(args)
    report = repo.gc(dry_run=args.dry_run, prune=args.prune, reflog_expire=args.reflog_expire)

    def rows(items):
        return [{"path": str(item.path.relative_to(repo.dir)), "bytes": item.size, "reason": item.reason}
                for item in items]

    if args.json:
        print(json.dumps({"dry_run": report.dry_run, "removed": rows(report.removed), "kept": rows(report.kept),
                          "bytes_freed": report.bytes_freed, "commits_removed": report.commits,
                          "reflog_entries_expired": report.expired_entries}))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for item in report.removed:
        print(f"{verb} {item.path.relative_to(repo.dir)} ({_size(item.size)}): {item.reason}")
    for item in report.kept:
        print(f"kept {item.path.relative_to(repo.dir)}: {item.reason}")
    total = f"{_size(report.bytes_freed)} ({report.bytes_freed} bytes)"
    expired = f"; {report.expired_entries} reflog entries expired" if report.expired_entries else ""
    print(f"{len(report.removed)} entries ({len(report.commits)} commits), {total} "
          f"{'would be freed' if args.dry_run else 'freed'}{expired}")
    return 0


REGISTER = [add_init, add_commit, add_log, add_show, add_checkout, add_status, add_branch, add_switch, add_merge,
            add_squash, add_snapshot, add_gc]


def add_fsck(sub) -> None:
    p = sub.add_parser("fsck", help="check a repository's integrity",
                       description="Verify every commit file against its id (sha256), validate it, and check refs, HEAD "
                                   "and parents. Exit 0 when sound, 1 otherwise.")
    p.add_argument("--no-data", action="store_true", help="skip the rules that read datasets")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(run=run_fsck)


def run_fsck(args) -> int:
    repo = _repo(args)
    bar = ProgressBar("fsck", enabled=False if args.quiet else None)
    try:
        findings = repo.fsck(check_data=not args.no_data, progress=bar)
    finally:
        bar.close()
    errors = [f for f in findings if f.is_error]
    if args.json:
        print(json.dumps({"sound": not errors, "findings": [f.to_json() for f in findings]}))
    else:
        for f in findings:
            print(f"{f.code} {f.severity} {f.path}: {f.message}")
        print(f"{len(repo.commit_ids())} commits checked: " + ("sound" if not errors else f"{len(errors)} problems"))
    return 1 if errors else 0


REGISTER.append(add_fsck)


def add_import_peft(sub) -> None:
    p = sub.add_parser("import-peft", help="commit a PEFT LoRA adapter as low_rank updates",
                       description="Commit a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) as "
                                   "low_rank updates with the adapter's scale (lora_alpha/r, or /sqrt(r) with rsLoRA; "
                                   "rank_pattern and alpha_pattern honoured), its module names mapped to BASE's "
                                   "parameter names. On an empty branch BASE is committed first, as the root.")
    p.add_argument("adapter", metavar="ADAPTER_DIR", help="the adapter's folder (adapter_config.json, adapter_model.safetensors)")
    p.add_argument("--base", required=True, metavar="BASE_CHECKPOINT", help="the model the adapter was trained on")
    p.add_argument("-m", "--message", default=None, help="the commit message (default: import PEFT adapter NAME)")
    p.add_argument("--author", default=None, metavar='"NAME <EMAIL>"',
                   help="as for commit (default: $MDIFF_AUTHOR…, else git config user.name/email)")
    p.add_argument("--date", help="RFC 3339 UTC date (default: $SOURCE_DATE_EPOCH, else now)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="free key-value (repeatable)")
    _common(p)
    p.set_defaults(run=run_import_peft)


def run_import_peft(args) -> int:
    repo = _repo(args)
    made = repo.import_peft(args.adapter, args.base, args.message, args.author, args.date, _meta(args.meta))
    _print(args, {"commits": made}, "\n".join(f"committed {c[:12]}" for c in made))
    return 0


REGISTER.append(add_import_peft)


# ---------------------------------------------------------------- tags, reset, reflog
def add_tag(sub) -> None:
    p = sub.add_parser("tag", help="list, create or delete tags",
                       description="Without NAME, list tags; with NAME, tag REV (default HEAD): refs/tags/NAME names "
                                   "that commit, as a branch would, but no commit moves it. Tag names follow the rules "
                                   "of branch names (SPEC.md §13.1); a name that is a branch is refused.")
    p.add_argument("name", nargs="?", metavar="NAME", help="the tag to create (or, with -d, delete)")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="the commit to tag (default HEAD)")
    p.add_argument("-d", "--delete", action="store_true", help="delete NAME")
    p.add_argument("-f", "--force", action="store_true", help="move NAME to REV if it exists")
    _common(p)
    p.set_defaults(run=run_tag)


def run_tag(args) -> int:
    repo = _repo(args)
    if args.name is None:
        if args.delete or args.force:
            raise UsageError("-d and -f need a tag NAME")
        tags = repo.tags()
        if args.json:
            print(json.dumps({"tags": tags}))
        else:
            for name, target in tags.items():
                print(f"{name:<20} {target[:12] if target else ''}")
        return 0
    if args.delete:
        before = repo.untag(args.name)
        _print(args, {"deleted": args.name, "commit": before},
               f"deleted tag {args.name}" + (f" (was {before[:12]})" if before else ""))
        return 0
    before, target = repo.tag(args.name, args.rev, force=args.force)
    moved = f" (was {before[:12]})" if before and before != target else ""
    _print(args, {"tag": args.name, "commit": target, "before": before}, f"tagged {target[:12]} as {args.name}{moved}")
    return 0


REGISTER.append(add_tag)


def add_reset(sub) -> None:
    p = sub.add_parser("reset", help="move the current branch to another commit (undo)",
                       description="Move the current branch (or a detached HEAD) to REV: back, to undo commits, or "
                                   "anywhere. mdiff has no working tree, so this moves the branch only (like git reset "
                                   "--soft; there is no --hard to need): no commit is deleted, and the reflog records "
                                   "where the branch was (`mdiff reflog`), so a reset is undone by resetting to that "
                                   "commit. `mdiff gc` keeps commits a reflog entry names until the entry expires.")
    p.add_argument("rev", metavar="REV", help="the commit the branch moves to (e.g. HEAD~1)")
    p.add_argument("--no-wait", action="store_true", help="fail at once if another process is writing")
    _common(p)
    p.set_defaults(run=run_reset)


def run_reset(args) -> int:
    repo = _repo(args)
    branch, before, target = repo.reset(args.rev, wait=not args.no_wait)
    _print(args, {"branch": branch, "before": before, "commit": target},
           f"{branch or 'HEAD (detached)'} now at {target[:12]}"
           + (f" (was {before[:12]}; `mdiff reset {before[:12]}` undoes this)" if before and before != target else ""))
    return 0


REGISTER.append(add_reset)


def add_reflog(sub) -> None:
    p = sub.add_parser("reflog", help="where a branch has been",
                       description="List the moves of REF, newest first: every commit, merge, reset, branch -f or "
                                   "deletion that moved it (.mdiff/logs/, SPEC.md §13.1). REF is a branch (default: "
                                   "the current one), HEAD (the moves of a detached HEAD) or refs/tags/NAME.")
    p.add_argument("ref", nargs="?", default=None, metavar="REF", help="a branch, HEAD or refs/tags/NAME")
    p.add_argument("-n", "--max-count", type=int, default=None, metavar="N", help="show at most N entries")
    _common(p, "one JSON object per entry (old, new, time, date, message), newest first")
    p.set_defaults(run=run_reflog)


def run_reflog(args) -> int:
    import datetime

    repo = _repo(args)
    ref, entries = repo.reflog(args.ref)
    name = ref.removeprefix("refs/heads/")
    for i, entry in enumerate(entries[:args.max_count] if args.max_count is not None else entries):
        date = datetime.datetime.fromtimestamp(entry.time, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if args.json:
            print(json.dumps({"ref": ref, "old": entry.old, "new": entry.new, "time": entry.time, "date": date,
                              "message": entry.message}))
        else:
            print(f"{entry.new[:12] if entry.new else '(deleted)':<12} {name}@{{{i}}}: {entry.message}  ({date})")
    return 0


REGISTER.append(add_reflog)


def parse_duration(text: str) -> float:
    """Seconds from "now", "never", "90s", "30m", "12h", "14d", "2w" (a bare number: days)."""
    import re

    if text.strip().lower() == "now":
        return 0.0
    if text.strip().lower() == "never":
        return float("inf")
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. now, 30m, 12h, 14d, 2w, never)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "": 86400}[m.group(2).lower()]
