"""The engines mdiff ships (SPEC.md §7.9): ``numpy``, ``onnx``, and ``auto``, which picks one of them per type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # the command line names the engines at start-up, before numpy is needed
    import numpy as np

    from mdiff.updates.base import Engine, Update, UpdateType


class OnnxEngine:
    """The normative ONNX models on onnxruntime (imported on first use: it is slow to import)."""

    name = "onnx"

    def run(self, kind: UpdateType, update: Update, base: np.ndarray | None, scratch: bool) -> np.ndarray | None:
        from mdiff.engines.onnxruntime_engine import shared_runner

        return kind.apply_onnx(update, base, shared_runner(), scratch)


class NumpyEngine:
    """Each type's hand-written numpy twin, which the tests prove equal to its ONNX models — bit for bit on
    the exact types, within §7.5's tolerance on low_rank. A type without a twin (an embedded one, §7.8)
    runs on ONNX."""

    name = "numpy"

    def run(self, kind: UpdateType, update: Update, base: np.ndarray | None, scratch: bool) -> np.ndarray | None:
        if kind.apply_numpy is None:
            return ONNX.run(kind, update, base, scratch)
        from mdiff.updates.base import NUMPY_TWINS

        return NUMPY_TWINS.run(kind, update, base, scratch)


class AutoEngine:
    """Each type's preferred engine (``UpdateType.preferred_engine``): the faster one, both proven equal."""

    name = "auto"

    def __init__(self, engine_named: Callable[[str], Engine]):
        self._engine_named = engine_named

    def run(self, kind: UpdateType, update: Update, base: np.ndarray | None, scratch: bool) -> np.ndarray | None:
        return self._engine_named(kind.preferred_engine).run(kind, update, base, scratch)


ONNX = OnnxEngine()
NUMPY = NumpyEngine()
