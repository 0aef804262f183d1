"""SPEC.md §7.9: what the normative ONNX functions have in common.

Each update type states its math twice: in prose (SPEC.md §7) and as small
ONNX models (``schemas/onnx/``) that any ONNX runtime can execute. Models use
standard ``ai.onnx`` operators of one pinned opset, carry no metadata that
changes between releases, and serialise to the same bytes every time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # onnx is imported where a model is built or checked, not by every reader of a file
    import onnx

OPSET = 26  # BitCast (exact bit-pattern views) arrived in opset 26
IR_VERSION = 13  # helper.find_min_ir_version_for(opset 26); make_model checks it still is
PRODUCER = "mdiff-spec"  # not the package version: the bytes must not change with a release

# ONNX element types (onnx.TensorProto.DataType: fixed by the ONNX standard) of each dtype's values,
# and of its bit pattern.
VALUE_TYPES = {
    "bool": 9, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "uint8": 2, "uint16": 4, "uint32": 12, "uint64": 13,
    "float16": 10, "bfloat16": 16, "float32": 1, "float64": 11,
}
BITS_TYPES = {1: VALUE_TYPES["uint8"], 2: VALUE_TYPES["uint16"], 4: VALUE_TYPES["uint32"], 8: VALUE_TYPES["uint64"]}
BITS_NAMES = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}
INT64 = VALUE_TYPES["int64"]


def tensor(name: str, elem_type: int, shape: Sequence[int | str | None] | None = None) -> onnx.ValueInfoProto:
    """A graph input or output; ``shape`` None means any rank."""
    from onnx import helper

    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(name: str, doc: str, nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], initializers: Iterable[onnx.TensorProto] = ()) -> onnx.ModelProto:
    import onnx
    from onnx import helper

    assert IR_VERSION == helper.find_min_ir_version_for([helper.make_operatorsetid("", OPSET)])
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers), doc_string=doc)
    model = helper.make_model(
        graph, opset_imports=[helper.make_operatorsetid("", OPSET)], ir_version=IR_VERSION,
        producer_name=PRODUCER, producer_version="1.0",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def serialize(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def unzigzag_nodes(zigzag: str, output: str, elem_type: int) -> list:
    """Nodes making ``output`` = the wrapping difference a zigzag-coded tensor ``zigzag`` of unsigned
    ``elem_type`` means (§7.3 version 2): (z >> 1) XOR (0 − (z AND 1)), every operation modulo 2^w."""
    from onnx import TensorProto, helper

    if elem_type == TensorProto.UINT16:
        # onnxruntime before 1.32 has no 16-bit BitShift: shifted in 32 bits, then cast back (the half of a
        # 16-bit value fits in 15 bits, so the narrowing cast is exact)
        shift = [
            helper.make_node("Cast", [zigzag], [f"{output}_wide"], to=TensorProto.UINT32),
            helper.make_node("Constant", [], [f"{output}_one_wide"],
                             value=helper.make_tensor(f"{output}_one_wide", TensorProto.UINT32, [], [1])),
            helper.make_node("BitShift", [f"{output}_wide", f"{output}_one_wide"], [f"{output}_half_wide"],
                             direction="RIGHT"),
            helper.make_node("Cast", [f"{output}_half_wide"], [f"{output}_half"], to=TensorProto.UINT16),
        ]
    else:
        shift = [helper.make_node("BitShift", [zigzag, f"{output}_one"], [f"{output}_half"], direction="RIGHT")]
    return [
        helper.make_node("Constant", [], [f"{output}_one"], value=helper.make_tensor(f"{output}_one", elem_type, [], [1])),
        helper.make_node("Constant", [], [f"{output}_zero"], value=helper.make_tensor(f"{output}_zero", elem_type, [], [0])),
        *shift,
        helper.make_node("BitwiseAnd", [zigzag, f"{output}_one"], [f"{output}_sign"]),
        helper.make_node("Sub", [f"{output}_zero", f"{output}_sign"], [f"{output}_mask"]),
        helper.make_node("BitwiseXor", [f"{output}_half", f"{output}_mask"], [output]),
    ]
