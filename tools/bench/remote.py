#!/usr/bin/env python3
"""What a push and a fetch move over the wire (SPEC.md §13.8), against moto's S3 server on localhost.

A byte-counting TCP relay sits between s3fs and the server, so the figures are the bytes that
crossed the socket both ways (HTTP headers included) and the connections opened. A root commit of a
synthetic model (float32, N(0, 0.02²); --mib MiB) is pushed; then a commit changing --changed of its
values a little (a sparse or dense update, as the writer chooses) is made, and its push, and a fetch
of it by a clone, are measured. The report gives each one's bytes sent and received, the commit
file's size and the ratio (wire bytes / file bytes), and the time; then what `checkout --remote`
moves: the whole first-parent line, since a commit's id is checked against all its bytes (§13.2).

    python tools/bench/remote.py [--mib 64] [--changed 0.1]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mdiff.repo import Repository  # noqa: E402
from mdiff.repo.remotes import add_remote  # noqa: E402
from mdiff.repo.transfer import clone, fetch, fetch_revision, push  # noqa: E402


class Relay:
    """127.0.0.1:<port> → target, counting the bytes each way and the connections."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.up = self.down = self.connections = 0
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self.lock:
            self.up = self.down = self.connections = 0

    def _accept(self) -> None:
        while True:
            client, _ = self.server.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, upstream, "up"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, "down"), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, direction: str) -> None:
        try:
            while data := source.recv(1 << 20):
                sink.sendall(data)
                with self.lock:
                    setattr(self, direction, getattr(self, direction) + len(data))
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="the model's size (default 64)")
    parser.add_argument("--changed", type=float, default=0.1, help="the share of values the second commit changes")
    args = parser.parse_args()

    import logging

    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    relay = Relay(port)
    options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{relay.port}"}}
    s3fs.S3FileSystem(**options).mkdir("bench")
    url = "s3://bench/repo"
    rng = np.random.default_rng(0)
    n = args.mib * (1 << 20) // 4
    weights = (rng.standard_normal(n) * 0.02).astype(np.float32)
    with tempfile.TemporaryDirectory() as work:
        repo = Repository.init(Path(work) / "local")
        add_remote(repo, "origin", url)
        repo.commit({"w": weights}, "root", author="bench", date="2026-01-01T00:00:00Z")
        push(repo, "origin", "main", options=options)
        other, _ = clone(url, Path(work) / "other", options)
        changed = rng.choice(n, int(n * args.changed), replace=False)
        weights[changed] += np.float32(1e-3)
        tip = repo.commit({"w": weights}, "step", author="bench", date="2026-01-02T00:00:00Z")
        assert tip is not None
        size = repo.commit_path(tip).stat().st_size
        print(f"model {args.mib} MiB; new commit {size} bytes ({args.changed:.0%} of values changed)")
        for name, action in (("push", lambda: push(repo, "origin", "main", options=options)),
                             ("fetch", lambda: fetch(other, "origin", options=options))):
            s3fs.S3FileSystem.clear_instance_cache()  # each as a fresh process would: a new session
            options["client_kwargs"] = dict(options["client_kwargs"])
            relay.reset()
            began = time.perf_counter()
            report = action()
            seconds = time.perf_counter() - began
            assert report.commits == [tip], report
            wire = relay.up + relay.down
            print(f"{name}: {relay.up} bytes sent, {relay.down} received, {relay.connections} connections, "
                  f"{wire / size:.4f}x the commit file, {seconds:.2f} s")
        # checkout --remote: the first-parent line moves whole (§13.2: an id is checked against all its bytes)
        line = sum(repo.commit_path(c).stat().st_size for c in repo.commit_ids())
        relay.reset()
        began = time.perf_counter()
        fetch_revision(url, "main", Path(work) / "cache", options)
        seconds = time.perf_counter() - began
        print(f"checkout --remote main (the line's {line} bytes): {relay.up + relay.down} bytes moved, "
              f"{relay.connections} connections, {(relay.up + relay.down) / line:.4f}x, {seconds:.2f} s")
    server.stop()


if __name__ == "__main__":
    main()
