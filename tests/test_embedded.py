"""Update types a file embeds as ONNX functions (SPEC.md §7.8): run after checking, refused otherwise."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mdiff
from mdiff.engines import apply_update
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
        # §7.9's rules fold only small integer tensors, so a long 1-D input costs nothing (ONNX's data
        # propagation spelt it out, and it was refused while the reference used it)
        "long-1-d-input-next-to-a-computed-shape": (
            [N("Cast", ["s"], ["c"], to=T.FLOAT), N("ReduceMax", ["c"], ["top"], keepdims=0)] + shape_of_base, (2**22,), None),
        # a shape computed from a dataset's values is not a known value
        "reshape-to-a-shape-read-from-data": ([N("Cast", ["s"], ["si"], to=T.INT64), N("Reshape", ["base", "si"], ["r"]),
                                                N("Mul", ["r", "s"], ["result"])], (2,), "MD428"),
        # a known value holds at most 64 entries: a shape sliced from a longer constant is not known
        "known-value-over-64-entries": ([const("c", [48] * 65), const("z", [0]), const("one", [1]), N("Slice", ["c", "z", "one"], ["h"]),
                                         N("Reshape", ["base", "h"], ["r"]), const("sh", [8, 6]), N("Reshape", ["r", "sh"], ["result"])],
                                        (8, 1), "MD428"),
        "known-value-of-64-entries": ([const("c", [48] * 64), const("z", [0]), const("one", [1]), N("Slice", ["c", "z", "one"], ["h"]),
                                       N("Reshape", ["base", "h"], ["r"]), const("sh", [8, 6]), N("Reshape", ["r", "sh"], ["result"])],
                                      (8, 1), None),
        "read-before-defined": ([N("Reshape", ["base", "sh"], ["result"]), const("sh", [8, 6])], (8, 1), "MD421"),
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


# Seconds of CPU one variant's validation may take. Measured (median of 3 runs, 2 cores shared with other
# work, onnx imported): the costliest, the first variant of a process (reshape-2^62-cast), 0.038 s (0.030-0.041),
# the others 0.002-0.005 s; 0.25 s is 6.6x that. Before the bound on shape inference (e130df7) ONNX's
# data propagation ran without end on 2^62 entries.
SHAPE_CHECK_CPU_S = 0.25


@pytest.mark.parametrize("name", list(SHAPE_VARIANTS))
def test_shape_inference_is_bounded(tmp_path, name):
    """Every variant is refused with its code, or accepted (None), within SHAPE_CHECK_CPU_S of this
    process's CPU time (all its threads: onnxruntime's too). CPU, not wall time: a loaded machine
    stretches the wall time of a check, while a runaway inference costs CPU whatever the load."""
    import time

    import onnx.shape_inference  # noqa: F401 — loading onnx (0.4 s, once a process) is not the check's cost

    nodes, s_shape, code = SHAPE_VARIANTS[name]
    path = tmp_path / "variant.mdiff"
    ia3.write_with_function(path, _variant(nodes, s_shape), scale_shape=s_shape)
    started = time.process_time()
    findings = [f for f in mdiff.validate(path, check_data=False) if f.is_error]
    used = time.process_time() - started
    assert used < SHAPE_CHECK_CPU_S, (name, used)
    assert [f.code for f in findings][:1] == ([code] if code else []), findings


def test_an_accepted_shape_dependent_function_runs(tmp_path):
    """Data propagation still resolves shapes computed from Shape: Expand(max(s), Shape(base))."""
    nodes, s_shape, _ = SHAPE_VARIANTS["expand-to-shape-of-base"]
    path = tmp_path / "ok.mdiff"
    ia3.write_with_function(path, _variant(nodes, s_shape), scale_shape=s_shape)
    with mdiff.open(path) as diff:
        result = apply_update(diff["w32"], np.ones((8, 6), np.float32), "w32", verify=False)
    assert result.shape == (8, 6) and np.all(result == 1.0)


@pytest.mark.parametrize("shape", [[2**70], [0, 2**62], [2**20, 2**20]])
def test_a_declared_shape_over_the_limits_is_MD508(tmp_path, shape):
    """The declared shape becomes `base`'s ONNX shape (int64): checked against §8.3 first."""
    import h5py

    from mdiff.hdf5walk.attributes import write_string

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


def _infer_with_onnx(nodes, inputs, initializers=()):
    """The output shape of `out` by onnx's own inference (strict, with data propagation)."""
    import onnx
    from onnx import helper

    from mdiff.format.onnx_functions import OPSET

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              [helper.make_tensor_value_info("out", 0, None)], initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", OPSET)], ir_version=13)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    out = next(v for v in inferred.graph.output if v.name == "out").type.tensor_type
    return out.elem_type, tuple(d.dim_value for d in out.shape.dim)


def _rule_cases():
    from onnx import TensorProto as T, helper

    N = helper.make_node
    F, I = T.FLOAT, T.INT64

    def c(name, values):
        return N("Constant", [], [name], value=helper.make_tensor(name, I, [len(values)], values))

    x = {"x": (F, [2, 3, 4])}
    return {
        "add-broadcast": ([N("Add", ["x", "y"], ["out"])], {**x, "y": (F, [3, 1])}),
        "where": ([N("Where", ["b", "x", "y"], ["out"])], {**x, "b": (T.BOOL, [4]), "y": (F, [1, 3, 1])}),
        "less": ([N("Less", ["x", "y"], ["out"])], {**x, "y": (F, [])}),
        "matmul-1d": ([N("MatMul", ["x", "v"], ["out"])], {**x, "v": (F, [4])}),
        "matmul-batch": ([N("MatMul", ["x", "y"], ["out"])], {**x, "y": (F, [5, 1, 4, 6])}),
        "gemm-trans": ([N("Gemm", ["a", "b", "cc"], ["out"], transA=1, transB=1)],
                       {"a": (F, [3, 2]), "b": (F, [5, 3]), "cc": (F, [5])}),
        "concat": ([N("Concat", ["x", "x"], ["out"], axis=-2)], x),
        "flatten": ([N("Flatten", ["x"], ["out"], axis=2)], x),
        "gather": ([c("i", [0, 1, 1, 0, 1]), N("Gather", ["x", "i"], ["out"], axis=1)], x),
        "reduce-keep": ([c("a", [0, -1]), N("ReduceSum", ["x", "a"], ["out"])], x),
        "reduce-all": ([N("ReduceMax", ["x"], ["out"], keepdims=0)], x),
        "reshape-zero-minus-one": ([c("h", [0, -1]), N("Reshape", ["x", "h"], ["out"])], x),
        "expand": ([c("h", [5, 1, 1, 1]), N("Expand", ["x", "h"], ["out"])], x),
        "slice": ([c("st", [-1, 0]), c("en", [-100, 2**63 - 1]), c("ax", [2, 0]), c("sp", [-2, 1]),
                   N("Slice", ["x", "st", "en", "ax", "sp"], ["out"])], x),
        "squeeze": ([N("Squeeze", ["y"], ["out"])], {"y": (F, [1, 3, 1, 2])}),
        "unsqueeze": ([c("a", [-1, 0]), N("Unsqueeze", ["x", "a"], ["out"])], x),
        "transpose": ([N("Transpose", ["x"], ["out"], perm=[1, 2, 0])], x),
        "shape-slice": ([N("Shape", ["x"], ["out"], start=-2)], x),
        "scatter": ([N("ScatterElements", ["x", "i", "u"], ["out"], axis=1)], {**x, "i": (I, [2, 1, 4]), "u": (F, [2, 1, 4])}),
        "cast": ([N("Cast", ["x"], ["out"], to=T.UINT8)], x),
        # known values: a shape computed from Shape, Gather, Mul, Concat, Unsqueeze, then used
        "computed-shape": ([N("Shape", ["x"], ["s"]), c("i", [1]), c("j", [2]), N("Gather", ["s", "i"], ["a"]),
                            N("Gather", ["s", "j"], ["b"]), N("Mul", ["a", "b"], ["ab"]), c("z", [0]),
                            N("Slice", ["s", "z", "i"], ["first"]), N("Concat", ["first", "ab"], ["h"], axis=0),
                            N("Reshape", ["x", "h"], ["out"])], x),
        "scalar-index-unsqueeze": ([N("Shape", ["x"], ["s"]), N("Constant", [], ["k"], value_int=2),
                                    N("Gather", ["s", "k"], ["d"]), c("a0", [0]), N("Unsqueeze", ["d", "a0"], ["h"]),
                                    N("Cast", ["h"], ["h2"], to=I), N("Reshape", ["x", "h2"], ["out"], allowzero=0),
                                    ], {"x": (F, [1, 1, 7])}),
    }


RULE_CASES = _rule_cases()


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_the_shape_rules_agree_with_onnx_on_valid_graphs(name):
    """§7.9's shape rules, which the reference implements itself, give what ONNX's inference gives."""
    from mdiff.hdf5walk.limits import Limits
    from mdiff.updates.function_shapes import Value, _constant, infer_node

    nodes, inputs = RULE_CASES[name]
    values = {n: Value(t, tuple(s)) for n, (t, s) in inputs.items()}
    for node in nodes:
        args = [values[i] if i else None for i in node.input]
        values[node.output[0]] = _constant(node) if node.op_type == "Constant" else infer_node(node, args, Limits())
    assert (values["out"].elem_type, values["out"].shape) == _infer_with_onnx(nodes, inputs)


def test_known_values_are_folded_as_a_runtime_computes_them():
    from onnx import TensorProto as T, helper

    from mdiff.hdf5walk.limits import Limits
    from mdiff.updates.function_shapes import Value, _constant, infer_node

    N = helper.make_node
    nodes = [N("Constant", [], ["a"], value_ints=[2**62, -3]), N("Constant", [], ["b"], value_int=4),
             N("Mul", ["a", "b"], ["m"]),  # 2**64 wraps to 0 in int64
             N("Cast", ["m"], ["c"], to=T.INT32), N("Neg", ["c"], ["n"]), N("Shape", ["n"], ["sh"])]
    values: dict = {}
    for node in nodes:
        args = [values[i] for i in node.input]
        values[node.output[0]] = _constant(node) if node.op_type == "Constant" else infer_node(node, args, Limits())
    assert values["m"] == Value(T.INT64, (2,), (0, -12))
    assert values["n"] == Value(T.INT32, (2,), (0, 12))
    assert values["sh"] == Value(T.INT64, (1,), (2,))


def test_a_function_member_that_is_a_group_is_MD420(tmp_path):
    """§7.8: a function.<dtype> member that is not a 1-D uint8 dataset is MD420 (the type was refused
    without a finding of its own before), and the parameter naming the type is MD402."""
    import h5py

    path = ia3.write_with_function(tmp_path / "f.mdiff", ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        f["update_types/x-ia3"].create_group("function.float16")
    assert sorted(f.code for f in mdiff.validate(path)) == ["MD402", "MD420"]


def test_an_operator_off_the_allowlist_with_a_subgraph_breaks_checks_3_and_5(tmp_path):
    from onnx import TensorProto, helper

    branch = helper.make_graph([helper.make_node("Identity", ["base"], ["r1"])], "t", [],
                               [helper.make_tensor_value_info("r1", TensorProto.FLOAT, None)])
    fn = ia3.function("float32", nodes=[helper.make_node("If", ["cond"], ["result"], then_branch=branch, else_branch=branch)])
    path = ia3.write_with_function(tmp_path / "if.mdiff", fn)
    assert sorted({f.code for f in mdiff.validate(path)}) == ["MD402", "MD421", "MD423", "MD425"]  # MD421: `cond` is never defined
