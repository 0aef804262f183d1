"""chunk_reader.py reads exactly the bytes libhdf5 reads, on every contiguous and chunked layout and filter
order; it inflates no chunk past its size, however its stream was made (SPEC.md §8.3, §8.5)."""

from __future__ import annotations

import os
import zlib

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.engines import apply_update
from mdiff.errors import InvalidFileError
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.format import chunk_reader
from mdiff.format.chunk_reader import PlannedDataset, fletcher32
from mdiff.hdf5walk.storage import Chunk, coverage_problem, plan_for
from mdiff.hdf5walk.walk import inspect_structure

# (shape, chunks, filters): slabs along the leading axes, edge chunks, every order of the allowed filters
PLANNED = [
    ((4096, 256), (512, 256), ("shuffle", "gzip")),
    ((1000, 77), (128, 77), ("shuffle", "gzip")),  # the last chunk sticks out of the dataset
    ((3, 5, 70), (1, 2, 70), ("gzip",)),
    ((3, 5, 70), (1, 1, 70), ("shuffle",)),
    ((2, 3, 4), (1, 1, 3), ()),  # chunked, unfiltered; the inner axis cut (a slab still)
    ((100_003,), (4096,), ("shuffle", "gzip")),
    ((64, 64), (64, 64), ("gzip",)),  # one chunk
]


def _dataset_file(path, array, chunks=None, filters=(), order_deflate_first=False):
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        if chunks is None:
            f.create_dataset("d", data=array)
            return
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        for name in (reversed(filters) if order_deflate_first else filters):
            if name == "shuffle":
                dcpl.set_shuffle()
            elif name == "gzip":
                dcpl.set_deflate(1)
            elif name == "fletcher32":
                dcpl.set_fletcher32()
        space = h5py.h5s.create_simple(array.shape)
        dset = h5py.h5d.create(f.id, b"d", h5py.h5t.py_create(array.dtype), space, dcpl=dcpl)
        dset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(array))


def _planned(path):
    f = h5py.File(path, "r")
    inventory, findings = inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS)
    assert not [x for x in findings if x.is_error], findings
    return f, inventory.objects["/d"].dataset.plan


def _read_both(path):
    f, plan = _planned(path)
    with f:
        dataset = f["d"]
        by_hdf5 = np.empty(dataset.shape, dataset.dtype)
        dataset.read_direct(by_hdf5)
        if plan is None:
            return None, by_hdf5
        ours = np.empty_like(by_hdf5)
        PlannedDataset(dataset, plan, f.id.get_vfd_handle()).read_direct(ours)
        return ours, by_hdf5


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    raw[: raw.size // 3] = 0  # compressible in part
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("deflate_first", [False, True], ids=["shuffle-then-deflate", "deflate-then-shuffle"])
@pytest.mark.parametrize("dtype", ["<u1", "<u2", "<f4", "<u8"])
@pytest.mark.parametrize("shape,chunks,filters", PLANNED, ids=str)
def test_planned_reads_equal_libhdf5(tmp_path, shape, chunks, filters, dtype, deflate_first):
    array = _data(shape, dtype)
    path = tmp_path / "f.h5"
    _dataset_file(path, array, chunks, filters, deflate_first)
    ours, by_hdf5 = _read_both(path)
    assert ours is not None, "expected a plan"
    assert ours.tobytes() == by_hdf5.tobytes() == array.tobytes()


def test_contiguous_datasets_are_planned(tmp_path):
    array = _data((300, 7), "<f4")
    _dataset_file(tmp_path / "f.h5", array)
    ours, by_hdf5 = _read_both(tmp_path / "f.h5")
    assert ours is not None and ours.tobytes() == array.tobytes()


# (shape, chunks, filters) that mdiff's writer never makes: chunks cutting several axes, fletcher32
# anywhere in the pipeline, deflate twice. libhdf5 reads them; so does chunk_reader.py, bounded.
OTHER_LAYOUTS = [
    ((64, 64), (16, 16), ("gzip",)),  # chunks cut both axes: not contiguous runs
    ((61, 67), (16, 16), ("shuffle", "gzip")),  # edge chunks on both axes
    ((5, 7, 9), (2, 3, 4), ()),
    ((64, 64), (16, 64), ("shuffle", "gzip", "fletcher32")),  # the usual place of fletcher32: last
    ((64, 64), (16, 64), ("fletcher32", "shuffle", "gzip")),  # inside the deflate stream
    ((64, 64), (16, 64), ("fletcher32",)),
    ((1001,), (999,), ("fletcher32",)),  # odd chunk bytes for u1: the checksum's trailing byte
    ((3, 1000), (3, 250), ("gzip", "shuffle", "fletcher32")),
]


@pytest.mark.parametrize("dtype", ["<u1", "<f4", "<u8"])
@pytest.mark.parametrize("shape,chunks,filters", OTHER_LAYOUTS, ids=str)
def test_other_layouts_are_read_here_too(tmp_path, shape, chunks, filters, dtype):
    array = _data(shape, dtype)
    _dataset_file(tmp_path / "f.h5", array, chunks, filters)
    ours, by_hdf5 = _read_both(tmp_path / "f.h5")
    assert ours is not None, "expected a plan"
    assert ours.tobytes() == by_hdf5.tobytes() == array.tobytes()


@pytest.mark.parametrize("size", [0, 1, 2, 3, 719, 720, 721, 1440, 7919, 65536, 1 << 20])
def test_fletcher32_is_libhdf5_s(tmp_path, size):
    """The checksum libhdf5 stores after an unfiltered chunk of ``size`` bytes, recomputed here."""
    if size == 0:
        assert fletcher32(np.empty(0, np.uint8)) == 0
        return
    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size, dtype=np.uint8)
    data[: size // 2] = 0xFF  # sums that fold
    _dataset_file(tmp_path / "f.h5", data, (size,), ("fletcher32",))
    offset, stored = _chunk_span(tmp_path / "f.h5")
    raw = (tmp_path / "f.h5").read_bytes()[offset:offset + stored]
    assert raw[:size] == data.tobytes()
    assert int.from_bytes(raw[size:], "little") == fletcher32(data)


@pytest.mark.parametrize("how", ["checksum", "swapped halves", "data"])
def test_a_fletcher32_chunk_is_read_only_with_libhdf5_s_checksums(tmp_path, how):
    """libhdf5 accepts the checksum and, as written before 1.6.3, its 16-bit halves byte-swapped."""
    array = _data((512,), "<u2")
    path = tmp_path / "f.h5"
    _dataset_file(path, array, (512,), ("fletcher32",))
    body = array.tobytes()
    checksum = fletcher32(np.frombuffer(body, np.uint8))
    if how == "swapped halves":
        checksum = ((checksum & 0x00FF00FF) << 8) | ((checksum >> 8) & 0x00FF00FF)
    elif how == "data":
        body = bytes([body[0] ^ 1]) + body[1:]
    _rewrite_chunk(path, body + checksum.to_bytes(4, "little"))
    if how == "data":
        f, plan = _planned(path)
        with f, pytest.raises(InvalidFileError, match="fletcher32") as info:
            PlannedDataset(f["d"], plan, f.id.get_vfd_handle()).read_direct(np.empty(array.shape, array.dtype))
        assert info.value.code == "MD513"
        with h5py.File(path, "r") as f, pytest.raises(OSError):
            f["d"][...]
    else:
        ours, by_hdf5 = _read_both(path)
        assert ours.tobytes() == by_hdf5.tobytes() == array.tobytes()


def test_compact_and_empty_datasets_have_no_plan(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        space = h5py.h5s.create_simple((4,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"d", h5py.h5t.py_create(np.dtype("<u4")), space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.arange(4, dtype="<u4"))
        f.create_dataset("e", shape=(0, 3), dtype="<f4")
    with h5py.File(path, "r") as f:
        inventory, findings = inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS)
        assert not findings
        assert inventory.objects["/d"].dataset.plan is None and inventory.objects["/e"].dataset.plan is None


@pytest.mark.parametrize("shape,chunks,filters", [
    ((1000, 77), (128, 77), ("shuffle", "gzip")),
    ((61, 67), (16, 16), ("shuffle", "gzip")),
    ((5, 7, 9), (2, 3, 4), ("fletcher32",)),
    ((64, 70, 300), (1, 32, 300), ("shuffle", "gzip")),  # slabs cut on a middle axis; > 4 MiB: in parallel
    ((300, 7), None, ()),  # contiguous
], ids=str)
def test_row_ranges_and_whole_reads_equal_libhdf5_s(tmp_path, shape, chunks, filters):
    """What validation (row blocks) and dump (the first rows) read: no selection goes to libhdf5."""
    array = _data(shape, "<f4", seed=7)
    _dataset_file(tmp_path / "f.h5", array, chunks, filters)
    f, plan = _planned(tmp_path / "f.h5")
    with f:
        planned = PlannedDataset(f["d"], plan, f.id.get_vfd_handle())
        for start, stop in [(0, shape[0]), (0, 1), (3, 17), (shape[0] - 2, shape[0] + 5), (9, 9), (12, 3)]:
            assert planned[start:stop].tobytes() == f["d"][start:stop].tobytes(), (start, stop)
        assert planned[()].tobytes() == planned[...].tobytes() == np.asarray(planned).tobytes() == array.tobytes()
        assert planned[1, 2].tobytes() == array[1, 2].tobytes()


def _chunk_span(path):
    with h5py.File(path, "r") as f:
        info = f["d"].id.get_chunk_info(0)
        return info.byte_offset, info.size


def _rewrite_chunk(path, stored: bytes):
    """Replace chunk 0's stored bytes in place (same length, padded with zeros)."""
    offset, size = _chunk_span(path)
    assert len(stored) <= size
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(stored + bytes(size - len(stored)))


@pytest.mark.parametrize("runs", [False, True], ids=["ISA-L", "zlib-ng"])
@pytest.mark.parametrize("what", ["not deflate", "inflates short", "inflates long"])
def test_chunks_that_do_not_inflate_to_their_size_are_md513(tmp_path, what, runs):
    """By either inflater (chunk_reader._inflater): zlib-ng's where the stored chunk is a small part of its
    size (mostly runs), ISA-L's elsewhere."""
    array = _data((256, 64), "<f4")
    if runs:
        array = np.zeros_like(array)
        array[::16, 0] = 1.5
    path = tmp_path / "f.h5"
    _dataset_file(path, array, (128, 64), ("gzip",))
    chunk_bytes = 128 * 64 * 4
    stream = {
        "not deflate": b"\xff" * 64,
        "inflates short": zlib.compress(bytes(chunk_bytes - 4)),
        "inflates long": zlib.compress(bytes(chunk_bytes + 4)),
    }[what]
    _rewrite_chunk(path, stream)
    before = chunk_reader.counts["runs"]
    f, plan = _planned(path)
    with f, pytest.raises(InvalidFileError) as info:
        PlannedDataset(f["d"], plan, f.id.get_vfd_handle()).read_direct(np.empty(array.shape, array.dtype))
    assert info.value.code == "MD513"
    assert chunk_reader.counts["runs"] - before == runs


def test_streams_of_runs_inflate_with_zlib_ng_the_others_with_isa_l_to_the_same_bytes(tmp_path):
    """A chunk that inflates to RUNS_RATIO× its stored size or more (a sparse update's 8-byte gaps: most planes
    zeros) is inflated by zlib-ng, faster there; a float chunk by ISA-L: each dataset reads back exactly."""
    rng = np.random.default_rng(8)
    gaps = rng.integers(0, 300, 40000).astype("<u8")  # six of eight planes zeros once shuffled
    floats = rng.standard_normal(40000).astype("<f4")
    for name, array, runs in (("gaps", gaps, 1), ("floats", floats, 0)):
        path = tmp_path / f"{name}.h5"
        _dataset_file(path, array, (40000,), ("shuffle", "gzip"))
        before = chunk_reader.counts["runs"]
        ours, _ = _read_both(path)
        assert ours.tobytes() == array.tobytes()
        assert chunk_reader.counts["runs"] - before == runs


def test_a_stream_whose_end_follows_the_last_byte_is_complete(tmp_path):
    """Inflating stops at the chunk's size; the stream's end (and adler32) may still be unread."""
    array = _data((256, 64), "<u1")
    path = tmp_path / "f.h5"
    _dataset_file(path, array, (128, 64), ("gzip",))
    ours, _ = _read_both(path)
    assert ours.tobytes() == array.tobytes()


def test_diff_files_use_the_planned_reader_and_apply_exactly(tmp_path):
    rng = np.random.default_rng(3)
    old = {"w": rng.standard_normal((700, 300)).astype(np.float32), "v": rng.standard_normal(5).astype(np.float32)}
    new = {k: v + np.float32(1e-3) for k, v in old.items()}
    for compression in ("gzip", "none"):
        path = tmp_path / f"{compression}.mdiff"
        mdiff.write(path, mdiff.diff(old, new), mdiff.Commit("m"), compression)
        with mdiff.open(path) as diff:
            assert isinstance(diff["w"].data["sub"], PlannedDataset)
            for name in diff:
                assert apply_update(diff[name], old[name], name).tobytes() == new[name].tobytes()


def test_chunk_sets_that_do_not_cover_the_dataset_once_are_md509_problems():
    chunks = [Chunk((0, 0), 100, 10), Chunk((2, 0), 200, 10)]
    assert coverage_problem((4, 3), (2, 3), chunks) is None
    assert coverage_problem((4, 3), (2, 3), [chunks[0], chunks[0]]) == "two chunks at [0, 0]"
    assert coverage_problem((4, 3), (2, 3), [chunks[0], Chunk((1, 0), 200, 10)]) == (
        "a chunk at [1, 0] does not start on the chunk grid inside the dataset")
    assert coverage_problem((4, 3), (2, 3), [chunks[0], Chunk((4, 0), 200, 10)]) == (
        "a chunk at [4, 0] does not start on the chunk grid inside the dataset")
    assert coverage_problem((4, 3), (2, 3), chunks[:1]) == "1 of 2 chunks are stored"
    assert coverage_problem((), (1,), []) == "chunks of shape [1] for a dataset of shape []"
    # any stored size is planned: inflating is bounded by the chunk's size, not by the stored size
    assert plan_for((4, 3), 4, chunk_shape=(2, 3), chunks=[chunks[0], Chunk((2, 0), 200, 1 << 30)]) is not None


@pytest.mark.parametrize("repeat", range(3))
def test_chunks_sticking_out_of_a_middle_axis_do_not_spill_into_the_next_slab(tmp_path, repeat):
    """(64, 70, 300) in chunks of (1, 32, 300): each slab's third chunk holds 6 rows inside and 26
    outside; read in parallel (> 4 MiB), those 26 must not land on the next slab's first rows."""
    array = _data((64, 70, 300), "<f4", seed=repeat)
    path = tmp_path / "f.h5"
    _dataset_file(path, array, (1, 32, 300), ("shuffle", "gzip"))
    ours, by_hdf5 = _read_both(path)
    assert ours is not None and ours.nbytes > 4 << 20
    assert ours.tobytes() == by_hdf5.tobytes() == array.tobytes()


def test_random_slab_layouts_read_as_libhdf5_reads_them(tmp_path):
    """Random shapes (rank 1-4) cut on a random axis into slabs, some big enough to decode in parallel."""
    rng = np.random.default_rng(2026)
    for i in range(16):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(1, 9, rank))
        shape = (shape[0] * (int(rng.integers(1, 40)) if i % 2 else 1), *shape[1:])
        if i % 4 == 3:  # > 4 MiB of float32: decoded on the thread pool
            shape = (*shape[:-1], shape[-1] * 200_000 // max(1, int(np.prod(shape[:-1]))) + 1)
        axis = int(rng.integers(0, rank))
        chunks = tuple([1] * axis + [int(rng.integers(1, shape[axis] + 1))] + list(shape[axis + 1:]))
        filters = [("shuffle", "gzip"), ("gzip",), ("shuffle",), ()][i % 4]
        dtype = ["<f4", "<u2", "<u8", "<u1"][int(rng.integers(0, 4))]
        array = _data(shape, dtype, seed=i)
        path = tmp_path / f"f{i}.h5"
        _dataset_file(path, array, chunks, filters)
        ours, by_hdf5 = _read_both(path)
        assert ours is not None, (shape, chunks)
        assert ours.tobytes() == by_hdf5.tobytes() == array.tobytes(), (shape, chunks, filters, dtype)


@pytest.mark.parametrize("shape,dtype", [
    ((700, 600), "<f4"),  # the last slab sticks out of axis 0
    ((2, 1000, 1000), "<f4"),  # the writer cuts the middle axis: (1, 262, 1000)
    ((3001, 7), "<u1"),  # no shuffle for one-byte elements
    ((1000, 777), "<u2"),
    ((100_003,), "<u8"),
], ids=str)
def test_the_writer_writes_run_length_deflated_chunks_libhdf5_s_filter_reads(tmp_path, shape, dtype):
    """writer._write_deflated (chunks shuffled and deflated with zlib's Z_RLE on the pool, written raw):
    every chunk is through both filters (mask 0), inflates to exactly what libhdf5's own shuffle + gzip
    pipeline stores for that chunk, is zlib level 1 Z_RLE of it (§8.2, §11), and the file reads back."""
    import zlib

    from mdiff.format import writer

    array = _data(shape, dtype, seed=5)
    chunks_of = {}
    for how in ("pool", "libhdf5"):
        path = tmp_path / f"{how}.h5"
        with h5py.File(path, "w", libver=("v110", "v110")) as f:
            chunks = writer.chunk_shape(array.shape, array.itemsize)
            dataset = f.create_dataset("d", shape=array.shape, dtype=array.dtype, chunks=chunks,
                                       shuffle=array.itemsize > 1, compression="gzip", compression_opts=1,
                                       track_times=False)
            if how == "pool":
                writer._write_deflated(dataset, array, chunks)
            else:
                dataset[...] = array
            chunks_of[how] = [dataset.id.read_direct_chunk(dataset.id.get_chunk_info(i).chunk_offset)
                              for i in range(dataset.id.get_num_chunks())]
    assert len(chunks_of["pool"]) == len(chunks_of["libhdf5"]) > 0
    for (mask, ours), (hdf5_mask, theirs) in zip(chunks_of["pool"], chunks_of["libhdf5"]):
        assert mask == hdf5_mask == 0
        assert zlib.decompress(ours) == zlib.decompress(theirs)
        encoder = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
        assert ours == encoder.compress(zlib.decompress(theirs)) + encoder.flush()
        if zlib.decompress(ours).count(0) > len(ours):  # a compressible chunk: not default-strategy deflate
            assert ours != zlib.compress(zlib.decompress(ours), 1)
    with h5py.File(tmp_path / "pool.h5", "r") as f:
        assert f["d"][...].tobytes() == array.tobytes()
