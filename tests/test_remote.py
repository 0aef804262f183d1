"""Remotes (SPEC.md §13.8): clone, fetch, pull and push on local folders and on a real S3 API (moto's
server, reached through s3fs as AWS would be); only missing commits move, each verified before it is
filed; refs move by compare-and-swap; a killed push leaves the remote before or after; a hostile
remote leaves the local repository as it was; credentials are never stored or shown."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdiff.cli.main import main
from mdiff.errors import RepositoryError
from mdiff.repo import Repository
from mdiff.repo.history import resolve
from mdiff.repo.remote_ends import FsspecEnd, RefMoved
from mdiff.repo.remotes import add_remote, open_end
from mdiff.repo.transfer import fetch, push
from tests.helpers import plant_commit

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cr3t-Never-Shown-4f9a"


def state(seed: int, size: int = 64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal(size).astype(np.float32), "b": np.full(4, seed, np.float32)}


def commit(repo: Repository, seed: int, size: int = 64) -> str:
    commit_id = repo.commit(state(seed, size), f"step {seed}", author="Tester <t@example.com>",
                            date=f"2026-05-01T00:{seed % 60:02d}:00Z")
    assert commit_id is not None
    return commit_id


def snapshot_of(repo: Repository) -> dict:
    """Everything a failed transfer must leave as it was: every file's name and bytes."""
    return {str(p.relative_to(repo.dir)): p.read_bytes() for p in sorted(repo.dir.rglob("*"))
            if p.is_file() and p.name != "lock"}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- the S3 server
@pytest.fixture(scope="module")
def s3():
    """moto's standalone S3 server on a free port; (endpoint URL, storage options, environment). The
    tests that use it are skipped where s3fs or moto is not installed; the others need neither."""
    moto_server = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ACCESS_KEY_ID": "mdiff-test-key", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    options = {"client_kwargs": {"endpoint_url": endpoint}}
    with contextlib.suppress(FileExistsError):  # moto's state is the process's: another module's server made it
        s3fs.S3FileSystem(**options).mkdir("bucket")
    yield endpoint, options, env
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def bucket_url(s3, request):
    return f"s3://bucket/{request.node.name[:40]}-{time.monotonic_ns()}"


def s3_files(options: dict):
    import s3fs

    return s3fs.S3FileSystem(**options)


def subprocess_env(s3) -> dict:
    endpoint, options, env = s3
    return dict(os.environ, **env, PYTHONPATH=str(ROOT), MDIFF_STORAGE_OPTIONS=json.dumps(options))


# ---------------------------------------------------------------- round trips
@pytest.mark.parametrize("kind", ["path", "file", "s3"])
def test_clone_push_fetch_pull_round_trip(tmp_path, kind, request, capsys):
    options = None
    if kind == "s3":
        _, options, _ = request.getfixturevalue("s3")
        url = request.getfixturevalue("bucket_url")
    else:
        url = str(tmp_path / "origin") if kind == "path" else f"file://{tmp_path / 'origin'}"
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", url)
    first = [commit(alice, seed) for seed in range(3)]
    report = push(alice, "origin", "main", options=options)
    assert (report.before, report.after, report.commits) == (None, first[-1], sorted(first))
    assert report.bytes == sum(alice.commit_path(c).stat().st_size for c in first)

    bob, cloned = Repository.clone(url, tmp_path / "bob", options)
    assert bob.head() == ("main", first[-1]) and sorted(cloned.commits) == sorted(first)
    assert resolve(bob, "origin/main~1") == first[1]
    assert bob.fsck() == []

    second = commit(alice, 7)  # only the new commit moves, and only its bytes
    report = push(alice, "origin", "main", options=options)
    assert report.commits == [second] and report.bytes == alice.commit_path(second).stat().st_size
    fetched, pulled = bob.pull("origin", options=options)
    assert (fetched.commits, pulled.how, pulled.commit, pulled.conflicts) == ([second], "fast-forward", second, [])

    mine = commit(bob, 8)  # diverged: a merge, pushed back as a fast-forward of the remote
    theirs = commit(alice, 9)
    push(alice, "origin", "main", options=options)
    with pytest.raises(RepositoryError) as refused:
        push(bob, "origin", "main", options=options)
    assert refused.value.code == "MD803" and "pull" in refused.value.message
    _, stopped = bob.pull("origin", options=options, date="2026-05-02T00:00:00Z")  # both changed b and w: conflicts
    assert (stopped.how, stopped.commit, [c.name for c in stopped.conflicts]) == ("conflicts", None, ["b", "w"])
    assert bob.head() == ("main", mine)
    _, pulled = bob.pull("origin", strategy="average", options=options, date="2026-05-02T00:00:00Z")
    merged = pulled.commit
    assert pulled.how == "merge" and merged and bob.parents(merged) == (mine, theirs)
    assert push(bob, "origin", "main", options=options).commits == sorted([mine, merged])
    fetch(alice, "origin", options=options)
    assert resolve(alice, "origin/main") == merged
    assert bob.checkout("origin/main")["b"].tolist() == [8.5] * 4  # average of 8 and 9

    if kind != "s3":  # the command line, on the same remote: log, branch -a, --json
        code, out, _ = run(capsys, "log", "--oneline", "-C", tmp_path / "alice", "origin/main")
        assert code == 0 and f"{merged[:12]} (origin/main) Merge origin/main into main (average)" in out
        code, out, _ = run(capsys, "branch", "-a", "--json", "-C", tmp_path / "alice")
        assert json.loads(out)["remotes"] == {"origin/main": merged}
        code, out, _ = run(capsys, "fetch", "--json", "-C", tmp_path / "alice")
        assert code == 0 and json.loads(out)["commits"] == []


def test_force_push_replaces_a_branch_and_fetch_follows(tmp_path):
    origin = tmp_path / "origin"
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(origin))
    base = commit(alice, 0)
    commit(alice, 1)
    push(alice, "origin", "main")
    bob, _ = Repository.clone(str(origin), tmp_path / "bob")
    with alice.lock():
        alice.set_branch("main", base)
    other = commit(alice, 2)
    with pytest.raises(RepositoryError, match="MD803"):
        push(alice, "origin", "main")
    report = push(alice, "origin", "main", force=True)
    assert report.forced and Repository(origin).branch_target("main") == other
    assert fetch(bob, "origin").commits == [other] and resolve(bob, "origin/main") == other


def test_tags_are_pushed_and_fetched_and_a_different_local_tag_is_kept(tmp_path):
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(tmp_path / "origin"))
    v1 = commit(alice, 0)
    v2 = commit(alice, 1)
    with alice.lock():
        alice.write_ref("refs/tags/v1", v1)
    assert push(alice, "origin", "main").tags == ["v1"]
    bob, report = Repository.clone(str(tmp_path / "origin"), tmp_path / "bob")
    assert report.tags == {"v1": v1} and bob.read_ref("refs/tags/v1") == v1
    carol = Repository.init(tmp_path / "carol")
    add_remote(carol, "origin", str(tmp_path / "origin"))
    commit(carol, 5)
    with carol.lock():
        carol.write_ref("refs/tags/v1", carol.head()[1])
    report = fetch(carol, "origin")
    assert report.tags_kept == ["v1"] and carol.read_ref("refs/tags/v1") != v1 and resolve(carol, "origin/main") == v2


# ---------------------------------------------------------------- refs move by compare-and-swap
def test_s3_conditional_writes_refuse_a_stale_ref(s3, bucket_url, tmp_path):
    """The store itself refuses: If-Match with the etag of a ref another pusher replaced since, and
    If-None-Match: * on a ref another pusher created."""
    _, options, _ = s3
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", bucket_url)
    first, second = commit(alice, 0), commit(alice, 1)
    push(alice, "origin", "main", options=options)
    end = open_end(bucket_url, options)
    assert isinstance(end, FsspecEnd) and end.conditional
    _, stale = end._small("refs/heads/main")
    end.conditional_put("refs/heads/main", first + "\n", stale)  # another pusher moves it
    with pytest.raises(RefMoved):
        end.conditional_put("refs/heads/main", second + "\n", stale)
    with pytest.raises(RefMoved):
        end.conditional_put("refs/heads/main", second + "\n", None)
    assert end.refs() == {"refs/heads/main": first}
    with pytest.raises(RefMoved):  # the read-compare step: the ref is not what the pusher saw
        end.update_ref("refs/heads/main", second, first)


def test_two_concurrent_pushers_exactly_one_wins(s3, bucket_url, tmp_path):
    """Two pushers of diverged commits at once, each with its own local repository: one moves the
    branch, the other is refused (MD803, told to pull) — by the compare-and-swap when both read the
    ref before either wrote it, else as a push that is not a fast-forward."""
    _, options, _ = s3
    base = Repository.init(tmp_path / "base")
    add_remote(base, "origin", bucket_url)
    commit(base, 0)
    push(base, "origin", "main", options=options)
    repos, tips = [], []
    for i in (1, 2):
        repo, _ = Repository.clone(bucket_url, tmp_path / f"r{i}", options)
        repos.append(repo)
        tips.append(commit(repo, 10 + i, size=50_000))
    start = threading.Barrier(2)
    results: list = [None, None]

    def pusher(i: int) -> None:
        start.wait()
        try:
            results[i] = push(repos[i], "origin", "main", options=options).after
        except RepositoryError as exc:
            results[i] = exc

    threads = [threading.Thread(target=pusher, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [i for i in (0, 1) if isinstance(results[i], str)]
    assert len(won) == 1, results
    lost = results[1 - won[0]]
    assert isinstance(lost, RepositoryError) and lost.code == "MD803" and "pull" in lost.message
    assert open_end(bucket_url, options).refs() == {"refs/heads/main": tips[won[0]]}


PUSHER = """
import sys
import s3fs  # imported before the parent says go: the moments killed are those of the push itself
from mdiff.repo import Repository
from mdiff.repo.remotes import storage_options
from mdiff.repo.transfer import push
repo = Repository(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
push(repo, "origin", "main", options=storage_options())
print("done", flush=True)
"""


def test_a_push_killed_at_any_moment_leaves_the_remote_before_or_after(s3, bucket_url, tmp_path):
    """SIGKILL at a random moment of a push of two commits (uniform over 2.5× a whole push's time,
    measured first): the remote's branch is as before or as after, and every commit it needs is there
    and sound (a fetch of it verifies them all and finds each one's parents)."""
    _, options, _ = s3
    repo = Repository.init(tmp_path / "local")
    add_remote(repo, "origin", bucket_url)
    commit(repo, 0)
    push(repo, "origin", "main", options=options)
    copy, _ = Repository.clone(bucket_url, tmp_path / "copy", options)
    env = subprocess_env(s3)
    rng = np.random.default_rng(0)
    outcomes = []
    duration = None

    def pusher() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", PUSHER, str(repo.root)], env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    following = pusher()
    attempt, last = 0, 10
    while attempt <= last:
        proc, following = following, None
        before = open_end(bucket_url, options).refs()["refs/heads/main"]
        commit(repo, 100 + 2 * attempt, size=300_000)
        tip = commit(repo, 101 + 2 * attempt, size=300_000)
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n"
        began = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if duration is None:  # the first push runs to the end: how long a push takes
            assert proc.stdout.readline() == "done\n"
            duration = time.monotonic() - began
        else:
            time.sleep(float(rng.uniform(0, 2.5 * duration)))
            proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        after = open_end(bucket_url, options).refs()["refs/heads/main"]
        assert after in (before, tip), attempt
        outcomes.append(after == tip)
        # a loaded machine can make every push of ten end before its kill, or none: go on until both were seen
        if attempt == last and len(set(outcomes[1:])) < 2 and last < 30:
            last += 1
        if attempt < last:
            following = pusher()  # starts up while this attempt is checked
        fetch(copy, "origin", options=options)  # MD800/MD801 if a commit the ref needs were missing or partial
        assert resolve(copy, "origin/main") == after and [f for f in copy.fsck(check_data=False) if f.is_error] == []
        attempt += 1
    assert any(outcomes[1:]) and not all(outcomes[1:]), (duration, outcomes)


# ---------------------------------------------------------------- hostile or broken remotes
def test_a_remote_serving_wrong_bytes_is_md800_and_the_local_repository_is_unchanged(s3, bucket_url, tmp_path):
    _, options, _ = s3
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", bucket_url)
    first = commit(alice, 0)
    push(alice, "origin", "main", options=options)
    bob, _ = Repository.clone(bucket_url, tmp_path / "bob", options)
    second = commit(alice, 1)
    push(alice, "origin", "main", options=options)
    fs = s3_files(options)
    key = f"{bucket_url}/.mdiff/commits/{second}.mdiff"
    good = fs.cat_file(key)
    before = snapshot_of(bob)
    for bad in (good[:-1] + bytes([good[-1] ^ 1]), good[: len(good) // 2]):  # a flipped bit; a truncated file
        fs.pipe_file(key, bad)
        with pytest.raises(RepositoryError) as caught:
            fetch(bob, "origin", options=options)
        assert caught.value.code == "MD800" and second[:12] in caught.value.message
        assert snapshot_of(bob) == before and bob.head()[1] == first
    fs.pipe_file(key, good)
    assert fetch(bob, "origin", options=options).commits == [second]


def test_a_folder_remote_past_the_cap_of_refs_is_md801_before_any_ref_is_read(tmp_path, monkeypatch):
    """A local folder's listing is capped as an object store's is (§13.8; the fuzzer's remote family found it
    read without a cap): past MAX_REMOTE_REFS valid names, MD801 saying how many, and nothing fetched."""
    origin = tmp_path / "origin"
    alice = Repository.init(origin)
    first = commit(alice, 0)
    heads = alice.dir / "refs" / "heads"
    for i in range(350):  # hard links of one ref: each a name the listing counts
        os.link(heads / "main", heads / f"b{i:03d}")
    (heads / "not..valid").write_text(first + "\n")  # not a valid name: ignored, not counted
    monkeypatch.setattr("mdiff.repo.remote_ends.MAX_REMOTE_REFS", 351)
    bob, report = Repository.clone(str(origin), tmp_path / "bob")
    assert len(report.branches) == 351 and resolve(bob, "origin/b349") == first
    os.link(heads / "main", heads / "b350")
    with pytest.raises(RepositoryError) as refused:
        Repository.clone(str(origin), tmp_path / "carol")
    assert refused.value.code == "MD801" and "352 branches and tags, more than mdiff reads from one remote (351)" \
        in refused.value.message
    assert not (tmp_path / "carol").exists()


def test_hostile_local_remotes_get_typed_errors_and_change_nothing(tmp_path):
    origin = tmp_path / "origin"
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(origin))
    first = commit(alice, 0)
    push(alice, "origin", "main")
    bob, _ = Repository.clone(str(origin), tmp_path / "bob")
    before = snapshot_of(bob)
    second = commit(alice, 1)
    push(alice, "origin", "main")
    remote = Repository(origin)
    path = remote.commit_path(second)
    good = path.read_bytes()

    def refused(code: str) -> None:
        with pytest.raises(RepositoryError) as caught:
            fetch(bob, "origin")
        assert caught.value.code == code, caught.value
        assert snapshot_of(bob) == before and bob.head()[1] == first

    path.unlink()  # a ref to a missing commit
    refused("MD801")
    path.write_bytes(good[:100])  # truncated
    refused("MD800")
    path.write_bytes(good)
    junk = b"not an mdiff file"  # named by its sha256, reached by no ref: not filed, and no obstacle
    junk_id = plant_commit(remote, junk)
    assert fetch(bob, "origin").commits == [second] and junk_id not in bob.commit_ids()
    with bob.lock():
        bob.write_ref("refs/remotes/origin/main", first)
    (bob.dir / "commits" / f"{second}.mdiff").unlink()
    before = snapshot_of(bob)  # the successful fetch's reflog line stays
    with remote.lock():  # reached by a ref: refused (a commit readers would refuse), nothing changes
        remote.create_branch("junk", junk_id)
    refused("MD802")
    remote.delete_branch("junk")
    parent = remote.commit_path(first)
    # a ref naming a commit whose parent the remote lacks (and the local repository too)
    fresh = Repository.init(tmp_path / "fresh")
    add_remote(fresh, "origin", str(origin))
    parent.rename(tmp_path / "hidden")
    with pytest.raises(RepositoryError, match="MD801"):
        fetch(fresh, "origin")
    assert fresh.commit_ids() == [] and not list((fresh.dir / "commits").iterdir())
    (tmp_path / "hidden").rename(parent)
    (origin / ".mdiff/refs/heads/main").write_text(second + "\n" + "x" * 300)  # oversized ref
    refused("MD801")


def pushed_to_s3(s3, bucket_url: str, tmp_path: Path) -> tuple[Repository, str, dict, Any]:
    """alice, with one commit pushed to ``bucket_url``: (alice, the commit, storage options, the bucket's files)."""
    _, options, _ = s3
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", bucket_url)
    first = commit(alice, 0)
    push(alice, "origin", "main", options=options)
    return alice, first, options, s3_files(options)


def test_hostile_names_and_sizes_on_s3(s3, bucket_url, tmp_path):
    _, first, options, fs = pushed_to_s3(s3, bucket_url, tmp_path)
    fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/a..b", (first + "\n").encode())  # no valid branch name: ignored
    fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/.hidden", b"junk")  # a temporary file: ignored
    fs.pipe_file(f"{bucket_url}/.mdiff/commits/../../escape.mdiff", b"x")  # not a commit name: ignored
    bob, report = Repository.clone(bucket_url, tmp_path / "bob", options)
    assert report.branches == {"main": (None, first)} and bob.commit_ids() == [first]
    assert not (tmp_path / "escape.mdiff").exists()
    fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/huge", b"0" * 1_000_000)
    with pytest.raises(RepositoryError, match="MD801"):
        fetch(bob, "origin", options=options)
    fs.rm_file(f"{bucket_url}/.mdiff/refs/heads/huge")
    fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/gone", ("f" * 64 + "\n").encode())
    with pytest.raises(RepositoryError, match="which the remote does not have"):
        fetch(bob, "origin", options=options)


def count_requests(monkeypatch) -> dict[str, int]:
    """The S3 requests s3fs sends for keys below ``.mdiff/refs/``, by operation: the real filesystem, each call
    counted on its way to the server."""
    import s3fs

    calls: dict[str, int] = {}
    original = s3fs.S3FileSystem._call_s3

    async def counted(self, method, *args, **kwargs):
        if ".mdiff/refs/" in str(kwargs.get("Key", "")) + str(kwargs.get("Prefix", "")):
            calls[method] = calls.get(method, 0) + 1
        return await original(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    return calls


def test_a_remote_with_many_refs_is_read_in_one_listing_and_one_get_per_distinct_etag(s3, bucket_url, tmp_path,
                                                                                        monkeypatch):
    """Issue 31: 3,000 refs took 38.9 s, two requests each. Now: one listing per folder; of the refs whose listed
    ETag (the MD5 of their bytes) is new, one GET per distinct ETag; none for a ref whose ETag is the MD5 of a
    commit its tracking ref or a tag here names (§13.8); and a cap, said."""
    alice, first, options, fs = pushed_to_s3(s3, bucket_url, tmp_path)
    fs.pipe({f"{bucket_url}/.mdiff/refs/heads/team/b{i:03d}".removeprefix("s3://"): (first + "\n").encode()
             for i in range(300)})
    fs.pipe({f"{bucket_url}/.mdiff/refs/tags/v{i}".removeprefix("s3://"): (first + "\n").encode() for i in range(50)})
    calls = count_requests(monkeypatch)
    bob, report = Repository.clone(bucket_url, tmp_path / "bob", options)
    assert calls == {"list_objects_v2": 2, "get_object": 1}  # 351 refs, one distinct ETag
    assert len(report.branches) == 301 and len(report.tags) == 50
    assert resolve(bob, "origin/team/b299") == first and resolve(bob, "v49") == first
    assert bob.fsck() == []
    calls.clear()  # as this fetch left them: the listing alone
    assert fetch(bob, "origin", options=options).branches == {}
    assert calls == {"list_objects_v2": 2}
    second = commit(alice, 1)
    push(alice, "origin", "main", options=options)
    calls.clear()
    for i in range(10):  # ten branches moved to the new commit: one GET for the ten
        fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/team/b{i:03d}", (second + "\n").encode())
    calls.clear()
    report = fetch(bob, "origin", options=options)
    assert calls == {"list_objects_v2": 2, "get_object": 1}
    assert sorted(report.branches) == ["main", *(f"team/b{i:03d}" for i in range(10))]
    assert {after for _, after in report.branches.values()} == {second} and resolve(bob, "origin/team/b010") == first
    monkeypatch.setattr("mdiff.repo.remote_ends.MAX_REMOTE_REFS", 350)
    with pytest.raises(RepositoryError) as refused:
        fetch(bob, "origin", options=options)
    assert refused.value.code == "MD801" and "351 branches and tags, more than mdiff reads from one remote (350)" \
        in refused.value.message


def test_refs_whose_etag_is_no_md5_of_their_bytes_are_each_read(s3, bucket_url, tmp_path, monkeypatch):
    """An ETag vouches for a ref's bytes only where it is their MD5: a multipart upload's (``<hex>-1``) is not,
    and a ref moved after the listing no longer hashes to the ETag listed: then every ref of that ETag is read,
    and each gets its own bytes (§13.8)."""
    alice, first, options, fs = pushed_to_s3(s3, bucket_url, tmp_path)
    second = commit(alice, 1)
    push(alice, "origin", "main", options=options)
    fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/side", (first + "\n").encode())
    bucket, prefix = bucket_url.removeprefix("s3://").split("/", 1)
    for name, target in (("multi/a", first), ("multi/b", first), ("multi/c", second)):
        key = f"{prefix}/.mdiff/refs/heads/{name}"
        upload = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
        part = fs.call_s3("upload_part", Bucket=bucket, Key=key, UploadId=upload, PartNumber=1,
                          Body=(target + "\n").encode())
        fs.call_s3("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=upload,
                   MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert all(entry["ETag"].endswith('-1"') for entry in fs.ls(f"{bucket_url}/.mdiff/refs/heads/multi", detail=True))
    fs.pipe({f"{bucket_url}/.mdiff/refs/heads/same/b{i}".removeprefix("s3://"): (second + "\n").encode()
             for i in range(5)})
    listing = FsspecEnd._listing

    def moved_after_listing(self, relative):  # another pusher moves main once the listing is taken
        entries = listing(self, relative)
        if relative == "refs/heads":
            fs.pipe_file(f"{bucket_url}/.mdiff/refs/heads/main", (first + "\n").encode())
        return entries

    monkeypatch.setattr(FsspecEnd, "_listing", moved_after_listing)
    calls = count_requests(monkeypatch)
    refs = open_end(bucket_url, options).refs()
    # main (read first of its ETag: it no longer hashes to it, so same/b0…b4 are each read), side, the three
    # multipart refs: 10 GETs for 10 refs; main as read, the others as listed
    assert refs == {"refs/heads/main": first, "refs/heads/side": first, "refs/heads/multi/a": first,
                    "refs/heads/multi/b": first, "refs/heads/multi/c": second,
                    **{f"refs/heads/same/b{i}": second for i in range(5)}}
    # and the listings: refs/heads's, and refs/tags's, which holds nothing (s3fs then asks whether it is an
    # object: a HEAD and a listing); the PUT is the other pusher's
    assert calls == {"list_objects_v2": 3, "head_object": 1, "get_object": 10, "put_object": 1}


# ---------------------------------------------------------------- credentials
def test_credentials_are_never_stored_printed_or_logged(s3, bucket_url, tmp_path, capsys, monkeypatch):
    endpoint, _, env = s3
    monkeypatch.delenv("MDIFF_STORAGE_OPTIONS", raising=False)
    repo = Repository.init(tmp_path / "repo")
    commit(repo, 0)
    with pytest.raises(RepositoryError, match="credentials"):
        add_remote(repo, "bad", f"s3://key:{SECRET}@bucket/x")
    secret = ["--storage-option", f"key={env['AWS_ACCESS_KEY_ID']}", "--storage-option", f"secret={SECRET}"]
    output = ""
    for argv in (["remote", "add", "origin", bucket_url],
                 ["push", "-vv", "--storage-option", f"client_kwargs.endpoint_url={endpoint}", *secret],
                 ["fetch", "-vv", "--json", "--storage-option", f"client_kwargs.endpoint_url={endpoint}", *secret],
                 ["push", "-vv", "--storage-option", "client_kwargs.endpoint_url=http://127.0.0.1:9",
                  "--storage-option", "retries=1", *secret]):
        code, out, err = run(capsys, *argv, "-C", repo.root)
        output += out + err
    assert "pushed 1 commit (" in output and "mdiff: error MD801" in output  # the last push cannot connect
    assert SECRET not in output
    for path in repo.dir.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path


def test_a_store_without_conditional_writes_is_pushed_to_under_a_lock_object(tmp_path, capsys):
    """memory:// (fsspec) has no conditional writes: refs move under .mdiff/push.lock, created only if
    absent; while another pusher holds it, a push is refused (MD803, exit 1). The command line says to
    pull when a push is not a fast-forward."""
    import fsspec

    url = f"memory://mdiff-tests/{time.monotonic_ns()}"
    alice = Repository.init(tmp_path / "alice")
    first = commit(alice, 0)
    assert run(capsys, "remote", "add", "origin", url, "-C", alice.root)[0] == 0
    code, out, _ = run(capsys, "push", "--json", "-C", alice.root)
    assert code == 0 and json.loads(out)["after"] == first
    bob, _ = Repository.clone(url, tmp_path / "bob")
    assert bob.head() == ("main", first)
    fs = fsspec.filesystem("memory")
    lock = url.removeprefix("memory://") + "/.mdiff/push.lock"
    fs.pipe_file(lock, b"another pusher")
    second = commit(alice, 1)
    code, _, err = run(capsys, "push", "-C", alice.root)
    assert code == 1 and "MD803" in err and "push.lock" in err
    fs.rm_file(lock)
    assert run(capsys, "push", "-C", alice.root)[0] == 0 and not fs.exists(lock)
    commit(bob, 2)
    code, _, err = run(capsys, "push", "-C", bob.root)
    assert code == 1 and "MD803" in err and "mdiff pull origin main" in err
    assert open_end(url).refs() == {"refs/heads/main": second}


def test_fsck_checks_remotes_and_tracking_refs_and_progress_counts_bytes(tmp_path, capsys):
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(tmp_path / "origin"))
    ids = [commit(alice, seed) for seed in range(3)]
    calls: list[tuple[str, int, int]] = []
    push(alice, "origin", "main", progress=lambda item, done, total: calls.append((item, done, total)))
    sizes = {c: alice.commit_path(c).stat().st_size for c in ids}
    assert sorted(item for item, _, _ in calls) == sorted(ids)  # one call per commit file, in bytes
    assert calls[-1][1:] == (sum(sizes.values()), sum(sizes.values()))
    bob, _ = Repository.clone(str(tmp_path / "origin"), tmp_path / "bob")
    assert bob.fsck() == []
    (bob.dir / "refs" / "remotes" / "origin" / "main").write_text("f" * 64 + "\n")
    (bob.dir / "remotes" / "origin").write_text("two\nlines\n")
    findings = sorted((f.code, Path(f.path).name) for f in bob.fsck())
    assert findings == [("MD801", "main"), ("MD801", "origin")]
    code, out, _ = run(capsys, "fsck", "-C", bob.root)
    assert code == 1 and "which is not in the repository" in out and "not one line" in out


def test_pull_with_conflicts_commits_nothing_and_exits_1(tmp_path, capsys):
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(tmp_path / "origin"))
    alice.commit({"n": np.array([1, 2], np.int64)}, "root", author="T <t@example.org>", date="2026-01-01T00:00:00Z")
    push(alice, "origin", "main")
    bob, _ = Repository.clone(str(tmp_path / "origin"), tmp_path / "bob")
    alice.commit({"n": np.array([1, 3], np.int64)}, "a", author="T <t@example.org>", date="2026-01-01T00:00:01Z")
    push(alice, "origin", "main")
    mine = bob.commit({"n": np.array([1, 4], np.int64)}, "b", author="T <t@example.org>", date="2026-01-01T00:00:02Z")
    code, out, _ = run(capsys, "pull", "--json", "-C", bob.root)
    data = json.loads(out)
    assert code == 1 and data["outcome"] == "conflicts" and data["conflicts"][0]["parameter"] == "n"
    assert bob.head() == ("main", mine)
    code, out, _ = run(capsys, "pull", "--strategy", "theirs", "-C", bob.root)
    assert code == 0 and "three-way merge of origin/main into main: 0 parameters from origin/main, 0 from main, " \
        "1 conflict resolved by theirs: " in out and bob.checkout("main")["n"].tolist() == [1, 3]


def test_snapshots_travel_on_request_and_checkouts_start_there(tmp_path, capsys):
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(tmp_path / "origin"))
    ids = [commit(alice, seed) for seed in range(3)]
    alice.snapshot(ids[1])
    assert push(alice, "origin", "main").snapshots == []  # not unless asked
    code, out, _ = run(capsys, "push", "--snapshots", "--json", "-C", alice.root)
    assert code == 0 and json.loads(out)["snapshots"] == [ids[1]]
    assert json.loads(out)["snapshot_bytes"] == alice.snapshot_path(ids[1]).stat().st_size
    plain, report = Repository.clone(str(tmp_path / "origin"), tmp_path / "plain")
    assert report.snapshots == [] and not plain.snapshot_path(ids[1]).exists()
    code, out, _ = run(capsys, "clone", "--snapshots", "--json", tmp_path / "origin", tmp_path / "bob")
    assert code == 0 and json.loads(out)["commits"] == 3
    bob = Repository(tmp_path / "bob")
    assert bob.snapshot_path(ids[1]).read_bytes() == alice.snapshot_path(ids[1]).read_bytes()
    with bob.open_state(ids[2]) as view:
        assert view.snapshot == ids[1]  # agrees with its commits: the checkout starts there
    assert bob.fsck() == []
    Repository(tmp_path / "origin").snapshot_path(ids[1]).write_bytes(b"junk")  # a broken one is left behind
    assert fetch(plain, "origin", snapshots=True).snapshots == [] and not plain.snapshot_path(ids[1]).exists()


def test_checkout_from_a_remote_without_cloning_moves_only_the_first_parent_line(s3, bucket_url, tmp_path, capsys):
    from mdiff.checkpoints import load_checkpoint

    endpoint, options, _ = s3
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", bucket_url)
    line = [commit(alice, seed) for seed in range(3)]
    alice.switch("side", create=True, start=line[0])
    side = commit(alice, 9)
    alice.switch("main")
    push(alice, "origin", "main", options=options)
    push(alice, "origin", "side", options=options)
    cache, commit_id = Repository.fetch_revision(bucket_url, "main~1", tmp_path / "cache", options)
    assert commit_id == line[1] and cache.commit_ids() == sorted(line)  # the tip names main~1; side stays
    cache, commit_id = Repository.fetch_revision(bucket_url, side[:8], tmp_path / "cache", options)
    assert commit_id == side and cache.commit_ids() == sorted([*line, side])  # only side's own commit moved
    with pytest.raises(RepositoryError, match="MD801"):
        Repository.fetch_revision(bucket_url, "nothere", tmp_path / "cache", options)
    out = tmp_path / "out.safetensors"
    code, text, err = run(capsys, "checkout", "main~1", "-o", out, "--remote", bucket_url, "--json",
                          "--storage-option", f"client_kwargs.endpoint_url={endpoint}")
    assert code == 0 and json.loads(text)["commit"] == line[1], err
    got = load_checkpoint(out)
    assert got["b"].tolist() == [1.0] * 4 and np.array_equal(got["w"], state(1)["w"])


def test_a_remote_commit_that_crashed_libhdf5_is_a_typed_error_and_changes_nothing(tmp_path):
    """§8.5: a fetched commit is parsed in the repository's isolated child, not in the fetching process. This
    file crashed libhdf5 (MD515 in the child) until §8.1 had its dense link index checked before libhdf5
    reads it (known bug hdf5-dense-links-iterate, fixed): the walk now refuses it first (MD513)."""
    origin = tmp_path / "origin"
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(origin))
    commit(alice, 0)
    push(alice, "origin", "main")
    bob, _ = Repository.clone(str(origin), tmp_path / "bob")
    before = snapshot_of(bob)
    crasher = (Path(__file__).parent / "fuzz" / "regressions" / "crash-hdf5-dense-links-iterate-seed9-task1462.mdiff").read_bytes()
    remote = Repository(origin)
    crasher_id = plant_commit(remote, crasher)
    with remote.lock():
        remote.create_branch("evil", crasher_id)
    with pytest.raises(RepositoryError) as caught:
        fetch(bob, "origin")
    assert caught.value.code == "MD802" and "MD513: the group's links cannot be read" in caught.value.message
    assert snapshot_of(bob) == before


def test_fetch_and_push_record_their_ref_moves_in_reflogs(tmp_path):
    origin = tmp_path / "origin"
    alice = Repository.init(tmp_path / "alice")
    add_remote(alice, "origin", str(origin))
    first = commit(alice, 0)
    push(alice, "origin", "main")
    bob, _ = Repository.clone(str(origin), tmp_path / "bob")
    assert not (bob.dir / "logs/refs/remotes").exists()  # a clone's first refs: unrecorded, as git's (§13.6)
    second = commit(alice, 1)
    push(alice, "origin", "main")
    fetch(bob, "origin")
    pushed = (alice.dir / "logs/refs/remotes/origin/main").read_text().splitlines()
    fetched = (bob.dir / "logs/refs/remotes/origin/main").read_text().splitlines()
    assert [line.split(" ")[:2] + line.split(" ")[3:] for line in pushed] == [
        ["0" * 64, first, "push", "origin", "main"], [first, second, "push", "origin", "main"]]
    assert [line.split(" ")[:2] + line.split(" ")[3:] for line in fetched] == [[first, second, "fetch", "origin"]]


# ---------------------------------------------------------------- issue 27: a missing bucket is not an empty prefix
def test_a_missing_bucket_and_an_empty_prefix_are_told_apart(s3, bucket_url, tmp_path, capsys, monkeypatch):
    _, options, _ = s3
    monkeypatch.setenv("MDIFF_STORAGE_OPTIONS", json.dumps(options))
    missing = "s3://no-such-bucket-27/models"
    for argv in (["clone", missing, tmp_path / "a"], ["checkout", "main", "--remote", missing, "-o", tmp_path / "o.safetensors"]):
        code, _, err = run(capsys, *argv)
        assert code == 1 and err.startswith(f"mdiff: error MD801: {missing}: there is no bucket 'no-such-bucket-27'; "
                                            "create it first (a first push creates a repository in a bucket, not "
                                            "the bucket)"), err
    code, _, err = run(capsys, "clone", bucket_url, tmp_path / "b")
    assert code == 1 and err.startswith(f"mdiff: error MD801: {bucket_url} holds no mdiff repository: nothing is "
                                        "stored there (a first `mdiff push` to it creates one)"), err
    s3_files(options).pipe_file(f"{bucket_url[len('s3://'):]}/README", b"not a repository")
    code, _, err = run(capsys, "clone", bucket_url, tmp_path / "c")
    assert code == 1 and "holds no mdiff repository (no .mdiff/format, though other files are there)" in err
    # a first push creates a repository under a prefix, never a bucket
    repo = Repository.init(tmp_path / "r")
    commit(repo, 1)
    add_remote(repo, "gone", missing)
    code, _, err = run(capsys, "push", "gone", "main", "-C", repo.root)
    assert code == 1 and "there is no bucket 'no-such-bucket-27'" in err
    assert not s3_files(options).exists("no-such-bucket-27")
