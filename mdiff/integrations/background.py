"""Commits made one at a time on a background thread, so that a training loop never waits on one.

    commits = BackgroundCommits()
    for step in ...:
        ...
        if step % 100 == 0:
            state = frozen_state(model.state_dict())  # the optimizer changes the live tensors in place
            commits.submit(lambda: repo.commit(state, f"step {step}"), done=record)
    commits.close()  # the last commit finishes; a failed one is raised here

``submit`` first waits for the commit in flight (at most one runs: a caller that hands over checkpoint
folders knows the previous one is no longer read once ``submit`` or ``wait`` returns), raises its error if
it failed, then starts the next one and returns at once. An error is raised exactly once, at the next
``submit``, ``wait`` or ``close`` — never swallowed — and no commit starts until it has been raised.

A run that is killed keeps every commit that finished and nothing half-written: the repository writes
each commit file and ref atomically. A normal interpreter exit never loses a commit in flight: the worker
is a non-daemon thread, which Python joins at exit before ``atexit`` handlers run; a commit that failed
with nobody left to raise its error is logged then.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from mdiff.frameworks import as_numpy

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Flight:
    """The commit in flight, shared with the exit hook (which must not keep the owner alive)."""

    def __init__(self) -> None:
        self.future: Future[Any] | None = None
        self.what = ""


class BackgroundCommits:
    """One background worker thread running commits one at a time, their errors raised to the caller.

    With ``background=False`` each commit runs in ``submit`` on the caller's thread (for debugging: the
    same order, the same errors, raised at once). Usable as a context manager (``close`` on exit).
    """

    def __init__(self, background: bool = True):
        self.background = background
        self._flight = _Flight()
        self._executor: ThreadPoolExecutor | None = None
        # Its name must not start with "mdiff_": threads.in_pool() would take it for one of the shared
        # pool's threads, and the commit could not use the pool.
        self._name = "mdiff-commit"
        weakref.finalize(self, _report_unraised, self._flight)

    @property
    def busy(self) -> bool:
        """Whether a commit is running now."""
        future = self._flight.future
        return future is not None and not future.done()

    def submit(self, commit: Callable[[], T], done: Callable[[T], Any] | None = None, what: str = "a commit") -> None:
        """Wait for the commit in flight (raising its error), then start ``commit()`` on the worker and
        return. ``done(result)`` runs on the worker right after it, before anyone waiting is released
        (to record the result in order); ``what`` names the commit in the note an error carries."""
        self.wait()
        if not self.background:
            result = commit()
            if done is not None:
                done(result)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=self._name)

        def run() -> T:
            result = commit()
            if done is not None:
                done(result)
            return result

        self._flight.what = what
        self._flight.future = self._executor.submit(run)

    def wait(self) -> None:
        """Block until the commit in flight is done; raise its error (the worker's exception itself: its
        type, rule code, message and traceback, with a note saying it ran in the background)."""
        future, self._flight.future = self._flight.future, None
        if future is None:
            return
        error = future.exception()
        if error is not None:
            if sys.version_info >= (3, 11):
                error.add_note(f"raised by {self._flight.what}, which ran on a background thread")
            raise error

    def close(self) -> None:
        """Wait for the commit in flight (raising its error) and stop the worker thread."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __enter__(self) -> BackgroundCommits:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if error is None:
            self.close()
            return
        # Another error is on its way: the commit still finishes, and its own error is logged, not raised over it.
        try:
            self.close()
        except Exception:
            log.exception("%s failed while another error ended the run", self._flight.what)


def _report_unraised(flight: _Flight) -> None:
    """At exit (or when the owner is collected): a commit whose error nobody will raise is logged."""
    future, what = flight.future, flight.what

    def report(done: Future[Any]) -> None:
        error = done.exception()
        if error is not None:
            log.error("%s failed and no save or wait raised it", what, exc_info=error)

    if future is not None:
        future.add_done_callback(report)


def frozen_state(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A copy of a state dict (numpy arrays or torch tensors on any device) as numpy arrays of the same
    bits, for a commit in the background: the optimizer changes the live tensors while it reads.

    The copy is a whole model in host memory (beside the live one, for a model trained on the CPU). Where
    that is too much, save a checkpoint (``save_pretrained``, safetensors) and commit its path in the
    background instead, as the Trainer's callback does: the file is the frozen copy, and the commit reads
    it one tensor at a time."""
    return {name: np.array(value, copy=True) if isinstance(value, np.ndarray) else as_numpy(value, name)
            for name, value in state.items()}
