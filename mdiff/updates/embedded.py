"""SPEC.md §7.8: update types a file defines itself, by embedding their ONNX functions.

This is the format's answer to plugin code: a new kind of update travels with
the file as data, and a reader runs it only after checking it — standard
operators from an allowlist, the pinned opset, no external data, no
subgraphs, bounded size, node count and shapes — so that running it can do no
more than compute a tensor of the parameter's shape.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

import numpy as np
import onnx
import onnx.numpy_helper
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, helper

from mdiff.errors import InvalidFileError
from mdiff.engines.onnxruntime_engine import ONNXRUNTIME_ERRORS
from mdiff.format.dtypes import DTYPES, dtype_named
from mdiff.format.limits import Limits, extent, shape_problem
from mdiff.format.onnx_functions import IR_VERSION, OPSET, VALUE_TYPES
from mdiff.updates.base import Problem, Runner, Update, UpdateType, empty_array, no_models, no_problems, update_schema

TYPE_NAME = re.compile(r"x-[a-z0-9][a-z0-9_-]{0,62}")  # "x-" keeps them apart from built-in types forever
FUNCTION_PREFIX = "function."  # one dataset per dtype: function.float32, function.bfloat16, …

DEFINITION_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://mdiff.dev/schemas/update-type-definition.schema.json",
    "title": "mdiff embedded update type definition (SPEC.md §7.8)",
    "type": "object",
    "required": ["version", "inputs", "exact"],
    "additionalProperties": False,
    "properties": {
        "version": {"type": "integer", "minimum": 1},
        "inputs": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$", "not": {"enum": ["base", "result"]}},
            "uniqueItems": True,
            "maxItems": 16,
        },
        "exact": {"type": "boolean"},
        "description": {"type": "string"},
    },
}

# Deterministic, side-effect-free, no control flow, nothing that draws random numbers or reads files.
ALLOWED_OPS = frozenset("""
    Abs Add And BitCast BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast Ceil Clip Concat Constant
    Div Equal Exp Expand Flatten Floor Gather Gemm Greater GreaterOrEqual Identity Less LessOrEqual Log MatMul
    Max Min Mod Mul Neg Not Or Pow Reciprocal ReduceMax ReduceMean ReduceMin ReduceSum Reshape Round
    ScatterElements Shape Sign Slice Sqrt Squeeze Sub Sum Tanh Transpose Unsqueeze Where Xor
""".split())

_SUBGRAPH_ATTRIBUTES = {AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR,
                        AttributeProto.SPARSE_TENSORS, AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS}


def _tensors_of(model: onnx.ModelProto) -> Iterator[TensorProto]:
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == AttributeProto.TENSORS:
                yield from attr.tensors


def _tensor_bytes(t: TensorProto) -> int:
    return len(t.raw_data) + 8 * (len(t.float_data) + len(t.int32_data) + len(t.int64_data)
                                  + len(t.double_data) + len(t.uint64_data)) + sum(map(len, t.string_data))


def check_function(data: bytes, dtype_name: str, inputs: list[str], limits: Limits) -> tuple[onnx.ModelProto | None, list[Problem]]:
    """Every reason not to run this function; the parsed model if there is none."""
    if len(data) > limits.max_function_bytes:
        return None, [("MD421", "", f"{len(data)} bytes (limit {limits.max_function_bytes})")]
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        return None, [("MD421", "", f"not an ONNX model: {exc}")]
    problems: list[Problem] = []
    if not 3 <= model.ir_version <= IR_VERSION:
        problems.append(("MD422", "", f"IR version {model.ir_version}; readers of this spec run 3 to {IR_VERSION}"))
    opsets = [(o.domain, o.version) for o in model.opset_import]
    if opsets not in ([("", OPSET)], [("ai.onnx", OPSET)]):
        problems.append(("MD422", "", f"opset imports {opsets}; only ai.onnx opset {OPSET} is allowed"))
    if model.functions or model.training_info or model.graph.sparse_initializer:
        problems.append(("MD425", "", "local functions, training information or sparse initializers"))
    if len(model.graph.node) > limits.max_function_nodes:
        problems.append(("MD426", "", f"{len(model.graph.node)} nodes (limit {limits.max_function_nodes})"))
    for node in model.graph.node:
        if any(a.type in _SUBGRAPH_ATTRIBUTES or a.ref_attr_name for a in node.attribute):
            problems.append(("MD425", "", f"node {node.name or node.op_type} has a subgraph or reference attribute"))
        elif node.domain not in ("", "ai.onnx") or node.op_type not in ALLOWED_OPS:
            problems.append(("MD423", "", f"operator {node.domain or 'ai.onnx'}::{node.op_type} is not allowed"))
    tensors = list(_tensors_of(model))
    if any(t.data_location == TensorProto.EXTERNAL or t.external_data for t in tensors):
        problems.append(("MD424", "", "a tensor refers to external data"))
    total = sum(_tensor_bytes(t) for t in tensors)
    if total > limits.max_function_bytes:
        problems.append(("MD426", "", f"{total} bytes of initializers and constants (limit {limits.max_function_bytes})"))
    problems += _signature_problems(model, dtype_name, inputs)
    if not problems:
        try:
            onnx.checker.check_model(model, full_check=False)
        except (onnx.checker.ValidationError, RuntimeError, ValueError) as exc:
            problems.append(("MD421", "", f"the ONNX checker refuses it: {str(exc).splitlines()[0]}"))
    return (None if problems else model), problems


def _signature_problems(model: onnx.ModelProto, dtype_name: str, inputs: list[str]) -> list[Problem]:
    graph = model.graph
    names = [i.name for i in graph.input]
    want_type = VALUE_TYPES[dtype_name]
    problems = []
    if names != ["base", *inputs]:
        problems.append(("MD427", "", f"inputs are {names}; the definition needs {['base', *inputs]}"))
    elif graph.input[0].type.tensor_type.elem_type != want_type:
        problems.append(("MD427", "", f"input `base` must be {_type_name(want_type)}"))
    if [o.name for o in graph.output] != ["result"] or graph.output[0].type.tensor_type.elem_type != want_type:
        problems.append(("MD427", "", f"the only output must be `result` of {_type_name(want_type)}"))
    return problems


def _type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:  # a number ONNX does not define
        return f"element type {elem_type}"


def _can_feed(storage: np.dtype, declared: int) -> bool:
    """A dataset feeds an input of its own type, or a 2-byte float input with its uint16 bit patterns."""
    if storage == np.dtype("<u2") and declared in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return True
    try:
        return helper.np_dtype_to_tensor_dtype(storage) == declared
    except (KeyError, ValueError, TypeError):
        return False


# Inputs that ONNX shape inference reads as a shape or as axes (§7.8 check 8): each must be a 1-D
# tensor of at most max_rank elements, known before inference runs, so that no value's rank can grow
# without bound (a rank of 2**30 is as costly to infer as a tensor of 2**30 elements).
_SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Slice": (1, 2, 3, 4),
    "ReduceMax": (1,), "ReduceMean": (1,), "ReduceMin": (1,), "ReduceSum": (1,),
}
# The allowed operators whose ONNX data propagation reads an input's values (Shape reads only its
# input's shape). ONNX represents a 1-D input of n elements as n entries however large n is — 18 GB
# and counting for a tensor of 2**62 elements — so data propagation runs only when some shape
# depends on values, and then only over at most MAX_PROPAGATED_ENTRIES entries in all.
# (SPEC.md §7.8 lists them; tests/test_embedded.py checks the list against the installed onnx's.)
_DATA_PROPAGATING = frozenset({"Add", "Cast", "Concat", "Gather", "Mul", "Slice", "Squeeze", "Sub", "Unsqueeze"})
MAX_PROPAGATED_ENTRIES = 2**16


def _fully_known(dims: list[int | None] | None) -> bool:
    return dims is not None and None not in dims


def _dims(t: onnx.TypeProto | None) -> list[int | None] | None:
    """A tensor type's dimensions (None where unknown); None when its rank is unknown."""
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim]


def _bound_problem(name: str, dims: list[int | None] | None, limits: Limits) -> Problem | None:
    """MD428 when a value's known rank or known dimensions exceed §8.3's limits (a 0 counting as 1)."""
    if dims is None:
        return None
    if len(dims) > limits.max_rank:
        return ("MD428", "", f"{name!r} would have rank {len(dims)} (limit {limits.max_rank})")
    elements = extent(d for d in dims if d is not None)
    if elements > limits.max_elements:
        return ("MD428", "", f"{name!r} would hold {elements} elements, counting a dimension of 0 as 1 "
                             f"(limit {limits.max_elements})")
    return None


def _constants(graph: onnx.GraphProto) -> dict[str, TensorProto]:
    """Initializers and the values of Constant nodes (those ONNX shape inference reads as data)."""
    out = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value" and a.type == AttributeProto.TENSOR:
                    out[node.output[0]] = a.t
                elif a.name == "value_ints" and a.type == AttributeProto.INTS:
                    out[node.output[0]] = helper.make_tensor(node.output[0], TensorProto.INT64, [len(a.ints)], a.ints)
                elif a.name == "value_int" and a.type == AttributeProto.INT:
                    out[node.output[0]] = helper.make_tensor(node.output[0], TensorProto.INT64, [], [a.i])
    return out


def _constant_shape_problems(graph: onnx.GraphProto, constants: Mapping[str, TensorProto], limits: Limits) -> list[Problem]:
    """MD428 for a constant shape (the shape input of Reshape or Expand) that names a dimension over
    the element limit or more dimensions than the rank limit — refused before inference runs."""
    for node in graph.node:
        if node.op_type not in ("Reshape", "Expand") or len(node.input) < 2 or node.input[1] not in constants:
            continue
        try:
            values = onnx.numpy_helper.to_array(constants[node.input[1]]).reshape(-1)
        except (ValueError, TypeError, RuntimeError) as exc:
            return [("MD428", "", f"the constant shape of node {node.name or node.op_type} cannot be read: {exc}")]
        if values.size > limits.max_rank:
            return [("MD428", "", f"node {node.name or node.op_type} has a constant shape of {values.size} "
                                  f"dimensions (limit {limits.max_rank})")]
        if values.dtype.kind in "iu" and values.size and int(np.abs(values.astype(np.float64)).max()) > limits.max_elements:
            return [("MD428", "", f"node {node.name or node.op_type} has a constant shape {values.tolist()} with a "
                                  f"dimension over the element limit {limits.max_elements}")]
    return []


def _prepass(concrete: onnx.ModelProto, constants: Mapping[str, TensorProto], limits: Limits) -> tuple[dict[str, onnx.TypeProto], list[Problem]]:
    """Shape inference node by node, without data propagation, stopping at the first node whose
    shape or axes input is not a short 1-D tensor or whose output exceeds the limits: the types of
    every value, all bounded, before any whole-graph inference runs."""
    graph = concrete.graph
    types: dict[str, onnx.TypeProto] = {v.name: v.type for v in graph.input}
    for t in graph.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    for node in graph.node:
        label = node.name or node.op_type
        for i in _SHAPE_INPUTS.get(node.op_type, ()):
            if i >= len(node.input) or not node.input[i]:
                continue
            dims = _dims(types.get(node.input[i]))
            if dims is None or len(dims) != 1 or dims[0] is None or dims[0] > limits.max_rank:
                got = "of unknown shape" if dims is None else f"of shape {dims}"
                return types, [("MD428", "", f"input {node.input[i]!r} of node {label} is read as a shape or axes: "
                                             f"it must be 1-D with at most {limits.max_rank} elements, not {got}")]
        try:
            schema = onnx.defs.get_schema(node.op_type, OPSET, node.domain)
            inputs = {k: types[k] for k in node.input if k}
            outputs = onnx.shape_inference.infer_node_outputs(
                schema, node, inputs, {k: constants[k] for k in node.input if k in constants},
                opset_imports=list(concrete.opset_import), ir_version=concrete.ir_version,
            )
        except KeyError as exc:
            return types, [("MD428", "", f"node {label} reads {exc.args[0]!r} before it is computed")]
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, onnx.defs.SchemaError,
                RuntimeError, ValueError, TypeError) as exc:  # ValidationError: an input off the operator's type constraints
            return types, [("MD428", "", f"shape inference fails at node {label}: {str(exc).splitlines()[0] if str(exc) else exc!r}")]
        for out in node.output:
            if out in outputs:
                problem = _bound_problem(out, _dims(outputs[out]), limits)
                if problem:
                    return types, [problem]
                types[out] = outputs[out]
    return types, []


def _propagation_problems(graph: onnx.GraphProto, types: Mapping[str, onnx.TypeProto], limits: Limits) -> list[Problem]:
    """MD428 unless data propagation is bounded: every input of a data-propagating node has a known
    rank, and the 1-D ones (which ONNX spells out entry by entry) have MAX_PROPAGATED_ENTRIES in all."""
    total = 0
    for node in graph.node:
        if node.op_type not in _DATA_PROPAGATING:
            continue
        for name in node.input:
            if not name:
                continue
            dims = _dims(types.get(name))
            if dims is None or (len(dims) == 1 and dims[0] is None):
                return [("MD428", "", f"the shape of {name!r} (an input of {node.name or node.op_type}) cannot be "
                                      f"bounded before data propagation")]
            if len(dims) == 1 and dims[0] is not None:
                total += dims[0]
    if total > MAX_PROPAGATED_ENTRIES:
        return [("MD428", "", f"data propagation would go through {total} values of 1-D tensors "
                              f"(limit {MAX_PROPAGATED_ENTRIES})")]
    return []


def check_shapes(model: onnx.ModelProto, shape, datasets: Mapping[str, tuple[tuple[int, ...], np.dtype]], limits: Limits) -> list[Problem]:
    """MD427/MD428: with this parameter's concrete shapes, every value of the graph has a static,
    bounded shape and the result has the parameter's shape.

    Bounded work first: constant shapes, then inference node by node (each output checked against
    the limits before the next node runs), then, only if some shape depends on values and the
    values it would propagate are few, ONNX's whole-graph inference with data propagation.
    """
    graph = model.graph
    concrete = onnx.ModelProto()
    concrete.CopyFrom(model)
    for value in concrete.graph.input[1:]:
        got_shape, storage = datasets[value.name]
        if not _can_feed(storage, value.type.tensor_type.elem_type):
            return [("MD427", value.name, f"dataset {value.name!r} ({storage.str}) cannot feed input of type "
                                          f"{_type_name(value.type.tensor_type.elem_type)}")]
    for value, dims in zip(concrete.graph.input, [shape] + [datasets[i.name][0] for i in graph.input[1:]]):
        declared = value.type.tensor_type.shape.dim if value.type.tensor_type.HasField("shape") else None
        if declared is not None and (len(declared) != len(dims) or any(
                d.HasField("dim_value") and d.dim_value != n for d, n in zip(declared, dims))):
            return [("MD427", value.name, f"input {value.name!r} is declared {[d.dim_value or d.dim_param for d in declared]}, "
                                          f"but the data has shape {list(dims)}")]
        value.type.tensor_type.ClearField("shape")
        value.type.tensor_type.shape.SetInParent()
        for d in dims:
            value.type.tensor_type.shape.dim.add().dim_value = d
    concrete.graph.ClearField("value_info")
    concrete.graph.output[0].type.tensor_type.ClearField("shape")
    constants = _constants(concrete.graph)
    problems = _constant_shape_problems(concrete.graph, constants, limits)
    if problems:
        return problems
    types, problems = _prepass(concrete, constants, limits)
    if problems:
        return problems
    known = all(_fully_known(_dims(types.get(out))) for node in concrete.graph.node for out in node.output)
    if not known:
        problems = _propagation_problems(concrete.graph, types, limits)
        if problems:
            return problems
    try:
        inferred = onnx.shape_inference.infer_shapes(concrete, strict_mode=True, data_prop=not known)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError) as exc:
        return [("MD428", "", f"shape inference fails: {str(exc).splitlines()[0]}")]
    values = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
    for node in inferred.graph.node:
        for out in node.output:
            info = values.get(out)
            dims = _dims(info.type) if info else None
            if dims is None or None in dims:
                return [("MD428", "", f"the shape of {out!r} cannot be known before running")]
            problem = _bound_problem(out, dims, limits)
            if problem:
                return [problem]
    result = [d.dim_value for d in values["result"].type.tensor_type.shape.dim]
    if result != list(shape):
        return [("MD428", "", f"the result would have shape {result}, not the parameter's {list(shape)}")]
    return []


def make_type(name: str, definition: Mapping[str, Any], functions: Mapping[str, tuple[onnx.ModelProto, bytes]], limits: Limits) -> UpdateType:
    """The UpdateType of a checked definition; ``functions`` maps dtype → (model, its bytes)."""
    inputs = list(definition["inputs"])

    def check_meta(meta) -> Iterator[Problem]:
        if meta["dtype"] not in functions:
            yield ("MD427", "", f"type {name!r} has no function for dtype {meta['dtype']} (it has {sorted(functions)})")

    def check_layout(meta, actual) -> Iterator[Problem]:
        missing = [i for i in inputs if i not in actual]
        for i in missing:
            yield ("MD405", i, f"dataset {i!r} is missing")
        if not missing and meta["dtype"] in functions:
            # the declared shape becomes `base`'s shape in ONNX (int64 dimensions): bounded first (§8.3)
            problem = shape_problem(meta["shape"], dtype_named(meta["dtype"]).value.itemsize, limits)
            if problem:
                yield (problem[0], "", f"the declared shape: {problem[1]}")
            else:
                yield from check_shapes(functions[meta["dtype"]][0], meta["shape"], actual, limits)

    def apply_onnx(update: Update, base: np.ndarray, run: Runner, scratch: bool) -> np.ndarray:
        model_bytes = functions[update.dtype.name][1]
        out = empty_array(update.shape, update.dtype.value, name)
        try:
            run.embedded(model_bytes, {"base": base, **{i: update.array(i) for i in inputs}}, out)
        except (RuntimeError, ValueError) + ONNXRUNTIME_ERRORS as exc:
            raise InvalidFileError("MD428", f"the function of {name!r} failed to run: {exc}", name) from None
        return out

    def apply_numpy(update: Update, base: np.ndarray, scratch: bool) -> np.ndarray:
        from mdiff.engines.onnxruntime_engine import shared_runner

        return apply_onnx(update, base, shared_runner(), scratch)  # an embedded type has no numpy twin

    return UpdateType(
        name=name, version=definition["version"], carries_sha256=definition["exact"], needs_base=True,
        datasets=tuple(inputs), schema=update_schema(name, definition["exact"], version=definition["version"], reads_base=True),
        check_meta=check_meta, check_layout=check_layout, check_data=no_problems,
        apply_numpy=apply_numpy, apply_onnx=apply_onnx, onnx_models=no_models, preferred_engine="onnx",
    )


def function_dataset(dtype_name: str) -> str:
    return FUNCTION_PREFIX + dtype_name


def dtype_of_function_dataset(dataset: str) -> str | None:
    if dataset.startswith(FUNCTION_PREFIX) and dataset[len(FUNCTION_PREFIX):] in DTYPES:
        return dtype_named(dataset[len(FUNCTION_PREFIX):]).name
    return None
