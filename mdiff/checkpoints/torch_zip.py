"""PyTorch state dicts in torch's zip format (``torch.save`` since PyTorch 1.6), read without torch.

A ``torch.save`` file is a zip archive of stored (uncompressed) records under one folder:
``<folder>/data.pkl``, the pickled object, whose tensors name their storages by key, and one
record ``<folder>/data/<key>`` per storage holding its bytes. This module reads it as the
``.safetensors`` reader reads its format: the pickle is parsed on open, and :meth:`read` copies
one tensor's bytes from its record into a fresh array. PyTorch is not imported (it takes about
a second of CPU to import, most of the time a commit of a small ``.bin`` folder took).

Nothing is unpickled. ``data.pkl`` is read by the small pickle machine below, which knows the
opcodes ``pickle`` writes for containers, strings and numbers, and the handful of globals a state
dict names (``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and ``_v3``,
``_rebuild_parameter``, the storage classes and dtypes); each global is replaced by an inert
stand-in of this module, so a file runs no code of any module, torch's or its own. Any other
global is MD701 — "never unpickles" — and so is an opcode outside that set. Its dicts take
string keys only (a non-string key is MD701: it is no state dict, and hashing attacker-chosen
keys could be made slow). What torch's ``weights_only`` loader would also accept but a state
dict does not hold (sparse, quantized, meta tensors) is refused as ``torch_pt`` refuses it.

The archive is checked as ``.npz`` archives are (``reading.zip_data_offsets``: every record's
bytes its own); a storage must be a stored record of exactly its declared size, and a tensor
must lie within its storage. A file this reader does not take — written on a big-endian
machine — is left to ``torch.load`` (``TorchUnsupported``).
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mdiff.checkpoints.base import CheckpointReader
from mdiff.checkpoints.reading import (
    ZIP_ERRORS,
    checked_shape,
    element_count,
    fill_from,
    is_valid_name,
    open_regular_file,
    open_zip,
    refuse_invalid_bools,
    zip_data_offsets,
)
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DType, dtype_named

HINT = "save model.state_dict() (a flat dict of name → tensor) with torch.save"

_MAX_PICKLE_BYTES = 1 << 30  # a state dict of 10^6 tensors pickles to ~100 MB

# The storage classes of a typed storage (v2 tensors) → the mdiff dtype name, or None: known to
# torch, not to mdiff (MD702). `UntypedStorage` (v3 tensors) takes its dtype from the tensor.
_STORAGE_DTYPES: dict[str, str | None] = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexFloatStorage": None, "ComplexDoubleStorage": None, "QInt8Storage": None, "QUInt8Storage": None,
    "QInt32Storage": None, "QUInt4x2Storage": None, "QUInt2x4Storage": None,
}
# torch dtypes (`torch.<name>` globals) that mdiff has (SPEC.md §6.1); any other `torch.<dtype>` is MD702.
_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
           "bfloat16", "float32", "float64"}
_OTHER_DTYPES = {"complex32", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32", "quint4x2",
                 "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16", "int1", "int2", "int3", "int4",
                 "int5", "int6", "int7", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
                 "cfloat", "cdouble", "chalf", "half", "float", "double", "long", "int", "short"}


class TorchUnsupported(Exception):
    """A well-formed file this reader leaves to torch.load (big-endian data)."""


# ---------------------------------------------------------------- what the pickle builds


class _Dict(dict):
    """A dict of the pickle (``collections.OrderedDict`` too, whose attributes — a state dict's
    ``_metadata`` — BUILD sets and nothing reads)."""


@dataclass(frozen=True)
class _Global:
    """A stand-in for a global the pickle names: called by REDUCE, it runs ``build`` (ours)."""

    name: str
    build: Callable[..., Any] | None = None

    def __call__(self, *args: Any) -> Any:
        if self.build is None:
            raise _Malformed(f"{self.name} is called")
        return self.build(*args)


@dataclass(frozen=True)
class _StorageType:
    name: str
    dtype: str | None  # the mdiff dtype of a typed storage; None: UntypedStorage, or one mdiff lacks


@dataclass(frozen=True)
class _Storage:
    key: str
    kind: _StorageType
    numel: int  # elements of its dtype (bytes for an UntypedStorage)


@dataclass(frozen=True)
class _TorchDtype:
    name: str


@dataclass(frozen=True)
class Tensor:
    """A tensor as the pickle describes it; named so, for messages about what a file holds."""

    storage: Any
    offset: Any
    size: Any
    stride: Any
    dtype: Any  # a _TorchDtype for v3 tensors, None for v2 (the storage's)


@dataclass(frozen=True)
class _Refused:
    """A tensor the pickle rebuilds some other way: sparse, quantized, meta, nested, …"""

    how: str


class _Malformed(Exception):
    pass


def _rebuild_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False, hooks: Any = None,
                metadata: Any = None) -> Tensor:
    return Tensor(storage, offset, size, stride, None)


def _rebuild_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any,
                metadata: Any = None) -> Tensor:
    return Tensor(storage, offset, size, stride, dtype)


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


def _rebuild_from_type(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    if not isinstance(new_type, _Global) or new_type.name not in ("torch.Tensor", "torch.nn.parameter.Parameter"):
        return _Refused("a tensor subclass")
    if not isinstance(func, _Global) or not isinstance(args, tuple):
        raise _Malformed("_rebuild_from_type_v2 takes a function and a tuple")
    return func(*args)


def _ordered_dict(*args: Any) -> _Dict:
    if args:
        raise _Malformed("OrderedDict is called with arguments")
    return _Dict()


def _refused(how: str) -> Callable[..., _Refused]:
    return lambda *args: _Refused(how)


_REFUSED_REBUILDS = {
    "_rebuild_sparse_tensor": "layout sparse", "_rebuild_sparse_csr_tensor": "layout sparse_csr",
    "_rebuild_meta_tensor_no_storage": "device meta", "_rebuild_qtensor": "quantized",
    "_rebuild_nested_tensor": "layout nested", "_rebuild_wrapper_subclass": "a tensor subclass",
    "_rebuild_device_tensor_from_numpy": "a device tensor", "_rebuild_device_tensor_from_cpu_tensor": "a device tensor",
    "_rebuild_xla_tensor": "device xla", "_rebuild_mtia_tensor": "device mtia",
}


def _global(module: str, name: str) -> object | None:
    """The stand-in for ``module.name``; None for anything a state dict does not name."""
    if module == "collections" and name == "OrderedDict":
        return _Global("collections.OrderedDict", _ordered_dict)
    if module == "torch._utils":
        if name == "_rebuild_tensor_v2":
            return _Global(name, _rebuild_v2)
        if name == "_rebuild_tensor_v3":
            return _Global(name, _rebuild_v3)
        if name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            return _Global(name, _rebuild_parameter)
        if name in _REFUSED_REBUILDS:
            return _Global(name, _refused(_REFUSED_REBUILDS[name]))
    if module == "torch._tensor" and name == "_rebuild_from_type_v2":
        return _Global(name, _rebuild_from_type)
    if (module, name) in (("torch", "Tensor"), ("torch.nn.parameter", "Parameter")):
        return _Global(f"{module}.{name}")
    if module in ("torch", "torch.storage") and name == "UntypedStorage":
        return _StorageType(name, None)
    if module == "torch" and name in _STORAGE_DTYPES:
        return _StorageType(name, _STORAGE_DTYPES[name])
    if module == "torch" and (name in _DTYPES or name in _OTHER_DTYPES):
        return _TorchDtype(name)
    if module == "torch" and name == "Size":
        return _Global("torch.Size", lambda dims=(): tuple(dims) if isinstance(dims, (tuple, list)) else _bad_size(dims))
    if (module, name) == ("torch.serialization", "_get_layout") or (module == "torch" and name == "device") \
            or (module == "torch" and name.startswith("per_")):
        return _Global(f"{module}.{name}", lambda *args: _Refused(f"{module}.{name}"))
    return None


def _bad_size(dims: Any) -> Any:
    raise _Malformed(f"torch.Size of {type(dims).__name__}")


# ---------------------------------------------------------------- the pickle machine


def unpickle(data: bytes, path: str) -> Any:
    """The object ``data`` pickles, built from stand-ins (see the module's docstring); MD701 when it
    uses an opcode or a global a state dict does not."""
    try:
        return _Machine(data, path).run()
    except (_Malformed, IndexError, ValueError, TypeError, KeyError, struct.error, UnicodeDecodeError,
            OverflowError, RecursionError) as exc:
        raise CheckpointError("MD701", f"not a readable PyTorch checkpoint (its pickle is malformed: {exc})",
                              path) from None


class _Machine:
    def __init__(self, data: bytes, path: str):
        self.data = data
        self.at = 0
        self.path = path
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self.storages: dict[str, _Storage] = {}

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise _Malformed("it ends early")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def line(self) -> str:
        end = self.data.find(b"\n", self.at)
        if end < 0:
            raise _Malformed("it ends early")
        text = self.data[self.at:end].decode("utf-8")
        self.at = end + 1
        return text

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise _Malformed("no MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def set_items(self, target: Any, items: list[Any]) -> None:
        if not isinstance(target, dict) or len(items) % 2:
            raise _Malformed("SETITEMS on something other than a dict")
        for key, value in zip(items[::2], items[1::2]):
            if not isinstance(key, str):
                raise CheckpointError("MD701", f"key {key!r} is not a tensor name (a non-empty string); {HINT}", self.path)
            if key in target:
                raise CheckpointError("MD701", f"key {key!r} appears twice; the file is ambiguous", self.path)
            target[key] = value

    def glob(self, module: str, name: str) -> object:
        stand_in = _global(module, name)
        if stand_in is None:
            raise CheckpointError(
                "MD701", f"the file holds pickled objects other than tensors and containers, which mdiff never "
                         f"unpickles (global {module}.{name}); {HINT}", self.path)
        return stand_in

    def persistent(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and isinstance(pid[2], str) and isinstance(pid[4], int) and not isinstance(pid[4], bool) and pid[4] >= 0):
            raise _Malformed("a persistent id that is not a storage's")
        storage = _Storage(pid[2], pid[1], pid[4])
        known = self.storages.setdefault(storage.key, storage)
        if known != storage:
            raise _Malformed(f"storage {storage.key!r} is described twice, differently")
        return known

    def run(self) -> Any:  # noqa: C901 — one branch per opcode
        stack = self.stack
        while True:
            op = self.take(1)
            if op == b"\x80":  # PROTO
                if self.take(1)[0] > 5:
                    raise _Malformed("a pickle protocol above 5")
            elif op == b"\x95":  # FRAME: a length, nothing to do
                self.take(8)
            elif op == b".":  # STOP
                if len(stack) != 1 or self.marks:
                    raise _Malformed("STOP with other than one object")
                return stack[0]
            elif op == b"(":  # MARK
                self.marks.append(len(stack))
            elif op == b")":
                stack.append(())
            elif op == b"t":
                stack.append(tuple(self.pop_mark()))
            elif op in (b"\x85", b"\x86", b"\x87"):  # TUPLE1..3
                count = op[0] - 0x84
                if len(stack) < count:
                    raise _Malformed("a tuple of missing items")
                last = tuple(stack[len(stack) - count:])
                del stack[len(stack) - count:]
                stack.append(last)
            elif op == b"]":
                stack.append([])
            elif op == b"a":  # APPEND
                value = stack.pop()
                if not isinstance(stack[-1], list):
                    raise _Malformed("APPEND to something other than a list")
                stack[-1].append(value)
            elif op == b"e":  # APPENDS
                items = self.pop_mark()
                if not isinstance(stack[-1], list):
                    raise _Malformed("APPENDS to something other than a list")
                stack[-1].extend(items)
            elif op == b"}":
                stack.append(_Dict())
            elif op == b"s":  # SETITEM
                value, key = stack.pop(), stack.pop()
                self.set_items(stack[-1], [key, value])
            elif op == b"u":  # SETITEMS
                items = self.pop_mark()
                self.set_items(stack[-1], items)
            elif op == b"N":
                stack.append(None)
            elif op == b"\x88":
                stack.append(True)
            elif op == b"\x89":
                stack.append(False)
            elif op == b"K":  # BININT1
                stack.append(self.take(1)[0])
            elif op == b"M":  # BININT2
                stack.append(struct.unpack("<H", self.take(2))[0])
            elif op == b"J":  # BININT
                stack.append(struct.unpack("<i", self.take(4))[0])
            elif op == b"\x8a":  # LONG1
                stack.append(int.from_bytes(self.take(self.take(1)[0]), "little", signed=True))
            elif op == b"G":  # BINFLOAT
                stack.append(struct.unpack(">d", self.take(8))[0])
            elif op == b"X":  # BINUNICODE
                stack.append(self.take(struct.unpack("<I", self.take(4))[0]).decode("utf-8", "surrogatepass"))
            elif op == b"\x8c":  # SHORT_BINUNICODE
                stack.append(self.take(self.take(1)[0]).decode("utf-8", "surrogatepass"))
            elif op == b"\x8d":  # BINUNICODE8
                stack.append(self.take(struct.unpack("<Q", self.take(8))[0]).decode("utf-8", "surrogatepass"))
            elif op == b"C":  # SHORT_BINBYTES
                stack.append(self.take(self.take(1)[0]))
            elif op == b"B":  # BINBYTES
                stack.append(self.take(struct.unpack("<I", self.take(4))[0]))
            elif op == b"c":  # GLOBAL
                module = self.line()
                stack.append(self.glob(module, self.line()))
            elif op == b"\x93":  # STACK_GLOBAL
                name, module = stack.pop(), stack.pop()
                if not (isinstance(module, str) and isinstance(name, str)):
                    raise _Malformed("STACK_GLOBAL of other than two strings")
                stack.append(self.glob(module, name))
            elif op == b"q":  # BINPUT
                self.memo[self.take(1)[0]] = stack[-1]
            elif op == b"r":  # LONG_BINPUT
                self.memo[struct.unpack("<I", self.take(4))[0]] = stack[-1]
            elif op == b"\x94":  # MEMOIZE
                self.memo[len(self.memo)] = stack[-1]
            elif op == b"h":  # BINGET
                stack.append(self.memo[self.take(1)[0]])
            elif op == b"j":  # LONG_BINGET
                stack.append(self.memo[struct.unpack("<I", self.take(4))[0]])
            elif op == b"R":  # REDUCE
                args, func = stack.pop(), stack.pop()
                if not (isinstance(func, _Global) and isinstance(args, tuple)):
                    raise _Malformed(f"REDUCE of a {type(func).__name__}")
                stack.append(func(*args))
            elif op == b"Q":  # BINPERSID
                stack.append(self.persistent(stack.pop()))
            elif op == b"b":  # BUILD: an OrderedDict's attributes (a state dict's _metadata), which nothing reads
                state = stack.pop()
                if not isinstance(stack[-1], _Dict) or not isinstance(state, (dict, type(None))):
                    raise _Malformed(f"BUILD of a {type(stack[-1]).__name__}")
            else:
                raise _Malformed(f"opcode {op!r}, which a state dict saved by torch.save does not use")


# ---------------------------------------------------------------- the reader


@dataclass(frozen=True, slots=True)
class _Entry:
    shape: tuple[int, ...]
    dtype: DType
    start: int  # where the first element the view reads lies in the file
    span: int  # the bytes from there to the end of the last element it reads
    strides: tuple[int, ...] | None  # in elements; None when the tensor's elements are contiguous in C order


class TorchZipReader(CheckpointReader):
    """A ``torch.save`` state dict in torch's zip format, read without torch (see the module)."""

    def __init__(self, path: str):
        self.path = path
        self._file = open_regular_file(path)
        try:
            self._entries, self._order = _open(self._file, path)
        except BaseException:
            self._file.close()
            raise

    def _index(self) -> dict[str, _Entry]:
        return self._entries

    @property
    def order(self) -> list[str]:
        """The tensor names in the order the state dict holds them."""
        return list(self._order)

    def read(self, name: str) -> np.ndarray:
        entry = self._entry(name)
        if self._file.closed:
            raise ValueError(f"the reader of {self.path} is closed")
        array = np.empty(entry.shape, dtype=entry.dtype.value)
        self._file.seek(entry.start)
        if entry.strides is None:
            fill_from(self._file.readinto, array, self.path, name)
        else:  # a view: the bytes it spans, then its elements gathered in C order
            span = np.empty(entry.span // entry.dtype.itemsize, dtype=entry.dtype.value)
            fill_from(self._file.readinto, span, self.path, name)
            strides = [stride * entry.dtype.itemsize for stride in entry.strides]
            array[...] = np.lib.stride_tricks.as_strided(span, entry.shape, strides, writeable=False)
        refuse_invalid_bools(array, self.path, name)
        return array

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        self._file.close()


def _open(file: io.FileIO, path: str) -> tuple[dict[str, _Entry], list[str]]:
    archive = open_zip(file, path)
    try:
        try:
            offsets = zip_data_offsets(archive, file, path)
            records = _records(archive, path)
            folder = _folder(archive, path)
            order = records.get(f"{folder}/byteorder")
            if order is not None and archive.read(order) != b"little":
                raise TorchUnsupported("big-endian")
            pickled = records.get(f"{folder}/data.pkl")
            if pickled is None:
                raise CheckpointError("MD701", f"the archive has no {folder}/data.pkl; not a PyTorch checkpoint", path)
            if pickled.file_size > _MAX_PICKLE_BYTES:
                raise CheckpointError("MD701", f"{pickled.filename} has {pickled.file_size} bytes; not a state dict", path)
            data = archive.read(pickled)  # its CRC checked: a damaged pickle is refused, not misread
        except ZIP_ERRORS as exc:
            raise CheckpointError("MD701", f"the zip archive is corrupt ({exc})", path) from None
    finally:
        archive.close()
    state = unpickle(data, path)
    if not isinstance(state, dict):
        raise CheckpointError("MD701", f"the file holds a {_kind(state)}, not a dict of tensors; {HINT}", path)
    entries = {}
    for name, value in state.items():
        if not is_valid_name(name):
            raise CheckpointError("MD701", f"key {name!r} is not a tensor name (a non-empty string); {HINT}", path)
        entries[name] = _entry(name, value, records, offsets, folder, path)
    return entries, list(state)


def _records(archive: zipfile.ZipFile, path: str) -> dict[str, zipfile.ZipInfo]:
    records: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if info.filename in records:
            raise CheckpointError("MD701", f"the archive holds {info.filename!r} twice; it is ambiguous", path)
        if info.flag_bits & 0x1:
            raise CheckpointError("MD701", f"record {info.filename!r} is encrypted", path)
        records[info.filename] = info
    return records


def _folder(archive: zipfile.ZipFile, path: str) -> str:
    """The archive's folder (torch names it after the file it wrote): the first record's."""
    infos = archive.infolist()
    folder = infos[0].filename.split("/", 1)[0] if infos and "/" in infos[0].filename else None
    if not folder:
        raise CheckpointError("MD701", "a zip archive, but not one torch.save writes (no folder of records)", path)
    return folder


def _kind(value: object) -> str:
    if isinstance(value, _Refused):
        return "Tensor"
    return "dict" if isinstance(value, _Dict) else type(value).__name__


def _entry(name: str, value: Any, records: dict[str, zipfile.ZipInfo], offsets: dict[str, int], folder: str,
           path: str) -> _Entry:
    if isinstance(value, _Refused):
        _refuse(name, value.how, path)
    if not isinstance(value, Tensor):
        found = "a nested dict" if isinstance(value, dict) else f"a {_kind(value)}"
        raise CheckpointError("MD701", f"entry {name!r} is {found}, not a tensor; a full training checkpoint is not "
                                       f"a state dict: {HINT}", path)
    storage = value.storage
    if not isinstance(storage, _Storage):
        raise CheckpointError("MD701", f"tensor {name!r} has no storage of the file", path)
    dt = _dtype(name, value, path)
    shape = checked_shape(value.size, dt.itemsize, path, name)  # MD701 for a shape no array can have
    strides = _ints(value.stride, name, "strides", path)
    offset = value.offset
    if len(strides) != len(shape) or type(offset) is not int or offset < 0:
        raise CheckpointError("MD701", f"tensor {name!r}: its strides or offset do not fit its shape", path)
    storage_bytes = storage.numel * (1 if storage.kind.dtype is None else dt.itemsize)
    record = records.get(f"{folder}/data/{storage.key}")
    if record is None:
        raise CheckpointError("MD701", f"tensor {name!r}: the archive has no record {folder}/data/{storage.key}", path)
    if record.compress_type != zipfile.ZIP_STORED or record.file_size != storage_bytes \
            or record.compress_size != storage_bytes:
        raise CheckpointError("MD701", f"record {record.filename!r} is not the {storage_bytes} stored bytes its "
                                       "storage declares", path)
    count = element_count(shape)
    nbytes = count * dt.itemsize
    if nbytes > storage_bytes:
        raise CheckpointError("MD701", f"tensor {name!r} claims {nbytes} bytes of elements but its storage holds "
                                       f"{storage_bytes} (a broadcast view); save tensor.contiguous() instead", path)
    start = offsets[record.filename] + offset * dt.itemsize
    if count == 0:
        return _Entry(shape, dt, start, 0, None)
    last = offset + sum((dim - 1) * stride for dim, stride in zip(shape, strides))
    if (last + 1) * dt.itemsize > storage_bytes:
        raise CheckpointError("MD701", f"tensor {name!r} reaches past the end of its storage", path)
    contiguous = all(stride == math.prod(shape[i + 1:]) for i, (dim, stride) in enumerate(zip(shape, strides))
                     if dim != 1)
    strides = tuple(0 if dim == 1 else stride for dim, stride in zip(shape, strides))  # never stepped along
    return _Entry(shape, dt, start, (last - offset + 1) * dt.itemsize, None if contiguous else strides)


def _dtype(name: str, tensor: Tensor, path: str) -> DType:
    kind = tensor.storage.kind
    if tensor.dtype is None:  # v2: a typed storage's
        if kind.dtype is None:
            label = kind.name.removesuffix("Storage").lower()
            raise CheckpointError("MD702", f"tensor {name!r} has dtype {label}, which mdiff does not support; convert "
                                           f"it to one of {', '.join(sorted(_DTYPES))}", path)
        return dtype_named(kind.dtype)
    if not isinstance(tensor.dtype, _TorchDtype) or kind.name != "UntypedStorage":
        raise CheckpointError("MD701", f"tensor {name!r}: its dtype is not a torch dtype of an untyped storage", path)
    if tensor.dtype.name not in _DTYPES:
        raise CheckpointError("MD702", f"tensor {name!r} has dtype {tensor.dtype.name}, which mdiff does not support; "
                                       f"convert it to one of {', '.join(sorted(_DTYPES))}", path)
    return dtype_named(tensor.dtype.name)


def _ints(value: Any, name: str, what: str, path: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(type(v) is int and v >= 0 for v in value):
        raise CheckpointError("MD701", f"tensor {name!r}: its {what} is not a tuple of non-negative integers", path)
    return value


def _refuse(name: str, how: str, path: str) -> None:
    if how == "quantized":
        raise CheckpointError("MD702", f"tensor {name!r} is quantized, which mdiff does not support; dequantize it",
                              path)
    if how.startswith("layout"):
        raise CheckpointError("MD701", f"tensor {name!r} has {how}; only dense tensors are supported (to_dense())", path)
    if how.startswith("device"):
        raise CheckpointError("MD701", f"tensor {name!r} is on {how} and holds no readable data", path)
    raise CheckpointError("MD701", f"tensor {name!r} is {how}, not a dense tensor", path)
