"""Issue 31.3 (apply and fsck of 10^5 parameters with a margin): what fsck and validate do per parameter besides
the walk — counted, not timed. fsck makes a commit's summary and its claims' changes with the collector off
(what they make is all kept, or freed by its count); a planned dataset says its shape and dtype without
__getattr__'s fallback; read_small_together asks each update the cheap questions first."""

from __future__ import annotations

import gc
import os
import sys

import h5py
import numpy as np

import mdiff
from mdiff.format.chunk_reader import PlannedDataset
from mdiff.repo import Repository
from tests.test_repo import DATE

N = 1500  # enough objects for several collections, were the collector on (~10 objects a parameter)


def _many(n: int) -> dict[str, np.ndarray]:
    return {f"layer.{i:04d}.w": np.full(2, i, np.float32) for i in range(n)}


def test_fsck_makes_a_commits_summary_and_claims_with_no_collection(tmp_path):
    repo = Repository.init(tmp_path / "r")
    repo.commit(_many(N), "many", author="A", date=DATE)
    from mdiff.repo.claims import ClaimChanges
    from mdiff.repo.objects import CommitFiles
    from mdiff.validation import validate_and_summarize

    watched = {validate_and_summarize.__code__, CommitFiles.remember_summary.__code__, ClaimChanges.of.__func__.__code__}
    parent = os.getpid()
    seen: list[str] = []

    def heard(phase: str, info: dict) -> None:
        if phase == "start" and os.getpid() == parent:  # not the isolated child forked meanwhile
            frame = sys._getframe(0)
            while frame is not None and frame.f_code not in watched:
                frame = frame.f_back
            seen.append("while a summary is made" if frame is not None else "elsewhere")

    was_on = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.callbacks.append(heard)
    try:
        findings = repo.fsck()
    finally:
        gc.callbacks.remove(heard)
        if not was_on:
            gc.disable()
    assert findings == []
    assert seen and "while a summary is made" not in seen
    assert gc.isenabled()  # on again after the block


def test_a_planned_datasets_shape_and_dtype_are_its_datasets_and_need_no_fallback(tmp_path):
    path = str(tmp_path / "d.mdiff")
    repo = Repository.init(tmp_path / "r")
    first = repo.commit(_many(3), "first", author="A", date=DATE)
    after = {name: value + 1 for name, value in _many(3).items()}
    second = repo.commit(after, "second", author="A", date=DATE)
    assert first != second
    with open(path, "wb") as out, open(repo.commit_path(second), "rb") as src:
        out.write(src.read())
    assert {"shape", "dtype"} <= set(vars(PlannedDataset))  # properties: not looked up through __getattr__
    said = {}
    with mdiff.open(path) as diff:
        for name in diff:
            update = diff[name]
            (source,) = update.data.values()
            assert type(source) is PlannedDataset
            said[source.name] = (source.shape, source.dtype)
            assert update.stored_bytes == 8
    with h5py.File(path, "r") as f:  # the datasets as libhdf5 has them: an XOR delta's bits, uint32
        assert said == {key: (f[key].shape, f[key].dtype) for key in said}
    assert len(said) == 3 and set(said.values()) == {((2,), np.dtype(np.uint32))}
