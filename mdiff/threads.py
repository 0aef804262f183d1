"""One pool of threads for the work that releases the GIL (inflating, deflating, hashing), sized to the cores.

libhdf5 and the Python code around it use one core; zlib/ISA-L, hashlib and numpy's copies release the
GIL on large buffers, so these run side by side on the others. The pool has as many threads as the
cores this process may use, unless ``MDIFF_THREADS`` or :func:`set_threads` says otherwise; how many
there are never changes a file's bytes (the writer's window of chunks in flight is fixed: §11).

One thread (``MDIFF_THREADS=1``, ``--threads 1``) means one thread: every task runs on the caller's thread
(:func:`shared_pool` is an :class:`Inline` executor, :func:`one_ahead` works inline, :func:`in_parts` runs
its parts in turn), for a user who runs one job per core. That holds for waiting on the disk too: the
:class:`Writeback` syncs then run inline, on the writer's thread. A thread of their own (an fsync costs it
almost no CPU) was measured slower, not faster: a 1 GiB commit took 14.0 and 16.5 s of wall with the syncs
aside against 9.1 and 9.0 s inline (load ~2, 2 cores; under load 4-6, medians 16.5 and 15.5 s).

With N ≥ 2 the pool has N threads, and beside them work the caller's thread (a commit's writer: libhdf5, ~0.3 s
of CPU a GiB) and :func:`one_ahead`'s (the next parameter's delta, whose parts and hashes go to the pool): these
two mostly wait on the pool, and are not counted. A pool of N−1 threads beside the look-ahead is what
``MDIFF_THREADS=1`` gave before one thread meant one (a pool thread, the look-ahead, the writer): a 1 GiB commit
took 6.2-7.1 s of wall that way on 2 cores, against 5.1-5.3 s with the pool's 2 (a quiet machine).
"""

from __future__ import annotations

import concurrent.futures.thread
import itertools
import os
import sys
import threading
from collections.abc import Generator, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

ENVIRONMENT = "MDIFF_THREADS"

_lock = threading.Lock()
_pool: Executor | None = None
_pool_threads = 0  # the threads of _pool, while there is one
_chosen: int | None = None  # by set_threads; None: $MDIFF_THREADS, else the cores


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system says), at least 1."""
    count: int | None
    if sys.version_info >= (3, 13):
        count = os.process_cpu_count()
    elif hasattr(os, "sched_getaffinity"):  # Linux: a container or `taskset` may allow fewer than the machine has
        count = len(os.sched_getaffinity(0))
    else:
        count = os.cpu_count()
    return max(1, count or 1)


def parse_threads(text: str) -> int:
    """A number of threads written as text: a whole number ≥ 1, else ValueError saying what to write."""
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{text!r} is not a number of threads: give a whole number, 1 or more, or leave it "
                         f"out for one per core ({available_cores()} here)")
    return n


def configured_threads() -> int:
    """The threads the pool is to have: :func:`set_threads`'s choice, else ``$MDIFF_THREADS``, else one per
    core. ValueError (saying what to write) when ``$MDIFF_THREADS`` is not a whole number ≥ 1."""
    if _chosen is not None:
        return _chosen
    text = os.environ.get(ENVIRONMENT, "")
    if not text.strip():
        return available_cores()
    try:
        return parse_threads(text)
    except ValueError as exc:
        raise ValueError(f"${ENVIRONMENT}: {exc}") from None


def pool_size() -> int:
    """The threads of the shared pool: of the one built, else of the one :func:`shared_pool` would build."""
    return _pool_threads if _pool is not None else configured_threads()


T = TypeVar("T")
R = TypeVar("R")


class Pool(ThreadPoolExecutor):
    """A thread pool that, once the interpreter is exiting, runs what it is given on the caller's thread.

    Python refuses new work to every pool once the main script has ended (concurrent.futures' exit hook), but a commit
    still running on a non-daemon thread then (integrations/background.py: a training script that ends
    while its last commit runs) must finish: its hashing, deflating and reading ahead run where it is.
    """

    def submit(self, fn: Callable[..., R], /, *args: object, **kwargs: object) -> Future[R]:
        try:
            return super().submit(fn, *args, **kwargs)
        except RuntimeError:
            # concurrent.futures' own exit flag (set by its exit hook, which then joins its pools' threads while
            # the main thread still counts as alive): no public way to ask, and without it a shut pool's error stands
            if not getattr(concurrent.futures.thread, "_shutdown", False):
                raise
        return _run_now(fn, *args, **kwargs)


def _run_now(fn: Callable[..., R], /, *args: object, **kwargs: object) -> Future[R]:
    """``fn(*args, **kwargs)`` run on this thread, as a done Future."""
    done: Future[R] = Future()
    try:
        done.set_result(fn(*args, **kwargs))
    except BaseException as exc:  # raised in its turn, as a thread's would be
        done.set_exception(exc)
    return done


class Inline(Executor):
    """The pool of one thread: each task runs on the caller's thread as it is submitted, and its Future is done
    when :meth:`submit` returns. A task that submits runs that task at once too (as deep as the code nests
    them: no task submits itself), and waiting on a Future never blocks, so nothing here can deadlock."""

    def submit(self, fn: Callable[..., R], /, *args: object, **kwargs: object) -> Future[R]:
        return _run_now(fn, *args, **kwargs)


def shared_pool() -> Executor:
    """The pool, built on first use with :func:`configured_threads` threads: with one, an :class:`Inline`
    executor (the caller's thread is the one)."""
    global _pool, _pool_threads
    pool = _pool
    if pool is None:
        with _lock:
            if _pool is None:
                _pool_threads = configured_threads()
                _pool = Inline() if _pool_threads == 1 else Pool(_pool_threads, thread_name_prefix="mdiff")
            pool = _pool
    return pool


def set_threads(n: int) -> None:
    """Use ``n`` threads from now on (over ``$MDIFF_THREADS``): the pool is built anew at its next use; work
    already sent to the old one still runs there, whose threads then end. ValueError when ``n`` < 1."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"the number of threads is a whole number, not {n!r}")
    if n < 1:
        raise ValueError(f"the number of threads must be 1 or more, not {n}")
    _choose(n)


@contextmanager
def threads_for(n: int | None) -> Iterator[None]:
    """:func:`set_threads` (``n``) inside the block, and the choice before it after; None changes nothing."""
    if n is None:
        yield
        return
    before = _chosen
    set_threads(n)
    try:
        yield
    finally:
        _choose(before)


def _choose(n: int | None) -> None:
    global _pool, _chosen
    # The old pool is let go, not shut down: a thread that fetched it just before may still submit to it
    # (shutdown would refuse that); once no one holds it, its threads finish what was sent and end.
    with _lock:
        _pool, _chosen = None, n


def _forget_pool_in_child() -> None:
    # A forked child (isolation.py) inherits the pool but not its threads: work sent there would wait
    # forever. The lock too may have been held by a thread that does not exist in the child.
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX; where there is no fork there is nothing to rebuild
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def in_pool() -> bool:
    """True on one of the pool's threads: work there must not wait on the pool (it could deadlock)."""
    return threading.current_thread().name.startswith("mdiff_")


PART_BYTES = 4 << 20  # of an array's elements one task of in_parts works on: a few per core for a 64 MiB tensor


def in_parts(size: int, itemsize: int, work: Callable[[int, int], None], part_bytes: int = PART_BYTES) -> None:
    """``work(start, stop)`` over the elements ``[0, size)`` cut in parts of about ``part_bytes``, the parts
    side by side on the pool — on this thread instead where there is one part, one thread, or this is
    one of the pool's (which must not wait on it). Each part must write only its own elements: the
    result is then the same however the parts ran. Every part has ended when this returns or raises."""
    step = max(1, part_bytes // max(1, itemsize))
    if size <= step or pool_size() <= 1 or in_pool():
        work(0, size)
        return
    pool = shared_pool()
    futures = [pool.submit(work, start, min(start + step, size)) for start in range(0, size, step)]
    for future in futures:  # all ended before the first error is raised: none still writes to the caller's arrays
        future.exception()
    for future in futures:
        future.result()


class Writeback:
    """Syncs a file being written on the pool every ``every`` bytes, one sync at a time: the disk
    works while the writer goes on, and the final fsync has little left (1 GiB: ~0.4 s less here).

    With one thread the pool is :class:`Inline`, and each sync runs on the writer's thread: measured no slower
    than a thread of its own for the syncs (see this module's docstring), so one thread stays one thread."""

    def __init__(self, sync: Callable[[], None], every: int = 64 << 20):
        self._sync, self._every = sync, every
        self._unsynced = 0
        self._running: Future | None = None

    def wrote(self, nbytes: int, flush: Callable[[], None] | None = None) -> None:
        self._unsynced += nbytes
        if self._unsynced < self._every or (self._running is not None and not self._running.done()):
            return
        self._unsynced = 0
        if flush is not None:
            flush()  # what the writer buffers must reach the OS before the sync can cover it
        self._running = shared_pool().submit(self._sync)

    def wait(self) -> None:
        """Let a sync in flight finish (before the final fsync, or before the file is removed)."""
        if self._running is not None:
            self._running.exception()


def one_ahead(items: Iterable[T], work: Callable[[T], R], small: Callable[[R], bool] | None = None
              ) -> Generator[tuple[T, R], None, None]:
    """(item, work(item)) in order, each item's work done on one thread of its own while the caller handles the
    item before — never two at once, so ``work`` may read what is not thread-safe (a state's files). Not the
    shared pool: ``work`` waits on that pool (hashing, inflating), which must never wait on its own threads.

    ``small(result)``: whether a result is small. While every result is, items go to that thread in batches
    that double up to AHEAD_BATCH (a hand-over costs ~10 µs of each side's time: 10^5 small parameters, ~2 s),
    so that what is held ahead is one batch of small results, or one large one and the small ones before it.

    With one thread (:func:`pool_size`), each item's work is done here, when the caller asks for it: no thread."""
    if pool_size() <= 1:
        for item in items:
            yield item, work(item)
        return
    with Pool(1, thread_name_prefix="mdiff-ahead") as ahead:  # its exit waits for the work in flight
        iterator = iter(items)
        batch = 1
        pending: Future[tuple[list[tuple[T, R]], BaseException | None]] | None = None
        try:
            while True:
                chunk = list(itertools.islice(iterator, batch))
                previous, pending = pending, (ahead.submit(_work_through, chunk, work) if chunk else None)
                if previous is not None:
                    done, error = previous.result()
                    yield from done
                    if error is not None:
                        raise error
                    if small is not None:
                        batch = min(2 * batch, AHEAD_BATCH) if all(small(result) for _, result in done) else 1
                if pending is None:
                    return
        finally:  # closed early (an error, or the caller stopped): the next items' work is not started
            if pending is not None:
                pending.cancel()


AHEAD_BATCH = 64


def _work_through(chunk: list[T], work: Callable[[T], R]) -> tuple[list[tuple[T, R]], BaseException | None]:
    """(item, work(item)) for the items of ``chunk`` in order, up to the first that raises, and its error: the
    caller hands over the results before it, as it would have had the items gone one at a time."""
    done: list[tuple[T, R]] = []
    for item in chunk:
        try:
            done.append((item, work(item)))
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller, after the results before it
            return done, exc
    return done, None
