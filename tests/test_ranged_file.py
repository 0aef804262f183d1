"""mdiff.ranged_file: a commit read by byte ranges and verified leaf by leaf (SPEC.md §13.2), exact bytes
for any range, and a large read that holds its fetched bytes once (issue 31: it held the joined leaves and
then a slice of them, about twice a parameter's bytes)."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest

from mdiff import block_ids
from mdiff.ranged_file import BlockMismatch, LeafVerifier, RangedFile


def _ranged(data: bytes) -> RangedFile:
    blocks = block_ids.of_chunks([data])
    listed = blocks.encoded()
    file = RangedFile(lambda start, end: data[start:end], len(data), "commit")
    file.verifier = LeafVerifier(blocks.commit_id, len(data), lambda start, end: listed[start:end], "commit")
    return file


@pytest.fixture(scope="module")
def data() -> bytes:
    return np.random.default_rng(7).integers(0, 256, 3 * block_ids.GROUP_BYTES + 12345, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("offset, n", [(0, 1), (5, 100), (8191, 2), (8192, 8192), (100, 3 * 8192 + 7),
                                       (block_ids.GROUP_BYTES - 3, 9), (0, 1 << 22), (3 * (1 << 20), 20000)])
def test_every_range_gives_the_file_s_bytes_by_pread_and_readinto(data, offset, n):
    file = _ranged(data)
    want = data[offset:offset + n]
    assert file.pread(n, offset) == want
    file.seek(offset)
    buffer = bytearray(n)
    assert file.readinto(buffer) == len(want)
    assert bytes(buffer[:len(want)]) == want
    assert file.tell() == offset + len(want)
    assert file.pread(n, offset) == want  # again, partly from the verified leaves kept


def test_a_read_past_the_end_gives_what_is_there(data):
    file = _ranged(data)
    assert file.pread(100, len(data) - 10) == data[-10:]
    assert file.pread(100, len(data)) == b""
    file.seek(len(data) - 3)
    buffer = bytearray(8)
    assert file.readinto(buffer) == 3 and bytes(buffer[:3]) == data[-3:]


def test_a_large_read_into_a_buffer_holds_the_fetched_bytes_once(data):
    file = _ranged(data)
    n = 3 * block_ids.GROUP_BYTES
    buffer = bytearray(n)
    file.seek(100)
    tracemalloc.start()
    try:
        assert file.readinto(buffer) == n
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert bytes(buffer) == data[100:100 + n]
    # the fetched leaves (n rounded out to whole leaves) and their hashes, not a joined copy and a slice too
    assert peak < n + 2 * block_ids.LEAF + (1 << 18), peak


def test_a_leaf_served_wrong_is_block_mismatch_and_nothing_is_served(data):
    bad = bytearray(data)
    bad[3 * 8192 + 17] ^= 1
    blocks = block_ids.of_chunks([data])
    listed = blocks.encoded()
    file = RangedFile(lambda start, end: bytes(bad[start:end]), len(data), "commit")
    file.verifier = LeafVerifier(blocks.commit_id, len(data), lambda start, end: listed[start:end], "commit")
    assert file.pread(100, 0) == data[:100]
    buffer = bytearray(4 * 8192)
    file.seek(8192)
    with pytest.raises(BlockMismatch, match=r"bytes 24576\.\.32768 are not those of commit"):
        file.readinto(buffer)
    assert bytes(buffer) == bytes(len(buffer))
    assert isinstance(file.failure, BlockMismatch)
    assert isinstance(file, io.RawIOBase)
