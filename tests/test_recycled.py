"""mdiff/pages.py's recycled arrays: a commit's large buffers (a checkpoint's tensors, the deltas) take the pages of
gone arrays of the same size instead of faulting in fresh ones; never memory that a live array or view still uses."""

from __future__ import annotations

import gc

import numpy as np
from safetensors.numpy import save_file

from mdiff import pages
from mdiff.repo import Repository

MIB = 1 << 20


def counts() -> tuple[int, int]:
    return pages.counts["made"], pages.counts["reused"]


def test_outside_a_commit_arrays_are_numpys():
    before = counts()
    array = pages.recycled_array((MIB,), np.float32)
    assert array.flags.owndata and array.shape == (MIB,) and counts() == before


def test_a_gone_arrays_memory_is_taken_by_the_next_of_its_size_never_a_live_ones():
    pages.drop_recycled()
    with pages.recycling():
        made, reused = counts()
        first = pages.recycled_array((512, 1024), np.float32)  # 2 MiB
        first[:] = 1.5
        view = first.reshape(-1)[10:20]  # keeps the memory in use after `first` goes
        del first
        gc.collect()
        second = pages.recycled_array((2 * MIB,), np.uint8)
        assert counts() == (made + 2, reused)  # a new buffer: the first is still seen through `view`
        second[:] = 7
        assert np.all(view == 1.5)
        del view, second
        gc.collect()
        third = pages.recycled_array((MIB // 2, 2), np.float16)  # 2 MiB again: one of the two gone buffers
        assert counts() == (made + 2, reused + 1)
        assert third.flags.writeable and third.flags.c_contiguous and third.dtype == np.float16
        small = pages.recycled_array((MIB // 8,), np.uint8)  # under RECYCLE_MIN_BYTES: numpy's
        assert small.flags.owndata and counts() == (made + 2, reused + 1)


def test_the_free_list_keeps_at_most_its_bound(monkeypatch):
    pages.drop_recycled()
    monkeypatch.setattr(pages, "RECYCLE_KEEP_BYTES", 3 * MIB)
    with pages.recycling():
        arrays = [pages.recycled_array((2 * MIB,), np.uint8) for _ in range(2)]
        del arrays
        gc.collect()
        assert pages._free_bytes == 2 * MIB  # the second would pass the bound: unmapped
    pages.drop_recycled()
    assert pages._free_bytes == 0


def test_a_commit_reuses_the_last_commits_buffers(tmp_path):
    pages.drop_recycled()
    rng = np.random.default_rng(5)
    value = rng.standard_normal(3 * MIB // 4).astype(np.float32)  # 3 MiB
    repo = Repository.init(tmp_path / "r")
    made = []
    for step in range(4):
        path = tmp_path / f"v{step}.safetensors"
        save_file({"w": value}, str(path))
        repo.commit(path, f"step {step}", date="2026-01-01T00:00:00Z")
        made.append(counts())
        last, value = value, value + np.float32(1e-3) * rng.standard_normal(value.shape).astype(np.float32)
    # steps 2 and 3: the new tensor, the parent's (from the checkpoint committed last) and the delta, each in a
    # buffer the commit before left
    assert [m - n for (m, _), (n, _) in zip(made[2:], made[1:])] == [0, 0]
    assert [m - n for (_, m), (_, n) in zip(made[2:], made[1:])] == [3, 3]
    assert np.array_equal(repo.checkout()["w"].view(np.uint32), last.view(np.uint32))  # and the history is exact
