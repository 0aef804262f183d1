"""Tests for mdiff.checkpoints: round trips, cross-checks with the reference
libraries, laziness, atomic writes, and hostile files failing closed."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdiff.checkpoints import (
    CheckpointReader,
    load_checkpoint,
    open_checkpoint,
    save_checkpoint,
    write_checkpoint,
)
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DTYPES, DType
from tests.helpers import special_values

ALL_DTYPES = list(DTYPES)

NPZ_DTYPES = [name for name in ALL_DTYPES if name != "bfloat16"]



def sample_tensors(name: str) -> dict[str, np.ndarray]:
    values = special_values(name)
    return {
        "matrix": values.reshape(2, 4),
        "scalar": values[:1].reshape(()).copy(),
        "empty": np.empty((0, 3), dtype=values.dtype),
    }


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.flags.c_contiguous
    bits = np.dtype(f"<u{expected.dtype.itemsize}")
    assert actual.view(bits).tolist() == expected.view(bits).tolist()


def assert_code(code: str, path: Path) -> CheckpointError:
    """Open and read everything in ``path``, expecting CheckpointError ``code``."""
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert caught.value.code == code, caught.value
    assert caught.value.path == str(path)
    return caught.value


# ------------------------------------------------------------ round trips


@pytest.mark.parametrize("dtype_name", ALL_DTYPES)
def test_safetensors_round_trip_preserves_bits(tmp_path: Path, dtype_name: str) -> None:
    tensors = sample_tensors(dtype_name)
    path = tmp_path / "model.safetensors"
    save_checkpoint(path, tensors)
    loaded = load_checkpoint(path)
    assert sorted(loaded) == ["empty", "matrix", "scalar"]
    for name, expected in tensors.items():
        assert_same_bits(loaded[name], expected)


@pytest.mark.parametrize("dtype_name", NPZ_DTYPES)
def test_npz_round_trip_preserves_bits(tmp_path: Path, dtype_name: str) -> None:
    tensors = sample_tensors(dtype_name)
    path = tmp_path / "model.npz"
    save_checkpoint(path, tensors)
    loaded = load_checkpoint(path)
    assert sorted(loaded) == ["empty", "matrix", "scalar"]
    for name, expected in tensors.items():
        assert_same_bits(loaded[name], expected)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_reader_surface(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"model{suffix}"
    save_checkpoint(path, {"b": np.zeros((2, 3), np.float32), "a": np.ones(4, np.int64)})
    with open_checkpoint(path) as reader:
        assert isinstance(reader, CheckpointReader)
        assert reader.keys() == ["a", "b"]
        assert len(reader) == 2
        assert "a" in reader and "c" not in reader and 3 not in reader
        assert reader.spec("b") == ((2, 3), DTYPES["float32"])
        assert reader.spec("a") == ((4,), DTYPES["int64"])
        with pytest.raises(KeyError):
            reader.read("c")


def test_bfloat16_arrives_as_ml_dtypes(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, {"w": np.array([1.5, -2.0], ml_dtypes.bfloat16)})
    array = load_checkpoint(path)["w"]
    assert array.dtype == np.dtype(ml_dtypes.bfloat16)
    assert array.tolist() == [1.5, -2.0]


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_unusual_names_survive(tmp_path: Path, suffix: str) -> None:
    names = ["a/b/c", ".hidden", "layer.0.weight", "with space", "ünïcödé/层/🙂", "..", "%2F", "tab\there"]
    tensors = {name: np.full(2, i, np.int16) for i, name in enumerate(names)}
    path = tmp_path / f"m{suffix}"
    save_checkpoint(path, tensors)
    loaded = load_checkpoint(path)
    assert sorted(loaded) == sorted(names)
    for i, name in enumerate(names):
        assert loaded[name].tolist() == [i, i]


def test_safetensors_metadata_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, {"x": np.zeros(1, np.uint8)}, metadata={"format": "pt", "note": "ünï"})
    with open_checkpoint(path) as reader:
        assert reader.metadata == {"format": "pt", "note": "ünï"}


# ------------------------------------------------------------ reference libraries


def test_reads_files_written_by_safetensors_library(tmp_path: Path) -> None:
    tensors = {f"{name}.w": special_values(name).reshape(2, 4) for name in ALL_DTYPES}
    tensors["scalar"] = np.array(3.5, np.float32)
    tensors["empty"] = np.empty((0, 3), np.int8)
    path = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(tensors, str(path), metadata={"k": "v"})
    with open_checkpoint(path) as reader:
        assert reader.keys() == sorted(tensors)
        assert reader.metadata == {"k": "v"}
        for name, expected in tensors.items():
            assert_same_bits(reader.read(name), expected)


def test_safetensors_library_reads_our_files(tmp_path: Path) -> None:
    # safetensors 0.8 maps BF16 to ml_dtypes.bfloat16, so every dtype can be checked.
    tensors = {f"{name}.w": special_values(name).reshape(4, 2) for name in ALL_DTYPES}
    tensors["scalar"] = np.array(-0.0, np.float64)
    tensors["empty"] = np.empty((0, 3), np.uint32)
    path = tmp_path / "ours.safetensors"
    save_checkpoint(path, tensors, metadata={"k": "v"})
    loaded = safetensors.numpy.load_file(str(path))
    assert sorted(loaded) == sorted(tensors)
    for name, expected in tensors.items():
        assert_same_bits(loaded[name].copy(), expected)
    with safetensors.safe_open(str(path), framework="numpy") as reference:
        assert reference.metadata() == {"k": "v"}


def test_numpy_reads_our_npz_files(tmp_path: Path) -> None:
    tensors = {f"{name}.w": special_values(name).reshape(2, 2, 2) for name in NPZ_DTYPES}
    tensors["scalar"] = np.array(7, np.int32)
    path = tmp_path / "ours.npz"
    save_checkpoint(path, tensors)
    with np.load(path) as loaded:
        assert sorted(loaded.files) == sorted(tensors)
        for name, expected in tensors.items():
            assert_same_bits(loaded[name], expected)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_reads_npz_written_by_numpy(tmp_path: Path, save) -> None:
    fortran = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    big_endian = np.arange(5, dtype=">i4")
    path = tmp_path / "ref.npz"
    save(path, fortran=fortran, big_endian=big_endian, flag=np.array([True, False]))
    loaded = load_checkpoint(path)
    assert_same_bits(loaded["fortran"], np.ascontiguousarray(fortran))
    assert_same_bits(loaded["big_endian"], np.arange(5, dtype="<i4"))
    assert_same_bits(loaded["flag"], np.array([True, False]))
    with open_checkpoint(path) as reader:
        assert reader.spec("fortran") == ((3, 4), DTYPES["float32"])


# ------------------------------------------------------------ determinism, laziness


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_writing_is_deterministic(tmp_path: Path, suffix: str) -> None:
    tensors = {"b": np.arange(10, dtype=np.float16), "a": np.ones((3, 3), np.int8)}
    reordered = {"a": tensors["a"], "b": tensors["b"]}
    metadata = {"y": "1", "x": "2"} if suffix == ".safetensors" else None
    first, second = tmp_path / f"1{suffix}", tmp_path / f"2{suffix}"
    save_checkpoint(first, tensors, metadata)
    save_checkpoint(second, reordered, dict(reversed(list(metadata.items()))) if metadata else None)
    assert first.read_bytes() == second.read_bytes()


def test_safetensors_data_is_aligned_to_8_bytes(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, {"odd-name": np.zeros(1, np.float64)})
    (header_length,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert (8 + header_length) % 8 == 0


def test_safetensors_reads_only_the_tensor_asked_for(tmp_path: Path) -> None:
    # A bool byte of 7 is caught when read; if open, spec or read("a") touched
    # the bytes of "b", they would fail.
    path = tmp_path / "m.safetensors"
    write_checkpoint(
        path,
        [("a", (3,), DTYPES["float32"]), ("b", (4,), DTYPES["bool"])],
        {"a": np.array([1, 2, 3], np.float32), "b": np.ones(4, bool)}.__getitem__,
    )
    data = bytearray(path.read_bytes())
    data[-4:] = b"\x07" * 4  # "b" is written last
    path.write_bytes(bytes(data))
    with open_checkpoint(path) as reader:
        assert reader.keys() == ["a", "b"]
        assert reader.spec("b") == ((4,), DTYPES["bool"])
        assert reader.read("a").tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(CheckpointError) as caught:
            reader.read("b")
    assert caught.value.code == "MD701"


def test_npz_reads_only_the_tensor_asked_for(tmp_path: Path) -> None:
    # zipfile reads members in 4 KiB blocks and checks the CRC at the end, so
    # corrupting b's last bytes goes unnoticed unless all of b is read.
    path = tmp_path / "m.npz"
    marker = np.full(4, 0x5A5A5A5A, np.int32)
    b = np.concatenate([np.zeros(4096, np.int32), marker])
    save_checkpoint(path, {"a": np.array([1, 2, 3], np.float32), "b": b})
    data = path.read_bytes()
    assert data.count(marker.tobytes()) == 1
    path.write_bytes(data.replace(marker.tobytes(), b"\x00" * 16))  # breaks b's CRC
    with open_checkpoint(path) as reader:
        assert reader.spec("b") == ((4100,), DTYPES["int32"])
        assert reader.read("a").tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(CheckpointError) as caught:
            reader.read("b")
    assert caught.value.code == "MD701"


# ------------------------------------------------------------ writing


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_fetch_is_called_once_per_entry_in_order(tmp_path: Path, suffix: str) -> None:
    calls: list[str] = []

    def fetch(name: str) -> np.ndarray:
        calls.append(name)
        return np.full(2, len(calls), np.uint8)

    entries = [(name, (2,), DTYPES["uint8"]) for name in ["z", "a", "m"]]
    write_checkpoint(tmp_path / f"m{suffix}", entries, fetch)
    assert calls == ["z", "a", "m"]
    assert load_checkpoint(tmp_path / f"m{suffix}")["a"].tolist() == [2, 2]


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_failed_write_leaves_nothing_behind(tmp_path: Path, suffix: str) -> None:
    def failing_fetch(name: str) -> np.ndarray:
        if name == "second":
            raise RuntimeError("source went away")
        return np.zeros(1000, np.float32)

    entries = [(name, (1000,), DTYPES["float32"]) for name in ["first", "second"]]
    path = tmp_path / f"m{suffix}"
    with pytest.raises(RuntimeError, match="source went away"):
        write_checkpoint(path, entries, failing_fetch)
    assert list(tmp_path.iterdir()) == []

    save_checkpoint(path, {"old": np.ones(1, np.int8)})
    previous = path.read_bytes()
    with pytest.raises(RuntimeError):
        write_checkpoint(path, entries, failing_fetch)
    assert path.read_bytes() == previous
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
@pytest.mark.parametrize(
    "returned",
    [np.zeros(3, np.float64), np.zeros((3, 1), np.float32), [0.0, 0.0, 0.0], np.zeros(3, np.complex64)],
)
def test_fetch_returning_the_wrong_array_is_a_value_error(tmp_path: Path, suffix: str, returned) -> None:
    path = tmp_path / f"m{suffix}"
    with pytest.raises(ValueError):
        write_checkpoint(path, [("x", (3,), DTYPES["float32"])], lambda name: returned)
    assert list(tmp_path.iterdir()) == []


def test_entry_shapes_may_be_numpy_integers(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    write_checkpoint(path, [("x", [np.int64(2)], DTYPES["uint8"])], lambda name: np.ones(2, np.uint8))
    with open_checkpoint(path) as reader:
        assert reader.spec("x") == ((2,), DTYPES["uint8"])
        assert type(reader.spec("x")[0][0]) is int


def test_writer_accepts_non_canonical_arrays(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    source = np.arange(6, dtype=">i4").reshape(2, 3).T  # big-endian and not C-ordered
    write_checkpoint(path, [("x", (3, 2), DTYPES["int32"])], lambda name: source)
    assert_same_bits(load_checkpoint(path)["x"], source.astype("<i4"))


@pytest.mark.parametrize(
    "entries",
    [
        [("a", (1,), DTYPES["uint8"]), ("a", (1,), DTYPES["uint8"])],
        [("", (1,), DTYPES["uint8"])],
        [("a", (-1,), DTYPES["uint8"])],
        [("a", (1,), "uint8")],
        [("a", (1,) * 33, DTYPES["uint8"])],
        [("a", (1.0,), DTYPES["uint8"])],
        [("a", (True,), DTYPES["uint8"])],
    ],
)
def test_bad_entries_are_value_errors(tmp_path: Path, entries) -> None:
    with pytest.raises(ValueError):
        write_checkpoint(tmp_path / "m.safetensors", entries, lambda name: np.zeros(1, np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_the_reserved_safetensors_key_cannot_name_a_tensor(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        write_checkpoint(tmp_path / "m.safetensors", [("__metadata__", (1,), DTYPES["uint8"])], lambda n: np.zeros(1, np.uint8))
    assert info.value.code == "MD703" and list(tmp_path.iterdir()) == []


def test_bfloat16_cannot_be_written_to_npz(tmp_path: Path) -> None:
    fetched: list[str] = []

    def fetch(name: str) -> np.ndarray:
        fetched.append(name)
        return np.zeros(2, dtype=ml_dtypes.bfloat16 if name == "h" else np.float32)

    entries = [("f", (2,), DTYPES["float32"]), ("h", (2,), DTYPES["bfloat16"])]
    with pytest.raises(CheckpointError) as caught:
        write_checkpoint(tmp_path / "m.npz", entries, fetch)
    assert caught.value.code == "MD702"
    assert ".safetensors" in caught.value.message
    assert fetched == []
    assert list(tmp_path.iterdir()) == []


def test_npz_cannot_hold_metadata(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(tmp_path / "m.npz", {"x": np.zeros(1)}, metadata={"k": "v"})
    assert caught.value.code == "MD700"
    assert list(tmp_path.iterdir()) == []


def test_unsupported_extension(tmp_path: Path) -> None:
    path = tmp_path / "model.ckpt"
    path.write_bytes(b"\0" * 16)
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(path)
    assert caught.value.code == "MD700"
    assert ".safetensors" in caught.value.message and ".npz" in caught.value.message
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(tmp_path / "out.ckpt", {"x": np.zeros(1)})
    assert caught.value.code == "MD700"


# ------------------------------------------------------------ hostile safetensors


def safetensors_file(path: Path, header: object, data: bytes = b"") -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def f32(shape: list[int], begin: int, end: int) -> dict[str, object]:
    return {"dtype": "F32", "shape": shape, "data_offsets": [begin, end]}


HOSTILE_SAFETENSORS = {
    "empty file": (None, b"", "MD701"),
    "seven bytes": (None, b"\x08\0\0\0\0\0\0", "MD701"),
    "header longer than file": (None, struct.pack("<Q", 100) + b"{}", "MD701"),
    "header length 2**63": (None, struct.pack("<Q", 2**63) + b"{}", "MD701"),
    "header not JSON": (b"not json at all", b"", "MD701"),
    "header not UTF-8": (b'{"\xff": 1}', b"", "MD701"),
    "header is a JSON array": (b"[]", b"", "MD701"),
    "deeply nested header": (b"[" * 100_000, b"", "MD701"),
    "NaN in header": (b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 0]}}', b"", "MD701"),
    "unknown dtype": ({"a": {"dtype": "X9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "MD701"),
    "dtype not a string": ({"a": {"dtype": 5, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "MD701"),
    "F8_E4M3": ({"a": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}, b"\0" * 4, "MD702"),
    "C64": ({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8, "MD702"),
    "negative shape": ({"a": f32([-1], 0, 0)}, b"", "MD701"),
    "bool in shape": ({"a": f32([True], 0, 4)}, b"\0" * 4, "MD701"),
    "float in shape": ({"a": f32([1.0], 0, 4)}, b"\0" * 4, "MD701"),
    "shape not a list": ({"a": f32(4, 0, 16)}, b"\0" * 16, "MD701"),  # type: ignore[arg-type]
    "too many dimensions": ({"a": f32([1] * 33, 0, 4)}, b"\0" * 4, "MD701"),
    "shape too large for numpy": ({"a": f32([0, 2**62, 2**62], 0, 0)}, b"", "MD701"),
    "offsets do not match shape": ({"a": f32([2], 0, 4)}, b"\0" * 8, "MD701"),
    "offsets reversed": ({"a": f32([0], 4, 0)}, b"\0" * 4, "MD701"),
    "offsets negative": ({"a": f32([1], -4, 0)}, b"\0" * 4, "MD701"),
    "three offsets": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, b"\0" * 8, "MD701"),
    "offsets past end of file": ({"a": f32([2], 0, 8)}, b"\0" * 4, "MD701"),
    "overlapping tensors": ({"a": f32([2], 0, 8), "b": f32([2], 4, 12)}, b"\0" * 12, "MD701"),
    "duplicate key": (
        b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},'
        b' "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}',
        b"\0\0",
        "MD701",
    ),
    "duplicate key inside entry": (
        b'{"a": {"dtype": "U8", "dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}',
        b"\0",
        "MD701",
    ),
    "entry has an extra key": (
        {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}},
        b"\0",
        "MD701",
    ),
    "entry not an object": ({"a": [1, 2, 3]}, b"", "MD701"),
    "metadata with non-string value": ({"__metadata__": {"k": 1}}, b"", "MD701"),
    "metadata not an object": ({"__metadata__": ["k"]}, b"", "MD701"),
    "empty tensor name": ({"": f32([1], 0, 4)}, b"\0" * 4, "MD701"),
    "bool byte that is not 0 or 1": (
        {"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}},
        b"\x01\x02",
        "MD701",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_SAFETENSORS))
def test_hostile_safetensors_fail_closed(tmp_path: Path, case: str) -> None:
    header, data, code = HOSTILE_SAFETENSORS[case]
    path = tmp_path / "hostile.safetensors"
    if header is None:
        path.write_bytes(data)
    else:
        safetensors_file(path, header, data)
    error = assert_code(code, path)
    assert error.message  # says what is wrong


# Headers that json's decoder without a hook reads to the same dict as a header without the duplicate: the usual
# header's fast reading (safetensors._parse_usual) must see each, and leave it to the full reading.
_DUPLICATES_HIDDEN = {
    "duplicate key, another key spaced from its colon": (
        b'{"a" : {"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        b"\0"),
    "duplicate key in the metadata": (
        b'{"__metadata__":{"k":"v","k":"v"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
    "metadata twice": (b'{"__metadata__":{"k":"v"},"__metadata__":{"k":"v"}}', b""),
    "duplicate key, one escaped": (
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"\\u0061":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
        b"\0"),
    "duplicate dtype in an entry": (b'{"a":{"dtype":"U8","shape":[1],"dtype":"U8","data_offsets":[0,1]}}', b"\0"),
}
_USUAL_HEADERS = {
    "spaced": b'{ "a" : { "dtype" : "F32" , "shape" : [ 1 ] , "data_offsets" : [ 0 , 4 ] } }',
    "escaped name": b'{"a\\"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"k":"v\\n"}}',
    "metadata null": b'{"__metadata__":null,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "usual": b'{"__metadata__":{"format":"pt","k":"\xc3\xa9"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
}


def _read_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What the reader makes of ``path`` (its tensors, metadata and layout, or its error) with the usual header's
    fast reading and without it."""
    from mdiff.checkpoints import safetensors as module

    def outcome() -> object:
        try:
            with open_checkpoint(path) as reader:
                return [(name, reader.spec(name), reader.read(name).tobytes()) for name in reader.keys()], \
                       reader.metadata, reader.layout
        except CheckpointError as exc:
            return exc.code, exc.message, exc.path

    fast = outcome()
    with monkeypatch.context() as patch:
        patch.setattr(module, "_parse_usual", lambda *args: None)
        full = outcome()
    return [fast, full]


@pytest.mark.parametrize("case", sorted(HOSTILE_SAFETENSORS) + sorted(_DUPLICATES_HIDDEN) + sorted(_USUAL_HEADERS))
def test_the_usual_headers_fast_reading_reads_as_the_full_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              case: str) -> None:
    path = tmp_path / "h.safetensors"
    if case in _DUPLICATES_HIDDEN:
        safetensors_file(path, *_DUPLICATES_HIDDEN[case])
    elif case in _USUAL_HEADERS:
        safetensors_file(path, _USUAL_HEADERS[case], b"\0" * 4)
    elif HOSTILE_SAFETENSORS[case][0] is None:
        path.write_bytes(HOSTILE_SAFETENSORS[case][1])
    else:
        safetensors_file(path, *HOSTILE_SAFETENSORS[case][:2])
    fast, full = _read_both_ways(path, monkeypatch)
    assert fast == full
    if case in _DUPLICATES_HIDDEN:
        assert full[0] == "MD701" and "twice" in full[1]  # type: ignore[index]
    if case in _USUAL_HEADERS:
        assert isinstance(full[0], list) and len(full[0]) == 1


def test_the_usual_header_is_read_without_a_hook(tmp_path: Path) -> None:
    """A header mdiff or the safetensors library writes: json's decoder alone (no hook called once per object)."""
    from mdiff.checkpoints import safetensors as module

    path = tmp_path / "usual.safetensors"
    save_checkpoint(path, {f"w.{i}": np.full(4, i, np.float32) for i in range(100)}, {"format": "pt"})
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    found = module._parse_usual(bytearray(raw[8:8 + length]), 8 + length, 1600)
    assert found is not None and len(found[0]) == 100 and found[1:] == ({"format": "pt"}, True)


def test_real_f8_file_is_unsupported_dtype(tmp_path: Path) -> None:
    path = tmp_path / "f8.safetensors"
    safetensors.numpy.save_file({"w": np.zeros(4, ml_dtypes.float8_e4m3fn)}, str(path))
    error = assert_code("MD702", path)
    assert "F8_E4M3" in error.message


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    # Not a property of the file's contents, so not a CheckpointError.
    with pytest.raises(FileNotFoundError):
        open_checkpoint(tmp_path / "absent.safetensors")
    with pytest.raises(FileNotFoundError):
        open_checkpoint(tmp_path / "absent.npz")


def test_a_folder_without_weights_is_md704(tmp_path: Path) -> None:
    """A folder is read as a model folder (SPEC.md §10.1), whatever its name; without weights it says which it looked for."""
    path = tmp_path / "dir.safetensors"
    path.mkdir()
    error = assert_code("MD704", path)
    assert "model.safetensors.index.json, model.safetensors, pytorch_model.bin.index.json, pytorch_model.bin" in error.message


@pytest.mark.parametrize("offsets,data,why", [
    ({"a": [0, 1], "b": [3, 4]}, b"\x01\xff\xff\x02", "2 bytes after tensor 'a' belong to no tensor"),
    ({"a": [2, 3], "b": [3, 4]}, b"\xff\xff\x01\x02", "2 bytes before the first tensor belong to no tensor"),
    ({"a": [0, 1], "b": [1, 2]}, b"\x01\x02\xff", "1 bytes after the last tensor belong to no tensor"),
    ({"a": [0, 1], "b": [0, 1]}, b"\x01", "tensors 'a' and 'b' share bytes"),
    ({"a": [0, 1], "b": [1, 2], "e": [1, 1]}, b"\x01\x02", None),  # an empty tensor where the data is tiled
    ({"a": [0, 1], "b": [1, 2], "e": [2, 2]}, b"\x01\x02", None),
    ({"a": [0, 1], "b": [1, 2], "e": [3, 3]}, b"\x01\x02", "tensor 'e' ends at byte 3 of a 2-byte data buffer"),
], ids=["gap", "leading gap", "trailing bytes", "overlap", "empty inside", "empty at the end", "empty outside"])
def test_data_offsets_must_tile_the_data_buffer(tmp_path: Path, offsets, data, why) -> None:
    """SPEC.md §10, as the safetensors library reads: no gap, no overlap, nothing after the last tensor."""
    header = {name: {"dtype": "U8", "shape": [span[1] - span[0]], "data_offsets": span} for name, span in offsets.items()}
    path = safetensors_file(tmp_path / "t.safetensors", header, data)
    if why is None:
        assert {k: v.tolist() for k, v in load_checkpoint(path).items()} == {"a": [1], "b": [2], "e": []}
        assert sorted(name for name, _ in safetensors.deserialize(path.read_bytes())) == ["a", "b", "e"]
    else:
        error = assert_code("MD701", path)
        assert why in error.message
        with pytest.raises(safetensors.SafetensorError):  # the library refuses them too
            safetensors.deserialize(path.read_bytes())


def test_safetensors_truncated_anywhere_fails_closed(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    save_checkpoint(good, {"a": np.arange(4, dtype=np.float32), "b": np.ones(3, bool)}, {"k": "v"})
    data = good.read_bytes()
    path = tmp_path / "cut.safetensors"
    for length in range(len(data)):
        path.write_bytes(data[:length])
        assert_code("MD701", path)


def _load_fully_or_checkpoint_error(path: Path) -> None:
    try:
        load_checkpoint(path)
    except CheckpointError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_safetensors_mutations_only_raise_checkpoint_errors(tmp_path: Path, data: st.DataObject) -> None:
    good = tmp_path / "good.safetensors"
    if not good.exists():
        save_checkpoint(good, {"a": np.arange(4, dtype=np.float32), "b": np.ones(3, bool)}, {"k": "v"})
    mutated = bytearray(good.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path / "mutated.safetensors"
    path.write_bytes(bytes(mutated))
    _load_fully_or_checkpoint_error(path)


# ------------------------------------------------------------ hostile npz


class _RunsCodeWhenUnpickled:
    """Unpickling this creates a directory: proof that pickle ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_npz_object_array_is_refused_without_unpickling(tmp_path: Path) -> None:
    marker = tmp_path / "pickle-ran"
    path = tmp_path / "evil.npz"
    payload = np.empty(1, dtype=object)
    payload[0] = _RunsCodeWhenUnpickled(marker)
    np.savez(path, payload=payload)
    error = assert_code("MD702", path)
    assert not marker.exists()
    assert "pickle" in error.message
    # The payload is live: numpy, allowed to unpickle, does run it.
    with np.load(path, allow_pickle=True) as unsafe:
        unsafe["payload"]
    assert marker.exists()


@pytest.mark.parametrize(
    "array",
    [
        np.zeros(3, dtype="V2"),
        np.zeros(3, dtype=[("x", "<f4"), ("y", "<i2")]),
        np.zeros(2, ml_dtypes.bfloat16),  # numpy stores it as |V2
        np.zeros(2, np.complex64),
        np.array(["text"]),
        np.zeros(2, "datetime64[s]"),
    ],
    ids=["void", "structured", "bfloat16", "complex", "unicode", "datetime"],
)
def test_npz_unsupported_dtypes(tmp_path: Path, array: np.ndarray) -> None:
    path = tmp_path / "m.npz"
    np.savez(path, x=array)
    assert_code("MD702", path)


def zip_with(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    return path


def npy_bytes(header: str, data: bytes = b"") -> bytes:
    padded = header + " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(padded)) + padded.encode("latin1") + data


def test_npz_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    path.write_bytes(b"this is not a zip archive")
    assert_code("MD701", path)


def test_npz_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    path.write_bytes(b"")
    assert_code("MD701", path)


def test_npz_that_is_a_plain_npy_file(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    with open(path, "wb") as file:
        np.save(file, np.arange(3))
    assert_code("MD701", path)


HOSTILE_NPZ_MEMBERS = {
    "member not .npy": {"readme.txt": b"hello"},
    "garbage .npy": {"x.npy": b"\x93NUMPY garbage"},
    "not npy at all": {"x.npy": b"just bytes"},
    "header claims more data than present": {
        "x.npy": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }")
    },
    "header claims less data than present": {
        "x.npy": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", b"\0" * 16)
    },
    "negative shape": {"x.npy": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }")},
    "header not a dict": {"x.npy": npy_bytes("[1, 2, 3]")},
    "header calls a function": {"x.npy": npy_bytes("__import__('os').system('false')")},
    "unknown .npy version": {"x.npy": b"\x93NUMPY\x09\x00" + b"\0" * 64},
    "empty tensor name": {".npy": npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }")},
    "bool byte 2": {"x.npy": npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", b"\x01\x02")},
}


@pytest.mark.parametrize("case", list(HOSTILE_NPZ_MEMBERS))
def test_hostile_npz_members_fail_closed(tmp_path: Path, case: str) -> None:
    path = zip_with(tmp_path / "m.npz", HOSTILE_NPZ_MEMBERS[case])
    assert_code("MD701", path)


def test_npz_deflate_bomb_is_refused_before_allocating(tmp_path: Path) -> None:
    header = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4000,), }")
    path = zip_with(tmp_path / "m.npz", {"x.npy": header + b"\0" * 32000}, zipfile.ZIP_DEFLATED)
    assert load_checkpoint(path)["x"].shape == (4000,)
    # Now make the central directory claim a size deflate could never produce.
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("x.npy")
    central = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 0xFFFFFFF0)  # uncompressed size
    path.write_bytes(bytes(data))
    assert info.compress_size * 1032 < 0xFFFFFFF0
    assert "claims more data" in assert_code("MD701", path).message


def test_npz_duplicate_member_names(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    member = npy_bytes("{'descr': '<u1', 'fortran_order': False, 'shape': (1,), }", b"\x01")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", member)
        with pytest.warns(UserWarning):
            archive.writestr("x.npy", member)
    assert_code("MD701", path)


def test_npz_truncated_anywhere_fails_closed(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    save_checkpoint(good, {"a": np.arange(4, dtype=np.float32), "b": np.ones(3, bool)})
    data = good.read_bytes()
    path = tmp_path / "cut.npz"
    for length in range(len(data)):
        path.write_bytes(data[:length])
        assert_code("MD701", path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_npz_mutations_only_raise_checkpoint_errors(tmp_path: Path, data: st.DataObject) -> None:
    good = tmp_path / "good.npz"
    if not good.exists():
        np.savez_compressed(good, a=np.arange(40, dtype=np.float32), b=np.ones(3, bool))
    mutated = bytearray(good.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path / "mutated.npz"
    path.write_bytes(bytes(mutated))
    _load_fully_or_checkpoint_error(path)


def test_dtype_type_is_the_mdiff_dtype(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    save_checkpoint(path, {"x": np.zeros(1, np.uint16)})
    with open_checkpoint(path) as reader:
        assert isinstance(reader.spec("x")[1], DType)


# ---------------------------------------------------------------- issue 27: a file that is not a checkpoint says so
NOT_SAFETENSORS = {
    "text": (b"hello world\n", "its first 8 bytes, read as its header's length, say"),
    "random bytes": (bytes(np.random.default_rng(5).integers(0, 256, 4000, dtype=np.uint8)), "its first 8 bytes"),
    "too short": (b"\x02\x00", "it has 2 bytes, fewer than the 8 of a header's length"),
    "a JSON list": (struct.pack("<Q", 2) + b"[]", "its header is a JSON list, not an object"),
    "not JSON": (struct.pack("<Q", 4) + b"\xff\xfe{}", "its header is not UTF-8 JSON"),
}


@pytest.mark.parametrize("case", list(NOT_SAFETENSORS))
def test_a_file_that_is_not_safetensors_says_so(tmp_path: Path, case: str) -> None:
    """Before: "the header claims 8031924123371070824 bytes; at most 100000000 are allowed"."""
    data, why = NOT_SAFETENSORS[case]
    path = tmp_path / "x.safetensors"
    path.write_bytes(data)
    error = assert_code("MD701", path)
    assert error.message.startswith("x.safetensors is not a safetensors file (") and why in error.message, error.message


def test_a_cut_short_safetensors_file_says_it_may_be_either(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 16) + b"{}")
    assert assert_code("MD701", path).message == ("x.safetensors is cut short, or is not a safetensors file (its header "
                                                  "would have 16 bytes; the file has 10)")


@pytest.mark.parametrize("name,said", [("x.npz", "x.npz is not an .npz file (not a zip archive)"),
                                       ("x.pt", "x.pt is not a PyTorch checkpoint (neither a zip archive nor a pickle"),
                                       ("x.onnx", "x.onnx is not an ONNX model (")])
def test_a_file_that_is_not_of_its_extension_s_format_says_so(tmp_path: Path, name: str, said: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"this is text, not a checkpoint\n" * 3)
    if name.endswith(".pt"):
        pytest.importorskip("torch")
    if name.endswith(".onnx"):
        pytest.importorskip("onnx")
    assert assert_code("MD701", path).message.startswith(said)


def test_the_safetensors_header_is_what_json_dumps_writes_of_its_dict():
    """The header is made by a format per entry, not json.dumps of a dict: the same bytes, escapes included."""
    from mdiff.checkpoints import safetensors as st
    from mdiff.format.dtypes import dtype_named

    entries = [("a", (), dtype_named("float32")), ('é"\\\n\t\x01', (2, 3), dtype_named("bfloat16")),
               ("日本/\u2028", (0,), dtype_named("bool")), ("😀.w", (1, 1, 4), dtype_named("int8"))]
    for metadata in (None, {}, {"format": "pt", 'k"\n': "v\u2029"}):
        header: dict = {} if metadata is None else {"__metadata__": metadata}
        offset = 0
        for name, shape, dt in entries:
            size = int(np.prod(shape)) * dt.itemsize
            header[name] = {"dtype": st._TAG_BY_DTYPE_NAME[dt.name], "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            offset += size
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        assert st._header_bytes(entries, metadata) == text + b" " * (-(8 + len(text)) % 8)


def test_a_safetensors_write_makes_its_header_once(tmp_path, monkeypatch):
    """check_writable's header is the one write() writes (10^5 entries: 0.2 s each time it is made), counted; a write
    handed other entries, or metadata changed since, makes its own."""
    from mdiff.checkpoints import safetensors as st_format
    from mdiff.checkpoints.base import CheckedEntries

    made = []
    header_bytes = st_format._header_bytes

    def counting(entries, metadata):
        made.append(len(entries))
        return header_bytes(entries, metadata)

    monkeypatch.setattr(st_format, "_header_bytes", counting)
    tensors = {f"t{i}": np.full(3, i, np.float32) for i in range(5)}
    save_checkpoint(tmp_path / "a.safetensors", tensors, {"k": "v"})
    assert made == [5]
    assert safetensors.numpy.load_file(str(tmp_path / "a.safetensors"))["t4"].tolist() == [4.0] * 3
    entries = CheckedEntries([(name, (3,), DTYPES["float32"]) for name in tensors])
    metadata = {"k": "v"}
    st_format.check_writable(entries, metadata, "b.safetensors")
    metadata["k"] = "w"
    with open(tmp_path / "b.safetensors", "wb") as f:
        st_format.write(f, entries, lambda name: tensors[name], metadata)
    assert made == [5, 5, 5]
    other = CheckedEntries(entries)  # another write's entries, alike: its own header, not the first's
    with open(tmp_path / "c.safetensors", "wb") as f:
        st_format.write(f, other, lambda name: tensors[name], {"k": "w"})
    assert made == [5, 5, 5, 5]
    with open(tmp_path / "b.safetensors", "rb") as f:
        assert json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"] == {"k": "w"}

