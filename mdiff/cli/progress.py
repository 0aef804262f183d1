"""A progress bar on stderr for long work; silent when stderr is not a terminal or with --quiet."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, label: str, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label = label
        self._last = 0.0
        self._shown = False

    def __call__(self, item: str, index: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and index + 1 < total):
            return
        self._last = now
        width = 30
        filled = width * (index + 1) // max(total, 1)
        name = item if len(item) <= 40 else "…" + item[-39:]
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {index + 1}/{total} {name:<40}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
