"""mdiff/pages.py: numpy's huge-page advice is off while a commit runs and as it was after, nested or not."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from mdiff import pages
from mdiff.repo import Repository

switch = pages._switch()
pytestmark = pytest.mark.skipif(switch is None, reason="this numpy has no huge-page switch")


def advice() -> bool:
    before = bool(switch(True))
    switch(before)
    return before


@pytest.mark.parametrize("start", [True, False])
def test_the_advice_is_off_inside_and_as_it_was_after(start):
    switch(start)
    with pages.no_huge_pages():
        assert advice() is False
        with pages.no_huge_pages():
            assert advice() is False
        assert advice() is False
    assert advice() is start


def test_a_commit_runs_without_the_advice_and_restores_it(tmp_path, monkeypatch):
    switch(True)
    seen: list[bool] = []
    store = Repository.store

    def watched(self, *args, **kwargs):
        seen.append(advice())
        return store(self, *args, **kwargs)

    monkeypatch.setattr(Repository, "store", watched)
    repo = Repository.init(tmp_path)
    repo.commit({"w": np.arange(6, dtype=np.float32)}, "one", date="2026-01-01T00:00:00Z")
    assert seen == [False] and advice() is True


def test_two_threads_leave_it_as_it_was():
    switch(True)
    inside = threading.Barrier(2)

    def work():
        with pages.no_huge_pages():
            inside.wait(10)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert advice() is True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.parametrize("make", ["fresh", "recycled"])
def test_a_value_s_memory_is_private_a_forked_child_s_writes_stay_its_own(make):
    """fresh_array and recycled_array map private memory (MAP_PRIVATE): a child forked meanwhile (the isolated
    walk forks) writes its own copy, and a first touch costs a private page's fault, not shmem's."""
    with pages.recycling():
        value = (pages.fresh_array((1 << 20,), np.dtype(np.uint32), "w") if make == "fresh"
                 else pages.recycled_array((1 << 20,), np.uint32, "w"))
        value[:] = 7
        pid = os.fork()
        if pid == 0:  # the child: write, and leave at once
            value[:] = 9
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert int(value.min()) == int(value.max()) == 7
