"""Update types a file embeds as ONNX functions (SPEC.md §7.8): run after checking, refused otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import mdiff
from tests import ia3
from tests.helpers import bits_equal, random_tensor


def _state():
    return {"w32": random_tensor("float32", (8, 6), 1), "wbf": random_tensor("bfloat16", (8, 6), 2),
            "w16": random_tensor("float16", (4, 3), 3), "untouched": np.arange(3, dtype=np.int64)}


def test_ia3_round_trips_in_every_dtype_it_defines(tmp_path):
    base = _state()
    scales = {"w32": np.linspace(0.5, 2, 8, dtype=np.float32).reshape(8, 1),  # one scale per row
              "wbf": np.linspace(0.5, 2, 6, dtype=np.float32).reshape(1, 6).astype(base["wbf"].dtype),  # per column
              "w16": np.full((1, 1), 3.0, dtype=np.float16)}
    path = tmp_path / "ia3.mdiff"
    ia3.write(path, base, scales)
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        assert diff["w32"].type == "x-ia3"
        for engine in ("onnx", "numpy", None):  # an embedded type runs on onnxruntime whatever is asked
            result = mdiff.apply(base, diff, engine=engine)
            for name, s in scales.items():
                assert bits_equal(result[name], ia3.expected(base[name], s)), name
            assert result["untouched"] is base["untouched"]


def test_the_wrong_base_fails_the_embedded_types_sha256(tmp_path):
    base = _state()
    path = tmp_path / "ia3.mdiff"
    ia3.write(path, base, {"w32": np.full((8, 1), 2.0, np.float32)})
    other = dict(base, w32=base["w32"] + 1)
    with mdiff.open(path) as diff, pytest.raises(mdiff.ApplyError) as info:
        mdiff.apply(other, diff)
    assert info.value.code == "MD602"


@pytest.mark.parametrize("code", sorted(ia3.HOSTILE))
def test_hostile_functions_are_refused_with_their_code(tmp_path, code):
    path = ia3.write_with_function(tmp_path / "hostile.mdiff", ia3.HOSTILE[code]())
    codes = [f.code for f in mdiff.validate(path) if f.is_error]
    assert codes[0] == code, codes
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(path)
    assert info.value.code == code


@pytest.mark.parametrize("scale_shape,code", [((3, 6), "MD428"), ((2, 8, 6), "MD427")])
def test_data_that_does_not_fit_the_function_is_refused(tmp_path, scale_shape, code):
    """(3, 6) does not broadcast against (8, 6); (2, 8, 6) is not of the declared rank 2."""
    path = ia3.write_with_function(tmp_path / "hostile.mdiff", ia3.function("float32"), scale_shape=scale_shape)
    assert [f.code for f in mdiff.validate(path) if f.is_error] == [code]


@pytest.mark.parametrize("definition", [{"version": 1, "inputs": ["base"], "exact": True}, {"inputs": ["s"], "exact": True}])
def test_malformed_definitions_are_refused(tmp_path, definition):
    path = ia3.write_with_function(tmp_path / "hostile.mdiff", ia3.function("float32"), definition=definition)
    assert [f.code for f in mdiff.validate(path) if f.is_error][0] == "MD420"


def test_the_writer_refuses_a_hostile_type(tmp_path):
    with mdiff.DiffWriter(tmp_path / "x.mdiff") as w, pytest.raises(ValueError, match="MD423"):
        w.add_update_type(ia3.NAME, ia3.DEFINITION, {"float32": ia3.HOSTILE["MD423"]()})
