"""Composing XOR updates (SPEC.md §13.4): a run of dense and sparse updates of a parameter is folded
into one change before the base is touched, and the result is checked once, against the last sha256."""

from __future__ import annotations

import numpy as np
import pytest

import mdiff
from mdiff.errors import ApplyError, InvalidFileError, RepositoryError
from mdiff.format.commit import Commit
from mdiff.format.dtypes import DTYPES, as_bits
from mdiff.repo import Repository
from mdiff.updates import dense, sparse
from mdiff.updates.base import Change, Update, sha256_hex
from tests.helpers import ALL_DTYPES, bits_equal, random_tensor, with_specials

DATE = "2026-05-01T00:00:00Z"


def _changed(value: np.ndarray, every: int, seed: int) -> np.ndarray:
    """``value`` with every ``every``-th element replaced by another value's bits."""
    out = value.copy()
    other = random_tensor(dtype_name(value), value.shape, seed)
    as_bits(out).reshape(-1)[::every] = as_bits(other).reshape(-1)[::every]
    return out


def dtype_name(value: np.ndarray) -> str:
    from mdiff.format.dtypes import dtype_of

    return dtype_of(value).name


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dense_and_sparse_updates_fold_into_the_change_of_the_whole_run(dtype):
    base = with_specials(random_tensor(dtype, (6, 7), 1), dtype)
    one = _changed(base, 1, 2)
    two = _changed(one, 5, 3)
    three = with_specials(_changed(two, 3, 4), dtype, offset=2)
    run = [dense.encode(base, one), sparse.encode(one, two), dense.encode(two, three), sparse.encode(three, three)]
    change = Change.fold_first(run[0], "w")
    for update in run[1:]:
        change.fold(update, "w")
    result = change.applied_to(base.copy())
    assert bits_equal(result, three)
    assert sha256_hex(result) == run[-1].sha256
    # the change is the XOR of the first base's and the last result's bits, nothing else
    assert np.array_equal(change.bits, (as_bits(base) ^ as_bits(three)).reshape(-1))


def test_a_change_applies_in_the_base_s_own_buffer():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    new = base + np.float32(1)
    change = Change.fold_first(dense.encode(base, new), "w")
    result = change.applied_to(base)
    assert result is base and bits_equal(base, new)


@pytest.mark.parametrize("version", [1, 2])
def test_a_run_of_one_dense_update_is_applied_to_the_base_in_one_pass_with_the_fold_s_checks(version):
    """§13.4: a lone dense update is kept, not folded into a change of zeros, and applied straight to the base
    (the same bits a fold then an apply give); its change is folded only when asked for; and a bool pattern
    other than 0 or 1 is refused (MD409) before the base is touched."""
    base = with_specials(random_tensor("float32", (300, 7), 5), "float32")
    new = _changed(base, 2, 6)
    update = dense.encode(base, new, version=version)
    change = Change.fold_first(update, "w")
    assert change._bits is None  # nothing allocated for a run of one
    result = change.applied_to(base.copy())
    assert bits_equal(result, new) and sha256_hex(result) == update.sha256
    kept = Change.fold_first(update, "w")
    expected = update.update_type.delta.fold(np.zeros(base.size, np.uint32), update.array(update.update_type.delta.dataset).reshape(-1))
    assert kept.bits.tobytes() == expected.tobytes()
    flags = np.zeros(4, np.bool_)
    good = dense.encode(flags, flags, version=version)
    bad = Update({**good.meta}, {good.update_type.delta.dataset: np.array([0, 3, 0, 0], np.uint8)})
    target = flags.copy()
    with pytest.raises(InvalidFileError) as err:
        Change.fold_first(bad, "b").applied_to(target)
    assert err.value.code == "MD409" and not target.any()


def test_only_updates_that_compose_are_folded():
    w = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="replace update does not compose"):
        Change.fold_first(mdiff.replace(w), "w")
    change = Change.fold_first(dense.encode(w, w * 2), "w")
    with pytest.raises(ValueError, match="low_rank update does not compose with xor updates"):
        change.fold(mdiff.low_rank(np.ones((2, 1), np.float32), np.ones((1, 2), np.float32), (2, 2), DTYPES["float32"]),
                    "w")


def _sparse(indices, xor, dtype, size: int) -> Update:
    new = np.zeros(size, dtype)
    return sparse.from_entries(new, np.asarray(indices, np.uint64), np.asarray(xor, np.dtype(dtype).str.replace("f", "u")
                                                                                 if dtype != np.bool_ else np.uint8))


def test_a_fold_refuses_what_the_update_s_apply_refuses():
    change = Change.fold_first(dense.encode(np.zeros(4, np.float32), np.ones(4, np.float32)), "w")
    with pytest.raises(InvalidFileError) as err:
        change.fold(_sparse([2, 1], [1, 1], np.float32, 4), "w")  # out of order
    assert err.value.code == "MD408"
    with pytest.raises(InvalidFileError) as err:
        change.fold(_sparse([4], [1], np.float32, 4), "w")  # past the end
    assert err.value.code == "MD408"
    flags = np.zeros(4, np.bool_)
    change = Change.fold_first(dense.encode(flags, flags), "b")
    with pytest.raises(InvalidFileError) as err:
        change.fold(_sparse([0], [2], np.bool_, 4), "b")  # a bool pattern other than 0 or 1
    assert err.value.code == "MD409"
    bad = Update({**dense.encode(flags, flags).meta}, {"xor": np.array([0, 3, 0, 0], np.uint8)})
    with pytest.raises(InvalidFileError) as err:
        change.fold(bad, "b")
    assert err.value.code == "MD409"


# ---------------------------------------------------------------- in a repository's replay


def _chain(repo: Repository, updates, first: dict) -> list[str]:
    """A root commit of ``first`` and one commit per update of "w", each on the one before."""
    ids = [repo.store(lambda w: [w.add(k, mdiff.replace(v)) for k, v in sorted(first.items())],
                      Commit("root", date=DATE))]
    for i, update in enumerate(updates):
        ids.append(repo.store(lambda w, u=update: w.add("w", u), Commit(f"step {i}", parents=(ids[-1],), date=DATE)))
    repo.set_branch("main", ids[-1])
    return ids


def test_a_checkout_checks_the_last_sha256_of_a_run_and_skips_the_ones_it_never_materialises(tmp_path):
    repo = Repository.init(tmp_path / "r")
    base = random_tensor("float32", (50,), 1)
    one, two = _changed(base, 2, 2), _changed(base, 3, 3)
    lying = Update({**dense.encode(base, one).meta, "sha256": "0" * 64}, dense.encode(base, one).data)
    ids = _chain(repo, [lying, sparse.encode(one, two)], {"w": base})
    assert bits_equal(repo.state(ids[2])["w"], two)  # the lie in the middle of the run is never looked at
    with pytest.raises(RepositoryError) as err:
        repo.state(ids[1])  # ... where it is the run's last sha256, it is
    assert err.value.code == "MD802" and "MD602" in err.value.message


def test_a_run_whose_result_differs_from_its_last_sha256_is_md802(tmp_path):
    repo = Repository.init(tmp_path / "r")
    base = random_tensor("float32", (50,), 1)
    one = _changed(base, 2, 2)
    other = _changed(base, 2, 9)
    update = dense.encode(base, one)
    wrong = Update({**update.meta, "sha256": sha256_hex(other)}, update.data)
    ids = _chain(repo, [dense.encode(base, base), wrong], {"w": base})
    with pytest.raises(RepositoryError) as err:
        repo.state(ids[-1])
    assert err.value.code == "MD802" and "MD602" in err.value.message


@pytest.mark.parametrize("where", [1, 2])
def test_a_run_with_bad_indices_anywhere_is_md802(tmp_path, where):
    repo = Repository.init(tmp_path / "r")
    base = np.zeros(8, np.float32)
    good = sparse.encode(base, base)
    bad = _sparse([5, 3], [1, 1], np.float32, 8)
    updates = [good, good, good]
    updates[where] = Update({**bad.meta, "sha256": good.sha256}, bad.data)
    ids = _chain(repo, updates, {"w": base})
    with pytest.raises(RepositoryError) as err:
        repo.state(ids[-1])
    assert err.value.code == "MD802" and "MD408" in err.value.message


def test_a_run_after_an_inexact_value_s_replace_starts_from_the_replace(tmp_path):
    """low_rank breaks a run (it does not compose); the replace after it starts a new history."""
    repo = Repository.init(tmp_path / "r")
    w = random_tensor("float32", (4, 3), 5)
    lr = mdiff.low_rank(np.ones((4, 1), np.float32), np.ones((1, 3), np.float32), (4, 3), DTYPES["float32"])
    fresh = _changed(w, 2, 6)
    later = _changed(fresh, 3, 7)
    ids = _chain(repo, [dense.encode(w, w + 1), lr, mdiff.replace(fresh), sparse.encode(fresh, later),
                        dense.encode(later, later)], {"w": w})
    assert bits_equal(repo.state(ids[-1])["w"], later)


def test_apply_error_of_a_run_names_the_commit(tmp_path):
    repo = Repository.init(tmp_path / "r")
    base = np.zeros(8, np.float32)
    bad = _sparse([9], [1], np.float32, 8)
    ids = _chain(repo, [Update({**bad.meta, "sha256": sha256_hex(base)}, bad.data)], {"w": base})
    with pytest.raises(RepositoryError) as err:
        repo.state(ids[-1])
    assert ids[-1] in err.value.message and not isinstance(err.value, ApplyError)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("held_bytes", [1, 1 << 20])  # folded after every sparse update, or all at the end
def test_sparse_entries_are_folded_block_by_block_to_the_same_change(version, held_bytes, monkeypatch):
    """Change holds sparse entries and folds them a block of positions at a time: the same bits as
    applying each update in turn, across block edges, with dense updates in between."""
    monkeypatch.setattr(Change, "_BLOCK", 7)
    monkeypatch.setattr(Change, "_HELD_BYTES", held_bytes)
    rng = np.random.default_rng(version)
    states = [random_tensor("float32", (5, 9), 11)]
    for step in range(6):
        states.append(_changed(states[-1], 1 if step == 3 else int(rng.integers(2, 9)), 20 + step))
    run = [(dense if step == 3 else sparse).encode(old, new, version=version)
           for step, (old, new) in enumerate(zip(states, states[1:]))]
    assert [u.type for u in run] == ["sparse"] * 3 + ["dense"] + ["sparse"] * 2
    change = Change.fold_first(run[0], "w")
    for update in run[1:]:
        change.fold(update, "w")
    result = change.applied_to(states[0].copy())
    assert bits_equal(result, states[-1]) and sha256_hex(result) == run[-1].sha256


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dense_first", [False, True])
def test_a_run_of_sparse_updates_is_scattered_into_the_base_with_no_change_array(version, dense_first, monkeypatch):
    """A run that never needs a dense change (sparse updates, after at most one dense update) is applied
    straight to the base — the lone dense update in one pass, then each held entry block by block — and
    makes no change array of the tensor's size: the same bits as the change of the whole run applied."""
    monkeypatch.setattr(Change, "_BLOCK", 7)
    states = [random_tensor("float32", (5, 9), 31)]
    for step in range(5):
        states.append(_changed(states[-1], 1 if (dense_first and step == 0) else 2 + step, 40 + step))
    run = [(dense if dense_first and step == 0 else sparse).encode(old, new, version=version)
           for step, (old, new) in enumerate(zip(states, states[1:]))]
    change = Change.fold_first(run[0], "w")
    for update in run[1:]:
        change.fold(update, "w")
    base = states[0].copy()
    result = change.applied_to(base)
    assert result is base and bits_equal(result, states[-1]) and sha256_hex(result) == run[-1].sha256
    assert change._bits is None and not change._held  # no change array was made; every entry was applied
