"""``python -m mdiff.conformance``: run an implementation on the conformance corpus.

    python -m mdiff.conformance                                   # the reference
    python -m mdiff.conformance --impl "node tools/mdiff-js/bin/mdiff-js.js"
    python -m mdiff.conformance --filter MD5 --json

Prints one row per case (id, family, expected, got, status), the problems of each failed case,
the unclaimed cases with the manifest's reason, and last a line ``N passed, N failed`` (``, N
skipped`` when cases are unclaimed). Exit status 1 when a case fails, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
import shlex
import sys

from mdiff.conformance.implementations import DEFAULT_TIMEOUT, CommandImplementation, reference_command
from mdiff.conformance.manifest import ManifestError, load_manifest
from mdiff.conformance.runner import profile_of, run_cases, summary_line


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(r[i].ljust(widths[i]) for i in range(len(widths))) + "  " + r[-1] for r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mdiff.conformance", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", metavar="CMD", help="the implementation's command line (default: the reference, "
                        f"{' '.join(shlex.quote(a) for a in reference_command())})")
    parser.add_argument("--filter", metavar="SUBSTR", action="append",
                        help="only cases whose id, family or section (§7.4) contains SUBSTR (repeatable: any)")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of the table "
                        "(the summary line then goes to stderr)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="cases run at once (default 2)")
    parser.add_argument("--corpus", metavar="DIR", help="the corpus directory (default: conformance/ of this tree)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per command (default 120)")
    parser.add_argument("--batch", type=int, default=0, metavar="N",
                        help="validate N files per command (`validate --json FILE...`, optional in the contract), "
                             "and apply N cases per command where the implementation claims `apply-many`; "
                             "saves start-up time, checks exit statuses per batch only")
    parser.add_argument("--first-error-only", action="store_true",
                        help="for an implementation whose validate stops at its first error: an invalid case "
                             "passes with any non-empty part of its `codes` (default: exactly `codes`)")
    args = parser.parse_args(argv)

    try:
        manifest = load_manifest(args.corpus)
    except ManifestError as exc:
        print(f"mdiff.conformance: {exc}", file=sys.stderr)
        return 2
    impl = CommandImplementation(args.impl if args.impl else reference_command())
    try:
        claimed = impl.features()
    except ValueError as exc:
        print(f"mdiff.conformance: {exc}", file=sys.stderr)
        return 2
    needles = args.filter
    profile = profile_of(claimed)

    def select(case) -> bool:
        return not needles or any(n in s for n in needles for s in (case.id, case.family, f"§{case.section}"))

    results = run_cases(impl, manifest, select, jobs=args.jobs, timeout=args.timeout, claimed=claimed,
                        batch=args.batch, first_error_only=args.first_error_only)
    line = summary_line(results)
    failed = any(r.status == "fail" for r in results)
    if args.json:
        print(json.dumps({
            "implementation": impl.name,
            "claimed_features": None if claimed is None else sorted(claimed),
            "profile": profile,
            "results": [r.to_json() for r in results],
            "summary": line,
        }, indent=1, ensure_ascii=False))
        print(line, file=sys.stderr)
        return 1 if failed else 0

    print(f"implementation: {impl.name}")
    print(f"features claimed: {'all' if claimed is None else ', '.join(sorted(claimed)) or 'none'}")
    print(f"profile judged: {profile}" + ("" if profile == "hardened" else " (the implementation does not claim `hardened`)"))
    print(f"corpus: {manifest.corpus} ({len(manifest.cases)} cases)\n")
    rows = [("ID", "FAMILY", "EXPECTED", "GOT", "STATUS")]
    for r in results:
        rows.append((r.id, r.family, r.expected, r.got if r.status != "skip" else "-", r.status.upper()))
    if len(rows) > 1:
        for row in _table(rows):
            print(row.rstrip())
    failures = [r for r in results if r.status == "fail"]
    if failures:
        print("\nfailures:")
        for r in failures:
            print(f"  {r.id}:")
            for p in r.problems:
                print(f"    - {p}")
    skipped = [r for r in results if r.status == "skip"]
    if skipped:
        print("\nunclaimed (skipped):")
        for r in skipped:
            print(f"  {r.id}: {r.reason}")
    if manifest.blocked:
        print("\nblocked (no case yet):")
        for b in manifest.blocked:
            print(f"  {b.get('what')}: {b.get('reason')}")
    print()
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
