"""`mdiff view [FILE.mdiff | REV | REPO_DIR]`: a commit or a history shown in the browser — a local, read-only
server (mdiff/view/server.py, imported only here: other commands start without it) of mdiff-js's page, which
reads the commit files in the browser."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mdiff.cli.options import add_repository
from mdiff.cli.registry import Commands
from mdiff.cli.usage import UsageError

COMMANDS = Commands()


def view_arguments(p) -> None:
    p.add_argument("target", nargs="?", default=None, metavar="FILE.mdiff | REV | REPO_DIR",
                   help="a .mdiff file, a folder holding .mdiff/, or a revision of the repository (default: the "
                        "repository containing ., at HEAD; outside one, the page alone, onto which a file can be dropped)")
    add_repository(p, "the repository a REV names a commit of (default: the one containing .)")
    p.add_argument("--port", type=int, default=0, metavar="N", help="listen on 127.0.0.1:N (default: a free port)")
    p.add_argument("--no-browser", dest="browser", action="store_false", help="print the address; open no browser")


def _site(args):
    from mdiff.cli.options import store_of
    from mdiff.errors import RepositoryError
    from mdiff.repo.history import resolve
    from mdiff.repo.store import Store
    from mdiff.view import site

    target = args.target
    if target is not None and os.path.isfile(target):
        return site.file_site(Path(target))
    if target is not None and os.path.isdir(target):
        store = Store(Store.locate(target))
        store.check_format()
        return site.repository_site(store)
    try:
        store = store_of(args)
    except RepositoryError:
        if target is None:
            return site.page_site()
        raise
    return site.repository_site(store, resolve(store, target) if target is not None else None)


@COMMANDS.command("view", help="show a commit or a history in the browser (a local, read-only page)",
                  arguments=view_arguments,
                  description="Serve a page on 127.0.0.1 that shows a .mdiff file, or a repository's history (branches, "
                              "merges, tags; each commit's stored bytes next to a full checkpoint's) and any of its "
                              "commits: message, author, date, parents, meta, format version, the validation findings "
                              "with their codes, every parameter in a sortable, filterable table (update type, dtype, "
                              "shape, stored bytes, relative change), a heat map of the relative change by layer and "
                              "module, and two commits side by side. The page reads the files in the browser with "
                              "mdiff-js (nothing is uploaded); the server answers only the page's files and the commit "
                              "files shown. Opens the browser unless --no-browser; Ctrl-C stops it.")
def run_view(args) -> int:
    import secrets
    import webbrowser

    from mdiff.view.server import ViewServer
    from mdiff.view.site import PageMissing

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: a port is 0 (a free one) to 65535")
    try:
        site = _site(args)
    except PageMissing as exc:
        print(f"mdiff view: {exc}", file=sys.stderr)
        return 1
    quiet = args.quiet

    def log(line: str) -> None:
        if not quiet:
            print(f"mdiff view: {line}", file=sys.stderr, flush=True)

    try:
        server = ViewServer(site.resources, site.redirects, port=args.port, log=log, token=secrets.token_urlsafe(24))
    except OSError as exc:
        print(f"mdiff view: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}"
              + ("; choose another --port, or none for a free one" if args.port else ""), file=sys.stderr)
        return 1
    try:  # from the first line printed on, Ctrl-C stops the server: exit 0
        print(f"mdiff view: {site.description} at {server.url}  (Ctrl-C stops)", flush=True)
        if args.browser:
            webbrowser.open(server.url)
        serve_until_ctrl_c(server)
    except KeyboardInterrupt:  # before serve_until_ctrl_c took the signal over
        pass
    finally:
        server.server_close()
    print("mdiff view: stopped", flush=True)
    return 0


def serve_until_ctrl_c(server) -> None:
    """Serve on a thread of the server's own until SIGINT. The signal's handler only sets an event that this (the
    main) thread waits on: a KeyboardInterrupt raised wherever the main thread happens to be can land in a weakref
    callback or a ``__del__``, where Python prints it and carries on — a CI run saw `mdiff view` ignore Ctrl-C so,
    while serve_forever ran on the main thread and reaped its request threads."""
    import signal
    import threading

    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        serving = server.start()
        try:
            stop.wait()
        finally:
            server.shutdown()
            serving.join()
    finally:
        signal.signal(signal.SIGINT, previous)
