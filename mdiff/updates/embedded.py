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
from mdiff.format.dtypes import DTYPES, dtype_named
from mdiff.hdf5walk.limits import Limits, shape_problem
from mdiff.format.onnx_functions import IR_VERSION, OPSET, VALUE_TYPES
from mdiff.updates.function_shapes import check_graph
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
        if node.domain not in ("", "ai.onnx") or node.op_type not in ALLOWED_OPS:
            problems.append(("MD423", "", f"operator {node.domain or 'ai.onnx'}::{node.op_type} is not allowed"))
    tensors = list(_tensors_of(model))
    if any(t.data_location == TensorProto.EXTERNAL or t.external_data for t in tensors):
        problems.append(("MD424", "", "a tensor refers to external data"))
    total = sum(_tensor_bytes(t) for t in tensors)
    if total > limits.max_function_constant_bytes:
        problems.append(("MD426", "", f"{total} bytes of initializers and constants (limit {limits.max_function_constant_bytes})"))
    problems += _signature_problems(model, dtype_name, inputs)
    problems += _graph_problems(model.graph)
    return (None if problems else model), problems


def _graph_problems(graph: onnx.GraphProto) -> list[Problem]:
    """MD421 unless the graph is well formed: each node has one output, every name is defined once, and
    read only after it is defined (graph order is an order in which the nodes can run)."""
    defined = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    seen = set(defined)
    if len(seen) != len(defined) or "" in seen:
        return [("MD421", "", "a graph input or initializer name is empty or defined twice")]
    for node in graph.node:
        label = node.name or node.op_type
        missing = [i for i in node.input if i and i not in seen]
        if missing:
            return [("MD421", "", f"node {label} reads {missing[0]!r} before it is defined")]
        if len(node.output) != 1 or not node.output[0] or node.output[0] in seen:
            return [("MD421", "", f"node {label} must have one output, of a name not defined before")]
        seen.add(node.output[0])
    if "result" not in seen:
        return [("MD421", "", "no value is named `result`")]
    return []


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


def check_shapes(model: onnx.ModelProto, shape, datasets: Mapping[str, tuple[tuple[int, ...], np.dtype]], limits: Limits) -> list[Problem]:
    """MD427/MD428: with this parameter's concrete shapes, every value of the graph has a static,
    bounded shape and the result has the parameter's shape (§7.9's rules, function_shapes.py)."""
    graph = model.graph
    for value in graph.input[1:]:
        got_shape, storage = datasets[value.name]
        if not _can_feed(storage, value.type.tensor_type.elem_type):
            return [("MD427", value.name, f"dataset {value.name!r} ({storage.str}) cannot feed input of type "
                                          f"{_type_name(value.type.tensor_type.elem_type)}")]
    for value, dims in zip(graph.input, [shape] + [datasets[i.name][0] for i in graph.input[1:]]):
        declared = value.type.tensor_type.shape.dim if value.type.tensor_type.HasField("shape") else None
        if declared is not None and (len(declared) != len(dims) or any(
                d.HasField("dim_value") and d.dim_value != n for d, n in zip(declared, dims))):
            return [("MD427", value.name, f"input {value.name!r} is declared {[d.dim_value or d.dim_param for d in declared]}, "
                                          f"but the data has shape {list(dims)}")]
    problem = check_graph(model.graph, {v.name: (v.type.tensor_type.elem_type, tuple(dims)) for v, dims in zip(
        graph.input, [shape] + [datasets[i.name][0] for i in graph.input[1:]])},
        (graph.output[0].type.tensor_type.elem_type, tuple(shape)), limits)
    return [("MD428", "", problem)] if problem else []


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
        except (RuntimeError, ValueError) as exc:  # a runner's failures (Runner.embedded)
            raise InvalidFileError("MD428", f"the function of {name!r} failed to run: {exc}", name) from None
        return out

    return UpdateType(
        name=name, version=definition["version"], carries_sha256=definition["exact"], needs_base=True,
        datasets=tuple(inputs), schema=update_schema(name, definition["exact"], version=definition["version"], reads_base=True),
        check_meta=check_meta, check_layout=check_layout, check_data=no_problems,
        apply_numpy=None, apply_onnx=apply_onnx, onnx_models=no_models, preferred_engine="onnx",
    )


def function_dataset(dtype_name: str) -> str:
    return FUNCTION_PREFIX + dtype_name


def dtype_of_function_dataset(dataset: str) -> str | None:
    if dataset.startswith(FUNCTION_PREFIX) and dataset[len(FUNCTION_PREFIX):] in DTYPES:
        return dtype_named(dataset[len(FUNCTION_PREFIX):]).name
    return None
