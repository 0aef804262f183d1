"""`mdiff status` without an argument (issue 27): the branch, HEAD, ahead/behind its remote-tracking branch,
and whether the folder or file last committed or checked out on the branch changed since — from the working
record `.mdiff/working/<ref>` (SPEC.md §13.1), by status first, then by the sha256 of the files that moved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdiff.checkpoints import save_checkpoint
from mdiff.repo import Repository, working
from tests.test_repo import DATE, run

ROOT = Path(__file__).resolve().parents[1]


def model(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {"w": rng.standard_normal((16, 8)).astype(np.float32), "b": np.full(8, step, np.int64)}


def save_folder(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(folder / "model.safetensors", model(step))
    (folder / "config.json").write_text(json.dumps({"step": step}), encoding="utf-8")
    return folder


@pytest.fixture(autouse=True)
def _an_author(monkeypatch):
    monkeypatch.setenv("MDIFF_AUTHOR", "Ada <ada@example.org>")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A repository in tmp_path/p, the working folder there (paths print as ./ckpt)."""
    repo = Repository.init(tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    return repo


def status(capsys, repo: Repository, *more) -> tuple[int, list[str]]:
    code, out, err = run(capsys, "status", "-C", repo.root, *more)
    assert "Traceback" not in err
    return code, out.splitlines()


def status_json(capsys, repo: Repository) -> dict:
    code, out, _ = run(capsys, "status", "-C", repo.root, "--json")
    assert code == 0
    return json.loads(out)


def test_a_committed_folder_is_unchanged_until_a_file_of_it_changes(project, capsys):
    ckpt = save_folder(project.root / "ckpt", 1)
    assert run(capsys, "commit", ckpt, "-m", "fine-tune step 200\n\nmore words", "--date", DATE, "-C", project.root)[0] == 0
    head = project.head()[1]
    assert status(capsys, project) == (0, [f'On branch main at {head[:12]} "fine-tune step 200"',
                                           f"./ckpt (committed at {head[:12]}): unchanged since"])
    # touched, same bytes: its status moved, so it is hashed, and found unchanged
    os.utime(ckpt / "config.json", ns=(1, 1))
    assert status(capsys, project, "--exit-code")[0] == 0
    # the same size, other bytes, the old times: the change time still moved
    before = os.stat(ckpt / "model.safetensors")
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (ckpt / "model.safetensors").write_bytes(bytes(data))
    os.utime(ckpt / "model.safetensors", ns=(before.st_atime_ns, before.st_mtime_ns))
    (ckpt / "tokenizer.json").write_text("{}", encoding="utf-8")
    (ckpt / "config.json").unlink()
    (ckpt / "optimizer.pt").write_bytes(b"training state: not part of the state")
    code, lines = status(capsys, project, "--exit-code")
    assert code == 1
    assert lines[1:] == [f"./ckpt (committed at {head[:12]}): 3 files changed since — run `mdiff status ./ckpt` "
                         "for the parameters",
                         "  deleted   config.json", "  modified  model.safetensors", "  added     tokenizer.json"]
    data = status_json(capsys, project)
    assert data == {"branch": "main", "head": head, "message": "fine-tune step 200", "upstream": None,
                    "working": {"path": str(ckpt), "kind": "folder", "action": "commit", "commit": head,
                                "changed": True, "missing": False, "incomplete": False,
                                "files": {"config.json": "deleted", "model.safetensors": "modified",
                                          "tokenizer.json": "added"}}}
    # `mdiff status CHECKPOINT` is as it was
    code, out, _ = run(capsys, "status", ckpt, "-C", project.root)
    assert code == 0 and "modified  w" in out and "deleted   file config.json" in out


def test_one_file_and_one_parameter_are_said_in_the_singular(project, capsys):
    ckpt = save_folder(project.root / "ckpt", 1)
    project.commit(str(ckpt), "one", date=DATE)
    (ckpt / "config.json").write_text("{}", encoding="utf-8")
    assert "1 file changed since" in status(capsys, project)[1][1]
    save_checkpoint(ckpt / "model.safetensors", {**model(1), "w": model(2)["w"]})
    code, out, _ = run(capsys, "status", ckpt, "-C", project.root)
    assert out.splitlines()[-1] == "1 parameter and 1 file differ"


def test_a_checkout_is_recorded_for_the_branch_it_names(project, capsys):
    first = project.commit(model(1), "one", date=DATE)
    project.switch("exp", create=True)
    second = project.commit(model(2), "two", date=DATE)
    project.switch("main")
    assert status(capsys, project)[1][1].startswith("nothing recorded for main")
    # a branch (or a move back along it) records for that branch; HEAD, a tag or an id for the current one
    assert run(capsys, "checkout", "exp", "-o", "exp.safetensors", "-C", project.root)[0] == 0
    assert run(capsys, "checkout", "HEAD", "-o", "out", "-C", project.root)[0] == 0
    assert status(capsys, project)[1][1] == f"./out (checked out at {first[:12]}): unchanged since"
    project.switch("exp")
    assert status(capsys, project)[1][1] == f"./exp.safetensors (checked out at {second[:12]}): unchanged since"
    project.tag("v1", first)
    project.checkout("v1", "v1.safetensors")
    lines = status(capsys, project)[1]
    assert lines[1] == f"./v1.safetensors (checked out at {first[:12]}; exp is at {second[:12]} now): unchanged since"
    Path("v1.safetensors").unlink()
    assert status(capsys, project, "--exit-code") == (1, [lines[0], f"./v1.safetensors (checked out at {first[:12]}; "
                                                                    f"exp is at {second[:12]} now): gone since "
                                                                    "(or no longer a file)"])


def test_a_detached_head_has_its_own_record(project, capsys):
    first = project.commit(model(1), "one", date=DATE)
    project.commit(model(2), "two", date=DATE)
    with project.lock():
        project.set_head(commit_id=first)
    project.checkout("HEAD", "here.safetensors")
    code, lines = status(capsys, project)
    assert lines == [f'HEAD detached at {first[:12]} "one"', f"./here.safetensors (checked out at {first[:12]}): unchanged since"]
    assert (project.dir / "working" / "HEAD").is_file()


def test_ahead_and_behind_the_remote_tracking_branch(tmp_path, capsys):
    origin = Repository.init(tmp_path / "origin")
    origin.commit(model(1), "one", date=DATE)
    bob, _ = Repository.clone(str(origin.root), tmp_path / "bob")
    head = bob.head()[1]
    assert status(capsys, bob)[1][:2] == [f'On branch main at {head[:12]} "one"',
                                          "Your branch is up to date with origin/main."]
    bob.commit(model(2), "two", date=DATE)
    bob.commit(model(3), "three", date=DATE)
    assert status(capsys, bob)[1][1] == "Your branch is 2 commits ahead of origin/main."
    origin.commit(model(4), "four", date=DATE)
    bob.fetch("origin")
    assert status(capsys, bob)[1][1] == "Your branch is 2 commits ahead of origin/main, 1 behind."
    upstream = status_json(capsys, bob)["upstream"]
    assert upstream == {"name": "origin/main", "commit": origin.head()[1], "ahead": 2, "behind": 1}
    bob.reset("origin/main~1")
    assert status(capsys, bob)[1][1] == "Your branch is 1 commit behind origin/main."
    # a branch no remote has has no upstream line
    bob.switch("solo", create=True)
    assert not any(line.startswith("Your branch") for line in status(capsys, bob)[1])


def test_a_record_that_is_malformed_or_not_a_file_is_ignored_with_a_warning(project, capsys):
    project.commit(model(1), "one", date=DATE)
    project.checkout("HEAD", "a.safetensors")
    record = project.dir / "working" / "refs" / "heads" / "main"
    good = record.read_bytes()
    for bad in (b"{", b"[]", json.dumps({**json.loads(good), "path": "relative"}).encode(),
                json.dumps({**json.loads(good), "files": {"../up": json.loads(good)["files"]["a.safetensors"]},
                            "kind": "folder"}).encode(),
                json.dumps({**json.loads(good), "ref": "refs/heads/other"}).encode(), b"\xff" * 10):
        record.write_bytes(bad)
        code, out, err = run(capsys, "status", "-C", project.root)
        assert code == 0 and "nothing recorded for main" in out and "ignoring the working record" in err, bad
    record.unlink()
    record.symlink_to(project.root / "a.safetensors")
    code, out, err = run(capsys, "status", "-C", project.root)
    assert code == 0 and "symbolic link" in err and "nothing recorded" in out
    # and a commit or checkout replaces it, a checker accepts the folder, gc keeps it
    record.unlink()
    record.mkdir()
    project.checkout("HEAD", "b.safetensors")  # a folder in the way: not recorded, with a warning
    assert record.is_dir()
    record.rmdir()
    project.checkout("HEAD", "b.safetensors")
    assert [f for f in project.fsck() if f.is_error] == [] and not project.fsck()
    assert project.gc(prune=0).removed == [] and record.is_file()


def test_the_record_of_a_deleted_branch_in_the_way_is_replaced(project):
    project.commit(model(1), "one", date=DATE)
    project.switch("exp", create=True)
    project.checkout("HEAD", "exp.safetensors")
    project.switch("main")
    project.delete_branch("exp")
    project.switch("exp/lora", create=True)
    project.checkout("HEAD", "lora.safetensors")
    assert working.read(project, "refs/heads/exp/lora").path == str(project.root / "lora.safetensors")


def test_a_file_that_changes_while_it_is_committed_counts_as_changed(project, capsys, tmp_path):
    ckpt = save_folder(project.root / "ckpt", 1)
    before, _ = working.scan(ckpt, "folder")
    os.utime(ckpt / "config.json", ns=(5, 5))  # as if written after the commit read it
    record = working.make("refs/heads/main", "commit", "a" * 64, ckpt, "folder", (), before)
    assert record.files["config.json"].sha256 is None and record.files["model.safetensors"].sha256 is not None
    assert working.changes_since(record).files == {"config.json": "modified"}


def test_a_touched_file_is_hashed_once(project, capsys, monkeypatch):
    ckpt = save_folder(project.root / "ckpt", 1)
    project.commit(str(ckpt), "one", date=DATE)
    os.utime(ckpt / "model.safetensors", ns=(7, 7))
    hashed: list[str] = []
    for hashing in ("_sha256", "tensors_digest"):  # a .safetensors file is recorded by its tensors digest
        real = getattr(working, hashing)
        monkeypatch.setattr(working, hashing, lambda path, real=real: hashed.append(path) or real(path))
    assert status(capsys, project)[1][1].endswith("unchanged since")
    assert hashed == [str(ckpt / "model.safetensors")]
    hashed.clear()
    assert status(capsys, project)[1][1].endswith("unchanged since") and hashed == []  # the record was refreshed


def test_records_are_neither_pushed_nor_cloned(tmp_path, capsys):
    origin = Repository.init(tmp_path / "origin")
    origin.commit(model(1), "one", date=DATE)
    origin.checkout("HEAD", str(tmp_path / "x.safetensors"))
    bob, _ = Repository.clone(str(origin.root), tmp_path / "bob")
    assert not (bob.dir / "working").exists()
    bob.checkout("HEAD", str(tmp_path / "y.safetensors"))
    bob.commit(model(2), "two", date=DATE)
    bob.push("origin", "main")
    assert working.read(origin, "refs/heads/main").path == str(tmp_path / "x.safetensors")


def test_status_without_an_argument_reads_no_tensor(project, capsys, monkeypatch):
    """It needs refs, the commits' metadata and the files' status: no state is opened."""
    ckpt = save_folder(project.root / "ckpt", 1)
    project.commit(str(ckpt), "one", date=DATE)
    import mdiff.repo.states

    monkeypatch.setattr(mdiff.repo.states.StateView, "__init__", lambda *a, **k: pytest.fail("a state was opened"))
    assert status(capsys, project)[0] == 0


def test_the_working_record_module_needs_neither_numpy_nor_libhdf5():
    code = ("import sys, mdiff.repo.working; "
            "print(sorted(m for m in ('numpy', 'h5py', 'mdiff.format.reader') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_exclude_without_a_checkpoint_is_a_usage_error(project, capsys):
    code, _, err = run(capsys, "status", "--exclude", "*.bin", "-C", project.root)
    assert code == 2 and "--exclude is for CHECKPOINT" in err


def test_a_commit_s_files_hashed_ahead_are_recorded_where_their_status_stayed(tmp_path):
    """working.hash_ahead: a commit's files hashed on the pool while it reads them; make() records such a
    sha256 where the file's status is still the one before (a file that moved since: no sha256, as ever)."""
    import hashlib

    folder = save_folder(tmp_path / "m", 1)
    before = working.scan(folder, "folder")[0]
    assert before is not None
    ahead = working.hash_ahead(folder, "folder", before)
    assert sorted(ahead) == sorted(before) == ["config.json", "model.safetensors"]
    record = working.make("refs/heads/main", "commit", "0" * 64, folder, "folder", (), before, ahead)
    for name, facts in record.files.items():
        assert facts.sha256 == hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "config.json").write_text('{"step": 22}', encoding="utf-8")  # moved since `before`
    moved = working.make("refs/heads/main", "commit", "0" * 64, folder, "folder", (), before, ahead)
    assert moved.files["config.json"].sha256 is None
    assert moved.files["model.safetensors"].sha256 == record.files["model.safetensors"].sha256
    repo = Repository.init(tmp_path / "repo")
    repo.commit(str(folder), "v1", date=DATE)
    committed = working.read(repo, "refs/heads/main")
    assert committed is not None
    assert committed.files["config.json"].sha256 == hashlib.sha256(b'{"step": 22}').hexdigest()


def test_a_safetensors_file_is_recorded_by_its_tensors_digest_made_of_the_commit_s_own_hashes(tmp_path, monkeypatch):
    """A committed .safetensors file is not hashed again for its record (1 GiB: ~0.55 s of a commit's CPU): its
    tensors digest — sha256 of a fixed prefix, the file's length field and header, and each tensor's sha256 in
    the order of its bytes — is made of the hashes the commit took of the values; `status` hashes it the same way."""
    import hashlib

    import ml_dtypes

    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    state = {"f32": rng.standard_normal((4, 3)).astype(np.float32), "i64": np.arange(5, dtype=np.int64),
             "bf16": rng.standard_normal(6).astype(ml_dtypes.bfloat16), "f16": np.full((2, 2), -0.0, np.float16),
             "u8": np.arange(7, dtype=np.uint8), "empty": np.zeros((0, 3), np.float32)}
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    ranges = sorted((entry["data_offsets"][0], entry["data_offsets"][1], name) for name, entry in header.items()
                    if name != "__metadata__")
    expected = hashlib.sha256(b"mdiff safetensors tensors 1\n" + data[:8 + length] + b"".join(
        hashlib.sha256(data[8 + length + b:8 + length + e]).digest() for b, e, _ in ranges)).hexdigest()
    assert working.tensors_digest(str(path)) == expected
    read: list[str] = []
    for hashing in ("_sha256", "tensors_digest"):
        real = getattr(working, hashing)
        monkeypatch.setattr(working, hashing, lambda p, real=real: read.append(p) or real(p))
    repo = Repository.init(tmp_path / "repo")
    repo.commit(str(path), "one", date=DATE)
    assert read == []  # the file's bytes were read once, by the commit
    record = working.read(repo, "refs/heads/main")
    assert record is not None and record.files["model.safetensors"].tensors == expected
    assert record.files["model.safetensors"].sha256 is None
    assert working.WorkingRecord.from_json(record.to_json()) == record
    assert working.changes_since(record).files == {}
    os.utime(path, ns=(9, 9))  # touched: hashed by its tensors, the same
    since = working.changes_since(record)
    assert since.files == {} and since.refreshed["model.safetensors"].tensors == expected
    changed = bytearray(data)
    changed[8 + length + ranges[-1][0]] ^= 1  # one bit of the last tensor
    path.write_bytes(bytes(changed))
    assert working.changes_since(record).files == {"model.safetensors": "modified"}
    # bytes after the last tensor, or a commit that is not of the file's values: the file's sha256, as before
    path.write_bytes(data + b"\0")
    assert working.tensors_digest(str(path)) is None
    assert working.tensors_digest_from(str(path), {n: ((), "float32", "0" * 64) for n in state}) is None
    path.write_bytes(data)
    mask = {"f32": np.zeros((4, 3), bool)}
    state2 = {**state, "f32": state["f32"] + np.float32(1)}
    save_file(state2, str(path))
    repo.commit(str(path), "masked", date=DATE, masks=mask)
    record = working.read(repo, "refs/heads/main")
    assert record is not None and record.files["model.safetensors"].tensors is None
    assert record.files["model.safetensors"].sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    both = record.to_json()
    both["files"]["model.safetensors"]["tensors"] = expected
    with pytest.raises(ValueError, match="malformed"):
        working.WorkingRecord.from_json(both)


def test_a_checked_out_safetensors_file_is_recorded_by_the_hashes_its_values_were_checked_with(project, monkeypatch):
    """A checkout checks every exact value against its sha256 as it reads it: the .safetensors file it writes
    of them is recorded by its tensors digest made of those hashes (its header read), not read back whole;
    `status` then finds it unchanged, and a changed bit modified. Other files are hashed as before."""
    first = project.commit(model(1), "one", date=DATE)
    read: list[str] = []
    for hashing in ("_sha256", "tensors_digest"):
        real = getattr(working, hashing)
        monkeypatch.setattr(working, hashing, lambda p, real=real: read.append(p) or real(p))
    project.checkout(first, "out.safetensors")
    assert read == []
    record = working.read(project, "refs/heads/main")
    assert record is not None and record.files["out.safetensors"].sha256 is None
    assert record.files["out.safetensors"].tensors == working.tensors_digest("out.safetensors")
    assert working.changes_since(record).files == {}
    data = bytearray(Path("out.safetensors").read_bytes())
    data[-1] ^= 1
    Path("out.safetensors").write_bytes(bytes(data))
    assert working.changes_since(record).files == {"out.safetensors": "modified"}
    save_folder(Path("ckpt"), 2)
    second = project.commit("ckpt", "two", date=DATE)
    read.clear()
    project.checkout(second, "folder")
    assert read == [os.path.abspath("folder/config.json")]  # the folder's other file, hashed
