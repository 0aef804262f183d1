"""Running cases, checked against the manifest: one validate and one apply per file case; one
checkout per revision of a repository case (SPEC.md §13); one merge-file per merge case (§13.7)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from mdiff.conformance.compare import compare_files, read_state
from mdiff.format.dtypes import dtype_of
from mdiff.conformance.implementations import DEFAULT_TIMEOUT, Completed, Implementation, limit_args
from mdiff.conformance.manifest import Case, Manifest
from mdiff.rules import RULES
from mdiff.updates.base import sha256_hex

_SEVERITIES = ("error", "warning")
# A feature an implementation may claim (`IMPL features`): its validate stops at the first error, so an
# invalid case passes when it reports one or more of the case's codes and no other (conformance/README.md).
FIRST_ERROR_ONLY = "first-error-only"
# A claim that the implementation has the command `apply-many` (several applies per command): with a batch
# size, the runner then applies that many cases per command too, saving a start-up per case.
APPLY_MANY = "apply-many"
# A claim that the implementation checks SPEC.md §8.1-§8.3 structure itself, before any HDF5 library reads the
# file (SPEC.md §12.2, the profile `hardened`); an implementation that does not claim it is judged as `core`.
HARDENED = "hardened"
PROFILES = ("core", "hardened")


def profile_of(claimed: frozenset[str] | None) -> str:
    """The profile an implementation is judged by: `hardened` where it claims it (or has no `features`
    command, which claims every feature), else `core`."""
    return "hardened" if claimed is None or HARDENED in claimed else "core"


@dataclass
class CaseResult:
    id: str
    family: str
    status: str  # "pass", "fail" or "skip"
    expected: str
    got: str = ""
    problems: list[str] = field(default_factory=list)
    reason: str = ""  # why a case was skipped

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "family": self.family, "status": self.status, "expected": self.expected,
                               "got": self.got}
        if self.problems:
            out["problems"] = self.problems
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class BatchApplied:
    """One case's part of an `apply-many` command: what it did for this case, the output path it was
    given, and a problem of the command as a whole (it printed another number of reports than applies)."""

    done: Completed
    out: Path
    problem: str = ""


def unclaimed_features(case: Case, claimed: frozenset[str] | None) -> list[str]:
    return [] if claimed is None else [f for f in case.features if f not in claimed]


def _json_object(text: str):
    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, list) and len(value) == 1:  # one file's report in a list
        value = value[0]
    return value if isinstance(value, dict) else None


def _tail(done: Completed) -> str:
    text = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return f": {text[-1][:300]}" if text else ""


def _findings(done: Completed) -> tuple[list[tuple[str, str]], str | None]:
    """[(code, severity)] from validate's JSON, or a problem."""
    report = _json_object(done.stdout)
    if report is None or not isinstance(report.get("findings"), list):
        return [], f"validate printed no JSON object with `findings`{_tail(done)}"
    out = []
    for f in report["findings"]:
        if not isinstance(f, dict) or not isinstance(f.get("code"), str):
            return [], f"a finding without a string `code`: {f!r}"
        severity = f.get("severity")
        if severity is None and f["code"] in RULES:
            severity = RULES[f["code"]].severity
        if severity not in _SEVERITIES:
            return [], f"finding {f['code']} has severity {severity!r}"
        out.append((f["code"], severity))
    return out, None


def _check_validate(case: Case, done: Completed, first_error_only: bool = False) -> tuple[str, list[str], set[str]]:
    """(what validate did, problems, its error codes). An invalid case's errors and warnings must be exactly
    its `codes` and `warnings` (SPEC.md §12.1); with ``first_error_only``, a non-empty part of them."""
    e = case.expect
    if done.returncode is None:
        return "timed out", ["validate timed out"], set()
    findings, problem = _findings(done)
    if problem:
        return f"exit {done.returncode}, no report", [problem], set()
    errors = {c for c, s in findings if s == "error"}
    warnings = {c for c, s in findings if s == "warning"}
    if errors:
        got = ("not-hdf5" if done.returncode == 2 else "") + "[" + ",".join(sorted(errors)) + "]"
    else:
        got = "valid" + "".join(f"+{w}" for w in sorted(warnings))
    if done.returncode not in (0, 1, 2):
        got = f"exit {done.returncode} {got}"
    problems = []
    if e["validate"] == "valid":
        want = set(e.get("warnings", []))
        if done.returncode != 0:
            problems.append(f"validate exited {done.returncode}, expected 0")
        if errors:
            problems.append(f"validate reported errors {sorted(errors)} for a valid file")
        if warnings != want:
            problems.append(f"validate reported warnings {sorted(warnings)}, expected {sorted(want)}")
    else:
        status = 2 if e["validate"] == "not-hdf5" else 1
        if done.returncode != status:
            problems.append(f"validate exited {done.returncode}, expected {status}")
        if "codes" not in e:  # a manifest before exact code sets: the case's code among the errors
            if e["code"] not in errors:
                problems.append(f"validate's errors {sorted(errors)} lack {e['code']}")
            return got, problems, errors
        codes, warned = set(e["codes"]), set(e.get("warnings", []))
        if first_error_only:
            if not errors & codes:
                problems.append(f"validate's errors {sorted(errors)} include none of {sorted(codes)}")
            if errors - codes:
                problems.append(f"validate reported errors {sorted(errors - codes)}; the file breaks only {sorted(codes)}")
            if warnings - warned:
                problems.append(f"validate reported warnings {sorted(warnings - warned)}, expected at most {sorted(warned)}")
        else:
            if errors != codes:
                problems.append(f"validate reported errors {sorted(errors)}, expected exactly {sorted(codes)}")
            if warnings != warned:
                problems.append(f"validate reported warnings {sorted(warnings)}, expected exactly {sorted(warned)}")
    return got, problems, errors


def _check_apply(case: Case, done: Completed, out: Path) -> tuple[str, list[str]]:
    e = case.expect
    if done.returncode is None:
        return "timed out", ["apply timed out"]
    if done.returncode == 0:
        if e["apply"] == "refuse":
            return "applied", ["apply succeeded; it must refuse" + (" and write nothing" if out.exists() else "")]
        if not out.is_file():
            return "applied, no output", ["apply exited 0 but wrote no output file"]
        tol = e.get("tolerance")
        problems = compare_files(out, case.path("result"), case.corpus / tol["bounds"] if tol else None)
        return ("applied" if not problems else "applied, wrong result"), problems
    report = _json_object(done.stdout)
    error = report.get("error") if report else None
    code = error.get("code") if isinstance(error, dict) else None
    got = f"refused {code}" if isinstance(code, str) else f"refused (exit {done.returncode}, no code)"
    problems = []
    if out.exists():
        problems.append(f"apply refused (exit {done.returncode}) but left {out.name} behind")
    if e["apply"] == "result":
        problems.append(f"apply refused a valid file (exit {done.returncode}){_tail(done)}")
        return got, problems
    # A file that breaks rules may be refused for any of them (a replace whose sha256 is wrong breaks
    # MD410 and MD602 alike): only a valid file refused for its base must name the case's code.
    if case.apply_code and code != case.apply_code:
        problems.append(f"apply reported {code or 'no code'}, expected {case.apply_code}"
                        + ("" if code else " (print {\"error\": {\"code\": ...}} with --json)"))
    return got, problems


def _check_checkout(case: Case, entry: dict, done: Completed, out: Path) -> tuple[str, list[str]]:
    """(what one checkout did, its problems)."""
    rev = entry["revision"]
    if done.returncode is None:
        return "timed out", [f"checkout {rev!r} timed out"]
    report = _json_object(done.stdout)
    if done.returncode == 0:
        if case.expect["checkout"] == "refuse":
            return "checked out", [f"checkout {rev!r} succeeded; it must refuse with {case.code}"
                                   + (" and write nothing" if out.exists() else "")]
        if not out.is_file():
            return "no output", [f"checkout {rev!r} exited 0 but wrote no output file"]
        problems = []
        said = report.get("commit") if report else None
        if said is not None and said != entry.get("commit"):
            problems.append(f"checkout {rev!r} says it checked out commit {said!r}, expected {entry.get('commit')}")
        tol = entry.get("tolerance")
        problems += [f"checkout {rev!r}: {p}" for p in
                     compare_files(out, case.corpus / entry["result"], case.corpus / tol["bounds"] if tol else None)]
        return ("checked out" if not problems else "wrong state"), problems
    error = report.get("error") if report else None
    code = error.get("code") if isinstance(error, dict) else None
    got = f"refused {code}" if isinstance(code, str) else f"refused (exit {done.returncode}, no code)"
    problems = []
    if out.exists():
        problems.append(f"checkout {rev!r} refused (exit {done.returncode}) but left {out.name} behind")
    if case.expect["checkout"] == "result":
        problems.append(f"checkout {rev!r} refused (exit {done.returncode}){_tail(done)}")
    elif code != case.code:
        problems.append(f"checkout {rev!r} reported {code or 'no code'}, expected {case.code}"
                        + ("" if code else " (print {\"error\": {\"code\": ...}} with --json)"))
    return got, problems


def run_repository_case(impl: Implementation, case: Case, timeout: float = DEFAULT_TIMEOUT,
                        workdir: Path | None = None) -> tuple[str, list[str]]:
    """Check out every revision of a repository case, from a copy of its repository (so that an
    implementation that writes, e.g. a lock file, leaves the corpus alone); (got, problems)."""
    problems: list[str] = []
    outcomes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="mdiff-conf-", dir=workdir) as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(case.path("repository"), repo, symlinks=True)
        for i, entry in enumerate(case.expect["revisions"]):
            out = Path(tmp) / f"out-{i}.safetensors"
            done = impl.checkout(repo, entry["revision"], out, timeout)
            got, p = _check_checkout(case, entry, done, out)
            outcomes[got] = outcomes.get(got, 0) + 1
            problems += p
    return ", ".join(f"{n}× {got}" for got, n in outcomes.items()), problems


def _check_merge(case: Case, done: Completed, out: Path) -> tuple[str, list[str]]:
    """(what one merge-file did, its problems): the merged checkpoint bit for bit, or exactly the expected
    conflicting parameters (MD804, nothing written), or exit 2 for an unreadable input."""
    want = case.expect["merge"]
    if done.returncode is None:
        return "timed out", ["merge-file timed out"]
    if done.returncode == 0:
        if want != "result":
            return "merged", [f"merge-file exited 0; expected exit {1 if want == 'conflicts' else 2}"
                              + (" and nothing written" if out.exists() else "")]
        if not out.is_file():
            return "merged, no output", ["merge-file exited 0 but wrote no output file"]
        problems = compare_files(out, case.path("result"))
        return ("merged" if not problems else "merged, wrong result"), problems
    problems = []
    if out.exists():
        problems.append(f"merge-file exited {done.returncode} but left {out.name} behind")
    if done.returncode == 2:
        if want != "unreadable":
            problems.append(f"merge-file exited 2 (an unreadable input){_tail(done)}")
        return "exit 2", problems
    if done.returncode != 1:
        return f"exit {done.returncode}", problems + [f"merge-file exited {done.returncode}{_tail(done)}"]
    report = _json_object(done.stdout)
    findings = report.get("findings") if report else None
    if not isinstance(findings, list):
        return "exit 1, no report", problems + [f"merge-file exited 1 but printed no JSON object with `findings`{_tail(done)}"]
    names: list[str] = []
    for f in findings:
        if not isinstance(f, dict) or f.get("code") != "MD804" or f.get("severity", "error") != "error" \
                or not isinstance(f.get("path"), str):
            problems.append(f"a finding that is not {{code: MD804, severity: error, path: a parameter}}: {f!r}"[:300])
        else:
            names.append(f["path"])
    got = f"MD804 × {len(names)}"
    if want != "conflicts":
        problems.append(f"merge-file reported conflicts {sorted(names)[:10]}; expected "
                        + ("a merged checkpoint" if want == "result" else "exit 2"))
        return got, problems
    expected = set(case.expect["conflicts"])
    if len(set(names)) != len(names):
        problems.append(f"conflicts reported more than once: {sorted({n for n in names if names.count(n) > 1})}")
    if set(names) != expected:
        missing, extra = sorted(expected - set(names)), sorted(set(names) - expected)
        problems.append("conflicts differ:" + (f" missing {missing}" if missing else "")
                        + (f" not conflicts {extra}" if extra else ""))
    return got, problems


def run_merge_case(impl: Implementation, case: Case, timeout: float = DEFAULT_TIMEOUT,
                   workdir: Path | None = None) -> tuple[str, list[str]]:
    """One merge-file of a merge case's three checkpoints into a fresh directory; (got, problems)."""
    with tempfile.TemporaryDirectory(prefix="mdiff-conf-", dir=workdir) as tmp:
        out = Path(tmp) / "merged.safetensors"
        done = impl.merge_file(case.path("ours"), case.path("base"), case.path("theirs"), out,
                               case.merge.get("strategy"), bool(case.merge.get("all")), timeout)
        return _check_merge(case, done, out)


def _judge(case: Case, outcome: dict, validated: Completed, applied: Completed, out: Path,
           relaxed: bool) -> tuple[str, list[str]]:
    """(got, problems) of one validate and one apply against one outcome (`expect` or one of `expect.core`)."""
    judged = dataclasses.replace(case, expect={**case.expect, **outcome})
    v_got, problems, _ = _check_validate(judged, validated, relaxed)
    if "parameters" in outcome:  # a core outcome "applied": the named state
        a_got, a_problems = _check_applied_state(judged, applied, out, outcome["parameters"])
    else:
        a_got, a_problems = _check_apply(judged, applied, out)
    return f"{v_got}, {a_got}", problems + a_problems


def _check_applied_state(case: Case, done: Completed, out: Path, parameters: dict) -> tuple[str, list[str]]:
    """apply succeeded and wrote exactly the parameters named, each of that dtype, shape and sha256."""
    if done.returncode is None:
        return "timed out", ["apply timed out"]
    if done.returncode != 0 or not out.is_file():
        return f"refused (exit {done.returncode})", [f"apply did not apply the file{_tail(done)}"]
    try:
        state = read_state(out)
    except Exception as exc:  # noqa: BLE001 - an unreadable output is a problem to report
        return "applied, unreadable", [f"apply wrote an unreadable checkpoint: {exc}"]
    got = {name: {"dtype": dtype_of(v).name, "shape": list(v.shape), "sha256": sha256_hex(v)} for name, v in state.items()}
    if got == parameters:
        return "applied", []
    wrong = sorted(n for n in set(got) | set(parameters) if got.get(n) != parameters.get(n))
    return "applied, wrong result", [f"apply's result differs from the state the updates name at {wrong[:5]}"]


def run_case(impl: Implementation, case: Case, claimed: frozenset[str] | None = None,
             timeout: float = DEFAULT_TIMEOUT, workdir: Path | None = None,
             validated: Completed | None = None, first_error_only: bool = False,
             applied: BatchApplied | None = None, profile: str | None = None) -> CaseResult:
    """Validate the case's file (unless ``validated`` holds that answer already), then apply it
    to its base (unless ``applied`` holds that answer and the output path it was given); compare
    both with the manifest. A repository case: check out each revision; a merge case: merge its three
    checkpoints.
    ``first_error_only`` (or the implementation claiming FIRST_ERROR_ONLY) relaxes the exact code sets.
    ``profile`` (default: :func:`profile_of` the claims) picks what a hostile case expects: `hardened` its
    `expect`, `core` one of its `expect.core` outcomes (SPEC.md §12.2)."""
    profile = profile or profile_of(claimed)
    result = CaseResult(case.id, case.family, "fail", case.expected_text())
    missing = unclaimed_features(case, claimed)
    if missing:
        result.status = "skip"
        result.reason = f"unclaimed feature {', '.join(missing)}"
        return result
    if case.is_repository or case.is_merge:
        run = run_merge_case if case.is_merge else run_repository_case
        result.got, result.problems = run(impl, case, timeout, workdir)
        result.status = "fail" if result.problems else "pass"
        return result
    with tempfile.TemporaryDirectory(prefix="mdiff-conf-", dir=workdir) as tmp:
        done = validated or impl.validate(case.path("diff"), case.limits, timeout)
        relaxed = first_error_only or (claimed is not None and FIRST_ERROR_ONLY in claimed)
        if applied:
            a_done, out = applied.done, applied.out
        else:
            out = Path(tmp) / "out.safetensors"
            a_done = impl.apply(case.path("base"), case.path("diff"), out, case.limits, timeout)
        outcomes = case.expect.get("core") if profile == "core" else None
        if outcomes:  # one of the listed outcomes, whole
            judged = [_judge(case, o, done, a_done, out, relaxed) for o in outcomes]
            best = next((j for j in judged if not j[1]), judged[0])
            result.got, result.problems = best[0], list(best[1])
            if len(judged) > 1 and best[1]:
                result.problems.append(f"(core accepts {len(outcomes)} outcomes; each fails, the first's problems shown)")
        else:
            result.got, result.problems = _judge(case, {}, done, a_done, out, relaxed)
        if applied and applied.problem:
            result.problems.append(applied.problem)
    result.status = "fail" if result.problems else "pass"
    return result


def _reports(text: str) -> list:
    """Several files' validate reports: a JSON array, or JSON values one after another."""
    text = text.strip()
    try:
        value = json.loads(text)
        return value if isinstance(value, list) else [value]
    except json.JSONDecodeError:
        pass
    decoder, pos, out = json.JSONDecoder(), 0, []
    while pos < len(text):
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        out.append(value)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _status_of(report) -> int:
    findings = report.get("findings") if isinstance(report, dict) else None
    errors = set()
    for f in findings or []:
        if isinstance(f, dict):
            code = f.get("code")
            severity = f.get("severity") or (RULES[code].severity if code in RULES else "error")
            if severity == "error":
                errors.add(code)
    return 2 if "MD100" in errors else 1 if errors else 0


def _per_report(done: Completed, reports: list, statuses: list[int]) -> list[Completed]:
    """A batch command's answer split into one per file, each with its report's own status — unless the
    command's exit status is not the largest of them, which every file then gets (and those expecting
    another fail)."""
    consistent = done.returncode == max(statuses)
    return [Completed(s if consistent else done.returncode, json.dumps(r), done.stderr) for r, s in zip(reports, statuses)]


def _validate_batch(impl: Implementation, cases: list[Case], timeout: float) -> dict[str, Completed]:
    """One `validate --json FILE...` for several cases (same limits); each file's exit status is
    taken from its report (`_per_report`)."""
    files = [str(c.path("diff")) for c in cases]
    done = impl.run(["validate", "--json", *limit_args(cases[0].limits), *files], timeout * max(1, len(files) / 4))
    if done.returncode is None:
        return {c.id: Completed(None, "", "") for c in cases}
    reports = _reports(done.stdout)
    if len(reports) != len(cases) or any(isinstance(r, dict) and "file" in r and r["file"] != f
                                         for r, f in zip(reports, files)):
        note = f"batch validate printed {len(reports)} reports for {len(cases)} files{_tail(done)}"
        return {c.id: Completed(done.returncode, "", note) for c in cases}
    return dict(zip((c.id for c in cases), _per_report(done, reports, [_status_of(r) for r in reports])))


def _apply_batch(impl: Implementation, cases: list[Case], out_dir: Path, timeout: float) -> dict[str, BatchApplied]:
    """One `apply-many --json BASE DIFF OUT ...` for several cases (same limits), each writing
    ``out_dir/<case id>.safetensors``: a report per case, read as one `apply --json` would print it;
    each case's status is 1 when its report holds an `error`, else 0 (`_per_report`)."""
    outs = [out_dir / f"{c.id}.safetensors" for c in cases]
    triples = [(c.path("base"), c.path("diff"), out) for c, out in zip(cases, outs)]
    done = impl.apply_many(triples, cases[0].limits, timeout * max(1, len(cases) / 4))
    if done.returncode is None:
        return {c.id: BatchApplied(Completed(None, "", ""), out) for c, out in zip(cases, outs)}
    reports = _reports(done.stdout)
    if len(reports) != len(cases):
        note = f"apply-many printed {len(reports)} reports for {len(cases)} applies (exit {done.returncode}){_tail(done)}"
        return {c.id: BatchApplied(done, out, note) for c, out in zip(cases, outs)}
    statuses = [1 if isinstance(r, dict) and "error" in r else 0 for r in reports]
    return {c.id: BatchApplied(one, out) for c, out, one in zip(cases, outs, _per_report(done, reports, statuses))}


def _in_batches(work: Callable[[list[Case]], dict], chunks: list[list[Case]], parallel: bool, jobs: int) -> dict:
    merged: dict = {}
    if parallel:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            parts = list(pool.map(work, chunks))
    else:
        parts = [work(chunk) for chunk in chunks]
    for part in parts:
        merged.update(part)
    return merged


def run_cases(impl: Implementation, manifest: Manifest, select: Callable[[Case], bool] | None = None,
              jobs: int = 2, timeout: float = DEFAULT_TIMEOUT, claimed: frozenset[str] | None | str = "ask",
              on_result: Callable[[CaseResult], None] | None = None, batch: int = 0,
              first_error_only: bool = False, profile: str | None = None) -> list[CaseResult]:
    """Every (selected) case, in manifest order. ``claimed`` defaults to asking the implementation.

    With ``batch`` > 1, files are validated ``batch`` at a time (`validate --json FILE...`, an
    optional part of the contract) to save start-up time, and applied ``batch`` at a time where the
    implementation claims `apply-many`; otherwise apply runs once per case. Checkouts and merges run one
    per command.
    """
    if claimed == "ask":
        claimed = impl.features()
    profile = profile or profile_of(claimed)  # type: ignore[arg-type]
    cases = [c for c in manifest.cases if select is None or select(c)]
    parallel = jobs > 1 and impl.parallel_safe
    with tempfile.TemporaryDirectory(prefix="mdiff-conf-") as tmp:
        validated: dict[str, Completed] = {}
        applied: dict[str, BatchApplied] = {}
        if batch > 1:
            groups: dict[tuple, list[Case]] = {}
            for c in cases:
                if not c.is_repository and not c.is_merge and not unclaimed_features(c, claimed):  # type: ignore[arg-type]
                    groups.setdefault(tuple(sorted(c.limits.items())), []).append(c)
            chunks = [g[i:i + batch] for g in groups.values() for i in range(0, len(g), batch)]
            validated = _in_batches(lambda chunk: _validate_batch(impl, chunk, timeout), chunks, parallel, jobs)
            if claimed is not None and APPLY_MANY in claimed:
                applied = _in_batches(lambda chunk: _apply_batch(impl, chunk, Path(tmp), timeout), chunks, parallel, jobs)

        def one(case: Case) -> CaseResult:
            r = run_case(impl, case, claimed, timeout, validated=validated.get(case.id),  # type: ignore[arg-type]
                         first_error_only=first_error_only, applied=applied.get(case.id), profile=profile)
            if r.status == "skip":  # the manifest says why an implementation might not claim the feature
                r.reason = "; ".join(f"unclaimed feature {f}: {manifest.features.get(f, '')}"
                                     for f in unclaimed_features(case, claimed))  # type: ignore[arg-type]
            if on_result:
                on_result(r)
            return r

        if not parallel:
            return [one(c) for c in cases]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(one, cases))


def summary_line(results: Iterable[CaseResult]) -> str:
    results = list(results)
    passed = sum(r.status == "pass" for r in results)
    failed = sum(r.status == "fail" for r in results)
    skipped = sum(r.status == "skip" for r in results)
    return f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
