"""A commit's `state_sha256` (SPEC.md §4.2, format 1.3): the digest of the state it makes, so that a
snapshot is checked against the one commit it claims (§13.5) instead of every commit back to the root."""

from __future__ import annotations

import hashlib
import json
import shutil

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.hdf5walk.attributes import overwrite_string
from mdiff.errors import InvalidFileError, RepositoryError
from mdiff.format.commit import Commit
from mdiff.format.dtypes import DTYPES
from mdiff.repo import Repository
from mdiff.updates import dense
from mdiff.updates.base import sha256_hex
from tests.helpers import bits_equal
from tests.test_mdiff_js import js_checkout

DATE = "2026-05-01T00:00:00Z"


def states(n: int) -> list[dict]:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    out = []
    for i in range(n):
        w = w.copy()
        w[i % 8] += np.float32(1)
        out.append({"w": w, "b": np.full(3, i, np.int16)})
    return out


@pytest.fixture
def repo(tmp_path) -> Repository:
    return Repository.init(tmp_path / "r")


def test_a_commit_records_the_digest_of_the_state_it_makes(repo):
    one, two = states(2)
    repo.commit(one, "root", date=DATE)
    head = repo.commit(two, "two", date=DATE)
    expected = {"files": {}, "layout": None, "parameters": {
        "b": {"dtype": "int16", "sha256": sha256_hex(two["b"]), "shape": [3]},
        "w": {"dtype": "float32", "sha256": sha256_hex(two["w"]), "shape": [8, 4]}}}
    text = json.dumps(expected, sort_keys=True, separators=(",", ":"))
    assert repo.metadata(head).state_sha256 == hashlib.sha256(text.encode()).hexdigest()
    with h5py.File(repo.commit_path(head)) as f:
        assert f.attrs["format_version"] == b"1.3" or f.attrs["format_version"] == "1.3"
        assert json.loads(f.attrs["commit"])["state_sha256"] == repo.metadata(head).state_sha256


def test_an_inexact_value_is_null_in_the_digest(repo):
    w = np.ones((4, 3), np.float32)
    repo.commit({"w": w}, "root", date=DATE)
    lr = mdiff.low_rank(np.ones((4, 1), np.float32), np.ones((1, 3), np.float32), (4, 3), DTYPES["float32"])
    head = repo.commit({"w": w}, "lora", date=DATE, explicit={"w": lr})
    expected = {"files": {}, "layout": None, "parameters": {"w": {"dtype": "float32", "sha256": None, "shape": [4, 3]}}}
    text = json.dumps(expected, sort_keys=True, separators=(",", ":"))
    assert repo.metadata(head).state_sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_a_checkout_from_a_snapshot_reads_no_commit_before_it(repo):
    made = [repo.commit(s, f"step {i}", date=DATE) for i, s in enumerate(states(5))]
    repo.snapshot(made[3])
    for old in made[:3]:  # gone: a walk to the root would need them (MD801)
        repo.commit_path(old).unlink()
    with repo.open_state(made[4]) as view:
        assert view.snapshot == made[3] and view.commits_after_start == 1
        assert bits_equal(view.read("w"), states(5)[4]["w"])
    assert bits_equal(repo.state(made[3])["w"], states(5)[3]["w"])
    with pytest.raises(RepositoryError) as err:
        repo.state(made[2])
    assert err.value.code == "MD801"


@pytest.mark.parametrize("lie", ["other values", "a parameter more"])
def test_a_snapshot_that_differs_from_its_commit_s_digest_is_walked_past(repo, lie, caplog):
    made = [repo.commit(s, f"step {i}", date=DATE) for i, s in enumerate(states(4))]
    forged = dict(states(4)[2])
    if lie == "other values":
        forged["w"] = forged["w"] + np.float32(5)
    else:
        forged["extra"] = np.zeros(2, np.int8)
    mdiff.write(repo.snapshot_path(made[2]), {k: mdiff.replace(v) for k, v in forged.items()},
                Commit("snapshot", date=DATE, meta={"snapshot_of": made[2]}))
    with repo.open_state(made[3]) as view:
        assert view.snapshot is None and view.rejected[made[2]][0] == "MD807"
        assert bits_equal(view.read("w"), states(4)[3]["w"])


def test_a_snapshot_whose_data_fails_its_sha256_is_walked_past(repo):
    made = [repo.commit(s, f"step {i}", date=DATE) for i, s in enumerate(states(3))]
    repo.snapshot(made[2])
    path = repo.snapshot_path(made[2])
    honest = states(3)[2]
    # the same metadata (so the same digest), other bits in the data
    with h5py.File(path, "r+") as f:
        group = f["parameters"]["w"]
        value = group["value"][()]
        del group["value"]
        group.create_dataset("value", data=(value.view(np.uint32) ^ np.uint32(1)).view(value.dtype))
    with repo.open_state(made[2]) as view:
        assert view.snapshot == made[2]
        assert bits_equal(view.read("w"), honest["w"])  # replanned from the root on the failed check
        assert view.snapshot is None


def _lying_commit(repo: Repository) -> tuple[str, dict]:
    """A root, and a commit on it whose state_sha256 names another state than its updates make."""
    one, two = states(2)
    root = repo.commit(one, "root", date=DATE)
    other = {"w": two["w"] + np.float32(1), "b": one["b"]}
    digest_of_other = _digest(other)
    head = repo.store(lambda w: w.add("w", dense.encode(one["w"], two["w"])),
                      Commit("lie", parents=(root,), date=DATE, state_sha256=digest_of_other))
    repo.set_branch("main", head)
    return head, other


def _digest(state: dict) -> str:
    params = {k: {"dtype": str(v.dtype), "sha256": sha256_hex(v), "shape": list(v.shape)} for k, v in state.items()}
    text = json.dumps({"files": {}, "layout": None, "parameters": params}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_commit_whose_digest_is_not_its_state_is_md808(repo, tmp_path):
    head, _ = _lying_commit(repo)
    with pytest.raises(RepositoryError) as err:
        repo.state(head)
    assert err.value.code == "MD808"
    rc, report = js_checkout(repo.root, "main", tmp_path / "out.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD808"


def test_fsck_reports_a_commit_whose_digest_is_not_its_state(repo):
    head, _ = _lying_commit(repo)
    found = [(f.code, f.path) for f in repo.fsck()]
    assert found == [("MD808", str(repo.commit_path(head)))]


def test_a_lying_commit_gives_the_state_its_digest_names_or_nothing(repo):
    """With a snapshot forged to match the lie, a reader gives the values whose sha256 the digest names —
    never a third state: a commit id means one state or none (§13.5)."""
    head, other = _lying_commit(repo)
    mdiff.write(repo.snapshot_path(head), {k: mdiff.replace(v) for k, v in sorted(other.items())},
                Commit("snapshot", date=DATE, meta={"snapshot_of": head}))
    got = repo.state(head)
    assert bits_equal(got["w"], other["w"]) and bits_equal(got["b"], other["b"])


def test_a_python_made_history_checks_out_the_same_in_mdiff_js(repo, tmp_path):
    made = [repo.commit(s, f"step {i}", date=DATE) for i, s in enumerate(states(3))]
    out = tmp_path / "js.safetensors"
    rc, report = js_checkout(repo.root, made[-1], out)
    assert rc == 0, report
    from safetensors.numpy import load_file

    assert bits_equal(load_file(out)["w"], states(3)[2]["w"])


def test_state_sha256_exists_from_format_1_3(tmp_path):
    path = tmp_path / "old.mdiff"
    mdiff.write(path, {"w": mdiff.replace(np.zeros(2, np.float32))}, Commit("x", date=DATE, state_sha256="a" * 64))
    with h5py.File(path, "r+") as f:  # a file older than its member: no writer makes one
        overwrite_string(f, "format_version", "1.2")
    with pytest.raises(InvalidFileError) as err:
        mdiff.open(path)
    assert err.value.code == "MD202" and "state_sha256" in err.value.message


def test_a_malformed_state_sha256_is_md202(repo, tmp_path):
    head = repo.commit(states(1)[0], "root", date=DATE)
    path = tmp_path / "c.mdiff"
    shutil.copy(repo.commit_path(head), path)
    with h5py.File(path, "r+") as f:
        text = f.attrs["commit"]
        text = text.decode() if isinstance(text, bytes) else text
        obj = json.loads(text)
        obj["state_sha256"] = obj["state_sha256"].upper()
        del f.attrs["commit"]
        f.attrs.create("commit", json.dumps(obj).encode(), dtype=h5py.string_dtype("utf-8", len(json.dumps(obj))))
    with pytest.raises(InvalidFileError) as err:
        mdiff.open(path)
    assert err.value.code == "MD202"


def test_mdiff_write_says_the_version_its_commit_metadata_needs(tmp_path):
    """§3.3: a commit with `state_sha256` is a 1.3 file, whoever writes it."""
    import dataclasses
    import hashlib

    import numpy as np

    import mdiff
    from mdiff.validation import validate

    path = tmp_path / "d.mdiff"
    meta = dataclasses.replace(mdiff.Commit("m"), state_sha256=hashlib.sha256(b"a state").hexdigest())
    mdiff.write(path, {"w": mdiff.replace(np.zeros(3, np.float32))}, meta)
    with mdiff.open(path) as diff:
        assert diff.version == "1.3"
    assert validate(path) == []


def test_the_digest_is_the_canonical_json_of_the_state_whatever_its_names():
    """StateClaims.digest writes each parameter's member itself (10^5 of them: no dict of dicts for json to sort
    and walk): the text is byte for byte Appendix A's canonical JSON of the digest object, for names that json
    escapes, that sort before or after others only by code point, and shapes of any rank."""
    from mdiff.format import canonical_json
    from mdiff.repo.claims import StateClaims

    names = ["a", "B", "", "é", "z\"q", "back\\slash", "ctl\x01\x1f\x7f", "\u2028", "😀", "\uffff", "model.1", "model.10",
             "model.2"]
    f32, bf16 = DTYPES["float32"], DTYPES["bfloat16"]
    parameters = {name: (((), (3,), (2, 0, 5))[i % 3], (f32, bf16)[i % 2],
                         None if i % 4 == 0 else hashlib.sha256(name.encode()).hexdigest())
                  for i, name in enumerate(reversed(names))}
    for files, layout in (({}, None), ({"é/x.json": "ab" * 32, "a": ""}, "cd" * 32)):
        claims = StateClaims(dict(parameters), dict(files), layout)
        expected = canonical_json.dumps({
            "files": files, "layout": layout,
            "parameters": {name: {"dtype": dtype.name, "sha256": sha256, "shape": list(shape)}
                           for name, (shape, dtype, sha256) in parameters.items()}})
        assert claims.digest() == hashlib.sha256(expected.encode("utf-8")).hexdigest()
    assert StateClaims({}, {}, None).digest() == hashlib.sha256(
        b'{"files":{},"layout":null,"parameters":{}}').hexdigest()
