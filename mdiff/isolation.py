"""Running untrusted-file work in a child process with a time and memory limit (SPEC.md §8.5).

libhdf5 has a steady stream of memory-safety bugs on crafted files. In a child
process, a crash, a hang or a runaway allocation in the C library becomes a
finding with a code (MD515) instead of taking the caller down with it.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any, Callable

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_BYTES = 8 * 2**30


@dataclass(frozen=True)
class Isolation:
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_bytes: int = DEFAULT_MEMORY_BYTES


def isolation_supported() -> bool:
    """Whether this platform can isolate a reader: fork() and resource limits (POSIX)."""
    import importlib.util
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods() and importlib.util.find_spec("resource") is not None


class IsolationFailure(Exception):
    """The child died, hung or ran out of memory; ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _child(conn, limits: Isolation, fn: Callable, args: tuple) -> None:
    import faulthandler
    import resource  # POSIX only, like fork: imported where isolation runs, so that `import mdiff` works anywhere

    faulthandler.disable()  # a crash here is reported as MD515; a Python stack dump on stderr would only be noise
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind
    try:
        conn.send(("ok", fn(*args)))
    except MemoryError:
        conn.send(("memory", None))
    except BaseException as exc:  # noqa: BLE001 — carried to the parent, which re-raises it
        conn.send(("raised", exc))
    finally:
        conn.close()


def run_isolated(fn: Callable[..., Any], *args, limits: Isolation = Isolation()) -> Any:
    """``fn(*args)`` in a forked child; its result, or its exception re-raised here.

    IsolationFailure when the child is killed by a signal, exceeds ``limits.timeout_s``
    or cannot allocate within ``limits.memory_bytes``.
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
        if not parent.poll(limits.timeout_s):
            process.kill()
            raise IsolationFailure(f"no answer within {limits.timeout_s:g} s (killed)")
        try:
            status, value = parent.recv()
        except EOFError:
            process.join()
            code = process.exitcode
            name = signal.Signals(-code).name if code is not None and code < 0 else f"exit status {code}"
            raise IsolationFailure(f"the reading process died ({name})") from None
    finally:
        parent.close()
        process.join(timeout=1)
        if process.is_alive():
            process.kill()
    if status == "memory":
        raise IsolationFailure(f"more than {limits.memory_bytes} bytes of memory were needed")
    if status == "raised":
        raise value
    return value


def crashes_here(_: Any = None) -> None:
    """For tests: die the way a libhdf5 memory-safety bug would."""
    os.kill(os.getpid(), signal.SIGSEGV)
