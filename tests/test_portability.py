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


def test_mdiff_works_without_fcntl_resource_and_fork(tmp_path):
    script = textwrap.dedent(f"""
        import multiprocessing, pkgutil, importlib, sys
        sys.modules["fcntl"] = None       # as on Windows: `import fcntl` raises ImportError
        sys.modules["resource"] = None
        multiprocessing.get_all_start_methods = lambda: ["spawn"]
        import numpy as np
        import mdiff, mdiff.cli.main
        for info in pkgutil.walk_packages(mdiff.__path__, "mdiff."):
            if not info.name.startswith(("mdiff.demo", "mdiff.integrations")) and not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        repo = mdiff.Repository.init({str(tmp_path / "r")!r})
        repo.commit({{"w": np.arange(4, dtype=np.float32)}}, "first", author="A")
        repo.commit({{"w": np.arange(4, dtype=np.float32) * 2}}, "second", author="A")
        assert (repo.checkout("HEAD")["w"] == np.arange(4) * 2).all()
        mdiff.write({str(tmp_path / "d.mdiff")!r}, mdiff.diff({{"w": np.zeros(2)}}, {{"w": np.ones(2)}}), mdiff.Commit("d"))
        sys.exit(mdiff.cli.main.main(["validate", {str(tmp_path / "d.mdiff")!r}]))
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
