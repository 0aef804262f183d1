"""mdiff where users are: `import mdiff` and its commands work without POSIX-only modules (as on
Windows), the process's h5py plugin path is mdiff's to empty only while it reads, and files are
created with the permissions the umask gives, like every other tool's."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np

import mdiff

ROOT = Path(__file__).resolve().parents[1]


def test_mdiff_works_without_fcntl_resource_fork_and_pread(tmp_path):
    script = textwrap.dedent(f"""
        import multiprocessing, os, pkgutil, importlib, sys
        sys.modules["fcntl"] = None       # as on Windows: `import fcntl` raises ImportError
        sys.modules["resource"] = None
        multiprocessing.get_all_start_methods = lambda: ["spawn"]
        del os.pread, os.preadv           # as on Windows: no reading at an offset
        import numpy as np
        import mdiff, mdiff.cli.main
        for info in pkgutil.walk_packages(mdiff.__path__, "mdiff."):
            if not info.name.startswith(("mdiff.demo", "mdiff.integrations")) and not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        assert not hasattr(os, "pread") and not hasattr(os, "preadv")
        repo = mdiff.Repository.init({str(tmp_path / "r")!r})
        first = {{"w": np.arange(300_000, dtype=np.float32), "b": np.arange(5, dtype=np.int64)}}
        second = {{"w": first["w"] * 2, "b": first["b"] + 7}}
        repo.commit(first, "first", author="A")
        repo.commit(second, "second", author="A")
        for ref, state in (("HEAD", second), ("HEAD~1", first)):
            out = repo.checkout(ref)
            assert sorted(out) == ["b", "w"] and all(out[k].tobytes() == state[k].tobytes() for k in out)
        d = {str(tmp_path / "d.mdiff")!r}
        mdiff.write(d, mdiff.diff(first, second), mdiff.Commit("d"))
        with mdiff.open(d) as diff:
            out = mdiff.apply(first, diff)
        assert sorted(out) == ["b", "w"] and all(out[k].tobytes() == second[k].tobytes() for k in out)
        sys.exit(mdiff.cli.main.main(["validate", d]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout and "isolating a reader needs fork() and resource limits" in done.stderr


def test_the_h5py_plugin_path_is_emptied_only_while_mdiff_reads(tmp_path):
    import gc

    gc.collect()  # files other tests left to the collector give the path back
    before = [h5py.h5pl.get(i) for i in range(h5py.h5pl.size())]
    h5py.h5pl.append(b"/somewhere/plugins")
    try:
        mdiff.write(tmp_path / "d.mdiff", {"w": mdiff.replace(np.zeros(3))}, mdiff.Commit("d"))
        with mdiff.open(tmp_path / "d.mdiff"):
            assert h5py.h5pl.size() == 0
            assert mdiff.validate(tmp_path / "d.mdiff") == [] and h5py.h5pl.size() == 0
        assert [h5py.h5pl.get(i) for i in range(h5py.h5pl.size())] == before + [b"/somewhere/plugins"]
    finally:
        h5py.h5pl.remove(h5py.h5pl.size() - 1)


def test_files_are_created_as_the_umask_says(tmp_path):
    old = os.umask(0o022)
    try:
        repo = mdiff.Repository.init(tmp_path / "r")
        commit_id = repo.commit({"w": np.zeros(4, np.float32)}, "first", author="A")
        mdiff.write(tmp_path / "d.mdiff", {"w": mdiff.replace(np.zeros(3))}, mdiff.Commit("d"))
        repo.checkout("HEAD", tmp_path / "out.safetensors")
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "d.mdiff") == 0o644 and mode(tmp_path / "out.safetensors") == 0o644
    assert mode(repo.commit_path(commit_id)) == 0o644 and mode(repo.dir / "refs" / "heads" / "main") == 0o644
    assert mode(repo.dir) == 0o755 and mode(repo.dir / "HEAD") == 0o644


def test_reading_at_an_offset_without_pread_leaves_the_position_and_other_threads_alone(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from mdiff.hdf5walk import positional_io

    monkeypatch.delattr(os, "pread")
    monkeypatch.delattr(os, "preadv")
    data = bytes(range(256)) * 4096  # 1 MiB, every byte's value its offset mod 256
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        os.lseek(fd, 12345, os.SEEK_SET)

        def read(i):
            offset = i * 4093 % len(data)
            first, second = bytearray(1000), bytearray(3000)
            n = positional_io.preadv(fd, [first, memoryview(second)], offset)
            return positional_io.pread(fd, 5000, offset), n, bytes(first + second)

        with ThreadPoolExecutor(8) as pool:
            for i, (got, n, into) in enumerate(pool.map(read, range(400))):
                offset = i * 4093 % len(data)
                assert got == data[offset:offset + 5000]
                assert n == min(4000, len(data) - offset) and into[:n] == data[offset:offset + n]
        assert positional_io.pread(fd, 10, len(data) - 4) == data[-4:]
        assert positional_io.pread(fd, 10, len(data) + 4) == b""
        tail = bytearray(8)
        assert positional_io.preadv(fd, [tail], len(data) - 3) == 3 and tail == data[-3:] + bytes(5)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12345
    finally:
        os.close(fd)
