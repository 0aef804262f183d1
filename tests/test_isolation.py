"""Reading in a child process with limits (SPEC.md §8.5): a crash, hang or runaway allocation in
the HDF5 library becomes the finding MD515, never a dead caller."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.isolation import Isolation, IsolationFailure, crashes_here, run_isolated
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
    assert info.value.code == "MD100"


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
    assert proc.returncode == 1 and [f["code"] for f in json.loads(proc.stdout)["findings"]] == ["MD508"]


def _apply_one(path, base):
    with mdiff.open(path) as diff:
        return diff["w"].apply(base, "w").tobytes()


def test_an_isolated_child_reads_in_parallel_after_its_parent_did(tmp_path):
    """The child inherits the parent's thread pool without its threads; it must make its own."""
    rng = np.random.default_rng(0)
    old = {"w": rng.standard_normal((2048, 1024)).astype(np.float32)}  # 8 MiB: inflated on the pool
    new = {"w": old["w"] + np.float32(1e-3)}
    path = tmp_path / "d.mdiff"
    mdiff.write(path, mdiff.diff(old, new), mdiff.Commit("m"))
    assert _apply_one(path, old["w"]) == new["w"].tobytes()  # the parent's pool is running now
    assert run_isolated(_apply_one, path, old["w"], limits=Isolation(timeout_s=30)) == new["w"].tobytes()


REGRESSIONS = Path(__file__).parent / "fuzz" / "regressions"
LIBHDF5_CRASH = REGRESSIONS / "crash-hdf5-btree2-header-type-0-null-deref.mdiff"  # an open libhdf5 2.0.0 bug


def test_open_with_isolation_turns_a_libhdf5_crash_into_md515():
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(LIBHDF5_CRASH, isolation=Isolation(timeout_s=30))
    assert info.value.code == "MD515" and "SIGSEGV" in info.value.message


def test_open_with_isolation_raises_the_file_s_own_error_and_opens_good_files(tmp_path):
    bad = REGRESSIONS / "untyped-valueerror-format-version-4301-digits.mdiff"
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(bad, isolation=Isolation(timeout_s=30))
    plain = pytest.raises(mdiff.InvalidFileError, mdiff.open, bad).value
    assert (info.value.code, info.value.message) == (plain.code, plain.message)
    good = tmp_path / "good.mdiff"
    mdiff.write(good, {"w": mdiff.replace(np.arange(3, dtype=np.float32))}, mdiff.Commit("m"))
    with mdiff.open(good, isolation=Isolation(timeout_s=30)) as diff:
        assert diff["w"].apply(None, "w").tolist() == [0, 1, 2]


def test_apply_on_the_command_line_reads_a_diff_s_metadata_in_a_child_first(tmp_path):
    from mdiff.checkpoints import save_checkpoint

    base = tmp_path / "base.safetensors"
    save_checkpoint(base, {})
    out = tmp_path / "out.safetensors"
    run = subprocess.run([sys.executable, "-m", "mdiff", "apply", str(base), str(LIBHDF5_CRASH), "-o", str(out), "--json", "-q"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and run.returncode > 0  # an exit code, not a signal
    assert "MD515" in run.stderr + run.stdout and not out.exists()


def test_dump_reads_a_stranger_s_file_in_a_child_by_default():
    run = subprocess.run([sys.executable, "-m", "mdiff", "dump", str(LIBHDF5_CRASH), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode > 0 and "MD515" in run.stderr + run.stdout
