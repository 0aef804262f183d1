"""The conformance corpus (conformance/, tools/gen_conformance.py) and its runner (mdiff.conformance):

- the generator reproduces the committed bytes (``--check``);
- every rule code has a case, or a reason in the manifest why not;
- the reference passes every case (in process, through its command line ``main``; and a few cases
  through the real command line, as separate processes);
- mdiff-js passes every case it claims (needs node and tools/mdiff-js/node_modules);
- h5dump reads every valid fixture (needs Debian's hdf5-tools);
- the runner catches wrong answers (a validator that says "valid" to everything, a flipped bit).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mdiff.conformance import (
    CommandImplementation,
    InProcessImplementation,
    compare_states,
    load_manifest,
    reference_in_process,
    run_case,
    run_cases,
    summary_line,
    within_bounds,
)
from mdiff.format.rules import RULES

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "conformance"
JS_TOOL = ROOT / "tools" / "mdiff-js"
JS_CLI = JS_TOOL / "bin" / "mdiff-js.js"
NODE = shutil.which("node")
H5DUMP = shutil.which("h5dump")

MANIFEST = load_manifest(CORPUS)


def _report(results) -> str:
    lines = []
    for r in results:
        if r.status == "fail":
            lines.append(f"{r.id}: expected {r.expected}, got {r.got}")
            lines += [f"    - {p}" for p in r.problems]
    return "\n".join(lines)


# ---------------------------------------------------------------- the corpus


def test_generator_reproduces_the_committed_bytes():
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_conformance.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (f"conformance/ is stale; run `python tools/gen_conformance.py`:\n"
                               f"{p.stdout[-3000:]}{p.stderr[-3000:]}")


def test_manifest_families_files_and_sizes():
    families = {}
    for case in MANIFEST.cases:
        families[case.family] = families.get(case.family, 0) + 1
        for key, rel in case.files.items():
            assert (CORPUS / rel).is_file(), (case.id, key, rel)
        if case.expect["apply"] == "result":
            assert case.expect["validate"] == "valid", case.id
    assert set(families) == {"valid", "invalid", "hostile"}
    assert families["valid"] >= 30 and families["invalid"] >= 60 and families["hostile"] >= 40, families
    total = 0
    for path in CORPUS.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
            if path.parent == CORPUS or path.parent.name == "schema-tests":
                continue  # the manifest (an index) and the hand-written parts
            assert path.stat().st_size < 64 * 1024, path
    assert total < 5 * 1024 * 1024, total
    # every feature a case needs is explained; blocked work is recorded
    assert all(MANIFEST.features[f] for c in MANIFEST.cases for f in c.features)
    assert MANIFEST.blocked and all(b.get("reason") for b in MANIFEST.blocked)


def test_every_rule_code_has_a_case_or_a_reason():
    """A code is covered by an invalid or hostile case expecting it, or — for a warning, which
    leaves the file valid — by a valid case whose expected findings include it."""
    covered = {c.code for c in MANIFEST.cases if c.family in ("invalid", "hostile")}
    covered |= {w for c in MANIFEST.cases if c.family == "valid" for w in c.expect.get("warnings", [])}
    for code, reason in MANIFEST.not_applicable.items():
        assert code in RULES, f"not_applicable names an unknown code {code}"
        assert code not in covered, f"{code} has a case and is also listed as not applicable"
        assert len(reason) > 20, (code, reason)
    missing = sorted(set(RULES) - covered - set(MANIFEST.not_applicable))
    assert not missing, f"rule codes with no conformance case and no reason in the manifest: {missing}"
    for code in covered:
        assert code in RULES, code
    warnings = {c for c, r in RULES.items() if r.severity == "warning"}
    assert warnings <= covered


def test_the_valid_family_covers_the_matrix():
    """Every update type × every dtype (low_rank: the float dtypes), and the named edge cases."""
    import mdiff
    from mdiff.format.dtypes import DTYPES

    seen = set()
    for case in MANIFEST.cases:
        if case.family != "valid" or case.features:
            continue
        with mdiff.open(case.path("diff")) as diff:
            for update in diff.values():
                seen.add((update.type, update.dtype.name))
    floats = {"float16", "bfloat16", "float32", "float64"}
    want = {(t, d) for t in ("dense", "sparse", "replace", "delete") for d in DTYPES} | {("low_rank", d) for d in floats}
    assert want <= seen, sorted(want - seen)
    ids = {c.id for c in MANIFEST.cases}
    for needed in ("names-needing-escapes", "zero-d-tensors", "zero-size-tensors", "added-deleted-retyped",
                   "root-commit", "empty-diff", "merge-commit", "embedded-x-ia3", "special-float-bit-patterns"):
        assert needed in ids, needed


# ---------------------------------------------------------------- the reference


def test_reference_passes_every_case_in_process():
    results = run_cases(reference_in_process(), MANIFEST, claimed=None)
    assert len(results) == len(MANIFEST.cases)
    assert all(r.passed for r in results), _report(results)


# A valid file with a low_rank tolerance, a file that is not HDF5 (exit 2), a valid file whose base
# does not fit (apply's code). Each costs two Python start-ups (over a second each, mostly `import
# ml_dtypes`); every case goes through the same `main` in process above.
CLI_CASES = ["low_rank-every-float-dtype", "MD100-not_hdf5", "MD600-base_lacks_dense_parameter"]


def test_reference_through_the_real_command_line():
    """The runner's own command line on the real `python -m mdiff.cli.main`, one process per command
    (a few cases: each costs two Python start-ups)."""
    args = [sys.executable, "-m", "mdiff.conformance"]
    for case_id in CLI_CASES:
        args += ["--filter", case_id]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert "features claimed: all" in lines  # mdiff has no `features` command: it claims every feature
    assert lines[-1] == f"{len(CLI_CASES)} passed, 0 failed", lines[-10:]
    for case_id in CLI_CASES:
        assert any(line.startswith(case_id + " ") and line.endswith("PASS") for line in lines), case_id


def test_batched_validation_gives_the_same_verdicts():
    """`--batch`: several files per validate command (the reference prints a JSON array)."""
    select = lambda c: c.limits or c.id in CLI_CASES or c.id.startswith(("MD303", "MD100"))  # noqa: E731
    results = run_cases(reference_in_process(), MANIFEST, select=select, claimed=None, batch=6)
    assert len(results) > 15
    assert all(r.passed for r in results), _report(results)


# ---------------------------------------------------------------- mdiff-js


JS_MISSING = (
    "node is not installed; the mdiff-js conformance run needs Node.js 20+" if NODE is None
    else "tools/mdiff-js/node_modules is missing; run `npm ci --prefix tools/mdiff-js`"
    if not (JS_TOOL / "node_modules" / "h5wasm").is_dir() else None
)


@pytest.mark.skipif(JS_MISSING is not None, reason=JS_MISSING or "")
@pytest.mark.parametrize("batch", [pytest.param(0, id="one-file-per-command"), pytest.param(40, id="batched")])
def test_mdiff_js_passes_every_case_it_claims(batch):
    """Every case, validate batched (40 files per command: node and h5wasm start in ~0.3 s of CPU,
    and the whole corpus one file per command would take minutes); and a few cases one file per
    command, for the per-file exit statuses."""
    impl = CommandImplementation([NODE, str(JS_CLI)])
    claimed = impl.features()
    assert claimed is not None and "embedded-update-types" not in claimed
    select = None if batch else (lambda c: c.id in CLI_CASES or c.id in ("embedded-x-ia3", "MD303-root_member",
                                                                         "MD510-attribute_over_limit"))
    results = run_cases(impl, MANIFEST, select=select, jobs=2, claimed=claimed, batch=batch)
    assert all(r.status != "fail" for r in results), _report(results)
    skipped = {r.id for r in results if r.status == "skip"}
    embedded = {c.id for c in MANIFEST.cases if "embedded-update-types" in c.features}
    assert skipped == (embedded if batch else {"embedded-x-ia3"})
    assert re.fullmatch(r"\d+ passed, 0 failed, \d+ skipped", summary_line(results))


# ---------------------------------------------------------------- h5dump


@pytest.mark.skipif(H5DUMP is None, reason="h5dump is not installed (Debian: apt-get install hdf5-tools)")
def test_h5dump_reads_every_valid_fixture():
    failures = []
    for case in MANIFEST.cases:
        if case.family != "valid":
            continue
        p = subprocess.run([H5DUMP, str(case.path("diff"))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=60)
        if p.returncode != 0:
            failures.append(f"{case.id}: {p.stderr.decode(errors='replace')[:300]}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- the runner catches wrong answers


def test_runner_fails_a_validator_that_accepts_everything(tmp_path):
    import json

    def lenient(argv: list[str]) -> int:
        if argv[0] == "validate":
            print(json.dumps({"findings": []}))
            return 0
        from mdiff.cli.main import main

        return main(argv)

    impl = InProcessImplementation(lenient, "lenient")
    bad = run_case(impl, MANIFEST.case("MD408-sparse_unsorted"), claimed=None)
    assert bad.status == "fail" and any("lack MD408" in p for p in bad.problems)
    good = run_case(impl, MANIFEST.case("dense-every-dtype"), claimed=None)
    assert good.status == "pass", good.problems
    warn = run_case(impl, MANIFEST.case("MD303-root_member"), claimed=None)
    assert warn.status == "fail" and any("warnings" in p for p in warn.problems)


def test_runner_skips_unclaimed_cases():
    case = MANIFEST.case("embedded-x-ia3")
    r = run_case(reference_in_process(), case, claimed=frozenset({"configurable-limits"}))
    assert r.status == "skip" and "embedded-update-types" in r.reason
    assert summary_line([r]) == "0 passed, 0 failed, 1 skipped"


def test_compare_is_bit_exact_and_bounds_low_rank():
    a = np.array([0.0, 1.0, np.nan], np.float32)
    assert compare_states({"x": a}, {"x": a.copy()}) == []
    b = a.copy()
    b[0] = -0.0
    assert compare_states({"x": b}, {"x": a}) != []  # -0 is not +0
    nan2 = a.copy()
    nan2.view(np.uint32)[2] ^= 1  # another NaN payload
    assert compare_states({"x": nan2}, {"x": a}) != []
    assert compare_states({"x": a.astype(np.float64)}, {"x": a}) != []  # dtype
    assert compare_states({"x": a, "y": a}, {"x": a}) != []  # an extra parameter
    bounds = np.array([[-1.0, 1.0], [0.5, 1.5], [np.nan, np.nan]])
    assert compare_states({"x": a}, {"x": a}, {"x": bounds}) == []
    assert compare_states({"x": np.array([2.0, 1.0, np.nan], np.float32)}, {"x": a}, {"x": bounds}) != []
    assert compare_states({"x": np.array([0.0, 1.0, 5.0], np.float32)}, {"x": a}, {"x": bounds}) != []  # not NaN
    bf = np.array([1.0, np.inf], ml_dtypes.bfloat16)
    assert within_bounds(bf, np.array([[1.0, 1.0], [1.0, np.inf]])).all()
