"""Tests for the .pt/.pth (PyTorch state dict) and .onnx (initializers) checkpoint formats:
round trips, files from the real libraries, hostile inputs, determinism, and
diff/apply end to end."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from collections import OrderedDict
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import mdiff
import mdiff.applying
from mdiff.checkpoints import load_checkpoint, supported_extensions, open_checkpoint, save_checkpoint, write_checkpoint
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DTYPES, dtype_named, dtype_of

torch = pytest.importorskip("torch")

ALL_DTYPES = list(DTYPES)

from tests.helpers import special_values  # noqa: E402


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.dtype(f"<u{array.dtype.itemsize}"))


def assert_bits_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.flags.c_contiguous
    np.testing.assert_array_equal(bits(actual), bits(expected))


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.numpy().copy()


def error_of(function, *args, **kwargs) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        function(*args, **kwargs)
    return caught.value


def test_supported_extensions() -> None:
    assert supported_extensions() == [".safetensors", ".npz", ".pt", ".pth", ".bin", ".onnx"]


# ================================================================== PyTorch


def all_dtype_tensors() -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {}
    for name in ALL_DTYPES:
        values = special_values(name)
        tensors[f"{name}.vector"] = values
        tensors[f"{name}.matrix"] = np.tile(values, 3).reshape(4, 6)
        tensors[f"{name}.scalar"] = values[1:2].reshape(())
        tensors[f"{name}.empty"] = values[:0].reshape(0, 3)
    return tensors


@pytest.mark.parametrize("suffix", [".pt", ".pth"])
def test_torch_round_trip_every_dtype(tmp_path: Path, suffix: str) -> None:
    tensors = all_dtype_tensors()
    path = tmp_path / f"model{suffix}"
    save_checkpoint(path, tensors)
    with open_checkpoint(path) as reader:
        assert reader.keys() == sorted(tensors)
        assert reader.metadata == {}
        for name, expected in tensors.items():
            assert reader.spec(name) == (expected.shape, dtype_of(expected))
            assert_bits_equal(reader.read(name), expected)
    # What we write is an ordinary state dict for torch.
    loaded = torch.load(path, weights_only=True)
    assert type(loaded) is dict and list(loaded) == sorted(tensors)
    for name, expected in tensors.items():
        assert loaded[name].shape == expected.shape
        assert_bits_equal(torch_to_numpy(loaded[name]), expected)
    assert loaded["bfloat16.vector"].dtype == torch.bfloat16
    assert loaded["uint64.vector"].dtype == torch.uint64
    assert loaded["bool.vector"].dtype == torch.bool


def test_torch_reads_a_real_state_dict(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model[3].to(torch.bfloat16)
    model[1].running_mean.fill_(float("nan"))
    state = model.state_dict()
    path = tmp_path / "model.pth"
    torch.save(state, path)
    with open_checkpoint(path) as reader:
        assert reader.keys() == sorted(state)
        assert reader.spec("1.num_batches_tracked") == ((), dtype_named("int64"))
        assert reader.spec("3.weight") == ((2, 3), dtype_named("bfloat16"))
        assert reader.spec("0.weight") == ((3, 4), dtype_named("float32"))
        for name, tensor in state.items():
            assert_bits_equal(reader.read(name), torch_to_numpy(tensor))


def test_torch_reads_parameters_saved_directly(tmp_path: Path) -> None:
    # nn.Parameter (requires_grad) and an OrderedDict, as dict(model.named_parameters()) gives.
    weight = torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    torch.save(OrderedDict(w=weight), tmp_path / "p.pt")
    assert_bits_equal(load_checkpoint(tmp_path / "p.pt")["w"], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_torch_views_of_a_shared_storage_read_as_their_own_elements(tmp_path: Path) -> None:
    big = torch.arange(20, dtype=torch.float32)
    half = torch.arange(12, dtype=torch.int16).view(torch.bfloat16)
    state = {
        "slice": big[3:7],
        "column": big.view(4, 5)[:, 1],
        "transposed": big.view(4, 5).t(),
        "all": big,
        "bf16": half.view(3, 4)[1:, ::2],
    }
    torch.save(state, tmp_path / "views.pt")
    loaded = torch.load(tmp_path / "views.pt", weights_only=True)
    assert loaded["slice"].untyped_storage().nbytes() == 80  # the file really shares one storage
    with open_checkpoint(tmp_path / "views.pt") as reader:
        assert_bits_equal(reader.read("slice"), np.arange(3, 7, dtype=np.float32))
        assert_bits_equal(reader.read("column"), np.array([1, 6, 11, 16], dtype=np.float32))
        assert_bits_equal(reader.read("transposed"), np.arange(20, dtype=np.float32).reshape(4, 5).T.copy())
        assert_bits_equal(reader.read("all"), np.arange(20, dtype=np.float32))
        expected = np.arange(12, dtype=np.int16).reshape(3, 4)[1:, ::2].copy().view(ml_dtypes.bfloat16)
        assert reader.spec("bf16") == ((2, 2), dtype_named("bfloat16"))
        assert_bits_equal(reader.read("bf16"), expected)


def test_torch_reads_legacy_non_zip_files(tmp_path: Path) -> None:
    state = {"w": torch.arange(4, dtype=torch.float64), "b": torch.tensor([True, False])}
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert (tmp_path / "legacy.pt").read_bytes()[:2] != b"PK"
    loaded = load_checkpoint(tmp_path / "legacy.pt")
    assert_bits_equal(loaded["w"], np.arange(4, dtype=np.float64))
    assert_bits_equal(loaded["b"], np.array([True, False]))


def test_torch_write_is_deterministic(tmp_path: Path) -> None:
    tensors = all_dtype_tensors()
    save_checkpoint(tmp_path / "a.pt", tensors)
    save_checkpoint(tmp_path / "other-name.pth", dict(reversed(list(tensors.items()))))
    first = (tmp_path / "a.pt").read_bytes()
    assert (tmp_path / "other-name.pth").read_bytes() == first
    # And in another process (no state carried over, e.g. counters or addresses).
    script = (
        "import sys, numpy as np; from mdiff.checkpoints import save_checkpoint, load_checkpoint;"
        "t = load_checkpoint(sys.argv[1]); save_checkpoint(sys.argv[2], t)"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.pt"), str(tmp_path / "b.pt")], check=True)
    assert (tmp_path / "b.pt").read_bytes() == first


def test_torch_cannot_hold_metadata(tmp_path: Path) -> None:
    error = error_of(save_checkpoint, tmp_path / "m.pt", {"x": np.zeros(1)}, metadata={"k": "v"})
    assert error.code == "MD703"
    assert list(tmp_path.iterdir()) == []


def test_torch_failed_write_leaves_nothing(tmp_path: Path) -> None:
    def fetch(name: str) -> np.ndarray:
        if name == "b":
            raise RuntimeError("boom")
        return np.zeros(2, dtype=np.float32)

    entries = [("a", (2,), DTYPES["float32"]), ("b", (2,), DTYPES["float32"])]
    with pytest.raises(RuntimeError, match="boom"):
        write_checkpoint(tmp_path / "m.pt", entries, fetch)
    assert list(tmp_path.iterdir()) == []


def test_torch_missing_is_md700_for_writing_and_legacy_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.save({"x": torch.arange(3, dtype=torch.float32)}, tmp_path / "m.pt")
    torch.save({"x": torch.zeros(1)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert_bits_equal(load_checkpoint(tmp_path / "m.pt")["x"], np.arange(3, dtype=np.float32))  # zip: no torch needed
    for error in (
        error_of(open_checkpoint, tmp_path / "legacy.pt"),
        error_of(save_checkpoint, tmp_path / "out.pt", {"x": np.zeros(1)}),
    ):
        assert error.code == "MD700"
        assert "pip install 'mdiff[torch]'" in error.message
    assert not (tmp_path / "out.pt").exists()


def test_torch_zip_files_keep_their_order_and_any_pickle_protocol(tmp_path: Path) -> None:
    state = OrderedDict((name, torch.arange(4, dtype=torch.float32) + i) for i, name in enumerate(["z", "a", "m"]))
    for protocol in (2, 4, 5):
        torch.save(state, tmp_path / f"p{protocol}.pt", pickle_protocol=protocol)
        with open_checkpoint(tmp_path / f"p{protocol}.pt") as reader:
            assert reader.order == ["z", "a", "m"] and reader.keys() == ["a", "m", "z"]
            for name, tensor in state.items():
                assert_bits_equal(reader.read(name), tensor.numpy())


def _rewritten(source: Path, target: Path, pickle_edit=None, drop: str | None = None, compress: str | None = None,
               records: dict[str, bytes] | None = None) -> Path:
    """A copy of a torch.save zip, its records written again by zipfile (stored unless ``compress`` names one),
    ``data.pkl`` passed through ``pickle_edit``, ``drop`` left out, ``records`` replacing or adding some."""
    import zipfile

    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename.endswith("/data.pkl") and pickle_edit is not None:
                data = pickle_edit(data)
            if drop is not None and info.filename.endswith(drop):
                continue
            data = (records or {}).get(info.filename.split("/", 1)[1], data)
            method = zipfile.ZIP_DEFLATED if compress is not None and info.filename.endswith(compress) else zipfile.ZIP_STORED
            new.writestr(info.filename, data, compress_type=method)
    return target


def test_torch_zip_saved_on_a_gpu_reads_without_one(tmp_path: Path) -> None:
    torch.save({"w": torch.arange(6, dtype=torch.float32)}, tmp_path / "cpu.pt")
    edit = lambda data: data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")  # noqa: E731
    path = _rewritten(tmp_path / "cpu.pt", tmp_path / "gpu.pt", edit)
    assert b"cuda:0" in __import__("zipfile").ZipFile(path).read("cpu/data.pkl")
    assert_bits_equal(load_checkpoint(path)["w"], np.arange(6, dtype=np.float32))


def test_torch_zip_written_big_endian_is_left_to_torch(tmp_path: Path) -> None:
    torch.save({"w": torch.tensor([1.0, 2.0], dtype=torch.float32)}, tmp_path / "le.pt")
    swapped = np.array([1.0, 2.0], dtype=">f4").tobytes()
    path = _rewritten(tmp_path / "le.pt", tmp_path / "be.pt", records={"byteorder": b"big", "data/0": swapped})
    assert_bits_equal(load_checkpoint(path)["w"], np.array([1.0, 2.0], dtype=np.float32))  # torch swaps it


@pytest.mark.parametrize(
    "how, words",
    [
        ("compressed", "stored bytes"),
        ("missing-storage", "no record"),
        ("past-the-storage", "past the end of its storage"),
        ("unknown-opcode", "opcode"),
        ("duplicate-key", "twice"),
        ("no-pickle", "data.pkl"),
        ("truncated-pickle", "malformed"),
    ],
)
def test_torch_zip_hostile_records_are_md701(tmp_path: Path, how: str, words: str) -> None:
    torch.save({"w": torch.arange(8, dtype=torch.float32), "v": torch.ones(2)}, tmp_path / "x.pt")
    src, out = tmp_path / "x.pt", tmp_path / "bad.pt"
    if how == "compressed":
        _rewritten(src, out, compress="data/0")
    elif how == "missing-storage":
        _rewritten(src, out, drop="data/1")
    elif how == "past-the-storage":  # the storage offset of 'w' (BININT1 0 after BINPERSID) made 5: 8 elements from 5
        _rewritten(src, out, lambda d: d.replace(b"QK\x00K\x08", b"QK\x05K\x08", 1))
    elif how == "unknown-opcode":  # an INST opcode (text-mode, never written by torch.save) instead of the first MARK
        _rewritten(src, out, lambda d: d[:2] + b"i" + d[3:])
    elif how == "duplicate-key":
        _rewritten(src, out, lambda d: d.replace(b"X\x01\x00\x00\x00v", b"X\x01\x00\x00\x00w", 1))
    elif how == "no-pickle":
        _rewritten(src, out, drop="data.pkl")
    else:
        _rewritten(src, out, lambda d: d[: len(d) // 2])
    error = error_of(open_checkpoint, out)
    assert error.code == "MD701" and words in error.message, error.message


# ------------------------------------------------------------ hostile .pt files

MARKER_NAME = "pwned-marker"


class _Evil:
    """Unpickling this would create a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_torch_pickled_code_is_refused_and_never_runs(tmp_path: Path, how: str) -> None:
    marker = tmp_path / MARKER_NAME
    path = tmp_path / "evil.pt"
    payload = {"weight": torch.zeros(2), "evil": _Evil(marker)}
    if how == "pickle":
        path.write_bytes(pickle.dumps(payload, protocol=2))
    else:
        torch.save(payload, path)
    error = error_of(open_checkpoint, path)
    assert error.code == "MD701"
    assert "never unpickles" in error.message
    assert "weights_only=False" not in error.message  # we do not suggest running the file's code
    assert not marker.exists()


@pytest.mark.parametrize(
    "content",
    [b"", b"hello, this is not a checkpoint", b"PK\x03\x04" + b"\0" * 60, b"\x80\x02K\x05."],
    ids=["empty", "text", "broken-zip", "pickled-int"],
)
def test_torch_garbage_is_md701(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad.pt").write_bytes(content)
    assert error_of(open_checkpoint, tmp_path / "bad.pt").code == "MD701"


def test_torch_truncated_or_corrupted_file_is_md701(tmp_path: Path) -> None:
    torch.save({"w": torch.arange(100, dtype=torch.float32), "b": torch.ones(3)}, tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 100):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        assert error_of(open_checkpoint, tmp_path / "cut.pt").code == "MD701"
    # Corrupt the pickle inside the zip (the first record); zip CRCs catch it.
    start = data.index(b"data.pkl") + len(b"data.pkl")
    corrupted = bytearray(data)
    for i in range(start + 40, start + 60):
        corrupted[i] ^= 0xFF
    (tmp_path / "corrupt.pt").write_bytes(bytes(corrupted))
    assert error_of(open_checkpoint, tmp_path / "corrupt.pt").code == "MD701"


@pytest.mark.parametrize(
    "obj, found",
    [
        ({"model": {"w": torch.zeros(1)}, "optimizer": {}}, "nested dict"),
        ({"w": torch.zeros(1), "epoch": 3}, "int"),
        ([torch.zeros(1)], "list"),
        (torch.zeros(1), "Tensor"),
        ({1: torch.zeros(1)}, "key 1"),
        ({"": torch.zeros(1)}, "key ''"),
    ],
    ids=["training-checkpoint", "non-tensor-value", "list", "bare-tensor", "int-key", "empty-key"],
)
def test_torch_non_state_dicts_are_md701(tmp_path: Path, obj: object, found: str) -> None:
    torch.save(obj, tmp_path / "x.pt")
    error = error_of(open_checkpoint, tmp_path / "x.pt")
    assert error.code == "MD701"
    assert found in error.message
    assert "state_dict()" in error.message


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(2, dtype=torch.complex64),
        lambda: torch.ones(2).to(torch.float8_e4m3fn),
        lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
    ],
    ids=["complex64", "float8", "qint8"],
)
def test_torch_unsupported_dtypes_are_md702(tmp_path: Path, make) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: quantized tensors are deprecated
        torch.save({"ok": torch.zeros(1), "bad": make()}, tmp_path / "x.pt")
    error = error_of(open_checkpoint, tmp_path / "x.pt")
    assert error.code == "MD702"
    assert "'bad'" in error.message


@pytest.mark.parametrize(
    "make, word",
    [(lambda: torch.eye(3).to_sparse(), "layout"), (lambda: torch.empty(3, device="meta"), "meta")],
    ids=["sparse", "meta"],
)
def test_torch_non_dense_tensors_are_md701(tmp_path: Path, make, word: str) -> None:
    torch.save({"t": make()}, tmp_path / "x.pt")
    error = error_of(open_checkpoint, tmp_path / "x.pt")
    assert error.code == "MD701"
    assert word in error.message


def test_torch_broadcast_view_claiming_more_than_its_storage_is_md701(tmp_path: Path) -> None:
    torch.save({"t": torch.ones(2, 1).expand(2, 1000)}, tmp_path / "x.pt")
    assert torch.load(tmp_path / "x.pt", weights_only=True)["t"].stride() == (1, 0)
    error = error_of(open_checkpoint, tmp_path / "x.pt")
    assert error.code == "MD701"
    assert "contiguous()" in error.message


def test_torch_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(tmp_path / "fifo.pt")
    assert error_of(open_checkpoint, tmp_path / "fifo.pt").code == "MD701"


# ================================================================== ONNX


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def linear_model(
    weight: np.ndarray, bias: np.ndarray, *, extra: dict[str, np.ndarray] | None = None
) -> onnx.ModelProto:
    """Y = X @ W + B, with float32 W [3, 2] and B [2]; extra initializers are unused."""
    inits = [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")]
    inits += [numpy_helper.from_array(v, k) for k, v in (extra or {}).items()]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["XW"], name="matmul"),
            helper.make_node("Add", ["XW", "B"], ["Y"], name="add"),
        ],
        "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="mdiff-tests")
    model.ir_version = 8
    helper.set_model_props(model, {"author": "tests", "purpose": "linear"})
    onnx.checker.check_model(model)
    return model


W0 = f32(1, 2, 3, 4, 5, 6).reshape(3, 2)
B0 = f32(0.5, -0.5)


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def float_data_tensor(name: str, values: np.ndarray) -> TensorProto:
    """A FLOAT tensor with ``values`` in float_data, bit exact: helper.make_tensor goes
    through Python floats, which quiets signalling NaNs, so the wire bytes are written here."""
    packed = values.astype("<f4").tobytes()
    assert len(values) < 128 and len(packed) < 128 and len(name) < 128
    wire = bytes([0x08, len(values), 0x10, TensorProto.FLOAT, 0x22, len(packed)]) + packed
    wire += bytes([0x42, len(name)]) + name.encode()
    tensor = TensorProto()
    tensor.ParseFromString(wire)
    assert len(tensor.float_data) == len(values) and not tensor.raw_data
    return tensor


def half_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """float16/bfloat16/int64 initializers, in raw_data and in typed fields, consumed by Casts."""
    f16 = special_values("float16")
    bf16 = special_values("bfloat16")
    expected = {
        "f16_raw": f16,
        "bf16_raw": bf16.reshape(2, 4),
        "f16_typed": f16[::-1].copy(),
        "bf16_typed": bf16[::-1].copy(),
        "f32_typed": special_values("float32"),  # a signalling NaN in float_data, too
        "i64_typed": np.array([-(2**63), 2**63 - 1, 0], dtype=np.int64),
        "i8_typed": np.array([-128, 127], dtype=np.int8),
        "u64_typed": np.array([2**64 - 1, 0], dtype=np.uint64),
        "bool_typed": np.array([True, False, True]),
        "f64_raw": special_values("float64"),
        "scalar": np.array(7, dtype=np.int32),
        "empty": np.zeros((0, 2), dtype=np.float32),
    }
    inits = [
        numpy_helper.from_array(expected["f16_raw"], "f16_raw"),
        numpy_helper.from_array(expected["bf16_raw"], "bf16_raw"),
        # make_tensor without raw stores 16-bit floats' bit patterns in int32_data
        helper.make_tensor("f16_typed", TensorProto.FLOAT16, [8], expected["f16_typed"]),
        helper.make_tensor("bf16_typed", TensorProto.BFLOAT16, [8], expected["bf16_typed"]),
        float_data_tensor("f32_typed", expected["f32_typed"]),
        helper.make_tensor("i64_typed", TensorProto.INT64, [3], expected["i64_typed"]),
        helper.make_tensor("i8_typed", TensorProto.INT8, [2], expected["i8_typed"]),
        helper.make_tensor("u64_typed", TensorProto.UINT64, [2], expected["u64_typed"]),
        helper.make_tensor("bool_typed", TensorProto.BOOL, [3], expected["bool_typed"]),
        numpy_helper.from_array(expected["f64_raw"], "f64_raw"),
        numpy_helper.from_array(expected["scalar"], "scalar"),
        numpy_helper.from_array(expected["empty"], "empty"),
    ]
    assert not inits[2].raw_data and len(inits[2].int32_data) == 8
    assert not inits[3].raw_data and len(inits[3].int32_data) == 8
    nodes = [helper.make_node("Cast", [name], [f"{name}_out"], to=TensorProto.FLOAT) for name in expected]
    outputs = [
        helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, list(array.shape))
        for name, array in expected.items()
    ]
    graph = helper.make_graph(nodes, "halves", [], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    return model, expected


def test_onnx_reads_initializers_exactly(tmp_path: Path) -> None:
    model, expected = half_model()
    path = save_model(model, tmp_path / "halves.onnx")
    with open_checkpoint(path) as reader:
        assert reader.keys() == sorted(expected)
        assert reader.metadata == {}
        for name, array in expected.items():
            assert reader.spec(name) == (array.shape, dtype_of(array))
            assert_bits_equal(reader.read(name), array)
            if name != "f32_typed":  # onnx's own converter quiets the signalling NaN in float_data
                onnx_array = numpy_helper.to_array(model.graph.initializer[list(expected).index(name)])
                assert_bits_equal(reader.read(name), np.array(onnx_array, order="C"))


def test_onnx_reads_metadata_and_linear_model(tmp_path: Path) -> None:
    path = save_model(linear_model(W0, B0), tmp_path / "m.onnx")
    with open_checkpoint(path) as reader:
        assert reader.metadata == {"author": "tests", "purpose": "linear"}
        assert reader.keys() == ["B", "W"]
        assert_bits_equal(reader.read("W"), W0)
        assert_bits_equal(reader.read("B"), B0)


def run_linear(path: Path, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["Y"], {"X": x})[0]


def test_onnx_write_with_template_replaces_only_the_initializers(tmp_path: Path) -> None:
    base = linear_model(W0, B0)
    base_path = save_model(base, tmp_path / "base.onnx")
    w1 = f32(0, 1, -1, 2, 0.25, 3).reshape(3, 2)
    b1 = f32(10, 20)
    out = tmp_path / "out.onnx"
    entries = [("W", (3, 2), DTYPES["float32"]), ("B", (2,), DTYPES["float32"])]
    write_checkpoint(out, entries, {"W": w1, "B": b1}.__getitem__, template=base_path)
    result = onnx.load(str(out))
    onnx.checker.check_model(result)
    # Same initializers, same order, new data; everything else identical.
    assert [t.name for t in result.graph.initializer] == ["W", "B"]
    assert_bits_equal(numpy_helper.to_array(result.graph.initializer[0]), w1)
    assert_bits_equal(numpy_helper.to_array(result.graph.initializer[1]), b1)
    assert result.graph.node == base.graph.node
    assert result.graph.input == base.graph.input and result.graph.output == base.graph.output
    assert result.opset_import == base.opset_import
    assert result.metadata_props == base.metadata_props
    assert (result.ir_version, result.producer_name) == (base.ir_version, base.producer_name)
    stripped_result, stripped_base = onnx.ModelProto(), onnx.ModelProto()
    stripped_result.CopyFrom(result)
    stripped_base.CopyFrom(base)
    del stripped_result.graph.initializer[:], stripped_base.graph.initializer[:]
    assert stripped_result.SerializeToString(deterministic=True) == stripped_base.SerializeToString(deterministic=True)
    # It runs, with the new weights.
    x = f32(1, 2, 3).reshape(1, 3)
    np.testing.assert_allclose(run_linear(base_path, x), x @ W0 + B0)
    np.testing.assert_allclose(run_linear(out, x), x @ w1 + b1)
    # Deterministic: same inputs, same bytes (entries in another order too).
    again = tmp_path / "again.onnx"
    write_checkpoint(again, entries[::-1], {"W": w1, "B": b1}.__getitem__, template=base_path)
    assert again.read_bytes() == out.read_bytes()


def test_onnx_write_all_dtypes_and_explicit_metadata(tmp_path: Path) -> None:
    model, expected = half_model()
    base_path = save_model(model, tmp_path / "halves.onnx")
    changed = {name: (array[::-1].copy() if array.ndim == 1 else array) for name, array in expected.items()}
    entries = [(name, array.shape, dtype_of(array)) for name, array in changed.items()]
    write_checkpoint(tmp_path / "out.onnx", entries, changed.__getitem__, {"k": "v"}, template=base_path)
    onnx.checker.check_model(str(tmp_path / "out.onnx"))
    with open_checkpoint(tmp_path / "out.onnx") as reader:
        assert reader.metadata == {"k": "v"}
        for name, array in changed.items():
            assert_bits_equal(reader.read(name), array)


def test_onnx_write_needs_a_template(tmp_path: Path) -> None:
    error = error_of(save_checkpoint, tmp_path / "out.onnx", {"W": W0})
    assert error.code == "MD703"
    assert "template" in error.message and "base .onnx model" in error.message
    assert list(tmp_path.iterdir()) == []


def write_linear(tmp_path: Path, tensors: dict[str, np.ndarray], base: onnx.ModelProto | None = None) -> Path:
    base_path = save_model(base or linear_model(W0, B0), tmp_path / "base.onnx")
    out = tmp_path / "out.onnx"
    entries = [(name, array.shape, dtype_of(array)) for name, array in tensors.items()]
    write_checkpoint(out, entries, tensors.__getitem__, template=base_path)
    return out


@pytest.mark.parametrize(
    "tensors, words",
    [
        ({"W": W0, "B": B0, "C": f32(1)}, ["'C'", "not initializers"]),
        ({"W": W0}, ["'B'", "missing"]),
        ({"W": W0, "B": f32(1, 2, 3)}, ["'B'", "float32[2]", "float32[3]"]),
        ({"W": W0, "B": B0.astype(np.float64)}, ["'B'", "float64[2]"]),
    ],
    ids=["added", "deleted", "shape-changed", "dtype-changed"],
)
def test_onnx_results_the_graph_cannot_hold_are_md703(tmp_path: Path, tensors, words) -> None:
    fetched: list[str] = []

    def fetch(name: str) -> np.ndarray:
        fetched.append(name)
        return tensors[name]

    base_path = save_model(linear_model(W0, B0), tmp_path / "base.onnx")
    entries = [(name, array.shape, dtype_of(array)) for name, array in tensors.items()]
    error = error_of(write_checkpoint, tmp_path / "out.onnx", entries, fetch, template=base_path)
    assert error.code == "MD703"
    for word in words:
        assert word in error.message
    assert fetched == []  # refused up front
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.onnx"]


def test_onnx_unused_initializer_may_change_shape(tmp_path: Path) -> None:
    base = linear_model(W0, B0, extra={"unused": f32(1, 2)})
    out = write_linear(tmp_path, {"W": W0, "B": B0, "unused": np.arange(5, dtype=np.int64)}, base)
    onnx.checker.check_model(str(out))
    assert_bits_equal(load_checkpoint(out)["unused"], np.arange(5, dtype=np.int64))


def test_onnx_external_data_is_md701(tmp_path: Path) -> None:
    model = linear_model(W0, B0)
    onnx.save_model(
        model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0
    )
    assert (tmp_path / "ext.data").exists()
    error = error_of(open_checkpoint, tmp_path / "ext.onnx")
    assert error.code == "MD701"
    assert "not supported yet" in error.message
    # also as a template
    os.replace(tmp_path / "ext.onnx", tmp_path / "template.onnx")
    error = error_of(
        write_checkpoint,
        tmp_path / "out.onnx",
        [("W", (3, 2), DTYPES["float32"]), ("B", (2,), DTYPES["float32"])],
        {"W": W0, "B": B0}.__getitem__,
        template=tmp_path / "template.onnx",
    )
    assert error.code == "MD701"
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(
    "content", [b"this is not protobuf \xff\xff\xff", b"", b"\x08\x07"], ids=["garbage", "empty", "ir-version-only"]
)
def test_onnx_garbage_is_md701(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad.onnx").write_bytes(content)
    assert error_of(open_checkpoint, tmp_path / "bad.onnx").code == "MD701"


def test_onnx_truncated_model_is_md701(tmp_path: Path) -> None:
    data = linear_model(W0, B0).SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) - 7])
    assert error_of(open_checkpoint, tmp_path / "cut.onnx").code == "MD701"


def model_with(*tensors: TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph([], "g", [], [], initializer=list(tensors))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def raw_tensor(name: str, data_type: int, dims: list[int], raw: bytes) -> TensorProto:
    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    tensor.raw_data = raw
    return tensor


@pytest.mark.parametrize(
    "tensors, code, words",
    [
        ((numpy_helper.from_array(W0, "W"), numpy_helper.from_array(B0, "W")), "MD701", ["'W'", "two"]),
        ((numpy_helper.from_array(np.ones(2, np.complex64), "c"),), "MD702", ["COMPLEX64"]),
        ((helper.make_tensor("s", TensorProto.STRING, [1], [b"x"]),), "MD702", ["STRING"]),
        ((raw_tensor("f8", TensorProto.FLOAT8E4M3FN, [2], b"\0\0"),), "MD702", ["FLOAT8E4M3FN"]),
        ((raw_tensor("short", TensorProto.FLOAT, [3], b"\0" * 8),), "MD701", ["'short'", "need 12"]),
        ((raw_tensor("huge", TensorProto.FLOAT, [1 << 40, 1 << 40], b""),), "MD701", ["'huge'"]),
        ((raw_tensor("neg", TensorProto.FLOAT, [-1], b""),), "MD701", ["'neg'"]),
        ((raw_tensor("undefined", 0, [1], b"\0"),), "MD701", ["'undefined'"]),
        ((raw_tensor("bool", TensorProto.BOOL, [2], b"\x01\x05"),), "MD701", ["'bool'"]),
        ((TensorProto(name="i8", data_type=TensorProto.INT8, dims=[1], int32_data=[300]),), "MD701", ["'i8'", "range"]),
        ((TensorProto(name="few", data_type=TensorProto.FLOAT, dims=[4], float_data=[1.0]),), "MD701", ["'few'"]),
        ((TensorProto(name="mixed", data_type=TensorProto.INT32, dims=[1], int64_data=[1]),), "MD701", ["'mixed'"]),
        ((raw_tensor("", TensorProto.FLOAT, [0], b""),), "MD701", ["no valid name"]),
    ],
    ids=[
        "duplicate", "complex", "string", "float8", "short-raw", "huge-dims", "negative-dim", "undefined-type",
        "bool-byte-5", "int8-out-of-range", "too-few-values", "wrong-field", "unnamed",
    ],
)
def test_onnx_hostile_initializers(tmp_path: Path, tensors, code: str, words: list[str]) -> None:
    save_model(model_with(*tensors), tmp_path / "m.onnx")
    with pytest.raises(CheckpointError) as caught:
        with open_checkpoint(tmp_path / "m.onnx") as reader:
            for name in reader.keys():
                reader.read(name)
    assert caught.value.code == code
    for word in words:
        assert word in caught.value.message


def test_onnx_sparse_initializers_are_md701(tmp_path: Path) -> None:
    model = model_with(numpy_helper.from_array(W0, "W"))
    values = numpy_helper.from_array(f32(1), "S")
    indices = numpy_helper.from_array(np.array([0], dtype=np.int64), "S_idx")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    save_model(model, tmp_path / "m.onnx")
    error = error_of(open_checkpoint, tmp_path / "m.onnx")
    assert error.code == "MD701" and "sparse" in error.message


# ================================================================== end to end


def state_dicts() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4))
    model[2].to(torch.bfloat16)
    old = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model[0].weight[3, :] += 0.5  # a sparse-ish change
        model[1].bias.fill_(float("nan"))
        model[2].weight.mul_(-1)
    new = {k: v.clone() for k, v in model.state_dict().items()}
    return old, new


def test_diff_and_apply_pt_files(tmp_path: Path) -> None:
    old, new = state_dicts()
    torch.save(old, tmp_path / "old.pt")
    torch.save(new, tmp_path / "new.pth")
    summary = mdiff.diff_files(tmp_path / "old.pt", tmp_path / "new.pth", tmp_path / "d.mdiff")
    assert set(summary) == {"0.weight", "1.bias", "2.weight"}
    assert mdiff.apply_files(tmp_path / "old.pt", tmp_path / "d.mdiff", tmp_path / "result.pt") == len(new)
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert list(result) == sorted(new)
    for name, tensor in new.items():
        assert result[name].dtype == tensor.dtype
        assert_bits_equal(torch_to_numpy(result[name]), torch_to_numpy(tensor))


def test_diff_and_apply_onnx_files(tmp_path: Path) -> None:
    old_path = save_model(linear_model(W0, B0), tmp_path / "old.onnx")
    w1 = W0.copy()
    w1[1, 1] = np.float32(np.nan)
    b1 = f32(3, 4)
    new_path = save_model(linear_model(w1, b1), tmp_path / "new.onnx")
    summary = mdiff.diff_files(old_path, new_path, tmp_path / "d.mdiff")
    assert set(summary) == {"W", "B"}
    mdiff.apply_files(old_path, tmp_path / "d.mdiff", tmp_path / "result.onnx")
    result = onnx.load(str(tmp_path / "result.onnx"))
    onnx.checker.check_model(result)
    assert_bits_equal(numpy_helper.to_array(result.graph.initializer[0]), w1)
    assert_bits_equal(numpy_helper.to_array(result.graph.initializer[1]), b1)
    assert result.graph.node == onnx.load(str(old_path)).graph.node


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".pt"])
def test_other_formats_ignore_the_template(tmp_path: Path, suffix: str) -> None:
    template = save_model(linear_model(W0, B0), tmp_path / "base.onnx")
    entries = [("W", (3, 2), DTYPES["float32"]), ("extra", (1,), DTYPES["int64"])]
    tensors = {"W": W0, "extra": np.array([5])}
    write_checkpoint(tmp_path / f"out{suffix}", entries, tensors.__getitem__, template=template)
    loaded = load_checkpoint(tmp_path / f"out{suffix}")
    assert list(loaded) == ["W", "extra"]
    assert_bits_equal(loaded["W"], W0)
