"""SPEC.md §12's validation table where the format's readers and tools have always found it: ``Rule``
and ``RULES``, defined in mdiff/rules.py (below errors.py, which checks every error's code)."""

from __future__ import annotations

from mdiff.rules import RULES as RULES
from mdiff.rules import Rule as Rule
