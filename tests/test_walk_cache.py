"""The walk cache (mdiff/format/walk_cache.py, SPEC.md §13.2): a commit file's isolated structure walk is
kept outside the repository under the commit id, and used for a file whose bytes hash to that id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import platformdirs
import pytest

import mdiff
from mdiff.errors import RepositoryError
from mdiff.format import reader
from mdiff.hdf5walk.limits import DEFAULT_LIMITS, Limits
from mdiff.format import walk_cache
from mdiff.format.walk_cache import ENV, WalkCache
from mdiff.isolation import isolation_supported

pytestmark = pytest.mark.skipif(not isolation_supported(), reason="walks are made by isolated children (POSIX fork)")

DATE = "2026-05-01T00:00:00Z"


def _repository(tmp_path: Path) -> tuple[Path, list[str]]:
    root = tmp_path / "repo"
    repo = mdiff.Repository.init(root)
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    ids = [repo.commit({"w": w, "b": np.ones(8, np.float32)}, "root", date=DATE)]
    w = w.copy()
    w[0, :3] += 1
    ids.append(repo.commit({"w": w, "b": np.ones(8, np.float32)}, "second", date=DATE))
    return root, ids


def _entries(folder: Path) -> dict[str, Path]:
    return {p.stem: p for p in folder.glob("walks/*/*/*.walk")}


MAGIC = b"mdiff walk 1\n"  # then the 32-byte seal, then the child's compact answer


@pytest.fixture
def children(monkeypatch):
    """Counts the walks asked of an isolated child."""
    calls: list[str] = []
    real = reader.shared_worker

    class Counting:
        def __init__(self, worker):
            self._worker = worker

        def call(self, task, fd, path, *args):
            calls.append(task)
            return self._worker.call(task, fd, path, *args)

    monkeypatch.setattr(reader, "shared_worker", lambda isolation: Counting(real(isolation)))
    return calls


def test_a_checkout_walks_each_commit_once_and_then_reads_by_the_kept_walks(tmp_path, monkeypatch, children):
    cache = tmp_path / "cache"
    monkeypatch.setenv(ENV, str(cache))
    root, ids = _repository(tmp_path)
    first = mdiff.Repository(root).checkout("HEAD")
    assert children == ["vet", "vet"] and set(_entries(cache)) == set(ids)
    entry = _entries(cache)[ids[1]].read_bytes()
    assert entry.startswith(MAGIC)  # the child's compact answer, as its bytes, behind the magic line and the seal
    walk = entry[len(MAGIC) + 32:]
    assert reader.Vetted.from_wire(walk).findings == []
    assert WalkCache(cache).get_walk(ids[1], DEFAULT_LIMITS) == walk
    again = mdiff.Repository(root).checkout("HEAD")  # a new process's repository would do the same
    assert children == ["vet", "vet"]
    assert set(first) == set(again) == {"w", "b"} and all(np.array_equal(first[k], again[k]) for k in first)


def test_the_commit_is_hashed_before_a_kept_walk_is_used(tmp_path, monkeypatch, children):
    """A file under a commit's name whose bytes are another's is MD800, kept walk or not."""
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    root, ids = _repository(tmp_path)
    mdiff.Repository(root).checkout("HEAD")
    commits = root / ".mdiff" / "commits"
    (commits / f"{ids[1]}.mdiff").write_bytes((commits / f"{ids[0]}.mdiff").read_bytes())
    with pytest.raises(RepositoryError) as excinfo:
        mdiff.Repository(root).checkout("HEAD")
    assert excinfo.value.code == "MD800"


def _flip_last(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [
    pytest.param(lambda p: p.write_text("{not a walk"), id="garbage"),
    pytest.param(lambda p: p.write_bytes(MAGIC + bytes(32) + b"\x00" * 64), id="not-a-walk"),
    pytest.param(lambda p: p.write_bytes(p.read_bytes()[:len(MAGIC) + 40]), id="cut-short"),
    pytest.param(lambda p: p.write_bytes(b"mdiff walk 2\n" + p.read_bytes()[len(MAGIC):]), id="another-magic"),
    pytest.param(lambda p: p.unlink(), id="missing"),
    pytest.param(_flip_last, id="edited-under-its-seal"),
])
def test_a_damaged_or_missing_entry_is_walked_again_and_kept_anew(tmp_path, monkeypatch, children, damage):
    cache = tmp_path / "cache"
    monkeypatch.setenv(ENV, str(cache))
    root, ids = _repository(tmp_path)
    mdiff.Repository(root).checkout("HEAD")
    kept = _entries(cache)[ids[1]]
    good = kept.read_bytes()
    damage(kept)
    mdiff.Repository(root).checkout("HEAD")
    assert children == ["vet", "vet", "vet"]
    assert kept.read_bytes() == good


def test_another_commit_s_walk_under_this_id_is_not_believed(tmp_path, monkeypatch, children):
    """Issue 31: a walk is a statement about bytes that cannot be checked without walking them again; relabelled
    from another commit (its id and all, well-formed), it was used, and the checkout failed untyped. Walks
    are sealed with the cache's own key (mode 0600, the user's): an entry that this user's mdiff did not
    write for this id is walked again."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(ENV, str(cache))
    root, ids = _repository(tmp_path)
    want = mdiff.Repository(root).checkout("HEAD")
    entries = _entries(cache)
    entries[ids[1]].write_bytes(entries[ids[0]].read_bytes())  # well-formed and sealed, but for the other id
    got = mdiff.Repository(root).checkout("HEAD")
    assert children == ["vet", "vet", "vet"] and all(np.array_equal(want[k], got[k]) for k in want)
    assert oct((cache / "key").stat().st_mode & 0o777) == "0o600"


def test_other_limits_are_another_key(tmp_path):
    cache = WalkCache(tmp_path)
    cache.put_walk("a" * 64, DEFAULT_LIMITS, b"the walk's bytes")
    assert cache.get_walk("a" * 64, DEFAULT_LIMITS) == b"the walk's bytes"
    assert cache.get_walk("a" * 64, Limits(max_objects=DEFAULT_LIMITS.max_objects + 1)) is None
    assert cache.get_walk("b" * 64, DEFAULT_LIMITS) is None
    assert cache.get_walk("../" + "a" * 61, DEFAULT_LIMITS) is None  # only a commit id names an entry


def test_a_walk_is_kept_up_to_a_size_that_grows_with_the_limits(tmp_path):
    """Issue 31: walks were base64 in JSON under a fixed 64 MiB cap, which a walk of ~1.3x10^5 parameters passed.
    The bytes are kept as they are, up to 512 bytes an object the limits admit (512 MB by default)."""
    cache = WalkCache(tmp_path)
    small = Limits(max_objects=1000)  # 64 MiB at the least
    assert walk_cache._walk_limit(small) == 64 << 20
    assert walk_cache._walk_limit(DEFAULT_LIMITS) == 512 * DEFAULT_LIMITS.max_objects
    walk = bytes(range(256)) * ((64 << 20) // 256)
    cache.put_walk("c" * 64, small, walk)
    assert cache.get_walk("c" * 64, small) == walk
    cache.put_walk("d" * 64, small, walk + b"x")  # one byte over: not kept, not an error
    assert cache.get_walk("d" * 64, small) is None
    assert not list(tmp_path.glob("walks/*/dd/*"))


@pytest.mark.parametrize("setting", ["off", ""])
def test_the_cache_can_be_turned_off(tmp_path, monkeypatch, children, setting):
    monkeypatch.setenv(ENV, setting)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root, _ = _repository(tmp_path)
    children.clear()  # the second commit read its parent's state
    mdiff.Repository(root).checkout("HEAD")
    walked = len(children)
    mdiff.Repository(root).checkout("HEAD")
    # every commit walked by a child each time (a checkout reopens, verified again, the files it reads)
    assert walked >= 2 and children == ["vet"] * (2 * walked) and not (tmp_path / "xdg").exists()


def test_the_default_folder_is_the_user_s_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert WalkCache.default().folder == tmp_path / "xdg" / "mdiff"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert WalkCache.default().folder == tmp_path / "home" / ".cache" / "mdiff"
    # where the platform keeps a user's caches (on Linux the XDG folder above; on macOS ~/Library/Caches)
    assert WalkCache.default().folder == Path(platformdirs.user_cache_dir("mdiff", appauthor=False))


def test_a_folder_that_cannot_be_written_leaves_the_cache_unused(tmp_path, monkeypatch, children):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setenv(ENV, str(blocked))
    root, _ = _repository(tmp_path)
    children.clear()
    assert set(mdiff.Repository(root).checkout("HEAD")) == {"w", "b"}
    walked = len(children)
    assert set(mdiff.Repository(root).checkout("HEAD")) == {"w", "b"}
    assert walked >= 2 and len(children) == 2 * walked and blocked.read_text() == ""
