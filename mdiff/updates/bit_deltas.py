"""The two exact deltas between bit patterns that `dense` and `sparse` store (SPEC.md §7.3–§7.4).

Version 1 stores XOR; version 2 stores SUB, the zigzag of the wrapping integer difference
``(new − old) mod 2^w`` of the bit patterns as unsigned integers of the dtype's width w. Both are
integer arithmetic on bit patterns, never float arithmetic, so every pattern (NaN payloads, ±0,
±Inf, subnormals) round-trips. SUB is smaller after compression: a fine-tune moves a value by some
hundreds to thousands of ulps, which the difference counts directly, where XOR spreads each carry
over every bit it crosses (docs/codec-study.md: −16 % fp32, −12 % bf16 at the floor).

Each delta also composes: two consecutive deltas of one parameter are one delta of the same kind
(XOR of XORs; the sum of the differences), so a chain can be merged before the base is touched.
"""

from __future__ import annotations

import numpy as np


class BitDelta:
    """An exact delta between two arrays of bit patterns (unsigned integers of one width)."""

    dataset: str  # the name of the dataset that stores it

    @classmethod
    def between(cls, old_bits: np.ndarray, new_bits: np.ndarray) -> np.ndarray:
        """The delta taking ``old_bits`` to ``new_bits``, as a new array."""
        raise NotImplementedError

    @classmethod
    def apply(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` (which may be ``bits``) ← the patterns ``delta`` makes of ``bits``."""
        raise NotImplementedError

    @classmethod
    def compose(cls, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """The one delta equal to applying ``first`` and then ``second``."""
        raise NotImplementedError


class XorDelta(BitDelta):
    """``delta = old ⊕ new``; ``new = old ⊕ delta``. Its own inverse; composes by XOR."""

    dataset = "xor"

    @classmethod
    def between(cls, old_bits: np.ndarray, new_bits: np.ndarray) -> np.ndarray:
        return np.asarray(np.bitwise_xor(old_bits, new_bits))

    @classmethod
    def apply(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        return np.bitwise_xor(bits, delta, out=out)

    @classmethod
    def compose(cls, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        return np.asarray(np.bitwise_xor(first, second))


class SubDelta(BitDelta):
    """``delta = zigzag((new − old) mod 2^w)``; ``new = old + unzigzag(delta) mod 2^w``.

    zigzag(d) = (d << 1) ⊕ (d >> (w − 1)) with an arithmetic shift on the signed view: small
    differences of either sign become small unsigned numbers, the sign in the lowest bit (without
    it a negative difference fills the high byte planes with 0xFF). Unsigned numpy arithmetic wraps
    modulo 2^w, which is exactly the arithmetic the format defines.
    """

    dataset = "sub"

    @staticmethod
    def zigzag(difference: np.ndarray, in_place: bool = False) -> np.ndarray:
        """zigzag of wrapping differences (unsigned, any width): a new array, or ``difference``
        overwritten (one temporary the less, for a writer that owns it)."""
        flat = np.asarray(difference).reshape(-1)  # 1-D: a 0-d array's ufuncs give scalars, not arrays
        signs = (flat.view(np.dtype(f"<i{flat.itemsize}")) >> (8 * flat.itemsize - 1)).view(flat.dtype)
        out = np.left_shift(flat, np.array(1, flat.dtype), out=flat if in_place else None)
        np.bitwise_xor(out, signs, out=out)
        return out.reshape(np.shape(difference))

    @staticmethod
    def unzigzag(delta: np.ndarray) -> np.ndarray:
        """The wrapping difference each stored delta means, as a new array: (z >> 1) ⊕ −(z & 1)."""
        flat = np.asarray(delta).reshape(-1)
        one = np.array(1, flat.dtype)
        sign = np.bitwise_and(flat, one).view(np.dtype(f"<i{flat.itemsize}"))
        out = np.right_shift(flat, one)
        np.bitwise_xor(out, np.negative(sign).view(flat.dtype), out=out)
        return out.reshape(np.shape(delta))

    @classmethod
    def between(cls, old_bits: np.ndarray, new_bits: np.ndarray) -> np.ndarray:
        return cls.zigzag(np.asarray(np.subtract(new_bits, old_bits)))

    @classmethod
    def apply(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        return np.add(bits, cls.unzigzag(delta), out=out)

    @classmethod
    def compose(cls, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """The one delta equal to applying ``first`` and then ``second``: the differences add mod 2^w."""
        return cls.zigzag(np.asarray(np.add(cls.unzigzag(first), cls.unzigzag(second))))
