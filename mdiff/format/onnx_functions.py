"""SPEC.md §7.9: what the normative ONNX functions have in common.

Each update type states its math twice: in prose (SPEC.md §7) and as small
ONNX models (``schemas/onnx/``) that any ONNX runtime can execute. Models use
standard ``ai.onnx`` operators of one pinned opset, carry no metadata that
changes between releases, and serialise to the same bytes every time.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

OPSET = 26  # BitCast (exact bit-pattern views) arrived in opset 26
IR_VERSION = helper.find_min_ir_version_for([helper.make_operatorsetid("", OPSET)])
PRODUCER = "mdiff-spec"  # not the package version: the bytes must not change with a release

# ONNX element type of each dtype's values, and of its bit pattern.
VALUE_TYPES = {
    "bool": TensorProto.BOOL, "int8": TensorProto.INT8, "int16": TensorProto.INT16, "int32": TensorProto.INT32,
    "int64": TensorProto.INT64, "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64, "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
}
BITS_TYPES = {1: TensorProto.UINT8, 2: TensorProto.UINT16, 4: TensorProto.UINT32, 8: TensorProto.UINT64}
BITS_NAMES = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}


def tensor(name: str, elem_type: int, shape=None) -> onnx.ValueInfoProto:
    """A graph input or output; ``shape`` None means any rank."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(name: str, doc: str, nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers), doc_string=doc)
    model = helper.make_model(
        graph, opset_imports=[helper.make_operatorsetid("", OPSET)], ir_version=IR_VERSION,
        producer_name=PRODUCER, producer_version="1.0",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def serialize(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)
