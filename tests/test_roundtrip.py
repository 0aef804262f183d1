"""Diff then apply reproduces the new state bit for bit, for every dtype (SPEC.md §7.3–§7.7)."""

from __future__ import annotations

import numpy as np
import pytest

import mdiff
from mdiff.engines import apply_update
from mdiff.format.dtypes import DTYPES, as_bits
from tests.helpers import ALL_DTYPES, FLOAT_SPECIALS, bits_equal, random_tensor, with_specials

FIXED = mdiff.Commit("test", date="2026-01-01T00:00:00Z")


def roundtrip(tmp_path, old: dict, new: dict, compression="gzip") -> tuple[dict, dict]:
    updates = mdiff.diff(old, new)
    path = tmp_path / "d.mdiff"
    mdiff.write(path, updates, FIXED, compression=compression)
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        types = {name: diff[name].type for name in diff}
        result = mdiff.apply(old, diff)
    return result, types


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_every_dtype_round_trips_bit_exactly(tmp_path, dtype, compression):
    base = with_specials(random_tensor(dtype, (40, 33), 1), dtype)
    everywhere = with_specials(random_tensor(dtype, (40, 33), 2), dtype, offset=2)
    few = base.copy()
    as_bits(few).reshape(-1)[[7, 500, 1319]] ^= 1  # flip the lowest bit of three elements
    old = {"dense": base, "sparse": base, "scalar": base.reshape(-1)[:1].reshape(()), "empty": base[:0], "gone": base}
    new = {
        "dense": everywhere,
        "sparse": few,
        "scalar": everywhere.reshape(-1)[:1].reshape(()),
        "empty": base[:0],
        "added": everywhere[:3],
    }
    result, types = roundtrip(tmp_path, old, new, compression)
    assert set(result) == set(new)
    for name in new:
        assert bits_equal(result[name], new[name]), name
    if dtype == "bool":  # random bools differ in about half their elements: dense is smaller
        assert types["sparse"] == "sparse"
    assert types == {"dense": "dense", "sparse": "sparse", "scalar": types["scalar"], "added": "replace", "gone": "delete"}
    assert types["scalar"] in ("dense", "sparse") or np.array_equal(as_bits(old["scalar"]), as_bits(new["scalar"]))


@pytest.mark.parametrize("dtype", list(FLOAT_SPECIALS))
def test_special_values_survive_every_exact_type(tmp_path, dtype):
    """NaN payloads, −0.0, ±inf and subnormals pass through dense, sparse and replace unchanged."""
    base = with_specials(random_tensor(dtype, (64,), 3), dtype, offset=0)
    target = with_specials(base, dtype, offset=1)  # the specials rotate: every one is replaced by another
    updates = {"d": mdiff.dense(base, target), "s": mdiff.sparse(base, target), "r": mdiff.replace(target)}
    path = tmp_path / "s.mdiff"
    mdiff.write(path, updates, FIXED)
    with mdiff.open(path) as diff:
        for name in updates:
            assert bits_equal(apply_update(diff[name], base, name), target)


def test_unchanged_parameters_are_omitted_and_shape_changes_replace():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    updates = mdiff.diff({"same": a, "reshaped": a, "retyped": a}, {"same": a.copy(), "reshaped": a.reshape(4, 3), "retyped": a.astype(np.float64)})
    assert {k: u.type for k, u in updates.items()} == {"reshaped": "replace", "retyped": "replace"}


def test_choice_between_sparse_and_dense_follows_stored_bytes():
    base = np.zeros(1000, dtype=np.float32)
    one_percent = base.copy()
    one_percent[::100] = 1.0
    half = base.copy()
    half[::2] = 1.0
    updates = mdiff.diff({"a": base, "b": base}, {"a": one_percent, "b": half})
    # version 2 (§7.4): positions 0, 100, … as gaps, each value's difference +1.0 zigzagged
    assert updates["a"].type == "sparse" and updates["a"].meta["version"] == 2
    assert updates["a"].data["gaps"].tolist() == [0] + [99] * 9
    assert updates["a"].data["sub"].tolist() == [0x3F80_0000 << 1] * 10
    assert updates["b"].type == "dense" and updates["b"].meta["version"] == 2
    # a change relative to an all-zero base is infinite: JSON cannot carry it, so it is left out
    assert updates["a"].meta["stats"] == {"changed": 10}


def test_stats_record_changed_elements_and_relative_change():
    old = np.array([3.0, 4.0, 0.0, 0.0], dtype=np.float64)
    new = np.array([3.0, 4.0, 0.0, 5.0], dtype=np.float64)
    update = mdiff.diff({"w": old}, {"w": new})["w"]
    assert update.meta["stats"] == {"changed": 1, "rel_change": 1.0}  # ‖(0,0,0,5)‖ / ‖(3,4,0,0)‖ = 5/5


def test_xor_is_exact_where_arithmetic_deltas_are_not():
    """The case FINDINGS.md measured on a real fine-tune: old + (new − old) ≠ new in float32."""
    old = np.array([1.0], dtype=np.float32)
    new = np.array([1e-8], dtype=np.float32)
    assert (old + (new - old))[0] != new[0]
    update = mdiff.dense(old, new)
    assert bits_equal(apply_update(update, old), new)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_low_rank_is_within_the_stated_tolerance(tmp_path, dtype):
    from mdiff.updates.low_rank import within_tolerance

    rng = np.random.default_rng(5)
    base = random_tensor(dtype, (24, 4, 5), 6)  # viewed as 24 × 20
    A, B = rng.standard_normal((24, 3)), rng.standard_normal((3, 20))
    update = mdiff.low_rank(A, B, base.shape, DTYPES[dtype], scale=0.25)
    path = tmp_path / "lr.mdiff"
    mdiff.write(path, {"w": update}, FIXED)
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        stored = diff["w"]
        result = apply_update(stored, base, "w")
        assert result.dtype == base.dtype and result.shape == base.shape
        assert within_tolerance(result, base, stored)
        assert stored.meta["lossy"] is True
        off_by_much = result.copy()
        off_by_much.reshape(-1)[0] = off_by_much.reshape(-1)[0] + np.asarray(1.0).astype(base.dtype)
        assert not within_tolerance(off_by_much, base, stored)


def test_low_rank_matches_peft_merge_formula():
    """PEFT merges W + (lora_B @ lora_A) * scale: A = lora_B, B = lora_A (SPEC.md §7.5)."""
    lora_A = np.array([[1.0, 2.0, 0.0]], dtype=np.float32)  # r × in
    lora_B = np.array([[1.0], [-1.0]], dtype=np.float32)  # out × r
    W = np.ones((2, 3), dtype=np.float32)
    update = mdiff.low_rank(lora_B, lora_A, W.shape, DTYPES["float32"], scale=2.0)
    assert apply_update(update, W).tolist() == [[3.0, 5.0, 1.0], [-1.0, -3.0, 1.0]]


def test_names_that_need_escaping_round_trip(tmp_path):
    names = ["a/b/c", ".hidden", "..", "50% off", "with space", "ünïcødé/层", "ctl\x01char", "%2F", "."]
    old = {n: np.zeros(2, np.int32) for n in names}
    new = {n: np.array([i, -i], np.int32) for i, n in enumerate(names, 1)}
    result, _ = roundtrip(tmp_path, old, new)
    assert {k: v.tolist() for k, v in result.items()} == {k: v.tolist() for k, v in new.items()}


def test_parameters_are_listed_in_utf8_byte_order(tmp_path):
    names = ["b", "a", "Z", "é", "a/b", "a.b"]
    path = tmp_path / "o.mdiff"
    mdiff.write(path, {n: mdiff.replace(np.zeros(1, np.int8)) for n in names}, FIXED)
    with mdiff.open(path) as diff:
        assert list(diff) == sorted(names, key=lambda n: n.encode("utf-8"))


def test_empty_diff_is_a_valid_commit(tmp_path):
    path = tmp_path / "empty.mdiff"
    mdiff.write(path, {}, FIXED)
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        assert len(diff) == 0 and diff.commit.message == "test"
