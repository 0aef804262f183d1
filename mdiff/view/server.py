"""A local, read-only HTTP server of an allow-list: every URL it answers is a key of a dict fixed before it
starts (static files, a JSON index, commit files); any other path — ``..``, an absolute path, a percent-encoded
or backslashed form, a NUL, a name not listed — is 404. The standard library only (http.server), so that
importing it costs the other commands nothing; the view command alone imports it.

A request's Host must name the loopback address it listens on (a page of another site that rebinds its name
to 127.0.0.1 gets 404, DNS rebinding); only GET and HEAD are answered. With a token (what `mdiff view` gives
it), only a browser that opened the printed address ``/open/<token>`` is served: that answer sets a cookie
(HttpOnly, SameSite=Strict) holding the token, and every other request without it is 403 — another user of the
machine, who can reach the port but not read the terminal, sees nothing. Each request is logged through a
callback as method, path (no query string, no header, no token) and status.
"""

from __future__ import annotations

import hmac
import http.cookies
import http.server
import os
import re
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# what a served URL may look like, before anything is decoded: no percent sign, backslash, NUL, "//" or ".."
_NAME = r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*"
_SAFE_URL = re.compile(rf"/(?:{_NAME}(?:/{_NAME})*/?)?")
_CHUNK = 1 << 20
_OPENING = "/open/"  # + the token: the one address that lets a browser in

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".json": "application/json", ".png": "image/png", ".svg": "image/svg+xml",
         ".wasm": "application/wasm", ".txt": "text/plain; charset=utf-8"}


@dataclass(frozen=True)
class Resource:
    """What one URL answers: bytes held in memory, or a regular file read when asked (opened without following
    a link, refused unless it is still a regular file)."""

    content_type: str
    data: bytes | None = None
    path: Path | None = None
    cache: bool = True  # the page's own files; the index and commit files are never cached

    @staticmethod
    def of_file(path: Path, content_type: str | None = None, cache: bool = True) -> Resource:
        return Resource(content_type or TYPES.get(path.suffix, "application/octet-stream"), path=path, cache=cache)


def safe_path(raw: str) -> str | None:
    """The path of a request line's target, or None when it is not one this server could serve: the query
    string is dropped; anything but plain names separated by single slashes is refused as it came, undecoded."""
    path = raw.split("?", 1)[0].split("#", 1)[0]
    if not _SAFE_URL.fullmatch(path):
        return None
    return path


def _open_regular(path: Path) -> tuple[int, int] | None:
    """(descriptor, size) of ``path`` opened for reading without following a link, if it is a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info.st_size


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "mdiff-view"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _refuse(self, status: int, body: bool) -> None:
        text = {404: b"not found\n", 403: b"forbidden: open the address that mdiff view printed\n"}.get(status, b"redirect\n")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if body:
            self.wfile.write(text)

    def _answer(self, body: bool) -> None:
        path = safe_path(self.path)
        if path is None or not self.server.host_allowed(self.headers.get("Host")):
            self._refuse(404, body)
            return
        if self.server.token is not None:
            if self.server.is_opening(path):
                self.send_response(302)
                self.send_header("Location", "/")
                self.send_header("Set-Cookie", f"{self.server.cookie_name}={self.server.token}; HttpOnly; "
                                               "SameSite=Strict; Path=/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if not self.server.cookie_allowed(self.headers.get("Cookie")):
                self._refuse(403, body)
                return
        if path in self.server.redirects:
            self.send_response(302)
            self.send_header("Location", self.server.redirects[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        resource = self.server.resources.get(path)
        if resource is None:
            self._refuse(404, body)
            return
        opened = None
        if resource.data is None:
            assert resource.path is not None
            opened = _open_regular(resource.path)
            if opened is None:
                self._refuse(404, body)
                return
        try:
            size = len(resource.data) if resource.data is not None else opened[1]  # type: ignore[index]
            self.send_response(200)
            self.send_header("Content-Type", resource.content_type)
            self.send_header("Content-Length", str(size))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-cache" if resource.cache else "no-store")
            self.end_headers()
            if not body:
                return
            if resource.data is not None:
                self.wfile.write(resource.data)
                return
            assert opened is not None
            left = size
            while left > 0:
                chunk = os.read(opened[0], min(_CHUNK, left))
                if not chunk:
                    break  # the file shrank meanwhile: the client sees a short body
                self.wfile.write(chunk)
                left -= len(chunk)
        finally:
            if opened is not None:
                os.close(opened[0])

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        raw = self.path if isinstance(getattr(self, "path", None), str) else ""
        shown = raw.split("?", 1)[0][:200].encode("ascii", "backslashreplace").decode("ascii")
        if shown.startswith(_OPENING):
            shown = _OPENING + "…"  # the token is a secret: never in a log
        self.server.log(f"{self.command} {shown} {code}" if self.command else f"bad request {code}")

    def log_error(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        pass  # a malformed request line is logged by log_request with its status

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class ViewServer(http.server.ThreadingHTTPServer):
    """Serves ``resources`` (URL path → Resource) and ``redirects`` (URL path → location) on 127.0.0.1 (``port``
    0: a free one). ``log`` receives one line per request."""

    daemon_threads = True

    def __init__(self, resources: Mapping[str, Resource], redirects: Mapping[str, str] | None = None, port: int = 0,
                 log: Callable[[str], None] = lambda line: None, host: str = "127.0.0.1", token: str | None = None):
        if token is not None and not re.fullmatch(r"[A-Za-z0-9_\-]{16,}", token):
            raise ValueError("a token is 16 or more letters, digits, '-' or '_'")
        self.token = token
        self.resources = dict(resources)
        self.redirects = dict(redirects or {})
        self.log = log
        super().__init__((host, port), _Handler)
        self.host, self.port = str(host), int(self.server_address[1])
        self._hosts = {f"{name}:{self.port}" for name in (self.host, "localhost")}
        self.cookie_name = f"mdiff-view-{self.port}"  # a browser keeps cookies by host, not port: one per server

    @property
    def url(self) -> str:
        """The address to open: with a token, the one that lets a browser in."""
        return f"http://{self.host}:{self.port}" + (f"{_OPENING}{self.token}" if self.token else "/")

    def is_opening(self, path: str) -> bool:
        return self.token is not None and hmac.compare_digest(path, _OPENING + self.token)

    def cookie_allowed(self, header: str | None) -> bool:
        """Whether a request's Cookie header holds this server's token."""
        if self.token is None:
            return True
        cookies: http.cookies.SimpleCookie = http.cookies.SimpleCookie()
        try:
            cookies.load(header or "")
        except http.cookies.CookieError:
            return False
        morsel = cookies.get(self.cookie_name)
        return morsel is not None and hmac.compare_digest(morsel.value, self.token)

    def host_allowed(self, host: str | None) -> bool:
        return host is not None and host.lower() in self._hosts

    def start(self) -> threading.Thread:
        """Serve on a thread of its own (for tests); stop with :meth:`stop`."""
        thread = threading.Thread(target=self.serve_forever, name="mdiff-view", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
