"""SPEC.md §8.3: the limits a reader enforces before it reads any data."""

from __future__ import annotations

from dataclasses import dataclass

# Deflate cannot expand data by more than ~1032:1; a chunk that claims more is hostile.
MAX_DEFLATE_RATIO = 1100


@dataclass(frozen=True)
class Limits:
    """Defaults suit models up to a few hundred billion parameters; pass stricter ones for untrusted files."""

    max_rank: int = 32
    max_elements: int = 2**36  # per dataset
    max_dataset_bytes: int = 2**38  # declared (decoded) bytes of one dataset: 256 GiB
    max_total_bytes: int = 2**40  # declared bytes of all datasets together: 1 TiB
    max_objects: int = 1_000_000  # groups + datasets
    max_attribute_bytes: int = 2**20  # one attribute: 1 MiB
    max_function_bytes: int = 2**20  # one embedded ONNX function (§7.8): 1 MiB
    max_function_nodes: int = 256  # nodes of one embedded ONNX function


DEFAULT_LIMITS = Limits()
