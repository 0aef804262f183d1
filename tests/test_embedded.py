"""Update types a file embeds as ONNX functions (SPEC.md §7.8): run after checking, refused otherwise."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mdiff
from tests import ia3
from tests.helpers import bits_equal, random_tensor


def _state():
    return {"w32": random_tensor("float32", (8, 6), 1), "wbf": random_tensor("bfloat16", (8, 6), 2),
            "w16": random_tensor("float16", (4, 3), 3), "untouched": np.arange(3, dtype=np.int64)}


def test_ia3_round_trips_in_every_dtype_it_defines(tmp_path):
    base = _state()
    scales = {"w32": np.linspace(0.5, 2, 8, dtype=np.float32).reshape(8, 1),  # one scale per row
              "wbf": np.linspace(0.5, 2, 6, dtype=np.float32).reshape(1, 6).astype(base["wbf"].dtype),  # per column
              "w16": np.full((1, 1), 3.0, dtype=np.float16)}
    path = tmp_path / "ia3.mdiff"
    ia3.write(path, base, scales)
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        assert diff["w32"].type == "x-ia3"
        for engine in ("onnx", "numpy", None):  # an embedded type runs on onnxruntime whatever is asked
            result = mdiff.apply(base, diff, engine=engine)
            for name, s in scales.items():
                assert bits_equal(result[name], ia3.expected(base[name], s)), name
            assert result["untouched"] is base["untouched"]


def test_the_wrong_base_fails_the_embedded_types_sha256(tmp_path):
    base = _state()
    path = tmp_path / "ia3.mdiff"
    ia3.write(path, base, {"w32": np.full((8, 1), 2.0, np.float32)})
    other = dict(base, w32=base["w32"] + 1)
    with mdiff.open(path) as diff, pytest.raises(mdiff.ApplyError) as info:
        mdiff.apply(other, diff)
    assert info.value.code == "MD602"


@pytest.mark.parametrize("code", sorted(ia3.HOSTILE))
def test_hostile_functions_are_refused_with_their_code(tmp_path, code):
    path = ia3.write_with_function(tmp_path / "hostile.mdiff", ia3.HOSTILE[code]())
    codes = [f.code for f in mdiff.validate(path) if f.is_error]
    assert codes[0] == code, codes
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(path, lazy=False)
    assert info.value.code == code


@pytest.mark.parametrize("scale_shape,code", [((3, 6), "MD428"), ((2, 8, 6), "MD427")])
def test_data_that_does_not_fit_the_function_is_refused(tmp_path, scale_shape, code):
    """(3, 6) does not broadcast against (8, 6); (2, 8, 6) is not of the declared rank 2."""
    path = ia3.write_with_function(tmp_path / "hostile.mdiff", ia3.function("float32"), scale_shape=scale_shape)
    assert [f.code for f in mdiff.validate(path) if f.is_error] == [code]


@pytest.mark.parametrize("definition", [{"version": 1, "inputs": ["base"], "exact": True}, {"inputs": ["s"], "exact": True}])
def test_malformed_definitions_are_refused(tmp_path, definition):
    path = ia3.write_with_function(tmp_path / "hostile.mdiff", ia3.function("float32"), definition=definition)
    assert [f.code for f in mdiff.validate(path) if f.is_error][0] == "MD420"


def test_the_writer_refuses_a_hostile_type(tmp_path):
    with mdiff.DiffWriter(tmp_path / "x.mdiff") as w, pytest.raises(ValueError, match="MD423"):
        w.add_update_type(ia3.NAME, ia3.DEFINITION, {"float32": ia3.HOSTILE["MD423"]()})


# ---------------------------------------------------------------- bounded shape inference (fuzzing: onnx-data-propagation-unbounded)


def _variant(nodes, s_shape=(8, 1)) -> bytes:
    """An x-ia3 float32 function of ``nodes``; with a 1-D ``s_shape``, `s` is declared 1-D."""
    import onnx
    from onnx import TensorProto, helper

    from mdiff.format.onnx_functions import serialize

    model = onnx.load_from_string(ia3.function("float32", nodes=nodes))
    if len(s_shape) == 1:
        model.graph.input[1].CopyFrom(helper.make_tensor_value_info("s", TensorProto.FLOAT, ["n"]))
    return serialize(model)


def _shape_variants():
    from onnx import TensorProto as T, helper

    N = helper.make_node

    def const(name, values):
        return N("Constant", [], [name], value=helper.make_tensor(name, T.INT64, [len(values)], values))

    def scalar(name, value):
        return N("Constant", [], [name], value=helper.make_tensor(name, T.INT64, [], [value]))

    def cast_max(x):  # Cast is data-propagating: ONNX spells out a 1-D input entry by entry
        return [N("Cast", [x], ["cast"], to=T.FLOAT), N("ReduceMax", ["cast"], ["top"], keepdims=0),
                N("Mul", ["base", "top"], ["result"])]

    doubling = [const("c0", [1])] + [N("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0) for i in range(24)]
    shape_of_base = [N("Shape", ["base"], ["sb"]), N("Expand", ["top", "sb"], ["e"]), N("Mul", ["base", "e"], ["result"])]
    return {
        # the fuzzer's reproducer: a constant shape of 2**62 into Reshape, then Cast
        "reshape-2^62-cast": ([const("h", [2**62]), N("Reshape", ["s", "h"], ["flat"])] + cast_max("flat"), (8, 1), "MD428"),
        "reshape-2^31x2^31-cast": ([const("h", [2**31, 2**31]), N("Reshape", ["s", "h"], ["flat"])] + cast_max("flat"), (8, 1), "MD428"),
        "reshape-0x2^62-allowzero": ([const("h", [0, 2**62]), N("Reshape", ["s", "h"], ["flat"], allowzero=1)] + cast_max("flat"), (8, 1), "MD428"),
        "expand-2^31x2^31": ([const("h", [2**31, 2**31]), N("Expand", ["s", "h"], ["big"])] + cast_max("big"), (8, 1), "MD428"),
        "expand-1x2^40": ([const("h", [1, 2**40]), N("Expand", ["s", "h"], ["big"])] + cast_max("big"), (8, 1), "MD428"),
        "identity-then-reshape-2^62": ([const("h", [2**62]), N("Identity", ["h"], ["h2"]), N("Reshape", ["s", "h2"], ["flat"])]
                                       + cast_max("flat"), (8, 1), "MD428"),
        "computed-2^62-then-cast": ([const("a", [2**31]), const("b", [2**31]), N("Mul", ["a", "b"], ["h"]),
                                     N("Reshape", ["s", "h"], ["flat"])] + cast_max("flat"), (8, 1), "MD428"),
        "computed-2^62-no-cast": ([const("a", [2**31]), const("b", [2**31]), N("Mul", ["a", "b"], ["h"]), N("Reshape", ["s", "h"], ["flat"]),
                                   N("ReduceMax", ["flat"], ["top"], keepdims=0), N("Mul", ["base", "top"], ["result"])], (8, 1), "MD428"),
        "shape-of-s-squared-twice": ([N("Shape", ["s"], ["sh"]), N("Mul", ["sh", "sh"], ["sq"]), N("Mul", ["sq", "sq"], ["h"]),
                                      N("Reshape", ["base", "h"], ["flat"])] + cast_max("flat"), (2**16,), "MD428"),
        "concat-doubling-2^24-shape": (doubling + [N("Reshape", ["s", "c24"], ["flat"])] + cast_max("flat"), (8, 1), "MD428"),
        "unsqueeze-100000-axes": ([const("ax", list(range(100_000))), N("Unsqueeze", ["s", "ax"], ["u"])] + cast_max("u"), (8, 1), "MD428"),
        "long-1-d-input-needing-data-propagation": (
            [N("Cast", ["s"], ["c"], to=T.FLOAT), N("ReduceMax", ["c"], ["top"], keepdims=0)] + shape_of_base, (2**22,), "MD428"),
        # Tile, ConstantOfShape and Range are off the allowlist
        "tile": ([const("r", [2**31, 2**31]), N("Tile", ["s", "r"], ["t"])] + cast_max("t"), (8, 1), "MD423"),
        "constant-of-shape": ([const("h", [2**62]), N("ConstantOfShape", ["h"], ["t"])] + cast_max("t"), (8, 1), "MD423"),
        "range": ([scalar("z", 0), scalar("big", 2**62), scalar("one", 1), N("Range", ["z", "big", "one"], ["t"])] + cast_max("t"), (8, 1), "MD423"),
        # what stays allowed: a long 1-D input when no shape depends on values (no data propagation runs),
        # shapes computed from Shape, Slice to INT64_MAX ("to the end")
        "long-1-d-input-without-data-propagation": (
            [N("Cast", ["s"], ["c0"], to=T.FLOAT)] + [N("Cast", [f"c{i}"], [f"c{i + 1}"], to=T.FLOAT) for i in range(50)]
            + [N("ReduceMax", ["c50"], ["top"], keepdims=0), N("Mul", ["base", "top"], ["result"])], (2**22,), None),
        "expand-to-shape-of-base": ([N("Cast", ["s"], ["c"], to=T.FLOAT), N("ReduceMax", ["c"], ["top"], keepdims=0)] + shape_of_base,
                                    (8, 1), None),
        "slice-to-int64-max": ([const("st", [0]), const("en", [2**63 - 1]), const("ax", [0]), N("Slice", ["s", "st", "en", "ax"], ["sl"]),
                                N("Mul", ["base", "sl"], ["result"])], (8, 1), None),
    }


SHAPE_VARIANTS = _shape_variants()


@pytest.mark.parametrize("name", list(SHAPE_VARIANTS))
def test_shape_inference_is_bounded(tmp_path, name):
    """Every variant ends within a second: refused with its code, or accepted (None)."""
    import time

    nodes, s_shape, code = SHAPE_VARIANTS[name]
    path = tmp_path / "variant.mdiff"
    ia3.write_with_function(path, _variant(nodes, s_shape), scale_shape=s_shape)
    started = time.monotonic()
    findings = [f for f in mdiff.validate(path, check_data=False) if f.is_error]
    assert time.monotonic() - started < 1.5, name
    assert [f.code for f in findings][:1] == ([code] if code else []), findings


def test_an_accepted_shape_dependent_function_runs(tmp_path):
    """Data propagation still resolves shapes computed from Shape: Expand(max(s), Shape(base))."""
    nodes, s_shape, _ = SHAPE_VARIANTS["expand-to-shape-of-base"]
    path = tmp_path / "ok.mdiff"
    ia3.write_with_function(path, _variant(nodes, s_shape), scale_shape=s_shape)
    with mdiff.open(path) as diff:
        result = diff["w32"].apply(np.ones((8, 6), np.float32), "w32", verify=False)
    assert result.shape == (8, 6) and np.all(result == 1.0)


@pytest.mark.parametrize("shape", [[2**70], [0, 2**62], [2**20, 2**20]])
def test_a_declared_shape_over_the_limits_is_MD508(tmp_path, shape):
    """The declared shape becomes `base`'s ONNX shape (int64): checked against §8.3 first."""
    import h5py

    from mdiff.format.attributes import write_string

    path = tmp_path / "declared.mdiff"
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        group = f["parameters/w32"]
        meta = json.loads(bytes(group.attrs["update"]).rstrip(b"\0"))
        write_string(group, "update", json.dumps(dict(meta, shape=shape)))
    assert [f.code for f in mdiff.validate(path) if f.is_error] == ["MD508"]
    with pytest.raises(mdiff.LimitError) as info:
        mdiff.open(path, lazy=False)
    assert info.value.code == "MD508"


def test_the_data_propagating_operators_are_those_onnx_propagates_through():
    """SPEC.md §7.8 names them; a newer onnx that propagates data through more operators must be noticed."""
    import onnx.defs

    from mdiff.format.onnx_functions import OPSET
    from mdiff.updates.embedded import _DATA_PROPAGATING, ALLOWED_OPS

    onnx_ops = {op for op in ALLOWED_OPS if onnx.defs.get_schema(op, OPSET).has_data_propagation_function}
    assert onnx_ops - {"Shape"} == _DATA_PROPAGATING  # Shape's propagation reads only its input's rank
