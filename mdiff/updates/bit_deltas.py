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

from collections.abc import Callable

import numpy as np

from mdiff.pages import recycled_array
from mdiff.threads import in_parts


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
    def undo(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` (which may be ``bits``) ← the patterns that ``delta`` makes into ``bits``: apply's inverse."""
        raise NotImplementedError

    # A run of deltas folded (§13.4) is kept in the form that is cheapest to add to: the XOR itself, or
    # the wrapping difference before zigzag (all zeros, in either, changes nothing).

    @classmethod
    def fold(cls, change: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """``change`` (a folded run, overwritten) followed by the stored ``delta``; returns ``change``. For
        both kinds that is the delta applied to the run's form as to bits: XOR, or the difference added."""
        return cls.apply(change, delta, out=change)

    @classmethod
    def apply_folded(cls, bits: np.ndarray, change: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` (which may be ``bits``) ← ``bits`` changed by a folded run."""
        raise NotImplementedError


class XorDelta(BitDelta):
    """``delta = old ⊕ new``; ``new = old ⊕ delta``. Its own inverse; composes by XOR."""

    dataset = "xor"

    @classmethod
    def between(cls, old_bits: np.ndarray, new_bits: np.ndarray) -> np.ndarray:
        return np.asarray(np.bitwise_xor(old_bits, new_bits))

    @classmethod
    def apply(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        return _elementwise(np.bitwise_xor, bits, delta, out)

    @classmethod
    def undo(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        return np.bitwise_xor(bits, delta, out=out)

    @classmethod
    def apply_folded(cls, bits: np.ndarray, change: np.ndarray, out: np.ndarray) -> np.ndarray:
        return _elementwise(np.bitwise_xor, bits, change, out)


class SubDelta(BitDelta):
    """``delta = zigzag((new − old) mod 2^w)``; ``new = old + unzigzag(delta) mod 2^w``.

    zigzag(d) = (d << 1) ⊕ (d >> (w − 1)) with an arithmetic shift on the signed view: small
    differences of either sign become small unsigned numbers, the sign in the lowest bit (without
    it a negative difference fills the high byte planes with 0xFF). Unsigned numpy arithmetic wraps
    modulo 2^w, which is exactly the arithmetic the format defines.
    """

    dataset = "sub"

    # Elements per block: each step below runs over a block that stays in the core's cache (128–512 KiB),
    # instead of passing over whole tensors in memory 4–5 times (apply 2.3× faster on 4M float32 values).
    _BLOCK = 1 << 15

    @classmethod
    def zigzag(cls, difference: np.ndarray, in_place: bool = False) -> np.ndarray:
        """zigzag of wrapping differences (unsigned, any width): a new array, or ``difference``
        overwritten (one temporary the less, for a writer that owns it)."""
        flat = np.asarray(difference).reshape(-1)  # 1-D: a 0-d array's ufuncs give scalars, not arrays
        out = flat if in_place else flat.copy()
        zigzag_block = cls._zigzagger(flat.dtype)
        signs = np.empty(min(cls._BLOCK, out.size), flat.dtype)
        for start in range(0, out.size, cls._BLOCK):
            block = out[start:start + cls._BLOCK]
            zigzag_block(block, signs[:block.size])
        return out.reshape(np.shape(difference))

    @staticmethod
    def _zigzagger(dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray], None]:
        """zigzag of one block in place, with a scratch of its size, for unsigned words of ``dtype`` (the constants
        made once, not once a block)."""
        signed = np.dtype(f"<i{dtype.itemsize}")
        one, top = np.array(1, dtype), np.array(8 * dtype.itemsize - 1, signed)

        def zigzag_block(block: np.ndarray, sign: np.ndarray) -> None:
            np.right_shift(block.view(signed), top, out=sign.view(signed))  # all ones where negative
            np.left_shift(block, one, out=block)
            np.bitwise_xor(block, sign, out=block)

        return zigzag_block

    @classmethod
    def unzigzag(cls, delta: np.ndarray) -> np.ndarray:
        """The wrapping difference each stored delta means, as a new array: (z >> 1) ⊕ −(z & 1)."""
        flat = np.asarray(delta).reshape(-1)
        out = np.empty_like(flat)
        scratch = np.empty(min(cls._BLOCK, flat.size), flat.dtype)
        for start in range(0, flat.size, cls._BLOCK):
            cls._unzigzag_block(flat[start:start + cls._BLOCK], out[start:start + cls._BLOCK], scratch)
        return out.reshape(np.shape(delta))

    @staticmethod
    def _unzigzag_block(delta: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
        one = np.array(1, delta.dtype)
        sign = scratch[:delta.size]
        np.bitwise_and(delta, one, out=sign)
        np.negative(sign, out=sign)  # unsigned: 0 or all ones
        np.right_shift(delta, one, out=out)
        np.bitwise_xor(out, sign, out=out)

    @classmethod
    def between(cls, old_bits: np.ndarray, new_bits: np.ndarray) -> np.ndarray:
        return cls._between(old_bits, new_bits, count=False)[0]

    @classmethod
    def between_counted(cls, old_bits: np.ndarray, new_bits: np.ndarray) -> tuple[np.ndarray, int]:
        """:meth:`between`, and how many of its elements are not zero — the values whose bits changed (zigzag
        keeps zeros) — counted block by block while each is in cache: a ``count_nonzero`` of the whole delta
        afterwards reads it from memory again (64 MiB of float32: ~14 ms against ~2 ms)."""
        return cls._between(old_bits, new_bits, count=True)

    @classmethod
    def _between(cls, old_bits: np.ndarray, new_bits: np.ndarray, count: bool) -> tuple[np.ndarray, int]:
        old_flat, new_flat = np.asarray(old_bits).reshape(-1), np.asarray(new_bits).reshape(-1)
        out = recycled_array(new_flat.shape, new_flat.dtype)  # a commit's: pages of an earlier delta (pages.py)
        zigzag_block = cls._zigzagger(out.dtype)
        counts: dict[int, int] = {}  # each part's, by its first element

        def part(first: int, last: int) -> None:  # on the pool, parts of a large tensor side by side
            # each block subtracted and zigzagged (its scratch made once a part) while in cache
            signs = np.empty(min(cls._BLOCK, last - first), out.dtype)
            changed = 0
            for start in range(first, last, cls._BLOCK):
                stop = min(start + cls._BLOCK, last)
                block = out[start:stop]
                np.subtract(new_flat[start:stop], old_flat[start:stop], out=block)
                zigzag_block(block, signs[:stop - start])
                if count:
                    changed += int(np.count_nonzero(block))
            counts[first] = changed

        in_parts(out.size, out.itemsize, part)
        return out.reshape(np.shape(new_bits)), sum(counts.values())

    @classmethod
    def apply(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        if not (out.flags.c_contiguous and np.shape(bits) == np.shape(delta) == out.shape):  # no flat view to write
            return np.add(bits, cls.unzigzag(delta), out=out)
        flat_bits, flat_delta, flat_out = (np.asarray(a).reshape(-1) for a in (bits, delta, out))

        def part(first: int, last: int) -> None:  # on the pool, parts of a large tensor side by side
            difference = np.empty(min(cls._BLOCK, last - first), flat_delta.dtype)
            scratch = np.empty_like(difference)
            for start in range(first, last, cls._BLOCK):
                stop = min(start + cls._BLOCK, last)
                block = difference[:stop - start]
                cls._unzigzag_block(flat_delta[start:stop], block, scratch)
                np.add(flat_bits[start:stop], block, out=flat_out[start:stop])

        in_parts(flat_delta.size, flat_delta.itemsize, part)
        return out

    @classmethod
    def undo(cls, bits: np.ndarray, delta: np.ndarray, out: np.ndarray) -> np.ndarray:
        return np.subtract(bits, cls.unzigzag(delta), out=out)

    @classmethod
    def apply_folded(cls, bits: np.ndarray, change: np.ndarray, out: np.ndarray) -> np.ndarray:
        return _elementwise(np.add, bits, change, out)


def _elementwise(ufunc: np.ufunc, bits: np.ndarray, other: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``ufunc(bits, other, out=out)``, a large array's parts side by side on the pool (threads.in_parts)
    where all three are flat views of the same shape, as one call otherwise."""
    if not (out.flags.c_contiguous and np.shape(bits) == np.shape(other) == out.shape
            and np.asarray(bits).flags.c_contiguous and np.asarray(other).flags.c_contiguous):
        return ufunc(bits, other, out=out)
    flat_bits, flat_other, flat_out = (np.asarray(a).reshape(-1) for a in (bits, other, out))

    def part(start: int, stop: int) -> None:
        ufunc(flat_bits[start:stop], flat_other[start:stop], out=flat_out[start:stop])

    in_parts(flat_out.size, flat_out.itemsize, part)
    return out
