"""SPEC.md §8.3's limits on shapes: a dimension of 0 counts as 1 (fuzzing: zero-size-huge-dimension)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.format.dtypes import dtype_named
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


# The limits of the whole file (§8.3): the writer counts the objects and attributes it creates as a reader counts
# them (MD511), and the declared bytes of its datasets (MD512), and refuses the parameter that would go past a
# limit, leaving no file (issue 31). The arithmetic is checked at lowered limits: 333,331 parameters of the default
# would take minutes to write.

def _kinds_of_objects(writer: mdiff.DiffWriter) -> None:
    """Parameters of every update type mdiff writes (one to three datasets each), a file and the layout."""
    old = np.arange(12, dtype=np.float32).reshape(3, 4)
    writer.add("a.dense", mdiff.dense(old, old + 1))
    writer.add("b.sparse", mdiff.sparse(old, old + np.eye(3, 4, dtype=np.float32)))
    writer.add("c.low_rank", mdiff.low_rank(np.ones((3, 1), np.float32), np.ones((1, 4), np.float32), (3, 4), dtype_named("float32")))
    writer.add("d.replace", mdiff.replace(np.zeros((0, 2), np.float32)))  # an empty dataset declares 0 bytes
    writer.add("e.delete", mdiff.delete(old))
    writer.add_file("config.json", mdiff.replace(np.frombuffer(b"{}\n", np.uint8)))
    writer.set_layout(mdiff.replace(np.frombuffer(json.dumps(inv.LAYOUT).encode(), np.uint8)))


def _write_kinds(path, limits: Limits, check: bool = True) -> mdiff.DiffWriter:
    commit = mdiff.Commit("kinds", date="2026-01-01T00:00:00Z")
    extensions = [{"name": "x-count", "must_understand": False}]
    with mdiff.DiffWriter(path, commit, extensions=extensions, check_updates=check, limits=limits) as writer:
        _kinds_of_objects(writer)
    return writer


def _errors(path, limits: Limits) -> list[str]:
    return [f.code for f in mdiff.validate(path, limits=limits) if f.is_error]


def test_the_writer_counts_objects_and_bytes_as_the_reader_does(tmp_path):
    written = _write_kinds(tmp_path / "kinds.mdiff", DEFAULT_LIMITS)
    objects, declared = written._objects, written._declared
    # the root, its 4 attributes and /parameters (6); 5 groups and their `update` (10); datasets: dense 1, sparse 2,
    # low_rank 2, replace 1, delete 0 (6); /files, its member, `update`, `value` (4); /layout, `update`, `value` (3)
    assert (objects, declared) == (29, 48 + (24 + 12) + (12 + 16) + 0 + 3 + len(json.dumps(inv.LAYOUT)))
    at = Limits(max_objects=objects, max_total_bytes=declared)
    assert _errors(tmp_path / "kinds.mdiff", at) == []
    assert _errors(tmp_path / "kinds.mdiff", Limits(max_objects=objects - 1)) == ["MD511"]
    assert _errors(tmp_path / "kinds.mdiff", Limits(max_total_bytes=declared - 1)) == ["MD512"]
    _write_kinds(tmp_path / "at.mdiff", at)  # exactly at both limits: written
    for past, code in ((Limits(max_objects=objects - 1), "MD511"), (Limits(max_total_bytes=declared - 1), "MD512")):
        with pytest.raises(mdiff.LimitError) as info:
            _write_kinds(tmp_path / "past.mdiff", past)
        assert info.value.code == code and info.value.path == "layout"  # the last thing written goes past
        assert info.value.hint.startswith("write the change as several") or "at most 333,331 such parameters" in info.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["at.mdiff", "kinds.mdiff"]


@pytest.mark.parametrize("limit", [100, 101, 102])
def test_the_writer_refuses_the_parameter_past_the_object_limit_where_the_reader_would(tmp_path, limit):
    """5 objects and attributes for the file (the root, `format`, `format_version`, `commit`, /parameters), 3 for
    each parameter of one dataset: a limit of L holds (L - 5) // 3 of them, as under the default 333,331."""
    most = (limit - 5) // 3
    limits = Limits(max_objects=limit)
    commit = mdiff.Commit("many", date="2026-01-01T00:00:00Z")
    updates = {f"p{i:03d}": mdiff.replace(np.full(2, i, np.float32)) for i in range(most + 1)}
    with pytest.raises(mdiff.LimitError) as info:
        with mdiff.DiffWriter(tmp_path / "past.mdiff", commit, limits=limits) as writer:
            for name in sorted(updates):
                writer.add(name, updates[name])
    assert (info.value.code, info.value.path) == ("MD511", f"p{most:03d}")
    assert not list(tmp_path.iterdir())
    mdiff.write(tmp_path / "unchecked.mdiff", updates, commit, check_updates=False)  # what it would have written
    assert _errors(tmp_path / "unchecked.mdiff", limits) == ["MD511"]
    del updates[f"p{most:03d}"]
    with mdiff.DiffWriter(tmp_path / "at.mdiff", commit, limits=limits) as writer:
        for name in sorted(updates):
            writer.add(name, updates[name])
    assert _errors(tmp_path / "at.mdiff", limits) == []
    assert (DEFAULT_LIMITS.max_objects - 5) // 3 == 333_331


def test_the_writer_refuses_objects_deeper_than_the_depth_limit(tmp_path):
    with pytest.raises(mdiff.LimitError) as info:
        with mdiff.DiffWriter(tmp_path / "deep.mdiff", limits=Limits(max_depth=2)) as writer:
            writer.add("w", mdiff.replace(np.zeros(2, np.float32)))
    assert (info.value.code, info.value.path) == ("MD511", "w")
    mdiff.write(tmp_path / "unchecked.mdiff", {"w": mdiff.replace(np.zeros(2, np.float32))}, check_updates=False)
    assert _errors(tmp_path / "unchecked.mdiff", Limits(max_depth=2)) == ["MD511"]
    assert _errors(tmp_path / "unchecked.mdiff", Limits(max_depth=3)) == []
    assert not (tmp_path / "deep.mdiff").exists()


def _nested(levels: int) -> list:
    """An empty array inside ``levels`` arrays."""
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("extension,problem", [
    ({"name": "x-deep", "must_understand": False, "v": _nested(511)}, "nested more than 512 levels"),
    ({"name": "x-long", "must_understand": False, "v": 10**4096}, "a number of more than 4096 characters"),
    ({"name": "x-no-flag"}, "array of {name, must_understand}"),
])
def test_the_writer_refuses_extensions_its_readers_refuse(tmp_path, extension, problem):
    """§3.4, §4.1: JSON that json.dumps writes and a reader refuses (MD105), checked before the file exists. The
    extensions are an array of objects: a value of a member lies inside 2 arrays and objects, and of its elements 3."""
    mdiff.DiffWriter(tmp_path / "unchecked.mdiff", extensions=[extension], check_updates=False).close()
    found = [(f.code, f.message) for f in mdiff.validate(tmp_path / "unchecked.mdiff") if f.is_error]
    assert [code for code, _ in found] == ["MD105"] and problem in found[0][1]
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.DiffWriter(tmp_path / "checked.mdiff", extensions=[extension])
    assert info.value.code == "MD105" and problem in info.value.message
    assert not (tmp_path / "checked.mdiff").exists()
    within = {"name": "x-ok", "must_understand": False, "v": [_nested(509), 10**4095]}  # the most readers take
    mdiff.DiffWriter(tmp_path / "within.mdiff", extensions=[within]).close()
    assert _errors(tmp_path / "within.mdiff", DEFAULT_LIMITS) == []
