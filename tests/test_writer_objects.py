"""The writer makes its groups, small datasets and string attributes by h5py's low-level calls with property lists
made once (format/writer.py, hdf5walk/attributes.py): the bytes of the file must be those h5py's high-level calls
give (§11: a writer's bytes are a function of what it writes), for every kind of name, dtype and shape."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from mdiff.format import writer
from mdiff.format.constants import LIBVER
from mdiff.format.dtypes import dtype_named
from mdiff.hdf5walk import attributes

NAMES = ["w", "model.layers.0.mlp.experts.17.w", "%2Ehidden", "emb%2Fédition", "层.权重", "a" * 300]
ARRAYS = [
    np.arange(4, dtype=np.float32),
    np.array(3.5, dtype=np.float64),  # a scalar
    np.zeros((0,), np.int64),
    np.arange(12, dtype=np.uint8).reshape(3, 4),
    np.array([True, False, True]),
    np.arange(6, dtype=np.float16).reshape(2, 3),
    np.arange(5, dtype=np.int8),
    np.arange(5).astype(dtype_named("bfloat16").value),  # ml_dtypes: a numpy dtype h5py knows by its kind
    np.array([b"ab", b"c"]),  # not a numeric dtype: h5py's own path
]
TEXTS = ["", "x", '{"type":"dense","version":1}', "é" * 40, "\u4e2d" * 500]


def _write(path, high_level: bool) -> bytes:
    with h5py.File(path, "w", libver=LIBVER) as f:
        parameters = f.create_group("parameters", track_order=False)
        for i, name in enumerate(NAMES):
            if high_level:
                group = parameters.create_group(name, track_order=False)
            else:
                group = writer._new_group(parameters, name)
            for j, text in enumerate(TEXTS):
                if high_level:
                    data = text.encode("utf-8")
                    group.attrs.create(f"t{j}", np.array(data, dtype=h5py.string_dtype("utf-8", max(len(data), 1))))
                else:
                    attributes.write_string(group, f"t{j}", text)
            for j, array in enumerate(ARRAYS):
                key = f"d{(i + j) % len(ARRAYS)}"
                if high_level:
                    group.create_dataset(key, data=array, track_times=False)
                else:
                    writer._new_dataset(group, key, array)
    return path.read_bytes()


def test_the_low_level_calls_write_the_bytes_h5py_writes(tmp_path):
    assert _write(tmp_path / "low.h5", False) == _write(tmp_path / "high.h5", True)


def test_a_string_attribute_written_again_is_replaced(tmp_path):
    with h5py.File(tmp_path / "f.h5", "w", libver=LIBVER) as f:
        attributes.write_string(f, "a", "first, and longer")
        attributes.write_string(f, "a", "second")
        assert bytes(f.attrs["a"]).decode() == "second" and list(f.attrs) == ["a"]


@pytest.mark.parametrize("name", ["a/b", "/x/y/z"])
def test_a_name_with_a_slash_makes_its_groups_as_h5py_does(tmp_path, name):
    with h5py.File(tmp_path / "f.h5", "w", libver=LIBVER) as f:
        group = writer._new_group(f, name)
        assert group.name == "/" + name.lstrip("/")
