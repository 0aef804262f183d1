"""A usage error: the command line itself is wrong (exit status 2)."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    def __init__(self, message: str, parser: argparse.ArgumentParser | None = None):
        super().__init__(message)
        self.message = message
        self.usage = parser.format_usage() if parser is not None else None
