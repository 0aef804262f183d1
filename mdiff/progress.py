"""Progress, as the library reports it: ``progress(item, done_bytes, total_bytes)`` after each item
(a parameter, a commit file) is done. The library never draws anything; the command line turns
these calls into a bar with rate and ETA (mdiff/cli/progress.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Progress = Callable[[str, int, int], None]


def tensor_bytes(state: Mapping[str, Any], name: str) -> int:
    """Bytes of tensor ``name`` of a state — from its spec where the state has one (no data read)."""
    spec = getattr(state, "spec", None)
    if spec is not None:
        shape, dt = spec(name)
        return math.prod(shape) * dt.itemsize
    return int(getattr(state[name], "nbytes", 0))


class ByteCounter:
    """Calls ``progress`` with the bytes done so far as each item completes."""

    def __init__(self, progress: Progress | None, sizes: Mapping[str, int] | Iterable[tuple[str, int]]):
        self.progress = progress
        self.sizes = dict(sizes)
        self.total = sum(self.sizes.values())
        self.done = 0

    def __call__(self, item: str) -> None:
        if self.progress is not None:
            self.done += self.sizes.get(item, 0)
            self.progress(item, self.done, self.total)
