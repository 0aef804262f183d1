"""What every test shares: an environment without a committer, so that no test depends on the machine's
git configuration or $MDIFF_AUTHOR (tests that need one set it themselves), and a walk cache of its own
(mdiff/format/walk_cache.py), so that no test reads or fills the user's."""

from __future__ import annotations

import logging
import os

import pytest


@pytest.fixture(autouse=True)
def _no_committer_from_the_machine(monkeypatch):
    for name in ("MDIFF_AUTHOR", "MDIFF_AUTHOR_NAME", "MDIFF_AUTHOR_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_DIR", os.devnull)  # nor the checkout's own .git/config


@pytest.fixture(autouse=True)
def _mdiff_logger_as_it_was():
    """A command run in process configures the `mdiff` logger as the CLI does (its own handler, no propagation):
    each test starts with the logger as the library leaves it, so that caplog sees its records whatever ran before."""
    logger = logging.getLogger("mdiff")
    before = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = before[0], before[1], before[2]


@pytest.fixture(autouse=True)
def _walk_cache_of_its_own(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("MDIFF_CACHE_DIR", str(tmp_path_factory.mktemp("mdiff-cache")))


@pytest.fixture
def hashed_files(monkeypatch) -> list[int]:
    """The inode of each commit file a commit id is computed of, once per whole-file hash (both formats)."""
    from mdiff import block_ids
    from mdiff.repo import objects

    seen: list[int] = []
    of_fd, sha256_of = block_ids.of_fd, objects._sha256_of

    def counted_blocks(fd, length, keep_leaves=False):
        seen.append(os.fstat(fd).st_ino)
        return of_fd(fd, length, keep_leaves)

    def counted_sha256(fd, size):
        seen.append(os.fstat(fd).st_ino)
        return sha256_of(fd, size)

    monkeypatch.setattr(block_ids, "of_fd", counted_blocks)
    monkeypatch.setattr(objects, "_sha256_of", counted_sha256)
    return seen
