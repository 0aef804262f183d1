"""The contract a checkpoint format implements: the lazy :class:`CheckpointReader`, and the
:data:`Entry` and :data:`Fetch` its writer is given."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from mdiff.format.dtypes import DType
from mdiff.format.layout import Layout

Entry = tuple[str, tuple[int, ...], DType]


class CheckedEntries(tuple):
    """The entries of one write, as checkpoints/writing.py checked them: immutable, so that what a format works out
    of them in its ``check_writable`` (its header, say) may be kept in :attr:`derived` for its ``write`` — bound to
    this write alone, never shared with another."""

    derived: dict[str, object]

    def __new__(cls, entries: "Sequence[Entry]") -> "CheckedEntries":
        made = super().__new__(cls, entries)
        made.derived = {}
        return made
_Reader = TypeVar("_Reader", bound="CheckpointReader")
Fetch = Callable[[str], np.ndarray]


class CheckpointReader(Mapping):
    """A checkpoint file opened for reading; use as a context manager.

    It is a read-only mapping of name → array in which each access reads that one
    tensor. A reader holds one file position, so it is not safe to share between threads.
    """

    path: str

    @abc.abstractmethod
    def _index(self) -> Mapping[str, object]:
        """Name → whatever the format keeps per tensor (ValueError once closed)."""

    def keys(self) -> list[str]:  # type: ignore[override]  # a sorted list: what every caller wants
        """Tensor names, sorted by Python string order."""
        return sorted(self._index())

    def _entry(self, name: str):
        try:
            return self._index()[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in {self.path}") from None

    def spec(self, name: str) -> tuple[tuple[int, ...], DType]:
        """Shape and dtype of tensor ``name``, without reading its data: by default its entry's ``shape`` and
        ``dtype`` (a format whose entries keep them otherwise says so)."""
        entry = self._entry(name)
        return entry.shape, entry.dtype

    def specs(self) -> dict[str, tuple[tuple[int, ...], DType]]:
        """:meth:`spec` of every tensor, by name in :meth:`keys`' order (10^5 tensors: one pass over the index, not
        a look-up and a call a name)."""
        if type(self).spec is not CheckpointReader.spec:  # a format that keeps them otherwise
            return {name: self.spec(name) for name in self.keys()}
        index: Mapping[str, Any] = self._index()
        specs = {}
        for name in self.keys():
            entry = index[name]
            specs[name] = entry.shape, entry.dtype
        return specs

    @abc.abstractmethod
    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a C-contiguous array of dtype ``spec(name)[1].value``."""

    def read_many(self, names: Sequence[str]) -> list[np.ndarray]:
        """:meth:`read` of each of ``names``, in order (a format may read neighbours together)."""
        return [self.read(name) for name in names]

    def read_joined(self, names: Sequence[str]) -> np.ndarray:
        """The bytes of the tensors ``names``, as :meth:`read` gives them, one after another in one uint8 array
        (a run of small parameters applied together: applying._Batch; a format may read them with one read)."""
        arrays = [array.reshape(-1).view(np.uint8) for array in self.read_many(names)]
        return np.concatenate(arrays) if arrays else np.empty(0, np.uint8)

    @property
    @abc.abstractmethod
    def metadata(self) -> dict[str, str]:
        """The file's free-form string metadata (empty where the format has none)."""

    @property
    def files(self) -> Mapping[str, bytes] | None:
        """The files beside the weights, by path (SPEC.md §5.5) — for a model folder; None for a
        checkpoint that says nothing about files (a single file): a commit of it keeps them as they are."""
        return None

    @property
    def layout(self) -> Layout | None:
        """How the weights are laid out as files (SPEC.md §5.6), where the format has one; else None."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Release the file; further reads fail."""

    def __getitem__(self, name: str) -> np.ndarray:
        return self.read(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index()

    def __len__(self) -> int:
        return len(self._index())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __enter__(self: _Reader) -> _Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
