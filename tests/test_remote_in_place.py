"""A remote read in place (SPEC.md §13.9): `Repository.open(URL)`, `mdiff.open(URL)` and `checkout --remote
--lazy` move the byte ranges a read needs — the metadata and the data of the parameters read —, never a
whole commit; every value is verified by its sha256; a remote that serves wrong or short bytes gets a typed
error and nothing is written or kept. On a local folder and on a real S3 API (moto's server, via s3fs)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import mdiff
from mdiff import block_ids
from mdiff.engines import apply_update
from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.ranged_file import PAGE
from mdiff.repo import Repository
from mdiff.repo.remote_repository import RemoteRepository
from mdiff.repo.remotes import add_remote
from mdiff.repo.transfer import push
from tests import helpers
from tests.helpers import plant_commit
from tests.test_remote import bucket_url, run, s3, s3_files  # noqa: F401  (fixtures)

NAMES = [f"layer{i}.weight" for i in range(12)]


def model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal((64, 1024)) * 0.02).astype(np.float32) for name in NAMES}


def history(root: Path) -> tuple[Repository, list[str], dict[str, np.ndarray]]:
    """A root commit of 12 × 256 KiB, then one changing a quarter of the values of every third tensor."""
    repo = Repository.init(root)
    values = model(0)
    first = repo.commit(values, "root", author="T <t@example.com>", date="2026-05-01T00:00:00Z")
    rng = np.random.default_rng(1)
    for name in NAMES[::3]:
        values[name] = values[name] + np.float32(1e-3) * (rng.random(values[name].shape) < 0.25)
    second = repo.commit(values, "tune", author="T <t@example.com>", date="2026-05-01T00:01:00Z")
    return repo, [first, second], values


@pytest.fixture(params=["folder", "s3"])
def remote(request, tmp_path):
    """(url, storage options, local repository, its commits, the tip's values), pushed to the remote."""
    repo, ids, values = history(tmp_path / "alice")
    options = None
    if request.param == "s3":
        _, options, _ = request.getfixturevalue("s3")
        url = request.getfixturevalue("bucket_url")
    else:
        url = str(tmp_path / "origin")
    add_remote(repo, "origin", url)
    push(repo, "origin", "main", options=options)
    return url, options, repo, ids, values


def stored(repo: Repository, commit_id: str, name: str) -> int:
    """The bytes the parameter's datasets occupy in the commit file (compressed)."""
    with repo.open_commit(commit_id) as diff:
        if name not in diff:
            return 0
        where = diff.hdf5_path(name)
    with h5py.File(repo.commit_path(commit_id), "r") as f:
        return sum(f[where][key].id.get_storage_size() for key in f[where])


def test_reading_one_parameter_moves_its_stored_bytes_and_a_few_pages(remote):
    url, options, repo, ids, values = remote
    far = RemoteRepository(url, options)
    assert far.resolve("main") == ids[1] and far.resolve("main~1") == ids[0]
    # the tip's metadata, to learn its parent: its block list's head and leaf hashes, then its first leaf, verified
    size = repo.commit_path(ids[1]).stat().st_size
    assert far.requests == 3 and far.bytes_read == block_ids.list_size(size) + block_ids.LEAF
    with far.open_state(ids[1]) as state:
        before = far.bytes_read
        got = state.read("layer3.weight")  # changed by the second commit: both commits' data
    assert np.array_equal(got, values["layer3.weight"])
    data = stored(repo, ids[0], "layer3.weight") + stored(repo, ids[1], "layer3.weight")
    assert data <= far.bytes_read - before <= data + 4 * block_ids.LEAF  # its chunks, and their index, in whole leaves
    whole = sum(repo.commit_path(c).stat().st_size for c in ids)
    assert far.bytes_read < whole / 5


def test_a_full_checkout_in_place_gives_the_bytes_of_a_local_one(remote, tmp_path, capsys):
    url, options, repo, ids, values = remote
    cache = Path(os.environ["MDIFF_CACHE_DIR"])
    kept = sorted(cache.rglob("*"))
    if options:  # the command line takes the store's options as `fetch` does
        os.environ["MDIFF_STORAGE_OPTIONS"] = json.dumps(options)
    try:
        code, out, err = run(capsys, "checkout", "main", "-o", tmp_path / "far.safetensors", "--remote", url,
                             "--lazy", "--json")
    finally:
        os.environ.pop("MDIFF_STORAGE_OPTIONS", None)
    assert code == 0, err
    report = json.loads(out)
    assert sorted(cache.rglob("*")) == kept  # no walk kept for bytes never verified against their id
    repo.checkout(ids[1], tmp_path / "near.safetensors")
    assert (tmp_path / "far.safetensors").read_bytes() == (tmp_path / "near.safetensors").read_bytes()
    whole = sum(repo.commit_path(c).stat().st_size for c in ids)
    assert report["commit"] == ids[1] and whole <= report["bytes_read"] <= whole + 40 * PAGE  # + metadata pages
    assert 0 < report["requests"] < 200


def _remote_file(url: str, options, commit_id: str, suffix: str = ".mdiff") -> tuple[bytes, callable]:
    """The bytes the remote holds for a commit (or, ``suffix`` ".blocks", its block list), and a way to replace
    them there."""
    return _remote_object(url, options, f"commits/{commit_id}{suffix}")


def _remote_object(url: str, options, relative: str) -> tuple[bytes | None, callable]:
    """The bytes of ``.mdiff/<relative>`` on the remote (None: missing), and a way to write them there."""
    if options is None:
        path = Path(url) / ".mdiff" / relative
        return path.read_bytes() if path.exists() else None, path.write_bytes
    fs, key = s3_files(options), f"{url[len('s3://'):]}/.mdiff/{relative}"
    return fs.cat_file(key) if fs.exists(key) else None, lambda data: fs.pipe_file(key, data)


def _plant_on_remote(url: str, options, data: bytes, branch: str) -> str:
    """``data`` filed on the remote as a commit under its own id, with its block list, on ``branch``: a remote
    whose ids verify, serving a file that is bad in another way."""
    commit_id = helpers.commit_id(data)
    _remote_file(url, options, commit_id)[1](data)
    _remote_file(url, options, commit_id, ".blocks")[1](block_ids.of_chunks([data]).encoded())
    _remote_object(url, options, f"refs/heads/{branch}")[1](f"{commit_id}\n".encode())
    return commit_id


def test_a_remote_serving_wrong_data_is_md800_and_writes_nothing(remote, tmp_path):
    url, options, repo, ids, _ = remote
    data, replace = _remote_file(url, options, ids[0])
    with repo.open_commit(ids[0]) as diff:
        where = diff.hdf5_path("layer5.weight")
    with h5py.File(repo.commit_path(ids[0]), "r") as f:
        offset = f[where]["value"].id.get_chunk_info(0).byte_offset + 100  # inside its first chunk
    replace(data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1:])  # same size: the listing agrees
    far = RemoteRepository(url, options)
    with far.open_state(ids[1]) as state:
        assert np.array_equal(state.read("layer0.weight"), repo.checkout(ids[1])["layer0.weight"])
        with pytest.raises(mdiff.MdiffError) as caught:
            state.read("layer5.weight")
    # the leaf holding the byte no longer hashes to its leaf hash: refused before libhdf5 or zlib sees it
    assert caught.value.code == "MD800" and f"commits/{ids[0][:12]}: bytes " in caught.value.message
    with pytest.raises(mdiff.MdiffError):
        far.checkout("main", tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()


def _last_written(repo: Repository, commit_id: str) -> str:
    """The parameter whose data lies last in the commit file."""
    with repo.open_commit(commit_id) as diff:
        where = {name: diff.hdf5_path(name) for name in diff}
    with h5py.File(repo.commit_path(commit_id), "r") as f:
        return max(where, key=lambda name: f[where[name]]["value"].id.get_chunk_info(0).byte_offset)


def test_a_remote_serving_fewer_bytes_than_it_listed_is_md801(remote, tmp_path):
    url, options, repo, ids, _ = remote
    far = RemoteRepository(url, options)  # lists the commits' sizes now
    opened = RemoteRepository(url, options)
    with opened.open_state(ids[1]) as state:  # its metadata read before the remote changes
        data, replace = _remote_file(url, options, ids[0])
        replace(data[:len(data) // 2])
        with pytest.raises(RepositoryError) as caught:
            state.read(_last_written(repo, ids[0]))  # its chunks lie in the half no longer served
        assert caught.value.code == "MD801" and f"commits/{ids[0][:12]}: " in caught.value.message
    with pytest.raises(RepositoryError) as caught:
        far.checkout("main", tmp_path / "out.safetensors")
    assert caught.value.code == "MD801" and "served" in caught.value.message
    assert not (tmp_path / "out.safetensors").exists()


def test_broken_metadata_in_place_is_md800_under_its_id_and_md802_under_its_own(remote):
    url, options, repo, ids, _ = remote
    data, replace = _remote_file(url, options, ids[1])
    broken = data[:8] + b"\0" * 64 + data[72:]  # the superblock
    bad = _plant_on_remote(url, options, broken, "evil")
    with pytest.raises(RepositoryError) as caught:
        RemoteRepository(url, options).open_state(RemoteRepository(url, options).resolve("evil"))
    assert caught.value.code == "MD802" and bad == helpers.commit_id(broken)
    replace(broken)
    with pytest.raises(RepositoryError) as caught:
        RemoteRepository(url, options).open_state(ids[1])
    assert caught.value.code == "MD800"


def test_mdiff_open_of_a_url_reads_the_parameters_used(s3, bucket_url, tmp_path):
    _, options, _ = s3
    repo, ids, values = history(tmp_path / "alice")
    url = f"{bucket_url}/root.mdiff"
    s3_files(options).put_file(str(repo.commit_path(ids[0])), url[len("s3://"):])
    with mdiff.open(url, storage_options=options) as diff:
        assert diff.commit.message == "root" and sorted(diff) == sorted(NAMES)
        got = apply_update(diff["layer7.weight"], None, "layer7.weight")
        assert np.array_equal(got, model(0)["layer7.weight"])
        assert diff._remote is not None and diff._remote.bytes_fetched < diff["layer7.weight"].stored_bytes + 12 * PAGE
    with pytest.raises(InvalidFileError) as caught:
        mdiff.open(f"{bucket_url}/", storage_options=options)
    assert caught.value.code == "MD100"


def test_lazy_needs_a_remote(capsys, tmp_path):
    code, _, err = run(capsys, "checkout", "HEAD", "-o", tmp_path / "x.safetensors", "--lazy", "-C", tmp_path)
    assert code == 2 and "--remote" in err


def test_values_read_in_place_are_verified_by_their_sha256(tmp_path):
    """An uncompressed commit whose data the remote alters (same size, same name): the values still
    decode, and their sha256 refuses them."""

    values = model(3)
    plain = tmp_path / "plain.mdiff"
    mdiff.write(plain, {name: mdiff.replace(v) for name, v in values.items()}, mdiff.Commit("root"), compression="none")
    data = plain.read_bytes()
    origin = Repository.init(tmp_path / "origin")
    commit_id = plant_commit(origin, data)
    origin.write_ref("refs/heads/main", commit_id)
    assert np.array_equal(RemoteRepository(str(tmp_path / "origin")).checkout("main")["layer2.weight"],
                          values["layer2.weight"])
    with h5py.File(plain, "r") as f:
        offset = f["parameters/layer2.weight/value"].id.get_offset() + 4096
    altered = plant_commit(origin, data[:offset] + bytes([data[offset] ^ 0x40]) + data[offset + 1:])
    origin.write_ref("refs/heads/main", altered)  # its id verifies: only the value's sha256 can catch it
    far = RemoteRepository(str(tmp_path / "origin"))
    with far.open_state(far.resolve("main")) as state:
        assert np.array_equal(state.read("layer1.weight"), values["layer1.weight"])
        with pytest.raises(mdiff.MdiffError) as caught:
            state.read("layer2.weight")
    assert caught.value.code == "MD802" and "MD602" in str(caught.value)


def test_a_remote_serving_more_bytes_than_it_listed_stops_the_download(s3, bucket_url, tmp_path):
    """A full checkout downloads each file whole (RangedFile.spool): never more than the size listed, and
    the private copy is removed."""
    import tempfile

    _, options, _ = s3
    repo, ids, _ = history(tmp_path / "alice")
    add_remote(repo, "origin", bucket_url)
    push(repo, "origin", "main", options=options)
    far = RemoteRepository(bucket_url, options)  # lists the commits' sizes now
    data, replace = _remote_file(bucket_url, options, ids[0])
    replace(data + bytes(1 << 20))
    spools = set(Path(tempfile.gettempdir()).glob("mdiff-remote-*"))
    with pytest.raises(RepositoryError) as caught:
        far.checkout("main", tmp_path / "out.safetensors")
    assert caught.value.code == "MD801" and "larger than listed" in caught.value.message
    assert not (tmp_path / "out.safetensors").exists()
    deadline = time.monotonic() + 120  # a watchdog, not the claim: the copy goes within milliseconds of the error
    while set(Path(tempfile.gettempdir()).glob("mdiff-remote-*")) - spools and time.monotonic() < deadline:
        time.sleep(0.05)  # a download's thread removes its copy when it ends
    assert set(Path(tempfile.gettempdir()).glob("mdiff-remote-*")) == spools
