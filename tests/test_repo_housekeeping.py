"""Tags, branch -f / reset, reflogs and gc of unreachable commits (SPEC.md §13.1, §13.3, §13.6)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mdiff.errors import RepositoryError
from mdiff.format.commit import Commit
from mdiff.repo import Repository
from mdiff.repo.history import resolve
from tests.test_repo import DATE, run, same_state, state

ZEROS = "0" * 64


@pytest.fixture
def repo(tmp_path) -> Repository:
    return Repository.init(tmp_path / "r")


def chain(repo: Repository, n: int) -> list[str]:
    ids = []
    for i in range(n):
        ids.append(repo.commit(state(i), f"c{i}", date=DATE))
    return ids


def log_lines(repo: Repository, ref: str) -> list[list[str]]:
    """Each line of logs/<ref> as [old, new, seconds, message]."""
    return [line.split(" ", 3) for line in (repo.dir / "logs" / ref).read_text().splitlines()]


# ---------------------------------------------------------------- tags
def test_tags_name_commits_in_revisions_and_are_listed(repo, capsys):
    a, b, c = chain(repo, 3)
    assert run(capsys, "tag", "v1", "HEAD~2", "-C", repo.root, "--json")[:2] == (
        0, json.dumps({"tag": "v1", "commit": a, "before": None}) + "\n")
    assert (repo.dir / "refs" / "tags" / "v1").read_bytes() == a.encode() + b"\n"
    repo.tag("release/2", c)
    assert resolve(repo, "v1") == a and resolve(repo, "release/2~1") == b and resolve(repo, "release/2^^") == a
    code, out, _ = run(capsys, "tag", "-C", repo.root, "--json")
    assert code == 0 and json.loads(out) == {"tags": {"release/2": c, "v1": a}}
    assert repo.checkout("v1")["steps"] == np.array(0)
    code, out, _ = run(capsys, "log", "--oneline", "-C", repo.root)
    assert out.splitlines()[0] == f"*  {c[:12]} (HEAD -> main, tag: release/2) c2"
    assert out.splitlines()[2] == f"*  {a[:12]} (tag: v1) c0"
    # an existing tag moves only with -f; the reflog of the tag records it
    assert run(capsys, "tag", "v1", "HEAD", "-C", repo.root)[0] == 1
    assert repo.tag("v1", "HEAD", force=True) == (a, c)
    assert [line[:2] + line[3:] for line in log_lines(repo, "refs/tags/v1")] == [
        [ZEROS, a, "tag: created"], [a, c, "tag: moved"]]
    assert run(capsys, "tag", "-d", "v1", "-C", repo.root)[:2] == (0, f"deleted tag v1 (was {c[:12]})\n")
    assert repo.tags() == {"release/2": c}
    with pytest.raises(RepositoryError, match="neither a branch, a tag nor a commit id") as info:
        resolve(repo, "v1")
    assert info.value.code == "MD801"


@pytest.mark.parametrize("name", ["a..b", "x.lock", "-x", "a b", "0" * 64, "v1/"])
def test_tag_names_follow_the_branch_name_rules(repo, name):
    chain(repo, 1)
    with pytest.raises(RepositoryError, match="is not a valid tag name") as info:
        repo.tag(name)
    assert info.value.code == "MD801"
    assert list((repo.dir / "refs" / "tags").iterdir()) == []


def test_a_tag_and_a_branch_never_share_a_name_and_the_branch_wins_where_they_do(repo, capsys):
    a, b = chain(repo, 2)
    with pytest.raises(RepositoryError, match="is a branch") as info:
        repo.tag("main", a)
    assert info.value.code == "MD801"
    repo.tag("v1", a)
    with pytest.raises(RepositoryError, match="is a tag") as info:
        repo.switch("v1", create=True)
    assert info.value.code == "MD801" and repo.branch_names() == ["main"]
    # a stranger's repository (or a fetch) may hold both: the branch is meant, with a warning
    (repo.dir / "refs" / "tags" / "main").write_text(a + "\n")
    assert resolve(repo, "main") == b
    code, out, err = run(capsys, "show", "main", "--json", "-C", repo.root)
    assert code == 0 and json.loads(out)["commit"]["message"] == "c1"
    assert "mdiff: 'main' is a branch and a tag: the branch is meant (§13.3)" in err
    # a tag named like a commit-id prefix wins over the prefix, as a branch does; a full id is the commit
    prefix = b[:6]
    repo.tag(prefix, a)
    assert resolve(repo, prefix) == a and resolve(repo, b) == b


def test_hostile_tag_files_are_md801_and_read_within_bounds(repo):
    a, = chain(repo, 1)
    tags = repo.dir / "refs" / "tags"
    (tags / "big").write_bytes(a.encode() + b"\n" + b" " * 10_000)
    with pytest.raises(RepositoryError, match="longer than 272 bytes") as info:
        resolve(repo, "big")
    (tags / "big").unlink()
    os.symlink(repo.dir / "refs" / "heads" / "main", tags / "link")
    with pytest.raises(RepositoryError, match="is a symbolic link") as info:
        resolve(repo, "link")
    assert info.value.code == "MD801"
    (tags / "link").unlink()
    os.mkfifo(tags / "fifo")  # opened without blocking: refused at once, never a hang
    with pytest.raises(RepositoryError, match="is a FIFO") as info:
        resolve(repo, "fifo")
    (tags / "gone").write_text("f" * 64 + "\n")
    findings = {(Path(f.path).name, f.code) for f in repo.fsck()}
    assert findings == {("fifo", "MD801"), ("gone", "MD801")}
    with pytest.raises(RepositoryError, match="names commit ffffffffffff, which is not in the repository"):
        resolve(repo, "gone")


# ---------------------------------------------------------------- branch -f, reset, reflog
def test_reset_moves_the_branch_back_and_the_reflog_undoes_it(repo, capsys):
    first = int(time.time())  # the reflog's stamps are whole seconds, taken between first and last
    a, b, c = chain(repo, 3)
    code, out, _ = run(capsys, "reset", "HEAD~2", "-C", repo.root)
    last = time.time()
    assert (code, out) == (0, f"main now at {a[:12]} (was {c[:12]}; `mdiff reset {c[:12]}` undoes this)\n")
    assert repo.head() == ("main", a) and repo.commit_ids() == sorted([a, b, c])
    lines = log_lines(repo, "refs/heads/main")
    assert [line[:2] + line[3:] for line in lines] == [
        [ZEROS, a, "commit: c0"], [a, b, "commit: c1"], [b, c, "commit: c2"], [c, a, "reset: moving to HEAD~2"]]
    assert all(first <= int(line[2]) <= last for line in lines), (first, [line[2] for line in lines], last)
    code, out, _ = run(capsys, "reflog", "-C", repo.root, "-n", "2")
    assert [line.split("  (")[0] for line in out.splitlines()] == [
        f"{a[:12]} main@{{0}}: reset: moving to HEAD~2", f"{c[:12]} main@{{1}}: commit: c2"]
    assert run(capsys, "reset", c, "-C", repo.root)[0] == 0
    assert repo.head() == ("main", c) and same_state(repo.checkout("HEAD"), state(2))


# ---------------------------------------------------------------- REF@{N}, @{N}, @ (§13.3)
def test_reset_main_at_1_undoes_the_last_move_of_main(repo, capsys):
    a, b, c = chain(repo, 3)
    assert run(capsys, "reset", "HEAD~2", "-C", repo.root)[0] == 0
    code, out, err = run(capsys, "reset", "main@{1}", "-C", repo.root)
    assert (code, err) == (0, "") and repo.head() == ("main", c), out
    assert out.startswith(f"main now at {c[:12]} (was {a[:12]};")
    # each move is one entry more: main@{1} is now a again, main@{2} c, main@{3} back to b
    assert [resolve(repo, f"main@{{{n}}}") for n in range(5)] == [c, a, c, b, a]
    assert resolve(repo, "main@{1}~0") == a and resolve(repo, "main@{3}^") == a and resolve(repo, "main@{2}~2") == a
    assert resolve(repo, "@") == c and resolve(repo, "@~1") == b and resolve(repo, "@^^") == a
    assert resolve(repo, "@{0}") == c and resolve(repo, "@{1}") == a  # the current branch's reflog
    assert resolve(repo, " main@{01} ") == a  # as the other forms: surrounding blanks, leading zeros
    code, out, _ = run(capsys, "log", "--oneline", "main@{1}", "-C", repo.root)
    assert out.splitlines() == [f"*  {a[:12]} c0"]
    code, out, _ = run(capsys, "diff", "main@{1}", "@", "-C", repo.root, "--json")
    assert code == 0 and json.loads(out)["parameters"]


def test_every_reflog_line_names_its_commit_as_a_revision_does(repo, capsys):
    """`mdiff reflog` shows the newest move first, as NAME@{0}, which is where the ref is now; each
    line's NAME@{N} resolves to the commit on that line — for a branch, HEAD, a tag, a deleted branch and
    a remote-tracking ref — and the line of a deletion names none (MD801)."""
    from mdiff.repo.remotes import add_remote

    a, b, c = chain(repo, 3)
    repo.reset("HEAD~1")
    repo.switch("exp", create=True, start=a)
    repo.commit(state(9), "on exp", date=DATE)
    repo.switch("main")
    with repo.lock():
        repo.set_head(commit_id=c)
    repo.switch("main")
    repo.tag("v1", a)
    repo.tag("v1", "exp", force=True)
    repo.switch("gone", create=True)
    repo.switch("main")
    with repo.lock():
        repo.delete_branch("gone")
    other = Repository.init(repo.root.parent / "other")
    other.commit(state(3), "elsewhere", date=DATE)
    add_remote(repo, "origin", str(other.root))
    repo.fetch("origin")
    for ref, name in [(None, "main"), ("main", "main"), ("HEAD", "HEAD"), ("exp", "exp"), ("v1", "v1"),
                      ("refs/tags/v1", "v1"), ("gone", "gone"), ("origin/main", "origin/main")]:
        argv = ["reflog", "-C", repo.root] + ([ref] if ref else [])
        code, text, _ = run(capsys, *argv)
        code_json, out, _ = run(capsys, *argv, "--json")
        lines, rows = text.splitlines(), [json.loads(line) for line in out.splitlines()]
        assert code == code_json == 0 and len(lines) == len(rows) > 0, ref
        for n, (line, row) in enumerate(zip(lines, rows)):
            assert row["name"] == f"{name}@{{{n}}}" and f" {name}@{{{n}}}: {row['message']}  (" in line, (ref, line)
            if row["new"] is None:
                assert line.startswith("(deleted)")
                with pytest.raises(RepositoryError, match="MD801|names no commit") as info:
                    resolve(repo, row["name"])
                assert info.value.code == "MD801"
            else:
                assert line.startswith(row["new"][:12]) and resolve(repo, row["name"]) == row["new"], (ref, line)
        if name not in ("gone",):  # the newest entry is where the ref is now
            assert resolve(repo, f"{name}@{{0}}") == resolve(repo, name), ref
    head = [json.loads(line) for line in run(capsys, "reflog", "HEAD", "-C", repo.root, "--json")[1].splitlines()]
    assert [row["message"] for row in head[:3]] == ["switch to main", "switch to gone", "switch to main"]
    assert resolve(repo, "HEAD@{3}") == c  # where the detached HEAD was


@pytest.mark.parametrize("rev, why", [
    ("main@{3}", "holds only 3 entries"), ("main@{99999999999999999999999}", "holds only 3 entries"),
    ("nosuch@{0}", "neither a branch"), ("@{-1}", "not a revision"), ("main@{upstream}", "not a revision"),
    ("main@", "not a revision"), ("main@{1}@{1}", "not a revision"), ("@@", "not a revision"), ("@{}", "not a revision"),
    ("main@{1}~5", "goes back past a root commit"), ("x..y@{0}", "has no reflog"),
])
def test_a_reflog_revision_that_names_nothing_is_md801(repo, rev, why):
    chain(repo, 3)
    with pytest.raises(RepositoryError, match=re.escape(why)) as info:
        resolve(repo, rev)
    assert info.value.code == "MD801"


def test_reflog_revisions_on_missing_malformed_and_expired_reflogs_are_md801(repo, capsys):
    a, b = chain(repo, 2)
    with pytest.raises(RepositoryError, match="has no reflog"):
        resolve(repo, a + "@{0}")  # a commit id has none
    log = repo.dir / "logs" / "refs" / "heads" / "main"
    log.rename(log.with_name("away"))
    with pytest.raises(RepositoryError, match=r"main@\{0\}: refs/heads/main has no reflog"):
        resolve(repo, "main@{0}")
    assert resolve(repo, "main") == b  # the ref itself still names its commit
    log.with_name("away").rename(log)
    log.write_bytes(log.read_bytes() + b"not a reflog line\n")
    with pytest.raises(RepositoryError, match="is malformed"):
        resolve(repo, "main@{0}")
    code, _, err = run(capsys, "checkout", "main@{0}", "-o", repo.root / "x.safetensors", "-C", repo.root)
    assert code == 1 and "MD801" in err and not (repo.root / "x.safetensors").exists()
    log.write_bytes(b"".join(line + b"\n" for line in log.read_bytes().splitlines()[:2]))
    log.write_bytes(log.read_bytes() + f"{b} {'f' * 64} 5 gone by gc\n".encode() + b"an unterminated line")
    with pytest.raises(RepositoryError, match="names commit ffffffffffff, which is not in the repository"):
        resolve(repo, "main@{0}")  # the entry's commit was removed (an expired entry kept by hand)
    assert resolve(repo, "main@{1}") == b and resolve(repo, "main@{2}") == a  # the last, unterminated line is none
    # a remote's reflogs are not read
    code, out, _ = run(capsys, "checkout", "main@{0}", "--remote", repo.root, "-o", repo.root / "y.safetensors",
                       "--json", "-q")
    assert code == 1 and json.loads(out)["error"]["code"] == "MD801" and "reflog" in json.loads(out)["error"]["message"]
    assert resolve(repo, "@{1}") == b and resolve(repo, "@") == b


def test_a_long_reflog_is_read_a_line_at_a_time(repo):
    a, b = chain(repo, 2)
    log = repo.dir / "logs" / "refs" / "heads" / "main"
    line_ab, line_ba = f"{a} {b} 1 to b\n".encode(), f"{b} {a} 2 to a\n".encode()
    log.write_bytes((line_ab + line_ba) * 20000 + line_ab)  # 40001 entries, 5.6 MB
    assert resolve(repo, "main@{0}") == b and resolve(repo, "main@{1}") == a and resolve(repo, "main@{40000}") == b
    with pytest.raises(RepositoryError, match="holds only 40001 entries"):
        resolve(repo, "main@{40001}")


def test_branch_force_creates_or_moves_a_branch_the_current_one_included(repo, capsys):
    a, b = chain(repo, 2)
    code, out, _ = run(capsys, "branch", "-f", "exp", a, "-C", repo.root, "--json")
    assert (code, json.loads(out)) == (0, {"branch": "exp", "commit": a, "before": None})
    assert repo.force_branch("exp", "main") == (a, b)
    assert repo.force_branch("main", "HEAD~1") == (b, a)  # no working tree: only the ref moves
    assert repo.branches() == {"exp": b, "main": a}
    assert [line[3] for line in log_lines(repo, "refs/heads/exp")] == ["branch: created at " + a,
                                                                        "branch: forced to main"]
    assert run(capsys, "branch", "exp", "-C", repo.root)[0] == 1  # without -f an existing branch stays


def test_a_detached_head_and_a_deleted_branch_are_in_the_reflogs(repo):
    """HEAD's reflog records every move of HEAD, as git's: the moves of the branch it names, switches,
    detaching and attaching (§13.6); a branch's records its own moves only."""
    a, b = chain(repo, 2)
    with repo.lock():
        repo.set_head(commit_id=a)
    c = repo.commit(state(7), "detached", date=DATE)
    repo.switch("main")
    repo.switch("main")  # HEAD does not move: nothing is recorded
    repo.switch("side", create=True)
    repo.reset(a)
    assert [line[:2] + line[3:] for line in log_lines(repo, "HEAD")] == [
        [ZEROS, a, "commit: c0"], [a, b, "commit: c1"], [b, a, "switch"], [a, c, "commit: detached"],
        [c, b, "switch to main"], [b, b, "switch to side"], [b, a, "reset: moving to " + a]]
    assert [line[:2] + line[3:] for line in log_lines(repo, "refs/heads/main")] == [
        [ZEROS, a, "commit: c0"], [a, b, "commit: c1"]]
    assert [line[:2] + line[3:] for line in log_lines(repo, "refs/heads/side")] == [
        [ZEROS, b, "branch: created from HEAD"], [b, a, "reset: moving to " + a]]
    assert resolve(repo, "HEAD@{1}") == b and resolve(repo, "HEAD@{3}") == c and resolve(repo, "@{1}") == b
    repo.switch("main")
    repo.switch("gone", create=True, start=a)
    repo.switch("main")
    with repo.lock():
        repo.delete_branch("gone")
    assert log_lines(repo, "refs/heads/gone")[-1][:2] == [a, ZEROS]
    assert [e.message for e in repo.reflog("gone")[1]] == ["branch: deleted", "branch: created from " + a]


def test_a_reflog_line_cut_by_a_killed_writer_is_ignored_and_cut_before_the_next(repo):
    a, b = chain(repo, 2)
    path = repo.dir / "logs" / "refs" / "heads" / "main"
    whole = path.read_bytes()
    path.write_bytes(whole + b"0123abc")  # a writer killed in the middle of a line
    assert [e.new for e in repo.reflog()[1]] == [b, a]
    repo.reset(a)
    assert path.read_bytes().startswith(whole) and path.read_bytes()[len(whole):].startswith(f"{b} {a} ".encode())
    assert len(path.read_bytes().splitlines()) == 3


@pytest.mark.parametrize("damage", ["text", "long", "link", "fifo"])
def test_a_malformed_reflog_is_md801_and_gc_then_removes_no_commit(repo, damage, capsys):
    a, b = chain(repo, 2)
    repo.reset(a)
    path = repo.dir / "logs" / "refs" / "heads" / "main"
    path.unlink()
    if damage == "text":
        path.write_text(f"{a} {b} yesterday oops\n")
    elif damage == "long":
        path.write_bytes(f"{a} {b} 1 ".encode() + b"m" * 5000 + b"\n")
    elif damage == "link":
        os.symlink(repo.dir / "HEAD", path)
    else:
        os.mkfifo(path)
    with pytest.raises(RepositoryError) as info:
        repo.reflog()
    assert info.value.code == "MD801"
    assert [(f.code, Path(f.path).name) for f in repo.fsck()] == [("MD801", "main")]
    report = repo.gc(prune=0, reflog_expire=0)
    assert report.commits == [] and repo.commit_ids() == sorted([a, b])
    assert len(report.kept) == 1 and report.kept[0].reason.startswith("no commit removed: what the refs and reflogs")
    if damage in ("link", "fifo"):  # a writer appends only to a regular file, never through a link
        with pytest.raises(RepositoryError) as info:
            repo.reset(b)
        assert info.value.code == "MD801" and repo.head() == ("main", a)


# ---------------------------------------------------------------- gc
def test_gc_round_trip_reset_keeps_by_reflog_until_it_expires(repo, capsys):
    a, b, c = chain(repo, 3)
    repo.snapshot(c)
    repo.reset(a)
    # no grace for fresh files: the reflog alone keeps b and c
    code, out, _ = run(capsys, "gc", "--prune", "now", "--json", "-C", repo.root)
    assert code == 0 and json.loads(out)["commits_removed"] == [] and repo.commit_ids() == sorted([a, b, c])
    code, out, _ = run(capsys, "gc", "--prune", "now", "--reflog-expire", "now", "--dry-run", "--json", "-C", repo.root)
    report = json.loads(out)
    # four moves of main, each in main's reflog and HEAD's (HEAD names main: §13.6)
    assert report["commits_removed"] == sorted([b, c]) and report["reflog_entries_expired"] == 8
    assert {row["path"] for row in report["removed"]} == {f"commits/{b}.mdiff", f"commits/{c}.mdiff",  # with their
                                                           f"commits/{b}.blocks", f"commits/{c}.blocks",  # lists
                                                           f"snapshots/{c}.mdiff"}
    assert repo.commit_ids() == sorted([a, b, c])  # a dry run removes nothing
    code, out, _ = run(capsys, "gc", "--prune", "now", "--reflog-expire", "now", "-C", repo.root)
    assert code == 0 and out.splitlines()[-1].startswith("5 entries (2 commits), ")
    assert sorted(p.name for p in (repo.dir / "commits").iterdir()) == [f"{a}.blocks", f"{a}.mdiff"]
    assert repo.commit_ids() == [a] and not (repo.dir / "snapshots" / f"{c}.mdiff").exists()
    assert not (repo.dir / "logs" / "refs" / "heads" / "main").exists() and not (repo.dir / "logs" / "HEAD").exists()
    assert repo.fsck() == [] and same_state(repo.checkout("main"), state(0))


def test_gc_keeps_every_commit_a_ref_reaches(repo):
    a, b, c = chain(repo, 3)
    repo.switch("side", create=True, start=a)
    d = repo.commit(state(9), "side", date=DATE)
    repo.switch("main")
    repo.tag("v1", d)
    with repo.lock():
        repo.delete_branch("side")
    remote = repo.dir / "refs" / "remotes" / "origin"  # a remote-tracking ref: any file below refs/ counts
    remote.mkdir(parents=True)
    repo.reset(a)
    (remote / "main").write_text(c + "\n")
    report = repo.gc(prune=0, reflog_expire=0)
    assert report.commits == [] and repo.commit_ids() == sorted([a, b, c, d])
    repo.untag("v1")
    (remote / "main").unlink()
    assert repo.gc(prune=0, reflog_expire=0).commits == sorted([b, c, d])
    assert repo.fsck() == []


def test_gc_keeps_a_fresh_commit_no_ref_names_yet(repo, capsys):
    a, = chain(repo, 1)
    # a concurrent writer (a push into this repository) files its commit before the ref that names it
    pushed = repo.store(lambda w: None, Commit("pushed", parents=(a,), date=DATE))
    old = time.time() - 30 * 86400
    os.utime(repo.commit_path(pushed), (old, old))  # a copy that kept an old mtime: its ctime is new
    assert repo.gc(reflog_expire=0).commits == [] and pushed in repo.commit_ids()
    code, out, _ = run(capsys, "gc", "--prune", "1h", "--reflog-expire", "now", "--json", "-C", repo.root)
    assert json.loads(out)["commits_removed"] == []
    assert repo.gc(prune=0, reflog_expire=0).commits == [pushed]


def test_gc_keeps_the_parents_of_a_fresh_unreferenced_commit(repo):
    a, b = chain(repo, 2)
    repo.reset(a)
    with repo.lock():
        repo.rewrite_reflog("refs/heads/main", lambda entry: False)
    time.sleep(3)  # b's file gets older than the grace below; then the child is written
    child = repo.store(lambda w: None, Commit("on b", parents=(b,), date=DATE))
    assert repo.gc(prune=2, reflog_expire=0).commits == []  # child is fresh, so b, its parent, stays
    assert repo.gc(prune=0, reflog_expire=0).commits == sorted([b, child])


CONCURRENT_COMMITTER = """
import sys
from mdiff.repo import Repository
from tests.test_repo import state
r = Repository.find(sys.argv[1])
for i in range(int(sys.argv[2])):
    r.commit(state(100 + i), f"concurrent {i}", date="2026-05-01T00:00:00Z")
"""


def test_gc_running_while_another_process_commits_never_loses_a_commit(repo):
    a, b = chain(repo, 2)
    repo.reset(a)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-c", CONCURRENT_COMMITTER, str(repo.root), "4"], env=env)
    removed: list[str] = []
    while proc.poll() is None:
        removed += repo.gc(prune=0, reflog_expire=0).commits
        time.sleep(0.2)  # let the committer take the lock in between (a shorter pause starved it for minutes under load)
    assert proc.wait(timeout=120) == 0
    removed += repo.gc(prune=0, reflog_expire=0).commits
    assert removed == [b]  # the one commit reset away, and never a concurrent one
    line = resolve_line(repo)
    assert [repo.metadata(c).message for c in line] == [f"concurrent {i}" for i in range(3, -1, -1)] + ["c0"]
    assert repo.fsck() == []


def resolve_line(repo: Repository) -> list[str]:
    from mdiff.repo.history import first_parent_line

    return first_parent_line(repo, repo.head()[1])


def test_gc_waits_for_a_writer_holding_the_lock(repo):
    a, b = chain(repo, 2)
    repo.reset(a)
    done = []
    with repo.lock():
        worker = threading.Thread(target=lambda: done.append(Repository(repo.root).gc(prune=0, reflog_expire=0)))
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and repo.commit_ids() == sorted([a, b])
    worker.join(30)
    assert done[0].commits == [b]


def test_gc_durations_on_the_command_line(repo, capsys):
    chain(repo, 1)
    code, _, err = run(capsys, "gc", "--prune", "soon", "-C", repo.root)
    assert code == 2 and "'soon' is not a duration" in err
    from mdiff.cli.options import parse_duration

    assert [parse_duration(t) for t in ("now", "90s", "30m", "12h", "14d", "2w", "3")] == [
        0, 90, 1800, 43200, 14 * 86400, 14 * 86400, 3 * 86400]
    assert parse_duration("never") == float("inf")


def test_reflog_messages_are_one_bounded_line_and_an_overlong_cut_line_is_refused(repo):
    a, b = chain(repo, 2)
    with repo.lock():
        repo.set_branch("main", a, "two\nlines\x00and a NUL")
        repo.set_branch("main", b, "é" * 600)  # 1200 bytes: cut to 1000, at a character boundary
    newest, before = repo.reflog("main")[1][:2]
    assert before.message == "two lines and a NUL" and newest.message == "é" * 500
    path = repo.dir / "logs" / "refs" / "heads" / "main"
    path.write_bytes(path.read_bytes() + b"x" * 2000)  # an unterminated line no writer could have left
    with pytest.raises(RepositoryError, match="line 5 is longer than 1152 bytes"):  # too long to be cut short
        repo.reflog("main")
    with pytest.raises(RepositoryError, match="its last line is longer than 1152 bytes") as info:
        repo.reset(a)
    assert info.value.code == "MD801" and repo.head() == ("main", b)


MOVER = """
import sys
from mdiff.repo import Repository
from tests.test_repo import state
import mdiff.repo.repository
r = Repository.find(sys.argv[1])
print("ready", flush=True)
for i in range(1, 10_000):
    r.commit(state(i), f"step {i}", date="2026-05-01T00:00:00Z")
    if i % 3 == 0:
        r.reset("HEAD~1")
    if i % 4 == 0:
        r.force_branch("side", "HEAD")
        r.tag("latest", "HEAD", force=True)
"""


def test_kill_nine_while_refs_move_leaves_every_ref_move_in_the_reflog(repo):
    """Commits, resets, branch -f and tag -f killed at random moments: the reflog is readable, its last
    entry names where main is (the line is written before the ref), and gc then keeps every commit a
    reflog names, with the repository sound."""
    chain(repo, 1)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    rng = np.random.default_rng(1)
    for attempt in range(10):
        proc = subprocess.Popen([sys.executable, "-c", MOVER, str(repo.root)], env=env, stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # imports take seconds here
        time.sleep(float(rng.uniform(0.1, 1.5)))
        proc.kill()
        proc.wait()
        last = repo.reflog("main")[1][0]
        assert repo.head()[1] in (last.new, last.old), attempt
        named = {c for ref in repo.reflog_refs() for e in repo.reflog_entries(ref) for c in e.ids()}
        repo.gc(prune=0)
        assert named <= set(repo.commit_ids()), attempt
        assert [f for f in repo.fsck(check_data=False) if f.is_error] == [], attempt
    assert len(repo.reflog("main")[1]) > 10


def test_refs_of_the_longest_names_move_and_move_ref_takes_only_refs(repo):
    a, = chain(repo, 1)
    longest = "b" * 255
    assert repo.force_branch(longest, "HEAD") == (None, a)  # its temporary file's name stays within 255 bytes
    repo.tag("t" * 255)
    assert repo.branches()[longest] == a and repo.tags() == {"t" * 255: a}
    for bad in ("refs/../x", "HEAD", "refs/heads/x.lock", "logs/refs/heads/main"):
        with repo.lock(), pytest.raises(RepositoryError, match="is not a ref") as info:
            repo.move_ref(bad, a, "m")
        assert info.value.code == "MD801"
    with repo.lock():
        repo.move_ref("refs/remotes/origin/main", a, "fetch")
    assert (repo.dir / "refs" / "remotes" / "origin" / "main").read_text() == a + "\n"
    assert [e.message for e in repo.reflog("refs/remotes/origin/main")[1]] == ["fetch"]


def test_move_refs_moves_many_refs_as_move_ref_moves_each_with_their_syncs_together(repo, monkeypatch, caplog):
    """A fetch's thousands of remote-tracking refs move in rounds (issue 31): each ref and its reflog as
    move_ref leaves them — a line per move, the old side as it was, HEAD's reflog with its branch's — each file
    synced (a line before its ref is written), each folder once a round; an error leaves no temporary file."""
    import logging

    import mdiff.repo.refs as refs_module

    monkeypatch.setattr(logging.getLogger("mdiff"), "handlers", [])  # as a command left it: to caplog, here
    monkeypatch.setattr(logging.getLogger("mdiff"), "propagate", True)
    a, b = chain(repo, 2)
    with repo.lock():
        repo.move_ref("refs/remotes/origin/b000", b, "fetch")
        repo.move_ref("refs/remotes/origin/gone", b, "fetch")
        repo.move_ref("refs/remotes/origin/exp", b, "fetch")
        repo.move_ref("refs/remotes/origin/exp", None, "fetch: gone")  # its reflog stays, in exp/lora's way
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(refs_module.os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[1])
    moves = [(f"refs/remotes/origin/b{i:03d}", a, "fetch origin") for i in range(300)]
    moves += [("refs/remotes/origin/gone", None, "gone"), ("refs/heads/main", a, "reset"),
              ("refs/remotes/origin/exp/lora", a, "fetch origin"), ("refs/tags/v1", a, "fetch origin")]
    with repo.lock():
        repo.move_refs(moves)
    # 302 moves in two rounds: a reflog line and a ref file each (exp/lora's line not recorded), and each folder
    # of a round once (1, then 3: origin/, origin/exp/, tags/); alone: the deletion (its reflog, its folder) and
    # main (its reflog and HEAD's, the ref, its folder)
    assert len(synced) == 301 + 302 + 1 + 3 + 2 + 4
    assert "the move of refs/remotes/origin/exp/lora is not recorded" in caplog.text
    assert repo.all_refs() == sorted(["refs/heads/main", "refs/tags/v1", "refs/remotes/origin/exp/lora",
                                      *(f"refs/remotes/origin/b{i:03d}" for i in range(300))])
    assert {ref: repo.ref_file_target(ref) for ref in repo.all_refs()} == dict.fromkeys(repo.all_refs(), a)
    moved = {ref: [line[:2] + line[3:] for line in log_lines(repo, ref)] for ref in
             ("refs/remotes/origin/b000", "refs/remotes/origin/b299", "refs/remotes/origin/gone", "refs/tags/v1",
              "refs/heads/main", "HEAD")}
    assert moved["refs/remotes/origin/b000"] == [["0" * 64, b, "fetch"], [b, a, "fetch origin"]]
    assert moved["refs/remotes/origin/b299"] == moved["refs/tags/v1"] == [["0" * 64, a, "fetch origin"]]
    assert moved["refs/remotes/origin/gone"] == [["0" * 64, b, "fetch"], [b, "0" * 64, "gone"]]
    assert moved["refs/heads/main"][-1] == moved["HEAD"][-1] == [b, a, "reset"]
    (repo.dir / "refs" / "remotes" / "origin" / "b150").unlink()
    os.symlink("elsewhere", repo.dir / "refs" / "remotes" / "origin" / "b150")  # what a writer may not replace
    with repo.lock(), pytest.raises(RepositoryError, match="b150 is a symbolic link") as refused:
        repo.move_refs([(f"refs/remotes/origin/b{i:03d}", b, "fetch origin") for i in range(100, 200)])
    assert refused.value.code == "MD801"
    assert [p.name for p in (repo.dir / "refs").rglob(".*")] == []  # no temporary file left
    assert repo.ref_file_target("refs/remotes/origin/b100") == a  # the round's refs were not written


def test_gc_drops_only_the_expired_reflog_entries_and_what_only_they_kept(repo, capsys):
    a, b = chain(repo, 2)
    path = repo.dir / "logs" / "refs" / "heads" / "main"
    young = path.read_bytes()
    orphan = repo.store(lambda w: None, Commit("named by an old entry only", parents=(a,), date=DATE))
    old = f"{a} {orphan} 1000000000 an old move\n{orphan} {a} 1000000001 and back\n".encode()
    path.write_bytes(old + young)
    code, out, _ = run(capsys, "gc", "--prune", "now", "--json", "-C", repo.root)  # default expiry: 30 days
    report = json.loads(out)
    assert code == 0 and report["reflog_entries_expired"] == 2 and report["commits_removed"] == [orphan]
    assert path.read_bytes() == young and repo.commit_ids() == sorted([a, b])
    code, out, _ = run(capsys, "gc", "--prune", "now", "--reflog-expire", "never", "--json", "-C", repo.root)
    assert json.loads(out)["reflog_entries_expired"] == 0 and path.read_bytes() == young


def test_a_deleted_branchs_reflog_in_the_way_costs_a_reflog_line_never_the_move(repo, capsys):
    a, b = chain(repo, 2)
    for first, second in (("exp", "exp/lora"), ("topic/x", "topic")):
        repo.force_branch(first, "HEAD")
        with repo.lock():
            repo.delete_branch(first)  # its reflog stays, where the next branch's reflog (or folder) goes
        code, out, err = run(capsys, "branch", second, "HEAD~1", "-C", repo.root)
        assert code == 0 and repo.branches()[second] == a
        assert f"mdiff: the move of refs/heads/{second} is not recorded: the reflog of a deleted ref is in the way" in err
    assert repo.gc(prune=0, reflog_expire=0).commits == []
    repo.force_branch("exp/lora", "main")  # once gc expired the old reflogs, moves are recorded again
    assert [e.message for e in repo.reflog("exp/lora")[1]] == ["branch: forced to main"]
