"""PyTorch state-dict files (``.pt``, ``.pth``, ``.bin``): a dict of name → tensor saved by ``torch.save``.

Reading never unpickles code. Files in torch's zip format (the default since PyTorch 1.6) are
read by :mod:`mdiff.checkpoints.torch_zip` without torch: their pickle is parsed by a machine
that knows only what a state dict holds, each tensor read from its storage's record when asked
for. Legacy non-zip files (and zip files written on a big-endian machine) are loaded with
``torch.load(weights_only=True)``, whose restricted unpickler builds only tensors, containers and
primitive values and refuses any other global; such a file is MD701 and nothing in it runs.
Legacy files cannot be memory-mapped and are read whole into memory by torch on open, storages
sized as the file claims.

Either way the object must be a flat ``dict``/``OrderedDict`` of ``str`` → dense CPU tensor, as
``torch.save(model.state_dict(), path)`` writes; anything else (a training checkpoint ``{"model":
..., "optimizer": ...}``, non-tensor values) is MD701, tensor dtypes outside SPEC.md §6.1 (complex,
float8, quantized ...) MD702. A tensor is read as exactly its own elements, also when it is a view
into a larger storage shared with other tensors; a tensor claiming more element bytes than its
storage holds (a broadcast view) is refused, so a read never allocates more than the file's
storage can back. Storage sharing (tied weights) is not preserved on write: each tensor gets its
own storage.

Writing is *not* streaming: ``torch.save`` needs the whole dict, so the writer fetches every tensor
first and holds the complete model in memory while it writes. Output is a plain ``dict`` (no
metadata: a non-empty metadata mapping is MD703) that ``torch.load(path, weights_only=True)``
reads, its tensors in the order of the entries. It is deterministic for this torch version:
torch's zip writer uses fixed timestamps, names records by storage order, and derives the
``.data/serialization_id`` record from the content (checked with torch 2.13). A single file is
written through a file object, so the archive's inner folder is always ``archive/`` rather than
derived from the file name; a model folder's shard is written by path (:func:`write_named`), so
that its folder is named after the file as ``torch.save(state, path)`` names it: the bytes
transformers 4's ``save_pretrained(safe_serialization=False)`` wrote for a shard of unshared tensors
with the same torch version (tests/test_checkouts.py). Other torch versions may write other bytes for
the same tensors.

PyTorch is an optional dependency, imported only to write these files or to read legacy ones:
``pip install 'mdiff[torch]'``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any, BinaryIO

import numpy as np

from mdiff.checkpoints.base import CheckpointReader, Entry, Fetch
from mdiff.checkpoints.reading import (
    MAX_RANK,
    element_count,
    is_valid_name,
    open_regular_file,
    refuse_invalid_bools,
)
from mdiff.checkpoints.torch_zip import HINT as _HINT
from mdiff.checkpoints.torch_zip import TorchUnsupported, TorchZipReader
from mdiff.errors import CheckpointError
from mdiff.format.dtypes import DType, dtype_named

# torch dtype attribute name → mdiff dtype name (the 13 of SPEC.md §6.1).
_DTYPE_NAMES = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
}

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTOCOL = b"\x80"  # the PROTO opcode every pickle of protocol 2 or later starts with (torch.save's: 2)
_TAR_MAGIC_END = 262  # "ustar" at bytes 257–261: the tar archives of torch before 0.4


def _import_torch() -> ModuleType:
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            "MD700",
            "writing .pt/.pth/.bin files (or reading one in the legacy, pre-1.6 format) needs PyTorch, which is not "
            "installed: pip install 'mdiff[torch]'",
        ) from None
    return torch


def _torch_dtypes(torch: ModuleType) -> dict[Any, DType]:
    # getattr: a torch older than 2.3 has no uint16/uint32/uint64.
    return {
        getattr(torch, attr): dtype_named(name) for attr, name in _DTYPE_NAMES.items() if hasattr(torch, attr)
    }


class TorchReader(CheckpointReader):
    """A legacy ``torch.save`` state dict, loaded with ``weights_only=True``; tensors converted on demand."""

    def __init__(self, path: str):
        self.path = path
        torch = _import_torch()
        tensors, self._specs = _validated(torch, _load(torch, path), path)
        self._tensors: dict[str, Any] | None = tensors
        self._order = list(tensors)

    def _index(self) -> dict[str, _Spec]:
        return self._specs

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        return self._entry(name)

    def read(self, name: str) -> np.ndarray:
        shape, dt = self.spec(name)
        if self._tensors is None:
            raise ValueError(f"the reader of {self.path} is closed")
        array = tensor_to_numpy(self._tensors[name], dt)
        if array.shape != shape:  # cannot happen; cheap insurance against a torch surprise
            raise CheckpointError("MD701", f"tensor {name!r} changed shape while read", self.path)
        refuse_invalid_bools(array, self.path, name)
        return array

    @property
    def order(self) -> list[str]:
        """The tensor names in the order the state dict holds them."""
        return list(self._order)

    @property
    def metadata(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        self._tensors = None  # drops the memory map once no read array refers to it


def tensor_to_numpy(tensor: Any, dt: DType | None = None) -> np.ndarray:
    """A torch tensor as a fresh C-ordered numpy array of the same bits (bfloat16 included)."""
    torch = _import_torch()
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg()
    dt = dt or _torch_dtypes(torch)[tensor.dtype]
    if dt.name == "bfloat16":
        # numpy has no bfloat16: reinterpret the bits, never convert values.
        view = tensor.view(torch.int16).numpy().view(dt.value)
    else:
        view = tensor.numpy()
    # A copy in C order: exactly this tensor's elements, independent of the
    # (possibly shared, memory-mapped) storage and of the reader's lifetime.
    return np.array(view, dtype=dt.value, order="C", copy=True)


def torch_dtype(tensor: Any, name: str = "") -> DType:
    """The mdiff dtype of a torch tensor; TypeError for a dtype outside SPEC.md §6.1."""
    dt = _torch_dtypes(_import_torch()).get(tensor.dtype)
    if dt is None or tensor.is_quantized:
        raise TypeError(f"tensor {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}, which mdiff does not "
                        f"support; convert it to one of {', '.join(_DTYPE_NAMES)}")
    return dt


def numpy_to_tensor(array: np.ndarray) -> Any:
    """A numpy array (bfloat16 as ml_dtypes) as a torch tensor sharing its memory."""
    from mdiff.format.dtypes import canonical, dtype_of

    array = canonical(array)
    return _to_tensor(_import_torch(), array, dtype_of(array))


def open_reader(path: str) -> CheckpointReader:
    """A zip-format file read without torch (torch_zip); a legacy one, or one torch_zip leaves to torch, loaded by torch."""
    with open_regular_file(path) as file:  # a missing file stays OSError; a FIFO is MD701 without blocking
        magic = file.read(len(_ZIP_MAGIC))
    if magic == _ZIP_MAGIC:
        try:
            return TorchZipReader(path)
        except TorchUnsupported:
            pass
    return TorchReader(path)


# ---------------------------------------------------------------- reading


def _load(torch: ModuleType, path: str) -> Any:
    # Our own open first: a missing file stays OSError, a FIFO or directory is
    # MD701 without blocking, and the magic decides whether mmap is possible.
    with open_regular_file(path) as file:
        start = file.read(_TAR_MAGIC_END)
    magic = start[:len(_ZIP_MAGIC)]
    name = os.path.basename(path) or path
    if not magic:
        raise CheckpointError("MD701", f"{name} is not a PyTorch checkpoint (it is empty)", path)
    if magic != _ZIP_MAGIC and magic[:1] != _PICKLE_PROTOCOL and start[_TAR_MAGIC_END - 5:] != b"ustar":
        raise CheckpointError("MD701", f"{name} is not a PyTorch checkpoint (neither a zip archive nor a pickle, "
                                       "as torch.save writes)", path)
    # Legacy (pre-1.6, non-zip) files cannot be memory-mapped; torch says so
    # in a RuntimeError, but the magic tells the same without parsing messages.
    mmap = magic == _ZIP_MAGIC
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. TypedStorage deprecation for quantized tensors
            return torch.load(path, weights_only=True, mmap=mmap, map_location="cpu")
    except MemoryError:
        raise
    except Exception as exc:  # whatever torch raises on a corrupt or hostile file; not BaseException
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # an operating-system error, not about the contents
        raise CheckpointError("MD701", _load_error_message(exc), path) from None


def _load_error_message(exc: Exception) -> str:
    text = str(exc)
    if "Weights only load failed" in text or "weights_only" in text:
        # torch's message suggests weights_only=False, i.e. running the file's code: do not repeat it.
        first = next((line for line in text.splitlines() if "Unsupported" in line or "GLOBAL" in line), "")
        detail = f" ({first.strip()[:300]})" if first else ""
        return (
            "the file holds pickled objects other than tensors and containers, which mdiff never "
            f"unpickles{detail}; {_HINT}"
        )
    return f"not a PyTorch checkpoint torch can read ({type(exc).__name__}: {text[:300]})"


_Spec = tuple[tuple[int, ...], DType]


def _validated(torch: ModuleType, state: Any, path: str) -> tuple[dict[str, Any], dict[str, _Spec]]:
    if not isinstance(state, dict):
        raise CheckpointError(
            "MD701", f"the file holds a {type(state).__name__}, not a dict of tensors; {_HINT}", path
        )
    dtypes = _torch_dtypes(torch)
    tensors: dict[str, Any] = {}
    specs: dict[str, _Spec] = {}
    for key, value in state.items():
        if not is_valid_name(key):
            raise CheckpointError(
                "MD701", f"key {key!r} is not a tensor name (a non-empty string); {_HINT}", path
            )
        if not isinstance(value, torch.Tensor):
            found = "a nested dict" if isinstance(value, dict) else f"a {type(value).__name__}"
            raise CheckpointError(
                "MD701",
                f"entry {key!r} is {found}, not a tensor; a full training checkpoint is not a "
                f"state dict: {_HINT}",
                path,
            )
        specs[key] = _tensor_spec(torch, dtypes, value, key, path)
        tensors[key] = value
    return tensors, specs


def _tensor_spec(torch: ModuleType, dtypes: dict[Any, DType], tensor: Any, name: str, path: str) -> _Spec:
    if tensor.is_quantized or tensor.dtype not in dtypes:
        raise CheckpointError(
            "MD702",
            f"tensor {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}, which mdiff does not "
            f"support; convert it to one of {', '.join(_DTYPE_NAMES)}",
            path,
        )
    if tensor.layout != torch.strided:
        raise CheckpointError(
            "MD701", f"tensor {name!r} has layout {tensor.layout}; only dense tensors are supported (to_dense())", path
        )
    if tensor.device.type != "cpu":  # meta tensors hold no data; map_location moved the rest
        raise CheckpointError(
            "MD701", f"tensor {name!r} is on device {tensor.device} and holds no readable data", path
        )
    dt = dtypes[tensor.dtype]
    shape = tuple(int(d) for d in tensor.shape)
    if len(shape) > MAX_RANK:
        raise CheckpointError(
            "MD701", f"tensor {name!r} has {len(shape)} dimensions; at most {MAX_RANK} are supported", path
        )
    nbytes = element_count(shape) * dt.itemsize
    if nbytes > tensor.untyped_storage().nbytes():
        raise CheckpointError(
            "MD701",
            f"tensor {name!r} claims {nbytes} bytes of elements but its storage holds "
            f"{tensor.untyped_storage().nbytes()} (a broadcast view); save tensor.contiguous() instead",
            path,
        )
    return shape, dt


# ---------------------------------------------------------------- writing


def check_writable(entries: Sequence[Entry], metadata: dict[str, str] | None, path: str) -> None:
    torch = _import_torch()
    if metadata:
        raise CheckpointError(
            "MD703", "a PyTorch state dict cannot hold metadata; write .safetensors to keep it, or drop it", path
        )
    dtypes = {dt.name for dt in _torch_dtypes(torch).values()}
    for name, _, dt in entries:
        if dt.name not in dtypes:
            raise CheckpointError(
                "MD703", f"tensor {name!r} is {dt.name}, which this PyTorch version cannot store", path
            )


def write(
    file: BinaryIO,
    entries: Sequence[Entry],
    fetch: Fetch,
    metadata: dict[str, str] | None,
    template: str | os.PathLike[str] | None = None,
) -> None:
    """Fetch every tensor, then ``torch.save`` the dict (the whole model is in memory)."""
    del metadata, template  # refused by check_writable / not used by this format
    torch = _import_torch()
    # A file object, not a path: torch would name the archive's folder after the file.
    torch.save(_state(torch, entries, fetch), file)


def write_named(target: str, entries: Sequence[Entry], fetch: Fetch, metadata: dict[str, str] | None) -> None:
    """As :func:`write`, into a new file at ``target``, by path: torch names the archive's folder after it, as
    ``torch.save(state_dict, path)`` does (a model folder's ``.bin`` files, so that they come back as written)."""
    del metadata  # refused by check_writable
    torch = _import_torch()
    torch.save(_state(torch, entries, fetch), target)


def _state(torch: ModuleType, entries: Sequence[Entry], fetch: Fetch) -> dict[str, Any]:
    """Every tensor fetched, in the entries' order: a plain dict, as transformers' save_pretrained saved its shards."""
    return {name: _to_tensor(torch, fetch(name), dt) for name, _, dt in entries}


def _to_tensor(torch: ModuleType, array: np.ndarray, dt: DType) -> Any:
    with warnings.catch_warnings():
        # A read-only array (e.g. memory-mapped input): torch.save only reads it.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        # Through a flat view: numpy's strides of empty arrays and of size-1 dimensions
        # vary with how an array was made, torch records them, and the bytes must not.
        flat = array.reshape(-1)  # a view: the array is C-contiguous
        if dt.name == "bfloat16":
            tensor = torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(flat)
        return tensor.view(array.shape)
