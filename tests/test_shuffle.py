"""The shuffle filter, copied plane by plane: the writer's shuffle (padded edge chunks included) and the
reader's unshuffle give exactly libhdf5's layout — numpy's transpose of the elements' bytes — on odd sizes,
every element size mdiff stores, and a thread's scratch buffer reused from a bigger chunk to a smaller one."""

from __future__ import annotations

import numpy as np
import pytest

from mdiff.format.chunk_reader import _unshuffle
from mdiff.format.writer import _scratch_buffer, shuffle_into


def _transposed(data: np.ndarray, itemsize: int, size: int) -> bytes:
    """The reference: the elements zero-padded to ``size`` bytes, their bytes transposed (H5Z_filter_shuffle)."""
    padded = np.concatenate([data, np.zeros(size - data.size, np.uint8)])
    return padded.reshape(-1, itemsize).T.tobytes()


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("elements,padded_to", [
    (1, 1), (2, 2), (3, 3), (1021, 1021), (4099, 4099),  # whole chunks of odd sizes
    (1, 7), (5, 8), (1000, 1024), (4097, 65537),  # edge chunks: fewer elements than the chunk holds
], ids=str)
def test_the_writer_s_shuffle_is_the_transposed_bytes_zero_padded(itemsize, elements, padded_to):
    data = np.random.default_rng(elements + itemsize).integers(1, 256, elements * itemsize, dtype=np.uint8)
    out = np.full(padded_to * itemsize, 0xAB, np.uint8)  # stale bytes, as a reused buffer holds them
    shuffle_into(data, itemsize, out)
    assert out.tobytes() == _transposed(data, itemsize, padded_to * itemsize)


def test_a_thread_s_scratch_buffer_reused_for_a_smaller_edge_chunk_holds_no_stale_bytes():
    big = _scratch_buffer(4 * 1000)
    big[:] = 0xFF
    small = _scratch_buffer(4 * 300)
    assert np.shares_memory(small, big)  # the same memory, not a new buffer
    data = np.arange(4 * 250, dtype=np.uint8)
    shuffle_into(data, 4, small)
    assert small.tobytes() == _transposed(data, 4, 4 * 300)


@pytest.mark.parametrize("itemsize", [2, 4, 8])
@pytest.mark.parametrize("size", [2 * 8, 8 * 1021, 8 * 4099, 8 * 4099 + 1, 8 * 4099 + 5, 8 * 1021 + 7], ids=str)
def test_the_reader_s_unshuffle_undoes_the_transpose_and_keeps_trailing_bytes(itemsize, size):
    """Whole elements are unshuffled; bytes past the last whole element stay where they are (libhdf5)."""
    shuffled = np.random.default_rng(size + itemsize).integers(0, 256, size, dtype=np.uint8)
    elements = size // itemsize
    whole = shuffled[:elements * itemsize]
    expected = whole.reshape(itemsize, elements).T.tobytes() + shuffled[elements * itemsize:].tobytes()
    assert _unshuffle(shuffled, itemsize).tobytes() == expected


@pytest.mark.parametrize("itemsize,size", [(1, 10), (4, 4), (4, 7), (8, 3)])
def test_the_reader_leaves_a_buffer_of_one_element_or_less_as_it_is(itemsize, size):
    data = np.arange(size, dtype=np.uint8)
    assert _unshuffle(data, itemsize) is data


@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_unshuffle_undoes_shuffle(itemsize):
    data = np.random.default_rng(itemsize).integers(0, 256, itemsize * 12345, dtype=np.uint8)
    out = np.empty_like(data)
    shuffle_into(data, itemsize, out)
    assert _unshuffle(out, itemsize).tobytes() == data.tobytes()


@pytest.mark.parametrize("itemsize", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("elements", [1, 2, 5, 1021, 262144], ids=str)
def test_the_word_shuffle_and_unshuffle_give_the_transposed_bytes_of_every_element_size(itemsize, elements):
    """shuffling.py moves 2-, 4- and 8-byte elements as words (shifts), others plane by plane: the same bytes."""
    from mdiff.format.shuffling import shuffle_into as shuffled_into, unshuffle_into

    data = np.random.default_rng(elements * itemsize).integers(0, 256, elements * itemsize, dtype=np.uint8)
    out = np.full(data.size, 0xCD, np.uint8)
    shuffled_into(data, itemsize, out)
    assert out.tobytes() == data.reshape(-1, itemsize).T.tobytes()
    back = np.full((elements, itemsize), 0xCD, np.uint8)
    unshuffle_into(out.reshape(itemsize, elements), back)
    assert back.tobytes() == data.tobytes()
    if elements > 2:  # a run of the planes, as a read of some rows of a chunk takes (strided rows)
        part = np.empty((elements - 2, itemsize), np.uint8)
        unshuffle_into(out.reshape(itemsize, elements)[:, 1:-1], part)
        assert part.tobytes() == data[itemsize:-itemsize].tobytes()


@pytest.mark.parametrize("itemsize", [2, 4, 8])
@pytest.mark.parametrize("zero_planes", [(), (1,), "high", "all", "low", "low pair", "second pair"], ids=str)
def test_unshuffle_skips_planes_of_zeros_block_by_block_with_the_same_bytes(itemsize, zero_planes, monkeypatch):
    """Planes that are all zero in a block (a sparse update's high gap bytes) are skipped, block by block (a
    small block here, so that a plane is zero in some blocks and not in others): the bytes are the transpose's.
    Planes are joined in pairs, then pairs of pairs: a pair of zero planes is skipped a level up too."""
    from mdiff.format import shuffling

    monkeypatch.setattr(shuffling, "_BLOCK_BYTES", 64)  # 8 to 32 elements a block
    elements = 1000
    planes = np.random.default_rng(itemsize).integers(0, 256, (itemsize, elements), dtype=np.uint8)
    zeroed = {(): [], (1,): [1], "high": list(range(1, itemsize)), "all": list(range(itemsize)),
              "low": [0], "low pair": [0, 1], "second pair": [2, 3][:itemsize - 2]}[zero_planes]
    for plane in zeroed:
        planes[plane] = 0
    planes[-1, 500:520] = 0  # a block in which the top plane alone is zero
    if zeroed:
        planes[zeroed[0], 40:48] = 7  # a block in which a plane zero elsewhere is not
    back = np.full((elements, itemsize), 0xCD, np.uint8)
    shuffling.unshuffle_into(planes, back)
    assert back.tobytes() == planes.T.tobytes()


@pytest.mark.parametrize("itemsize", [2, 4, 8])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_the_word_shuffle_of_elements_not_aligned_in_memory_gives_the_transposed_bytes(itemsize, offset):
    """shuffle_into shifts each plane straight into ``out`` (a ufunc casting its output as it goes), over more
    elements than one of numpy's buffers holds: the same bytes where the words start at any byte of memory."""
    from mdiff.format.shuffling import shuffle_into as shuffled_into

    elements = 3 * 8192 + 5
    memory = np.random.default_rng(itemsize + offset).integers(0, 256, elements * itemsize + offset, dtype=np.uint8)
    data = memory[offset:]
    out = np.full((elements + 3) * itemsize + 1, 0xCD, np.uint8)[1:]  # padded, and itself not aligned
    shuffled_into(data, itemsize, out)
    assert out.tobytes() == _transposed(data, itemsize, out.size)
