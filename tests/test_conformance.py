"""The conformance corpus (conformance/, tools/gen_conformance.py) and its runner (mdiff.conformance):

- the generator reproduces the committed bytes (``--check``);
- every rule code has a case, or a reason in the manifest why not;
- the repository cases (SPEC.md §13) hold what they claim: a merge commit, branches, every form of
  revision, MD800-MD802;
- the merge cases (§13.7) cover the merge rule, and the runner fails a merge that compares values by
  number, merges element by element, rounds twice or lists other conflicts;
- the reference passes every case (in process, through its command line ``main``; and a few cases
  through the real command line, as separate processes);
- mdiff-js passes every case it claims (needs node and tools/mdiff-js/node_modules);
- h5dump reads every valid fixture (needs Debian's hdf5-tools);
- the runner catches wrong answers (a validator that says "valid" to everything, a flipped bit).
"""

from __future__ import annotations

import os
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
from mdiff.rules import RULES

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
        if case.is_repository:
            assert (case.path("repository") / ".mdiff").is_dir(), case.id
            for r in case.expect["revisions"]:
                for rel in [r.get("result"), (r.get("tolerance") or {}).get("bounds")]:
                    assert rel is None or (CORPUS / rel).is_file(), (case.id, r)
            continue
        for key, rel in case.files.items():
            assert (CORPUS / rel).is_file(), (case.id, key, rel)
        if case.is_merge:
            assert case.features == ("merge",) and case.id.startswith("merge-"), case.id
            assert ("result" in case.files) == (case.expect["merge"] == "result"), case.id
            continue
        if case.expect["apply"] == "result":
            assert case.expect["validate"] == "valid", case.id
    assert set(families) == {"valid", "invalid", "hostile", "merge"}
    assert families["valid"] >= 30 and families["invalid"] >= 60 and families["hostile"] >= 40, families
    assert families["merge"] >= 20, families
    total = 0
    for path in CORPUS.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
            if path.parent == CORPUS or path.parent.name == "schema-tests":
                continue  # the manifest (an index) and the hand-written parts
            assert path.stat().st_size < 64 * 1024, path
    assert total < 5 * 1024 * 1024, total
    # every feature a case needs is explained; nothing waits for a feature any more
    assert all(MANIFEST.features[f] for c in MANIFEST.cases for f in c.features)
    assert not MANIFEST.blocked and "blocked" not in MANIFEST.raw


def test_every_rule_code_has_a_case_or_a_reason():
    """A code is covered by an invalid or hostile case expecting it, or — for a warning, which
    leaves the file valid — by a valid case whose expected findings include it."""
    covered = {c.code for c in MANIFEST.cases if c.family in ("invalid", "hostile", "merge") and c.code}
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
    repository_codes = {c for c, r in RULES.items() if r.section.startswith("13.")}
    assert {"MD800", "MD801", "MD802", "MD804", "MD805"} <= covered  # MD804: merge-file's conflicts
    assert repository_codes - covered == {"MD803", "MD806", "MD807", "MD809"} <= set(MANIFEST.not_applicable)


def _commit_parents(path: Path) -> list[str]:
    import mdiff

    with mdiff.open(path) as diff:
        return list(diff.commit.parents)


def test_the_snapshot_cases_hold_what_they_say():
    """§13.5: every snapshot of repository-snapshots-disagree is one the reference's fsck reports as
    MD807 (and a checkout walks past); the snapshot of repository-snapshot-inexact-value agrees with
    its commits but holds zeros for the inexact w, which the expected state does not."""
    import mdiff
    from mdiff.checkpoints import load_checkpoint
    from mdiff.repo import Repository

    case = MANIFEST.case("repository-snapshots-disagree")
    repo = Repository(case.path("repository"))
    ids = {c["label"]: c["id"] for c in next(r for r in MANIFEST.raw["cases"] if r["id"] == case.id)["commits"]}
    assert sorted(p.stem for p in (repo.dir / "snapshots").glob("*.mdiff")) == sorted(ids.values())
    findings = repo.fsck()
    assert sorted((f.code, Path(f.path).stem) for f in findings) == sorted(("MD807", cid) for cid in ids.values())
    case = MANIFEST.case("repository-snapshot-inexact-value")
    repo = Repository(case.path("repository"))
    lora = next(r for r in MANIFEST.raw["cases"] if r["id"] == case.id)["commits"][1]["id"]
    assert repo.fsck() == []
    with repo.open_state(lora) as view:
        assert view.snapshot == lora and view.inexact == {"w"}
    with mdiff.open(repo.snapshot_path(lora)) as snapshot:
        assert not snapshot["w"].array("value").any()
    revision = next(r for r in case.expect["revisions"] if r["revision"] == "main")
    assert revision["tolerance"]["parameters"] == ["w"]
    assert load_checkpoint(case.path("repository").parent / "states" / "lora.safetensors")["w"].any()


def test_the_repository_cases_cover_section_13():
    """The valid repository: a root, a merge commit with two parents, branches with and without a
    `/`, a snapshot, ignored temporary files; every commit checked out, by every form of revision;
    each commit file hashes to its name and names the parents the manifest says."""
    import hashlib

    case = MANIFEST.case("repository-branch-merge")
    assert case.features == ("repository",) and case.family == "valid"
    dot = case.path("repository") / ".mdiff"
    ids = {c["label"]: c["id"] for c in next(r for r in MANIFEST.raw["cases"] if r["id"] == case.id)["commits"]}
    assert len(ids) == 8
    for cid in ids.values():
        assert hashlib.sha256((dot / "commits" / f"{cid}.mdiff").read_bytes()).hexdigest() == cid
    assert _commit_parents(dot / "commits" / f"{ids['root']}.mdiff") == []
    assert _commit_parents(dot / "commits" / f"{ids['merge']}.mdiff") == [ids["main-2"], ids["feature-2"]]
    assert (dot / "refs" / "heads" / "exp" / "lora").read_text() == ids["lora-1"] + "\n"
    assert (dot / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (dot / "snapshots" / f"{ids['main-1']}.mdiff").is_file()
    assert any(p.name.startswith(".") for p in (dot / "commits").iterdir())  # a stray temporary file
    revisions = {r["revision"]: r for r in case.expect["revisions"]}
    assert {r["commit"] for r in revisions.values()} == set(ids.values())  # every commit checked out
    for cid in ids.values():
        assert cid in revisions  # by its full id
    forms = {"HEAD", "main", "main~0", "main^", "main~", "main~2", "main~2^", "main~4", "feature", "feature^",
             "exp/lora", "exp/lora^"}
    assert forms <= set(revisions)
    assert revisions["main~2^"]["commit"] == ids["main-1"] and revisions["main^"]["commit"] == ids["merge"]
    prefixes = [r for r in revisions if re.fullmatch(r"[0-9a-f]{4,63}(~\d*)?", r)]
    assert prefixes and min(len(r.split("~")[0]) for r in prefixes) == 4
    assert [r["revision"] for r in revisions.values() if r["tolerance"]] == ["exp/lora", ids["lora-1"]]
    import mdiff

    updates = set()
    for cid in ids.values():
        with mdiff.open(dot / "commits" / f"{cid}.mdiff") as diff:
            updates |= {u.type for u in diff.values()}
    assert updates == {"dense", "sparse", "replace", "delete", "low_rank"}
    refused = {c.id: c for c in MANIFEST.cases if c.is_repository and c.family == "invalid"}
    assert {c.code for c in refused.values()} == {"MD800", "MD801", "MD802", "MD805", "MD808"}
    assert len(refused) >= 12


def test_the_format_2_cases_hold_ids_by_block_list_and_the_others_format_1():
    """§4.3, §13.1: the repository cases written before revision 12 stay of format 1 (ids the SHA-256 of each
    file); repository-format-2's ids are block list hashes, each `.blocks` beside its commit."""
    import hashlib

    from tests.helpers import commit_id

    for case in (c for c in MANIFEST.cases if c.is_repository):
        dot = case.path("repository") / ".mdiff"
        version = 2 if "format2" in case.id or "format-2" in case.id else 1
        assert (dot / "format").read_text() == f"mdiff-repository {version}\n" or case.id == "MD801-format_unknown"
    dot = MANIFEST.case("repository-format-2").path("repository") / ".mdiff"
    ids = sorted(p.name[:-len(".mdiff")] for p in (dot / "commits").glob("*.mdiff"))
    assert len(ids) == 3 and sorted(p.name for p in (dot / "commits").iterdir()) == sorted(
        f"{c}.{kind}" for c in ids for kind in ("blocks", "mdiff"))
    for cid in ids:
        data = (dot / "commits" / f"{cid}.mdiff").read_bytes()
        assert commit_id(data) == cid != hashlib.sha256(data).hexdigest()
        assert hashlib.sha256((dot / "commits" / f"{cid}.blocks").read_bytes()[:8 + 32]).hexdigest() == cid


def test_the_reflog_cases_read_revisions_from_whole_reflogs_of_fixed_times():
    """§13.3's REF@{N}, @{N}, HEAD@{N} and @: the valid case reads each from reflogs the case holds
    (pinned times, every line whole and of §13.6's form), the entry numbered from the newest; the
    invalid case refuses an entry past the oldest, a deletion, a malformed and a missing reflog."""
    from mdiff.repo.reflog import entries

    case = MANIFEST.case("repository-reflogs")
    dot = case.path("repository") / ".mdiff"
    ids = {c["label"]: c["id"] for c in next(r for r in MANIFEST.raw["cases"] if r["id"] == case.id)["commits"]}
    revisions = {r["revision"]: r["commit"] for r in case.expect["revisions"]}
    assert {"main@{1}", "main@{0}", "HEAD@{1}", "@{1}", "@", "main@{1}~1", "side@{1}"} <= set(revisions)

    def newest_first(ref: str) -> list[str | None]:
        fd = os.open(dot / "logs" / ref, os.O_RDONLY)
        try:
            found = list(entries(fd))
        finally:
            os.close(fd)
        assert [e.time for e in found] == list(range(1767312000, 1767312000 + len(found)))
        return [e.new for e in reversed(found)]

    main, head, side = newest_first("refs/heads/main"), newest_first("HEAD"), newest_first("refs/heads/side")
    assert main == [ids["root"], ids["k2"], ids["k1"], ids["root"]]
    for n, want in enumerate(main):
        assert revisions.get(f"main@{{{n}}}", want) == want
    assert revisions["@{1}"] == main[1] and revisions["HEAD@{1}"] == head[1] != main[1]
    assert revisions["main@{1}~1"] == ids["k1"] and revisions["@"] == ids["root"]
    assert side == [None, ids["k1"]] and revisions["side@{1}"] == ids["k1"]
    assert not (dot / "refs" / "heads" / "side").exists()  # deleted: its reflog answers
    refused = MANIFEST.case("MD801-reflog_entry_names_nothing")
    assert {"main@{4}", "main@{9}", "side@{0}", "broken@{0}", "unlogged@{0}"} <= {
        r["revision"] for r in refused.expect["revisions"]}


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


def test_the_merge_cases_cover_section_13_7():
    """Issue 27: every kind of §13.7 merge has a case — one-sided changes, each conflict, each strategy, rounding
    once, unresolvable conflicts, --all, no common ancestor — and the expected outcomes say what the cases say."""
    from mdiff.checkpoints import load_checkpoint

    merges = {c.id: c for c in MANIFEST.cases if c.is_merge}
    for needed in ("one-sided-changes", "changed-alike", "added-one-side", "deleted-one-side", "conflict-changed-both",
                   "conflict-added-both-differently", "conflict-deleted-vs-changed", "conflict-reshaped",
                   "conflict-retyped", "strategy-ours", "strategy-theirs", "strategy-average", "strategy-weighted-0.25",
                   "strategy-task-arithmetic", "strategy-task-arithmetic-0.5", "round-once-float16",
                   "round-once-bfloat16", "average-unresolvable", "task-arithmetic-absent-in-base", "all-average",
                   "all-theirs", "no-common-ancestor", "unreadable-input"):
        assert f"merge-{needed}" in merges, needed
    strategies = {c.merge.get("strategy") for c in merges.values()}
    assert {None, "ours", "theirs", "average", "weighted:0.25", "task-arithmetic", "task-arithmetic:0.5"} <= strategies
    assert merges["merge-average-unresolvable"].expect["conflicts"] == ["absent", "bits", "i", "typed"]
    assert merges["merge-task-arithmetic-absent-in-base"].expect["conflicts"] == ["new", "rebased"]
    assert load_checkpoint(merges["merge-no-common-ancestor"].path("base")) == {}
    # a one-sided change of -0.0 and NaN payloads: value comparison would take ours
    case = merges["merge-one-sided-changes"]
    ours, theirs, result = (load_checkpoint(case.path(k)) for k in ("ours", "theirs", "result"))
    assert (ours["theirs_signed_zero"] == theirs["theirs_signed_zero"]).all()  # equal numbers, other bits
    assert result["theirs_signed_zero"].tobytes() == theirs["theirs_signed_zero"].tobytes()
    # --all theirs is theirs whole
    case = merges["merge-all-theirs"]
    theirs, result = load_checkpoint(case.path("theirs")), load_checkpoint(case.path("result"))
    assert set(theirs) == set(result) and all(theirs[k].tobytes() == result[k].tobytes() for k in theirs)


# ---------------------------------------------------------------- the reference


def test_reference_passes_every_case_in_process():
    results = run_cases(reference_in_process(), MANIFEST, claimed=None)
    assert len(results) == len(MANIFEST.cases)
    assert all(r.passed for r in results), _report(results)


# A valid file with a low_rank tolerance, a file that is not HDF5 (exit 2), a valid file whose base
# does not fit (apply's code). Each costs two Python start-ups (over a second each, mostly `import
# ml_dtypes`); every case goes through the same `main` in process above.
CLI_CASES = ["low_rank-every-float-dtype", "MD100-not_hdf5", "MD600-base_lacks_dense_parameter", "MD801-head_malformed"]


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
    if not all((JS_TOOL / "node_modules" / m).is_dir() for m in ("h5wasm", "onnxruntime-node")) else None
)


@pytest.mark.skipif(JS_MISSING is not None, reason=JS_MISSING or "")
@pytest.mark.parametrize("batch", [pytest.param(0, id="one-file-per-command"), pytest.param(40, id="batched")])
def test_mdiff_js_passes_every_case_it_claims(batch):
    """Every case, validated and applied batched (40 files per command, `validate FILE...` and
    `apply-many`: node and h5wasm start in ~0.3 s of CPU, and the whole corpus one command per file
    would take minutes); and a few cases one command per file, for the per-file exit statuses."""
    impl = CommandImplementation([NODE, str(JS_CLI)])
    claimed = impl.features()
    assert claimed is not None and {"embedded-update-types", "repository", "merge"} <= claimed
    select = None if batch else (lambda c: c.id in CLI_CASES or c.id in ("embedded-x-ia3", "MD303-root_member",
                                                                         "MD510-attribute_over_limit"))
    results = run_cases(impl, MANIFEST, select=select, jobs=2, claimed=claimed, batch=batch)
    assert all(r.status != "fail" for r in results), _report(results)
    assert not [r.id for r in results if r.status == "skip"]  # §7.8 too: mdiff-js claims every feature
    assert re.fullmatch(r"\d+ passed, 0 failed(, 0 skipped)?", summary_line(results)), summary_line(results)


# ---------------------------------------------------------------- h5dump


@pytest.mark.skipif(H5DUMP is None, reason="h5dump is not installed (Debian: apt-get install hdf5-tools)")
def test_h5dump_reads_every_valid_fixture():
    failures = []
    for case in MANIFEST.cases:
        if case.family != "valid":
            continue
        if case.is_repository:  # every commit and snapshot file
            dot = case.path("repository") / ".mdiff"
            files = sorted((dot / "commits").glob("[0-9a-f]*.mdiff")) + sorted((dot / "snapshots").glob("*.mdiff"))
        else:
            files = [case.path("diff")]
        for path in files:
            p = subprocess.run([H5DUMP, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
            if p.returncode != 0:
                failures.append(f"{case.id} {path.name}: {p.stderr.decode(errors='replace')[:300]}")
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
    assert bad.status == "fail" and any("expected exactly ['MD408']" in p for p in bad.problems)
    good = run_case(impl, MANIFEST.case("dense-every-dtype"), claimed=None)
    assert good.status == "pass", good.problems
    warn = run_case(impl, MANIFEST.case("MD303-root_member"), claimed=None)
    assert warn.status == "fail" and any("warnings" in p for p in warn.problems)


def test_runner_compares_exact_code_sets_unless_first_error_only():
    """SPEC.md §12.1: an extra code (MD406 beside a refused dataset's MD505) or a missing one fails a case;
    a validator that claims `first-error-only` passes with a non-empty part of `expect.codes`, no other."""
    import json

    def reporting(codes):
        def main(argv: list[str]) -> int:
            if argv[0] == "validate":
                print(json.dumps({"findings": [{"code": c, "severity": "error"} for c in codes]}))
                return 1
            from mdiff.cli.main import main as reference

            return reference(argv)
        return InProcessImplementation(main, "+".join(codes))

    case = MANIFEST.case("MD505-float16_dataset")
    assert case.expect["codes"] == ["MD505"] and case.expect["warnings"] == []
    extra = run_case(reporting(["MD505", "MD406"]), case, claimed=None)
    assert extra.status == "fail" and extra.problems == ["validate reported errors ['MD406', 'MD505'], expected exactly ['MD505']"]
    assert run_case(reporting(["MD505"]), case, claimed=None).status == "pass"
    embedded = MANIFEST.case("MD423-function_random_op")
    assert embedded.expect["codes"] == ["MD402", "MD423"]
    first = run_case(reporting(["MD423"]), embedded, claimed=None)
    assert first.status == "fail"
    assert run_case(reporting(["MD423"]), embedded, claimed=None, first_error_only=True).status == "pass"
    assert run_case(reporting(["MD423"]), embedded, claimed=frozenset({"first-error-only", "embedded-update-types"})).status == "pass"
    assert run_case(reporting(["MD423", "MD406"]), embedded, claimed=None, first_error_only=True).status == "fail"
    assert run_case(reporting(["MD406"]), embedded, claimed=None, first_error_only=True).status == "fail"


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


def test_runner_catches_wrong_merges(tmp_path):
    """A merge-file that compares values by number, merges element by element, rounds through float32, lists
    a conflict too many or writes its output despite conflicts: each fails its case."""
    import json

    import ml_dtypes

    from mdiff.checkpoints import load_checkpoint, save_checkpoint
    from mdiff.cli.main import main

    def merge_file(decide):
        """A merge-file whose merged parameters come from ``decide(name, ours, base, theirs)`` (None: a conflict)."""
        def run(argv: list[str]) -> int:
            if argv[0] != "merge-file":
                return main(argv)
            ours, base, theirs = (load_checkpoint(path) for path in argv[1:4])
            merged, conflicts = {}, []
            for name in sorted(set(ours) | set(base) | set(theirs)):
                value = decide(name, ours.get(name), base.get(name), theirs.get(name), argv)
                if value is None:
                    conflicts.append(name)
                elif value is not False:
                    merged[name] = value
            if conflicts:
                print(json.dumps({"findings": [{"code": "MD804", "severity": "error", "path": n} for n in conflicts]}))
                return 1
            save_checkpoint(argv[argv.index("-o") + 1], merged)
            return 0
        return InProcessImplementation(run, "a merge-file")

    def by_number(a, b):
        return (a is None and b is None) or (a is not None and b is not None and a.shape == b.shape
                                             and a.dtype == b.dtype and bool(np.array_equal(a, b)))

    def three_way(same):
        def decide(name, o, b, t, argv):
            if same(o, t):
                return False if o is None else o
            if same(o, b):
                return False if t is None else t
            if same(t, b):
                return False if o is None else o
            return None
        return decide

    one_sided = MANIFEST.case("merge-one-sided-changes")
    numbers = run_case(merge_file(three_way(by_number)), one_sided, claimed=None)
    assert numbers.status == "fail", numbers

    def elementwise(name, o, b, t, argv):
        if o is not None and b is not None and t is not None and o.shape == b.shape == t.shape and o.dtype == t.dtype:
            return np.where(o != b, o, t)
        return three_way(by_number)(name, o, b, t, argv)

    changed_both = MANIFEST.case("merge-conflict-changed-both")
    merged_anyway = run_case(merge_file(elementwise), changed_both, claimed=None)
    assert merged_anyway.status == "fail" and any("exited 0" in p for p in merged_anyway.problems)

    def twice(name, o, b, t, argv):  # task-arithmetic, rounded to float32 first
        return ((b.astype(np.float64) + ((o.astype(np.float64) - b) + (t.astype(np.float64) - b)))
                .astype(np.float32).astype(o.dtype))

    for dtype in ("float16", "bfloat16"):
        rounded_twice = run_case(merge_file(twice), MANIFEST.case(f"merge-round-once-{dtype}"), claimed=None)
        assert rounded_twice.status == "fail" and any("bit for bit" in p for p in rounded_twice.problems), dtype
    assert ml_dtypes.bfloat16  # the bfloat16 case above read and wrote bfloat16

    def one_more(argv):
        print(json.dumps({"findings": [{"code": "MD804", "severity": "error", "path": p} for p in ("i", "split", "w", "a")]}))
        return 1

    extra = run_case(InProcessImplementation(one_more, "one more"), changed_both, claimed=None)
    assert extra.status == "fail" and extra.problems == ["conflicts differ: not conflicts ['a']"]

    def writes_anyway(argv):
        Path(argv[argv.index("-o") + 1]).write_bytes(b"")
        return main(argv)

    left = run_case(InProcessImplementation(writes_anyway, "writes"), changed_both, claimed=None)
    assert left.status == "fail" and any("left merged.safetensors behind" in p for p in left.problems)
    assert run_case(reference_in_process(), changed_both, claimed=None).passed
    skipped = run_case(reference_in_process(), changed_both, claimed=frozenset({"repository"}))
    assert skipped.status == "skip" and "merge" in skipped.reason


def test_runner_catches_wrong_checkouts():
    """A checkout of the wrong commit, a state with a flipped bit, a refusal with another code, a
    checkout that should have been refused: each fails its case."""
    import json

    from mdiff.cli.main import main

    valid = MANIFEST.case("repository-detached-head")
    refused = MANIFEST.case("MD802-merge_made_against_second_parent")

    def run(argv, rev=None, after=None):
        if argv[0] == "checkout" and rev is not None:
            argv = ["checkout", rev(argv[1]), *argv[2:]]
        code = main(argv)
        if after:
            after(argv)
        return code

    def impl(**kw):
        return InProcessImplementation(lambda argv: run(argv, **kw), "wrong")

    wrong_commit = run_case(impl(rev=lambda r: r + "^" if r == "HEAD" else r), valid, claimed=None)
    assert wrong_commit.status == "fail" and any("says it checked out commit" in p for p in wrong_commit.problems)

    def flip(argv):
        out = Path(argv[argv.index("-o") + 1])
        if out.exists():
            data = bytearray(out.read_bytes())
            data[-1] ^= 1
            out.write_bytes(bytes(data))

    flipped = run_case(impl(after=flip), valid, claimed=None)
    assert flipped.status == "fail" and any("bit for bit" in p for p in flipped.problems)

    def other_code(argv):
        print(json.dumps({"error": {"code": "MD602"}}))
        return 1

    assert run_case(InProcessImplementation(lambda argv: other_code(argv), "MD602"), refused, claimed=None).problems
    second_parent = run_case(impl(rev=lambda r: "side"), refused, claimed=None)  # side: a state exists
    assert second_parent.status == "fail" and any("must refuse" in p for p in second_parent.problems)
    assert run_case(reference_in_process(), valid, claimed=None).passed
    assert run_case(reference_in_process(), refused, claimed=None).passed
    skipped = run_case(reference_in_process(), valid, claimed=frozenset())
    assert skipped.status == "skip" and "repository" in skipped.reason
