"""Remote commands (SPEC.md §13.8): remote, clone, fetch, pull, push. Each is a thin layer over
mdiff.repo.remotes and mdiff.repo.transfer. Storage options (credentials among them) are taken from
--storage-option and the environment for the call only: never stored, printed or logged."""

from __future__ import annotations

import json

from mdiff.cli.options import add_json, add_merge_options, add_quiet, add_repository_options, add_storage_option, repository_of, storage_options_of
from mdiff.cli.output import count, format_size, print_result, quiet
from mdiff.cli.progress import ProgressBar
from mdiff.cli.registry import Commands
from mdiff.cli.usage import UsageError

COMMANDS = Commands()


def _transfer_options(p) -> None:
    add_storage_option(p)
    add_quiet(p)


def _snapshots_option(p, verb: str) -> None:
    p.add_argument("--snapshots", action="store_true",
                   help=f"{verb} the snapshots (SPEC.md §13.5) of these commits too, so that checkouts start there")


def _short(commit_id: str | None) -> str:
    return commit_id[:12] if commit_id else "(none)"


# ---------------------------------------------------------------- remote
def remote_arguments(p) -> None:
    p.add_argument("action", nargs="?", default="list", choices=["list", "add", "remove"], help="default: list")
    p.add_argument("name", nargs="?", metavar="NAME", help="the remote's name (add, remove), e.g. origin")
    p.add_argument("url", nargs="?", metavar="URL", help="add: where the remote repository is (no credentials in it)")
    add_repository_options(p)


@COMMANDS.command("remote", help="list, add or remove remotes", arguments=remote_arguments,
                  description="Name the repositories this one fetches from and pushes to. A remote is a "
                              "repository (SPEC.md §13.1 layout) at an fsspec URL: a local path or file://, "
                              "s3://bucket/prefix (s3fs; also MinIO, R2 and other S3 APIs through their endpoint "
                              "URL), or another fsspec protocol (untested). URLs never hold credentials.")
def run_remote(args) -> int:
    from mdiff.repo.remotes import add_remote as add, remote_names, remote_url, remove_remote

    repo = repository_of(args)
    if args.action == "add":
        if not args.name or not args.url:
            raise UsageError("mdiff remote add NAME URL")
        add(repo, args.name, args.url)
        print_result(args, {"added": args.name, "url": remote_url(repo, args.name)},
               f"added remote {args.name}: {remote_url(repo, args.name)}")
    elif args.action == "remove":
        if not args.name or args.url:
            raise UsageError("mdiff remote remove NAME")
        remove_remote(repo, args.name)
        print_result(args, {"removed": args.name}, f"removed remote {args.name}")
    else:
        remotes = {name: remote_url(repo, name) for name in remote_names(repo)}
        if args.json:
            print(json.dumps({"remotes": remotes}))
        for name, url in remotes.items():
            if not args.json:
                print(f"{name}\t{url}")
    return 0


# ---------------------------------------------------------------- clone
def clone_arguments(p) -> None:
    p.add_argument("url", metavar="URL", help="the remote: a local path, file://…, s3://bucket/prefix, …")
    p.add_argument("directory", nargs="?", default=None, metavar="DIR",
                   help="the new repository's folder (default: the URL's last name)")
    _transfer_options(p)
    _snapshots_option(p, "copy")
    add_json(p)


@COMMANDS.command("clone", help="copy a remote repository into a new folder", arguments=clone_arguments,
                  description="Make DIR (default: the URL's last name) a repository with URL as its remote "
                              "'origin', fetch every commit (each verified against its sha256) and make the "
                              "remote's current branch the local one.")
def run_clone(args) -> int:
    from mdiff.repo import Repository

    with ProgressBar.of(args, "clone") as bar:
        repo, report = Repository.clone(args.url, args.directory, storage_options_of(args), bar, args.snapshots)
    branch, head = repo.head()
    print_result(args, {"repository": str(repo.dir), "branch": branch, "commit": head, "commits": len(report.commits),
                  "bytes": report.bytes},
           f"cloned {args.url} into {repo.root}: {count(len(report.commits), 'commit')} ({format_size(report.bytes)}), "
           f"branch {branch} at {_short(head)}")
    return 0


# ---------------------------------------------------------------- fetch
def fetch_arguments(p) -> None:
    p.add_argument("remote", nargs="?", default="origin", metavar="REMOTE", help="default: origin")
    _transfer_options(p)
    _snapshots_option(p, "fetch")
    add_repository_options(p)


def _fetch_data(report) -> dict:
    return {"remote": report.remote, "commits": report.commits, "bytes": report.bytes,
            "branches": {b: {"before": old, "after": new} for b, (old, new) in report.branches.items()},
            "tags": report.tags, "tags_kept": report.tags_kept, "snapshots": report.snapshots,
            "snapshot_bytes": report.snapshot_bytes}


def _fetch_lines(report) -> list[str]:
    lines = [f"fetched {count(len(report.commits), 'commit')} ({format_size(report.bytes)}) from {report.remote}"]
    for branch, (old, new) in report.branches.items():
        lines.append(f"  {report.remote}/{branch}: {_short(old)} -> {_short(new)}" if new
                     else f"  {report.remote}/{branch}: deleted on the remote")
    lines += [f"  new tag {name} at {_short(target)}" for name, target in report.tags.items()]
    lines += [f"  tag {name}: the local one differs and is kept" for name in report.tags_kept]
    if report.snapshots:
        lines.append(f"  {count(len(report.snapshots), 'snapshot')} ({format_size(report.snapshot_bytes)})")
    return lines


@COMMANDS.command("fetch", help="copy a remote's new commits and branches", arguments=fetch_arguments,
                  description="Copy the commits REMOTE has and this repository lacks (each verified against its "
                              "sha256 before it is filed: MD800), then set the remote-tracking branches "
                              "REMOTE/BRANCH and create REMOTE's tags missing here. A broken or hostile remote "
                              "leaves this repository as it was.")
def run_fetch(args) -> int:
    repo = repository_of(args)
    with ProgressBar.of(args, "fetch") as bar:
        report = repo.fetch(args.remote, storage_options_of(args), bar, args.snapshots)
    print_result(args, _fetch_data(report), "\n".join(_fetch_lines(report)))
    return 0


# ---------------------------------------------------------------- pull
def pull_arguments(p) -> None:
    p.add_argument("remote", nargs="?", default="origin", metavar="REMOTE", help="default: origin")
    p.add_argument("branch", nargs="?", default=None, metavar="BRANCH",
                   help="the remote's branch to bring in (default: the current branch's name)")
    add_merge_options(p)
    p.add_argument("--ff-only", action="store_true",
                   help="only fast-forward: refuse (MD804) when the branches have diverged")
    p.add_argument("-m", "--message", default=None, help="for a merge: the commit message")
    _transfer_options(p)
    add_repository_options(p)


@COMMANDS.command("pull", help="fetch, then bring a remote branch into the current one", arguments=pull_arguments,
                  description="Fetch REMOTE, then bring REMOTE/BRANCH (default: the current branch's name) into "
                              "the current branch: a fast-forward when it only adds commits, else a three-way merge "
                              "as `mdiff merge` makes it (SPEC.md §13.7; a conflict stops it: nothing is committed, "
                              "exit 1; --strategy resolves conflicts, --all applies it to every parameter, "
                              "--ff-only refuses to merge).")
def run_pull(args) -> int:
    from mdiff.cli.merge_report import merge_data, merge_lines

    if args.everything and args.strategy is None:
        raise UsageError("--all applies a strategy to every parameter: give one, e.g. --strategy average --all")
    repo = repository_of(args)
    current, _ = repo.head()
    with ProgressBar.of(args, "pull") as bar:
        report, result = repo.pull(args.remote, args.branch, args.strategy, storage_options_of(args), bar,
                                   everything=args.everything, ff_only=args.ff_only, message=args.message)
    rev = f"{args.remote}/{args.branch or current}"
    lines = _fetch_lines(report) + merge_lines(result, rev, current, args.strategy, args.everything,
                                               command="mdiff merge")
    if result.conflicts or args.json or not quiet(args):  # conflicts are an error, which -q does not silence
        print_result(args, {"fetch": _fetch_data(report), **merge_data(result)}, "\n".join(lines))
    return 1 if result.conflicts else 0


# ---------------------------------------------------------------- push
def push_arguments(p) -> None:
    p.add_argument("remote", nargs="?", default="origin", metavar="REMOTE", help="default: origin")
    p.add_argument("branch", nargs="?", default=None, metavar="BRANCH",
                   help="the branch to push (default: the current branch)")
    p.add_argument("--force", action="store_true", help="move REMOTE's branch even when that drops commits from it")
    _transfer_options(p)
    _snapshots_option(p, "push")
    add_repository_options(p)


@COMMANDS.command("push", help="send a branch's new commits to a remote", arguments=push_arguments,
                  description="Upload the commits of BRANCH (default: the current branch) that REMOTE lacks, "
                              "then move REMOTE's BRANCH to it by compare-and-swap. Refused (MD803, exit 1) "
                              "when REMOTE's branch has commits BRANCH lacks — pull first — unless --force, or "
                              "when another pusher moved it meanwhile. Local tags REMOTE lacks are created there.")
def run_push(args) -> int:
    repo = repository_of(args)
    branch = args.branch or repo.head()[0]
    if branch is None:
        raise UsageError("HEAD is detached: name the branch to push")
    with ProgressBar.of(args, "push") as bar:
        report = repo.push(args.remote, branch, args.force, storage_options_of(args), bar, args.snapshots)
    data = {"remote": report.remote, "branch": report.branch, "before": report.before, "after": report.after,
            "commits": report.commits, "bytes": report.bytes, "forced": report.forced, "tags": report.tags,
            "snapshots": report.snapshots, "snapshot_bytes": report.snapshot_bytes}
    moved = ("up to date" if report.before == report.after
             else f"{_short(report.before)} -> {_short(report.after)}{' (forced)' if report.forced else ''}")
    print_result(args, data, f"pushed {count(len(report.commits), 'commit')} ({format_size(report.bytes)}) to {report.remote}: "
                       f"{report.branch} {moved}" + "".join(f"\n  new tag {t}" for t in report.tags))
    return 0

