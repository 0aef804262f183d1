"""Where a dataset's bytes lie (SPEC.md §8.3): the storage plan the walk records for each dataset it accepts.

A contiguous dataset is one run of bytes at an offset; a chunked one is its chunks (each where its stored
bytes start, and how many) and its filter pipeline. The walk checks that the chunks cover the dataset
exactly once (:func:`coverage_problem`, MD509) before it records a plan; a reader then reads the bytes
itself (mdiff's chunk_reader.py), never through libhdf5's filter pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FILTER_DEFLATE, FILTER_SHUFFLE, FILTER_FLETCHER32 = 1, 2, 3  # HDF5 filter ids (§8.2's allowlist)
Filters = Iterable[tuple[int, tuple[int, ...]]]  # (filter id, client data) of each step, in pipeline order


@dataclass(frozen=True)
class Chunk:
    offset: tuple[int, ...]  # the chunk's first element, in dataset coordinates
    byte_offset: int  # where its stored bytes start in the file
    size: int  # how many bytes are stored


@dataclass(frozen=True)
class StoragePlan:
    """Where a dataset's bytes lie and how to decode them: contiguous, or chunked with its filters."""

    contiguous_offset: int | None = None
    chunk_shape: tuple[int, ...] | None = None
    chunks: tuple[Chunk, ...] = ()
    filters: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (filter id, client data), pipeline order

    @staticmethod
    def contiguous_at(offsets: Iterable[int]) -> list[StoragePlan]:
        """A contiguous plan for each offset, made in bulk (an isolated child's walk of 10^5 datasets): each as
        ``StoragePlan(offset)`` would make it, without a frozen dataclass's four ``object.__setattr__`` calls."""
        new, set_dict, rest = object.__new__, object.__setattr__, {"chunk_shape": None, "chunks": (), "filters": ()}
        plans = []
        for offset in offsets:
            plan = new(StoragePlan)
            set_dict(plan, "__dict__", {"contiguous_offset": offset, **rest})
            plans.append(plan)
        return plans


def plan_for(shape: Sequence[int], itemsize: int, contiguous_offset: int | None = None,
             chunk_shape: Sequence[int] | None = None, chunks: Iterable[Chunk] = (), filters: Filters = ()) -> StoragePlan | None:
    """The plan for a contiguous dataset, or for a chunked one whose chunks passed
    :func:`coverage_problem`; None when there is nothing to plan (a chunked scalar)."""
    if contiguous_offset is not None:
        return StoragePlan(contiguous_offset=int(contiguous_offset))
    if chunk_shape is None or not shape:
        return None
    return StoragePlan(chunk_shape=tuple(int(c) for c in chunk_shape), chunks=tuple(chunks), filters=tuple(filters))


def coverage_problem(shape: Sequence[int], chunk_shape: Sequence[int], chunks: Iterable[Chunk]) -> str | None:
    """Why a dataset's chunks do not cover it exactly once (MD509), or None.

    Each chunk must start on a multiple of the chunk shape inside the dataset, and each such place
    must hold exactly one chunk: libhdf5 would read a missing chunk as fill values and one of two
    chunks at the same place silently."""
    shape, chunk_shape = tuple(shape), tuple(chunk_shape)
    if not shape or len(chunk_shape) != len(shape) or any(c < 1 for c in chunk_shape):
        return f"chunks of shape {list(chunk_shape)} for a dataset of shape {list(shape)}"
    seen: set[tuple[int, ...]] = set()
    for chunk in chunks:
        place = chunk.offset
        if len(place) != len(shape) or any(o % k or not 0 <= o < d for o, k, d in zip(place, chunk_shape, shape)):
            return f"a chunk at {list(place)} does not start on the chunk grid inside the dataset"
        if place in seen:
            return f"two chunks at {list(place)}"
        seen.add(place)
    expected = math.prod(math.ceil(d / c) for d, c in zip(shape, chunk_shape))
    if len(seen) != expected:
        return f"{len(seen)} of {expected} chunks are stored"
    return None
