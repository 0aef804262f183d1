"""Repositories of .mdiff commits (SPEC.md §13): version control for model weights."""

from mdiff.repo.repository import Repository

__all__ = ["Repository"]
