"""`mdiff view`'s server (mdiff/view/server.py, site.py) over plain HTTP, no browser: it answers the page's
files, the index and the commit files shown, and 404 to everything else — traversal in every spelling, names
not listed, another Host — and logs method, path and status only."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mdiff.repo.repository import Repository
from mdiff.view import site as view_site
from mdiff.view.server import ViewServer, safe_path

ROOT = Path(__file__).resolve().parents[1]
H5WASM = ROOT / "tools" / "mdiff-js" / "node_modules" / "h5wasm"
pytestmark = pytest.mark.skipif(not H5WASM.is_dir(), reason="tools/mdiff-js/node_modules is missing; run `npm ci --prefix tools/mdiff-js`")
DATE = "2026-01-01T00:00:00Z"


@pytest.fixture
def repo(tmp_path):
    r = Repository.init(tmp_path / "project")
    r.commit({"w": np.arange(6, dtype=np.float32)}, "first", author="A", date=DATE)
    r.commit({"w": np.arange(6, dtype=np.float32) + 1}, "second", author="A", date=DATE)
    return r


def raw_get(port: int, target: bytes, host: bytes | None = None, method: bytes = b"GET", headers: bytes = b"") -> tuple[int, bytes]:
    """Status and body of one request whose target goes on the wire byte for byte (urllib and http.client
    would normalise or refuse the hostile ones)."""
    host = host if host is not None else f"127.0.0.1:{port}".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(method + b" " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n" + headers + b"\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture
def served(repo):
    lines: list[str] = []
    site = view_site.repository_site(repo)
    server = ViewServer(site.resources, site.redirects, log=lines.append)
    server.start()
    yield server, site, lines
    server.stop()


def test_the_page_the_index_and_the_commit_files_are_served(served, repo):
    server, site, _ = served
    status, body = raw_get(server.port, b"/api/index.json")
    index = json.loads(body)
    assert status == 200 and index["kind"] == "repository"
    ids = [c["id"] for c in index["commits"]]
    head = repo.head()[1]
    assert index["selected"] == head == ids[0] and len(ids) == 2
    assert [c["message"] for c in index["commits"]] == ["second", "first"]
    assert index["commits"][0]["parents"] == [ids[1]] and index["refs"]["branches"] == {"main": ids[0]}
    assert index["commits"][0]["checkpoint_bytes"] == 24
    for c in index["commits"]:
        status, body = raw_get(server.port, c["blob"].encode())
        assert status == 200 and body == (repo.dir / "commits" / f"{c['id']}.mdiff").read_bytes()
        assert c["stored_bytes"] == len(body)
    for path in ("/view/", "/view/index.html", "/view/view.css", "/view/dist/page.js", "/node_modules/h5wasm/LICENSE.txt"):
        assert raw_get(server.port, path.encode())[0] == 200, path
    for path in ("/view/app.js", "/view/build.mjs", "/src/validate.js", "/node_modules/h5wasm/dist/esm/hdf5_hl.js"):
        assert raw_get(server.port, path.encode())[0] == 404, path  # bundled into dist/page.js: not served
    assert raw_get(server.port, b"/")[0] == 302


@pytest.mark.parametrize("target", [
    b"/../README.md", b"/view/../../README.md", b"/view/../view/index.html", b"/%2e%2e/README.md",
    b"/view/%2e%2e/%2e%2e/README.md", b"/view%2f..%2f..%2fREADME.md", b"/view/%2E%2E%2Fapp.js", b"/view/app%2ejs",
    b"/%2fetc%2fpasswd", b"//etc/passwd", b"/etc/passwd", b"/view\\..\\..\\README.md", b"/view/app.js\x00.png",
    b"/view/app.js%00", b"/view/./app.js", b"/view//app.js", b"/view/.", b"/..", b"/.mdiff/HEAD", b"/api/../README.md",
    b"/package.json", b"/node_modules/h5wasm/package.json", b"/node_modules/h5wasm/dist/node/hdf5_hl.js",
    b"/src/../bin/mdiff-js.js", b"/api/commits/HEAD", b"/api/commits/" + b"0" * 64 + b".mdiff", b"http://127.0.0.1/../README.md",
    b"/view/%C0%AE%C0%AE/README.md", b"/view/%252e%252e/README.md", b"C:\\Windows\\win.ini", b"*",
])
def test_traversal_and_unlisted_names_are_404(served, target):
    server, _, _ = served
    status, body = raw_get(server.port, target)
    assert (status, body) == (404, b"not found\n")


def test_another_host_and_other_methods_are_refused(served):
    server, _, _ = served
    assert raw_get(server.port, b"/api/index.json", host=b"attacker.example:80")[0] == 404  # DNS rebinding
    assert raw_get(server.port, b"/api/index.json", host=b"")[0] == 404
    assert raw_get(server.port, b"/api/index.json", host=f"localhost:{server.port}".encode())[0] == 200
    assert raw_get(server.port, b"/api/index.json", method=b"POST")[0] == 501
    assert raw_get(server.port, b"/api/index.json", method=b"PUT")[0] == 501


def test_a_commit_file_replaced_by_a_link_is_not_followed(served, repo, tmp_path):
    server, site, _ = served
    first = site.index["commits"][1]
    path = repo.dir / "commits" / f"{first['id']}.mdiff"
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    path.unlink()
    path.symlink_to(secret)
    assert raw_get(server.port, first["blob"].encode()) == (404, b"not found\n")


def test_requests_are_logged_without_query_or_headers(served):
    server, _, lines = served
    raw_get(server.port, b"/view/view.css?token=s3cr3t", headers=b"Authorization: Bearer s3cr3t\r\nCookie: id=s3cr3t\r\n")
    raw_get(server.port, b"/view/%2e%2e/x")
    assert lines == ["GET /view/view.css 200", "GET /view/%2e%2e/x 404"]


def test_safe_path_takes_plain_names_only():
    assert [safe_path(p) for p in ("/", "/view/", "/a/b.c.js", "/a/b?x=../..")] == ["/", "/view/", "/a/b.c.js", "/a/b"]
    assert {safe_path(p) for p in ("/a/../b", "/a/./b", "/.a", "/a//b", "/a%2fb", "/a\\b", "/a\0b", "a", "")} == {None}


def test_the_index_says_the_repository_format(tmp_path):
    for repository_format in (1, 2):
        r = Repository.init(tmp_path / f"f{repository_format}", isolation=None, repository_format=repository_format)
        r.commit({"w": np.arange(3, dtype=np.float32)}, "one", author="A", date=DATE)
        assert view_site.repository_site(r).index["format"] == repository_format


def _commit(cid: str, parents: list[str], date: str = DATE, message: str = "", reachable: bool = True) -> dict:
    return {"id": cid, "parents": parents, "date": date, "message": message, "reachable": reachable}


def test_the_graph_order_is_topological_first_parent_lines_together_and_not_by_id():
    # git log --graph --topo-order on the same shape: m (merge of f2 and s2), f2, f1, s2, s1, b; t: another tip
    #   b <- f1 <- f2 <- m;  b <- s1 <- s2 <- m (second parent);  b <- t (branch "topic", older)
    shape = {"m": ["f2", "s2"], "f2": ["f1"], "f1": ["b"], "s2": ["s1"], "s1": ["b"], "b": [], "t": ["b"]}
    refs = {"head": "m", "branches": {"main": "m", "topic": "t"}, "tags": {}}
    expected = ["m", "f2", "f1", "s2", "s1", "t", "b"]
    for names in (sorted(shape), sorted(shape, reverse=True)):  # ids in either order: the same rows
        ids = {name: f"{i:02d}{name}" for i, name in enumerate(names)}
        commits = [_commit(ids[n], [ids[p] for p in shape[n]], message=n) for n in names]
        order = view_site.graph_order(commits, {**refs, "head": ids["m"], "branches": {"main": ids["m"], "topic": ids["t"]}})
        assert [c["message"] for c in order] == expected
    # tips without refs: reachable first, newest date first, then the message; a parent outside the list is ignored
    tips = [_commit("a", ["gone"], "2026-01-01T00:00:00Z", "old"), _commit("b", [], "2026-02-01T00:00:00+00:00", "new"),
            _commit("c", [], "2026-01-01T00:00:00Z", "another old"), _commit("d", [], "2027-01-01T00:00:00Z", "lost", reachable=False),
            _commit("e", [], "not a date", "undated")]
    assert [c["id"] for c in view_site.graph_order(tips, {})] == ["b", "c", "a", "e", "d"]
    # a cycle of parents (hostile) still lists every commit once
    assert sorted(c["id"] for c in view_site.graph_order([_commit("x", ["y"]), _commit("y", ["x"])], {})) == ["x", "y"]


def test_a_file_and_the_page_alone(tmp_path, repo):
    commit = next((repo.dir / "commits").iterdir())
    site = view_site.file_site(commit)
    assert site.index == {"kind": "file", "name": commit.name, "selected": "file", "refs": {},
                          "commits": [{"id": "file", "blob": "/api/commits/file.mdiff", "stored_bytes": commit.stat().st_size}]}
    assert site.resources["/api/commits/file.mdiff"].path == commit
    assert view_site.page_site().index == {"kind": "none"} and "/api/commits/file.mdiff" not in view_site.page_site().resources


def test_the_wheel_copy_holds_exactly_what_is_served(tmp_path):
    copied = view_site.copy_page(tmp_path / "static")
    served = {path for path in view_site.page_site(tmp_path / "static").resources if path.startswith(("/view/", "/src/", "/node_modules/"))}
    assert {"/" + c for c in copied} | {"/view/"} == served
    assert sorted(copied) == ["node_modules/h5wasm/LICENSE.txt", "view/dist/page.js", "view/index.html", "view/view.css"]
    assert (tmp_path / "static" / "node_modules/h5wasm/LICENSE.txt").is_file()


@pytest.mark.skipif(not (ROOT / "tools/mdiff-js/node_modules/esbuild").is_dir(), reason="run `npm ci --prefix tools/mdiff-js` (esbuild)")
def test_the_bundled_page_is_what_its_sources_give():
    # view/dist/page.js is committed: regenerated byte for byte by view/build.mjs (as gen_conformance.py --check)
    done = subprocess.run(["node", "view/build.mjs", "--check"], cwd=ROOT / "tools" / "mdiff-js", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + " (run node tools/mdiff-js/view/build.mjs and commit view/dist/page.js)"


# ---------------------------------------------------------------- the command
def _start(*args: str, cwd: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "mdiff", "view", "--no-browser", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    return proc, line


def test_the_command_prints_its_address_serves_and_stops_cleanly_on_ctrl_c(repo):
    proc, line = _start("HEAD~1", cwd=repo.root)
    try:
        match = re.fullmatch(r"mdiff view: the repository (.+) \(2 commits\) at http://127\.0\.0\.1:(\d+)(/open/[A-Za-z0-9_-]{32})"
                             r"  \(Ctrl-C stops\)\n", line)
        assert match, line
        port, opening = int(match.group(2)), match.group(3).encode()
        assert raw_get(port, b"/api/index.json")[0] == 403  # not without the printed address's cookie
        cookie = _opening_cookie(port, opening)
        status, body = raw_get(port, b"/api/index.json", headers=b"Cookie: " + cookie + b"\r\n")
        index = json.loads(body)
        assert status == 200 and index["selected"] == index["commits"][1]["id"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == "mdiff view: stopped\n"
    assert err == "mdiff view: GET /api/index.json 403\nmdiff view: GET /open/… 302\nmdiff view: GET /api/index.json 200\n"


_CTRL_C_IN_A_CALLBACK = """
import os, signal, sys, weakref
from mdiff.cli.view_command import serve_until_ctrl_c
from mdiff.view.server import ViewServer

server = ViewServer({})
pressed = []

def service_actions():  # serve_forever calls it on each turn of its loop
    if pressed:
        return
    pressed.append(1)
    class Dropped: pass
    dropped = Dropped()
    ref = weakref.ref(dropped, lambda ref: (os.kill(os.getpid(), signal.SIGINT), sum(range(100000))))
    del dropped  # Ctrl-C arrives while a weakref callback runs, where a KeyboardInterrupt is printed and dropped

server.service_actions = service_actions
serve_until_ctrl_c(server)
print("stopped")
"""


def test_ctrl_c_stops_the_server_even_when_it_arrives_inside_a_weakref_callback():
    """A CI run once saw `mdiff view` ignore Ctrl-C: serve_forever ran on the main thread, and the
    KeyboardInterrupt landed in a weakref callback as a request thread was reaped, where Python prints it and goes
    on. Here the signal comes in such a callback on purpose; the server stops all the same (the old loop served
    on until the timeout)."""
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_IN_A_CALLBACK], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "stopped\n", "")


def _opening_cookie(port: int, opening: bytes) -> bytes:
    """Open the printed address as a browser would: a redirect to / that sets the cookie; the cookie's name=value."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET " + opening + b" HTTP/1.1\r\nHost: 127.0.0.1:" + str(port).encode() + b"\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head = data.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0].split(b" ")[1] == b"302" and b"Location: /" in head
    cookie = next(h for h in head if h.startswith(b"Set-Cookie: "))[len(b"Set-Cookie: "):]
    name_value, *attributes = cookie.split(b"; ")
    assert attributes == [b"HttpOnly", b"SameSite=Strict", b"Path=/"]
    return name_value


def test_with_a_token_only_the_printed_address_lets_a_client_in(repo):
    lines: list[str] = []
    site = view_site.repository_site(repo)
    token = "t" * 8 + "0123456789abcdef"
    server = ViewServer(site.resources, site.redirects, log=lines.append, token=token)
    server.start()
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/open/{token}"
        port = server.port
        assert raw_get(port, b"/api/index.json")[0] == 403
        assert raw_get(port, b"/")[0] == 403
        assert raw_get(port, b"/open/" + b"t" * 24)[0] == 403  # another token: no cookie, no way in
        assert raw_get(port, b"/api/index.json", headers=b"Cookie: mdiff-view-" + str(port).encode() + b"=wrong\r\n")[0] == 403
        assert raw_get(port, b"/api/index.json", headers=b"Cookie: mdiff-view-1=" + token.encode() + b"\r\n")[0] == 403
        assert raw_get(port, b"/api/index.json", headers=b'Cookie: "\r\n')[0] == 403  # a malformed header
        cookie = _opening_cookie(port, f"/open/{token}".encode())
        assert cookie == f"mdiff-view-{port}={token}".encode()
        assert raw_get(port, b"/api/index.json", headers=b"Cookie: other=1; " + cookie + b"\r\n")[0] == 200
        assert raw_get(port, b"/../x", headers=b"Cookie: " + cookie + b"\r\n")[0] == 404  # traversal as before
        assert not any(token in line for line in lines)
        assert lines[-4:] == ["GET /api/index.json 403", "GET /open/… 302", "GET /api/index.json 200", "GET /../x 404"]
    finally:
        server.stop()
    with pytest.raises(ValueError):
        ViewServer({}, token="short")


def test_a_port_in_use_is_an_error_that_says_what_to_do(repo):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "mdiff", "view", "--no-browser", "--port", str(port)], cwd=repo.root,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"mdiff view: cannot listen on 127.0.0.1:{port}: ") and "choose another --port" in done.stderr


def test_a_file_argument_and_no_repository(repo, tmp_path):
    commit = next((repo.dir / "commits").iterdir())
    proc, line = _start(str(commit), cwd=tmp_path)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert line.startswith(f"mdiff view: the file {commit.name} at http://127.0.0.1:") and proc.returncode == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    proc, line = _start(cwd=outside)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert line.startswith("mdiff view: the page (drop or pick a .mdiff file on it) at http://127.0.0.1:") and proc.returncode == 0
    time.sleep(0)  # nothing left running
