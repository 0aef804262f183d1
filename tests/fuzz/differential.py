"""Differential fuzzing (issue 17): the same mutated files to the reference and to mdiff-js.

Each file the fuzzer makes (tests/fuzz/mutate.py, from the seeds of corpus.py, with the limits the
task draws) is validated by both implementations through their command lines (the reference in its
isolated mode, mdiff-js with a batch of files per node process). A *disagreement* is a file on which
they give a different verdict (valid or not) or a different set of finding codes (errors and
warnings); its class is the two code sets' symmetric difference, e.g. ``ref-only:MD402 js-only:``.
Every disagreement is a bug in one of them or a gap in SPEC.md.

Used by tools/fuzz.py --differential N and tests/fuzz/test_fuzz.py::test_differential_ci.
"""

from __future__ import annotations

import collections
import json
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tests.fuzz import harness

ROOT = Path(__file__).resolve().parents[2]
JS_CLI = ROOT / "tools" / "mdiff-js" / "bin" / "mdiff-js.js"
NODE = shutil.which("node")
JS_LIMIT_NAMES = {  # the contract's names are accepted by both; kept explicit for older mdiff-js builds
    "max_rank": "max_rank", "max_elements": "max_elements", "max_dataset_bytes": "max_dataset_bytes",
    "max_total_bytes": "max_total_bytes", "max_objects": "max_objects", "max_attribute_bytes": "max_attribute_bytes",
    "max_function_bytes": "max_function_bytes", "max_function_nodes": "max_function_nodes",
    "max_function_constant_bytes": "max_function_constant_bytes",
}
BATCH = 40
SECTION_7_8 = frozenset({"MD420", "MD421", "MD422", "MD423", "MD424", "MD425", "MD426", "MD427", "MD428"})
# Findings after which the reference looks at nothing more (a file it cannot interpret, a global limit)
# while mdiff-js goes on: which findings such a file reports besides is issue 17 item 1, not settled here.
WHOLE_FILE = frozenset({"MD101", "MD102", "MD103", "MD511", "MD512"})


def js_available() -> bool:
    return NODE is not None and (JS_CLI.parent.parent / "node_modules" / "onnxruntime-node").is_dir()


@dataclass
class Verdict:
    valid: bool | None  # None: the implementation gave no report (crash, hang, unreadable output)
    codes: frozenset[str]
    note: str = ""
    unreadable: frozenset[str] = frozenset()  # the paths of its MD513 findings: objects this side could not read
    at: frozenset[tuple[str, str]] = frozenset()  # (code, path) of every finding


def _behind_unreadable(ref: Verdict, js: Verdict) -> bool:
    """Every §7.8 finding only one side makes is at (or under) an object the other side could not read
    (MD513 there): the two HDF5 readers differ on damaged metadata (§8), not on a rule of §7.8."""
    def explained(mine: Verdict, theirs: Verdict) -> bool:
        return all(any(path == u or path.startswith(u + "/") for u in theirs.unreadable)
                   for code, path in mine.at - theirs.at if code in SECTION_7_8)
    return explained(ref, js) and explained(js, ref)


@dataclass
class Tally:
    files: int = 0
    agree: int = 0
    by_class: collections.Counter = field(default_factory=collections.Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    verdicts: collections.Counter = field(default_factory=collections.Counter)
    verdict_disagreements: int = 0
    codes: collections.Counter = field(default_factory=collections.Counter)  # the reference's, file by file
    applied: int = 0  # valid files applied by both (run_functions)
    apply_outcomes: collections.Counter = field(default_factory=collections.Counter)
    section_7_8: collections.Counter = field(default_factory=collections.Counter)  # classes with an MD420-MD428 code
    # the same, with a WHOLE_FILE code, or at an object the other side could not read (MD513)
    section_7_8_gated: collections.Counter = field(default_factory=collections.Counter)

    def add(self, path: str, ref: Verdict, js: Verdict, task: dict) -> str | None:
        self.files += 1
        self.verdicts["valid" if ref.valid else "invalid" if ref.valid is False else "no report"] += 1
        self.codes.update(ref.codes)
        if ref.valid == js.valid and ref.codes == js.codes and ref.valid is not None:
            self.agree += 1
            return None
        cls = (f"ref-only:{','.join(sorted(ref.codes - js.codes))} js-only:{','.join(sorted(js.codes - ref.codes))}"
               + ("" if ref.valid == js.valid else f" verdict ref={ref.valid} js={js.valid}") + (f" {ref.note}{js.note}"))
        self.by_class[cls] += 1
        self.verdict_disagreements += ref.valid != js.valid
        if (ref.codes ^ js.codes) & SECTION_7_8:
            gated = bool((ref.codes | js.codes) & WHOLE_FILE) or _behind_unreadable(ref, js)
            (self.section_7_8_gated if gated else self.section_7_8)[cls] += 1
        self.examples.setdefault(cls, []).append(json.dumps({"file": path, **task}))
        return cls

    def summary(self) -> str:
        lines = [f"{self.files} files, {self.agree} agreements, {self.files - self.agree} disagreements "
                 f"({self.verdict_disagreements} on the verdict, {sum(self.section_7_8.values())} on an MD420-MD428 "
                 f"code, {sum(self.section_7_8_gated.values())} more next to {'/'.join(sorted(WHOLE_FILE))} or an object the other "
                 f"could not read (MD513); "
                 f"reference verdicts: {dict(self.verdicts)})"]
        lines.append("  codes (files): " + ", ".join(f"{c} {n}" for c, n in sorted(self.codes.items())))
        if self.applied:
            lines.append(f"  applied by both: {self.applied} valid files; the reference's outcomes: {dict(self.apply_outcomes)}")
        for cls, n in self.by_class.most_common():
            lines.append(f"  {n:6d}  {cls}")
        return "\n".join(lines)


def _limit_args(limits: dict | None, names: dict[str, str]) -> list[str]:
    out: list[str] = []
    for k, v in sorted((limits or {}).items()):
        out += ["--limit", f"{names[k]}={v}"]
    return out


def _parse_many(text: str) -> list[dict]:
    """One JSON value per file (mdiff-js: objects one after another; the reference: an array)."""
    dec, pos, out = json.JSONDecoder(), 0, []
    while text[pos:].strip():
        while text[pos].isspace():
            pos += 1
        obj, pos = dec.raw_decode(text, pos)
        out.extend(obj if isinstance(obj, list) else [obj])
    return out


def _verdicts(cmd: list[str], paths: list[str], timeout: float) -> dict[str, Verdict]:
    try:
        p = subprocess.run(cmd + paths, capture_output=True, text=True, timeout=timeout)
        reports = {r["file"]: r for r in _parse_many(p.stdout)}
        if len(paths) > 1 and any(path not in reports for path in paths):
            raise ValueError("reports missing")  # the process died mid-batch (the reference prints at the end)
    except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
        if len(paths) == 1:
            return {paths[0]: Verdict(None, frozenset(), " (no report)")}
        out: dict[str, Verdict] = {}
        for one in paths:  # find the file that hangs or breaks the output
            out.update(_verdicts(cmd, [one], timeout))
        return out
    out = {}
    for path in paths:
        r = reports.get(path)
        out[path] = Verdict(None, frozenset(), " (no report)") if r is None else \
            Verdict(bool(r["valid"]), frozenset(f["code"] for f in r["findings"]),
                    unreadable=frozenset(f["path"] for f in r["findings"] if f["code"] == "MD513"),
                    at=frozenset((f["code"], f["path"]) for f in r["findings"]))
    return out


def reference(paths: list[str], limits: dict | None, timeout: float = 60) -> dict[str, Verdict]:
    # --no-isolation: one process for the batch (a file that hangs or kills it is found one by one)
    return _verdicts([sys.executable, "-m", "mdiff", "validate", "--json", "--no-isolation",
                      *_limit_args(limits, {k: k for k in JS_LIMIT_NAMES})], paths, timeout * len(paths))


def mdiff_js(paths: list[str], limits: dict | None, timeout: float = 60) -> dict[str, Verdict]:
    return _verdicts([NODE or "node", str(JS_CLI), "validate", "--json", *_limit_args(limits, JS_LIMIT_NAMES)], paths,
                     timeout * len(paths))


def make_file(manifest: dict[str, dict], donors: list[Path], task: dict, out: Path) -> list[str]:
    from tests.fuzz.mutate import mutate

    seed = manifest[task["seed"]]
    try:
        return mutate(Path(seed["path"]), out, random.Random(task["rng"]), donors, onnx_bias=task.get("onnx", False))
    except Exception as exc:  # noqa: BLE001 — a harness problem: the seed itself is compared
        out.write_bytes(Path(seed["path"]).read_bytes())
        return [f"mutation failed: {type(exc).__name__}: {exc}"[:200]]


MAKER_MEMORY = 4 << 30  # address space of the mutator's process


def _limit_memory() -> None:
    """The mutator reads mutated files with libhdf5, and one made it allocate 13 GB (seed 9, near task 1881): past
    this limit the allocation fails, the mutation with it, and the seed is compared unmutated."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MAKER_MEMORY, MAKER_MEMORY))


class _Maker:
    """make_file in a child process: the mutator reads mutated files with libhdf5, which a file can crash; the
    child is replaced then, and the task's seed is compared unmutated (its ops say so)."""

    def __init__(self):
        self.pool = None

    def make(self, manifest: dict[str, dict], donors: list[Path], task: dict, out: Path) -> list[str]:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, initializer=_limit_memory)
        try:
            return self.pool.submit(make_file, manifest, donors, task, out).result(timeout=300)
        except (BrokenProcessPool, TimeoutError) as exc:
            self.close()
            out.write_bytes(Path(manifest[task["seed"]]["path"]).read_bytes())
            return [f"mutation died ({type(exc).__name__}): the seed unmutated"]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None


def _both(paths: list[str], limits: dict | None) -> tuple[dict[str, Verdict], dict[str, Verdict]]:
    """The reference's and mdiff-js's verdicts, the two command lines run side by side (one core each)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        js = pool.submit(mdiff_js, paths, limits)
        return reference(paths, limits), js.result()


def run(workdir: Path, count: int, seed: int, start: int = 0, keep: Path | None = None,
        progress: Callable[[Tally], None] | None = None, embedded_only: bool = False,
        deadline: float | None = None) -> Tally:
    """Make ``count`` files (tasks start … start + count of master seed ``seed``) and compare.
    ``embedded_only``: only the tasks whose seed defines an embedded update type (§7.8); ``deadline``
    (time.monotonic()): stop after the batch that passes it."""
    manifest_path = harness.prepare(workdir)
    seeds = json.loads(manifest_path.read_text())
    manifest = {s["name"]: s for s in seeds}
    donors = [Path(s["path"]) for s in seeds]
    files = workdir / "files"
    files.mkdir(exist_ok=True)
    tally = Tally()
    if embedded_only:
        seeds = [s for s in seeds if harness.onnx_seed(s["name"])]
    tasks = list(harness.make_tasks(seeds, seed, count, start))
    maker = _Maker()
    try:
        _compare_batches(tasks, manifest, donors, files, tally, keep, progress, deadline, maker)
    finally:
        maker.close()
    return tally


def _compare_batches(tasks, manifest, donors, files, tally, keep, progress, deadline, maker) -> None:
    import time

    for i in range(0, len(tasks), BATCH):
        if deadline is not None and time.monotonic() > deadline:
            break
        batch = tasks[i:i + BATCH]
        groups: dict[str, list[tuple[str, dict]]] = {}
        for task in batch:
            path = files / f"{task['id']}.mdiff"
            task = dict(task, ops=maker.make(manifest, donors, task, path))
            groups.setdefault(json.dumps(task["limits"], sort_keys=True), []).append((str(path), task))
        for key, members in groups.items():
            limits = json.loads(key)
            paths = [p for p, _ in members]
            ref, js = _both(paths, limits)
            for path, task in members:
                cls = tally.add(path, ref[path], js[path], task)
                if cls and keep is not None:
                    folder = keep / harness_slug(cls)
                    folder.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, folder / Path(path).name)
                    (folder / (Path(path).stem + ".json")).write_text(json.dumps(
                        {"task": task, "reference": sorted(ref[path].codes), "mdiff_js": sorted(js[path].codes)}, indent=1))
                Path(path).unlink()
        if progress:
            progress(tally)


def harness_slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.,:=-]+", "_", text).strip("_")[:120]


FUNCTION_SCALE_SHAPES = [(8, 1), (1, 6), (8, 6), (6,), (1,), (), (2, 8, 6), (0, 6)]


def _apply_outcome(cmd: list[str], out: Path, timeout: float = 120) -> tuple[str, bytes | None]:
    """(the error code or "ok", the output's tensors) of one apply command line."""
    out.unlink(missing_ok=True)
    try:
        p = subprocess.run(cmd + ["-o", str(out), "--json"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", None
    if p.returncode == 0 and out.exists():
        from safetensors.numpy import load_file

        tensors = load_file(str(out))
        return "ok", b"".join(name.encode() + tensors[name].tobytes() for name in sorted(tensors))
    try:
        return str(json.loads(p.stdout)["error"]["code"]), None
    except (ValueError, KeyError, TypeError):
        return f"exit {p.returncode} without a code", None


def compare_apply(base: Path, diff: str, workdir: Path) -> tuple[str | None, str]:
    """Both apply ``diff`` to ``base``: (a disagreement class when their outcomes — code, or result
    bytes — differ, else None; the reference's outcome)."""
    ref = _apply_outcome([sys.executable, "-m", "mdiff", "apply", "--no-isolation", str(base), diff], workdir / "ref.safetensors")
    js = _apply_outcome([NODE or "node", str(JS_CLI), "apply", str(base), diff], workdir / "js.safetensors")
    if ref == js:
        return None, ref[0]
    return f"apply ref={ref[0]} js={js[0]}" + (" (results differ)" if ref[0] == js[0] == "ok" else ""), ref[0]


def run_functions(workdir: Path, count: int, seed: int, start: int = 0, keep: Path | None = None,
                  progress: Callable[[Tally], None] | None = None) -> Tally:
    """§7.8 alone: ``count`` x-ia3 files whose float32 function is a random graph of allowed operators
    (tests/fuzz/mutate.py's random_function; one in four with a few bytes of the model flipped, for
    the protobuf decoders), with a random shape of `s`, validated by both implementations."""
    from tests import ia3
    from tests.fuzz.mutate import random_function

    import numpy as np

    from mdiff.checkpoints import save_checkpoint

    files = workdir / "functions"
    files.mkdir(parents=True, exist_ok=True)
    base = workdir / "ia3-base.safetensors"
    save_checkpoint(base, {"w32": np.ones((8, 6), np.float32)})  # write_with_function's parameter
    tally = Tally()
    for first in range(start, start + count, BATCH):
        members = []
        for i in range(first, min(first + BATCH, start + count)):
            rng = random.Random(f"{seed}:function:{i}")
            fn = bytearray(random_function(rng, "float32", ["s"]))
            ops = ["random graph"]
            if rng.random() < 0.25:
                for _ in range(rng.randint(1, 3)):
                    k = rng.randrange(len(fn))
                    fn[k] ^= 1 << rng.randrange(8)
                    ops.append(f"flip @{k}")
            shape = rng.choice(FUNCTION_SCALE_SHAPES)
            path = files / f"{i}.mdiff"
            ia3.write_with_function(path, bytes(fn), scale_shape=shape)
            members.append((str(path), {"id": i, "seed": f"function:{seed}", "ops": ops, "scale_shape": list(shape)}))
        paths = [p for p, _ in members]
        ref, js = reference(paths, None), mdiff_js(paths, None)
        for path, task in members:
            cls = tally.add(path, ref[path], js[path], task)
            if cls is None and ref[path].valid:
                tally.applied += 1
                cls, outcome = compare_apply(base, path, workdir)
                tally.apply_outcomes[outcome] += 1
                if cls:
                    tally.agree -= 1
                    tally.by_class[cls] += 1
                    tally.examples.setdefault(cls, []).append(json.dumps({"file": path, **task}))
            if cls and keep is not None:
                folder = keep / harness_slug(cls)
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, folder / Path(path).name)
            Path(path).unlink()
        if progress:
            progress(tally)
    return tally
