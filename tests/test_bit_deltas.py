"""The two exact deltas of dense and sparse (SPEC.md §7.1, §7.3, §7.4): XOR (version 1) and SUB (version 2)."""

from __future__ import annotations

import numpy as np
import pytest

from mdiff.updates.bit_deltas import SubDelta, XorDelta

WIDTHS = [np.uint8, np.uint16, np.uint32, np.uint64]


def test_zigzag_matches_the_spec_examples():
    """§7.1: in uint8, a difference of 1 is stored as 2, 255 (−1) as 1, 128 as 255, 127 as 254."""
    differences = np.array([0, 1, 255, 128, 127, 2, 254], np.uint8)
    assert SubDelta.zigzag(differences).tolist() == [0, 2, 1, 255, 254, 4, 3]
    assert SubDelta.unzigzag(SubDelta.zigzag(differences)).tolist() == differences.tolist()


@pytest.mark.parametrize("delta", [XorDelta, SubDelta])
def test_every_pair_of_uint8_patterns_round_trips(delta):
    old, new = (a.reshape(-1) for a in np.meshgrid(np.arange(256, dtype=np.uint8), np.arange(256, dtype=np.uint8)))
    stored = delta.between(old, new)
    assert np.array_equal(delta.apply(old, stored, out=np.empty_like(old)), new)
    if delta is SubDelta:  # zigzag is a bijection: each difference has one stored value, 0 only for no change
        assert np.array_equal(stored == 0, old == new)


@pytest.mark.parametrize("bits", WIDTHS)
@pytest.mark.parametrize("delta", [XorDelta, SubDelta])
def test_edges_round_trip_and_consecutive_deltas_compose(bits, delta):
    top = np.iinfo(bits).max
    sign = bits(1) << bits(8 * np.dtype(bits).itemsize - 1)
    edges = np.array([0, 1, top, top - 1, sign, sign - 1, sign + 1, 5], bits)
    rng = np.random.default_rng(np.dtype(bits).itemsize)
    values = np.concatenate([edges, rng.integers(0, top, 200, dtype=bits, endpoint=True)])
    a, b, c = values, np.roll(values, 3), np.roll(values[::-1], 5)
    ab, bc = delta.between(a, b), delta.between(b, c)
    assert np.array_equal(delta.apply(a, ab, out=np.empty_like(a)), b)
    run = delta.fold(delta.fold(np.zeros_like(a), ab), bc)  # a run of two, folded (§13.4)
    assert np.array_equal(delta.apply_folded(a, run, out=np.empty_like(a)), c)
    assert np.array_equal(delta.undo(c, bc, out=np.empty_like(c)), b)  # apply's inverse (§9.2's recovered base)
    in_place = a.copy()
    delta.apply(in_place, ab, out=in_place)
    assert np.array_equal(in_place, b)


def test_sub_of_small_float_moves_is_small():
    """A fine-tune's move of a few ulps is a small stored number whatever its sign (why version 2 compresses)."""
    old = np.array([1.0, 1.0, -1.0, 0.0], np.float32).view(np.uint32)
    new = old + np.array([3, 0, 0, 0], np.uint32)
    new[1] = old[1] - np.uint32(2)
    new[3] = np.array([-0.0], np.float32).view(np.uint32)[0]
    assert SubDelta.between(old, new).tolist() == [6, 3, 0, 0xFFFF_FFFF]
    # XOR spreads the borrow of 0x3F800000 − 2 = 0x3F7FFFFE over every bit it crosses
    assert XorDelta.between(old, new).tolist() == [3, 0x00FF_FFFE, 0, 0x8000_0000]


@pytest.mark.parametrize("threads_n", [1, 2])
def test_sub_between_counted_counts_the_changed_values_of_every_part(threads_n):
    """between_counted: the delta between gives, and the count of its non-zero elements — the values whose bits
    changed — summed over every block and every part of a tensor cut in several (threads.PART_BYTES each)."""
    from mdiff import threads

    rng = np.random.default_rng(5)
    old = rng.integers(0, 2**32, 3 * threads.PART_BYTES // 4 + 12345, dtype=np.uint32)
    new = old.copy()
    moved = rng.choice(old.size, 654_321, replace=False)
    new[moved] += rng.integers(1, 5000, moved.size, dtype=np.uint32)  # never 0: each of them changes
    new[-1] ^= np.uint32(1 << 31)  # the last element, in the last part's last (short) block
    with threads.threads_for(threads_n):
        delta, changed = SubDelta.between_counted(old, new)
    assert delta.tobytes() == SubDelta.between(old, new).tobytes()
    assert changed == len(set(moved.tolist()) | {old.size - 1}) == int(np.count_nonzero(old != new))
    assert SubDelta.between_counted(old[:0], new[:0])[1] == 0
    assert SubDelta.between_counted(old[:1], old[:1])[1] == 0
