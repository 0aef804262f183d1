"""Files synced on another thread while they are written (threads.Writeback) come out whole and
identical to files written without it; a failed write still leaves nothing behind."""

from __future__ import annotations

import numpy as np
import pytest

import mdiff
from mdiff import threads
from mdiff.checkpoints import load_checkpoint, save_checkpoint


@pytest.fixture
def syncs(monkeypatch):
    """Writeback every 4 KiB, counting the syncs that ran."""
    count = []
    original = threads.Writeback.__init__

    def small(self, sync, every=64 << 20):
        def counted():
            count.append(1)
            sync()
        original(self, counted, 4096)

    monkeypatch.setattr(threads.Writeback, "__init__", small)
    return count


def _state(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"p{i}": rng.standard_normal((64, 33)).astype(np.float32) for i in range(12)}


def test_diffs_and_checkpoints_written_with_writeback_are_identical(tmp_path, syncs):
    old, new = _state(1), _state(2)
    for compression in ("none", "gzip"):
        mdiff.write(tmp_path / f"a-{compression}.mdiff", mdiff.diff(old, new), mdiff.Commit("m", date="2026-01-01T00:00:00Z"), compression)
    save_checkpoint(tmp_path / "a.safetensors", new)
    save_checkpoint(tmp_path / "a.npz", new)
    # the syncs did run while writing: at least one per file (the first is never skipped: none is running
    # yet); later ones are skipped while one is in flight, and deflate tasks share the pool with them
    assert len(syncs) >= 4
    with pytest.MonkeyPatch.context() as plain:
        plain.setattr(threads.Writeback, "wrote", lambda self, n, flush=None: None)
        for compression in ("none", "gzip"):
            mdiff.write(tmp_path / f"b-{compression}.mdiff", mdiff.diff(old, new), mdiff.Commit("m", date="2026-01-01T00:00:00Z"), compression)
        save_checkpoint(tmp_path / "b.safetensors", new)
    for compression in ("none", "gzip"):
        assert (tmp_path / f"a-{compression}.mdiff").read_bytes() == (tmp_path / f"b-{compression}.mdiff").read_bytes()
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    loaded = load_checkpoint(tmp_path / "a.npz")
    assert all(loaded[k].tobytes() == new[k].tobytes() for k in new)


def test_a_failed_checkpoint_write_leaves_nothing_even_with_a_sync_in_flight(tmp_path, syncs):
    from mdiff.checkpoints import write_checkpoint
    from mdiff.format.dtypes import DTYPES

    # tensors of 128 KiB: each written from its own buffer (smaller ones are gathered into a megabyte, and a write
    # failing before the first would leave no sync to be in flight)
    rng = np.random.default_rng(3)
    state = {f"p{i}": rng.standard_normal((256, 128)).astype(np.float32) for i in range(12)}
    entries = [(name, (256, 128), DTYPES["float32"]) for name in sorted(state)]

    def fetch(name):
        if name == "p7":
            raise RuntimeError("the source failed")
        return state[name]

    with pytest.raises(RuntimeError):
        write_checkpoint(tmp_path / "out.safetensors", entries, fetch)
    assert syncs and list(tmp_path.iterdir()) == []
