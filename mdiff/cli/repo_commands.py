"""Repository commands (SPEC.md §13): init, commit, log, show, checkout, status, branch, switch,
merge, squash, snapshot, gc, fsck, du, import-peft, tag, reset, reflog. Each is a thin layer over mdiff.repo.

Eighteen commands make it ~700 lines, each an arguments function and a handler; they stay in one module
because `mdiff --help` lists commands in the order their module registers them (cli/main.py)."""

from __future__ import annotations

import json
import sys

from mdiff.cli.options import (
    add_author, add_commit_metadata, add_date, add_engine, add_json, add_merge_options, add_meta, add_quiet,
    add_repository_options, add_storage_option, parse_duration, parse_meta, parse_size, repository_of,
    storage_options_of, store_of,
)
from mdiff.cli.output import count, differ, format_size, print_description, print_result, quiet
from mdiff.cli.progress import ProgressBar
from mdiff.cli.registry import Commands
from mdiff.cli.usage import UsageError
from mdiff.errors import InvalidFileError, RepositoryError

COMMANDS = Commands()

__all__ = ["COMMANDS"]


# ---------------------------------------------------------------- init
def init_arguments(p) -> None:
    p.add_argument("directory", nargs="?", default=".", metavar="DIR", help="the project folder to hold .mdiff/ (default: .)")
    p.add_argument("-b", "--branch", default="main", help="the first branch (default: main)")
    add_json(p)


@COMMANDS.command("init", help="create a repository", arguments=init_arguments,
                  description="Create an mdiff repository (a .mdiff folder).")
def run_init(args) -> int:
    from mdiff.repo.repository import Repository

    repo = Repository.init(args.directory, args.branch)
    print_result(args, {"repository": str(repo.dir)}, f"initialised an empty mdiff repository in {repo.dir} (branch {args.branch})")
    return 0


# ---------------------------------------------------------------- commit
CHECKPOINT_HELP = ("a model folder (save_pretrained's: model.safetensors or its shards and index, or pytorch_model*.bin; "
                   "the config, tokenizer and other files beside the weights are versioned too), its *.index.json, or "
                   "a file: .safetensors, .npz, .pt/.pth/.bin, .onnx")


def _exclude_option(p) -> None:
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave files of a model folder that match GLOB out (repeatable; the training state Trainer "
                        "saves — optimizer.pt, scheduler.pt, rng_state*.pth, … — is left out always)")


def commit_arguments(p) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT", help=CHECKPOINT_HELP)
    add_commit_metadata(p)
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
    add_repository_options(p)


@COMMANDS.command("commit", help="commit a checkpoint or model folder on the current branch",
                  arguments=commit_arguments,
                  description="Diff CHECKPOINT against HEAD's state and record the changes as a new commit. "
                              "Unchanged parameters are omitted; changed ones are stored exactly (sparse or "
                              "dense integer deltas, whichever is smaller), unless given explicitly with --low-rank. "
                              "Prints what it recorded, like git: parameters changed, added and deleted, and "
                              "the bytes stored for the model's weights.")
def run_commit(args) -> int:
    from mdiff.repo.explicit_updates import low_rank_updates, sparse_masks

    repo = repository_of(args)
    explicit = low_rank_updates(args.low_rank, args.checkpoint) if args.low_rank else {}
    masks = sparse_masks(args.sparse_mask) if args.sparse_mask else {}
    with ProgressBar.of(args, "commit") as bar:
        summary = repo.make_commit(args.checkpoint, args.message, args.author, args.date, parse_meta(args.meta), explicit,
                                   progress=bar, wait=not args.no_wait, masks=masks, allow_empty=args.allow_empty,
                                   allow_deletions=args.allow_deletions, exclude=args.exclude)
    if summary is None:
        print_result(args, {"commit": None, "reason": "nothing changed"},
               f"nothing to commit: {args.checkpoint} holds HEAD's state (--allow-empty commits anyway)")
        return 1
    data = {"commit": summary.commit_id, "branch": summary.branch, "changed": summary.changed, "added": summary.added,
            "deleted": summary.deleted, "files": summary.files, "layout_changed": summary.layout_changed,
            "stored_bytes": summary.stored_bytes, "weights_bytes": summary.weights_bytes,
            "not_versioned": list(summary.not_versioned)}
    first_line = args.message.splitlines()[0] if args.message else ""
    skipped = summary.not_versioned_line()
    print_result(args, data, f"[{summary.branch or 'detached'} {summary.commit_id[:12]}] {first_line}\n {summary.line()}"
                             + (f"\n {skipped}" if skipped else ""))
    return 0


# ---------------------------------------------------------------- log / show
def log_arguments(p) -> None:
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="where to start (default HEAD)")
    p.add_argument("--oneline", action="store_true", help="one line per commit")
    p.add_argument("--all", action="store_true", help="every branch and tag, not only REV")
    p.add_argument("-n", "--max-count", type=int, default=None, metavar="N", help="show at most N commits")
    p.add_argument("--stat", action="store_true",
                   help="under each commit, what it changes: parameters by update type, with the share of values "
                        "changed, and files")
    add_repository_options(p, "one JSON object per commit (id, parents, author, date, message, meta)")


@COMMANDS.command("log", help="show the history graph", arguments=log_arguments,
                  description="Show the commits reachable from REV (default HEAD), newest first, with merges drawn as a graph.")
def run_log(args) -> int:
    from mdiff.repo.history import graph_lines, readable_heads, readable_refs, resolve, topological

    repo = store_of(args)  # commits seen before are read with hashlib and json alone (repo/objects.py)
    # each ref and each head's history read on its own: an unreadable one is reported, the others shown
    targets, tags, tracked, ref_problems = readable_refs(repo)
    targets.update(tracked)  # shown, and with --all walked, as git shows origin/main
    problems = [(str(repo.dir / where), exc) for where, exc in ref_problems]
    heads = sorted(set(targets.values()) | set(tags.values())) if args.all else [resolve(repo, args.rev)]
    labels: dict[str, list[str]] = {}
    for name, target in targets.items():
        labels.setdefault(target, []).append(name)
    for name, target in tags.items():
        labels.setdefault(target, []).append(f"tag: {name}")
    heads, unreadable = readable_heads(repo, heads)
    problems += [(str(repo.commit_path(c)), exc) for c, exc in unreadable.items()]
    try:
        head_branch, head_id = repo.head()
    except RepositoryError as exc:
        problems.append((str(repo.dir / "HEAD"), exc))
        head_branch, head_id = None, None
    shown = topological(repo, heads)[:args.max_count] if args.max_count is not None else None
    if args.json:
        for c in shown if shown is not None else topological(repo, heads):
            m = repo.metadata(c)
            entry = {"id": c, "branches": [b for b in labels.get(c, []) if not b.startswith("tag: ")],
                     "tags": [t.removeprefix("tag: ") for t in labels.get(c, []) if t.startswith("tag: ")], **m.to_json()}
            if args.stat:
                entry["stat"] = _commit_stat(repo, c)
            print(json.dumps(entry))
        return _report_unreadable(args, problems)

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
    return _report_unreadable(args, problems)


def _report_unreadable(args, problems: list[tuple[str, RepositoryError]]) -> int:
    """Each ref or commit a listing could not read, as an error is reported (JSON lines on stdout with
    --json), after what could be read: exit 1 if there is any, else 0."""
    from mdiff.rules import RULES

    for path, exc in problems:
        if args.json:
            print(json.dumps({"error": {"code": exc.code, "message": exc.message, "path": path,
                                        "section": RULES[exc.code].section}}))
        else:
            where = "" if path in exc.message else f" [{path}]"
            print(f"mdiff: error {exc.code}: {exc.message}{where}", file=sys.stderr)
    return 1 if problems else 0


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
    rows = stat["parameters"]
    width = min(max((len(p["name"]) for p in rows), default=0), 60)
    lines = []
    for p in rows:
        share = f"{p['density']:.1%} changed" if "density" in p else ""
        name = p["name"] if len(p["name"]) <= width else "…" + p["name"][-(width - 1):]
        lines.append(f"{name:<{width}} | {p['type']:<8} {format_size(p['stored_bytes']):>10}  {share}".rstrip())
    lines += [f"file {path} | {kind}" for path, kind in stat["files"].items()]
    types: dict[str, int] = {}
    for p in rows:
        types[p["type"]] = types.get(p["type"], 0) + 1
    by_type = ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
    files = f", {count(len(stat['files']), 'file')}" if stat["files"] else ""
    lines.append(f"{count(len(rows), 'parameter')} ({by_type or 'none'}){files}; {format_size(stat['stored_bytes'])}")
    return lines


def show_arguments(p) -> None:
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="the commit (default HEAD)")
    p.add_argument("--values", type=int, default=0, metavar="N", help="show the first N values of each dataset")
    add_repository_options(p)


@COMMANDS.command("show", help="show a commit (like dump)", arguments=show_arguments,
                  description="Show a commit's metadata and what it changes, as `mdiff dump` does.")
def run_show(args) -> int:
    from mdiff.describe import describe
    from mdiff.repo.history import resolve  # on use: it brings h5py and numpy

    repo = repository_of(args)
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
def checkout_arguments(p) -> None:
    p.add_argument("rev", metavar="REV", help="a revision: HEAD (or @), a branch, a tag, a commit id or prefix, or "
                                               "REF@{N} (where REF was N moves ago: `mdiff reflog`), with ~N or ^")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="a new (or empty) folder — any folder, or a file, with --force —, or a checkpoint file (an "
                        "existing regular file is replaced, keeping its mode; a device, FIFO, link or folder is refused)")
    p.add_argument("--max-shard-size", type=parse_size, default=None, metavar="SIZE",
                   help="for a folder whose committed shard layout no longer fits: the largest shard, e.g. 5GB "
                        "(default 50GB, as save_pretrained)")
    p.add_argument("--format", dest="weights_format", choices=("safetensors", "bin"), default=None,
                   help="for a folder: its weights as .safetensors or as PyTorch pytorch_model*.bin (torch.save; needs "
                        "PyTorch) — by default as they were committed")
    p.add_argument("-f", "--force", action="store_true",
                   help="replace OUT when it is a folder that is not empty (or a file): the new folder is written "
                        "beside it and swapped in once complete, so that a failure leaves OUT as it was")
    p.add_argument("--template", metavar="BASE.onnx", help="for .onnx output: the model whose initializers are replaced")
    add_engine(p)
    add_quiet(p)
    p.add_argument("--remote", metavar="URL",
                   help="check out REV of the repository at URL without cloning it: only the commits of REV's "
                        "first-parent line move, each verified, into a temporary folder (SPEC.md §13.8)")
    add_storage_option(p, "with --remote: an fsspec option for its store (as for `mdiff fetch`); never stored")
    p.add_argument("--lazy", action="store_true",
                   help="with --remote: read the commits in place, by byte ranges — their metadata and the data "
                        "the state needs — instead of fetching each whole; what is read is verified against the "
                        "commit ids, leaf by leaf (a repository of format 1: each commit whole), and every value by "
                        "its sha256 (SPEC.md §13.9)")
    add_repository_options(p)


@COMMANDS.command("checkout", help="write the state at a commit to a checkpoint or model folder",
                  arguments=checkout_arguments,
                  description="Reconstruct the state at REV and write it to OUT: a model folder when OUT has no "
                              "checkpoint extension (the committed shards — .safetensors, or pytorch_model*.bin as "
                              "committed; --format to choose —, index, config and tokenizer files; transformers' "
                              "from_pretrained loads it), else a file (.safetensors, .npz, .pt, or .onnx with "
                              "--template BASE.onnx). Every exact update is verified by its sha256.")
def run_checkout(args) -> int:
    import contextlib
    import tempfile

    from mdiff.checkpoints import format_of, is_folder_output
    from mdiff.checkpoints.folder import WEIGHTS_FORMATS
    from mdiff.repo.history import resolve  # on use: it brings h5py and numpy

    if args.lazy and not args.remote:
        raise UsageError("--lazy reads a remote in place: give it with --remote URL")
    if args.weights_format and not is_folder_output(args.output):
        fmt = format_of(args.output)
        if fmt is None or fmt.name != WEIGHTS_FORMATS[args.weights_format]:
            raise UsageError(f"--format {args.weights_format} chooses the weights of a model folder; the extension of "
                             f"{args.output} chooses a file's format")
    options = {"template": args.template, "engine": args.engine, "max_shard_size": args.max_shard_size,
               "weights_format": args.weights_format, "force": args.force}
    moved: dict = {}
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(ProgressBar.of(args, "checkout"))
        if args.lazy:
            from mdiff.repo.remote_repository import RemoteRepository

            remote = RemoteRepository(args.remote, storage_options_of(args))
            commit_id = remote.resolve(args.rev)
            written = remote.checkout(commit_id, args.output, progress=bar, **options)
            moved = {"requests": remote.requests, "bytes_read": remote.bytes_read}
        elif args.remote:
            from mdiff.repo import Repository

            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="mdiff-remote-"))
            repo, commit_id = Repository.fetch_revision(args.remote, args.rev, cache, storage_options_of(args), bar)
        else:
            repo = repository_of(args)
            commit_id = resolve(repo, args.rev)
        if not args.lazy:  # the revision as given: a branch's name says whose working copy OUT is (working.py)
            written = repo.checkout(args.rev if not args.remote else commit_id, args.output, progress=bar, **options)
    what = count(len(written), "file") if len(written) > 1 or written != [args.output] else ""
    how = (f"; read in place: {format_size(moved['bytes_read'])} in {count(moved['requests'], 'request')}, "
           "verified" if moved else ", verified")
    print_result(args, {"commit": commit_id, "output": args.output, "written": written, **moved},
           f"wrote {args.output}{f' ({what})' if what else ''}: the state at {commit_id[:12]}{how}")
    return 0


def status_arguments(p) -> None:
    p.add_argument("checkpoint", nargs="?", default=None, metavar="CHECKPOINT",
                   help=CHECKPOINT_HELP + " (default: the branch, and the folder last committed or checked out on it)")
    _exclude_option(p)
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when CHECKPOINT differs from HEAD — without CHECKPOINT, when the folder last committed "
                        "or checked out on the branch changed since —, 0 when not (like git)")
    add_quiet(p)
    add_repository_options(p)


@COMMANDS.command("status", help="the branch, and what a checkpoint or model folder changes against HEAD",
                  arguments=status_arguments,
                  description="With CHECKPOINT: list the parameters and files it adds, deletes or changes against "
                              "HEAD's state. Without: the current branch and HEAD, how many commits the branch is "
                              "ahead of and behind its remote-tracking branch (origin/BRANCH, else the one "
                              "remote's that has it), and whether the folder or file last committed from or "
                              "checked out to on this branch changed since — by the files' size and times, then "
                              "by the sha256 of those whose times moved (the record is kept in "
                              ".mdiff/working/, outside the commits: SPEC.md §13.1).")
def run_status(args) -> int:
    if args.checkpoint is None:
        if args.exclude:
            raise UsageError("--exclude is for CHECKPOINT: mdiff status CHECKPOINT --exclude GLOB")
        return _branch_status(args)
    store = store_of(args)
    branch, head = store.head()
    tensors: dict[str, str] = {}
    files: dict[str, str] = {}
    layout_changed = False
    if not _holds_state_of(store, head, args.checkpoint, args.exclude):  # else: nothing changed, told by hashlib alone
        repo = repository_of(args)
        with ProgressBar.of(args, "status") as bar:
            changes = repo.status(args.checkpoint, exclude=args.exclude, progress=bar)
        tensors, files, layout_changed = changes.tensors, changes.files, changes.layout_changed
    changed = bool(tensors or files or layout_changed)
    if args.json:
        print(json.dumps({"branch": branch, "head": head, "changes": tensors, "files": files,
                          "layout_changed": layout_changed}))
        return 1 if args.exit_code and changed else 0
    if quiet(args):  # as git diff --quiet: the exit status (with --exit-code) says it
        return 1 if args.exit_code and changed else 0
    print(f"on branch {branch or '(detached)'} at {head[:12] if head else '(no commit yet)'}")
    for name, kind in tensors.items():
        print(f"  {kind:<9} {name}")
    for path, kind in files.items():
        print(f"  {kind:<9} file {path}")
    if layout_changed:
        print("  changed   the weights' shard layout")
    if not changed:
        print("nothing changed")
    else:
        print(differ(len(tensors), len(files)))
    return 1 if args.exit_code and changed else 0


# a checkpoint this large is hashed for its digest only when it is no newer than HEAD (just committed, most
# likely): a newer one has most likely changed, and the full status reads it anyway
_DIGEST_ALWAYS_BYTES = 256 << 20


def _holds_state_of(store, commit_id: str | None, checkpoint: str, exclude: list[str]) -> bool:
    """Whether ``checkpoint``, a single .safetensors file, holds the state at ``commit_id``: its state digest
    (SPEC.md §4.2), from its bytes, is the commit's `state_sha256` — every parameter's name, dtype, shape and
    sha256, and the layout, as the commit's state has them. False whenever that cannot be told this way
    (no such digest, another kind of checkpoint, an exclusion, a file the digest is unsure of): the full
    comparison decides then."""
    import os

    if commit_id is None or exclude or not checkpoint.endswith(".safetensors"):
        return False
    claimed = store.metadata(commit_id)
    if claimed.state_sha256 is None:
        return False
    try:
        found = os.stat(checkpoint)
    except OSError:
        return False
    if found.st_size > _DIGEST_ALWAYS_BYTES:
        import datetime

        committed = datetime.datetime.fromisoformat(claimed.date[:19]).replace(tzinfo=datetime.timezone.utc).timestamp()
        if found.st_mtime > committed + 2:
            return False
    from mdiff.repo.checkpoint_digest import state_digest

    return state_digest(checkpoint) == claimed.state_sha256


def _branch_status(args) -> int:
    """`mdiff status` without CHECKPOINT: refs and the files' status, no state read (no tensor, no parameter)."""
    from mdiff.repo import working
    from mdiff.repo.history import ahead_behind
    from mdiff.repo.remotes import upstream_of

    store = store_of(args)
    branch, head = store.head()
    message = next(iter(store.metadata(head).message.splitlines()), "") if head else ""
    upstream = upstream_of(store, branch) if branch else None
    counts = ahead_behind(store, head, upstream[1]) if upstream else None
    record = working.read(store, working.ref_of(branch))
    since = working.changes_since(record) if record is not None else None
    if record is not None and since is not None:
        working.refresh(store, record, since)
    changed = since is not None and bool(since)
    if args.json:
        print(json.dumps({
            "branch": branch, "head": head, "message": message if head else None,
            "upstream": {"name": upstream[0], "commit": upstream[1], "ahead": counts[0], "behind": counts[1]}
            if upstream and counts else None,
            "working": None if record is None or since is None else {
                "path": record.path, "kind": record.kind, "action": record.action, "commit": record.commit,
                "changed": changed, "missing": since.missing, "files": since.files, "incomplete": since.incomplete},
        }))
        return 1 if args.exit_code and changed else 0
    where = f"On branch {branch}" if branch else "HEAD detached"
    print(f"{where} at {head[:12]} {json.dumps(message, ensure_ascii=False)}" if head else f"{where} (no commits yet)")
    if upstream and counts:
        print(_tracking_line(upstream[0], *counts))
    if record is None or since is None:
        print(f"nothing recorded for {branch or 'HEAD'}: `mdiff commit PATH` and `mdiff checkout REV -o PATH` "
              "remember PATH here")
        return 0
    shown = _shown_path(record.path)
    at = f"{'committed' if record.action == 'commit' else 'checked out'} at {record.commit[:12]}"
    if head != record.commit:
        at += f"; {branch or 'HEAD'} is at {head[:12]} now" if head else f"; {branch or 'HEAD'} has no commit now"
    if since.missing:
        print(f"{shown} ({at}): gone since (or no longer a {record.kind})")
    elif not since:
        print(f"{shown} ({at}): unchanged since")
    else:
        more = " or more" if since.incomplete else ""
        print(f"{shown} ({at}): {count(len(since.files), 'file')}{more} changed since — run "
              f"`mdiff status {shown}` for the parameters")
        for name, kind in since.files.items():
            print(f"  {kind:<9} {name}")
    return 1 if args.exit_code and changed else 0


def _tracking_line(upstream: str, ahead: int, behind: int) -> str:
    """git's line: up to date with, ahead of, behind, or both."""
    if not ahead and not behind:
        return f"Your branch is up to date with {upstream}."
    if not behind:
        return f"Your branch is {count(ahead, 'commit')} ahead of {upstream}."
    if not ahead:
        return f"Your branch is {count(behind, 'commit')} behind {upstream}."
    return f"Your branch is {count(ahead, 'commit')} ahead of {upstream}, {behind} behind."


def _shown_path(path: str) -> str:
    """``path`` as the user would type it here: ./relative below the working folder, else absolute."""
    import os

    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative == ".." or relative.startswith(".." + os.sep) else (
        relative if relative == "." else os.path.join(".", relative))


# ---------------------------------------------------------------- branches
def branch_arguments(p) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help="the branch to create (or, with -d, delete; with -f, move)")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="where the branch starts or moves to (default HEAD)")
    p.add_argument("-d", "--delete", action="store_true", help="delete NAME (its reflog stays: `mdiff reflog NAME`)")
    p.add_argument("-f", "--force", action="store_true", help="move NAME to REV even if it exists")
    p.add_argument("-a", "--all", action="store_true", help="list remote-tracking branches (REMOTE/BRANCH) too")
    add_repository_options(p)


@COMMANDS.command("branch", help="list, create, move or delete branches", arguments=branch_arguments,
                  description="Without NAME, list branches; with NAME, create it at REV (default HEAD); with -f, "
                              "create it or move it to REV wherever it was (the current branch too: mdiff has "
                              "no working tree, so only the ref moves; its reflog keeps where it was).")
def run_branch(args) -> int:
    from mdiff.repo.history import resolve

    if args.name is None:
        from mdiff.repo.history import readable_refs

        store = store_of(args)  # a list reads refs alone, each on its own: an unreadable one is reported
        branches, _, tracked, ref_problems = readable_refs(store, remotes=args.all)
        problems = [(str(store.dir / where), exc) for where, exc in ref_problems if not where.startswith("refs/tags")]
        try:
            current = store.head()[0]
        except RepositoryError as exc:
            problems.append((str(store.dir / "HEAD"), exc))
            current = None
        if args.json:
            print(json.dumps({"current": current, "branches": branches, **({"remotes": tracked} if args.all else {})}))
            return _report_unreadable(args, problems)
        for name, target in branches.items():
            print(f"{'*' if name == current else ' '} {name:<20} {target[:12]}")
        for name, target in tracked.items():
            print(f"  remotes/{name:<12} {target[:12]}")
        return _report_unreadable(args, problems)
    repo = repository_of(args)
    if args.delete:
        with repo.lock():
            repo.delete_branch(args.name)
        print_result(args, {"deleted": args.name}, f"deleted branch {args.name}")
        return 0
    if args.force:
        before, target = repo.force_branch(args.name, args.rev)
        print_result(args, {"branch": args.name, "commit": target, "before": before},
               f"branch {args.name} {'moved from ' + before[:12] + ' to' if before else 'created at'} {target[:12]}")
        return 0
    repo.check_branch_name(args.name)
    target = resolve(repo, args.rev)
    with repo.lock():  # the check that it is new and the write, as one step
        repo.create_branch(args.name, target)
    print_result(args, {"branch": args.name, "commit": target}, f"created branch {args.name} at {target[:12]}")
    return 0


def switch_arguments(p) -> None:
    p.add_argument("branch", metavar="BRANCH", help="the branch to commit on from now")
    p.add_argument("start", nargs="?", default=None, metavar="START", help="with -c: where the new branch starts (default HEAD)")
    p.add_argument("-c", "--create", action="store_true", help="create BRANCH first")
    add_repository_options(p)


@COMMANDS.command("switch", help="make another branch current", arguments=switch_arguments,
                  description="Make BRANCH the current branch (commits go there). With -c, create it first, at START (default HEAD).")
def run_switch(args) -> int:
    if args.start and not args.create:
        raise UsageError("START is for a new branch: mdiff switch -c BRANCH START")
    repo = repository_of(args)
    repo.switch(args.branch, create=args.create, start=args.start)
    print_result(args, {"branch": args.branch}, f"switched to {'a new ' if args.create else ''}branch {args.branch}")
    return 0


# ---------------------------------------------------------------- merge / squash / snapshot
def merge_arguments(p) -> None:
    p.add_argument("rev", metavar="REV", help="the branch or commit to merge into the current branch")
    add_merge_options(p)
    p.add_argument("-m", "--message", default=None, help="the commit message (default: Merge REV into BRANCH)")
    add_author(p, made=None)
    add_date(p)
    add_meta(p)
    add_quiet(p)
    p.add_argument("--no-ff", dest="fast_forward", action="store_false",
                   help="make a merge commit even when the current branch is an ancestor of REV (default: fast-forward)")
    p.add_argument("--ff-only", action="store_true",
                   help="only fast-forward: refuse (MD804) when the branches have diverged")
    add_repository_options(p)


@COMMANDS.command("merge", help="merge a branch into the current one", arguments=merge_arguments,
                  description="Merge REV into the current branch, three-way against their best common ancestor "
                              "(SPEC.md §13.7): a parameter or file changed on one side only takes that side's bytes "
                              "exactly; one changed differently on both sides is a conflict, and a conflict stops the "
                              "merge (exit 1, nothing committed) unless --strategy resolves it: ours, theirs, average, "
                              "weighted:ALPHA (ALPHA·ours + (1−ALPHA)·theirs), task-arithmetic[:λ] "
                              "(base + λ·((ours−base) + (theirs−base))). --all applies the strategy to every "
                              "parameter.")
def run_merge(args) -> int:
    from mdiff.cli.merge_report import merge_data, merge_lines

    if args.everything and args.strategy is None:
        raise UsageError("--all applies a strategy to every parameter: give one, e.g. --strategy average --all")
    repo = repository_of(args)
    branch, _ = repo.head()
    with ProgressBar.of(args, "merge") as bar:
        result = repo.merge(args.rev, args.strategy, args.message, args.author, args.date, parse_meta(args.meta), bar,
                            fast_forward=args.fast_forward, everything=args.everything, ff_only=args.ff_only)
    lines = merge_lines(result, args.rev, branch, args.strategy, args.everything)
    if result.conflicts or args.json or not quiet(args):  # conflicts are an error, which -q does not silence
        print_result(args, merge_data(result), "\n".join(lines))
    return 1 if result.conflicts else 0


def squash_arguments(p) -> None:
    p.add_argument("rev", metavar="REV", help="the earlier commit of the current branch that the squashed commit follows")
    add_commit_metadata(p)
    add_repository_options(p)


@COMMANDS.command("squash", help="replace the commits after REV by one", arguments=squash_arguments,
                  description="Replace the current branch's commits after REV by a single commit with the same state.")
def run_squash(args) -> int:
    repo = repository_of(args)
    commit_id = repo.squash(args.rev, args.message, args.author, args.date, parse_meta(args.meta))
    print_result(args, {"commit": commit_id}, f"squashed onto {args.rev}: {commit_id[:12]}")
    return 0


def snapshot_arguments(p) -> None:
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV",
                   help="the commit (default HEAD); with --drop, also the full id of a commit no longer in the repository")
    p.add_argument("--drop", action="store_true", help="remove REV's snapshot instead (checkouts replay the commits)")
    add_repository_options(p)


@COMMANDS.command("snapshot", help="store (or drop) the full state at a commit for fast checkouts",
                  arguments=snapshot_arguments,
                  description="Store the full state at REV (compressed), so that checking out REV or its "
                              "descendants reads it instead of replaying every update since the root — once the "
                              "commits have shown that it holds their values (SPEC.md §13.5). `mdiff commit` "
                              "writes one by itself when a checkout would apply eight times the model's size.")
def run_snapshot(args) -> int:
    repo = repository_of(args)
    if args.drop:
        commit_id, freed = repo.drop_snapshot(args.rev)
        print_result(args, {"dropped": commit_id, "bytes_freed": freed},
               f"dropped the snapshot of {commit_id[:12]} ({format_size(freed)} freed)")
        return 0
    commit_id = repo.snapshot(args.rev)
    print_result(args, {"snapshot": commit_id}, f"snapshot stored for {commit_id[:12]}")
    return 0


def gc_arguments(p) -> None:
    p.add_argument("-n", "--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument("--prune", type=parse_duration, default="14d", metavar="AGE",
                   help="remove an unreachable commit only if its file is older than AGE (default 14d, as git's "
                        "gc.pruneExpire; `now` for no grace): e.g. 30m, 12h, 14d, 2w, never")
    p.add_argument("--reflog-expire", type=parse_duration, default="30d", metavar="AGE",
                   help="reflog entries older than AGE are dropped and keep no commit (default 30d, as git's "
                        "gc.reflogExpireUnreachable); `now` drops them all, `never` keeps them")
    add_repository_options(p, "print JSON: removed (path, bytes, reason), kept, bytes_freed, dry_run, commits_removed, "
               "reflog_entries_expired")


@COMMANDS.command("gc", help="remove unreachable commits, temporary files and snapshots no checkout needs",
                  arguments=gc_arguments,
                  description="Remove what .mdiff/ holds that nothing needs (SPEC.md §13.6): commits that no "
                              "branch, tag or other ref, HEAD, or reflog entry younger than --reflog-expire "
                              "reaches, once their file is older than --prune (a commit a concurrent writer "
                              "has just written, before a ref names it, stays); reflog entries older than "
                              "--reflog-expire; the temporary files and folders that interrupted writers left "
                              "(names starting with '.', and the tmpXXXXXXXX folders of earlier merges); and "
                              "snapshots that are unusable, disagree with their commits (MD807) or belong to a "
                              "commit not kept. A reachable commit is never removed, and no commit at all when a "
                              "ref, reflog or commit on the way cannot be read. Waits for the writers' lock.")
def run_gc(args) -> int:
    repo = repository_of(args)
    report = repo.gc(dry_run=args.dry_run, prune=args.prune, reflog_expire=args.reflog_expire)

    def rows(items):
        return [{"path": str(item.path.relative_to(repo.dir)), "bytes": item.size, "reason": item.reason}
                for item in items]

    if args.json:
        print(json.dumps({"dry_run": report.dry_run, "removed": rows(report.removed), "kept": rows(report.kept),
                          "bytes_freed": report.bytes_freed, "commits_removed": report.commits,
                          "reflog_entries_expired": report.expired_entries}))
        return 0
    if quiet(args):
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for item in report.removed:
        print(f"{verb} {item.path.relative_to(repo.dir)} ({format_size(item.size)}): {item.reason}")
    for item in report.kept:
        print(f"kept {item.path.relative_to(repo.dir)}: {item.reason}")
    total = f"{format_size(report.bytes_freed)} ({report.bytes_freed} bytes)"
    expired = f"; {count(report.expired_entries, 'reflog entry', 'reflog entries')} expired" if report.expired_entries else ""
    print(f"{count(len(report.removed), 'entry', 'entries')} ({count(len(report.commits), 'commit')}), {total} "
          f"{'would be freed' if args.dry_run else 'freed'}{expired}")
    return 0


def migrate_arguments(p) -> None:
    p.add_argument("destination", metavar="DEST", help="the project folder for the new repository (it must hold none)")
    add_repository_options(p, "print JSON: destination, ids (old id → new id), branches, tags, head, snapshots_dropped")


@COMMANDS.command("migrate", help="copy a format-1 repository into a new repository of format 2",
                  arguments=migrate_arguments,
                  description="Make a new repository of format 2 in DEST (SPEC.md §4.3, §13.1: commit ids by block "
                              "list, so that a pinned id is verified on every path, a read in place included) with "
                              "every commit of this format-1 repository, its branches, tags and HEAD. Every commit "
                              "gets a new id, since each names its parents' ids: this repository is left as it is. "
                              "Reflogs, snapshots, remotes and working records are not copied (`mdiff snapshot` and "
                              "`mdiff remote add` make them again; a format-1 remote takes no format-2 commits).")
def run_migrate(args) -> int:
    from mdiff.repo.migrate import migrate

    repo = repository_of(args)
    with ProgressBar.of(args, "migrate") as bar:
        report = migrate(repo, args.destination, bar)
    print_result(args, {"destination": str(report.destination), "ids": report.ids, "branches": report.branches,
                        "tags": report.tags, "head": report.head, "snapshots_dropped": report.snapshots_dropped},
                 f"migrated {count(len(report.ids), 'commit')}, {count(len(report.branches), 'branch', 'branches')} and "
                 f"{count(len(report.tags), 'tag')} into a repository of format 2 in {report.destination}"
                 + (f" ({count(report.snapshots_dropped, 'snapshot')} not copied)" if report.snapshots_dropped else ""))
    return 0


def fsck_arguments(p) -> None:
    p.add_argument("--no-data", action="store_true", help="skip the rules that read datasets")
    add_quiet(p)
    add_repository_options(p)


@COMMANDS.command("fsck", help="check a repository's integrity", arguments=fsck_arguments,
                  description="Verify every commit file against its id (sha256), validate it, and check refs, HEAD "
                              "and parents. Exit 0 when sound, 1 otherwise.")
def run_fsck(args) -> int:
    repo = repository_of(args)
    with ProgressBar.of(args, "fsck") as bar:
        findings = repo.fsck(check_data=not args.no_data, progress=bar)
    errors = [f for f in findings if f.is_error]
    if args.json:
        print(json.dumps({"sound": not errors, "findings": [f.to_json() for f in findings]}))
    else:
        for f in findings:
            print(f"{f.code} {f.severity} {f.path}: {f.message}")
        if not quiet(args):
            print(f"{count(len(repo.commit_ids()), 'commit')} checked: "
                  + ("sound" if not errors else count(len(errors), "problem")))
    return 1 if errors else 0


def du_arguments(p) -> None:  # -v (every command's) adds a row per commit
    add_repository_options(p, "print JSON: every commit (id, reachable, stored_bytes, checkpoint_bytes, ratio, "
                              "message) and the totals, in bytes")


@COMMANDS.command("du", help="is it worth it? the repository's bytes against full checkpoints of every commit",
                  arguments=du_arguments, aliases=("count-objects",),
                  description="What .mdiff/ stores — commit files, snapshots, and the rest (refs, reflogs, "
                              "working records) — against what a full checkpoint of every commit's state would "
                              "take: its weights' bytes, the product of each parameter's shape and its dtype's "
                              "size, as a .safetensors file or git-lfs holds them (from the commits' metadata; "
                              "no value is read). Commits no branch, tag, remote-tracking ref or HEAD reaches "
                              "are counted apart. With -v, a row per commit: its file's bytes, its state's full "
                              "checkpoint and the ratio. Every commit file is verified (MD800) as it is read. "
                              "`mdiff count-objects` is the same command.")
def run_du(args) -> int:
    from mdiff.repo.space import measure

    space = measure(store_of(args))
    unreached = space.unreached
    if args.json:
        print(json.dumps({
            "commits": [{"id": c.commit_id, "reachable": c.reachable, "stored_bytes": c.stored_bytes,
                         "checkpoint_bytes": c.checkpoint_bytes, "ratio": c.ratio, "message": c.message}
                        for c in space.commits],
            "totals": {"commits": len(space.commits), "unreachable": len(unreached),
                       "unreadable": space.unreadable, "commit_bytes": space.commit_bytes,
                       "unreachable_commit_bytes": space.unreached_bytes,
                       "snapshots": space.snapshots, "snapshot_bytes": space.snapshot_bytes,
                       "other_bytes": space.other_bytes, "repository_bytes": space.repository_bytes,
                       "checkpoint_bytes": space.checkpoint_bytes, "ratio": space.ratio},
        }))
        return 0
    if args.verbose:
        rows = [("COMMIT", "STORED", "CHECKPOINT", "RATIO", "MESSAGE")]
        for c in space.commits:
            if c is (unreached[0] if unreached else None):
                rows.append(("unreachable:", "", "", "", ""))
            rows.append((c.commit_id[:12], format_size(c.stored_bytes),
                         format_size(c.checkpoint_bytes) if c.checkpoint_bytes is not None else "unreadable",
                         _percent(c.ratio), c.message))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            print(("  ".join(r[i].ljust(widths[i]) if i == 0 else r[i].rjust(widths[i]) for i in range(4))
                   + "  " + r[4]).rstrip())
        print()
    commits = count(len(space.commits), "commit")
    print(f".mdiff/ holds {format_size(space.repository_bytes)}: {commits} in {format_size(space.commit_bytes)}, "
          f"{count(space.snapshots, 'snapshot')} in {format_size(space.snapshot_bytes)}, other files "
          f"{format_size(space.other_bytes)}")
    readable = len(space.commits) - space.unreadable
    every = "every commit" if not space.unreadable else f"the {count(readable, 'commit')} whose state can be read"
    if space.ratio is not None:
        times = f"{1 / space.ratio:.1f}× smaller" if space.ratio <= 1 else f"{space.ratio:.1f}× larger"
        print(f"full checkpoints of {every} would take {format_size(space.checkpoint_bytes)}: .mdiff/ is "
              f"{_percent(space.ratio)} of that ({times})")
    elif space.commits:
        print(f"full checkpoints of {every} would take {format_size(space.checkpoint_bytes)}")
    if unreached:
        print(f"{count(len(unreached), 'commit')} ({format_size(space.unreached_bytes)}) "
              f"{'is' if len(unreached) == 1 else 'are'} reached by no branch, tag or HEAD: `mdiff gc` removes "
              f"{'it' if len(unreached) == 1 else 'them'} once no reflog entry keeps {'it' if len(unreached) == 1 else 'them'}")
    if space.unreadable:
        print(f"{count(space.unreadable, 'commit')} cannot be read (nor the states after them): `mdiff fsck` says why")
    return 0


def _percent(ratio: float | None) -> str:
    return f"{ratio:.1%}" if ratio is not None else "-"


def import_peft_arguments(p) -> None:
    p.add_argument("adapter", metavar="ADAPTER_DIR", help="the adapter's folder (adapter_config.json, adapter_model.safetensors)")
    p.add_argument("--base", required=True, metavar="BASE_CHECKPOINT", help="the model the adapter was trained on")
    p.add_argument("-m", "--message", default=None, help="the commit message (default: import PEFT adapter NAME)")
    add_author(p, made=None)
    add_date(p)
    add_meta(p)
    add_repository_options(p)


@COMMANDS.command("import-peft", help="commit a PEFT LoRA adapter as low_rank updates",
                  arguments=import_peft_arguments,
                  description="Commit a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) as "
                              "low_rank updates with the adapter's scale (lora_alpha/r, or /sqrt(r) with rsLoRA; "
                              "rank_pattern and alpha_pattern honoured), its module names mapped to BASE's "
                              "parameter names. On an empty branch BASE is committed first, as the root.")
def run_import_peft(args) -> int:
    repo = repository_of(args)
    made = repo.import_peft(args.adapter, args.base, args.message, args.author, args.date, parse_meta(args.meta))
    print_result(args, {"commits": made}, "\n".join(f"committed {c[:12]}" for c in made))
    return 0


# ---------------------------------------------------------------- tags, reset, reflog
def tag_arguments(p) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help="the tag to create (or, with -d, delete)")
    p.add_argument("rev", nargs="?", default="HEAD", metavar="REV", help="the commit to tag (default HEAD)")
    p.add_argument("-d", "--delete", action="store_true", help="delete NAME")
    p.add_argument("-f", "--force", action="store_true", help="move NAME to REV if it exists")
    add_repository_options(p)


@COMMANDS.command("tag", help="list, create or delete tags", arguments=tag_arguments,
                  description="Without NAME, list tags; with NAME, tag REV (default HEAD): refs/tags/NAME names "
                              "that commit, as a branch would, but no commit moves it. Tag names follow the rules "
                              "of branch names (SPEC.md §13.1); a name that is a branch is refused.")
def run_tag(args) -> int:
    if args.name is None:
        if args.delete or args.force:
            raise UsageError("-d and -f need a tag NAME")
        tags = store_of(args).tags()  # a list reads refs alone
        if args.json:
            print(json.dumps({"tags": tags}))
        else:
            for name, target in tags.items():
                print(f"{name:<20} {target[:12] if target else ''}")
        return 0
    repo = repository_of(args)
    if args.delete:
        before = repo.untag(args.name)
        print_result(args, {"deleted": args.name, "commit": before},
               f"deleted tag {args.name}" + (f" (was {before[:12]})" if before else ""))
        return 0
    before, target = repo.tag(args.name, args.rev, force=args.force)
    moved = f" (was {before[:12]})" if before and before != target else ""
    print_result(args, {"tag": args.name, "commit": target, "before": before}, f"tagged {target[:12]} as {args.name}{moved}")
    return 0


def reset_arguments(p) -> None:
    p.add_argument("rev", metavar="REV", help="the commit the branch moves to (e.g. HEAD~1; main@{1}: where main was "
                                               "before its last move, which undoes a reset)")
    p.add_argument("--no-wait", action="store_true", help="fail at once if another process is writing")
    add_repository_options(p)


@COMMANDS.command("reset", help="move the current branch to another commit (undo)", arguments=reset_arguments,
                  description="Move the current branch (or a detached HEAD) to REV: back, to undo commits, or "
                              "anywhere. mdiff has no working tree, so this moves the branch only (like git reset "
                              "--soft; there is no --hard to need): no commit is deleted, and the reflog records "
                              "where the branch was (`mdiff reflog`), so a reset is undone by resetting to that "
                              "commit. `mdiff gc` keeps commits a reflog entry names until the entry expires.")
def run_reset(args) -> int:
    repo = repository_of(args)
    branch, before, target = repo.reset(args.rev, wait=not args.no_wait)
    print_result(args, {"branch": branch, "before": before, "commit": target},
           f"{branch or 'HEAD (detached)'} now at {target[:12]}"
           + (f" (was {before[:12]}; `mdiff reset {before[:12]}` undoes this)" if before and before != target else ""))
    return 0


def reflog_arguments(p) -> None:
    p.add_argument("ref", nargs="?", default=None, metavar="REF",
                   help="a branch (default: the current one), HEAD, a tag, a remote-tracking ref (origin/main), or "
                        "refs/…")
    p.add_argument("-n", "--max-count", type=int, default=None, metavar="N", help="show at most N entries")
    add_repository_options(p, "one JSON object per entry (ref, name, old, new, time, date, message), newest first")


def _reflog_name(ref: str) -> str:
    """What a revision calls ``ref`` (§13.3): HEAD, a branch, a tag or a remote-tracking ref by its short name."""
    for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


@COMMANDS.command("reflog", help="where a branch has been", arguments=reflog_arguments,
                  description="List the moves of REF, newest first, the newest being where REF is now: every "
                              "commit, merge, reset, pull, branch -f or deletion that moved it (.mdiff/logs/, "
                              "SPEC.md §13.6). Each line names its commit as a revision does: REF@{N} is where "
                              "REF was N moves ago (REF@{0} where it is), and `mdiff reset main@{1}` undoes the "
                              "last move of main. REF is a branch (default: the current one), HEAD (every move "
                              "of HEAD: switches too), a tag or a remote-tracking ref.")
def run_reflog(args) -> int:
    import datetime

    from mdiff.repo.history import reflog_ref

    repo = store_of(args)
    wanted = args.ref if args.ref is not None and args.ref.startswith("refs/") else reflog_ref(repo, args.ref or "")
    ref, entries = repo.reflog(wanted)
    name = _reflog_name(ref)
    for i, entry in enumerate(entries[:args.max_count] if args.max_count is not None else entries):
        date = datetime.datetime.fromtimestamp(entry.time, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if args.json:
            print(json.dumps({"ref": ref, "name": f"{name}@{{{i}}}", "old": entry.old, "new": entry.new,
                              "time": entry.time, "date": date, "message": entry.message}))
        else:
            print(f"{entry.new[:12] if entry.new else '(deleted)':<12} {name}@{{{i}}}: {entry.message}  ({date})")
    return 0
