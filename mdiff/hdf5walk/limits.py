"""SPEC.md §8.3: the limits a reader enforces before it reads any data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

# Deflate cannot expand data by more than ~1032:1; a chunk that claims more is hostile.
MAX_DEFLATE_RATIO = 1100


@dataclass(frozen=True)
class Limits:
    """Defaults suit models up to a few hundred billion parameters; pass stricter ones for untrusted files."""

    max_rank: int = 32
    max_elements: int = 2**36  # per dataset, counting a dimension of 0 as 1 (see extent)
    max_dataset_bytes: int = 2**38  # declared (decoded) bytes of one dataset: 256 GiB
    max_total_bytes: int = 2**40  # declared bytes of all datasets together: 1 TiB
    max_objects: int = 1_000_000  # groups + datasets
    max_depth: int = 32  # links from the root to any object (mdiff itself nests 3 deep)
    max_attribute_bytes: int = 2**20  # one attribute: 1 MiB
    max_function_bytes: int = 2**20  # one embedded ONNX function (§7.8): 1 MiB
    max_function_nodes: int = 256  # nodes of one embedded ONNX function
    max_function_constant_bytes: int = 2**20  # initializers and constants of one embedded function (§7.8 check 6)


DEFAULT_LIMITS = Limits()


def extent(shape: Iterable[int]) -> int:
    """The product of a shape's dimensions with every 0 counted as 1: what §8.3's element limit bounds.

    It equals the element count of every non-empty tensor, and bounds each dimension of an
    empty one too: numpy (and most runtimes) refuse a shape such as [0, 2**62] although it
    holds no element.
    """
    return math.prod(max(int(d), 1) for d in shape)


def shape_problem(shape: Iterable[int], itemsize: int, limits: Limits) -> tuple[str, str] | None:
    """(code, message) when a tensor of this shape breaks §8.3's limits (MD507 rank, MD508 elements
    or bytes, both counted by :func:`extent`), else None."""
    shape = [int(d) for d in shape]
    if len(shape) > limits.max_rank:
        return "MD507", f"rank {len(shape)} (limit {limits.max_rank})"
    elements = extent(shape)
    if elements > limits.max_elements or elements * itemsize > limits.max_dataset_bytes:
        zeros = " (a dimension of 0 counts as 1)" if 0 in shape else ""
        return "MD508", (f"shape {shape}: {elements} elements, {elements * itemsize} bytes{zeros} "
                         f"(limits {limits.max_elements} elements, {limits.max_dataset_bytes} bytes)")
    return None
