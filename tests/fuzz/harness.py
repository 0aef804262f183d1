"""The fuzzing harness: worker processes that read hostile files, and the supervisor that runs them.

Each worker is a separate Python process with an address-space limit (``RLIMIT_AS``) and no core
files. The supervisor hands it one task at a time — "mutate seed S with random seed R" or "read
file F" — and gives it a wall-clock limit per file. For each file the worker runs every target:

- ``validate``: ``mdiff.validate(path, limits)`` (data checks on),
- ``open``: ``mdiff.open(path, limits)`` and every property of the DiffFile and its updates,
- ``update.apply``: ``apply_update(diff[name], base[name], name, engine)`` for every parameter, with the
  numpy and the onnx engine, against a matching base (:func:`tests.fuzz.corpus.base_for`),
- ``mdiff.apply``: ``mdiff.apply(base, diff)`` with that base, and with invalid_files' base state,

and classifies each outcome: ``OK``; ``TYPED`` (an MdiffError: its code); ``UNTYPED`` (any other
exception — a bug); ``MEMORY`` (MemoryError, or an error that says an allocation failed: the
reader tried to allocate past the address-space limit); ``BADRESULT`` (no error, but a result of
the wrong kind, shape or dtype). The supervisor adds ``CRASH`` (the worker died: a signal, e.g.
SIGSEGV in libhdf5) and ``HANG`` (no answer within the limit: the worker's Python stack is dumped,
then it is killed). A dead or killed worker is replaced and the run goes on.

The limit per file is CPU time, the worker's own (Linux: /proc/<pid>/stat), not wall time: the
hangs this finds are computations that run away (a quadratic walk, an unbounded shape inference),
and a loaded machine stretches the wall time of a file, never its CPU time, so a file is not called
hung because other processes shared the cores. A generous wall-clock watchdog (``wall_timeout``)
still ends a worker that blocks without computing; it is far above any file's wall time on a loaded
machine, so it only fires on a worker that would otherwise never answer.

The file a worker is reading is at ``<workdir>/w<k>/current.mdiff`` until its next task, so the
supervisor can keep a copy of every input that was not OK or TYPED.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
SEVERITY = ["OK", "TYPED", "BADRESULT", "MEMORY", "UNTYPED", "HANG", "CRASH"]
FAILURES = {"BADRESULT", "MEMORY", "UNTYPED", "HANG", "CRASH"}
DEFAULT_MEMORY = 2 << 30  # bytes of address space per worker
DEFAULT_TIMEOUT = 10.0  # seconds of the worker's CPU time per file
WALL_WATCHDOG = 120.0  # seconds of wall time per file at least: a blocked worker, not a slow one (see the docstring)
# glibc's malloc checker (Debian/Ubuntu: libc6), preloaded into workers when present.
MALLOC_DEBUG = next((p for p in ("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0", "/lib/aarch64-linux-gnu/libc_malloc_debug.so.0",
                                 "/usr/lib64/libc_malloc_debug.so.0") if os.path.exists(p)), None)
_MEMORY_TEXT = re.compile(r"bad_alloc|out of memory|Unable to allocate|MemoryError|memory allocation failed|"
                          r"can't allocate|cannot allocate|Cannot allocate memory", re.IGNORECASE)


# ---------------------------------------------------------------- the worker side


def _frames(tb) -> list[str]:
    return [f"{Path(f.filename).as_posix()}:{f.lineno} {f.name}" for f in traceback.extract_tb(tb)]


def _where(frames: list[str]) -> str:
    """The innermost frame inside the mdiff package (else the innermost), without its line number."""
    inside = [f for f in frames if "/mdiff/" in f and "/tests/" not in f]
    frame = (inside or frames or ["?:0 ?"])[-1]
    path, _, func = frame.partition(" ")
    path = path.rsplit(":", 1)[0]
    if "/mdiff/" in path:
        path = "mdiff/" + path.split("/mdiff/", 1)[1]
    else:
        path = Path(path).name
    return f"{path}:{func}"


def classify(exc: BaseException) -> dict:
    """A typed error stays TYPED even when its cause was a failed allocation (the reader refused the
    file and lives on; ``alloc`` marks it); MemoryError and every other exception are failures."""
    import mdiff

    frames = _frames(exc.__traceback__)
    message = f"{type(exc).__name__}: {exc}"[:600]
    if isinstance(exc, mdiff.MdiffError):
        out = {"class": "TYPED", "code": exc.code}
        if _MEMORY_TEXT.search(str(exc)[:2000]):
            out.update(alloc=True, message=message[:300])
        return out
    if isinstance(exc, MemoryError):
        return {"class": "MEMORY", "code": None, "type": type(exc).__name__, "message": message,
                "where": _where(frames), "frames": frames[-12:]}
    return {"class": "UNTYPED", "code": None, "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": message, "where": _where(frames), "frames": frames[-12:]}


def _check_result(update, result) -> str | None:
    import numpy as np

    if update.type == "delete":
        return None if result is None else f"delete returned {type(result).__name__}"
    if not isinstance(result, np.ndarray):
        return f"returned {type(result).__name__}, not an array"
    if tuple(result.shape) != tuple(update.shape) or result.dtype != update.dtype.value:
        return f"returned {result.dtype}{list(result.shape)} for {update.dtype.name}{list(update.shape)}"
    return None


_PROC: dict[str, int] = {}


def _proc_fd(name: str, flags: int) -> int | None:
    if name not in _PROC:
        try:
            _PROC[name] = os.open(name, flags)
        except OSError:
            _PROC[name] = -1
    return _PROC[name] if _PROC[name] >= 0 else None


def _status_kib(field_name: str) -> int:
    fd = _proc_fd("/proc/self/status", os.O_RDONLY)
    if fd is None:
        return 0
    text = os.pread(fd, 1 << 16, 0)
    at = text.find(field_name.encode())
    return int(text[at + len(field_name):text.index(b"\n", at)].split()[0]) * 1024 if at >= 0 else 0


def _reset_peak() -> int:
    """Reset the peak resident size (Linux: clear_refs 5); the current resident size."""
    fd = _proc_fd("/proc/self/clear_refs", os.O_WRONLY)
    if fd is not None:
        try:
            os.write(fd, b"5")
        except OSError:
            pass
    return _status_kib("VmRSS:")


def _peak() -> int:
    return _status_kib("VmHWM:")


MEMORY_ALARM = 512 << 20  # resident growth while reading one (small) file that counts as MEMORY


class Recorder:
    """Runs targets and classifies their outcomes into ``out``: ``record(target, fn)`` returns fn's value,
    or None when it raised. An exception named ``_Lie`` (a wrong result without an error) is BADRESULT;
    resident growth over ``memory_alarm`` while a target ran is MEMORY, whatever its outcome."""

    def __init__(self, size_of_input: Callable[[], int], memory_alarm: int = MEMORY_ALARM,
                 on_start: Callable[[list[str]], None] | None = None):
        self.out: list[dict] = []
        self._size = size_of_input
        self._alarm = memory_alarm
        self._on_start = on_start

    def started(self, ops: list[str]) -> None:
        """The input is built (``ops``: how): from now on a hang or crash is the targets'."""
        if self._on_start is not None:
            self._on_start(ops)

    def __call__(self, target: str, fn):
        before = _reset_peak()
        try:
            value = fn()
        except BaseException as exc:  # noqa: BLE001 — classifying every exception is the point
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            outcome = classify(exc)
            if type(exc).__name__ == "_Lie":
                outcome = {"class": "BADRESULT", "code": None, "type": "result", "message": str(exc)[:300], "where": target}
            self.out.append({"target": target, **outcome})
            value = None
        else:
            self.out.append({"target": target, "class": "OK", "code": None})
        grew = _peak() - before
        self.out[-1]["peak_mib"] = round(grew / 2**20, 1)
        if grew > self._alarm and self.out[-1]["class"] in ("OK", "TYPED"):
            self.out[-1].update({"class": "MEMORY", "type": "peak RSS", "where": target,
                                 "message": f"resident memory grew by {grew >> 20} MiB while reading an input of "
                                            f"{self._size()} bytes (outcome {self.out[-1]['class']} {self.out[-1].get('code') or ''})"})
        return value


def run_targets(path: str, limits_fields: dict | None, engines=("numpy", "onnx"), memory_alarm: int = MEMORY_ALARM) -> list[dict]:
    """Every target on one file; one outcome dict per target (see the module docstring)."""
    import mdiff
    from mdiff.engines import apply_update
    from mdiff.format.findings import Finding
    from mdiff.rules import RULES
    from tests.fuzz.corpus import base_for

    limits = mdiff.Limits(**limits_fields) if limits_fields else mdiff.Limits()
    record = Recorder(lambda: os.path.getsize(path), memory_alarm)
    out = record.out

    findings = record("validate", lambda: mdiff.validate(path, limits=limits))
    if findings is not None:
        if not isinstance(findings, list) or not all(isinstance(x, Finding) and x.code in RULES for x in findings):
            out[-1] = {"target": "validate", "class": "BADRESULT", "code": None, "message": f"validate returned {findings!r}"[:300],
                       "where": "mdiff/validate.py:validate", "type": "result"}
        else:
            errors = [x for x in findings if x.is_error]
            if errors and out[-1]["class"] == "OK":
                out[-1].update({"class": "TYPED", "code": errors[0].code})
                alloc = [x for x in findings if _MEMORY_TEXT.search(x.message[:2000])]
                if alloc:
                    out[-1].update(alloc=True, message=alloc[0].message[:300])
    diff = record("open", lambda: mdiff.open(path, limits))
    if diff is None:
        return out
    try:
        def read_everything():
            diff.commit, diff.version, list(diff.warnings), len(diff)
            for name in diff:
                update = diff[name]
                update.meta, update.shape, update.dtype, update.sha256, update.stored_bytes, update.update_type
                diff.hdf5_path(name)
            return True

        ok = record("open", read_everything)
        del out[-2]  # one "open" outcome: reading the properties is part of opening
        if ok is None:
            return out
        base = base_for(diff)
        for name in list(diff):
            update = diff[name]
            for engine in engines:
                target = f"update.apply:{engine}"
                result = record(target, lambda: apply_update(update, None if base.get(name) is None else base[name].copy(), name, engine))
                if out[-1]["class"] == "OK":
                    problem = _check_result(update, result)
                    if problem:
                        out[-1] = {"target": target, "class": "BADRESULT", "code": None, "message": problem,
                                   "where": f"update:{update.type}", "type": "result"}
        record("mdiff.apply", lambda: mdiff.apply(base, diff))
        from tests.fuzz.corpus import _invalid_files

        record("mdiff.apply", lambda: mdiff.apply(_invalid_files().base_state(), diff))
    finally:
        try:
            diff.close()
        except Exception:  # noqa: BLE001
            pass
    return out


def _configure_worker() -> None:
    """Quiet, single-threaded onnxruntime (two workers share two cores)."""
    import onnxruntime as ort

    from mdiff.engines import onnxruntime_engine

    ort.set_default_logger_severity(4)
    onnxruntime_engine._shared = onnxruntime_engine.OnnxRunner(threads=1)


def worker_main() -> None:
    """Entry point of a worker process: config as JSON in argv[1]; tasks on stdin, results on stdout."""
    import faulthandler
    import random
    import resource

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints to stdout goes to the log, not into the protocol
    sys.stdout = sys.stderr
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    config = json.loads(sys.argv[1])
    sys.setrecursionlimit(config.get("recursion_limit", sys.getrecursionlimit()))
    workdir = Path(config["workdir"])
    current = workdir / "current.mdiff"
    manifest = {s["name"]: s for s in json.loads(Path(config["manifest"]).read_text())} if config.get("manifest") else {}
    donors = [Path(s["path"]) for s in manifest.values()]
    import mdiff  # noqa: F401 — import before "ready": startup is not part of any file's time

    from tests.fuzz.mutate import mutate

    _configure_worker()
    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        sys.stderr.flush()
        try:
            os.ftruncate(2, 0)
            os.lseek(2, 0, os.SEEK_SET)
        except OSError:
            pass
        started, cpu_started = time.perf_counter(), time.process_time()
        if "family" in task:  # a repository folder or a checkpoint (tests/fuzz/folders.py)
            results, ops = _run_folder_task(task, workdir, proto)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            proto.write(json.dumps({"id": task["id"], "results": results, "ops": ops, "rss": rss,
                                    "seconds": time.perf_counter() - started,
                                    "cpu": time.process_time() - cpu_started}) + "\n")
            continue
        if "file" in task:
            path, ops = task["file"], []
        else:
            seed = manifest[task["seed"]]
            rng = random.Random(task["rng"])
            try:
                ops = mutate(Path(seed["path"]), current, rng, donors, onnx_bias=task.get("onnx", False))
            except Exception as exc:  # noqa: BLE001 — a harness problem, not a finding
                ops = [f"mutation failed: {type(exc).__name__}: {exc}"[:200]]
                current.write_bytes(Path(seed["path"]).read_bytes())
            path = str(current)
        proto.write(json.dumps({"id": task["id"], "phase": "run", "ops": ops}) + "\n")
        try:
            results = run_targets(path, task.get("limits"), tuple(task.get("engines", ("numpy", "onnx"))))
        except Exception as exc:  # noqa: BLE001 — the harness's own code failed: report it, go on
            results = [{"target": "harness", "class": "UNTYPED", "code": None, "harness": True, "type": type(exc).__name__,
                        "message": f"harness error: {type(exc).__name__}: {exc}"[:300], "where": _where(_frames(exc.__traceback__))}]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        proto.write(json.dumps({"id": task["id"], "results": results, "ops": ops, "rss": rss,
                                "seconds": time.perf_counter() - started,
                                "cpu": time.process_time() - cpu_started}) + "\n")


def _run_folder_task(task: dict, workdir: Path, proto) -> tuple[list[dict], list[str]]:
    from tests.fuzz import folders

    ops: list[str] = []

    def started(done: list[str]) -> None:
        ops[:] = done
        proto.write(json.dumps({"id": task["id"], "phase": "run", "ops": done}) + "\n")

    def input_size() -> int:
        return sum(p.stat().st_size for p in workdir.glob("current-*") if p.is_file())

    record = Recorder(input_size, on_start=started)
    try:
        folders.run_task(task, workdir, record)
    except Exception as exc:  # noqa: BLE001 — building the input failed: a harness problem, not a finding
        record.out.append({"target": "harness", "class": "UNTYPED", "code": None, "harness": True, "type": type(exc).__name__,
                           "message": f"harness error: {type(exc).__name__}: {exc}"[:300], "where": _where(_frames(exc.__traceback__))})
    return record.out, ops


# ---------------------------------------------------------------- the supervisor side


@dataclass
class Outcome:
    """One file's outcome: every target's, the worst class, and how the file was made."""

    task: dict
    results: list[dict]
    ops: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time, as the worker measured it
    cpu: float = 0.0  # the worker's CPU time for this file (all its threads)
    log: str = ""
    history: list[int] = field(default_factory=list)  # earlier task ids in the same worker process, oldest first

    @property
    def worst(self) -> dict:
        return max(self.results, key=lambda r: SEVERITY.index(r["class"])) if self.results else {"class": "OK"}

    @property
    def cls(self) -> str:
        return self.worst["class"]

    def failures(self) -> list[dict]:
        return [r for r in self.results if r["class"] in FAILURES]

    @staticmethod
    def signature(r: dict) -> str:
        return f"{r['class']} {r['target']} {r.get('type', '')} at {r.get('where', '?')}"


class _Worker:
    def __init__(self, index: int, pool: "Pool"):
        self.index = index
        self.dir = pool.workdir / f"w{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "stderr.log"
        self.task: dict | None = None
        self.phase = ""
        self.ops: list[str] = []
        self.cpu_started = 0.0  # the worker's CPU time when the current phase began
        self.cpu_limit = 0.0
        self.wall_limit = 0.0
        self.deadline = 0.0  # the wall-clock watchdog (time.monotonic())
        self.buffer = b""
        self.done = 0
        self.history: list[int] = []
        config = {"workdir": str(self.dir), "manifest": str(pool.manifest_path) if pool.manifest_path else None,
                  "recursion_limit": pool.recursion_limit}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                   MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1", PYTHONHASHSEED="0", HDF5_PLUGIN_PATH="/nonexistent")
        if pool.malloc_check and MALLOC_DEBUG:  # glibc checks the heap on every free: damage shows in the file that did it
            env.update(LD_PRELOAD=MALLOC_DEBUG, MALLOC_CHECK_="3")
        memory = pool.memory

        def limit():  # runs in the child before Python starts
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.fuzz.harness import worker_main; worker_main()", json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=str(ROOT), env=env, preexec_fn=limit,
        )
        self.ready = False
        self.started = time.monotonic()

    @property
    def current(self) -> Path:
        return self.dir / "current.mdiff"

    def cpu(self) -> float:
        """The worker's CPU time so far (user + system, with its waited-for children), in seconds; where
        /proc cannot tell (not Linux, or the worker is gone), wall time since it started instead."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # the name in parentheses may hold spaces
        except OSError:
            return time.monotonic() - self.started
        return sum(int(x) for x in fields[11:15]) / _CLOCK_TICKS  # utime stime cutime cstime (stat fields 14-17)

    def limit(self, cpu_seconds: float, wall_seconds: float) -> None:
        """The current phase may use ``cpu_seconds`` of CPU; the watchdog ends it after ``wall_seconds``."""
        self.cpu_started, self.cpu_limit, self.wall_limit = self.cpu(), cpu_seconds, wall_seconds
        self.deadline = time.monotonic() + wall_seconds

    def send(self, task: dict, timeout: float, wall_timeout: float) -> None:
        self.task, self.phase, self.ops = task, "mutate", []
        self.limit(2 * timeout + 10, 2 * wall_timeout)  # generation included
        self.proc.stdin.write((json.dumps(task) + "\n").encode())
        self.proc.stdin.flush()

    def overrun(self) -> str | None:
        """Why the current task counts as hung ("cpu" or "wall"), or None while it is within its limits."""
        if self.cpu() - self.cpu_started > self.cpu_limit:
            return "cpu"
        return "wall" if time.monotonic() > self.deadline else None

    def lines(self) -> list[dict] | None:
        """Complete protocol lines available now; None at end of file (the worker died)."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        if not chunk:
            return None
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        return [json.loads(x) for x in complete if x.strip()]

    def log_tail(self, limit: int = 6000) -> str:
        try:
            self.log.flush()
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def stop(self, hard: bool = False) -> None:
        try:
            if hard:
                self.proc.kill()
            else:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
POLL_S = 0.2  # how often a busy worker's CPU time is read: a hang is caught within this of its limit


def _stack_where(log: str) -> str:
    """The innermost mdiff (else first) frame of a faulthandler dump: 'File "...", line N in func'."""
    frames = re.findall(r'File "([^"]+)", line \d+ in (\S+)', log)
    if not frames:
        return "?"
    inside = [(p, fn) for p, fn in frames if "/mdiff/" in p]
    p, fn = (inside or frames)[0]  # faulthandler prints the most recent call first
    p = "mdiff/" + p.split("/mdiff/", 1)[1] if "/mdiff/" in p else Path(p).name
    return f"{p}:{fn}"


class Pool:
    """Runs tasks on ``jobs`` workers; calls ``on_outcome(Outcome, worker_file)`` for each file.
    ``timeout``: seconds of a worker's CPU time per file; ``wall_timeout``: the wall-clock watchdog
    (default: the larger of WALL_WATCHDOG and 12 × ``timeout``)."""

    def __init__(self, workdir, manifest_path=None, jobs: int = 2, timeout: float = DEFAULT_TIMEOUT,
                 memory: int = DEFAULT_MEMORY, recursion_limit: int | None = None, max_tasks_per_worker: int = 4000,
                 max_rss: int = 1400 << 20, malloc_check: bool = False, wall_timeout: float | None = None):
        self.workdir = Path(workdir)
        self.manifest_path = manifest_path
        self.jobs = jobs
        self.timeout = timeout
        self.wall_timeout = wall_timeout if wall_timeout is not None else max(WALL_WATCHDOG, 12 * timeout)
        self.memory = memory
        self.recursion_limit = recursion_limit or sys.getrecursionlimit()
        self.max_tasks = max_tasks_per_worker
        self.max_rss = max_rss
        self.malloc_check = malloc_check
        self.respawns = 0

    def run(self, tasks, on_outcome, startup_timeout: float = 180.0, static: bool = False) -> None:
        """Run every task. With ``static``, task number n goes to worker n % jobs, in order: which files
        a worker process reads, and in what order, is then the same every run (a crash that needs
        the heap state earlier files left behind reproduces)."""
        source = iter(tasks)
        queues: list[list[dict]] = [[] for _ in range(self.jobs)]
        counter = [0]
        exhausted = [False]

        def next_task(k: int) -> dict | None:
            if not static:
                task = next(source, None)
                exhausted[0] = task is None
                return task
            while not queues[k] and not exhausted[0]:
                task = next(source, None)
                if task is None:
                    exhausted[0] = True
                    break
                queues[counter[0] % self.jobs].append(task)
                counter[0] += 1
            return queues[k].pop(0) if queues[k] else None

        workers = [_Worker(i, self) for i in range(self.jobs)]
        try:
            while True:
                now = time.monotonic()
                for i, w in enumerate(workers):
                    if w.ready and w.task is None:
                        task = next_task(i)
                        if task is not None:
                            w.send(task, self.timeout, self.wall_timeout)
                    if not w.ready and now - w.started > startup_timeout:
                        raise RuntimeError(f"fuzz worker {i} did not start:\n{w.log_tail()}")
                busy = [w for w in workers if w.task is not None or not w.ready]
                if exhausted[0] and not any(queues) and not any(w.task is not None for w in workers):
                    return
                if not busy:
                    continue
                # CPU time cannot be waited for: a busy worker's is read every POLL_S
                wait = POLL_S if any(w.task is not None for w in busy) else 1.0
                readable, _, _ = select.select([w.proc.stdout for w in busy], [], [], wait)
                for w in busy:
                    if w.proc.stdout in readable:
                        messages = w.lines()
                        if messages is None:
                            self._died(w, workers, on_outcome)
                            continue
                        for m in messages:
                            self._message(w, m, workers, on_outcome)
                for w in list(workers):
                    if w.task is not None:
                        why = w.overrun()
                        if why:
                            self._hung(w, workers, on_outcome, why)
        finally:
            for w in workers:
                w.stop(hard=w.task is not None)

    def _message(self, w: _Worker, m: dict, workers, on_outcome) -> None:
        if "ready" in m:
            w.ready = True
            return
        if m.get("phase") == "run":
            w.phase, w.ops = "run", m.get("ops", [])
            w.limit(self.timeout, self.wall_timeout)
            return
        outcome = Outcome(w.task, m["results"], m.get("ops", []), m.get("seconds", 0.0), m.get("cpu", 0.0))
        if outcome.cls in FAILURES:
            outcome.log = w.log_tail()
            outcome.history = list(w.history)
        on_outcome(outcome, w.current)
        w.history.append(w.task["id"])
        w.task = None
        w.done += 1
        if w.done >= self.max_tasks or m.get("rss", 0) > self.max_rss:
            self._replace(w, workers)

    def _replace(self, w: _Worker, workers, hard: bool = False) -> None:
        w.stop(hard=hard)
        workers[workers.index(w)] = _Worker(w.index, self)
        self.respawns += 1

    def _died(self, w: _Worker, workers, on_outcome) -> None:
        code = w.proc.wait()
        log = w.log_tail()
        if w.task is not None:
            how = signal.Signals(-code).name if code < 0 else f"exit status {code}"
            memory = bool(_MEMORY_TEXT.search(log))
            cls = "MEMORY" if memory else "CRASH"
            target = "mutation" if w.phase == "mutate" else _crash_target(log)
            result = {"target": target, "class": cls if w.phase == "run" else "CRASH", "code": None, "type": how,
                      "message": f"the worker died ({how})", "where": _stack_where(log)}
            if w.phase != "run":
                result["harness"] = True  # the mutation step died: a harness problem, not a finding
            on_outcome(Outcome(w.task, [result], w.ops, log=log, history=list(w.history)), w.current)
        elif not w.ready:
            raise RuntimeError(f"fuzz worker {w.index} died while starting ({code}):\n{log}")
        w.task = None
        self._replace(w, workers)

    def _hung(self, w: _Worker, workers, on_outcome, why: str) -> None:
        used = w.cpu() - w.cpu_started
        try:
            w.proc.send_signal(signal.SIGUSR1)  # faulthandler: dump the stacks
            time.sleep(0.5)
        except OSError:
            pass
        log = w.log_tail()
        result = {"target": _crash_target(log) if w.phase == "run" else "mutation", "class": "HANG", "code": None,
                  "type": f"over {w.cpu_limit:g} s CPU" if why == "cpu" else f"over {w.wall_limit:g} s wall",
                  "message": f"no answer after {used:.1f} s of CPU (limit {w.cpu_limit:g} s; {w.phase})" if why == "cpu" else
                             f"no answer within the {w.wall_limit:g} s watchdog, blocked: {used:.1f} s of CPU used ({w.phase})",
                  "where": _stack_where(log)}
        if w.phase != "run":
            result["harness"] = True
        on_outcome(Outcome(w.task, [result], w.ops, log=log, history=list(w.history)), w.current)
        w.task = None
        self._replace(w, workers, hard=True)


_ENTRY_POINTS = {"validate": "validate", "open_diff": "open", "apply": "update.apply", "apply_mappings": "mdiff.apply"}


def _crash_target(log: str) -> str:
    """Which target was running, from the Python stack a dying worker dumped (most recent call first):
    the function the harness's lambda called."""
    frames = re.findall(r'File "([^"]+)", line \d+ in (\S+)', log)
    for j in range(len(frames) - 1, -1, -1):
        path, func = frames[j]
        if path.endswith("harness.py") and func == "read_everything":
            return "open"
        if path.endswith("harness.py") and func == "<lambda>":
            return _ENTRY_POINTS.get(frames[j - 1][1], frames[j - 1][1]) if j else "unknown"
    return "unknown"


# ---------------------------------------------------------------- tasks


def onnx_seed(name: str) -> bool:
    return "embedded" in name or re.search(r"MD42\d", name) is not None


def random_limits(rng) -> dict:
    fields = {
        "max_rank": [0, 1, 2, 3], "max_elements": [0, 1, 4, 8, 100], "max_dataset_bytes": [0, 16, 32, 1000],
        "max_total_bytes": [0, 48, 4096], "max_objects": [0, 1, 4, 8, 20], "max_attribute_bytes": [0, 1, 64, 200],
        "max_function_bytes": [0, 100, 1000], "max_function_nodes": [0, 1, 3],
    }
    chosen = rng.sample(sorted(fields), rng.randint(1, 3))
    return {k: rng.choice(fields[k]) for k in chosen}


def make_tasks(manifest: list[dict], master_seed: int, count: int = 0, start: int = 0, ids=None):
    """Deterministic tasks: task i depends only on (master_seed, i) and the manifest."""
    import random

    onnx = [s for s in manifest if onnx_seed(s["name"])]
    valid = [s for s in manifest if s["name"].startswith("gen_") or s["name"].startswith("inv_valid_")]
    hostile = [s for s in manifest if s not in valid]
    for i in (ids if ids is not None else range(start, start + count)):
        rng = random.Random(f"{master_seed}:{i}")
        roll = rng.random()  # 10% embedded update types, 55% valid seeds, 35% invalid_files' hostile seeds
        group = onnx if roll < 0.10 else valid if roll < 0.65 else hostile
        seed = rng.choice(group or manifest)
        roll = rng.random()
        limits = None
        if roll < 0.1 and seed.get("limits"):
            limits = seed["limits"]
        elif roll < 0.2:
            limits = random_limits(rng)
        yield {"id": i, "seed": seed["name"], "rng": rng.getrandbits(63), "limits": limits, "onnx": onnx_seed(seed["name"])}


def prepare(workdir) -> Path:
    """Build the seed corpus into ``workdir/seeds``; the manifest's path."""
    from tests.fuzz.corpus import build_seeds

    workdir = Path(workdir)
    manifest = build_seeds(workdir / "seeds")
    path = workdir / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path


def replay(path, limits: dict | None = None, timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY,
           workdir=None) -> Outcome:
    """Run every target on one file in a fresh worker (with the limits); its Outcome."""
    import tempfile

    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="mdiff-replay-") as tmp:
        pool = Pool(workdir or tmp, None, jobs=1, timeout=timeout, memory=memory)
        pool.run([{"id": 0, "file": str(Path(path).resolve()), "limits": limits}], lambda o, _: outcomes.append(o))
    return outcomes[0]


def replay_many(paths, limits: dict | None = None, jobs: int = 2, timeout: float = DEFAULT_TIMEOUT,
                memory: int = DEFAULT_MEMORY, fresh: bool = True) -> dict[str, Outcome]:
    """Every file in a pool of workers; {path: Outcome}. With ``fresh``, each file gets a new worker
    process (nothing an earlier file did to the process can change the outcome)."""
    import tempfile

    paths = [str(Path(p).resolve()) for p in paths]
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="mdiff-replay-") as tmp:
        pool = Pool(tmp, None, jobs=jobs, timeout=timeout, memory=memory, max_tasks_per_worker=1 if fresh else 4000)
        tasks = [{"id": i, "file": p, "limits": limits} for i, p in enumerate(paths)]
        pool.run(tasks, lambda o, _: outcomes.__setitem__(paths[o.task["id"]], o))
    return outcomes
