"""tools/bench/run.py --quick: the side-by-side benchmark runs end to end and reports every row.

A smoke test only: it runs into a temporary folder (never docs/) and asserts nothing about timings.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("safetensors")
pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from safetensors.numpy import save_file  # noqa: E402

# Every row the report must have, whatever the machine (tools/bench/run.py keeps these labels stable).
ROWS = [
    # targets
    "write dense diff (none) ≥ 0.8× safetensors.torch.save_file",
    "write dense diff (none) ≥ 0.8× safetensors.torch.save_file + fsync (same durability)",
    "write dense diff (none) ≥ 2× safetensors.numpy.save_file",
    "write dense diff (none) ≥ 2× safetensors.numpy.save_file + fsync (same durability)",
    "apply dense diff (none) ≤ 1.2× baseline",
    "apply dense diff (none) ≤ 1.2× baseline + fsync (same durability)",
    "apply dense diff (gzip) ≤ 1.2× baseline",
    "sparse 1% diff ≤ 1.15× ideal",
    "sparse 1% diff < the delta stored dense with zstd",
    "low_rank ≤ 1.02× ideal + 4 KiB per parameter",
    "MiniLM fp32 ≤ 1.7 bytes per parameter",
    "MiniLM bf16 ≤ 0.35 bytes per parameter",
    "MiniLM 1% of values ≤ 0.08 bytes per parameter",
    "apply peak RSS ≤ 1.25× model bytes",
    "read one parameter (none) ≤ 2× its own file",
    "read one parameter (gzip) ≤ 2× its own file",
    "checkout of commit 100 of a sparse chain ≤ 2× one full model load",
    "commit of a sharded folder ≤ 1.2× the same state from a single file",
    "commit of a sharded folder: peak RSS ≤ 1.25× (largest shard + 256 MiB)",
    "mdiff --version ≤ 0.2 s", "mdiff --help ≤ 0.2 s",
    "mdiff log of a small repository ≤ 0.5 s", "mdiff status of a small repository ≤ 0.5 s",
    # start-up
    "python -c pass (the interpreter alone)", "python -c 'import mdiff'", "mdiff log (small repository)",
    # machine limits
    "memcpy (np.copyto)", "sequential write + fsync", "sequential read (page cache)", "sha256 (hashlib, 1 core)",
    "deflate level 1 of shuffled XOR data (zlib, 1 core)",
    "first touch of memory (recently freed)", "first touch of memory (freed 3 s before: balloon)",
    # write (fp32 and bf16 tables)
    "mdiff.write (compression none)", "mdiff.write (gzip)",
    "safetensors.torch.save_file", "safetensors.torch.save_file + fsync",
    "safetensors.numpy.save_file", "safetensors.numpy.save_file + fsync", "np.savez", "np.savez + fsync",
    # apply and its memory
    "mdiff.apply_files (dense, none)", "mdiff.apply_files (dense, gzip)",
    "baseline: safetensors load ×2, numpy add, save", "baseline + fsync",
    # sizes
    "dense fp32", "dense bf16", "sparse 1% fp32", "low_rank r=16 fp32",
    "MiniLM fp32", "MiniLM bf16", "MiniLM fp32, 1% of values",
    # read one parameter; chain checkout
    "one parameter of the large diff (none)", "the same parameter from its own .mdiff (none)",
    "one parameter of the large diff (gzip)", "the same parameter from its own .mdiff (gzip)",
    "the same parameter from its own .safetensors",
    "Repository.checkout of the chain's last commit", "safetensors.numpy.load_file of the full model",
    "Repository.checkout of the last commit after `mdiff snapshot` of it",
    # a sharded model folder: commit and checkout, each in a child process
    "mdiff commit FOLDER (sharded)", "mdiff commit FILE.safetensors (single file)",
    "mdiff checkout HEAD -o DIR (sharded folder)", "mdiff checkout HEAD -o FILE.safetensors (single file)",
]


def bench_module(name: str):
    """A module of tools/bench/ (which imports its helper modules by their plain names), imported."""
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def table_rows(markdown: str) -> set[str]:
    return {line.split("|")[1].strip() for line in markdown.splitlines() if line.startswith("| ")}


def docs_state() -> list:
    return [(p.name, p.stat().st_mtime_ns) for p in sorted((ROOT / "docs").glob("benchmarks.*"))]


def test_quick_bench_writes_every_row(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    docs_before = docs_state()
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "run.py"), "--quick", "--out-dir", str(out),
         "--workdir", str(work), "--json", str(tmp_path / "results.json")],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    md = (out / "benchmarks.md").read_text(encoding="utf-8")
    png = (out / "benchmarks.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    missing = [row for row in ROWS if row not in table_rows(md)]
    assert not missing, f"rows missing from benchmarks.md: {missing}"
    for heading in ("## Targets", "## Machine limits", "## Writing a dense diff", "## Applying a dense diff",
                    "## Peak memory of apply", "## Sizes", "## Reading one parameter", "## Checking out the end",
                    "## Committing and checking out a model folder", "## Start-up of the command line"):
        assert heading in md
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert len(results["targets"]) == 24
    for target in results["targets"]:  # each target is judged, or says why it could not be
        assert target["met"] in (True, False) or target["detail"].startswith("not measured")
    again = tmp_path / "again"  # the report and chart can be made again from the JSON alone
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "run.py"), "--from-json",
                           str(tmp_path / "results.json"), "--out-dir", str(again)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (again / "benchmarks.md").read_text(encoding="utf-8") == md
    assert (again / "benchmarks.png").exists()
    assert docs_state() == docs_before  # the smoke test never rewrites the docs


def test_speed_scale_reports_each_size_and_the_slopes(tmp_path):
    """tools/bench/speed_scale.py at two tiny sizes: a row per size, then a slope per contender."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "speed_scale.py"), "--sizes", "0.015625,0.03125",
                           "--repeat", "1", "--json", str(tmp_path / "scale.json")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = table_rows(done.stdout)
    assert sorted(r for r in rows if r[:1].isdigit()) == ["0.02", "0.03"]
    for label in ("write_diff (default settings, fsynced)", "safetensors.torch.save_file + fsync",
                  "mdiff.apply_files (default)", "baseline: safetensors load ×2, numpy add, save"):
        assert label in rows, label
    points = json.loads((tmp_path / "scale.json").read_text(encoding="utf-8"))
    assert [p["gib"] for p in points] == [0.015625, 0.03125]


def test_history_report_judges_both_targets():
    """tools/bench/history.py's report from figures given: ratios to ZipNN's chain and to loading each file."""
    history = bench_module("history")
    entry = {"write_s": 10.0, "write_cpu_s": 9.0}
    result = {"versions": 3, "checkpoint_bytes": 90_000_000, "load": [1.0, 2.0], "load_file_s": [0.1, 0.1, 0.2],
              "contenders": {"mdiff": dict(entry, bytes=90_000_000, read_s=[0.1, 0.2, 0.2], read_cpu_s=[0.1, 0.15, 0.1]),
                             "ZipNN delta chain": dict(entry, bytes=100_000_000, read_s=[0.3, 0.3, 0.3],
                                                       read_cpu_s=[0.2, 0.2, 0.2])}}
    text = history.report(result)
    assert "| mdiff | 90.0 MB | 0.900× | 10.0 s (CPU 9.0 s) | 0.20 s (0.20 s) | 0.10 s | 1.00× (2.00×) |" in text
    assert "| ZipNN delta chain | 100.0 MB | 1.000× |" in text
    assert "no larger than ZipNN's chain (16.1) | 0.900× | ≤ 1.0× | met |" in text
    assert "| worst 2.00× (version 1), median 1.00× | ≤ 1.5× | **missed** |" in text


def test_the_pipeline_bench_runs_end_to_end(tmp_path):
    """tools/bench/pipeline.py (issue 32's figures) on one 64 MiB tensor, once: every table and the three
    chains are reported (timings are not looked at)."""
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "pipeline.py"), "--tensors", "1", "--repeat",
                           "1", "--chain", "2", "--chain-tensors", "1", "--json", str(tmp_path / "figures.json")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {"commit (parent replayed)", "commit (predecessor known)", "checkout",
            "floor: a commit's required work alone", "floor: a checkout's required work alone"}
    assert table_rows(done.stdout) >= rows
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert [len(figures["race"]["trials"][op]) for op in ("mdiff_commit_predecessor", "floor_commit", "floor_checkout")] == [1, 1, 1]
    assert set(figures["medians"]) == rows
    for row in figures["medians"].values():  # each row's ratios, where the peer is on this machine
        assert (row["per_zstd"] is None) == (row["zstd"] is None) and (row["per_zipnn"] is None) == (row["zipnn"] is None)
    assert (len(figures["chain"]), len(figures["chain_distinct"]), len(figures["loop"])) == (2, 2, 2)
    assert set(figures["race"]["threads"]) == {"commit-1", "commit-all", "checkout-1", "checkout-all"}


def test_the_pipeline_predecessor_trial_starts_as_a_second_commit(tmp_path, monkeypatch):
    """pipeline.py's "predecessor known" trial: before each, its repository holds the base alone, committed at that
    very path, the cache entry says base.safetensors was committed last, and the summary of the base's state is
    kept — so the commit reads the parent's values from base.safetensors (as ZipNN's delta reads base) without a
    walk — even after a trial's commit moved HEAD and the entry on and dropped that summary."""
    pipeline = bench_module("pipeline")
    from mdiff.repo import Repository, parent_values, state_cache

    monkeypatch.setenv("MDIFF_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    base = {"w": rng.standard_normal((64, 64), np.float32)}
    save_file(base, str(tmp_path / "base.safetensors"))
    save_file({"w": base["w"] + np.float32(1e-3)}, str(tmp_path / "new.safetensors"))
    for _ in range(2):
        pipeline.reset_predecessor(tmp_path)
        repo = Repository(tmp_path / pipeline.AFTER_BASE / "repo")
        base_commit = repo.head()[1]
        assert repo.metadata(base_commit).parents == ()
        assert parent_values.recall(repo.dir) == (base_commit, str(tmp_path / "base.safetensors"), ())
        assert state_cache.recall(repo, base_commit) is not None
        pipeline.op_mdiff_commit_predecessor(tmp_path)  # moves HEAD and the entry on: the next reset puts both back
        assert parent_values.recall(repo.dir)[1] == str(tmp_path / "new.safetensors")
        assert state_cache.recall(Repository(repo.root), base_commit) is None


def test_the_pipeline_floor_deflates_the_very_chunks_of_the_commit_and_inflates_both_files(tmp_path, monkeypatch):
    """pipeline.py's floor trials do the work they stand for: they compute each commit file's very id, the commit's
    floor deflates the head commit's chunks into exactly the streams that file stores (§11's bytes), and the
    checkout's writes the parent's values."""
    import h5py

    pipeline = bench_module("pipeline")
    from mdiff.repo import Repository

    monkeypatch.setenv("MDIFF_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    base = {f"w{i}": rng.standard_normal((512, 1024), np.float32) for i in range(2)}
    save_file(base, str(tmp_path / "base.safetensors"))
    save_file({k: v + np.float32(1e-4) * rng.standard_normal(v.shape, np.float32) for k, v in base.items()},
              str(tmp_path / "new.safetensors"))
    repo = Repository.init(tmp_path / "committed")
    for name in ("base", "new"):
        repo.commit(str(tmp_path / f"{name}.safetensors"), name, date=pipeline.DATE)
    pipeline.prepare_floor(tmp_path)
    pipeline.op_floor_commit(tmp_path)
    pipeline.op_floor_checkout(tmp_path)
    stored = {}
    for role, commit in (("head", repo.head()[1]), ("parent", repo.metadata(repo.head()[1]).parents[0])):
        assert pipeline._file_id(repo.dir / "commits" / f"{commit}.mdiff") == commit  # the id §13.2 defines
        with h5py.File(repo.dir / "commits" / f"{commit}.mdiff", "r") as f:
            stored[role] = [d.id.read_direct_chunk(d.id.get_chunk_info(i).chunk_offset)[1]
                            for d in pipeline._chunked(f) for i in range(d.id.get_num_chunks())]
    assert len(stored["head"]) == 2 * 512 * 1024 * 4 // (1 << 20)
    assert (tmp_path / pipeline.FLOOR / "written.mdiff").read_bytes() == b"".join(stored["head"])
    out = np.frombuffer((tmp_path / "out.safetensors").read_bytes(), np.uint8)
    assert out.size == sum(v.nbytes for v in base.values())


def test_scale_measures_commit_and_checkout_of_a_history_of_many_parameters(tmp_path):
    """tools/bench/scale.py's `commit` and `checkout` rows at a tiny N: each run commits the model the diff makes on
    top of a commit of its base, in a fresh copy of that repository, and checks out the 2-commit history."""
    from mdiff.repo import Repository

    work = tmp_path / "work"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "scale.py"), "--counts", "64", "--ops",
                           "commit,checkout", "--modes", "cli,in-process", "--repeat", "1", "--diff-counts=",
                           "--onnx-counts=", "--work", str(work), "--json", str(tmp_path / "scale.json")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "scale.json").read_text(encoding="utf-8"))
    assert sorted(report["many"]) == ["cli checkout", "cli commit"]  # no in-process row of either
    for row in report["many"].values():
        assert row["64"]["cpu"]["median"] > 0 and row["64"]["peak"]["median"] > 0
    history = Repository(work / "history2-64")
    _, head = history.head()
    assert [history.metadata(c).message for c in (head, history.metadata(head).parents[0])] == ["version 1", "version 0"]
    trial = Repository(work / "run-commit")
    _, made = trial.head()
    assert trial.metadata(made).message == "next"
    assert trial.metadata(made).parents == (Repository(work / "history1-64").head()[1],)
