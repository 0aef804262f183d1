"""Hostile repositories (SPEC.md §13.1–§13.3, issue 14): a `.mdiff/` folder prepared by an attacker and
then used by a victim must not make mdiff hang, crash, check out other weights than a revision names,
show a file's content, or write outside the repository; and a writer never stores a commit that its
readers would refuse.

Commands that could hang or run away on today's code run in a child process, with a timeout and a
memory limit, so that a regression fails instead of stalling the suite."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import load_checkpoint, save_checkpoint
from mdiff.cli.main import main
from mdiff.errors import LimitError, RepositoryError
from mdiff.format.commit import Author, Commit
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.format.reader import open_diff
from mdiff.repo import Repository
from mdiff.repo.history import resolve
from tests.helpers import plant_commit
from tests.test_repo import DATE, same_state, state

ROOT = Path(__file__).resolve().parents[1]
SECRET = "TOPSECRET-5f3a9c-the-victim-s-password"
TIMEOUT = 60  # seconds: each command here takes about one on an idle machine
MEMORY = 3 << 30  # bytes of address space a child may take


def cli(*argv, timeout: float = TIMEOUT) -> tuple[int, str]:
    """``python -m mdiff ARGV`` in a child: (exit status, stdout + stderr); a hang fails the test."""
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    try:
        proc = subprocess.run([sys.executable, "-m", "mdiff", *map(str, argv)], capture_output=True, text=True,
                              timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`mdiff {' '.join(map(str, argv))}` still ran after {timeout} s")
    return proc.returncode, proc.stdout + proc.stderr


def run(*argv) -> tuple[int, str]:
    """The command line in this process (for commands that cannot hang): (exit status, output)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue() + err.getvalue()


@pytest.fixture
def made(tmp_path) -> tuple[Repository, list[str]]:
    """main: c0 → c1 → c2; branch side at c1."""
    repo = Repository.init(tmp_path / "r")
    ids = [repo.commit(state(i), f"step {i}", author="Ann <ann@example.org>", date=DATE) for i in range(3)]
    repo.set_branch("side", ids[1])
    return repo, ids


def tree(repo: Repository) -> dict[str, bytes | str]:
    """Every entry under .mdiff/ (the lock file aside): its bytes, or what it is."""
    found: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(repo.dir):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(repo.dir).as_posix()
            if rel == "lock":
                continue
            found[rel] = ("link " + os.readlink(path) if path.is_symlink() else "folder" if path.is_dir()
                          else path.read_bytes() if path.is_file() else "special")
    return found


def forge(repo: Repository, commit_id: str, message: str = "forged") -> None:
    """Replace a commit's file with another valid commit file (same parents, another message and no
    updates): its bytes no longer hash to its name."""
    meta = repo.metadata(commit_id)
    repo.commit_path(commit_id).unlink()
    mdiff.write(repo.commit_path(commit_id), {}, dataclasses.replace(meta, message=message))


def self_named(repo: Repository, name: str, parents: tuple[str, ...]) -> None:
    """A commit file filed as ``name`` whose parents are ``parents`` — which may name it: a cycle. (A
    file cannot hold its own sha256, so such a file never hashes to its name.)"""
    real = repo.store(lambda writer: None, Commit("a commit in a cycle", parents=parents, date=DATE))
    os.replace(repo.commit_path(real), repo.commit_path(name))


# ------------------------------------------------------------------ 14.1, 14.16: branch names


BAD_NAMES = ["x..y", "v1.lock", "a b", "../../commits/x", "/tmp/absolute", ".hidden", "a//b", "trailing/",
             "tab\there", "é", "a" * 256, "0" * 64]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_every_verb_that_takes_a_branch_name_refuses_a_name_that_breaks_13_1(made, name):
    repo, ids = made
    before = tree(repo)
    for argv in (["branch", name], ["branch", name, ids[0]], ["switch", "-c", name], ["switch", "-c", name, ids[0]],
                 ["switch", name], ["branch", "-d", name]):
        code, out = run(*argv, "-C", repo.root)
        assert (code, "MD801" in out) == (1, True), (argv, out)
    assert tree(repo) == before


def test_a_ref_whose_name_breaks_13_1_is_no_branch_and_fsck_reports_it(made):
    repo, ids = made
    heads = repo.dir / "refs" / "heads"
    bad = ["x..y", "v1.lock", "a b"]
    for name in bad:
        (heads / name).write_text(ids[0] + "\n")
    head_before = (repo.dir / "HEAD").read_bytes()
    for name in bad:
        for argv in (["switch", name], ["checkout", name, "-o", repo.root.parent / "out.safetensors"],
                     ["merge", name], ["log", name]):
            code, out = run(*argv, "-C", repo.root)
            assert (code, "MD801" in out) == (1, True), (argv, out)
        assert (repo.dir / "HEAD").read_bytes() == head_before
    assert not (repo.root.parent / "out.safetensors").exists()
    code, out = run("branch", "--json", "-C", repo.root)
    assert code == 0 and json.loads(out) == {"current": "main", "branches": {"main": ids[2], "side": ids[1]}}
    assert run("log", "--all", "--oneline", "-C", repo.root)[0] == 0
    code, out = run("fsck", "--json", "-C", repo.root)
    findings = json.loads(out)["findings"]
    assert code == 1 and sorted((f["code"], Path(f["path"]).name) for f in findings) == [("MD801", n) for n in sorted(bad)]
    assert all("not a valid branch name" in f["message"] for f in findings)


# ------------------------------------------------------------------ 14.3: a full commit id means that commit


def test_a_full_commit_id_always_means_that_commit_whatever_branch_is_named_so(made, tmp_path):
    repo, ids = made
    (repo.dir / "refs" / "heads" / ids[0]).write_text(ids[2] + "\n")  # a branch named like c0, at c2
    assert resolve(repo, ids[0]) == ids[0]
    code, out = run("checkout", ids[0], "-o", tmp_path / "c0.safetensors", "-C", repo.root)
    assert code == 0 and same_state(load_checkpoint(tmp_path / "c0.safetensors"), state(0))
    assert ids[0] not in repo.branches()
    findings = repo.fsck()
    assert [(f.code, Path(f.path).name) for f in findings] == [("MD801", ids[0])]
    assert "like a commit id" in findings[0].message
    # a shorter hex name stays a branch (a name like `cafe` or `added` is a fine branch name): a branch
    # is looked up before a prefix, as §13.3 says, and the full id is always there to name the commit
    repo.set_branch(ids[1][:8], ids[0])
    assert resolve(repo, ids[1][:8]) == ids[0] and resolve(repo, ids[1]) == ids[1]


# ------------------------------------------------------------------ 14.4: MD800 on every read


def test_log_show_and_every_walk_refuse_a_commit_whose_bytes_do_not_hash_to_its_name(made, tmp_path):
    repo, ids = made
    forge(repo, ids[1])
    for argv in (["log"], ["log", "--oneline"], ["log", "--json"], ["log", "--stat"], ["log", "--all"],
                 ["log", ids[1]], ["show", ids[1]], ["show", "HEAD~1"], ["show", "--json", "side"],
                 ["checkout", "HEAD", "-o", tmp_path / "x.safetensors"], ["squash", ids[0], "-m", "s"], ["merge", "side"],
                 ["switch", "-c", "new", "HEAD~2"]):
        code, out = run(*argv, "-C", repo.root)
        assert (code, "MD800" in out, "forged" in out) == (1, True, False), (argv, out)
    fresh = Repository(repo.root)
    for read in (lambda: fresh.metadata(ids[1]), lambda: fresh.parents(ids[1]), lambda: resolve(fresh, "HEAD~2")):
        with pytest.raises(RepositoryError) as info:
            read()
        assert info.value.code == "MD800"
    assert [f.code for f in repo.fsck()] == ["MD800"]


def test_the_bytes_parsed_are_the_bytes_hashed(made):
    """A commit file swapped for another after it was hashed is not the one parsed (the file is read
    through the descriptor that was hashed), and the swap is refused once seen (MD800); a file
    changed in place is refused (MD800)."""
    repo, ids = made
    path = repo.commit_path(ids[2])
    parsed, other = [], dataclasses.replace(repo.metadata(ids[2]), message="swapped in")
    with pytest.raises(RepositoryError) as info:
        with repo.commit_file(ids[2]) as readable:
            os.rename(path, repo.root.parent / "moved.mdiff")
            mdiff.write(path, {}, other)
            with open_diff(readable) as diff:
                parsed.append(diff.commit.message)
    assert parsed == ["step 2"] and info.value.code == "MD800" and "changed while" in info.value.message
    path = repo.commit_path(ids[1])
    with pytest.raises(RepositoryError) as info:
        with repo.commit_file(ids[1]):
            with open(repo.commit_path(ids[1]), "ab") as f:
                f.write(b"\0")
    assert info.value.code == "MD800" and "changed while" in info.value.message


# ------------------------------------------------------------------ 14.6: FIFOs, devices, links


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link_to(target) -> callable:
    def make(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)
    return make


def _where(repo: Repository, ids: list[str], which: str) -> Path:
    return {"HEAD": repo.dir / "HEAD", "ref": repo.dir / "refs" / "heads" / "main", "format": repo.dir / "format",
            "commit": repo.commit_path(ids[2]), "parent": repo.commit_path(ids[1])}[which]


@pytest.mark.parametrize("which", ["HEAD", "ref", "format", "commit", "parent"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "secret"])
def test_a_fifo_a_device_or_a_link_in_the_repository_is_refused_at_once_and_shows_nothing(made, tmp_path, which, kind):
    repo, ids = made
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n" + ids[0] + "\n")
    {"fifo": _fifo, "/dev/zero": _link_to("/dev/zero"), "secret": _link_to(secret)}[kind](_where(repo, ids, which))
    command = run if kind == "secret" else cli  # a FIFO or a device could hang this process on today's code
    for argv in (["log", "--oneline"], ["checkout", "HEAD", "-o", tmp_path / "out.safetensors"], ["fsck"], ["branch"]):
        if which in ("commit", "parent") and argv == ["branch"]:
            continue  # listing branches reads no commit
        code, out = command(*argv, "-C", repo.root)
        assert code == 1 and "MD801" in out and SECRET not in out and "Traceback" not in out, (argv, out)
        assert "not a regular file" in out or "symbolic link" in out, (argv, out)
    assert not (tmp_path / "out.safetensors").exists()


def test_fsck_reports_a_commit_that_is_a_folder_a_fifo_or_a_link_and_goes_on(made, tmp_path):
    repo, ids = made
    fake = [hashlib.sha256(bytes([i])).hexdigest() for i in range(3)]
    repo.commit_path(fake[0]).mkdir()
    os.mkfifo(repo.commit_path(fake[1]))
    repo.commit_path(fake[2]).symlink_to("/dev/zero")
    code, out = cli("fsck", "--json", "-C", repo.root)
    report = json.loads(out)
    assert code == 1 and report["sound"] is False
    assert sorted((f["code"], Path(f["path"]).stem) for f in report["findings"]) == sorted(("MD801", f) for f in fake)
    forge(repo, ids[0])  # the commits after the strange files are still checked
    code, out = cli("fsck", "--json", "-C", repo.root)
    assert sorted(f["code"] for f in json.loads(out)["findings"]) == ["MD800", "MD801", "MD801", "MD801"]


def test_fsck_names_the_commit_and_the_object_in_it(made):
    """A commit file whose bytes hash to its name but break a rule inside (a conformance case: `xor` a group) is
    reported at that commit's file, the object in it named first in the message."""
    repo, ids = made
    data = (ROOT / "conformance" / "invalid" / "MD405-required_dataset_is_a_group" / "diff.mdiff").read_bytes()
    filed = repo.commit_path(plant_commit(repo, data))
    code, out = cli("fsck", "-C", repo.root)
    assert code == 1
    assert out.splitlines()[0] == f"MD405 error {filed}: /parameters/w/xor: `xor` is a group; a dense update needs a dataset"


def test_a_snapshot_that_is_a_fifo_or_a_device_is_walked_past(made, tmp_path):
    repo, ids = made
    repo.snapshot(ids[1])
    for make in (_fifo, _link_to("/dev/zero")):
        make(repo.snapshot_path(ids[1]))
        code, out = cli("checkout", "HEAD", "-o", tmp_path / "out.safetensors", "-C", repo.root)
        assert code == 0, out
        assert same_state(load_checkpoint(tmp_path / "out.safetensors"), state(2))
        assert cli("fsck", "-C", repo.root)[0] in (0, 1)  # it ends, whatever it says of the snapshot
        (tmp_path / "out.safetensors").unlink()


def test_a_snapshot_that_is_a_link_is_not_followed(made, tmp_path):
    """A snapshot linked to a well-formed snapshot file elsewhere, holding other values: the link is
    not followed (§13.1), so checkouts walk the commits instead."""
    repo, ids = made
    lying = tmp_path / "lying.mdiff"
    mdiff.write(lying, {name: mdiff.replace(np.zeros_like(value)) for name, value in state(1).items()},
                Commit("snapshot", date=DATE, meta={"snapshot_of": ids[1]}))
    repo.snapshot_path(ids[1]).symlink_to(lying)
    for rev, want in ((ids[1], state(1)), ("HEAD", state(2))):
        assert same_state(Repository(repo.root).checkout(rev), want)


def test_a_link_inside_the_repository_is_never_followed_but_the_repository_folder_may_be_one(made, tmp_path):
    repo, ids = made
    # .mdiff itself a link (the repository kept on another disk): fine
    elsewhere = tmp_path / "disk" / "repo.mdiff"
    elsewhere.parent.mkdir()
    os.replace(repo.dir, elsewhere)
    repo.dir.symlink_to(elsewhere)
    assert run("log", "--oneline", "-C", repo.root)[0] == 0
    # a ref that links to a well-formed ref outside: refused, though its content is fine
    outside = tmp_path / "ref"
    outside.write_text(ids[0] + "\n")
    ref = repo.dir / "refs" / "heads" / "side"
    ref.unlink()
    ref.symlink_to(outside)
    code, out = run("checkout", "side", "-o", tmp_path / "o.safetensors", "-C", repo.root)
    assert code == 1 and "MD801" in out and "symbolic link" in out


def test_writes_never_follow_a_link_out_of_the_repository(made, tmp_path):
    repo, ids = made
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep me\n")
    (repo.dir / "refs" / "heads" / "exp").symlink_to(outside, target_is_directory=True)
    for argv in (["branch", "exp/new"], ["switch", "-c", "exp/new2"], ["branch", "-d", "exp/victim"],
                 ["switch", "exp/victim"]):
        code, out = run(*argv, "-C", repo.root)
        assert (code, "MD801" in out) == (1, True), (argv, out)
    assert sorted(p.name for p in outside.iterdir()) == ["victim"] and (outside / "victim").read_text() == "keep me\n"
    # commits/ moved out and linked: reads refuse it, and so does the writer (nothing lands outside)
    (repo.dir / "refs" / "heads" / "exp").unlink()
    os.replace(repo.dir / "commits", outside / "commits")
    (repo.dir / "commits").symlink_to(outside / "commits", target_is_directory=True)
    save_checkpoint(tmp_path / "s3.safetensors", state(3))
    for argv in (["commit", tmp_path / "s3.safetensors", "-m", "three", "--date", DATE, "-q"], ["log"]):
        code, out = run(*argv, "-C", repo.root)
        assert (code, "MD801" in out) == (1, True), (argv, out)
    assert sorted(p.name for p in (outside / "commits").iterdir()) == sorted(f"{c}.{kind}" for c in ids
                                                                             for kind in ("blocks", "mdiff"))
    # the lock file linked to a file of the victim's: not opened, not truncated
    (repo.dir / "commits").unlink()
    os.replace(outside / "commits", repo.dir / "commits")
    (repo.dir / "lock").unlink(missing_ok=True)
    (repo.dir / "lock").symlink_to(outside / "victim")
    code, out = run("commit", tmp_path / "s3.safetensors", "-m", "three", "--date", DATE, "-q", "-C", repo.root)
    assert (code, "MD801" in out) == (1, True), out
    assert (outside / "victim").read_text() == "keep me\n" and repo.head() == ("main", ids[2])


def test_where_files_cannot_be_opened_relative_to_a_folder_the_same_rules_hold(made, tmp_path, monkeypatch):
    """Platforms without dir_fd (not POSIX) take the other path of folder.py: folders checked with
    lstat. The same reads and writes work, and the same links are refused."""
    from mdiff.repo import folder

    monkeypatch.setattr(folder, "_AT", False)
    repo, ids = made
    fresh = Repository(repo.root)
    assert resolve(fresh, "HEAD~1") == ids[1] and fresh.commit_ids() == sorted(ids)
    with fresh.lock():
        fresh.create_branch("exp/a", ids[0])
    assert fresh.branches() == {"exp/a": ids[0], "main": ids[2], "side": ids[1]}
    fresh.delete_branch("exp/a")
    made_id = fresh.commit(state(4), "four", date=DATE)
    assert fresh.head() == ("main", made_id) and fresh.fsck() == []
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo.dir / "refs" / "heads" / "lnk").symlink_to(outside, target_is_directory=True)
    for write in (lambda: fresh.create_branch("lnk/x", ids[0]), lambda: fresh.set_branch("lnk/y", ids[0])):
        with pytest.raises(RepositoryError) as info:
            write()
        assert info.value.code == "MD801" and "symbolic link" in info.value.message
    assert list(outside.iterdir()) == []
    (outside / "ref").write_text(ids[0] + "\n")
    (repo.dir / "refs" / "heads" / "side").unlink()
    (repo.dir / "refs" / "heads" / "side").symlink_to(outside / "ref")
    with pytest.raises(RepositoryError) as info:
        fresh.branch_target("side")
    assert info.value.code == "MD801" and "symbolic link" in info.value.message


def test_a_ref_or_head_longer_than_a_reader_needs_is_refused_unread(made):
    repo, ids = made
    ref = repo.dir / "refs" / "heads" / "main"
    ref.write_text(ids[2] + "\n" + " " * (1 << 20))
    code, out = run("log", "-C", repo.root)
    assert code == 1 and "MD801" in out and "longer than" in out and len(out) < 1000


# ------------------------------------------------------------------ 14.7: cycles, ~N


def test_a_commit_naming_itself_as_parent_or_a_cycle_ends_every_walk_with_md800(made, tmp_path):
    repo, ids = made
    x, y = hashlib.sha256(b"x").hexdigest(), hashlib.sha256(b"y").hexdigest()
    self_named(repo, x, (x,))
    self_named(repo, y, (x,))  # y → x → x → …
    for tip in (x, y):
        repo.set_branch("main", tip)
        for argv in (["log"], ["log", "HEAD~100000000"], ["log", "--all"], ["squash", ids[0], "-m", "s"],
                     ["merge", "side"], ["checkout", "HEAD", "-o", tmp_path / "o.safetensors"]):
            code, out = cli(*argv, "-C", repo.root)
            assert (code, "MD800" in out) == (1, True), (argv, out)
    assert sorted(f.code for f in repo.fsck()) == ["MD800", "MD800"]


def test_moves_back_cost_at_most_the_history_and_any_count_is_an_error_not_a_crash(made, monkeypatch):
    """The cost is counted as the parents read (CommitFiles.parents, which `log` reads through a Store and
    other commands through a Repository), not timed: a move that went on past a root, or counted to N before
    stopping, reads more than the history's three commits whatever the machine's load. A move that would
    read more than that is stopped at the first extra read."""
    from mdiff.repo.objects import CommitFiles

    repo, ids = made
    reads: list[str] = []
    real_parents = CommitFiles.parents

    def counted(self, commit_id):
        reads.append(commit_id)
        if len(reads) > len(ids):
            raise AssertionError(f"{len(reads)} parents read for a history of {len(ids)} commits")
        return real_parents(self, commit_id)

    monkeypatch.setattr(CommitFiles, "parents", counted)
    for rev in ("HEAD~100000000", "HEAD~" + "9" * 5000, "HEAD" + "^" * 100000):
        reads.clear()
        code, out = run("log", rev, "-C", repo.root)
        assert code == 1 and "MD801" in out and "past a root" in out, (rev[:20], out[:300])
        assert reads == [ids[2], ids[1], ids[0]], rev[:20]  # each commit once, newest first, then the root's none
    monkeypatch.undo()
    assert resolve(repo, "HEAD~2") == ids[0] and resolve(repo, "HEAD~00") == ids[2]


# ------------------------------------------------------------------ 14.16: one of two writers creates a branch


def _waiting_for_lock(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside WriterLock.lock (waiting for the writers' lock: the test holds it)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "lock" and frame.f_code.co_filename.endswith(os.path.join("repo", "lock.py")):
            return True
        frame = frame.f_back
    return False


def test_two_writers_creating_one_branch_exactly_one_wins(made, capsys):
    """Both `branch feat REV` commands start while the lock is held, so both wait for it; once it is
    free, one creates the branch and the other is refused — whichever order they had."""
    repo, ids = made
    codes: dict[str, int] = {}

    def create(rev: str) -> None:
        codes[rev] = main(["branch", "feat", rev, "-C", str(repo.root)])

    threads = [threading.Thread(target=create, args=(rev,), daemon=True) for rev in (ids[0], ids[1])]
    with repo.lock():
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not all(_waiting_for_lock(t) for t in threads):
            assert all(t.is_alive() for t in threads), "a writer did not wait for the lock"
            assert time.monotonic() < deadline, f"watchdog: the writers did not reach the lock within {TIMEOUT} s"
            time.sleep(0.01)
    for thread in threads:
        thread.join(TIMEOUT)
    winner = [rev for rev, code in codes.items() if code == 0]
    assert sorted(codes.values()) == [0, 1] and repo.branches()["feat"] == winner[0], codes
    assert capsys.readouterr().err.count("exists already") == 1


# ------------------------------------------------------------------ 14.12: writers check the readers' limits first


def _attribute_bytes(message: str, author: Author, meta: dict, parents: tuple[str, ...]) -> int:
    # as a repository writes it: with its state's digest (§4.2)
    return len(Commit(message, author=author, date=DATE, parents=parents, meta=meta,
                      state_sha256="0" * 64).to_attribute().encode())


def _sized(field: str, extra: int, parents: tuple[str, ...]) -> dict:
    """Commit fields whose ``commit`` attribute is the limit + ``extra`` bytes, grown through ``field``."""
    fields = {"message": "m", "author": Author("a", "a@example.org"), "meta": {"k": "v"}}
    limit = DEFAULT_LIMITS.max_attribute_bytes
    n = limit + extra - _attribute_bytes(fields["message"], fields["author"], fields["meta"], parents)
    if field == "message":
        fields["message"] += "x" * n
    elif field == "author":
        fields["author"] = Author("a" + "x" * n, "a@example.org")
    else:
        fields["meta"] = {"k": "v" + "x" * n}
    assert _attribute_bytes(fields["message"], fields["author"], fields["meta"], parents) == limit + extra
    return fields


@pytest.mark.parametrize("field", ["message", "author", "meta"])
def test_commit_metadata_at_the_attribute_limit_is_stored_and_one_byte_more_is_refused_before_writing(made, field):
    repo, ids = made
    past = _sized(field, 1, (ids[2],))
    before = tree(repo)
    with pytest.raises(LimitError) as info:
        repo.commit(state(5), past["message"], past["author"], DATE, past["meta"])
    assert info.value.code == "MD510"
    assert tree(repo) == before and repo.fsck() == []
    at = _sized(field, 0, (ids[2],))
    made_id = repo.commit(state(5), at["message"], at["author"], DATE, at["meta"])
    assert repo.head() == ("main", made_id) and repo.fsck() == []
    assert Repository(repo.root).metadata(made_id).message == at["message"]


def test_every_writer_refuses_metadata_past_a_limit_and_stores_nothing(made, tmp_path):
    repo, ids = made
    repo.switch("other", create=True, start=ids[1])
    repo.commit({**state(1), "layer.w": state(8)["layer.w"]}, "other work", date=DATE)
    repo.switch("main")
    big = "x" * (DEFAULT_LIMITS.max_attribute_bytes + 1)
    before = tree(repo)
    for write in (lambda: repo.squash(ids[0], big, date=DATE), lambda: repo.merge("other", "average", big, date=DATE),
                  lambda: repo.merge("other", "average", "m", date=DATE, meta={"k": big})):
        with pytest.raises(LimitError) as info:
            write()
        assert info.value.code == "MD510"
    assert tree(repo) == before and repo.fsck() == []
    save_checkpoint(tmp_path / "s.safetensors", state(7))
    meta = [f"k{i}=" + "x" * 120_000 for i in range(12)]  # 1.4 MB of --meta
    code, out = run("commit", tmp_path / "s.safetensors", "-m", "m", "--date", DATE, "-q", *sum((["--meta", m] for m in meta), []),
                    "-C", repo.root)
    assert code == 1 and "MD510" in out and tree(repo) == before
    with pytest.raises(LimitError):
        mdiff.write(tmp_path / "d.mdiff", {}, Commit(big))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r", "s.safetensors"]


# ------------------------------------------------------------------ 14.5: a crafted commit file


# libhdf5 2.0.0 died on it (known.py: hdf5-dense-links-iterate) until §8.1 had the walk check a dense link
# index first: now the walk refuses it (MD513) before libhdf5 reads it, in the child or not
LIBHDF5_CRASHERS = ["crash-hdf5-dense-links-iterate-seed9-task1462.mdiff"]


def _filed(repo: Repository, name: str) -> str:
    """The regression file ``name`` filed as a commit under its true sha256 (MD800 passes), on branch evil."""
    data = (ROOT / "tests" / "fuzz" / "regressions" / name).read_bytes()
    commit_id = plant_commit(repo, data)
    repo.set_branch("evil", commit_id)
    return commit_id


@pytest.mark.parametrize("name", LIBHDF5_CRASHERS)
def test_a_commit_file_that_crashes_libhdf5_is_a_typed_error_in_every_command(made, tmp_path, name):
    repo, ids = made
    commit_id = _filed(repo, name)
    before = tree(repo)
    for argv, code_wanted in ((("log", "--all"), 1), (("log", "evil"), 1), (("show", "evil"), 1), (("fsck",), 1),
                              (("checkout", "evil", "-o", tmp_path / "out.safetensors"), 1)):
        code, out = cli(*argv, "-C", repo.root)
        assert code == code_wanted and "Traceback" not in out, (argv, code, out)
        assert argv[0] == "fsck" or commit_id[:12] in out, (argv, out)  # fsck names the finding's object
        assert "MD513" in out and ("MD802" in out or argv[0] == "fsck"), (argv, out)
    assert not (tmp_path / "out.safetensors").exists() and tree(repo) == before
    with pytest.raises(RepositoryError) as info:  # the library too
        Repository(repo.root).open_commit(commit_id)
    assert info.value.code == "MD802" and "MD513: the group's links cannot be read" in info.value.message
    assert cli("checkout", ids[2], "-o", tmp_path / "good.safetensors", "-C", repo.root)[0] == 0


# ---------------------------------------------------------------- issue 28 item 3 (§13.1, §13.6)


@pytest.mark.parametrize("which", ["HEAD", "detached HEAD", "ref", "tag", "format"])
@pytest.mark.parametrize("change", ["CR before LF", "byte-order mark"])
def test_format_head_and_refs_are_lf_only_without_a_byte_order_mark(made, which, change):
    """§13.1: the newline of `format`, HEAD and a ref is LF alone, and they hold nothing else: `<id>` CR LF, or a
    UTF-8 byte-order mark first, is malformed (MD801) — never read as the id or branch it wraps."""
    repo, ids = made
    repo.create_tag("v1", ids[1])
    path, text = {"HEAD": (repo.dir / "HEAD", "ref: refs/heads/main\n"), "detached HEAD": (repo.dir / "HEAD", ids[2] + "\n"),
                  "ref": (repo.dir / "refs" / "heads" / "main", ids[2] + "\n"),
                  "tag": (repo.dir / "refs" / "tags" / "v1", ids[1] + "\n"),
                  "format": (repo.dir / "format", (repo.dir / "format").read_text())}[which]
    path.write_bytes((text[:-1] + "\r\n").encode() if change == "CR before LF" else b"\xef\xbb\xbf" + text.encode())
    code, out = run("log", "v1" if which == "tag" else "HEAD", "-C", repo.root)
    assert code == 1 and "MD801" in out and "Traceback" not in out, out


def test_a_dangling_lock_link_is_md801_for_writers_and_fsck_and_no_concern_of_a_checkout(made, tmp_path):
    """§13.6: a lock file that is a symbolic link, to nothing, is neither followed, created through nor replaced: a
    writer refuses to lock (MD801, not MD803, which says another process holds the lock), fsck reports it (MD801),
    and a checkout, which takes no lock, reads the repository as before."""
    repo, ids = made
    (repo.dir / "lock").unlink(missing_ok=True)
    (repo.dir / "lock").symlink_to(tmp_path / "nowhere")
    save_checkpoint(tmp_path / "s3.safetensors", state(3))
    code, out = run("commit", tmp_path / "s3.safetensors", "-m", "three", "--date", DATE, "-q", "-C", repo.root)
    assert code == 1 and "MD801" in out and "MD803" not in out, out
    with pytest.raises(RepositoryError) as info:
        with Repository(repo.root).lock(wait=False):
            pass
    assert info.value.code == "MD801"
    assert not (tmp_path / "nowhere").exists() and (repo.dir / "lock").is_symlink()
    assert [f.code for f in repo.fsck()] == ["MD801"]
    code, out = run("checkout", "HEAD~1", "-o", tmp_path / "o.safetensors", "-C", repo.root)
    assert code == 0 and same_state(load_checkpoint(tmp_path / "o.safetensors"), state(1)), out
    assert repo.head() == ("main", ids[2])
