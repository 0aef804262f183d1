"""`stats.rel_change` of a dense or sparse update (SPEC.md §7.1), computed as §11 defines it.

‖new − old‖₂ / ‖old‖₂ is informative, but it is written into the file, so it is part of the bytes and of the
commit id: the same change must give the same float on every machine (§11). A BLAS dot product does not — its
kernel, chosen for the CPU, decides the order of the additions (measured: three OpenBLAS kernels, three ids for
one commit). So the sums here are made in an order fixed by the spec and by nothing else: each element's square
rounded in the working format, each block of :data:`BLOCK` elements summed by halving (the second half added to
the first, element by element, until one value is left; a short last block padded with zeros, which changes no
sum), the blocks' sums added in binary64 in block order. Elementwise additions and multiplications are IEEE
operations that every CPU rounds alike, whatever its vector width.

The working format is binary32 for float32, float16 and bfloat16 values (both widen to it exactly) — 20× less CPU
than binary64 — unless a binary32 sum overflows while every value is finite; then, as for float64 and integer
values, binary64.
"""

from __future__ import annotations

import math

import numpy as np

from mdiff.threads import in_parts

__all__ = ["BLOCK", "relative_change"]

BLOCK = 1 << 16  # elements summed by halving (§11); a power of two


def relative_change(old: np.ndarray, new: np.ndarray) -> float | None:
    """‖new − old‖₂ / ‖old‖₂ as §11 computes it: 0.0 where both sums are 0, None where it is no finite number (a
    sum not finite, or a change from an all-zero ``old``)."""
    o = old.reshape(-1)
    n = new.reshape(-1)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # an overflow shows in the sums (step 4)
        if o.dtype == np.float64 or o.dtype.kind in "iub":
            change, base = _sums(o, n, np.dtype(np.float64))
        else:
            change, base = _sums(o, n, np.dtype(np.float32))
            if not (math.isfinite(change) and math.isfinite(base)) and np.isfinite(o).all() and np.isfinite(n).all():
                change, base = _sums(o, n, np.dtype(np.float64))
    if not (math.isfinite(change) and math.isfinite(base)):
        return None
    if base == 0:
        return 0.0 if change == 0 else None
    return math.sqrt(change) / math.sqrt(base)


_GROUP = 2  # blocks summed together: their squares (2 × 2 × 64 Ki binary32, 1 MiB) stay in a core's cache


def _sums(o: np.ndarray, n: np.ndarray, working: np.dtype) -> tuple[float, float]:
    """(C, B) of §11 steps 1–3 in the ``working`` format."""
    if o.size <= BLOCK:  # one block, here: a small tensor's statistic costs a few numpy calls
        if not o.size:
            return 0.0, 0.0
        sums = np.empty((2, 1), np.float64)
        _block_sums(o, n, working, 1 << (o.size - 1).bit_length(), sums)
        change, base = sums[:, 0].tolist()
        return change, base
    blocks = -(-o.size // BLOCK)
    all_sums = np.empty((2, blocks), np.float64)  # each block's (change, base), added below in block order

    def part(first: int, last: int) -> None:  # whole blocks, on the pool beside the other parts (in_parts)
        for start in range(first, last, _GROUP * BLOCK):
            stop = min(start + _GROUP * BLOCK, last)
            full = (stop - start) // BLOCK
            if full:
                _block_sums(o[start:start + full * BLOCK], n[start:start + full * BLOCK], working, BLOCK,
                            all_sums[:, start // BLOCK:start // BLOCK + full])
            if start + full * BLOCK < stop:  # the short last block: padded to a power of two with zeros
                rest = stop - start - full * BLOCK
                _block_sums(o[stop - rest:stop], n[stop - rest:stop], working, 1 << (rest - 1).bit_length(),
                            all_sums[:, blocks - 1:blocks])

    in_parts(o.size, 1, part, part_bytes=4 * _GROUP * BLOCK)
    change = base = 0.0
    for block_change, block_base in zip(all_sums[0].tolist(), all_sums[1].tolist()):
        change += block_change
        base += block_base
    return change, base


def _block_sums(o: np.ndarray, n: np.ndarray, working: np.dtype, width: int, out: np.ndarray) -> None:
    """The halving sums of (new − old)² and old² of each block of ``width`` elements (the last padded with
    zeros), in ``working``'s format, into ``out`` (2 × blocks, binary64)."""
    count = -(-o.size // width)
    squares = np.empty((2, count, width), working)  # row 0: the change's squares, row 1: the base's
    rows = squares.reshape(2, -1)
    if o.size < rows.shape[1]:
        rows[:, o.size:] = 0  # the padding of a short block
    change, base = rows[0, :o.size], rows[1, :o.size]
    if o.dtype == working:
        np.subtract(n, o, out=change)
        np.multiply(o, o, out=base)
    else:  # widened first (exactly, or rounded to nearest for integers), then subtracted in the working format
        change[...] = n
        base[...] = o
        np.subtract(change, base, out=change)
        np.multiply(base, base, out=base)
    np.multiply(change, change, out=change)
    half = width
    while half > 1:
        half //= 2
        np.add(squares[:, :, :half], squares[:, :, half:2 * half], out=squares[:, :, :half])
    out[...] = squares[:, :, 0]
