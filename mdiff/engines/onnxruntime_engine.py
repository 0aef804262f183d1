"""Runs the normative ONNX models on onnxruntime, without copying inputs or outputs.

Sessions are built once per model and cached. Inputs are wrapped as OrtValues
over the numpy buffers; the output is bound onto a buffer the caller chose —
the base's own, when the caller allows it.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Mapping

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from mdiff.format.onnx_functions import serialize

# onnxruntime's own exception classes derive from Exception alone, not from RuntimeError.
ONNXRUNTIME_ERRORS: tuple[type[Exception], ...] = tuple(
    getattr(ort.capi.onnxruntime_pybind11_state, n) for n in (
        "Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException", "InvalidProtobuf",
        "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail")
    if hasattr(ort.capi.onnxruntime_pybind11_state, n)
)

# Declared 2-byte float types, which may be fed uint16 bit patterns (and bfloat16 always is:
# numpy has no bfloat16 of its own, so onnxruntime cannot infer that type from an array).
_TWO_BYTE_FLOATS = {"tensor(bfloat16)": TensorProto.BFLOAT16, "tensor(float16)": TensorProto.FLOAT16}


def _normative_models() -> dict:
    from mdiff.updates import all_types

    return {name: model for kind in all_types() for name, model in kind.onnx_models().items()}


class OnnxRunner:
    def __init__(self, threads: int = 0):
        self._options = ort.SessionOptions()
        self._options.intra_op_num_threads = threads  # 0: onnxruntime's default, one per core
        self._models: dict | None = None
        self._sessions: dict[str, ort.InferenceSession] = {}
        self._lock = threading.Lock()

    def session(self, model: str) -> ort.InferenceSession:
        with self._lock:
            if model not in self._sessions:
                if self._models is None:
                    self._models = _normative_models()
                self._sessions[model] = self._new_session(serialize(self._models[model]))
            return self._sessions[model]

    def _new_session(self, model_bytes: bytes) -> ort.InferenceSession:
        return ort.InferenceSession(model_bytes, self._options, providers=["CPUExecutionProvider"])

    def __call__(self, model: str, inputs: Mapping[str, np.ndarray], output: np.ndarray) -> None:
        self._run(self.session(model), inputs, output)

    def embedded(self, model_bytes: bytes, inputs: Mapping[str, np.ndarray], output: np.ndarray) -> None:
        """Run a function a file embeds; the caller has checked it (mdiff.updates.embedded). onnxruntime's
        failures become RuntimeError, which the update type below this floor knows (Runner.embedded)."""
        key = "embedded:" + hashlib.sha256(model_bytes).hexdigest()
        try:
            with self._lock:
                if key not in self._sessions:
                    self._sessions[key] = self._new_session(model_bytes)
            self._run(self._sessions[key], inputs, output)
        except ONNXRUNTIME_ERRORS as exc:
            raise RuntimeError(str(exc)) from exc

    @staticmethod
    def _run(session: ort.InferenceSession, inputs: Mapping[str, np.ndarray], output: np.ndarray) -> None:
        binding = session.io_binding()
        for arg in session.get_inputs():
            binding.bind_ortvalue_input(arg.name, _ortvalue(inputs[arg.name], arg.type))
        out = session.get_outputs()[0]
        binding.bind_ortvalue_output(out.name, _ortvalue(output, out.type))
        session.run_with_iobinding(binding)


def _ortvalue(array: np.ndarray, declared: str) -> ort.OrtValue:
    if not array.flags.c_contiguous:
        raise ValueError("onnxruntime binds C-contiguous buffers only")
    onnx_type = _TWO_BYTE_FLOATS.get(declared)
    if onnx_type is not None and array.itemsize == 2:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), onnx_type)
    return ort.OrtValue.ortvalue_from_numpy(array)


_shared: OnnxRunner | None = None


def shared_runner() -> OnnxRunner:
    global _shared
    if _shared is None:
        _shared = OnnxRunner()
    return _shared
