"""Repositories of .mdiff commits (SPEC.md §13): version control for model weights."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mdiff.repo.repository import Repository


def __getattr__(name: str) -> Any:
    if name == "Repository":  # imported on first use: `mdiff --help` needs none of it
        from mdiff.repo.repository import Repository

        return Repository
    raise AttributeError(f"module 'mdiff.repo' has no attribute {name!r}")


__all__ = ["Repository"]
