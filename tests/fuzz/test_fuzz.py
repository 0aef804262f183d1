"""Fuzzing mdiff's reader, validator and applier with mutated files (tests/fuzz/harness.py).

- ``test_fuzz_ci``: a CI-sized run — MDIFF_FUZZ_FILES files (default 2000) from a fixed seed
  (MDIFF_FUZZ_SEED), on MDIFF_FUZZ_JOBS worker processes (default: 2, or 1 on one core), each
  with a 2 GiB address-space limit and 10 s of CPU time per file. Every file must end OK or with a typed
  MdiffError: no other exception, crash, hang, runaway memory or malformed result. Failures
  that match a known bug (tests/fuzz/known.py, each with an xfail regression test below) are
  skipped, and only those; every other one fails the test, with the inputs kept for triage.
- ``test_regression``: one test per file in tests/fuzz/regressions/ (every input that ever
  failed, and a minimised reproducer per bug), each in a fresh worker process: the outcome of
  every target must be OK or typed. Known bugs are ``xfail(strict=True)``: fixing one makes its
  test XPASS, which fails until the entry in tests/fuzz/known.py is removed.

The long run is tools/fuzz.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.fuzz import harness
from tests.fuzz.known import FIXED, FLAKY, KNOWN, known_bug, regression_reasons

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
FILES = int(os.environ.get("MDIFF_FUZZ_FILES", "2000"))
SEED = int(os.environ.get("MDIFF_FUZZ_SEED", "20260101"))
JOBS = int(os.environ.get("MDIFF_FUZZ_JOBS", str(max(1, min(2, os.cpu_count() or 1)))))
# For the hang reproducers: seconds of the worker's CPU time per file (harness.Pool counts CPU, not wall
# time, so a loaded machine cannot make a file late). Each reproducer ran away for 6-25 s of CPU before
# its fix (the ONNX one without end); now the slowest, hang-commit-parents-520000-integers, takes
# 0.19-0.22 s of CPU (the others 0.10-0.15 s): 3 s is 14x that and half the fastest bug.
HANG_TIMEOUT = 3.0


def _describe(outcome: harness.Outcome, r: dict, kept: Path | None) -> str:
    lines = [f"{harness.Outcome.signature(r)}: {r.get('message', '')[:300]}",
             f"    task {outcome.task} ops {outcome.ops}"]
    if r.get("frames"):
        lines.append("    " + "\n    ".join(r["frames"][-6:]))
    if kept:
        lines.append(f"    input kept at {kept}")
    return "\n".join(lines)


def test_fuzz_ci(tmp_path):
    started = time.monotonic()
    manifest = harness.prepare(tmp_path)
    failures: list[str] = []
    skipped: Counter = Counter()
    harness_problems: list[str] = []
    classes: Counter = Counter()
    kept_dir = tmp_path / "failures"

    def on_outcome(outcome: harness.Outcome, current: Path) -> None:
        classes[outcome.cls] += 1
        for r in outcome.failures():
            sig = harness.Outcome.signature(r)
            if r.get("harness"):  # the mutation step itself died: not a finding about mdiff
                harness_problems.append(f"{sig} task {outcome.task}")
                continue
            bug = known_bug(sig, r.get("message", ""))
            if bug:
                skipped[bug.id] += 1
                continue
            kept = None
            if current.exists():
                kept_dir.mkdir(exist_ok=True)
                kept = kept_dir / f"task{outcome.task['id']}.mdiff"
                shutil.copyfile(current, kept)
                kept.with_suffix(".json").write_text(json.dumps(
                    {"task": outcome.task, "ops": outcome.ops, "results": outcome.results, "log": outcome.log[-4000:],
                     "history": outcome.history}, indent=1, default=str))
            failures.append(_describe(outcome, r, kept))

    pool = harness.Pool(tmp_path / "workers", manifest, jobs=JOBS)
    pool.run(harness.make_tasks(json.loads(manifest.read_text()), SEED, FILES), on_outcome, static=True)
    elapsed = time.monotonic() - started
    print(f"\nfuzz: {sum(classes.values())} files in {elapsed:.1f} s on {JOBS} workers (seed {SEED}): {dict(classes)}; "
          f"known bugs skipped: {dict(skipped)}; respawns {pool.respawns}; harness problems {len(harness_problems)}")
    assert sum(classes.values()) == FILES
    assert not failures, f"{len(failures)} failing targets (seed {SEED}; reproduce a task with tools/fuzz.py " \
                         f"--seed {SEED} --start ID --count 1):\n" + "\n".join(failures[:20])


def _run_folder_tasks(tmp_path: Path, make_tasks, count: int) -> tuple[Counter, Counter, list[str]]:
    """Run ``count`` tasks that ``make_tasks(seeds, SEED, count)`` builds on tests/fuzz/folders.py's seed
    repositories: each outcome's class, each result's code (or class), and each failing target, described."""
    from tests.fuzz import folders

    seeds = folders.prepare(tmp_path)
    failures: list[str] = []
    classes: Counter = Counter()
    codes: Counter = Counter()

    def on_outcome(outcome: harness.Outcome, _current: Path) -> None:
        classes[outcome.cls] += 1
        codes.update(r.get("code") or r["class"] for r in outcome.results)
        for r in outcome.failures():
            failures.append(f"{harness.Outcome.signature(r)}: {r.get('message', '')[:200]}\n    task {outcome.task} ops {outcome.ops}")

    pool = harness.Pool(tmp_path / "workers", None, jobs=JOBS, timeout=20.0)
    pool.run(make_tasks(seeds, SEED, count), on_outcome, static=True)
    return classes, codes, failures


FOLDER_TASKS = int(os.environ.get("MDIFF_FUZZ_FOLDER_TASKS", "120"))


def test_fuzz_folders_ci(tmp_path):
    """Hostile repository folders and checkpoints (tests/fuzz/folders.py): every target ends OK or typed,
    and no checkout returns other weights than its commit id means."""
    from tests.fuzz import folders

    classes, _, failures = _run_folder_tasks(tmp_path, folders.make_tasks, FOLDER_TASKS)
    print(f"\nfolder fuzz: {sum(classes.values())} tasks (seed {SEED}): {dict(classes)}")
    assert sum(classes.values()) == FOLDER_TASKS
    assert not failures, f"{len(failures)} failing targets (reproduce: tests.fuzz.folders.make_tasks(prepare(DIR), {SEED}, 1, start=ID)):\n" \
                         + "\n".join(failures[:20])


REMOTE_TASKS = int(os.environ.get("MDIFF_FUZZ_REMOTE_TASKS", "40"))


def test_fuzz_remote_listing_ci(tmp_path):
    """A folder remote whose listing of refs its owner changed (tests/fuzz/folders.py, the ``remote`` family:
    refs that vanish while listed and read, names that are not refs, oversized refs, duplicates, links, FIFOs,
    a listing past the cap, lowered to folders.REMOTE_CAP here): listing its refs, a clone and a fetch of one
    revision end OK or typed, never with other weights than a commit id means."""
    from tests.fuzz import folders

    classes, codes, failures = _run_folder_tasks(tmp_path, folders.make_remote_tasks, REMOTE_TASKS)
    print(f"\nremote fuzz: {sum(classes.values())} tasks (seed {SEED}): {dict(classes)}; outcomes {dict(codes)}")
    assert sum(classes.values()) == REMOTE_TASKS
    assert not failures, f"{len(failures)} failing targets (reproduce: tests.fuzz.folders.make_remote_tasks(prepare(DIR), {SEED}, 1, " \
                         "start=ID)):\n" + "\n".join(failures[:20])


def _regressions() -> list:
    reasons = regression_reasons()
    params = []
    for path in sorted(REGRESSIONS.glob("*.mdiff")):
        marks = [pytest.mark.xfail(strict=True, reason=reasons[path.name])] if path.name in reasons else []
        if path.name in FLAKY:
            marks = [pytest.mark.xfail(strict=False, reason=FLAKY[path.name])]
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


def _is_hang(name: str) -> bool:
    return any(name in bug.regressions and bug.signature.startswith("^HANG") for bug in KNOWN + FIXED)


@pytest.fixture(scope="module")
def regression_outcomes():
    """Every regression file, each in a fresh worker (two at a time)."""
    paths = sorted(REGRESSIONS.glob("*.mdiff"))
    quick = [p for p in paths if not _is_hang(p.name)]
    slow = [p for p in paths if _is_hang(p.name)]
    big = [p for p in quick if p.stem.endswith("-8gib")]  # crashes only where a 2 GiB allocation succeeds
    quick = [p for p in quick if p not in big]
    outcomes = harness.replay_many(quick, jobs=JOBS)
    outcomes.update(harness.replay_many(slow, jobs=JOBS, timeout=HANG_TIMEOUT))
    outcomes.update(harness.replay_many(big, jobs=JOBS, memory=8 << 30))
    return outcomes


@pytest.mark.parametrize("path", _regressions())
def test_regression(path, regression_outcomes):
    outcome = regression_outcomes[str(path.resolve())]
    bad = outcome.failures()
    assert not bad, "\n".join(_describe(outcome, r, None) for r in bad) + (f"\n{outcome.log[-2000:]}" if outcome.log else "")
    assert all(r["class"] in ("OK", "TYPED") for r in outcome.results)


def test_every_bug_has_its_regression_files():
    names = {p.name for p in REGRESSIONS.glob("*.mdiff")}
    for bug in KNOWN + FIXED:
        assert bug.regressions and set(bug.regressions) <= names, bug.id


# ---------------------------------------------------------------- differential (issue 17): the reference against mdiff-js

DIFFERENTIAL_FUNCTIONS = int(os.environ.get("MDIFF_FUZZ_DIFFERENTIAL_FUNCTIONS", "80"))
DIFFERENTIAL_FILES = int(os.environ.get("MDIFF_FUZZ_DIFFERENTIAL_FILES", "40"))


def _js_or_skip():
    from tests.fuzz import differential

    if not differential.js_available():
        pytest.skip("mdiff-js needs node and `npm ci --prefix tools/mdiff-js`")
    return differential


DIFFERENTIAL_FINDINGS = Path(__file__).resolve().parent / "differential-findings"


def _differential_findings() -> list:
    expected = json.loads((DIFFERENTIAL_FINDINGS / "expected.json").read_text())
    assert sorted(expected) == sorted(p.name for p in DIFFERENTIAL_FINDINGS.glob("*.mdiff"))
    return [pytest.param(name, case, id=name, marks=[pytest.mark.xfail(reason=case["open"], strict=True)] if "open" in case else [])
            for name, case in sorted(expected.items())]


@pytest.mark.parametrize("name,case", _differential_findings())
def test_differential_finding(name, case):
    """Every file on which the two implementations once disagreed (tests/fuzz/differential-findings/, kept
    where the corpus cannot express the damage): both now report exactly the code set SPEC.md gives it."""
    differential = _js_or_skip()
    path = str(DIFFERENTIAL_FINDINGS / name)
    ref = differential.reference([path], case["limits"])[path]
    js = differential.mdiff_js([path], case["limits"])[path]
    assert (sorted(ref.codes), sorted(js.codes)) == (case["codes"], case["codes"])


def test_differential_functions_ci(tmp_path):
    """Random embedded functions (SPEC.md §7.8): the two implementations agree on every file,
    verdict and code set (both compute check 8 by §7.9's written shape rules), and on the outcome of
    applying every valid one (the error code, or the result's bytes)."""
    differential = _js_or_skip()
    tally = differential.run_functions(tmp_path, DIFFERENTIAL_FUNCTIONS, SEED, keep=tmp_path / "kept")
    assert tally.files == DIFFERENTIAL_FUNCTIONS
    assert tally.agree == tally.files, tally.summary()
    assert tally.verdicts["valid"] and tally.verdicts["invalid"]  # both kinds reached


@pytest.mark.parametrize("embedded_only", [True, False], ids=["embedded-types", "every-kind"])
def test_differential_files_ci(tmp_path, embedded_only):
    """Mutated files (of the seeds that define embedded update types, then of every seed): both
    implementations report on every one, with the same verdict and the same code set (SPEC.md §12.1)."""
    differential = _js_or_skip()
    tally = differential.run(tmp_path, DIFFERENTIAL_FILES, SEED, keep=tmp_path / "kept", embedded_only=embedded_only)
    assert tally.files == DIFFERENTIAL_FILES
    assert tally.agree == tally.files, tally.summary()


@pytest.mark.parametrize("kind, every, files", [
    ("dense-storage", 64, 42),  # 2,627 files in all
    ("symbol-tables", 16, 40),  # 626 in all: 36 disagreed before §8.1 walked a symbol table's name offsets
    ("chunk-index", 16, 26),  # 405 in all
    ("dense-internal", 8, 31),  # 247 in all
    ("dataset-headers", 16, 43),  # 678 in all
])
def test_sweep_ci(tmp_path, kind, every, files):
    """One file in ``every`` of a sweep (tests/fuzz/sweep.py; the whole one is `python tools/fuzz.py --sweep
    KIND`): the two implementations give the same codes for each."""
    _js_or_skip()
    from tests import invalid_files
    from tests.fuzz import sweep

    lines: list[str] = []
    try:
        found = sweep.run(tmp_path, progress=lines.append, every=every, kind=kind)
    except invalid_files.CannotBuildHere as exc:
        pytest.skip(str(exc))
    assert lines[0] == f"{files} files" and found == [], "\n".join(found)
