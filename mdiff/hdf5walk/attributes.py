"""SPEC.md §8.2: attributes are scalar, fixed-length UTF-8 strings.

Fixed length (not variable-length) so that a reader learns an attribute's
size from its datatype before it reads a byte, and can refuse it first.
"""

from __future__ import annotations

import functools

import h5py
import numpy as np


def string_attribute_size(attr_id: h5py.h5a.AttrID, tid: h5py.h5t.TypeID | None = None) -> int | None:
    """Bytes of a well-formed string attribute, or None if its type or shape is not allowed.
    ``tid``: its datatype, when the caller has it already."""
    tid = tid if tid is not None else attr_id.get_type()
    if tid.get_class() != h5py.h5t.STRING or tid.is_variable_str():
        return None
    if tid.get_cset() not in (h5py.h5t.CSET_UTF8, h5py.h5t.CSET_ASCII):
        return None
    if attr_id.get_space().get_simple_extent_type() != h5py.h5s.SCALAR:
        return None
    return tid.get_size()


@functools.lru_cache(maxsize=256)
def _string_dtype(size: int) -> np.dtype:
    return np.dtype(f"S{size}")


def read_string(attr_id: h5py.h5a.AttrID, size: int, tid: h5py.h5t.TypeID | None = None) -> str | None:
    """The attribute's text (trailing NULs dropped), or None if it is not UTF-8."""
    buf = np.zeros((), dtype=_string_dtype(max(size, 1)))
    attr_id.read(buf, mtype=tid if tid is not None else attr_id.get_type())
    try:
        return bytes(buf[()]).rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        return None


@functools.lru_cache(maxsize=256)
def _string_type(size: int) -> h5py.h5t.TypeID:
    """The datatype h5py's ``attrs.create`` gives a fixed-length UTF-8 string of ``size`` bytes."""
    return h5py.h5t.py_create(h5py.string_dtype("utf-8", size), logical=True)


@functools.lru_cache(maxsize=1)
def _scalar_space() -> h5py.h5s.SpaceID:
    return h5py.h5s.create(h5py.h5s.SCALAR)


def write_string(obj: h5py.Group | h5py.Dataset | h5py.File, name: str, text: str) -> None:
    """A scalar fixed-length UTF-8 string attribute ``name`` of ``obj`` (replacing one of that name): the calls
    h5py's ``obj.attrs.create(name, np.array(data, dtype=string_dtype("utf-8", len)))`` makes of libhdf5 — the
    same datatype, dataspace and data, so the same bytes in the file (§11) — without its Python around them,
    which cost a writer of 10^5 parameters about 5 s."""
    data = text.encode("utf-8")
    size = max(len(data), 1)
    tid = _string_type(size)
    raw = name.encode("utf-8")
    if h5py.h5a.exists(obj.id, raw):
        h5py.h5a.delete(obj.id, raw)
    attr = h5py.h5a.create(obj.id, raw, tid, _scalar_space())
    try:
        attr.write(np.array(data, dtype=_string_dtype(size)), mtype=tid)
    except BaseException:
        attr.close()
        h5py.h5a.delete(obj.id, raw)
        raise
    attr.close()


def overwrite_string(obj: h5py.Group, name: str, text: str) -> None:
    """Write a new value of the same byte length into an existing string attribute, in place."""
    attr_id = obj.attrs.get_id(name)
    data = text.encode("utf-8")
    if attr_id.get_type().get_size() != len(data):
        raise ValueError(f"attribute {name!r} holds {attr_id.get_type().get_size()} bytes, not {len(data)}")
    attr_id.write(np.array(data, dtype=f"S{len(data)}"), mtype=attr_id.get_type())
