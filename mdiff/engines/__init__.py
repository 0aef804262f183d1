"""The engines that carry out an update's math (SPEC.md §7.9), by name, and applying an update through one.

``onnx`` runs the normative ONNX models on onnxruntime; ``numpy`` is a
hand-written twin that the tests prove equal — bit for bit on the exact
types, within §7.5's tolerance on low_rank — on every dtype; ``auto`` is each
type's preferred one. A third party adds an engine (an ``mdiff.updates.base.Engine``:
a ``name`` and ``run(kind, update, base, scratch)``) with :func:`register_engine`, or by naming it
in the entry-point group ``mdiff.engines`` (loaded the first time a name is not found); it is then
selected by its name wherever an engine is (``mdiff.apply(…, engine=name)``, :func:`apply_update`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mdiff.engines.builtin import NUMPY, ONNX, AutoEngine
from mdiff.plugins import Registry

if TYPE_CHECKING:  # the command line names the engines at start-up, before numpy is needed
    import numpy as np

    from mdiff.updates.base import Engine, Update

ENGINES = ("auto", "onnx", "numpy")  # those mdiff ships (the command line's choices)
DEFAULT_ENGINE = "auto"  # each update type's preferred engine: the faster one, both proven equal

REGISTERED: Registry[str, Engine] = Registry("mdiff.engines", lambda engine: engine.name, "engine")


def engine_named(name: str | None) -> Engine:
    """The engine of that name (None: the default); ValueError for a name no engine has."""
    engine = REGISTERED.get(name or DEFAULT_ENGINE)
    if engine is None:
        raise ValueError(f"engine must be one of {tuple(REGISTERED.keys())}, not {name!r}")
    return engine


def register_engine(engine: Engine) -> Engine:
    """Adds a third party's engine under its name; ValueError for a name taken already."""
    return REGISTERED.register(engine)


def apply_update(
    update: Update, base: np.ndarray | None, name: str = "", engine: str | Engine | None = None, scratch: bool = False,
    verify: bool = True, check_base_sha256: bool = True,
) -> np.ndarray | None:
    """:meth:`Update.apply <mdiff.updates.base.Update.apply>` through the engine named ``engine`` (None: the
    default), or through ``engine`` itself."""
    chosen = engine_named(engine) if engine is None or isinstance(engine, str) else engine
    return update.apply(base, name, chosen, scratch=scratch, verify=verify, check_base_sha256=check_base_sha256)


for _engine in (AutoEngine(engine_named), ONNX, NUMPY):
    REGISTERED.register(_engine)

__all__ = ["DEFAULT_ENGINE", "ENGINES", "REGISTERED", "apply_update", "engine_named", "register_engine"]
