"""Writing one checkpoint file: the arguments checked, each fetched tensor checked against its
entry and made canonical, the format's writer run into a file that takes its name only once whole."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

import numpy as np

from mdiff.atomic import atomic_output
from mdiff.checkpoints.base import CheckedEntries, Entry, Fetch
from mdiff.checkpoints.reading import MAX_RANK, is_valid_name, is_valid_unicode
from mdiff.checkpoints.registry import format_module
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DType, dtype_of


def write_checkpoint(
    path: str | os.PathLike[str],
    entries: Sequence[tuple[str, Sequence[int], DType]],
    fetch: Fetch,
    metadata: Mapping[str, str] | None = None,
    *,
    template: str | os.PathLike[str] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> None:
    """Write a checkpoint atomically, fetching one tensor at a time.

    ``entries`` lists ``(name, shape, dtype)`` in file order; ``fetch(name)``
    is called once per entry, in that order, and must return an array of that
    shape and dtype (ValueError otherwise). On any exception no file is left
    behind and an existing ``path`` keeps its previous contents.

    ``template`` is the checkpoint the result derives from (the base of an
    applied diff). Formats that store more than tensors use it: an ``.onnx``
    output is the template model with its initializers replaced, and cannot
    be written without one (MD703). Other formats ignore it.

    ``before_commit`` runs once every tensor is written, before the file takes
    its name: an exception from it leaves no file behind either.
    """
    path = os.fspath(path)
    write = _prepared_writer(path, entries, fetch, metadata, template)  # refusals before any file exists
    with atomic_output(path) as file:
        write(file)
        if before_commit is not None:
            before_commit()


def write_entries(
    file: BinaryIO,
    path: str,
    entries: Sequence[tuple[str, Sequence[int], DType]],
    fetch: Fetch,
    metadata: Mapping[str, str] | None = None,
    template: str | os.PathLike[str] | None = None,
) -> None:
    """Write a checkpoint of the format ``path``'s extension names into an open ``file``, checked as
    :func:`write_checkpoint` checks (a model folder writes its shards so)."""
    _prepared_writer(path, entries, fetch, metadata, template)(file)


def writes_by_name(path: str) -> bool:
    """Whether the format of ``path`` writes bytes that depend on the file's name, so that a model folder
    has it create its file by path (:func:`write_named_entries`): PyTorch's, whose archive folder
    ``torch.save`` names after the file."""
    return hasattr(format_module(path), "write_named")


def write_named_entries(
    target: str,
    path: str,
    entries: Sequence[tuple[str, Sequence[int], DType]],
    fetch: Fetch,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write a checkpoint of the format ``path``'s extension names as a new file at ``target`` (a path in a
    folder of the caller's, ending in ``path``'s name), checked as :func:`write_checkpoint` checks."""
    module, checked_entries, checked_fetch, checked_metadata = _checked(path, entries, fetch, metadata, None)
    module.write_named(target, checked_entries, checked_fetch, checked_metadata)


def _prepared_writer(path, entries, fetch, metadata, template) -> Callable[[BinaryIO], None]:
    module, checked_entries, checked_fetch, checked_metadata = _checked(path, entries, fetch, metadata, template)
    return lambda file: module.write(file, checked_entries, checked_fetch, checked_metadata, template)


def _checked(path, entries, fetch, metadata, template):
    """(the format's module, the entries, a fetch and the metadata, each checked); refusals before any write."""
    module = format_module(path)
    checked_entries = _checked_entries(entries)
    checked_metadata = _checked_metadata(metadata)
    if getattr(module, "WRITES_FROM_TEMPLATE", False):
        module.check_writable(checked_entries, checked_metadata, path, template)
    else:
        module.check_writable(checked_entries, checked_metadata, path)
    shapes = {name: (shape, dt) for name, shape, dt in checked_entries}

    def checked_fetch(name: str) -> np.ndarray:
        shape, dt = shapes[name]
        return _canonical_fetched(fetch(name), name, shape, dt)

    return module, checked_entries, checked_fetch, checked_metadata


def save_checkpoint(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write in-memory tensors; names are sorted so the bytes do not depend on dict order."""
    entries: list[Entry] = []
    for name in sorted(tensors):
        array = tensors[name]
        entries.append((name, tuple(np.shape(array)), _dtype_or_value_error(array, name)))
    write_checkpoint(path, entries, lambda name: tensors[name], metadata)



# ------------------------------------------------- argument checks (writers)


def _dtype_or_value_error(array: object, name: str) -> DType:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"tensor {name!r} is a {type(array).__name__}, not a numpy array")
    try:
        return dtype_of(array)
    except KeyError:
        raise ValueError(f"tensor {name!r} has dtype {array.dtype}, which mdiff does not support") from None


def _checked_entries(entries: Sequence[tuple[str, Sequence[int], DType]]) -> CheckedEntries:
    checked: list[Entry] = []
    seen: set[str] = set()
    for name, shape, dt in entries:
        if type(shape) is tuple and type(name) is str and name not in seen and type(dt) is DType and name \
                and len(shape) <= MAX_RANK and all(type(d) is int and d >= 0 for d in shape) and is_valid_unicode(name):
            seen.add(name)  # the usual entry, taken as it is: what the checks below would make of it
            checked.append((name, shape, dt))
            continue
        if not is_valid_name(name):
            raise ValueError(f"tensor name {name!r} is not a non-empty, valid Unicode string")
        if name in seen:
            raise ValueError(f"tensor name {name!r} appears twice")
        if not isinstance(dt, DType):
            raise ValueError(f"dtype of tensor {name!r} is {dt!r}, not an mdiff DType")
        dims = _checked_dims(shape, name)
        if len(dims) > MAX_RANK:
            raise ValueError(f"tensor {name!r} has {len(dims)} dimensions; readers accept at most {MAX_RANK}")
        seen.add(name)
        checked.append((name, dims, dt))
    return CheckedEntries(checked)


def _checked_dims(shape: Sequence[int], name: str) -> tuple[int, ...]:
    # operator.index accepts numpy integers (shapes read from HDF5 are such), not floats.
    try:
        dims = tuple(operator.index(d) for d in shape if not isinstance(d, (bool, np.bool_)))
    except TypeError:
        dims = ()
    if len(dims) != len(shape) or any(d < 0 for d in dims):
        raise ValueError(f"shape of tensor {name!r} is {shape!r}, not non-negative integers")
    return dims


def _checked_metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    for key, value in metadata.items():
        if not (isinstance(key, str) and isinstance(value, str)):
            raise ValueError(f"metadata must map str to str; got {key!r}: {value!r}")
        if not (is_valid_unicode(key) and is_valid_unicode(value)):
            # a valid file's layout may carry one (an escaped lone surrogate): no checkpoint's UTF-8 holds it
            raise CheckpointError("MD703", f"metadata entry {key!r} is not valid Unicode (a lone surrogate): the "
                                           "checkpoint's UTF-8 text cannot hold it")
    # Sorted: the bytes written must not depend on the mapping's order.
    return {key: metadata[key] for key in sorted(metadata)}


def _canonical_fetched(array: object, name: str, shape: tuple[int, ...], dt: DType) -> np.ndarray:
    if type(array) is np.ndarray and array.dtype is dt.value and dt.kind != "bool" and array.shape == shape \
            and array.flags.c_contiguous:
        return array  # the usual result, as the checks below take it (10^5 small tensors: 0.2 s less)
    actual = _dtype_or_value_error(array, name)
    assert isinstance(array, np.ndarray)
    result: np.ndarray
    if actual.name != dt.name:
        raise ValueError(f"fetch({name!r}) returned dtype {actual.name}, the entry says {dt.name}")
    if tuple(array.shape) != shape:
        raise ValueError(f"fetch({name!r}) returned shape {array.shape}, the entry says {shape}")
    # astype, not ascontiguousarray: the latter turns 0-d arrays into 1-d.
    result = array.astype(dt.value, order="C", copy=False)
    if dt.kind == "bool" and result.size and int(result.view(np.uint8).max()) > 1:
        result = result.view(np.uint8) != 0  # a bool stored as 0x00/0x01 only
    return result
