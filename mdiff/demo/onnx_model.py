"""The MLP as an ONNX model, built with onnx.helper, and run on onnxruntime.

The graph is ``Gemm(x, fc1.weight, fc1.bias, transB=1) → Relu → Gemm(…, fc2.weight, fc2.bias, transB=1)``;
its initializers carry the state dict's names, so an .mdiff commit of the PyTorch model applies to
the ONNX file as it is (``mdiff.apply_files(base.onnx, commit.mdiff, out.onnx)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def build(state: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    hidden = state["fc1.weight"].shape[0]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
    ]
    initializers = [numpy_helper.from_array(np.ascontiguousarray(state[name]), name)
                    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")]
    graph = helper.make_graph(
        nodes, f"mlp_64_{hidden}_10",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="mdiff-demo", producer_version="1")
    onnx.checker.check_model(model, full_check=True)
    return model


def save(state: Mapping[str, np.ndarray], path: Path) -> None:
    Path(path).write_bytes(build(state).SerializeToString(deterministic=True))


def initializers(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def run(path: Path, x: np.ndarray) -> np.ndarray:
    """The model's logits for ``x`` on onnxruntime's CPU provider (one thread)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"x": np.ascontiguousarray(x, dtype=np.float32)})[0]
