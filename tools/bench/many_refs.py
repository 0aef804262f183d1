#!/usr/bin/env python3
"""A remote with many refs (issue 31): clone of an S3 remote holding N branches, on moto's standalone server.

The remote holds one commit and N branches naming it (written straight into the bucket). The clone is timed:
wall, CPU of this process (mdiff), and CPU of moto's server (its own process, read from /proc); then a fetch from
the unchanged remote (a re-fetch), timed the same way. Each run is its own fresh bucket prefix; the load average
is printed. (All N refs name one commit: one ETag, so since issue 31 the clone reads one ref; a remote whose
branches name N different commits would read N, as a clone did before.)

    python tools/bench/many_refs.py [--refs 3000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import s3fs

    from mdiff.repo import Repository
    from mdiff.repo.remotes import add_remote
    from mdiff.repo.transfer import fetch, push

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    fs = s3fs.S3FileSystem(**options)
    for _ in range(100):  # the server's start
        try:
            fs.mkdir("bench")
            break
        except Exception:
            time.sleep(0.1)
    walls, cpus, served = [], [], []
    again: list[tuple[float, float, float]] = []  # the re-fetch's (wall, mdiff CPU, moto CPU)
    try:
        for run in range(args.repeat):
            with tempfile.TemporaryDirectory() as folder:
                tmp = Path(folder)
                alice = Repository.init(tmp / "alice")
                commit = alice.commit({"w": np.ones(4, np.float32)}, "root", author="Bench <b@example.org>",
                                      date="2026-01-01T00:00:00Z")
                assert commit is not None
                url = f"s3://bench/run{run}"
                add_remote(alice, "origin", url)
                push(alice, "origin", "main", options=options)
                fs.pipe({f"bench/run{run}/.mdiff/refs/heads/b{i:06d}": (commit + "\n").encode() for i in range(args.refs)})
                load = os.getloadavg()[0]
                wall, cpu, server_cpu = time.monotonic(), _cpu(), _process_cpu(server.pid)
                bob, report = Repository.clone(url, tmp / "bob", options)
                walls.append(time.monotonic() - wall)
                cpus.append(_cpu() - cpu)
                served.append(_process_cpu(server.pid) - server_cpu)
                assert len(report.branches) == args.refs + 1
                wall, cpu, server_cpu = time.monotonic(), _cpu(), _process_cpu(server.pid)
                assert fetch(bob, "origin", options=options).branches == {}
                again.append((time.monotonic() - wall, _cpu() - cpu, _process_cpu(server.pid) - server_cpu))
                print(f"run {run + 1}: {args.refs:,} refs cloned in {walls[-1]:.2f} s wall; CPU: mdiff {cpus[-1]:.2f} s, "
                      f"moto {served[-1]:.2f} s (load {load:.1f}); re-fetch {again[-1][0]:.2f} s wall; CPU: mdiff "
                      f"{again[-1][1]:.2f} s, moto {again[-1][2]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        server.terminate()
        server.wait()
    print(f"median of {args.repeat}: {statistics.median(walls):.2f} s wall; CPU: mdiff {statistics.median(cpus):.2f} s, "
          f"moto's server {statistics.median(served):.2f} s; re-fetch {statistics.median(a[0] for a in again):.2f} s wall, "
          f"CPU: mdiff {statistics.median(a[1] for a in again):.2f} s, moto {statistics.median(a[2] for a in again):.2f} s")


if __name__ == "__main__":
    main()
