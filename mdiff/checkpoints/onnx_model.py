"""ONNX models (``.onnx``): the parameters are the main graph's initializers.

Reading loads the model's protobuf (without external data) and validates every
initializer on open: a name (non-empty, unique), a dtype of SPEC.md §6.1
(other ONNX types are MD702), dims, and exactly as much data as the dims
need, in ``raw_data`` or in the typed field ONNX defines for the dtype
(``int32_data`` holds the bit patterns of float16/bfloat16). Conversion
copies bit patterns and never converts values (``float_data`` is read from
its wire bytes: protobuf hands it to Python as doubles, which would quiet
signalling NaNs). ``metadata`` is the model's ``metadata_props``.

Refused (MD701): initializers in external data files (not supported yet),
sparse initializers, segmented tensors, duplicate initializer names or
metadata keys, and anything protobuf cannot parse. Initializers of
subgraphs and ``Constant`` nodes are part of the graph, not parameters.

Writing needs a template, the base ``.onnx`` model (MD703 without one): the
output is that model with each initializer's data replaced by the fetched
tensor — same name, same position — and everything else (graph, opsets,
metadata, doc strings) unchanged, unless ``metadata`` is given, which then
replaces ``metadata_props``. The result must keep the template's set of
initializers: an added or deleted parameter, or a dtype/shape change of an
initializer the graph refers to, is MD703, raised before any file is
created. Data is written as ``raw_data``; the output is serialized with
``deterministic=True`` (same inputs, same bytes) and must pass
``onnx.checker.check_model`` (MD703 otherwise).

The whole model is held in memory while reading and writing (writing
briefly holds a second, serialized copy). Models of 2 GiB or more, which
protobuf cannot serialize and which need external data, are out of scope
(MD703 when writing one).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import onnx

from mdiff.checkpoints.base import CheckpointReader, Entry, Fetch
from mdiff.checkpoints.reading import (
    checked_shape,
    element_count,
    is_valid_name,
    is_valid_unicode,
    open_regular_file,
    refuse_invalid_bools,
)
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DType, dtype_named

# write_checkpoint passes the template to check_writable for formats that say so.
WRITES_FROM_TEMPLATE = True

# protobuf refuses to serialize messages of 2 GiB or more.
MAX_MODEL_BYTES = (1 << 31) - 1

_T = onnx.TensorProto

# ONNX data type → (mdiff dtype, the typed field holding it when raw_data is not used,
# the inclusive range of that field's values).
_TYPES: dict[int, tuple[DType, str, tuple[int, int] | None]] = {
    _T.BOOL: (dtype_named("bool"), "int32_data", (0, 1)),
    _T.INT8: (dtype_named("int8"), "int32_data", (-(1 << 7), (1 << 7) - 1)),
    _T.INT16: (dtype_named("int16"), "int32_data", (-(1 << 15), (1 << 15) - 1)),
    _T.INT32: (dtype_named("int32"), "int32_data", None),
    _T.INT64: (dtype_named("int64"), "int64_data", None),
    _T.UINT8: (dtype_named("uint8"), "int32_data", (0, (1 << 8) - 1)),
    _T.UINT16: (dtype_named("uint16"), "int32_data", (0, (1 << 16) - 1)),
    _T.UINT32: (dtype_named("uint32"), "uint64_data", (0, (1 << 32) - 1)),
    _T.UINT64: (dtype_named("uint64"), "uint64_data", None),
    _T.FLOAT16: (dtype_named("float16"), "int32_data", (0, (1 << 16) - 1)),  # bit patterns
    _T.BFLOAT16: (dtype_named("bfloat16"), "int32_data", (0, (1 << 16) - 1)),
    _T.FLOAT: (dtype_named("float32"), "float_data", None),
    _T.DOUBLE: (dtype_named("float64"), "double_data", None),
}
_ONNX_TYPE_BY_DTYPE_NAME = {dt.name: code for code, (dt, _, _) in _TYPES.items()}
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


@dataclass(frozen=True)
class _Initializer:
    index: int  # position in graph.initializer
    tensor: Any  # onnx.TensorProto
    shape: tuple[int, ...]
    dtype: DType


class OnnxReader(CheckpointReader):
    """An ``.onnx`` model; every initializer is validated on open, converted on demand."""

    def __init__(self, path: str):
        self.path = path
        model = _load_model(path)
        self._initializers: dict[str, _Initializer] | None = _initializers(model, path)
        self._metadata = _metadata(model, path)

    def read(self, name: str) -> np.ndarray:
        init = self._entry(name)
        return _to_array(init, self.path, name)

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    def close(self) -> None:
        self._initializers = None

    def _index(self) -> dict[str, _Initializer]:
        if self._initializers is None:
            raise ValueError(f"the reader of {self.path} is closed")
        return self._initializers


def open_reader(path: str) -> OnnxReader:
    return OnnxReader(path)


# ---------------------------------------------------------------- reading


def _load_model(path: str) -> Any:
    # Our own open: a missing file stays OSError, a FIFO is refused without blocking;
    # format="protobuf" so that the file name's extension cannot select another parser.
    with open_regular_file(path) as file:
        try:
            model = onnx.load(file, format="protobuf", load_external_data=False)
        except MemoryError:
            raise
        except Exception as exc:  # protobuf's DecodeError and whatever else a parser raises
            if isinstance(exc, OSError) and exc.errno is not None:
                raise
            raise CheckpointError(
                "MD701", f"{os.path.basename(path) or path} is not an ONNX model ({type(exc).__name__}: "
                         f"{str(exc)[:300]})", path
            ) from None
    # Protobuf parses many byte strings (an empty file among them) as a message of unknown
    # fields; a model has at least an IR version and a graph.
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise CheckpointError("MD701", f"{os.path.basename(path) or path} is not an ONNX model (it has no IR "
                                       "version or no graph)", path)
    return model


def _initializers(model: Any, path: str) -> dict[str, _Initializer]:
    graph = model.graph
    if len(graph.sparse_initializer):
        raise CheckpointError(
            "MD701", "the model has sparse initializers, which are not supported; store them dense", path
        )
    result: dict[str, _Initializer] = {}
    for index, tensor in enumerate(graph.initializer):
        name = tensor.name
        if not is_valid_name(name):
            raise CheckpointError("MD701", f"initializer #{index} has no valid name ({name!r})", path)
        if name in result:
            raise CheckpointError("MD701", f"two initializers are named {name!r}; the model is ambiguous", path)
        shape, dt = _tensor_spec(tensor, name, path)
        result[name] = _Initializer(index, tensor, shape, dt)
    return result


def _tensor_spec(tensor: Any, name: str, path: str) -> tuple[tuple[int, ...], DType]:
    if tensor.data_location == _T.EXTERNAL or len(tensor.external_data):
        raise CheckpointError(
            "MD701",
            f"initializer {name!r} is stored in an external data file, which is not supported yet; "
            "save the model with its data inside (onnx.save_model(model, path, save_as_external_data=False))",
            path,
        )
    if tensor.HasField("segment"):
        raise CheckpointError("MD701", f"initializer {name!r} is a segment of a tensor; not supported", path)
    code = tensor.data_type
    if code not in _TYPES:
        if code in _T.DataType.values() and code != _T.UNDEFINED:
            raise CheckpointError(
                "MD702",
                f"initializer {name!r} has ONNX type {_T.DataType.Name(code)}, which mdiff does not support; "
                f"convert it to one of {', '.join(_T.DataType.Name(c) for c in _TYPES)}",
                path,
            )
        raise CheckpointError("MD701", f"initializer {name!r} has no valid ONNX data type ({code})", path)
    dt, field, _ = _TYPES[code]
    shape = checked_shape(list(tensor.dims), dt.itemsize, path, name)
    count = element_count(shape)
    if tensor.HasField("raw_data"):
        sources = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
        if sources:
            raise CheckpointError(
                "MD701", f"initializer {name!r} holds data in raw_data and in {sources[0]}; it is ambiguous", path
            )
        if len(tensor.raw_data) != count * dt.itemsize:
            raise CheckpointError(
                "MD701",
                f"initializer {name!r} has {len(tensor.raw_data)} bytes of raw_data; "
                f"its dims {list(shape)} need {count * dt.itemsize}",
                path,
            )
    else:
        others = [f for f in _TYPED_FIELDS if f != field and len(getattr(tensor, f))]
        if others:
            raise CheckpointError(
                "MD701", f"initializer {name!r} ({dt.name}) holds data in {others[0]}, not in {field}", path
            )
        if len(getattr(tensor, field)) != count:
            raise CheckpointError(
                "MD701",
                f"initializer {name!r} holds {len(getattr(tensor, field))} values; its dims {list(shape)} need {count}",
                path,
            )
    return shape, dt


def _to_array(init: _Initializer, path: str, name: str) -> np.ndarray:
    """The initializer's values as bit patterns, never converted (see the module docstring)."""
    tensor, dt = init.tensor, init.dtype
    if tensor.HasField("raw_data"):
        # raw_data is little-endian, as is every host mdiff supports.
        array = np.frombuffer(tensor.raw_data, dtype=dt.value).reshape(init.shape).copy()
    else:
        _, field, bounds = _TYPES[tensor.data_type]
        values = getattr(tensor, field)
        if field == "float_data":
            array = _float_data_bits(tensor)
        elif field == "double_data":
            array = np.asarray(values, dtype=np.float64)
        else:
            wide = np.asarray(values, dtype=np.uint64 if field == "uint64_data" else np.int64)
            if bounds is not None and wide.size and (int(wide.min()) < bounds[0] or int(wide.max()) > bounds[1]):
                raise CheckpointError(
                    "MD701", f"initializer {name!r} holds values outside the range of {dt.name}", path
                )
            # Narrow to the bit width, then reinterpret: float16/bfloat16 are stored as bit patterns.
            array = wide.astype(dt.bits if dt.kind in ("float", "bool") else dt.value).view(dt.value)
        array = np.array(array.reshape(init.shape), dtype=dt.value, order="C", copy=True)
    refuse_invalid_bools(array, path, name)
    return array


def _float_data_bits(tensor: Any) -> np.ndarray:
    """``float_data`` as stored: from the packed wire bytes, not via Python floats.

    Python's protobuf hands repeated ``float`` values out as doubles; converting
    a signalling NaN to double and back quiets it. Serialized, the field is the
    packed float32 values as protobuf holds them (``float_data`` is declared
    ``packed``), so only this field is serialized and read back.
    """
    holder = onnx.TensorProto()
    holder.CopyFrom(tensor)  # the other data fields are empty (checked on open)
    for descriptor in holder.DESCRIPTOR.fields:
        if descriptor.name != "float_data":
            holder.ClearField(descriptor.name)
    wire = holder.SerializeToString()
    count = len(tensor.float_data)
    if not count:
        return np.empty(0, dtype=np.float32)
    # tag (field 4, length-delimited), varint length, then the values
    position, length, shift = 1, 0, 0
    while True:
        byte = wire[position]
        position += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if wire[0] != 0x22 or length != 4 * count or position + length != len(wire):
        raise AssertionError("unexpected protobuf encoding of float_data")  # not reachable from a file
    return np.frombuffer(wire, dtype="<f4", count=count, offset=position).copy()


def _metadata(model: Any, path: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for prop in model.metadata_props:
        if not (is_valid_unicode(prop.key) and is_valid_unicode(prop.value)):
            raise CheckpointError("MD701", f"metadata entry {prop.key!r} is not valid Unicode", path)
        if prop.key in result:
            raise CheckpointError("MD701", f"metadata key {prop.key!r} appears twice; it is ambiguous", path)
        result[prop.key] = prop.value
    return result


# ---------------------------------------------------------------- writing


def check_writable(
    entries: Sequence[Entry],
    metadata: dict[str, str] | None,
    path: str,
    template: str | os.PathLike[str] | None = None,
) -> None:
    """MD703 unless the entries fit the template's initializers (see the module docstring)."""
    model, template_path = _load_template(template, path)
    initializers = _initializers(model, template_path)
    _check_fits(entries, initializers, model, path, template_path)
    data_bytes = sum(init.tensor.ByteSize() for init in initializers.values())
    estimate = model.ByteSize() - data_bytes + sum(element_count(shape) * dt.itemsize for _, shape, dt in entries)
    if estimate > MAX_MODEL_BYTES:
        raise CheckpointError(
            "MD703", "the ONNX model would be 2 GiB or larger, which needs external data; not supported", path
        )


def write(
    file: BinaryIO,
    entries: Sequence[Entry],
    fetch: Fetch,
    metadata: dict[str, str] | None,
    template: str | os.PathLike[str] | None = None,
) -> None:
    # Loaded again (check_writable's copy is gone) and checked again: the template may have changed since.
    model, template_path = _load_template(template, getattr(file, "name", None))
    initializers = _initializers(model, template_path)
    _check_fits(entries, initializers, model, None, template_path)
    for name, shape, dt in entries:
        array = fetch(name)
        _set_data(initializers[name], array, shape, dt)
        del array
    if metadata is not None:
        del model.metadata_props[:]
        for key, value in metadata.items():
            model.metadata_props.add(key=key, value=value)
    if model.ByteSize() > MAX_MODEL_BYTES:
        raise CheckpointError(
            "MD703", "the ONNX model would be 2 GiB or larger, which needs external data; not supported"
        )
    data = model.SerializeToString(deterministic=True)
    del model, initializers
    _check_output(data, template_path)
    file.write(data)


def _load_template(template: str | os.PathLike[str] | None, path: str | None) -> tuple[Any, str]:
    if template is None:
        raise CheckpointError(
            "MD703",
            "an ONNX output needs the base .onnx model as template (write_checkpoint(..., template=base_path)): "
            "the result is the base model with its initializers replaced",
            path if isinstance(path, str) else None,
        )
    template_path = os.fspath(template)
    return _load_model(template_path), template_path


def _check_fits(
    entries: Sequence[Entry],
    initializers: dict[str, _Initializer],
    model: Any,
    path: str | None,
    template_path: str,
) -> None:
    names = {name for name, _, _ in entries}
    added = [name for name, _, _ in entries if name not in initializers]
    if added:
        raise CheckpointError(
            "MD703",
            f"{len(added)} tensor(s) are not initializers of the template {template_path}, e.g. {added[0]!r}; "
            "an ONNX model cannot gain parameters its graph does not use (write .safetensors instead)",
            path,
        )
    deleted = [name for name in initializers if name not in names]
    if deleted:
        raise CheckpointError(
            "MD703",
            f"{len(deleted)} initializer(s) of the template {template_path} are missing from the result, "
            f"e.g. {deleted[0]!r}; the graph would lose parameters (write .safetensors instead)",
            path,
        )
    referenced: set[str] | None = None
    for name, shape, dt in entries:
        init = initializers[name]
        if (shape, dt) == (init.shape, init.dtype):
            continue
        if referenced is None:
            referenced = _referenced_names(model)
        if name in referenced:
            raise CheckpointError(
                "MD703",
                f"initializer {name!r} would change from {init.dtype.name}{list(init.shape)} to "
                f"{dt.name}{list(shape)}, but the graph uses it with the template's type",
                path,
            )


def _referenced_names(model: Any) -> set[str]:
    """Every name a node (of any graph or subgraph), a graph input/output or value_info mentions."""
    names: set[str] = set()
    graphs = [model.graph]
    for info in model.training_info:
        graphs += [info.initialization, info.algorithm]
        names.update(binding.key for binding in info.update_binding)
        names.update(binding.value for binding in info.update_binding)
    while graphs:
        graph = graphs.pop()
        for values in (graph.input, graph.output, graph.value_info):
            names.update(value.name for value in values)
        for node in graph.node:
            names.update(node.input)
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    graphs.append(attribute.g)
                graphs.extend(attribute.graphs)
    return names


def _set_data(init: _Initializer, array: np.ndarray, shape: tuple[int, ...], dt: DType) -> None:
    tensor = init.tensor
    for field in _TYPED_FIELDS:
        tensor.ClearField(field)
    if shape != init.shape:
        del tensor.dims[:]
        tensor.dims.extend(shape)
    tensor.data_type = _ONNX_TYPE_BY_DTYPE_NAME[dt.name]
    tensor.raw_data = array.tobytes()  # C order, little-endian: ONNX's raw_data layout


def _check_output(data: bytes, template_path: str) -> None:
    try:
        onnx.checker.check_model(data)
    except onnx.checker.ValidationError as exc:
        detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        try:
            onnx.checker.check_model(template_path)
            cause = ""
        except onnx.checker.ValidationError:
            cause = "; the template itself fails the checker"
        raise CheckpointError(
            "MD703", f"the resulting ONNX model does not pass onnx.checker ({detail}){cause}"
        ) from None
