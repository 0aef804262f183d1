"""SPEC.md §8.3's limits on shapes: a dimension of 0 counts as 1 (fuzzing: zero-size-huge-dimension)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.hdf5walk.attributes import write_string
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits, extent, shape_problem
from mdiff.updates.base import empty_array, read_array
from tests import invalid_files as inv

EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize("shape,expected", [((), 1), ((0,), 1), ((2, 4), 8), ((0, 8), 8), ((0, 2**62), 2**62), ((3, 0, 5), 15)])
def test_extent_counts_a_zero_as_one(shape, expected):
    assert extent(shape) == expected


def test_shape_problem_codes():
    assert shape_problem((2, 4), 4, DEFAULT_LIMITS) is None
    assert shape_problem((0,) * 33, 4, DEFAULT_LIMITS)[0] == "MD507"
    assert shape_problem((0, 2**62), 4, DEFAULT_LIMITS)[0] == "MD508"
    assert shape_problem((0, 2**36), 1, DEFAULT_LIMITS) is None  # exactly the element limit
    assert shape_problem((0, 2**36 + 1), 1, DEFAULT_LIMITS)[0] == "MD508"
    assert shape_problem((0, 2**36), 8, DEFAULT_LIMITS)[0] == "MD508"  # 2**39 bytes > 2**38
    assert shape_problem([2**70], 4, DEFAULT_LIMITS)[0] == "MD508"


def _empty_replace(path, shape) -> None:
    """A replace of `w` whose value is an empty dataset of ``shape``."""
    inv._write(path, {"w": mdiff.replace(inv.W_NEW)})
    with h5py.File(path, "r+") as f:
        group = f["parameters/w"]
        del group["value"]
        group.create_dataset("value", shape=shape, dtype="<f4", track_times=False)
        write_string(group, "update", json.dumps({"type": "replace", "version": 1, "shape": list(shape),
                                                  "dtype": "float32", "sha256": EMPTY_SHA}))


def test_an_empty_dataset_at_the_limit_is_valid_and_one_more_is_MD508(tmp_path):
    at, over = tmp_path / "at.mdiff", tmp_path / "over.mdiff"
    _empty_replace(at, (0, 8))
    _empty_replace(over, (0, 9))
    limits = Limits(max_elements=8)
    assert mdiff.validate(at, limits=limits) == []
    with mdiff.open(at, limits) as diff:
        assert mdiff.apply({}, diff)["w"].shape == (0, 8)
    # the dataset and the shape the update declares (§8.3; §12.1: one code, reported for each)
    assert {f.code for f in mdiff.validate(over, limits=limits)} == {"MD508"}
    with pytest.raises(mdiff.LimitError) as info:
        mdiff.open(over, limits, lazy=False)
    assert info.value.code == "MD508"
    with mdiff.open(over, limits) as diff, pytest.raises(mdiff.LimitError) as info:
        diff["w"]  # a lazy reader: when the parameter is used
    assert info.value.code == "MD508"


def test_the_fuzzers_empty_dataset_is_refused_by_the_structure_walk(tmp_path):
    path = tmp_path / "zero.mdiff"
    inv.build_MD508_empty_dataset_with_huge_dimension(path)
    assert {f.code for f in mdiff.validate(path)} == {"MD508"}  # the dataset's and the declared shape's


def test_arrays_of_file_declared_shapes_never_raise_numpys_ValueError(tmp_path):
    """Limits configured past what numpy can address let [0, 2**62] through the walk; reading it
    is then MD508, not ValueError ('array is too big')."""
    path = tmp_path / "zero.mdiff"
    inv.build_MD508_empty_dataset_with_huge_dimension(path)
    lax = Limits(max_elements=2**63, max_dataset_bytes=2**66)
    with mdiff.open(path, lax) as diff:
        with pytest.raises(mdiff.LimitError) as info:
            diff["w"].array("value")
        assert info.value.code == "MD508"
        with pytest.raises(mdiff.LimitError):
            mdiff.apply({}, diff)
    assert "MD508" in [f.code for f in mdiff.validate(path, limits=lax)]


@pytest.mark.parametrize("shape", [(0, 2**62), (2**64,), (0, 2**63)])
def test_empty_array_is_typed(shape):
    with pytest.raises(mdiff.LimitError) as info:
        empty_array(shape, np.float32, "/x")
    assert info.value.code == "MD508" and info.value.path == "/x"
    assert read_array(np.zeros(3), np.float64).shape == (3,)  # in-memory arrays pass through


# A writer never writes a file its readers refuse (§8.3): what breaks a limit is refused before the
# file exists, with the code a reader would give (issue 14.12).


def test_the_writer_takes_metadata_at_the_attribute_limit_and_refuses_one_byte_more(tmp_path):
    overhead = len(mdiff.Commit("", date="2026-01-01T00:00:00Z").to_attribute().encode())
    at = mdiff.Commit("x" * (DEFAULT_LIMITS.max_attribute_bytes - overhead), date="2026-01-01T00:00:00Z")
    mdiff.write(tmp_path / "at.mdiff", {}, at)
    with mdiff.open(tmp_path / "at.mdiff") as diff:
        assert len(diff.commit.to_attribute().encode()) == DEFAULT_LIMITS.max_attribute_bytes
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.write(tmp_path / "past.mdiff", {}, mdiff.Commit(at.message + "x", date="2026-01-01T00:00:00Z"))
    assert info.value.code == "MD510"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["at.mdiff"]


@pytest.mark.parametrize("shape,code", [((0, 2**36 + 1), "MD508"), ((1,) * 33, "MD507")])
def test_the_writer_refuses_a_shape_past_the_limits_and_writes_nothing(tmp_path, shape, code):
    mdiff.write(tmp_path / "at.mdiff", {"z": mdiff.replace(np.zeros((0, 2**36), np.uint8))})
    with mdiff.open(tmp_path / "at.mdiff") as diff:
        assert diff["z"].shape == (0, 2**36)
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.write(tmp_path / "past.mdiff", {"z": mdiff.replace(np.zeros(shape, np.uint8))})
    assert info.value.code == code
    assert sorted(p.name for p in tmp_path.iterdir()) == ["at.mdiff"]
