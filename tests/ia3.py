"""The example embedded update type (SPEC.md §7.8): IA³-style scaling, ``new = base · s``.

``s`` broadcasts against the parameter (shape (out, 1) scales rows, (1, in) columns — the
axes are declared by the shape of ``s``). Arithmetic is in float32, rounded to the
parameter's dtype to nearest, ties to even — one correctly rounded multiplication, so any
IEEE runtime gets the same bits and the type can be exact.
"""

from __future__ import annotations

import numpy as np
import onnx.external_data_helper
from onnx import TensorProto, helper

import mdiff
from mdiff.format.dtypes import DTYPES
from mdiff.format.onnx_functions import OPSET, VALUE_TYPES, serialize

NAME = "x-ia3"
DEFINITION = {"version": 1, "inputs": ["s"], "exact": True, "description": "IA3 scaling: result = base * s, s broadcast"}
DTYPE_NAMES = ("float16", "bfloat16", "float32")


def function(dtype_name: str, nodes=None, opset=OPSET, extra_initializers=()) -> bytes:
    """The ONNX model for one dtype; ``nodes`` etc. let tests build hostile variants."""
    t = VALUE_TYPES[dtype_name]
    if nodes is None:
        if t == TensorProto.FLOAT:
            nodes = [helper.make_node("Mul", ["base", "s"], ["result"])]
        else:
            nodes = [
                helper.make_node("Cast", ["base"], ["base32"], to=TensorProto.FLOAT),
                helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.FLOAT),
                helper.make_node("Mul", ["base32", "s32"], ["product"]),
                helper.make_node("Cast", ["product"], ["result"], to=t),
            ]
    graph = helper.make_graph(
        nodes, NAME, [helper.make_tensor_value_info("base", t, ["m", "n"]), helper.make_tensor_value_info("s", t, ["a", "b"])],
        [helper.make_tensor_value_info("result", t, ["m", "n"])], initializer=list(extra_initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", opset)], ir_version=13)
    return serialize(model)


def functions() -> dict[str, bytes]:
    return {d: function(d) for d in DTYPE_NAMES}


def expected(base: np.ndarray, s: np.ndarray) -> np.ndarray:
    return (base.astype(np.float32) * s.astype(np.float32)).astype(base.dtype)


def update(base: np.ndarray, s: np.ndarray) -> mdiff.Update:
    dt = mdiff.format.dtypes.dtype_of(base)
    try:
        digest = mdiff.updates.base.sha256_hex(expected(base, s))
    except ValueError:  # s does not broadcast: only hostile test files are made so
        digest = "0" * 64
    meta = {"type": NAME, "version": 1, "shape": list(base.shape), "dtype": dt.name, "sha256": digest}
    return mdiff.Update(meta, {"s": np.ascontiguousarray(s, dtype=dt.value).view(DTYPES[dt.name].storage)})


def write(path, base: dict, scales: dict, commit=None) -> None:
    commit = commit or mdiff.Commit("ia3", date="2026-01-01T00:00:00Z", writer_name="mdiff", writer_version="fixture")
    with mdiff.DiffWriter(path, commit) as w:
        w.add_update_type(NAME, DEFINITION, functions())
        for name in sorted(scales):
            w.add(name, update(base[name], scales[name]))


# ---------------------------------------------------------------- hostile variants (SPEC.md §7.8's rules)


def write_with_function(path, fn: bytes, scale_shape=(8, 1), definition=None):
    """A file whose x-ia3 float32 function is ``fn``, written without the writer's checks."""
    base = np.ones((8, 6), np.float32)
    commit = mdiff.Commit("h", date="2026-01-01T00:00:00Z", writer_name="mdiff", writer_version="fixture")  # bytes stay put across releases
    with mdiff.DiffWriter(path, commit, check_updates=False) as w:
        w.add_update_type(NAME, definition or DEFINITION, {"float32": fn})
        w.add("w32", update(base, np.ones(scale_shape, np.float32)))
    return path


def _initializer(name, external=False, size=4):
    t = helper.make_tensor(name, TensorProto.FLOAT, [size], np.ones(size, np.float32).tobytes(), raw=True)
    if external:
        onnx.external_data_helper.set_external_data(t, location="/etc/passwd")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
    return t


HOSTILE = {
    "MD421": lambda: b"\x08\x07not a model" * 3,
    "MD422": lambda: function("float32", opset=17),
    "MD423": lambda: function("float32", nodes=[
        helper.make_node("RandomNormalLike", ["base"], ["noise"]), helper.make_node("Add", ["base", "noise"], ["result"])]),
    "MD424": lambda: function("float32", nodes=[helper.make_node("Mul", ["base", "s"], ["result"])],
                                  extra_initializers=[_initializer("leak", external=True)]),
    # an allowed operator with a graph attribute: breaks check 5 alone (an `If` would break check 3 too)
    "MD425": lambda: function("float32", nodes=[
        helper.make_node("Identity", ["base"], ["b"], body=helper.make_graph(
            [helper.make_node("Identity", ["base"], ["r1"])], "t", [], [helper.make_tensor_value_info("r1", TensorProto.FLOAT, None)])),
        helper.make_node("Mul", ["b", "s"], ["result"])]),
    "MD426": lambda: function("float32", nodes=[helper.make_node("Identity", ["base"], ["x0"])] + [
        helper.make_node("Identity", [f"x{i}"], [f"x{i + 1}"]) for i in range(300)] + [helper.make_node("Mul", ["x300", "s"], ["result"])]),
    "MD427": lambda: function("bfloat16"),  # a bfloat16 function where float32's belongs
    "MD428": lambda: function("float32", nodes=[
        helper.make_node("Constant", [], ["huge"], value=helper.make_tensor("huge", TensorProto.INT64, [3], [1 << 20, 1 << 20, 1 << 10])),
        helper.make_node("Expand", ["s", "huge"], ["big"]), helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
        helper.make_node("Mul", ["base", "total"], ["result"])]),
}
