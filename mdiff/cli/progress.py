"""A progress bar on stderr, in bytes with rate and ETA (tqdm), for work the library reports as
``progress(item, done_bytes, total_bytes)``; silent when stderr is not a terminal or with -q."""

from __future__ import annotations

import sys
import argparse
from typing import Any, TextIO


class ProgressBar:
    """``with ProgressBar.of(args, "commit") as bar:`` — a command's bar, closed however the command ends."""

    def __init__(self, label: str, enabled: bool | None = None, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self._bar: Any = None

    def __call__(self, item: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from tqdm import tqdm  # only when there is a bar to draw: start-up stays quick

            self._bar = tqdm(total=total, desc=self.label, unit="B", unit_scale=True, unit_divisor=1000,  # kB, MB: as words.format_size
                             file=self.stream, leave=False, dynamic_ncols=True, mininterval=0.2)
        if total != self._bar.total:
            self._bar.total = total
        self._bar.set_postfix_str(item if len(item) <= 40 else "…" + item[-39:], refresh=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    @classmethod
    def of(cls, args: argparse.Namespace, label: str) -> ProgressBar:
        """The bar of a command run with ``args``: none with -q, else where stderr is a terminal."""
        return cls(label, enabled=False if getattr(args, "quiet", False) else None)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
