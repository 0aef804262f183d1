"""Tensors from the frameworks users hold them in: numpy arrays, and PyTorch tensors (on any device,
any dtype of SPEC.md §6.1 — bfloat16 included — non-contiguous, sharing storage), converted to numpy
one at a time and bit for bit; and states given back as torch tensors where asked.

PyTorch is never imported here unless a torch tensor is handed in or torch output is asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from mdiff.format.dtypes import DType, dtype_of

FRAMEWORKS = ("np", "pt")


def is_torch_tensor(value: object) -> bool:
    """Whether ``value`` is a torch.Tensor — told without importing torch."""
    module = type(value).__module__
    return (module == "torch" or module.startswith("torch.")) and hasattr(value, "untyped_storage")


def as_numpy(value: Any, name: str = "") -> np.ndarray:
    """``value`` as a numpy array of the same bits: a torch tensor is copied to a fresh C-ordered
    array (from any device); a numpy array is returned as it is."""
    if isinstance(value, np.ndarray):
        return value
    if is_torch_tensor(value):
        from mdiff.checkpoints.torch_pt import tensor_to_numpy

        return tensor_to_numpy(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    raise TypeError(f"tensor {name!r} is a {type(value).__name__}, not a numpy array or a torch tensor")


class NumpyView(Mapping[str, np.ndarray]):
    """A state dict of numpy arrays or torch tensors, seen as numpy arrays; each value is converted when read."""

    def __init__(self, state: Mapping[str, Any]):
        for key in state:
            if not isinstance(key, str):
                raise TypeError(f"state dict key {key!r} is not a string")
        self._state = state

    def __getitem__(self, name: str) -> np.ndarray:
        return as_numpy(self._state[name], name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __contains__(self, name: object) -> bool:
        return name in self._state

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        """Shape and dtype, without converting the tensor."""
        value = self._state[name]
        if is_torch_tensor(value):
            from mdiff.checkpoints.torch_pt import torch_dtype

            return tuple(int(d) for d in value.shape), torch_dtype(value, name)
        array = as_numpy(value, name)
        try:
            return tuple(array.shape), dtype_of(array)
        except KeyError:
            raise TypeError(f"tensor {name!r} has dtype {array.dtype}, which mdiff does not support") from None


def numpy_state(state: Mapping[str, Any]) -> Mapping[str, np.ndarray]:
    """``state`` seen as numpy arrays (no copy for numpy values; torch values converted on access)."""
    return state if isinstance(state, NumpyView) else NumpyView(state)


def framework_of(state: Mapping[str, Any]) -> str:
    """"pt" when ``state`` holds torch tensors, else "np"."""
    for value in state.values():
        return "pt" if is_torch_tensor(value) else "np"
    return "np"


def check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, not {framework!r}")


def to_framework(array: np.ndarray, framework: str) -> Any:
    """A numpy array as ``framework`` holds it: itself for "np"; a CPU torch tensor of the same bits for
    "pt" (sharing the array's memory)."""
    if framework == "np":
        return array
    check_framework(framework)
    from mdiff.checkpoints.torch_pt import numpy_to_tensor

    if not array.flags.writeable:  # torch would warn, and the state it returns is the caller's to train
        array = array.copy()
    return numpy_to_tensor(array)
