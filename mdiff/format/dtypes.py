"""Parameter dtypes and their storage encodings (SPEC.md §6).

In memory a tensor is a numpy array; bfloat16 uses ``ml_dtypes.bfloat16``
(numpy has no native type for it). On disk every dtype has exactly one
HDF5 storage type that HDF5 1.10 and h5wasm both decode: float16 and
bfloat16 are stored as their raw bit patterns in ``uint16`` because h5wasm
cannot read HDF5 half floats and HDF5 has no portable bfloat16.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numpy.typing import DTypeLike


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    kind: str  # "bool", "int", "uint", "float"
    storage: np.dtype  # HDF5 storage dtype, little-endian
    _make_value: Callable[[], Any] = field(repr=False, compare=False)

    @property
    def value(self) -> np.dtype:
        """The in-memory numpy dtype (native little-endian); bfloat16's comes from ml_dtypes, imported
        on first use (it takes a second to import, and most commands never meet a bfloat16)."""
        cached = self.__dict__.get("_value")
        if cached is None:
            cached = np.dtype(self._make_value())
            object.__setattr__(self, "_value", cached)
        return cached

    @property
    def bits(self) -> np.dtype:
        """Unsigned integer dtype of the same width: the raw bit pattern (made once: apply asks it per parameter)."""
        cached = self.__dict__.get("_bits")
        if cached is None:
            cached = np.dtype(f"<u{self.itemsize}")
            object.__setattr__(self, "_bits", cached)
        return cached

    @property
    def is_float(self) -> bool:
        return self.kind == "float"


def _dt(name: str, kind: str, value: DTypeLike | Callable[[], Any], storage: str) -> DType:
    """``value``: the numpy dtype, or a function that makes it."""
    return DType(name, np.dtype(storage).itemsize, kind, np.dtype(storage), value if callable(value) and not isinstance(value, type) else (lambda: value))


def _bfloat16() -> type:
    import ml_dtypes

    return ml_dtypes.bfloat16


_ALL = [
    _dt("bool", "bool", np.bool_, "<u1"),
    _dt("int8", "int", "<i1", "<i1"),
    _dt("int16", "int", "<i2", "<i2"),
    _dt("int32", "int", "<i4", "<i4"),
    _dt("int64", "int", "<i8", "<i8"),
    _dt("uint8", "uint", "<u1", "<u1"),
    _dt("uint16", "uint", "<u2", "<u2"),
    _dt("uint32", "uint", "<u4", "<u4"),
    _dt("uint64", "uint", "<u8", "<u8"),
    _dt("float16", "float", "<f2", "<u2"),
    _dt("bfloat16", "float", _bfloat16, "<u2"),
    _dt("float32", "float", "<f4", "<f4"),
    _dt("float64", "float", "<f8", "<f8"),
]

DTYPES: dict[str, DType] = {d.name: d for d in _ALL}
# bfloat16 is found by name: an array of it means ml_dtypes is imported already
_BY_VALUE: dict[np.dtype, DType] = {d.value: d for d in _ALL if d.name != "bfloat16"}


def dtype_named(name: str) -> DType:
    """The DType called ``name``; KeyError if the spec has no such dtype."""
    return DTYPES[name]


def dtype_of(array: np.ndarray) -> DType:
    """The spec dtype of a numpy array (any byte order); KeyError if unsupported."""
    native = array.dtype.newbyteorder("=")
    found = _BY_VALUE.get(native)
    if found is None and native.name == "bfloat16" and native == DTYPES["bfloat16"].value:
        return DTYPES["bfloat16"]
    if found is None:
        raise KeyError(native)
    return found


def canonical(array: np.ndarray) -> np.ndarray:
    """``array`` as a C-contiguous, native-order array of its spec dtype."""
    dt = dtype_of(array)
    # not np.ascontiguousarray: it turns a 0-d array into a 1-d one
    return array.astype(dt.value, order="C", copy=False)


def as_bits(array: np.ndarray) -> np.ndarray:
    """Zero-copy view of a canonical array as unsigned integers of its width."""
    return array.view(dtype_of(array).bits)


def xor_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise XOR of two tensors' bit patterns (or of bit arrays); an array even for
    0-d inputs, where a ufunc would return a scalar."""
    return np.asarray(np.bitwise_xor(a.view(np.dtype(f"<u{a.itemsize}")), b.view(np.dtype(f"<u{b.itemsize}"))))


def from_bits(bits: np.ndarray, dt: DType) -> np.ndarray:
    return bits.view(dt.value)


def to_storage(array: np.ndarray, dt: DType) -> np.ndarray:
    """Values of dtype ``dt`` in their on-disk representation (zero-copy)."""
    if dt.storage == dt.value:
        return array
    return array.view(dt.storage)


def from_storage(stored: np.ndarray, dt: DType) -> np.ndarray:
    """Inverse of :func:`to_storage` (zero-copy)."""
    if dt.storage == dt.value:
        return stored
    return stored.view(dt.value)
