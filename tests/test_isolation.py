"""Reading in a child process with limits (SPEC.md §8.5): a crash, hang or runaway allocation in
the HDF5 library becomes the finding MD515, never a dead caller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.engines import apply_update
from mdiff.isolation import Isolation, IsolationFailure, Worker, crashes_here, run_isolated, task
from mdiff.validation import validate


def _sleep_forever():
    time.sleep(60)


def _allocate(n: int):
    return len(bytearray(n))


def _fail():
    raise mdiff.InvalidFileError("MD100", "typed errors cross the process boundary", "x")


def test_results_and_typed_errors_come_back_from_the_child():
    assert run_isolated(_allocate, 10) == 10
    with pytest.raises(mdiff.InvalidFileError) as info:
        run_isolated(_fail)
    assert (info.value.code, info.value.message, info.value.path) == ("MD100", "typed errors cross the process boundary", "x")
    with pytest.raises(FileNotFoundError) as missing:
        run_isolated(open, "/nonexistent/mdiff")
    assert missing.value.filename == "/nonexistent/mdiff"


class _RunsCodeWhenUnpickled:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _answers_a_pickle(marker):
    return _RunsCodeWhenUnpickled(marker)



def test_a_child_answers_data_only_never_an_object_to_unpickle(tmp_path):
    """A child whose memory a crafted file corrupted must not get to run code in its parent."""
    with pytest.raises(IsolationFailure) as info:
        run_isolated(_answers_a_pickle, tmp_path / "ran")
    assert "not JSON" in info.value.reason and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("message,reason", [
    (b"\x80\x04K\x01.", "malformed"),  # a pickle
    (b"[1, 2]", "malformed"),
    (b'{"error": ["dict", "MD100", "x", null]}', "malformed error"),
    (b'{"error": ["InvalidFileError", "MD999", "x", null]}', "malformed error"),
    (b'{"failed": "ValueError: boom"}', "failed: ValueError: boom"),
    (b"[" * 100000, "malformed"),
])
def test_a_malformed_answer_is_a_failure(message, reason):
    from mdiff.isolation import _answer

    with pytest.raises(IsolationFailure) as info:
        _answer(message, Isolation())
    assert reason in info.value.reason


@pytest.mark.parametrize("fn,args,reason", [
    (crashes_here, (), "SIGSEGV"),
    (_sleep_forever, (), "no answer within 1 s"),
    (_allocate, (3 * 2**30,), "memory"),
])
def test_crashes_hangs_and_allocations_become_failures(fn, args, reason):
    with pytest.raises(IsolationFailure) as info:
        run_isolated(fn, *args, limits=Isolation(timeout_s=1, memory_bytes=2**30))
    assert reason in info.value.reason


def test_validate_in_isolation_reports_md515_when_the_reader_dies(tmp_path, monkeypatch):
    path = tmp_path / "ok.mdiff"
    mdiff.write(path, {"w": mdiff.replace(np.arange(3, dtype=np.float32))})
    assert validate(path, isolation=Isolation()) == validate(path) == []
    monkeypatch.setattr(sys.modules["mdiff.validation"], "_validate", lambda *a: crashes_here())  # the forked child inherits it
    findings = validate(path, isolation=Isolation(timeout_s=20))
    assert [(f.code, f.severity) for f in findings] == [("MD515", "error")] and "SIGSEGV" in findings[0].message


def test_the_command_line_isolates_validation_by_default(tmp_path):
    (tmp_path / "junk.mdiff").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    proc = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "validate", str(tmp_path / "junk.mdiff"), "--json",
                           "--timeout", "30", "--limit", "max_objects=10"], capture_output=True, text=True)
    assert proc.returncode == 2 and json.loads(proc.stdout)["findings"][0]["code"] == "MD100"
    bad = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "validate", "x", "--limit", "max_nothing=1"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "max_objects" in bad.stderr


def test_limits_from_the_command_line_apply(tmp_path):
    path = tmp_path / "big.mdiff"
    mdiff.write(path, {"w": mdiff.replace(np.zeros(1000, np.float32))})
    proc = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "validate", str(path), "--json",
                           "--limit", "max_elements=100"], capture_output=True, text=True)
    assert proc.returncode == 1 and [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["MD508", "MD508"]  # the dataset and the shape its update declares (§8.3, §12.1)


def _apply_one(path, base):
    with mdiff.open(path) as diff:
        return apply_update(diff["w"], base, "w").tobytes()


def _apply_one_hex(path, base):
    return _apply_one(path, base).hex()  # what crosses from a child is JSON


def test_an_isolated_child_reads_in_parallel_after_its_parent_did(tmp_path):
    """The child inherits the parent's thread pool without its threads; it must make its own."""
    rng = np.random.default_rng(0)
    old = {"w": rng.standard_normal((2048, 1024)).astype(np.float32)}  # 8 MiB: inflated on the pool
    new = {"w": old["w"] + np.float32(1e-3)}
    path = tmp_path / "d.mdiff"
    mdiff.write(path, mdiff.diff(old, new), mdiff.Commit("m"))
    assert _apply_one(path, old["w"]) == new["w"].tobytes()  # the parent's pool is running now
    assert run_isolated(_apply_one_hex, path, old["w"], limits=Isolation(timeout_s=30)) == new["w"].tobytes().hex()


REGRESSIONS = Path(__file__).parent / "fuzz" / "regressions"
# an open libhdf5 2.0.0 bug (known.py: hdf5-btree2-header-fields): it crashes where a 2 GiB allocation succeeds
# A file libhdf5 dies on (SIGSEGV: a name index record marked shared), with the walk's own check of those records
# (§8.1) turned off — in this process, and so in the children it forks, or in the command's own process: every crash
# the fuzzers found is now refused before libhdf5 reads it, and isolation is for the one nobody has found yet.
LIBHDF5_CRASH = Path(__file__).parent.parent / "conformance/hostile/MD513-dense_attribute_record_marked_shared/diff.mdiff"
UNCHECKED = "import mdiff.hdf5walk.object_header as h; h.HeaderReader._attribute_records = lambda self, names: None"
ROOMY = str(8 << 30)  # bytes of address space the child gets


@pytest.fixture
def unchecked(monkeypatch):
    from mdiff.hdf5walk.object_header import HeaderReader

    monkeypatch.setattr(HeaderReader, "_attribute_records", lambda self, names: None)


def _mdiff(*args: str) -> list[str]:
    """The command line, run with the check above turned off."""
    return [sys.executable, "-c", f"{UNCHECKED}; from mdiff.cli.main import main; raise SystemExit(main())", *args]


def test_the_crashing_file_is_refused_before_libhdf5_reads_it():
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(LIBHDF5_CRASH)
    assert info.value.code == "MD513" and "shared" in info.value.message


def test_open_with_isolation_turns_a_libhdf5_crash_into_md515(unchecked):
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(LIBHDF5_CRASH, isolation=Isolation(timeout_s=30, memory_bytes=8 << 30))
    assert info.value.code == "MD515" and ("SIGFPE" in info.value.message or "SIGSEGV" in info.value.message)


def test_open_with_isolation_raises_the_file_s_own_error_and_opens_good_files(tmp_path):
    bad = REGRESSIONS / "untyped-valueerror-format-version-4301-digits.mdiff"
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(bad, isolation=Isolation(timeout_s=30))
    plain = pytest.raises(mdiff.InvalidFileError, mdiff.open, bad).value
    assert (info.value.code, info.value.message) == (plain.code, plain.message)
    good = tmp_path / "good.mdiff"
    mdiff.write(good, {"w": mdiff.replace(np.arange(3, dtype=np.float32))}, mdiff.Commit("m"))
    with mdiff.open(good, isolation=Isolation(timeout_s=30)) as diff:
        assert apply_update(diff["w"], None, "w").tolist() == [0, 1, 2]


def test_apply_on_the_command_line_reads_a_diff_s_metadata_in_a_child_first(tmp_path):
    from mdiff.checkpoints import save_checkpoint

    base = tmp_path / "base.safetensors"
    save_checkpoint(base, {})
    out = tmp_path / "out.safetensors"
    run = subprocess.run(_mdiff("apply", str(base), str(LIBHDF5_CRASH), "-o", str(out), "--json", "-q", "--memory", ROOMY),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and run.returncode > 0  # an exit code, not a signal
    assert "MD515" in run.stderr + run.stdout and not out.exists()


def test_dump_reads_a_stranger_s_file_in_a_child_by_default():
    run = subprocess.run(_mdiff("dump", str(LIBHDF5_CRASH), "--json", "--memory", ROOMY),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode > 0 and "MD515" in run.stderr + run.stdout


CORPUS = Path(__file__).parent.parent / "conformance"
EXACT_CASES = [case for case in json.loads((CORPUS / "manifest.json").read_text())["cases"]
               if case["family"] == "valid" and case["expect"].get("apply") == "result"
               and case["expect"].get("tolerance") is None]


@pytest.fixture
def libhdf5_only_in_children(monkeypatch):
    """A tripwire: this process handing a file to libhdf5 fails the test; a forked child may."""
    import h5py

    parent, real = os.getpid(), h5py.File

    def opened(*args, **kwargs):
        assert os.getpid() != parent, f"the parent handed {args[0]!r} to libhdf5"
        return real(*args, **kwargs)

    monkeypatch.setattr(h5py, "File", opened)


@pytest.mark.parametrize("case", EXACT_CASES, ids=[c["id"] for c in EXACT_CASES])
def test_an_isolated_open_reads_every_valid_case_without_libhdf5_in_this_process(case, tmp_path,
                                                                                   libhdf5_only_in_children):
    from safetensors.numpy import load_file

    files = {k: CORPUS / v for k, v in case["files"].items()}
    out = tmp_path / "out.safetensors"
    mdiff.apply_files(files["base"], files["diff"], out, isolation=Isolation(timeout_s=60))
    got, want = load_file(out), load_file(files["result"])
    assert sorted(got) == sorted(want)
    assert all(got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes() for k in want)
    with mdiff.open(files["diff"], isolation=Isolation(timeout_s=60)) as diff:
        assert diff.isolated
        assert sorted({x.code for x in diff.warnings}) == sorted(case["expect"]["warnings"])


def test_a_file_changed_after_the_child_read_it_is_not_read(tmp_path, monkeypatch):
    from mdiff.format import reader

    path = tmp_path / "d.mdiff"
    mdiff.write(path, mdiff.diff({"w": np.zeros(4, np.float32)}, {"w": np.ones(4, np.float32)}), mdiff.Commit("m"))
    vetted = reader.vet(path, mdiff.hdf5walk.limits.DEFAULT_LIMITS, Isolation(timeout_s=30))
    os.utime(path, ns=(1, 1))
    with pytest.raises(mdiff.InvalidFileError) as info:
        reader.DiffFile(path, vetted=vetted)
    assert info.value.code == "MD515" and "changed" in info.value.message


KILLED_AFTER_AN_ISOLATED_OPEN = r'''
import os, signal, sys, numpy as np, mdiff
from mdiff.isolation import Isolation
mdiff.write(sys.argv[1], mdiff.diff({"w": np.zeros(4, np.float32)}, {"w": np.ones(4, np.float32)}), mdiff.Commit("m"))
mdiff.open(sys.argv[1], isolation=Isolation()).close()
os.kill(os.getpid(), signal.SIGKILL)
'''


def test_the_reading_child_of_a_killed_process_goes_with_it(tmp_path):
    """Else it holds the killed process's pipes open: whoever waits for their end waits forever."""
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_AN_ISOLATED_OPEN, str(tmp_path / "d.mdiff")],
                          capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])))
    assert proc.returncode == -9


def test_a_worker_runs_tasks_of_modules_imported_after_it_was_forked(tmp_path):
    """A worker forked by an open (mdiff.format.reader) later validates (mdiff.validation)."""
    script = r'''
import sys, numpy as np, mdiff
from mdiff.format.reader import open_diff
from mdiff.isolation import Isolation
mdiff.write(sys.argv[1], mdiff.diff({"w": np.zeros(4, np.float32)}, {"w": np.ones(4, np.float32)}), mdiff.Commit("m"))
assert "mdiff.validation" not in sys.modules
open_diff(sys.argv[1], isolation=Isolation()).close()
from mdiff.validation import validate
print(validate(sys.argv[1], isolation=Isolation()))
'''
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "d.mdiff")], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])))
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr


# ---------------------------------------------------------------- the Worker child's garbage (issue 31.3)

_GC_LOGGED: list[str] = []  # in the Worker's child: the file its collections are logged to


@task("test-gc-cycles")
def _cycles(readable, shown: str, log: str, count: int) -> list:
    """In the child: ``count`` reference cycles made and dropped (garbage only a collection frees), each
    collection from now on logged to ``log`` as how many objects it freed."""
    import gc

    if not _GC_LOGGED:
        _GC_LOGGED.append(log)

        def logged(phase: str, info: dict) -> None:
            if phase == "stop":
                with open(log, "a") as out:
                    out.write(f"{info['collected']}\n")

        gc.callbacks.append(logged)
    for _ in range(count):
        cycle: list = []
        cycle.append(cycle)
    return [gc.isenabled(), gc.get_freeze_count() > 0]


@task("test-gc-log")
def _gc_log(readable, shown: str, log: str) -> list:
    with open(log) as lines:
        return [int(line) for line in lines]


def test_a_worker_child_collects_a_tasks_garbage_when_the_next_request_comes(tmp_path):
    """Not as soon as it answered: the first collection after a walk of 10^5 parameters looks at its millions of
    objects (0.4 s), which a command that sends one file (apply, validate) never needs; nor ever at what the parent
    held when it forked (frozen). The next request's task runs once the garbage is freed (memory does not grow)."""
    log = tmp_path / "gc.log"
    log.touch()
    worker = Worker(Isolation())
    fd = os.open(log, os.O_RDONLY)
    try:
        assert worker.call("test-gc-cycles", fd, log, str(log), 50_000) == [False, True]
        assert worker.call("test-gc-log", fd, log, str(log)) == [50_000]  # collected when this request came
        assert worker.call("test-gc-cycles", fd, log, str(log), 20_000) == [False, True]
    finally:
        os.close(fd)
        worker.close()  # the parent goes: the child ends without collecting what the last task left
    assert [int(line) for line in log.read_text().split()] == [50_000]


# ---------------------------------------------------------------- a time limit that grows with the work (issue 31.3)

def _many_parameters(path: Path, n: int) -> None:
    with mdiff.DiffWriter(path, mdiff.Commit("many", date="2026-01-01T00:00:00Z")) as writer:
        for i in range(n):
            old = np.full(4, i, np.float32)
            writer.add(f"layer.{i:05d}.w", mdiff.dense(old, old + 1))


def test_the_time_limit_is_a_base_and_an_allowance_per_megabyte(tmp_path):
    from mdiff.isolation import DEFAULT_SECONDS_PER_MB, DEFAULT_TIMEOUT_S, input_bytes

    assert Isolation().time_limit(0) == DEFAULT_TIMEOUT_S == 120
    assert Isolation().time_limit(70_000_000) == 120 + 70 * DEFAULT_SECONDS_PER_MB == 260  # a 10^5-parameter diff
    assert Isolation(timeout_s=1, seconds_per_mb=0.5).time_limit(4_000_000) == 3
    (tmp_path / "a").write_bytes(bytes(1000))
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "b").write_bytes(bytes(300))
    os.mkfifo(tmp_path / "folder" / "fifo")  # not a regular file: counts nothing, and is not opened
    assert input_bytes(tmp_path / "a", tmp_path / "folder", tmp_path / "missing") == 1300


def test_a_large_valid_file_is_not_md515_for_its_size(tmp_path):
    """The limit grows with the file: a base too small for any walk, and an allowance per megabyte, pass a file
    of 2,000 parameters that the base alone refuses."""
    path = tmp_path / "many.mdiff"
    _many_parameters(path, 2000)
    megabytes = path.stat().st_size / 1e6
    assert megabytes > 0.5
    refused = validate(path, isolation=Isolation(timeout_s=0.001, seconds_per_mb=0))
    assert [f.code for f in refused] == ["MD515"] and "no answer within 0.001 s" in refused[0].message
    assert validate(path, isolation=Isolation(timeout_s=0.001, seconds_per_mb=120 / megabytes)) == []
    with mdiff.open(path, isolation=Isolation(timeout_s=0.001, seconds_per_mb=120 / megabytes)) as diff:
        assert len(diff) == 2000 and diff.isolated
    for extra, code in ((["--timeout-per-mb", str(120 / megabytes)], 0), (["--timeout-per-mb", "0"], 1)):
        done = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "validate", "--timeout", "0.001", *extra, str(path)],
                              capture_output=True, text=True)
        assert done.returncode == code and ("MD515" in done.stdout) == bool(code), done.stdout + done.stderr


def test_a_hang_is_caught_within_the_limit_the_work_allows(tmp_path, monkeypatch):
    with pytest.raises(IsolationFailure) as info:
        run_isolated(_sleep_forever, limits=Isolation(timeout_s=0.5, seconds_per_mb=1), work_bytes=1_000_000)
    assert "no answer within 1.5 s" in info.value.reason
    path = tmp_path / "few.mdiff"
    _many_parameters(path, 3)
    monkeypatch.setattr(sys.modules["mdiff.validation"], "_validate", lambda *a: time.sleep(60))  # the child inherits it
    limits = Isolation(timeout_s=1, seconds_per_mb=1)
    start = time.monotonic()
    found = validate(path, isolation=limits)
    assert [f.code for f in found] == ["MD515"] and f"no answer within {limits.time_limit(path.stat().st_size):g} s" in found[0].message
    assert time.monotonic() - start < 30


def test_apply_forks_the_reading_child_before_it_reads_the_bases_header(tmp_path, monkeypatch):
    """The child then shares none of the header's 10^5-entry structures: the parent's first writes to them copy no
    page (at 10^5 parameters ~23,000 fewer page faults in the parent), and the bytes written are the same."""
    from mdiff.checkpoints import safetensors
    from mdiff.checkpoints import save_checkpoint
    from mdiff.isolation import _WORKERS

    base = {f"w.{i}": np.full(4, i, np.float32) for i in range(20)}
    new = {name: value + 1 for name, value in base.items()}
    save_checkpoint(tmp_path / "base.safetensors", base)
    mdiff.write(tmp_path / "d.mdiff", mdiff.diff(base, new), mdiff.Commit("m", date="2026-01-01T00:00:00Z"))
    events: list[str] = []
    real_start, real_parse = Worker._start, safetensors._parse_file
    monkeypatch.setattr(Worker, "_start", lambda self: events.append("fork") or real_start(self))
    monkeypatch.setattr(safetensors, "_parse_file", lambda *args: events.append("header") or real_parse(*args))
    isolation = Isolation(timeout_s=299.0)  # a worker of its own, forked in this test
    try:
        mdiff.apply_files(tmp_path / "base.safetensors", tmp_path / "d.mdiff", tmp_path / "out.safetensors",
                          isolation=isolation)
    finally:
        worker = _WORKERS.pop(isolation, None)
        if worker is not None:
            worker.close()
    assert events == ["fork", "header"]
    save_checkpoint(tmp_path / "expected.safetensors", new)
    assert (tmp_path / "out.safetensors").read_bytes() == (tmp_path / "expected.safetensors").read_bytes()
