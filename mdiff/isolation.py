"""Running untrusted-file work in a child process with a time and memory limit (SPEC.md §8.5).

libhdf5 has a steady stream of memory-safety bugs on crafted files. In a child
process, a crash, a hang or a runaway allocation in the C library becomes a
finding with a code (MD515) instead of taking the caller down with it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_BYTES = 8 * 2**30
# The work of reading a file grows with it: a diff of 10^5 parameters (70 MB) takes ~15 s of CPU to walk and check,
# and several times that in wall time on a loaded machine. 2 s more per megabyte keeps any valid file clear of
# the limit (SPEC.md §8.5) while a hang is still caught: on a file of no size, after timeout_s.
DEFAULT_SECONDS_PER_MB = 2.0


@dataclass(frozen=True)
class Isolation:
    """The limits of an isolated child: ``memory_bytes`` of address space, and, for work on files of ``n``
    bytes in all, ``timeout_s + seconds_per_mb * n / 10^6`` seconds (:meth:`time_limit`)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    seconds_per_mb: float = DEFAULT_SECONDS_PER_MB

    def time_limit(self, nbytes: int = 0) -> float:
        """Seconds the child may take for work on files of ``nbytes`` in all: the base, and an allowance that
        grows with them, so that a file is never MD515 for being large."""
        return self.timeout_s + self.seconds_per_mb * max(nbytes, 0) / 1e6


def input_bytes(*paths: str | os.PathLike[str]) -> int:
    """The bytes of the regular files at ``paths``, a folder's counted whole (the first 10,000 files found in
    it; what cannot be looked at counts nothing): what an isolated child's time limit grows with."""
    import stat

    total = 0
    for path in paths:
        try:
            if not os.path.isdir(path):
                found = os.stat(path)
                total += found.st_size if stat.S_ISREG(found.st_mode) else 0
                continue
            seen = 0
            for folder, _, names in os.walk(path):
                for name in names:
                    seen += 1
                    if seen > 10_000:
                        return total
                    with contextlib.suppress(OSError):
                        found = os.stat(os.path.join(folder, name), follow_symlinks=False)
                        total += found.st_size if stat.S_ISREG(found.st_mode) else 0
        except (OSError, TypeError, ValueError):
            continue
    return total


def isolation_supported() -> bool:
    """Whether this platform can isolate a reader: fork() and resource limits (POSIX). (Not asked of
    multiprocessing, whose import alone costs a command's start-up several milliseconds.)"""
    import importlib.util

    return hasattr(os, "fork") and importlib.util.find_spec("resource") is not None


class IsolationFailure(Exception):
    """The child died, hung or ran out of memory; ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# An answer bigger than this is not an answer: the walk of a 10^5-parameter diff is ~36 MB (hdf5walk/wire.py).
MAX_ANSWER_BYTES = 1 << 30


def _limit_child(limits: Isolation) -> None:
    """At most ``limits.memory_bytes`` of address space (or the lower limit this process already has), and
    no core file when a crash ends it."""
    import resource  # POSIX only, like fork: imported where isolation runs, so that `import mdiff` works anywhere

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = limits.memory_bytes if hard == resource.RLIM_INFINITY else min(limits.memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _child(conn, limits: Isolation, fn: Callable, args: tuple) -> None:
    import faulthandler
    import gc

    faulthandler.disable()  # a crash here is reported as MD515; a Python stack dump on stderr would only be noise
    gc.disable()  # one task, then the process ends: what it makes is kept to the end, and looking at it again is waste
    _limit_child(limits)
    try:
        conn.send_bytes(b"".join(_message(_outcome(fn, args))))
    finally:
        conn.close()


def _outcome(fn: Callable, args: tuple) -> dict[str, Any]:
    """What ``fn(*args)`` came to, as the JSON-able answer a child sends: a result, a typed error, an
    OSError, or a failure in words."""
    from mdiff.errors import MdiffError

    try:
        return {"ok": fn(*args)}
    except MemoryError:
        return {"memory": True}
    except MdiffError as exc:
        return {"error": exc.to_json()}
    except OSError as exc:
        return {"oserror": [exc.errno, exc.strerror, None if exc.filename is None else os.fsdecode(exc.filename)]}
    except BaseException as exc:  # noqa: BLE001 — a bug of mdiff's: said, not carried as an object
        return {"failed": f"{type(exc).__name__}: {exc}"}


def _message(answer: dict[str, Any]) -> list[bytes | bytearray | memoryview]:
    """The answer as the buffers of one message: JSON, or a result of bytes as a NUL and those bytes (a task's
    compact answer, format/reader.py's structure walk: never parsed as JSON, never copied into one buffer)."""
    ok = answer.get("ok")
    if len(answer) == 1 and isinstance(ok, (bytes, bytearray, memoryview)):
        return [BINARY, ok]
    try:
        return [json.dumps(answer, allow_nan=False).encode()]
    except MemoryError:
        return [b'{"memory": true}']
    except (TypeError, ValueError) as exc:  # a result that is not JSON: mdiff's bug
        return [json.dumps({"failed": f"an answer that is not JSON: {exc}"}).encode()]


# What starts an answer of bytes (a JSON answer starts with "{")
BINARY = b"\0"


def run_isolated(fn: Callable[..., Any], *args, limits: Isolation = Isolation(), work_bytes: int = 0) -> Any:
    """``fn(*args)`` in a forked child; its result, or its error raised here.

    ``fn`` returns JSON-able data, or bytes (given back as a memoryview, for the caller to check), and that is
    all that comes back: the child reads a stranger's file with libhdf5, and a child whose memory a crafted
    file corrupted must not get to run code here (no pickle).
    An MdiffError or OSError of the child is raised again here as what it was.
    IsolationFailure when the child is killed by a signal, exceeds ``limits.time_limit(work_bytes)`` (the
    bytes of the files it reads: see :func:`input_bytes`), cannot allocate within ``limits.memory_bytes``,
    fails in another way, or answers something that is not an answer.
    """
    import multiprocessing

    if not isolation_supported():
        raise IsolationFailure("isolation needs fork() and resource limits (POSIX), which this platform lacks; "
                               "read in this process instead (--no-isolation, or isolation=None)")
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(child, limits, fn, args), daemon=True)
    process.start()
    child.close()
    try:
        seconds = limits.time_limit(work_bytes)
        if not parent.poll(seconds):
            process.kill()
            raise IsolationFailure(f"no answer within {seconds:g} s (killed)")
        try:
            message = parent.recv_bytes(MAX_ANSWER_BYTES)
        except EOFError:
            process.join()
            code = process.exitcode
            name = signal.Signals(-code).name if code is not None and code < 0 else f"exit status {code}"
            raise IsolationFailure(f"the reading process died ({name})") from None
        except OSError:  # over MAX_ANSWER_BYTES
            process.kill()
            raise IsolationFailure(f"the reading process answered more than {MAX_ANSWER_BYTES} bytes") from None
    finally:
        parent.close()
        process.join(timeout=1)
        if process.is_alive():
            process.kill()
    return _answer(message, limits)


def _answer(message: bytes | bytearray, limits: Isolation) -> Any:
    from mdiff.errors import MdiffError

    if message[:1] == BINARY:
        return memoryview(message).toreadonly()[1:]  # the task's bytes, for its caller to check (a view: not copied again)
    try:
        answer = json.loads(message)
        (kind, value), = answer.items()
    except (ValueError, TypeError, AttributeError, RecursionError):
        raise IsolationFailure("the reading process answered something malformed") from None
    if kind == "ok":
        return value
    if kind == "memory":
        raise IsolationFailure(f"more than {limits.memory_bytes} bytes of memory were needed")
    if kind == "error":
        try:
            error = MdiffError.from_json(value)
        except ValueError:
            raise IsolationFailure("the reading process answered a malformed error") from None
        raise error
    if kind == "oserror" and isinstance(value, list) and len(value) == 3:
        errno, strerror, filename = value
        if (errno is None or isinstance(errno, int)) and isinstance(strerror, (str, type(None))) \
                and isinstance(filename, (str, type(None))):
            raise OSError(errno, strerror, filename) if filename is not None else OSError(errno, strerror)
    if kind == "failed" and isinstance(value, str):
        raise IsolationFailure(f"the reading process failed: {value[:1000]}")
    raise IsolationFailure("the reading process answered something malformed")


def crashes_here(_: Any = None) -> None:
    """For tests: die the way a libhdf5 memory-safety bug would."""
    os.kill(os.getpid(), signal.SIGSEGV)


# Tasks a Worker runs, by name: a request names one, with JSON arguments and a file descriptor.
_TASKS: dict[str, Callable[..., Any]] = {}


def task(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn(readable, shown, *args)`` as a Worker's task ``name``: ``readable`` opens the file the
    request sent, ``shown`` is the caller's name for it (for what the task reports)."""
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        _TASKS[name] = fn
        return fn
    return register


class Worker:
    """One child process, forked on first use, that reads the files this process sends it (by file
    descriptor) with the registered tasks and answers JSON: what :func:`run_isolated` gives, without a fork
    per file — a repository's history is many small files. The child runs with ``limits.memory_bytes``;
    each request within ``limits.time_limit`` of the size of the file it sends. A child that crashed, hung,
    ran out of memory or answered nonsense is gone (IsolationFailure for that request) and the next request
    forks a fresh one."""

    def __init__(self, limits: Isolation = Isolation()):
        self.limits = limits
        self._lock = threading.Lock()
        self._process: Any = None
        self._socket: socket.socket | None = None

    def _start(self) -> None:
        import multiprocessing

        if not isolation_supported():
            raise IsolationFailure("isolation needs fork() and resource limits (POSIX), which this platform lacks; "
                                   "read in this process instead (--no-isolation, or isolation=None)")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        process = multiprocessing.get_context("fork").Process(target=_serve, args=(theirs, ours, self.limits), daemon=True)
        process.start()
        theirs.close()
        self._process, self._socket = process, ours

    def _stop(self) -> str:
        """Kill the child; how it ended."""
        process, sock = self._process, self._socket
        self._process = self._socket = None
        if sock is not None:
            sock.close()
        if process is None:
            return "not started"
        process.join(timeout=0.2)
        if process.is_alive():
            process.kill()
            process.join()
        code = process.exitcode
        return signal.Signals(-code).name if code is not None and code < 0 else f"exit status {code}"

    def close(self) -> None:
        with self._lock:
            self._stop()

    def start(self) -> None:
        """Fork the child now unless it runs: a caller about to make large structures (apply's base header) forks
        it first, so that the child shares none of their pages and their first writes here copy none. Where it
        cannot be forked, the next :meth:`call` meets that again and says so."""
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._stop()
                try:
                    self._start()
                except (IsolationFailure, OSError):
                    self._process = self._socket = None

    def call(self, name: str, fd: int, path: str | os.PathLike[str], *args: Any) -> Any:
        """Task ``name`` on the file open as ``fd`` here (named ``path`` where the child cannot name the
        descriptor itself), with ``args``: its JSON answer, or its error."""
        with self._lock:
            if self._process is None or not self._process.is_alive():
                self._stop()
                self._start()
            assert self._socket is not None
            module = _TASKS[name].__module__  # the child imports it if it had not when it was forked
            request = json.dumps([module, name, os.fspath(path), list(args)]).encode()
            seconds = self.limits.time_limit(os.fstat(fd).st_size)  # the work grows with the file
            try:
                socket.send_fds(self._socket, [len(request).to_bytes(4, "big") + request], [fd])
                message = _receive(self._socket, seconds)
            except _Silent as silence:
                how = self._stop()
                raise IsolationFailure(f"no answer within {seconds:g} s (killed)" if silence.timed_out
                                       else f"the reading process died ({how})") from None
            except OSError as exc:
                how = self._stop()
                raise IsolationFailure(f"the reading process is gone ({how}: {exc.strerror})") from None
            try:
                return _answer(message, self.limits)
            except IsolationFailure:
                self._stop()  # after running out of memory, or saying nonsense, it is not trusted again
                raise


class _Silent(Exception):
    def __init__(self, timed_out: bool):
        super().__init__()
        self.timed_out = timed_out


def _receive(sock: socket.socket, timeout_s: float) -> bytearray:
    """One answer: 8 bytes of length, then that many bytes (JSON, or BINARY and a task's bytes), within
    ``timeout_s``. Its bytes are received into one reused buffer of at most 4 MiB and added to the answer as they
    come (memory as the bytes come, never as the length says): no chunk made and dropped a read, no join of them
    (at 10^5 parameters the answer is ~36 MB: ~7,700 page faults and a copy of it less)."""
    import select

    deadline = time.monotonic() + timeout_s
    answer = bytearray()
    scratch: memoryview | None = None
    got, needed = 0, 8
    while got < needed:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            raise _Silent(timed_out=True)
        if scratch is None:
            chunk = sock.recv(needed - got)
            answer += chunk
            count = len(chunk)
        else:
            count = sock.recv_into(scratch, min(needed - got, len(scratch)))
            answer += scratch[:count]
        if not count:
            raise _Silent(timed_out=False)
        got += count
        if scratch is None and got >= 8:
            size = int.from_bytes(answer, "big")
            if size > MAX_ANSWER_BYTES:
                raise OSError(0, f"an answer of {size} bytes")
            answer.clear()
            got, needed = 0, size
            scratch = memoryview(bytearray(min(size, _RECEIVE_BYTES)))
    return answer


_RECEIVE_BYTES = 1 << 22


def _serve(sock: socket.socket, parents_end: socket.socket, limits: Isolation) -> None:
    """The Worker's child: answer requests until the parent goes (its end closed: the parent's end of the
    pair, which the fork copied here, is closed first, or the child would never see the parent go)."""
    parents_end.close()
    import faulthandler
    import gc

    faulthandler.disable()
    _limit_child(limits)
    # No automatic collection here, ever. What a task makes (a walk: ~10 objects a parameter) is kept until it
    # answers; the first collection after it looks at every one of those objects (0.4 s at 10^5 parameters) and,
    # in memory shared with the parent since the fork, at every young object the parent held then (each page it
    # touches is copied). So a task's garbage is collected only when the next request comes, before its task runs
    # (_collect_due: as the collector would have, by the generations' counts): a command that sends one file (apply,
    # validate, dump) never pays for it, and the parent never waits for it. What the parent had made when it forked
    # is none of the child's: frozen (gc.freeze), no collection here looks at it.
    gc.disable()
    gc.freeze()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 1)
        except OSError:
            return
        if not data:
            return  # the parent closed its end
        size = int.from_bytes(data[:4], "big")
        while len(data) < 4 + size:
            more = sock.recv(4 + size - len(data))
            if not more:
                return
            data += more
        _collect_due()
        try:
            message = _message(_outcome(_run_request, (data[4:], fds)))
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.sendall(sum(map(len, message)).to_bytes(8, "big"))
            for part in message:
                sock.sendall(part)
        except OSError:
            return


def _collect_due() -> None:
    """The collection the collector would start now were it on: of the oldest generation whose count is past its
    threshold (and the younger ones), if any."""
    import gc

    counts, thresholds = gc.get_count(), gc.get_threshold()
    due = [generation for generation in range(len(counts)) if thresholds[generation] and counts[generation] > thresholds[generation]]
    if due:
        gc.collect(due[-1])


def _run_request(request: bytes, fds: list[int]) -> Any:
    """A Worker's request: its task run on the file sent with it (an error about the child's name for the file
    told with the caller's)."""
    from mdiff.errors import MdiffError
    from mdiff.regular_files import reopenable

    module, name, path, args = json.loads(request)
    if name not in _TASKS and module.startswith("mdiff."):
        importlib.import_module(module)
    readable = reopenable(fds[0], path)
    try:
        return _TASKS[name](readable, path, *args)
    except MdiffError as exc:
        if exc.path == readable:
            exc.path = path
        raise


_WORKERS: dict[Isolation, Worker] = {}
_WORKERS_LOCK = threading.Lock()


def shared_worker(limits: Isolation) -> Worker:
    """This process's Worker for ``limits`` (one child each, kept for the process's life)."""
    with _WORKERS_LOCK:
        worker = _WORKERS.get(limits)
        if worker is None:
            worker = _WORKERS[limits] = Worker(limits)
        return worker


if hasattr(os, "register_at_fork"):  # a forked child does not own its parent's workers
    os.register_at_fork(after_in_child=_WORKERS.clear)
