"""The pool's threads: as many as MDIFF_THREADS, --threads or set_threads say (else one per core this
process may use), and the same bytes written whatever their number (SPEC.md §11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import mdiff
from mdiff import threads
from mdiff.checkpoints import save_checkpoint
from mdiff.cli.main import main
from mdiff.format.commit import Commit

ROOT = Path(__file__).resolve().parents[1]
FIXED = Commit("t", date="2026-01-01T00:00:00Z")
DATE = "2026-03-04T05:06:07Z"


def _pair() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """More chunks than the writer's window, of fp32, bf16 and int64, with edge chunks that stick out."""
    rng = np.random.default_rng(7)
    old = {"fp32": rng.standard_normal((1500, 700), dtype=np.float32),
           "bf16": rng.standard_normal((2049, 513), dtype=np.float32).astype(ml_dtypes.bfloat16),
           "i64": rng.integers(-1000, 1000, (300_001,), dtype=np.int64)}
    new = {"fp32": old["fp32"] + np.float32(1e-4) * rng.standard_normal((1500, 700), dtype=np.float32),
           "bf16": (old["bf16"].astype(np.float32) * 1.01).astype(ml_dtypes.bfloat16),
           "i64": old["i64"] + rng.integers(-1, 2, (300_001,), dtype=np.int64)}
    return old, new


@pytest.fixture
def pair_files(tmp_path):
    old, new = _pair()
    save_checkpoint(tmp_path / "old.safetensors", old)
    save_checkpoint(tmp_path / "new.safetensors", new)
    return tmp_path


def test_the_default_is_one_thread_per_core_this_process_may_use(monkeypatch):
    monkeypatch.delenv(threads.ENVIRONMENT, raising=False)
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert threads.available_cores() == expected
    assert threads.configured_threads() == expected


@pytest.mark.parametrize("n", [1, 3])
def test_mdiff_threads_sizes_the_pool_and_the_file_is_the_same(tmp_path, n):
    """A fresh process with MDIFF_THREADS=n has a pool of n threads; the diff it writes is byte for byte
    the one 1 thread writes (and the one this process writes)."""
    script = ("import sys, numpy as np, mdiff; from mdiff import threads; from tests.test_threads import _pair, FIXED\n"
              "old, new = _pair(); mdiff.write(sys.argv[1], mdiff.diff(old, new), FIXED)\n"
              "print(threads.pool_size(), getattr(threads.shared_pool(), '_max_workers', 1))")
    env = {**os.environ, threads.ENVIRONMENT: str(n), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "child.mdiff")], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(n), str(n)]
    old, new = _pair()
    with threads.threads_for(1):
        mdiff.write(tmp_path / "one.mdiff", mdiff.diff(old, new), FIXED)
    assert (tmp_path / "child.mdiff").read_bytes() == (tmp_path / "one.mdiff").read_bytes()


def test_set_threads_rebuilds_the_pool_and_the_bytes_stay(tmp_path):
    old, new = _pair()
    written = []
    for n in (1, 3, 2):
        with threads.threads_for(n):
            pool = threads.shared_pool()
            assert threads.pool_size() == n
            assert isinstance(pool, threads.Inline) if n == 1 else pool._max_workers == n
            path = tmp_path / f"{n}.mdiff"
            mdiff.write(path, mdiff.diff(old, new), FIXED)
            with mdiff.open(path) as diff:  # read back on the same pool, in parallel where n > 1
                result = mdiff.apply(old, diff)
                assert all(result[k].tobytes() == new[k].tobytes() for k in new)
            written.append(path.read_bytes())
    assert written[0] == written[1] == written[2]


def test_threads_for_puts_back_the_choice_before_it(monkeypatch):
    monkeypatch.setenv(threads.ENVIRONMENT, "5")
    assert threads.configured_threads() == 5
    with threads.threads_for(2):
        assert threads.pool_size() == 2
        with threads.threads_for(4):
            assert threads.pool_size() == 4
        assert threads.pool_size() == 2
    assert threads.configured_threads() == 5


@pytest.mark.parametrize("bad", [0, -3])
def test_set_threads_refuses_fewer_than_one(bad):
    before = threads.pool_size()
    with pytest.raises(ValueError, match=f"the number of threads must be 1 or more, not {bad}"):
        threads.set_threads(bad)
    assert threads.pool_size() == before


@pytest.mark.parametrize("bad", [2.5, "2", True])
def test_set_threads_refuses_what_is_not_a_whole_number(bad):
    with pytest.raises(TypeError, match="the number of threads is a whole number"):
        threads.set_threads(bad)


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5", " "])
def test_an_invalid_mdiff_threads_is_a_value_error_saying_what_to_write(monkeypatch, text):
    monkeypatch.setenv(threads.ENVIRONMENT, text)
    if not text.strip():  # set but empty: as if unset
        assert threads.configured_threads() == threads.available_cores()
        return
    with pytest.raises(ValueError) as raised:
        threads.configured_threads()
    assert str(raised.value) == (f"$MDIFF_THREADS: {text!r} is not a number of threads: give a whole number, 1 or "
                                 f"more, or leave it out for one per core ({threads.available_cores()} here)")


@pytest.mark.parametrize("where", ["before the command", "after the command"])
def test_cli_threads_1_writes_the_same_file_and_the_choice_ends_with_the_run(capsys, pair_files, where):
    d = pair_files
    chosen_before = threads.configured_threads()
    files = []
    for n in ("1", "3"):
        out = d / f"{n}.mdiff"
        command = ["diff", str(d / "old.safetensors"), str(d / "new.safetensors"), "-o", str(out), "--date", DATE, "-m", "m"]
        argv = ["--threads", n, *command] if where == "before the command" else [*command, "--threads", n]
        assert main(argv) == 0
        files.append(out.read_bytes())
    assert files[0] == files[1]
    assert threads.configured_threads() == chosen_before
    capsys.readouterr()
    assert main(["--threads", "1", "validate", str(d / "1.mdiff"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


@pytest.mark.parametrize("argv", [["--threads", "0", "log"], ["log", "--threads", "many"]])
def test_cli_an_invalid_threads_is_a_usage_error_saying_what_to_write(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    value = argv[argv.index("--threads") + 1]
    assert err.splitlines()[-1] == (f"mdiff: error: argument --threads: {value!r} is not a number of threads: give a "
                                    f"whole number, 1 or more, or leave it out for one per core "
                                    f"({threads.available_cores()} here)")


def test_cli_an_invalid_mdiff_threads_is_a_usage_error_before_any_work(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(threads.ENVIRONMENT, "all")
    assert main(["init", str(tmp_path / "repo")]) == 2
    assert not (tmp_path / "repo").exists()
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"mdiff: error: $MDIFF_THREADS: 'all' is not a number of threads: give a whole number, 1 or more, "
        f"or leave it out for one per core ({threads.available_cores()} here)")
    monkeypatch.setenv(threads.ENVIRONMENT, "all")
    assert main(["--threads", "2", "init", str(tmp_path / "repo")]) == 0  # --threads wins over the environment


def test_the_pool_let_go_finishes_its_work_and_its_threads_end():
    import threading
    import time

    with threads.threads_for(3):
        old_pool = threads.shared_pool()
        futures = [old_pool.submit(time.sleep, 0.01) for _ in range(6)]
        workers = [t for t in threading.enumerate() if t.name.startswith("mdiff_")]
        with threads.threads_for(1):
            assert threads.shared_pool() is not old_pool and threads.pool_size() == 1
            assert threads.shared_pool().submit(sum, [1, 2]).result() == 3
            old_pool.submit(time.sleep, 0)  # one that fetched the old pool just before may still use it
            del old_pool
            assert [f.result() for f in futures] == [None] * 6
            for worker in workers:
                worker.join(timeout=60)  # a bound against a hang, not a measure
            assert [w.name for w in workers if w.is_alive()] == []


def test_in_parts_covers_every_element_once_on_the_pool_and_inline_where_it_must():
    """threads.in_parts: parts of part_bytes, side by side on the pool's threads (named mdiff_…); one call on
    this thread with one thread, one part, or from a pool thread (which must not wait on the pool)."""
    import threading

    seen: list[tuple[int, int, str]] = []

    def work(start: int, stop: int) -> None:
        seen.append((start, stop, threading.current_thread().name))

    with threads.threads_for(2):
        threads.in_parts(10_000, 4, work, part_bytes=4 * 3000)
        assert sorted((a, b) for a, b, _ in seen) == [(0, 3000), (3000, 6000), (6000, 9000), (9000, 10_000)]
        assert all(name.startswith("mdiff_") for _, _, name in seen)
        seen.clear()
        threads.in_parts(3000, 4, work, part_bytes=4 * 3000)
        assert [(a, b) for a, b, _ in seen] == [(0, 3000)] and seen[0][2] == threading.current_thread().name
        seen.clear()
        threads.shared_pool().submit(threads.in_parts, 10_000, 4, work, 4 * 3000).result()
        assert [(a, b) for a, b, _ in seen] == [(0, 10_000)]
    seen.clear()
    with threads.threads_for(1):
        threads.in_parts(10_000, 4, work, part_bytes=4 * 3000)
    assert [(a, b) for a, b, _ in seen] == [(0, 10_000)]


def test_in_parts_raises_a_part_s_error_once_every_part_has_ended():
    ended: list[int] = []

    def work(start: int, stop: int) -> None:
        if start == 0:
            raise ValueError("the first part fails")
        ended.append(start)

    with threads.threads_for(2), pytest.raises(ValueError, match="first part"):
        threads.in_parts(40, 1, work, part_bytes=10)
    assert sorted(ended) == [10, 20, 30]


@pytest.mark.parametrize("kind", ["sub", "xor"])
def test_a_large_delta_s_parts_on_the_pool_give_the_values_of_one_thread(kind):
    """bit_deltas: between, apply and apply_folded of a tensor of several parts (PART_BYTES each) give,
    on two threads, exactly what they give on one."""
    from mdiff.updates.bit_deltas import SubDelta, XorDelta

    delta_kind = SubDelta if kind == "sub" else XorDelta
    rng = np.random.default_rng(3)
    old = rng.integers(0, 2**32, 3 * threads.PART_BYTES // 4 + 12345, dtype=np.uint32)
    new = old + rng.integers(0, 5000, old.size, dtype=np.uint32) - np.uint32(2500)
    results = {}
    for n in (1, 2):
        with threads.threads_for(n):
            delta = delta_kind.between(old, new)
            applied = delta_kind.apply(old, delta, out=np.empty_like(old))
            in_place = old.copy()
            delta_kind.apply(in_place, delta, out=in_place)
            folded = delta_kind.apply_folded(old, old, out=np.empty_like(old))
            results[n] = (delta, applied, in_place, folded)
    for one, two in zip(results[1], results[2]):
        assert one.tobytes() == two.tobytes()
    delta, applied, in_place, _ = results[2]
    assert applied.tobytes() == in_place.tobytes() == new.tobytes()
    expected = (old ^ new) if kind == "xor" else None
    if expected is not None:
        assert delta.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_the_change_statistic_of_a_large_tensor_is_the_same_on_any_number_of_threads(dtype):
    """relative_change sums its blocks on the pool (threads.in_parts), then adds them in block order:
    the very float of one thread (it is written in a file's `stats`: §11), and the ratio it should be."""
    from mdiff.relative_change import BLOCK as _BLOCK, relative_change

    kind = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(11)
    old = rng.standard_normal(3 * _BLOCK + 4321).astype(kind)
    new = (old.astype(np.float64) + 1e-2 * rng.standard_normal(old.size)).astype(kind)
    found = {}
    for n in (1, 2):
        with threads.threads_for(n):
            found[n] = relative_change(old, new)
    assert found[1] == found[2]
    wide_old, wide_new = old.astype(np.float64), new.astype(np.float64)
    expected = np.linalg.norm(wide_new - wide_old) / np.linalg.norm(wide_old)
    assert found[2] == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("elements, tasks", [(4, 0), (16383, 0), (16384, 2)])
def test_a_small_tensor_s_hashes_are_made_on_the_caller_s_thread(monkeypatch, elements, tasks):
    """A model of 10^5 small parameters: two pool tasks a diff (its two sha256) cost more than the hashes. Under
    64 KiB a tensor is hashed where it is diffed, once it is known to have changed; the update is the same."""
    from mdiff import threads
    from mdiff.diffing import diff_tensor
    from mdiff.updates.base import sha256_hex

    old = np.arange(elements, dtype=np.float32)
    new = old + np.float32(1)
    submitted: list[object] = []
    pool = threads.shared_pool()
    real = type(pool).submit
    monkeypatch.setattr(type(pool), "submit", lambda self, fn, *a, **k: submitted.append(fn) or real(self, fn, *a, **k))
    update = diff_tensor(old, new)
    assert submitted.count(sha256_hex) == tasks
    assert update.meta["sha256"] == sha256_hex(new) and update.meta["base_sha256"] == sha256_hex(old)
    assert diff_tensor(old, old.copy()) is None


def test_with_one_thread_an_unchanged_large_tensor_is_not_hashed(monkeypatch):
    """A frozen layer of a fine-tune: with one thread a submitted hash runs at submit (threads.Inline), so the
    diff makes its hashes itself, only once it has found a change."""
    import hashlib

    from mdiff import diffing

    old = np.arange(1 << 16, dtype=np.float32)
    hashed: list[int] = []
    real = diffing.sha256_hex
    monkeypatch.setattr(diffing, "sha256_hex", lambda array: hashed.append(array.nbytes) or real(array))
    with threads.threads_for(1):
        assert diffing.diff_tensor(old, old.copy()) is None
        assert hashed == []
        update = diffing.diff_tensor(old, old + np.float32(1))
    assert hashed == [old.nbytes, old.nbytes]
    assert update.meta["sha256"] == hashlib.sha256((old + np.float32(1)).tobytes()).hexdigest()


def test_one_ahead_hands_small_results_over_in_batches_and_a_large_one_alone(monkeypatch):
    """Per item, a hand-over to the ahead thread cost ~10 µs each side: 10^5 small parameters, ~2 s. While results
    are small, batches double up to AHEAD_BATCH; a large result starts them again at one. Order, values and the
    one ahead thread are as before."""
    import threading

    from mdiff.threads import AHEAD_BATCH, one_ahead

    batches: list[int] = []
    real = threads._work_through
    monkeypatch.setattr(threads, "_work_through", lambda chunk, work: batches.append(len(chunk)) or real(chunk, work))
    threads_seen: set[int] = set()

    def work(item: int) -> int:
        threads_seen.add(threading.get_ident())
        return 1000 if item == 150 else item  # item 150's result is "large"

    handed = []
    with threads.threads_for(2):  # one thread works inline (a test below)
        ahead = list(one_ahead(range(300), work, small=lambda r: r < 1000))
    for item, result in ahead:
        handed.append(item)
        assert result == (1000 if item == 150 else item)
    assert handed == list(range(300)) and len(threads_seen) == 1 and threading.get_ident() not in threads_seen
    # a batch is sized by the results of the one handed over before it is sent (another is in flight by then):
    # items 128-191 hold the large result, 192-255 were on their way, and the batches after start at one again
    assert AHEAD_BATCH == 64 and batches == [1, 1, 2, 4, 8, 16, 32, 64, 64, 64, 1, 2, 4, 8, 16, 13]
    assert sum(batches) == 300
    batches.clear()
    with threads.threads_for(2):
        assert [item for item, _ in one_ahead(range(5), work)] == list(range(5)) and batches == [1] * 5  # no `small`


def test_one_ahead_hands_over_the_results_before_an_error_then_raises_it():
    from mdiff.threads import one_ahead

    def work(item: int) -> int:
        if item == 37:
            raise KeyError(item)
        return item

    for n in (1, 2):
        handed = []
        with threads.threads_for(n), pytest.raises(KeyError):
            for item, _ in one_ahead(range(100), work, small=lambda r: True):
                handed.append(item)
        assert handed == list(range(37))


def _commit_and_check_out(folder: Path, files: Path) -> tuple[list[str], bytes, dict[str, object]]:
    """Two commits of a checkpoint file into a new repository at ``folder``, and a checkout of each: the commit
    ids and the files checked out."""
    from mdiff.repo import Repository

    repo = Repository.init(folder)
    ids = [repo.commit(str(files / name), "m", date=DATE) for name in ("old.safetensors", "new.safetensors")]
    outputs = b""
    for i, commit_id in enumerate(ids):
        repo.checkout(commit_id, str(folder / f"out{i}.safetensors"))
        outputs += (folder / f"out{i}.safetensors").read_bytes()
    return ids, outputs, repo.checkout(ids[1])


def test_one_thread_commits_and_checks_out_on_the_caller_s_thread_alone(tmp_path, pair_files, monkeypatch):
    """--threads 1 means one core: a commit and a checkout start no thread (no pool, no look-ahead), and every
    hash and deflate runs on the calling thread; the commit ids and the files checked out are those of 4 threads."""
    import hashlib
    import threading

    from mdiff.format import writer

    started: list[str] = []
    ran_on: list[int] = []
    real_start, real_sha256, real_deflate = threading.Thread.start, hashlib.sha256, writer.deflate_rle

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    def sha256(*args, **kwargs):
        ran_on.append(threading.get_ident())
        return real_sha256(*args, **kwargs)

    def deflate(data):
        ran_on.append(threading.get_ident())
        return real_deflate(data)

    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(hashlib, "sha256", sha256)
    monkeypatch.setattr(writer, "deflate_rle", deflate)
    with threads.threads_for(4):
        four = _commit_and_check_out(tmp_path / "four", pair_files)
    assert started and len(set(ran_on)) > 1  # the recording sees the threads where there are some
    started.clear()
    ran_on.clear()
    with threads.threads_for(1):
        one = _commit_and_check_out(tmp_path / "one", pair_files)
    assert started == []
    assert len(ran_on) > 20 and set(ran_on) == {threading.get_ident()}
    assert one[:2] == four[:2]
    assert {k: np.asarray(v).tobytes() for k, v in one[2].items()} == {k: np.asarray(v).tobytes() for k, v in four[2].items()}


def test_one_thread_runs_each_task_as_it_is_submitted_and_nested_tasks_too():
    """The Inline executor: a task's Future is done when submit returns, its error kept for result(); a task that
    submits (and waits on) another runs it at once — no deadlock, however it nests."""
    import threading

    with threads.threads_for(1):
        pool = threads.shared_pool()
        assert isinstance(pool, threads.Inline) and threads.pool_size() == 1
        here = threading.get_ident()

        def nested(depth: int) -> list[int]:
            inner = pool.submit(nested, depth - 1).result() if depth else []
            return [threading.get_ident(), *inner]

        future = pool.submit(nested, 50)
        assert future.done() and future.result() == [here] * 51
        failed = pool.submit(int, "x")
        assert failed.done() and isinstance(failed.exception(), ValueError)
        assert list(pool.map(abs, [-1, 2, -3])) == [1, 2, 3]


def test_one_ahead_with_one_thread_works_inline_when_each_item_is_asked_for():
    import threading

    from mdiff.threads import one_ahead

    asked: list[int] = []

    def work(item: int) -> int:
        asked.append(item)
        return threading.get_ident()

    with threads.threads_for(1):
        values = one_ahead(range(5), work)
        assert asked == []
        for item, ident in values:
            assert asked[-1] == item and ident == threading.get_ident()  # nothing done ahead
    assert asked == list(range(5))


def test_writeback_syncs_inline_with_one_thread_and_on_the_pool_with_more():
    """One thread is one thread: the syncs run on the writer's (measured no slower than a thread of their own,
    threads.py); with two, on the pool, while the writer goes on."""
    import threading

    ran: list[str] = []
    for n in (1, 2):
        with threads.threads_for(n):
            writeback = threads.Writeback(lambda: ran.append(threading.current_thread().name), every=10)
            writeback.wrote(10)
            writeback.wait()
    assert len(ran) == 2 and ran[0] == threading.current_thread().name and ran[1].startswith("mdiff_")
