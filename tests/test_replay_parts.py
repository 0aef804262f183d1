"""A value whose history is a `replace` and a run of dense updates, read in parts (mdiff/repo/replay_parts.py):
the same bits as the general replay, one array per tensor, each delta's part read once and applied while in
cache, nothing of a delta's size allocated; errors named as the general replay names them."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import mdiff
from mdiff import threads
from mdiff.errors import RepositoryError
from mdiff.format.chunk_reader import ByteRanges
from mdiff.format.commit import Commit
from mdiff.format.dtypes import as_bits
from mdiff.repo import Repository, replay_parts
from mdiff.repo.snapshots import write_snapshot
from mdiff.updates import base as updates_base
from mdiff.updates import dense, sparse
from mdiff.updates.base import Update, sha256_hex
from tests.helpers import bits_equal, random_tensor

DATE = "2026-05-01T00:00:00Z"
SHAPE = (3 * 256 + 5, 1024)  # float32: a little over 3 MiB, four chunks of the writer's 1 MiB


def _chain(repo: Repository, states: list[np.ndarray], version: int, extra: dict | None = None,
           kinds: str = "") -> list[str]:
    """A root commit of states[0] (and ``extra``'s parameters) and one commit of "w" per later state: dense, or
    as ``kinds`` says a letter a commit ("d" dense, "s" sparse)."""
    first = {"w": states[0], **(extra or {})}
    ids = [repo.store(lambda w: [w.add(k, mdiff.replace(v)) for k, v in sorted(first.items())],
                      Commit("root", date=DATE))]
    for i, (old, new) in enumerate(zip(states, states[1:])):
        update = (sparse if kinds[i:i + 1] == "s" else dense).encode(old, new, version=version)
        ids.append(repo.store(lambda w, u=update: w.add("w", u), Commit(f"step {i}", parents=(ids[-1],), date=DATE)))
    repo.set_branch("main", ids[-1])
    return ids


def _states(dtype: str, count: int, shape=SHAPE, every: int = 3) -> list[np.ndarray]:
    """states[0] and ``count`` more, each with every ``every``-th element (from a shifting start) changed."""
    states = [random_tensor(dtype, shape, 1)]
    for step in range(count):
        new = states[-1].copy()
        other = random_tensor(dtype, shape, 10 + step)
        as_bits(new).reshape(-1)[step::every] = as_bits(other).reshape(-1)[step::every]
        states.append(new)
    return states


class Counted:
    """How often a real function ran (it still runs)."""

    def __init__(self, monkeypatch, owner, attribute: str):
        self.calls: list[tuple] = []
        real = getattr(owner, attribute)

        def counting(*args, **kwargs):
            self.calls.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, counting)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int64", "uint8", "float64"])
def test_a_replace_and_its_dense_run_read_in_parts_equal_every_state(tmp_path, version, dtype):
    repo = Repository.init(tmp_path / "r")
    states = _states(dtype, 4)
    ids = _chain(repo, states, version)
    for commit_id, expected in zip(ids, states):
        got = repo.checkout(commit_id)["w"]
        assert bits_equal(got, expected) and sha256_hex(got) == sha256_hex(expected)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_parts_make_one_array_and_read_each_dataset_s_part_once(tmp_path, monkeypatch, n_threads):
    """Four deltas after the root: one array of the tensor's size (the value); every part of the replace and
    of each delta read once (4 parts × 5 datasets); nothing read whole, no change array, no zeroed array."""
    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 4)
    small = {"b": random_tensor("float32", (7,), 3)}  # below MIN_BYTES: the general replay's
    ids = _chain(repo, states, 2, small)
    reads = Counted(monkeypatch, ByteRanges, "read")
    whole = Counted(monkeypatch, updates_base, "read_array")
    arrays = Counted(monkeypatch, replay_parts, "fresh_array")
    zeros = Counted(monkeypatch, np, "zeros")
    with threads.threads_for(n_threads):
        got = repo.checkout(ids[-1])
    assert bits_equal(got["w"], states[-1]) and bits_equal(got["b"], small["b"])
    assert len(arrays.calls) == 1
    per_dataset: dict[int, list[int]] = {}
    for ranges, out, first in reads.calls:
        per_dataset.setdefault(id(ranges), []).append(first)
        assert out.size == min(1 << 20, states[0].nbytes - first)
    assert len(per_dataset) == 5
    assert all(sorted(firsts) == [0, 1 << 20, 2 << 20, 3 << 20] for firsts in per_dataset.values())
    assert [call[0].name for call in whole.calls] == ["/parameters/b/value"]  # only the small parameter, whole
    # no zeroed array of the tensor's size (the decoded walk's few bookkeeping arrays are not the value's)
    assert [call for call in zeros.calls if int(np.prod(call[0])) >= states[0].size] == []
    assert all(int(np.prod(call[0])) <= 8 for call in zeros.calls)


def test_a_lie_in_the_middle_of_the_run_is_never_looked_at_and_one_at_its_end_is_md802(tmp_path):
    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 2)
    lying = dense.encode(states[0], states[1], version=2)
    lying = Update({**lying.meta, "sha256": "0" * 64}, lying.data)
    ids = [repo.store(lambda w: w.add("w", mdiff.replace(states[0])), Commit("root", date=DATE))]
    for update in (lying, dense.encode(states[1], states[2], version=2)):
        ids.append(repo.store(lambda w, u=update: w.add("w", u), Commit("step", parents=(ids[-1],), date=DATE)))
    assert bits_equal(repo.checkout(ids[2])["w"], states[2])
    with pytest.raises(RepositoryError) as err:
        repo.checkout(ids[1])
    assert err.value.code == "MD802" and "MD602" in err.value.message and ids[1][:12] in err.value.message


def test_a_snapshot_whose_data_is_damaged_is_walked_past_to_the_same_state(tmp_path):
    """A snapshot read in parts that does not hash to its commits' sha256 is a damaged cache: the walk
    without it gives the state (as the general replay does)."""
    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 3)
    ids = _chain(repo, states, 2)
    with repo.open_state(ids[1]) as view:
        write_snapshot(repo, ids[1], view)
    with repo.open_state(ids[3]) as view:
        assert view.snapshot == ids[1]
    with h5py.File(repo.snapshot_path(ids[1]), "r+") as f:
        data = f["parameters/w/value"]
        data[700] = data[700] + np.float32(1)
    got = Repository.find(repo.root).checkout(ids[3])
    assert bits_equal(got["w"], states[3])


def test_a_delta_whose_chunk_does_not_inflate_fails_as_that_delta_md513(tmp_path):
    """StepFailed names the dataset that failed — the replace (-1) or the delta's place in the run — with
    read_array's error (MD513); every part has ended when it is raised."""
    from mdiff.format.chunk_reader import byte_ranges
    from mdiff.format.reader import open_diff
    from mdiff.repo.replay_parts import StepFailed, parts_plan, read_parts

    states = _states("float32", 2)
    paths = []
    for i, update in enumerate([mdiff.replace(states[0]), dense.encode(states[0], states[1], version=2),
                                dense.encode(states[1], states[2], version=2)]):
        paths.append(tmp_path / f"{i}.mdiff")
        mdiff.write(paths[-1], {"w": update}, Commit(f"file {i}", date=DATE))
    with open_diff(paths[2]) as last:
        ranges = byte_ranges(last["w"].data["sub"])
        assert ranges is not None
        _, _, chunk = ranges._spans[2]
    with open(paths[2], "r+b") as f:  # the third chunk's deflate stream made garbage
        f.seek(chunk.byte_offset)
        f.write(b"\xff" * 64)
    with open_diff(paths[0]) as root, open_diff(paths[1]) as one, open_diff(paths[2]) as two:
        plan = parts_plan(root["w"], [one["w"], two["w"]])
        assert plan is not None
        with pytest.raises(StepFailed) as err:
            read_parts(plan, "w")
        assert err.value.index == 1 and err.value.error.code == "MD513"
        assert bits_equal(read_parts(parts_plan(root["w"], [one["w"]]), "w")[0], states[1])


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kinds", ["sss", "sds", "dss"])
def test_a_run_with_sparse_updates_is_scattered_a_part_at_a_time_to_the_same_bits(tmp_path, monkeypatch, version, kinds):
    """Sparse entries (each update's, split at the parts' edges) are scattered into each part after its read,
    dense deltas or not: no Change is made, one array per tensor, every state exact."""
    from mdiff.updates import base

    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 3, every=97)
    ids = _chain(repo, states, version, kinds=kinds)
    changes = Counted(monkeypatch, base.Change, "__init__")
    arrays = Counted(monkeypatch, replay_parts, "fresh_array")
    with threads.threads_for(2):
        for commit_id, expected in zip(ids, states):
            assert bits_equal(Repository.find(repo.root).checkout(commit_id)["w"], expected)
    assert changes.calls == [] and len(arrays.calls) == len(ids)


def test_sparse_entries_past_the_bound_are_left_to_the_general_replay(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_parts, "HELD_BYTES", 0)
    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 2, shape=(256, 1024), every=2)  # sparse entries of 1.5 times the value's bytes
    ids = _chain(repo, states, 2, kinds="ss")
    with repo.open_state(ids[-1]) as view:
        steps = view._plan.history["w"]
        assert replay_parts.parts_plan(steps[0].update, [s.update for s in steps[1:]]) is None
        assert bits_equal(view.read("w"), states[-1])
    monkeypatch.setattr(replay_parts, "HELD_BYTES", 64 << 20)
    with repo.open_state(ids[-1]) as view:
        assert replay_parts.parts_plan(steps[0].update, [s.update for s in steps[1:]]) is not None


def test_sparse_positions_out_of_range_in_a_run_are_md802_naming_the_commit(tmp_path):
    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 1)
    size = states[0].size
    bad = sparse.from_entries(np.zeros(states[0].shape, np.float32), np.array([5, size], np.uint64),
                              np.array([1, 1], np.uint32))
    bad = Update({**bad.meta, "sha256": sha256_hex(states[1])}, bad.data)
    ids = _chain(repo, states, 2)
    ids.append(repo.store(lambda w: w.add("w", bad), Commit("bad", parents=(ids[-1],), date=DATE)))
    with pytest.raises(RepositoryError) as err:
        repo.checkout(ids[-1])
    assert err.value.code == "MD802" and "MD408" in err.value.message and ids[-1][:12] in err.value.message


def test_a_run_that_mixes_compositions_is_not_read_in_parts(tmp_path):
    """Parts apply dense deltas before sparse entries: right only when they compose (§13.4), so never for a
    list that mixes XOR and SUB updates (the replay's runs never do)."""
    from mdiff.format.reader import open_diff

    states = _states("float32", 2, shape=(256, 1024))
    updates = [mdiff.replace(states[0]), dense.encode(states[0], states[1], version=1),
               sparse.encode(states[1], states[2], version=2)]
    for i, update in enumerate(updates):
        mdiff.write(tmp_path / f"{i}.mdiff", {"w": update}, Commit(f"file {i}", date=DATE))
    with open_diff(tmp_path / "0.mdiff") as root, open_diff(tmp_path / "1.mdiff") as xor, \
            open_diff(tmp_path / "2.mdiff") as sub:
        assert replay_parts.parts_plan(root["w"], [xor["w"]]) is not None
        assert replay_parts.parts_plan(root["w"], [sub["w"]]) is not None
        assert replay_parts.parts_plan(root["w"], [xor["w"], sub["w"]]) is None


def test_a_value_of_4_mib_or_more_is_made_in_memory_of_its_own_without_huge_pages(tmp_path):
    """numpy madvises transparent huge pages for arrays of 4 MiB and more, whose first touch can stall in the
    kernel's compaction: such a value is made in anonymous memory of its own instead — writable, exact, freed
    with the array (a checkout recycles such memory from 1 MiB up: pages.RECYCLE_MIN_BYTES); a smaller one is
    numpy's own."""
    import mmap
    import pickle

    repo = Repository.init(tmp_path / "r")
    states = _states("float32", 1, shape=(1024 + 3, 1024))  # a little over 4 MiB
    ids = _chain(repo, states, 2, {"small": random_tensor("float32", (128, 1024), 5)})  # 512 KiB
    def memory(array: np.ndarray) -> object:
        while isinstance(array.base, np.ndarray):
            array = array.base
        return array.base.obj if isinstance(array.base, memoryview) else array.base

    got = repo.checkout(ids[-1])
    value = got["w"]
    assert isinstance(memory(value), mmap.mmap) and value.flags.writeable and value.flags.c_contiguous
    assert bits_equal(value, states[-1]) and bits_equal(pickle.loads(pickle.dumps(value)), states[-1])
    assert not isinstance(memory(got["small"]), mmap.mmap)
    value[0, 0] = 1.5  # the caller's own
    assert value[0, 0] == np.float32(1.5)
