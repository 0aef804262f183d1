"""Remote commands (SPEC.md §13.8): remote, clone, fetch, pull, push. Each is a thin layer over
mdiff.repo.remotes and mdiff.repo.transfer. Storage options (credentials among them) are taken from
--storage-option and the environment for the call only: never stored, printed or logged."""

from __future__ import annotations

import json

from mdiff.cli.progress import ProgressBar
from mdiff.cli.repo_commands import _common, _print, _repo
from mdiff.cli.usage import UsageError


def _transfer_options(p) -> None:
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an fsspec option for the remote's store (repeatable; VALUE is JSON or text; a.b=v nests), "
                        "e.g. client_kwargs.endpoint_url=http://localhost:9000; also $MDIFF_STORAGE_OPTIONS (a JSON "
                        "object). Credentials: the store's usual environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, …). "
                        "Never stored")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _snapshots_option(p, verb: str) -> None:
    p.add_argument("--snapshots", action="store_true",
                   help=f"{verb} the snapshots (SPEC.md §13.5) of these commits too, so that checkouts start there")


def _options(args) -> dict:
    from mdiff.repo.remotes import storage_options

    return storage_options(args.storage_option)


def _short(commit_id: str | None) -> str:
    return commit_id[:12] if commit_id else "(none)"


# ---------------------------------------------------------------- remote
def add_remote(sub) -> None:
    p = sub.add_parser("remote", help="list, add or remove remotes",
                       description="Name the repositories this one fetches from and pushes to. A remote is a "
                                   "repository (SPEC.md §13.1 layout) at an fsspec URL: a local path or file://, "
                                   "s3://bucket/prefix (s3fs; also MinIO, R2 and other S3 APIs through their endpoint "
                                   "URL), or another fsspec protocol (untested). URLs never hold credentials.")
    p.add_argument("action", nargs="?", default="list", choices=["list", "add", "remove"], help="default: list")
    p.add_argument("name", nargs="?", metavar="NAME", help="the remote's name (add, remove), e.g. origin")
    p.add_argument("url", nargs="?", metavar="URL", help="add: where the remote repository is (no credentials in it)")
    _common(p)
    p.set_defaults(run=run_remote)


def run_remote(args) -> int:
    from mdiff.repo.remotes import add_remote as add, remote_names, remote_url, remove_remote

    repo = _repo(args)
    if args.action == "add":
        if not args.name or not args.url:
            raise UsageError("mdiff remote add NAME URL")
        add(repo, args.name, args.url)
        _print(args, {"added": args.name, "url": remote_url(repo, args.name)},
               f"added remote {args.name}: {remote_url(repo, args.name)}")
    elif args.action == "remove":
        if not args.name or args.url:
            raise UsageError("mdiff remote remove NAME")
        remove_remote(repo, args.name)
        _print(args, {"removed": args.name}, f"removed remote {args.name}")
    else:
        remotes = {name: remote_url(repo, name) for name in remote_names(repo)}
        if args.json:
            print(json.dumps({"remotes": remotes}))
        for name, url in remotes.items():
            if not args.json:
                print(f"{name}\t{url}")
    return 0


# ---------------------------------------------------------------- clone
def add_clone(sub) -> None:
    p = sub.add_parser("clone", help="copy a remote repository into a new folder",
                       description="Make DIR (default: the URL's last name) a repository with URL as its remote "
                                   "'origin', fetch every commit (each verified against its sha256) and make the "
                                   "remote's current branch the local one.")
    p.add_argument("url", metavar="URL", help="the remote: a local path, file://…, s3://bucket/prefix, …")
    p.add_argument("directory", nargs="?", default=None, metavar="DIR",
                   help="the new repository's folder (default: the URL's last name)")
    _transfer_options(p)
    _snapshots_option(p, "copy")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run_clone)


def run_clone(args) -> int:
    from mdiff.repo.transfer import clone

    bar = ProgressBar("clone", enabled=False if args.quiet else None)
    try:
        repo, report = clone(args.url, args.directory, _options(args), bar, args.snapshots)
    finally:
        bar.close()
    branch, head = repo.head()
    _print(args, {"repository": str(repo.dir), "branch": branch, "commit": head, "commits": len(report.commits),
                  "bytes": report.bytes},
           f"cloned {args.url} into {repo.root}: {len(report.commits)} commits ({report.bytes} bytes), "
           f"branch {branch} at {_short(head)}")
    return 0


# ---------------------------------------------------------------- fetch
def add_fetch(sub) -> None:
    p = sub.add_parser("fetch", help="copy a remote's new commits and branches",
                       description="Copy the commits REMOTE has and this repository lacks (each verified against its "
                                   "sha256 before it is filed: MD800), then set the remote-tracking branches "
                                   "REMOTE/BRANCH and create REMOTE's tags missing here. A broken or hostile remote "
                                   "leaves this repository as it was.")
    p.add_argument("remote", nargs="?", default="origin", metavar="REMOTE", help="default: origin")
    _transfer_options(p)
    _snapshots_option(p, "fetch")
    _common(p)
    p.set_defaults(run=run_fetch)


def _fetch_data(report) -> dict:
    return {"remote": report.remote, "commits": report.commits, "bytes": report.bytes,
            "branches": {b: {"before": old, "after": new} for b, (old, new) in report.branches.items()},
            "tags": report.tags, "tags_kept": report.tags_kept, "snapshots": report.snapshots,
            "snapshot_bytes": report.snapshot_bytes}


def _fetch_lines(report) -> list[str]:
    lines = [f"fetched {len(report.commits)} commits ({report.bytes} bytes) from {report.remote}"]
    for branch, (old, new) in report.branches.items():
        lines.append(f"  {report.remote}/{branch}: {_short(old)} -> {_short(new)}" if new
                     else f"  {report.remote}/{branch}: deleted on the remote")
    lines += [f"  new tag {name} at {_short(target)}" for name, target in report.tags.items()]
    lines += [f"  tag {name}: the local one differs and is kept" for name in report.tags_kept]
    if report.snapshots:
        lines.append(f"  {len(report.snapshots)} snapshots ({report.snapshot_bytes} bytes)")
    return lines


def run_fetch(args) -> int:
    from mdiff.repo.transfer import fetch

    repo = _repo(args)
    bar = ProgressBar("fetch", enabled=False if args.quiet else None)
    try:
        report = fetch(repo, args.remote, _options(args), bar, args.snapshots)
    finally:
        bar.close()
    _print(args, _fetch_data(report), "\n".join(_fetch_lines(report)))
    return 0


# ---------------------------------------------------------------- pull
def add_pull(sub) -> None:
    p = sub.add_parser("pull", help="fetch, then bring a remote branch into the current one",
                       description="Fetch REMOTE, then bring REMOTE/BRANCH (default: the current branch's name) into "
                                   "the current branch: a fast-forward when it only adds commits, else a merge with "
                                   "--strategy (SPEC.md §13.7; conflicts: nothing is committed, exit 1).")
    p.add_argument("remote", nargs="?", default="origin", metavar="REMOTE", help="default: origin")
    p.add_argument("branch", nargs="?", default=None, metavar="BRANCH",
                   help="the remote's branch to bring in (default: the current branch's name)")
    p.add_argument("--strategy", default="average", metavar="STRATEGY",
                   help="for a merge: average (default), weighted:ALPHA, ours, theirs or task-arithmetic[:LAMBDA]")
    p.add_argument("-m", "--message", default=None, help="for a merge: the commit message")
    _transfer_options(p)
    _common(p)
    p.set_defaults(run=run_pull)


def run_pull(args) -> int:
    from mdiff.repo.transfer import pull

    repo = _repo(args)
    bar = ProgressBar("pull", enabled=False if args.quiet else None)
    try:
        report, outcome, commit_id, conflicts = pull(repo, args.remote, args.branch, args.strategy, _options(args),
                                                     bar, message=args.message)
    finally:
        bar.close()
    data = {"fetch": _fetch_data(report), "outcome": outcome, "commit": commit_id,
            "conflicts": [{"parameter": n, "reason": r} for n, r in conflicts]}
    lines = _fetch_lines(report)
    if conflicts:
        lines += [f"mdiff: error MD804: {len(conflicts)} conflicts; nothing was committed:"]
        lines += [f"  {name}: {reason}" for name, reason in conflicts]
    else:
        lines.append(f"{outcome}: {_short(commit_id)}")
    _print(args, data, "\n".join(lines))
    return 1 if conflicts else 0


# ---------------------------------------------------------------- push
def add_push(sub) -> None:
    p = sub.add_parser("push", help="send a branch's new commits to a remote",
                       description="Upload the commits of BRANCH (default: the current branch) that REMOTE lacks, "
                                   "then move REMOTE's BRANCH to it by compare-and-swap. Refused (MD803, exit 1) "
                                   "when REMOTE's branch has commits BRANCH lacks — pull first — unless --force, or "
                                   "when another pusher moved it meanwhile. Local tags REMOTE lacks are created there.")
    p.add_argument("remote", nargs="?", default="origin", metavar="REMOTE", help="default: origin")
    p.add_argument("branch", nargs="?", default=None, metavar="BRANCH",
                   help="the branch to push (default: the current branch)")
    p.add_argument("--force", action="store_true", help="move REMOTE's branch even when that drops commits from it")
    _transfer_options(p)
    _snapshots_option(p, "push")
    _common(p)
    p.set_defaults(run=run_push)


def run_push(args) -> int:
    from mdiff.repo.transfer import push

    repo = _repo(args)
    branch = args.branch or repo.head()[0]
    if branch is None:
        raise UsageError("HEAD is detached: name the branch to push")
    bar = ProgressBar("push", enabled=False if args.quiet else None)
    try:
        report = push(repo, args.remote, branch, args.force, _options(args), bar, args.snapshots)
    finally:
        bar.close()
    data = {"remote": report.remote, "branch": report.branch, "before": report.before, "after": report.after,
            "commits": report.commits, "bytes": report.bytes, "forced": report.forced, "tags": report.tags,
            "snapshots": report.snapshots, "snapshot_bytes": report.snapshot_bytes}
    moved = ("up to date" if report.before == report.after
             else f"{_short(report.before)} -> {_short(report.after)}{' (forced)' if report.forced else ''}")
    _print(args, data, f"pushed {len(report.commits)} commits ({report.bytes} bytes) to {report.remote}: "
                       f"{report.branch} {moved}" + "".join(f"\n  new tag {t}" for t in report.tags))
    return 0


REGISTER = [add_remote, add_clone, add_fetch, add_pull, add_push]
