#!/usr/bin/env python3
"""What a push and a fetch move over the wire (SPEC.md §13.8), against moto's S3 server on localhost.

A byte-counting TCP relay sits between s3fs and the server, so the figures are the bytes that
crossed the socket both ways (HTTP headers included) and the connections opened. A root commit of a
synthetic model (float32, N(0, 0.02²); --mib MiB) is pushed; then a commit changing --changed of its
values a little (a sparse or dense update, as the writer chooses) is made, and its push, and a fetch
of it by a clone, are measured. The report gives each one's bytes sent and received, the commit
file's size and the ratio (wire bytes / file bytes), and the time; then what `checkout --remote`
moves: the whole first-parent line, each commit fetched whole and verified (§13.2, §13.8).
Last, the remote read in place (§13.9, `Repository.open(URL)`, `checkout --remote --lazy`): one
parameter of the root commit — wire bytes (the block list's, verified against the id, included) against
that parameter's stored bytes, and requests —, and a
full checkout of the root commit in place, timed against s3fs downloading the same file.

    python tools/bench/remote.py [--mib 64] [--tensors 16] [--changed 0.1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mdiff.repo import Repository  # noqa: E402
from mdiff.repo.remotes import add_remote  # noqa: E402
from mdiff.repo.transfer import fetch, push  # noqa: E402


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
    parser.add_argument("--tensors", type=int, default=16, help="the model's tensors, of equal size (default 16)")
    parser.add_argument("--changed", type=float, default=0.1, help="the share of values the second commit changes")
    args = parser.parse_args()

    import logging

    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    # a process of its own, as a store is: in this one it would compete for the interpreter with the reader
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.05)
    relay = Relay(port)
    options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{relay.port}"}}
    s3fs.S3FileSystem(**options).mkdir("bench")
    url = "s3://bench/repo"
    rng = np.random.default_rng(0)
    n = args.mib * (1 << 20) // 4 // args.tensors
    weights = {f"layer{i:03d}.weight": (rng.standard_normal(n) * 0.02).astype(np.float32) for i in range(args.tensors)}
    with tempfile.TemporaryDirectory() as work:
        repo = Repository.init(Path(work) / "local")
        add_remote(repo, "origin", url)
        root = repo.commit(weights, "root", author="bench", date="2026-01-01T00:00:00Z")
        assert root is not None
        push(repo, "origin", "main", options=options)
        other, _ = Repository.clone(url, Path(work) / "other", options)
        for values in weights.values():
            values[rng.choice(n, int(n * args.changed), replace=False)] += np.float32(1e-3)
        tip = repo.commit(weights, "step", author="bench", date="2026-01-02T00:00:00Z")
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
        # checkout --remote: the first-parent line moves whole, each commit verified (§13.8)
        line = sum(repo.commit_path(c).stat().st_size for c in repo.commit_ids())
        relay.reset()
        began = time.perf_counter()
        Repository.fetch_revision(url, "main", Path(work) / "cache", options)
        seconds = time.perf_counter() - began
        print(f"checkout --remote main (the line's {line} bytes): {relay.up + relay.down} bytes moved, "
              f"{relay.connections} connections, {(relay.up + relay.down) / line:.4f}x, {seconds:.2f} s")
        in_place(repo, root, url, options, relay, Path(work))
    server.terminate()
    server.wait()


def in_place(repo: Repository, root: str, url: str, options: dict, relay: Relay, work: Path) -> None:
    """§13.9: one parameter of the root commit, then all of it, read in place (a fresh session each)."""
    import h5py
    import s3fs

    name = "layer001.weight"
    with repo.open_commit(root) as diff:
        where = diff.hdf5_path(name)
    with h5py.File(repo.commit_path(root), "r") as f:
        stored = sum(f[where][key].id.get_storage_size() for key in f[where])
    size = repo.commit_path(root).stat().st_size
    s3fs.S3FileSystem.clear_instance_cache()
    relay.reset()
    began = time.perf_counter()
    remote = Repository.open(url, options)
    with remote.open_state(remote.resolve("main~1")) as state:
        state.read(name)
    seconds = time.perf_counter() - began
    wire = relay.up + relay.down
    print(f"in place, one parameter of the root commit ({size} bytes; the parameter stores {stored}): "
          f"{wire} bytes on the wire ({remote.bytes_read} of the file) in {remote.requests} range requests, "
          f"{relay.connections} connections; {wire / stored:.4f}x its stored bytes, "
          f"{(wire - stored) / (1 << 20):.3f} MiB over them; {seconds:.2f} s (target: <= 1.1x + 1 MiB)")
    for turn in range(3):  # interleaved: the store's download of the file, then the checkout in place
        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem(**options)
        relay.reset()
        began = time.perf_counter()
        fs.get_file(f"bench/repo/.mdiff/commits/{root}.mdiff", str(work / "download.mdiff"))
        download, download_wire = time.perf_counter() - began, relay.up + relay.down
        (work / "download.mdiff").unlink()
        s3fs.S3FileSystem.clear_instance_cache()
        relay.reset()
        began = time.perf_counter()
        remote = Repository.open(url, options)
        remote.checkout(root, work / "out.safetensors")
        lazy = time.perf_counter() - began
        (work / "out.safetensors").unlink()
        print(f"in place, full checkout of the root commit, turn {turn + 1}: {lazy:.2f} s, {relay.up + relay.down} "
              f"bytes, {remote.requests} requests; s3fs get_file of the same file {download:.2f} s, {download_wire} "
              f"bytes: {lazy / download:.2f}x (target: <= 1.5x)")


if __name__ == "__main__":
    main()
