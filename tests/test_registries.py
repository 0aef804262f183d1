"""Third parties add update types and engines through the registries alone (mdiff.updates, mdiff.engines):
by a call, or by an entry point of an installed distribution."""

from __future__ import annotations

import sys
import textwrap
from typing import Iterator

import numpy as np
import pytest

import mdiff
from mdiff.engines import REGISTERED, apply_update, engine_named, register_engine
from mdiff.errors import InvalidFileError
from mdiff.updates import REGISTRY, VERSIONS, get_type, register_type
from mdiff.updates.base import SPEC_TYPE_NAMES, TYPES, Update, UpdateType, no_models, no_problems, update_schema


def _scale_numpy(update: Update, base: np.ndarray, scratch: bool) -> np.ndarray:
    return base * update.array("factor")


# A type of this module's own: the base multiplied by a stored factor, element by element (inexact).
SCALE = UpdateType(
    name="scale", version=1, carries_sha256=False, needs_base=True, datasets=("factor",),
    schema=update_schema("scale", carries_sha256=False, properties={}), check_meta=no_problems,
    check_layout=no_problems, check_data=no_problems, apply_numpy=_scale_numpy,
    apply_onnx=lambda update, base, run, scratch: _scale_numpy(update, base, scratch), onnx_models=no_models,
    preferred_engine="numpy",
)


def _scale(factor: list[float]) -> Update:
    return Update({"type": "scale", "version": 1, "shape": [len(factor)], "dtype": "float32"},
                  {"factor": np.array(factor, np.float32)})


class Tracing:
    """An engine of this module's own: each type's numpy twin, recording what it ran."""

    def __init__(self, name: str):
        self.name = name
        self.ran: list[tuple[str, int]] = []

    def run(self, kind, update, base, scratch):
        self.ran.append((kind.name, kind.version))
        return kind.apply_numpy(update, base, scratch)


@pytest.fixture
def scale_type() -> Iterator[UpdateType]:
    register_type(SCALE)
    yield SCALE
    TYPES.unregister(("scale", 1))


@pytest.fixture
def mine() -> Iterator[Tracing]:
    engine = register_engine(Tracing("mine"))
    yield engine
    REGISTERED.unregister("mine")


def test_a_registered_engine_is_selected_by_name(mine):
    base = {"w": np.array([1.0, 2.0, 3.0], np.float32), "b": np.array([7], np.int8)}
    new = {"w": np.array([1.0, 2.5, 3.0], np.float32), "b": np.array([7], np.int8)}
    result = mdiff.apply(base, mdiff.diff(base, new), engine="mine")
    assert result["w"].tolist() == [1.0, 2.5, 3.0] and result["b"].tolist() == [7]
    assert mine.ran == [("dense", 2)]  # the diff of a 3-element tensor: a version-2 dense update
    assert engine_named("mine") is mine
    assert list(REGISTERED) == ["auto", "onnx", "numpy", "mine"]


def test_a_registered_type_applies_in_process(scale_type, mine):
    base = {"w": np.array([1.0, -2.0, 0.5], np.float32)}
    assert get_type("scale") is scale_type
    assert mdiff.apply(base, {"w": _scale([2.0, 3.0, -4.0])})["w"].tolist() == [2.0, -6.0, -2.0]  # auto: its numpy
    assert mdiff.apply(base, {"w": _scale([1.0, 1.0, 2.0])}, engine="mine")["w"].tolist() == [1.0, -2.0, 1.0]
    assert mine.ran == [("scale", 1)]
    assert apply_update(_scale([0.5, 0.5, 0.5]), base["w"], "w", engine="onnx").tolist() == [0.5, -1.0, 0.25]


def test_a_registered_type_never_enters_a_file(scale_type, tmp_path):
    """SPEC.md §7.1: a file names the specification's types and its own (§7.8) only; readers refuse others."""
    assert "scale" not in REGISTRY and ("scale", 1) not in VERSIONS
    with pytest.raises(InvalidFileError) as refused:
        mdiff.write(tmp_path / "d.mdiff", {"w": _scale([2.0, 3.0, -4.0])})
    assert refused.value.code == "MD402"


def test_the_base_is_checked_before_a_registered_engine_runs(mine):
    update = mdiff.dense(np.zeros(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(mdiff.ApplyError) as failed:
        apply_update(update, np.zeros(4, np.float32), "w", engine="mine")
    assert failed.value.code == "MD601" and mine.ran == []


def test_names_of_the_specification_are_refused():
    assert SPEC_TYPE_NAMES == set(REGISTRY)
    for name in ("dense", "x-mine"):
        with pytest.raises(ValueError, match=f"update type name '{name}' is reserved"):
            register_type(UpdateType(**{**SCALE.__dict__, "name": name}))
    with pytest.raises(ValueError, match="engine 'numpy' is registered already"):
        register_engine(Tracing("numpy"))
    with pytest.raises(ValueError, match=r"engine must be one of \('auto', 'onnx', 'numpy'\), not 'nope'"):
        engine_named("nope")


def test_engines_and_types_from_entry_points(tmp_path, monkeypatch):
    """A distribution on sys.path that declares an engine and a type in the entry-point groups: both are
    found the first time a name is missing, without any call to register them."""
    (tmp_path / "mdiff_registry_plugin.py").write_text(textwrap.dedent("""
        from tests.test_registries import SCALE, Tracing

        ENGINE = Tracing("from-plugin")
        TYPE = SCALE
    """))
    info = tmp_path / "mdiff_registry_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mdiff-registry-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[mdiff.engines]\nfrom-plugin = mdiff_registry_plugin:ENGINE\n\n"
        "[mdiff.update_types]\nscale = mdiff_registry_plugin:TYPE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(REGISTERED, "entry_points_loaded", False)
    monkeypatch.setattr(TYPES, "entry_points_loaded", False)
    try:
        base = {"w": np.array([1.0, -2.0, 0.5], np.float32)}
        result = mdiff.apply(base, {"w": _scale([4.0, 0.5, 2.0])}, engine="from-plugin")
        assert result["w"].tolist() == [4.0, -1.0, 1.0]
        assert engine_named("from-plugin").ran == [("scale", 1)]  # type: ignore[attr-defined]
        assert sys.modules["mdiff_registry_plugin"].TYPE is get_type("scale")
    finally:
        for registry, key in ((REGISTERED, "from-plugin"), (TYPES, ("scale", 1))):
            if key in registry:
                registry.unregister(key)  # type: ignore[arg-type]
        sys.modules.pop("mdiff_registry_plugin", None)
