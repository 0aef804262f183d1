"""The two ways of carrying out an update's math (SPEC.md §7.9).

``onnx`` runs the normative ONNX models on onnxruntime; ``numpy`` is a
hand-written twin that the tests prove equal — bit for bit on the exact
types, within §7.5's tolerance on low_rank — on every dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ENGINES = ("auto", "onnx", "numpy")
DEFAULT_ENGINE = "auto"  # each update type's preferred engine: the faster one, both proven equal


def run_update(kind, update, base: np.ndarray | None, engine: str | None, scratch: bool):
    engine = engine or DEFAULT_ENGINE
    if engine == "auto":
        engine = kind.preferred_engine
    if engine == "numpy":
        return kind.apply_numpy(update, base, scratch)
    if engine == "onnx":
        from mdiff.engines.onnxruntime_engine import shared_runner

        return kind.apply_onnx(update, base, shared_runner(), scratch)
    raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
