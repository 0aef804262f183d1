"""Commit ids of a format-2 repository: the hash of a block list (SPEC.md §4.3, §13.1–§13.2, §13.9).

A pinned full id means those weights on every path: a remote (a folder, a real S3 API on moto) serving
another commit's bytes under an id never gets exit 0 with other weights — fetched whole, checked out with
``--remote``, or read in place (``--lazy``, ``Repository.open``) —, while a one-parameter read in place
still moves about that parameter's stored bytes. Format-1 repositories (ids the SHA-256 of the file) stay
readable and writable; read in place, each commit is downloaded whole and verified.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from mdiff import block_ids
from mdiff.errors import RepositoryError
from mdiff.repo import Repository
from mdiff.repo.remote_repository import RemoteRepository
from mdiff.repo.remotes import add_remote
from mdiff.repo.transfer import fetch, push
from tests import helpers
from tests.test_remote import bucket_url, run, s3, s3_files  # noqa: F401  (fixtures)

DATE = "2026-05-01T00:00:00Z"
NAMES = [f"layer{i}.weight" for i in range(6)]


def values(seed: int, columns: int = 1024) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal((64, columns)) * 0.02).astype(np.float32) for name in NAMES}


def three_commits(root: Path, repository_format: int = 2) -> tuple[Repository, list[str], list[dict]]:
    """A root and two commits each changing every value of one tensor."""
    repo = Repository.init(root, repository_format=repository_format)
    state = values(0)
    ids, states = [], []
    for step in range(3):
        if step:
            state = dict(state, **{NAMES[step]: state[NAMES[step]] + np.float32(step)})
        ids.append(repo.commit(state, f"step {step}", author="T <t@example.com>", date=DATE))
        states.append(dict(state))
    return repo, ids, states


@pytest.fixture(params=["folder", "s3"])
def where(request, tmp_path):
    """(url, storage options) of an empty remote: a folder, or a prefix of moto's S3 server."""
    if request.param == "s3":
        _, options, _ = request.getfixturevalue("s3")
        return request.getfixturevalue("bucket_url"), options
    return str(tmp_path / "origin"), None


def _object(url: str, options, relative: str) -> tuple[bytes | None, callable]:
    """The remote's ``.mdiff/<relative>`` (None: missing) and a way to replace it."""
    if options is None:
        path = Path(url) / ".mdiff" / relative
        return (path.read_bytes() if path.exists() else None), path.write_bytes
    fs, key = s3_files(options), f"{url[len('s3://'):]}/.mdiff/{relative}"
    return (fs.cat_file(key) if fs.exists(key) else None), lambda data: fs.pipe_file(key, data)


def test_an_id_is_the_hash_of_the_block_list_which_is_stored_beside_the_commit(tmp_path):
    repo, ids, _ = three_commits(tmp_path / "two")
    assert (repo.dir / "format").read_text() == "mdiff-repository 2\n"
    for commit_id in ids:
        data = repo.commit_path(commit_id).read_bytes()
        blocks = repo.blocks_path(commit_id).read_bytes()
        leaves = b"".join(hashlib.sha256(data[i:i + 8192]).digest() for i in range(0, len(data), 8192))
        groups = b"".join(hashlib.sha256(leaves[i:i + 4096]).digest() for i in range(0, len(leaves), 4096))
        head = len(data).to_bytes(8, "big") + groups
        assert blocks == head + leaves and hashlib.sha256(head).hexdigest() == commit_id
        assert len(blocks) == block_ids.list_size(len(data)) == 8 + 32 * (-(-len(data) // (1 << 20))) + 32 * -(-len(data) // 8192)
    old, old_ids, _ = three_commits(tmp_path / "one", repository_format=1)
    assert (old.dir / "format").read_text() == "mdiff-repository 1\n"
    assert [hashlib.sha256(old.commit_path(c).read_bytes()).hexdigest() for c in old_ids] == old_ids
    assert not list((old.dir / "commits").glob("*.blocks"))
    assert old.commit_path(old_ids[0]).read_bytes() == repo.commit_path(ids[0]).read_bytes()  # a root: same bytes
    assert old.checkout(old_ids[2])["layer2.weight"].tobytes() == repo.checkout(ids[2])["layer2.weight"].tobytes()


def test_a_local_commit_file_swapped_is_md800_in_either_format(tmp_path):
    for version in (1, 2):
        repo, ids, _ = three_commits(tmp_path / str(version), version)
        repo.commit_path(ids[2]).write_bytes(repo.commit_path(ids[1]).read_bytes())
        with pytest.raises(RepositoryError) as caught:
            repo.checkout(ids[2])
        assert caught.value.code == "MD800"


def _swap(url: str, options, ids: list[str], blocks_too: bool) -> None:
    """The remote serves c2's bytes under c3's name (and, with ``blocks_too``, c2's block list)."""
    data, _ = _object(url, options, f"commits/{ids[1]}.mdiff")
    _object(url, options, f"commits/{ids[2]}.mdiff")[1](data)
    if blocks_too:
        listed, _ = _object(url, options, f"commits/{ids[1]}.blocks")
        _object(url, options, f"commits/{ids[2]}.blocks")[1](listed)


@pytest.mark.parametrize("blocks_too", [False, True])
def test_a_swapped_commit_never_gives_other_weights_for_a_pinned_id(where, blocks_too, tmp_path, capsys):
    url, options = where
    repo, ids, states = three_commits(tmp_path / "alice")
    add_remote(repo, "origin", url)
    push(repo, "origin", "main", options=options)
    _swap(url, options, ids, blocks_too)
    if options:
        os.environ["MDIFF_STORAGE_OPTIONS"] = json.dumps(options)
    try:
        for how in (["--lazy"], []):  # read in place, then fetched whole
            out = tmp_path / f"out{len(how)}.safetensors"
            code, _, err = run(capsys, "checkout", ids[2], "-o", out, "--remote", url, *how, "-C", tmp_path)
            assert code == 1 and "MD800" in err and not out.exists(), (how, err)
    finally:
        os.environ.pop("MDIFF_STORAGE_OPTIONS", None)
    far = RemoteRepository(url, options)
    with pytest.raises(RepositoryError) as caught:
        with far.open_state(ids[2]) as state:
            state.read(NAMES[2])
    assert caught.value.code == "MD800"
    with pytest.raises(RepositoryError) as caught:
        Repository.clone(url, tmp_path / "bob", options)
    assert caught.value.code == "MD800"
    # the commits the remote serves truly are read as before
    with RemoteRepository(url, options).open_state(ids[1]) as state:
        assert state.read(NAMES[1]).tobytes() == states[1][NAMES[1]].tobytes()


def test_a_block_list_that_does_not_hash_to_its_id_or_leaves_that_do_not_match_are_md800(tmp_path):
    repo, ids, states = three_commits(tmp_path / "alice")
    url = str(tmp_path / "origin")
    add_remote(repo, "origin", url)
    push(repo, "origin", "main")
    blocks, replace = _object(url, None, f"commits/{ids[2]}.blocks")
    head = block_ids.head_size(repo.commit_path(ids[2]).stat().st_size)
    for broken in (blocks[:9] + bytes([blocks[9] ^ 1]) + blocks[10:],  # a group hash: the head no longer hashes to the id
                   blocks[:head + 5] + bytes([blocks[head + 5] ^ 1]) + blocks[head + 6:]):  # a leaf hash
        replace(broken)
        with pytest.raises(RepositoryError) as caught:
            with RemoteRepository(url).open_state(ids[2]) as state:
                state.read(NAMES[2])
        assert caught.value.code == "MD800"
    replace(blocks)
    with RemoteRepository(url).open_state(ids[2]) as state:
        assert state.read(NAMES[2]).tobytes() == states[2][NAMES[2]].tobytes()


def test_a_block_list_that_hashes_to_its_id_but_is_no_block_list_is_md801(tmp_path):
    """An id chosen as the hash of bytes that are no block list's head (its length says another count of
    group hashes than it holds): the remote vouches for nothing, and says so as a malformed file."""
    repo, ids, _ = three_commits(tmp_path / "alice")
    origin = Repository.init(tmp_path / "origin")
    data = repo.commit_path(ids[0]).read_bytes()
    # as many group hashes as the file's listed size needs, under a length that needs more
    head = (len(data) + (8 << 20)).to_bytes(8, "big") + b"\0" * 32 * block_ids.group_count(len(data))
    commit_id = hashlib.sha256(head).hexdigest()
    origin.commit_path(commit_id).write_bytes(data)
    origin.blocks_path(commit_id).write_bytes(head)
    origin.write_ref("refs/heads/main", commit_id)
    with pytest.raises(RepositoryError) as caught:
        RemoteRepository(str(tmp_path / "origin")).open_state(commit_id)
    assert caught.value.code == "MD801" and "malformed" in caught.value.message


def test_a_format_1_remote_read_in_place_is_verified_whole_with_one_warning(tmp_path, capsys):
    repo, ids, states = three_commits(tmp_path / "alice", repository_format=1)
    url = str(tmp_path / "origin")
    add_remote(repo, "origin", url)
    push(repo, "origin", "main")
    assert (Path(url) / ".mdiff" / "format").read_text() == "mdiff-repository 1\n"
    code, out, err = run(capsys, "checkout", ids[2], "-o", tmp_path / "out.safetensors", "--remote", url, "--lazy",
                         "-C", tmp_path)
    assert code == 0 and err == (f"mdiff: {url}: its commit ids (format 1) vouch only for whole files, so each commit "
                                 "read is downloaded whole and verified before it is used\n")
    far = RemoteRepository(url)
    with far.open_state(ids[2]) as state:
        assert state.read(NAMES[2]).tobytes() == states[2][NAMES[2]].tobytes()
    assert far.bytes_read == sum(repo.commit_path(c).stat().st_size for c in ids)
    _swap(url, None, ids, blocks_too=False)
    with pytest.raises(RepositoryError) as caught:
        with RemoteRepository(url).open_state(ids[2]) as state:
            state.read(NAMES[2])
    assert caught.value.code == "MD800"


def test_commits_move_only_between_repositories_of_one_format(tmp_path):
    old, old_ids, _ = three_commits(tmp_path / "old", repository_format=1)
    new, _, _ = three_commits(tmp_path / "new")
    add_remote(old, "origin", str(tmp_path / "origin1"))
    push(old, "origin", "main")
    clone, _ = Repository.clone(str(tmp_path / "origin1"), tmp_path / "clone")
    assert clone.repository_format == 1 and clone.branch_target("main") == old_ids[2]
    add_remote(new, "old", str(tmp_path / "origin1"))
    with pytest.raises(RepositoryError) as caught:
        fetch(new, "old")
    assert caught.value.code == "MD801" and "format 1" in caught.value.message
    with pytest.raises(RepositoryError) as caught:
        push(new, "old", "main")
    assert caught.value.code == "MD801"


def test_one_parameter_of_a_large_commit_read_in_place_moves_its_stored_bytes_and_under_a_mib_more(where, tmp_path):
    """§13.9 and issue 31's target: a pinned id's one-parameter read, everything counted (the block list,
    the metadata's leaves, the tensor's): at most 1.1× the parameter's stored bytes + 1 MiB."""
    url, options = where
    repo = Repository.init(tmp_path / "alice")
    rng = np.random.default_rng(5)
    big = {f"t{i:02d}": (rng.standard_normal((256, 1024)) * 0.02).astype(np.float32) for i in range(48)}  # 48 MiB
    commit_id = repo.commit(big, "big", author="T <t@example.com>", date=DATE)
    add_remote(repo, "origin", url)
    push(repo, "origin", "main", options=options)
    with repo.open_commit(commit_id) as diff:
        where_in = diff.hdf5_path("t23")
    with h5py.File(repo.commit_path(commit_id), "r") as f:
        stored = sum(f[where_in][key].id.get_storage_size() for key in f[where_in])
    far = RemoteRepository(url, options)
    with far.open_state(commit_id) as state:
        assert state.read("t23").tobytes() == big["t23"].tobytes()
    assert repo.commit_path(commit_id).stat().st_size > 40 * stored
    assert stored <= far.bytes_read <= 1.1 * stored + (1 << 20)


def test_fsck_reports_a_block_list_that_is_not_its_commits_and_a_checkout_ignores_it(tmp_path):
    repo, ids, states = three_commits(tmp_path / "alice")
    assert repo.fsck() == []
    theirs = repo.blocks_path(ids[1]).read_bytes()
    repo.blocks_path(ids[2]).write_bytes(theirs)  # hashes to another id
    repo.blocks_path(ids[1]).write_bytes(theirs[:-1])  # no block list
    repo.blocks_path(ids[0]).unlink()  # none: made from the file when needed
    assert sorted((Path(f.path).name, f.code) for f in repo.fsck()) == sorted([(f"{ids[1]}.blocks", "MD801"),
                                                                               (f"{ids[2]}.blocks", "MD800")])
    assert repo.checkout(ids[2])[NAMES[2]].tobytes() == states[2][NAMES[2]].tobytes()
    assert repo.commit_blocks(ids[0]) == block_ids.of_chunks([repo.commit_path(ids[0]).read_bytes()]).encoded()


def test_migrate_copies_a_format_1_repository_into_format_2_with_the_same_states(tmp_path, capsys):
    old, old_ids, states = three_commits(tmp_path / "old", repository_format=1)
    with old.lock():
        old.create_tag("v1", old_ids[1])
    old.switch("side", create=True, start=old_ids[0])
    old.switch("main")
    old.snapshot(old_ids[2])
    before = sorted(p.relative_to(old.dir) for p in old.dir.rglob("*"))
    code, out, err = run(capsys, "migrate", tmp_path / "new", "--json", "-C", old.root)
    assert code == 0, err
    report = json.loads(out)
    new = Repository(tmp_path / "new")
    ids = [report["ids"][c] for c in old_ids]
    assert new.repository_format == 2 and sorted(report["ids"]) == sorted(old_ids) and len(set(ids)) == 3
    assert report["branches"] == {"main": ids[2], "side": ids[0]} and report["tags"] == {"v1": ids[1]}
    assert report["head"] == "main" and report["snapshots_dropped"] == 1
    assert new.head() == ("main", ids[2]) and new.tag_target("v1") == ids[1]
    assert [new.parents(c) for c in ids] == [(), (ids[0],), (ids[1],)]
    for commit_id, state in zip(ids, states):
        assert helpers.commit_id(new.commit_path(commit_id).read_bytes()) == commit_id
        got = new.checkout(commit_id)
        assert all(got[k].tobytes() == state[k].tobytes() for k in state)
    assert new.metadata(ids[2]).message == old.metadata(old_ids[2]).message
    assert new.fsck() == []
    assert sorted(p.relative_to(old.dir) for p in old.dir.rglob("*")) == before  # the old one as it was
    code, _, err = run(capsys, "migrate", tmp_path / "newer", "-C", new.root)
    assert code == 1 and "MD801" in err and "format 2 already" in err and not (tmp_path / "newer" / ".mdiff").exists()
