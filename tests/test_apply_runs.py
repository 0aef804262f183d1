"""Applying runs of small parameters together (issue 31.3): applying.py's _Batch, chunk_reader.read_many and
SafetensorsReader.read_many give the bytes, verdicts and codes of applying one parameter at a time, with less work
(counted: the read system calls made)."""

from __future__ import annotations

import logging
import os
import shutil
import sys

import numpy as np
import pytest

import mdiff
from mdiff import applying
from mdiff.checkpoints import open_checkpoint, save_checkpoint
from mdiff.checkpoints.safetensors import SafetensorsReader
from mdiff.errors import ApplyError, InvalidFileError
from mdiff.format.chunk_reader import planned_source, read_many
from mdiff.format.reader import open_diff
from mdiff.isolation import Isolation

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts reads in /proc/self/io")

N = 120  # small parameters, one run
DTYPES = [np.float32, np.float16, np.int8, np.float64]


def _syscr() -> int:
    with open("/proc/self/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscr"])


def _reads_of(work):
    """``work()``'s result and the read system calls it made (read, pread, preadv: /proc/self/io's syscr), less
    those of looking at that count (the same each time)."""
    first = _syscr()
    second = _syscr()
    result = work()
    return result, _syscr() - second - (second - first)


def _small(i: int) -> str:
    return f"layer.{i:03d}.w"


def _states() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A base and the state a diff takes it to: N small parameters of four dtypes (some 8 KiB ones, which the
    writer stores deflated in a chunk, the others as they are), and around them what a run does not take: a
    large one, a bool one, one unchanged, one deleted, one added."""
    rng = np.random.default_rng(31)
    base, new = {}, {}
    for i in range(N):
        dtype = DTYPES[i % 4]
        shape = (32, 64) if i % 7 == 3 else ((2, 3) if i % 5 == 0 else (4,))
        old = (rng.standard_normal(shape) * 50).astype(dtype)
        base[_small(i)] = old
        new[_small(i)] = (old * 2 + 1).astype(dtype)
    base["big.w"] = rng.standard_normal((128, 256)).astype(np.float32)  # 128 KiB: applied on its own
    new["big.w"] = base["big.w"] + 1
    base["mask"] = np.array([True, False, True])
    new["mask"] = np.array([False, False, True])
    base["same.w"] = new["same.w"] = np.arange(4, dtype=np.float32)
    base["gone.w"] = np.zeros(4, np.float32)
    new["added.w"] = np.ones(4, np.float32)
    return base, new


def _update(i: int, old: np.ndarray, new: np.ndarray) -> mdiff.Update:
    """dense version 1, dense version 2 and replace in turn."""
    if i % 3 == 2:
        return mdiff.replace(new)
    return mdiff.dense(old, new, version=1 + i % 3)


def _write(folder, metas: dict[str, dict] | None = None) -> tuple[str, str, dict[str, np.ndarray]]:
    """The base (.safetensors) and the diff (gzip); ``metas``: members of `update` to change (a hostile file)."""
    base, new = _states()
    base_path, diff_path = os.path.join(folder, "base.safetensors"), os.path.join(folder, "d.mdiff")
    save_checkpoint(base_path, base)
    commit = mdiff.Commit("runs", mdiff.Author("t"), date="2026-01-01T00:00:00Z")
    with mdiff.DiffWriter(diff_path, commit, "gzip", check_updates=not metas) as writer:
        for i in range(N):
            name = _small(i)
            update = _update(i, base[name], new[name])
            if metas and name in metas:
                update = mdiff.Update({**update.meta, **metas[name]}, update.data)
            writer.add(name, update)
        writer.add("big.w", mdiff.dense(base["big.w"], new["big.w"]))
        writer.add("mask", mdiff.dense(base["mask"], new["mask"]))
        writer.add("gone.w", mdiff.delete(base["gone.w"]))
        writer.add("added.w", mdiff.replace(new["added.w"]))
    return base_path, diff_path, new


def _apply(base_path, diff_path, out, isolated: bool, runs: bool, monkeypatch, caplog) -> str:
    """apply_files, with runs or one parameter at a time; the log line that counts the runs."""
    with monkeypatch.context() as patch:
        if not runs:
            patch.setattr(applying, "_BATCH_PARAMETERS", 1)  # every run cut after one parameter: none is made
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="mdiff.applying"):
            mdiff.apply_files(base_path, diff_path, out, isolation=Isolation() if isolated else None)
    return " ".join(r.getMessage() for r in caplog.records if r.name == "mdiff.applying")


@pytest.mark.parametrize("isolated", [True, False])
def test_a_run_writes_the_bytes_of_one_parameter_at_a_time(tmp_path, monkeypatch, caplog, isolated):
    base_path, diff_path, new = _write(tmp_path)
    together, alone = str(tmp_path / "runs.safetensors"), str(tmp_path / "alone.safetensors")
    said = _apply(base_path, diff_path, together, isolated, True, monkeypatch, caplog)
    # the N small ones in one run; added.w is small too, but alone between big.w and the run (a run of one is none)
    assert "applied 120 parameters in 1 runs (0 applied one by one after their run failed)" in said
    said_alone = _apply(base_path, diff_path, alone, isolated, False, monkeypatch, caplog)
    assert "applied 0 parameters in 0 runs" in said_alone
    with open(together, "rb") as a, open(alone, "rb") as b:
        assert a.read() == b.read()
    expected = str(tmp_path / "expected.safetensors")
    save_checkpoint(expected, new)
    with open(together, "rb") as a, open(expected, "rb") as b:
        assert a.read() == b.read()
    with open_checkpoint(together) as got:
        assert sorted(got.keys()) == sorted(new)
        for name, value in new.items():
            assert got.read(name).tobytes() == value.tobytes() and got.read(name).dtype == value.dtype


def test_read_many_reads_neighbours_in_one_pread(tmp_path):
    _, diff_path, new = _write(tmp_path)
    with open_diff(diff_path, isolation=Isolation()) as diff:
        datasets = [next(iter(diff[_small(i)].data.values())) for i in range(N)]
        chunked = [d for d in datasets if planned_source(d)[1].chunk_shape is not None]
        assert len(chunked) == 13  # the (32, 64) ones of ≥ 4 KiB (not int8): deflated, each in one chunk
        (arrays, reads), counted = _reads_of(lambda: read_many(datasets))
        # the data of all 120 lie in 10 runs whose gaps are at most 4 KiB (what libhdf5 put between them is read too)
        assert counted == reads == 10
        alone, counted = _reads_of(lambda: [np.asarray(d) for d in datasets])  # read_planned, one at a time
        assert counted == N
    assert all(a is not None and a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in zip(arrays, alone))


def test_safetensors_read_many_reads_a_run_of_neighbours_at_once(tmp_path):
    base, _ = _states()
    path = str(tmp_path / "b.safetensors")
    save_checkpoint(path, base)
    names = sorted(base)
    reader = SafetensorsReader(path)
    try:
        # side by side in the file, in this order, but for "mask" (bool: read alone) and the one left out
        asked = [n for n in names if n != "layer.050.w"]
        got, counted = _reads_of(lambda: reader.read_many(asked))
        assert counted == 4  # the run before layer.050.w, the run after it up to mask, mask, and the rest
        for name, array in zip(asked, got):
            assert array.dtype == base[name].dtype and array.shape == base[name].shape
            assert array.tobytes() == base[name].tobytes()
    finally:
        reader.close()


def _first_error(base_path, diff_path, out, isolated: bool, runs: bool, monkeypatch, caplog):
    with pytest.raises((ApplyError, InvalidFileError)) as caught:
        _apply(base_path, diff_path, out, isolated, runs, monkeypatch, caplog)
    said = " ".join(r.getMessage() for r in caplog.records if r.name == "mdiff.applying")
    return caught.value, said


def _same_error(base_path, diff_path, tmp_path, monkeypatch, caplog, isolated=True):
    error, _ = _first_error(base_path, diff_path, str(tmp_path / "a.safetensors"), isolated, True, monkeypatch, caplog)
    reference, _ = _first_error(base_path, diff_path, str(tmp_path / "b.safetensors"), isolated, False, monkeypatch,
                                caplog)
    assert (error.code, error.path, error.message) == (reference.code, reference.path, reference.message)
    assert not os.path.exists(tmp_path / "a.safetensors")
    return error


def test_a_wrong_sha256_in_the_middle_of_a_run_is_md602(tmp_path, monkeypatch, caplog):
    # layer.061.w (dense version 2) and layer.062.w (replace) claim another result: the first is named
    metas = {_small(61): {"sha256": "0" * 64}, _small(62): {"sha256": "1" * 64}}
    base_path, diff_path, _ = _write(tmp_path, metas)
    error = _same_error(base_path, diff_path, tmp_path, monkeypatch, caplog)
    assert error.code == "MD602" and _small(61) in str(error.path)


def test_a_base_other_than_the_named_one_in_the_middle_of_a_run_is_md603(tmp_path, monkeypatch, caplog):
    base_path, diff_path, _ = _write(tmp_path)
    base, _ = _states()
    base[_small(60)] = base[_small(60)] + 1  # dense version 1 names its base's sha256 (§9.2)
    save_checkpoint(base_path, base)
    error = _same_error(base_path, diff_path, tmp_path, monkeypatch, caplog)
    assert error.code == "MD603" and _small(60) in str(error.path)


@pytest.mark.parametrize("isolated", [True, False])
def test_a_chunk_that_does_not_inflate_in_the_middle_of_a_run_is_md513(tmp_path, monkeypatch, caplog, isolated):
    base_path, diff_path, _ = _write(tmp_path)
    name = _small(59)  # (32, 64) float64: 16 KiB, stored deflated in one chunk
    with open_diff(diff_path, isolation=Isolation()) as diff:
        source, plan = planned_source(next(iter(diff[name].data.values())))
        chunk = plan.chunks[0]
    hostile = str(tmp_path / "hostile.mdiff")
    shutil.copyfile(diff_path, hostile)
    with open(hostile, "r+b") as f:
        f.seek(chunk.byte_offset + chunk.size // 2)
        f.write(b"\xff" * 16)
    error = _same_error(base_path, hostile, tmp_path, monkeypatch, caplog, isolated)
    assert error.code == "MD513" and name in str(error.path)
    _, said = _first_error(base_path, hostile, str(tmp_path / "c.safetensors"), isolated, True, monkeypatch, caplog)
    assert said == ""  # raised before the run's count is logged


def _findings(path, together: bool, monkeypatch) -> list[tuple[str, str, str]]:
    """validate's findings, data checked, with small updates read together or each alone."""
    from mdiff.updates import base as updates_base

    with monkeypatch.context() as patch:
        if not together:
            patch.setattr(updates_base, "_TOGETHER_BYTES", 0)  # none is small: each read alone, as before
        return [(x.code, x.path, x.message) for x in mdiff.validate(path)]


def test_read_small_together_gives_each_update_its_values_in_few_reads(tmp_path):
    from mdiff.updates.base import read_small_together

    _, diff_path, _ = _write(tmp_path)
    with open_diff(diff_path, isolation=Isolation()) as diff:
        updates = [diff[_small(i)] for i in range(N)] + [diff["big.w"], diff["mask"]]
        together, counted = _reads_of(lambda: list(read_small_together(updates)))
        assert counted == 7  # spans of the replace values and the deflated deltas, with the gaps between them
        # big.w's 128 KiB left to be read when used; a dense delta stored as it is, not bool, too (validate's
        # check_data does not read it: nothing to decode, no value rule); the others, mask's 3 bytes among them, read
        # (replace values, and the (32, 64) deltas stored deflated: all but int8's 2 KiB, which is stored as it is)
        read_now = [i % 3 == 2 or (i % 7 == 3 and DTYPES[i % 4] is not np.int8) for i in range(N)]
        assert [type(next(iter(u.data.values()))) is np.ndarray for u in together] == read_now + [False, True]
        assert next(iter(together[N].data.values())) is next(iter(updates[N].data.values()))
        for update, read in zip(updates, together):
            assert read.meta is update.meta and read.kind is update.kind
            assert [np.asarray(v).tobytes() for v in read.data.values()] == [
                np.asarray(v).tobytes() for v in update.data.values()]


def test_a_hostile_value_in_the_middle_of_what_is_read_together_is_found_with_its_code(tmp_path, monkeypatch):
    # layer.062.w (a replace) stores other bytes than its sha256 says: MD410; the chunk of layer.059.w (a replace) does not inflate
    base_path, diff_path, _ = _write(tmp_path, {_small(62): {"sha256": "1" * 64}})
    with open_diff(diff_path, isolation=Isolation()) as diff:
        _, plan = planned_source(next(iter(diff[_small(59)].data.values())))
    with open(diff_path, "r+b") as f:
        f.seek(plan.chunks[0].byte_offset + plan.chunks[0].size // 2)
        f.write(b"\xff" * 16)
    found = _findings(diff_path, True, monkeypatch)
    assert found == _findings(diff_path, False, monkeypatch)
    assert [(code, path) for code, path, _ in found] == [
        ("MD513", f"/parameters/{_small(59)}/value"), ("MD410", f"/parameters/{_small(62)}/value")]


@pytest.mark.parametrize("shape", [(4,), (2, 3), (), (0,)])
def test_a_run_of_one_dtype_and_one_shape_is_applied_as_rows(tmp_path, monkeypatch, caplog, shape):
    """The usual run (10^5 experts of one shape): its dense parameters are applied, cut and hashed as the rows of one
    array (_apply_alike, counted), with the bytes of one parameter at a time; float32 and int32 share their bits'
    dtype, so a run of both is not alike and takes the general path; a 0-d shape has no rows and takes it too."""
    base, new = {}, {}
    for i in range(40):
        dtype = np.float32 if i < 30 else np.int32
        old = (np.arange(int(np.prod(shape)), dtype=np.float64) * (i + 1)).astype(dtype).reshape(shape)
        base[f"e.{i:02d}"], new[f"e.{i:02d}"] = old, np.asarray(old * 3 + 1).astype(dtype).reshape(shape)
    base_path, diff_path = str(tmp_path / "base.safetensors"), str(tmp_path / "d.mdiff")
    save_checkpoint(base_path, base)
    commit = mdiff.Commit("alike", mdiff.Author("t"), date="2026-01-01T00:00:00Z")
    with mdiff.DiffWriter(diff_path, commit, "gzip") as writer:
        for i, name in enumerate(base):  # dense version 1 (XOR) for the first 20, version 2 for the rest
            writer.add(name, mdiff.dense(base[name], new[name], version=1 if i < 20 else 2))
    calls = []
    alike = applying._Batch._apply_alike

    def counting(*args):
        calls.append(len(args[0]))
        return alike(*args)

    monkeypatch.setattr(applying._Batch, "_apply_alike", staticmethod(counting))
    together, alone = str(tmp_path / "runs.safetensors"), str(tmp_path / "alone.safetensors")
    said = _apply(base_path, diff_path, together, False, True, monkeypatch, caplog)
    assert "applied 40 parameters in 1 runs (0 applied one by one after their run failed)" in said
    # XOR float32 (20) alike; sub float32 (10) and int32 (10) share a group of <u4 bits: not alike
    assert calls == ([] if shape == () else [20])
    _apply(base_path, diff_path, alone, False, False, monkeypatch, caplog)
    expected = str(tmp_path / "expected.safetensors")
    save_checkpoint(expected, new)
    with open(together, "rb") as a, open(alone, "rb") as b, open(expected, "rb") as c:
        assert a.read() == b.read() == c.read()


# ---------------------------------------------------------------- the usual run, as the rows of one array (session 6)

def _experts(folder, kind: str, n: int = 50, metas: dict[str, dict] | None = None, isolated: bool = True):
    """A base of ``n`` float32 experts of shape (4,) and a diff of one ``kind`` (`dense` version 2, or `replace`)
    for each, stored as they are; ``metas``: members of `update` to change (a hostile file)."""
    base = {f"e.{i:03d}": (np.arange(4, dtype=np.float32) * (i + 1) - 7) for i in range(n)}
    new = {name: value * 3 + 1 for name, value in base.items()}
    base_path, diff_path = os.path.join(folder, "base.safetensors"), os.path.join(folder, "d.mdiff")
    save_checkpoint(base_path, base)
    commit = mdiff.Commit("experts", mdiff.Author("t"), date="2026-01-01T00:00:00Z")
    with mdiff.DiffWriter(diff_path, commit, "gzip", check_updates=not metas) as writer:
        for name in base:
            update = mdiff.dense(base[name], new[name], version=2) if kind == "dense" else mdiff.replace(new[name])
            if metas and name in metas:
                update = mdiff.Update({**update.meta, **metas[name]}, update.data)
            writer.add(name, update)
    return base_path, diff_path, new


def _counting_rows(monkeypatch) -> list:
    """What each call of chunk_reader.read_as_rows gave: rows of one array, or None (the general path then)."""
    from mdiff.format import chunk_reader

    given: list = []
    real = chunk_reader.read_as_rows
    monkeypatch.setattr(chunk_reader, "read_as_rows", lambda datasets: given.append(real(datasets)) or given[-1])
    return given


@pytest.mark.parametrize("kind", ["dense", "replace"])
@pytest.mark.parametrize("isolated", [True, False])
def test_a_run_of_one_type_dtype_and_shape_is_read_and_applied_as_rows(tmp_path, monkeypatch, caplog, kind, isolated):
    base_path, diff_path, new = _experts(tmp_path, kind)
    given = _counting_rows(monkeypatch)
    together, alone = str(tmp_path / "runs.safetensors"), str(tmp_path / "alone.safetensors")
    said = _apply(base_path, diff_path, together, isolated, True, monkeypatch, caplog)
    # one run, its stored values read with one pread as the rows of one (50, 4) array
    assert "applied 50 parameters in 1 runs (0 applied one by one after their run failed), their stored bytes " \
           "read in 1 reads" in said
    assert [(rows.shape, rows.dtype) for rows in given] == [((50, 4), np.dtype(np.uint32 if kind == "dense" else np.float32))]
    _apply(base_path, diff_path, alone, isolated, False, monkeypatch, caplog)
    expected = str(tmp_path / "expected.safetensors")
    save_checkpoint(expected, new)
    with open(together, "rb") as a, open(alone, "rb") as b, open(expected, "rb") as c:
        assert a.read() == b.read() == c.read()


@pytest.mark.parametrize("kind", ["dense", "replace"])
def test_a_wrong_sha256_in_a_run_of_rows_is_md602_as_alone(tmp_path, monkeypatch, caplog, kind):
    base_path, diff_path, _ = _experts(tmp_path, kind, metas={"e.020": {"sha256": "0" * 64}, "e.030": {"sha256": "1" * 64}})
    error = _same_error(base_path, diff_path, tmp_path, monkeypatch, caplog)
    assert error.code == "MD602" and "e.020" in str(error.path)


def test_a_base_cut_short_under_a_run_of_rows_is_refused_as_alone(tmp_path, monkeypatch, caplog):
    """The base's tensors side by side, read with one read: its file cut after it was opened fails that read; each
    is then read alone, which says which tensor the file cut short (MD701)."""
    base_path, diff_path, _ = _experts(tmp_path, "dense")
    with open(base_path, "rb") as f:
        whole = f.read()
    reader = SafetensorsReader(base_path)
    try:
        names = sorted(reader.keys())
        joined, counted = _reads_of(lambda: reader.read_joined(names))
        assert counted == 1 and joined.tobytes() == b"".join(reader.read(name).tobytes() for name in names)
        assert reader.read_joined(names[::-1]).tobytes() == b"".join(reader.read(name).tobytes() for name in names[::-1])
        with open(base_path, "r+b") as f:
            f.truncate(len(whole) - 8)  # the last tensor's last 8 bytes gone
        with pytest.raises(mdiff.CheckpointError) as caught:
            reader.read_joined(names)
        with pytest.raises(mdiff.CheckpointError) as alone:
            reader.read(names[-1])
        assert (caught.value.code, caught.value.message) == (alone.value.code, alone.value.message) and \
               caught.value.code == "MD701"
    finally:
        reader.close()
