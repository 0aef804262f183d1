"""Loading ``conformance/manifest.json``: the list of cases and what each expects."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

FAMILIES = ("valid", "invalid", "hostile", "merge")
VALIDATE_OUTCOMES = ("valid", "invalid", "not-hdf5")
APPLY_OUTCOMES = ("result", "refuse")
CHECKOUT_OUTCOMES = ("result", "refuse")
MERGE_OUTCOMES = ("result", "conflicts", "unreadable")
_CODE = re.compile(r"MD[0-9]{3}")


class ManifestError(ValueError):
    """The manifest is not what this runner understands."""


def default_corpus() -> Path:
    """``conformance/`` of the source tree this package was imported from."""
    return Path(__file__).resolve().parents[2] / "conformance"


@dataclass(frozen=True)
class Case:
    """One case of the manifest: a file case (``files.diff``) or a repository case
    (``files.repository``, SPEC.md §13). A file case's ``expect`` holds:

    - ``validate``: ``valid`` (exit 0, the findings' codes are exactly ``warnings``), ``invalid``
      (exit 1) or ``not-hdf5`` (exit 2): the errors are exactly ``codes`` and the warnings exactly
      ``warnings`` (SPEC.md §12.1); ``code``, one of ``codes``, is the rule the case is about (a
      manifest without ``codes`` asks only for ``code`` among the errors);
    - ``apply``: ``result`` (exit 0; the output equals ``files.result``, low_rank parameters
      within ``tolerance``) or ``refuse`` (non-zero exit, no output; when the file is valid,
      apply must report ``code``).

    A hostile case's ``expect`` also holds ``core`` (SPEC.md §12.2): the outcomes a core implementation may
    give instead (each ``{validate, codes, warnings, apply}``, ``parameters`` for one that applies); the rest
    of ``expect`` is the hardened outcome.

    A repository case's ``expect`` holds ``checkout``: ``result`` (each of ``revisions`` —
    ``{revision, commit, result, tolerance}`` — checks out to its ``result`` state) or ``refuse``
    (each of ``revisions`` — ``{revision}`` — is refused with ``code``).

    A merge case (family ``merge``; ``files.ours``, ``files.base``, ``files.theirs``, SPEC.md §13.7) is
    merged with ``merge`` (``{strategy, all}``); its ``expect`` holds ``merge``: ``result`` (exit 0, the
    output equals ``files.result`` bit for bit), ``conflicts`` (exit 1, no output, MD804 for exactly the
    parameters ``conflicts``) or ``unreadable`` (exit 2, no output).
    """

    id: str
    family: str
    section: str
    description: str
    files: Mapping[str, str]
    expect: Mapping[str, Any]
    features: tuple[str, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)
    corpus: Path = Path(".")
    merge: Mapping[str, Any] = field(default_factory=dict)

    def path(self, key: str) -> Path:
        return self.corpus / self.files[key]

    @property
    def is_repository(self) -> bool:
        """A repository case (SPEC.md §13): checkouts of revisions, no validate or apply."""
        return "repository" in self.files

    @property
    def is_merge(self) -> bool:
        """A merge case (SPEC.md §13.7): three checkpoints merged by `merge-file`, no validate or apply."""
        return self.family == "merge"

    @property
    def code(self) -> str | None:
        return self.expect.get("code")

    @property
    def apply_code(self) -> str | None:
        """The code apply must report: for a valid file apply refuses (§9.2, §9.3, §10)."""
        if self.is_repository or self.is_merge:
            return None
        return self.code if self.expect["validate"] == "valid" and self.expect["apply"] == "refuse" else None

    def expected_text(self) -> str:
        e = self.expect
        if self.is_merge:
            how = self.merge.get("strategy") or "three-way"
            how += " --all" if self.merge.get("all") else ""
            if e["merge"] == "result":
                return f"merged ({how})"
            if e["merge"] == "conflicts":
                return f"MD804 × {len(e['conflicts'])} ({how})"
            return "unreadable (exit 2)"
        if self.is_repository:
            n = len(e["revisions"])
            what = f"{n} checkout{'s' if n != 1 else ''}"
            if e["checkout"] == "result":
                return what + (" (§7.5 bound)" if any(r.get("tolerance") for r in e["revisions"]) else "")
            return f"{what} refused {e['code']}"
        if e["validate"] == "valid":
            v = "valid" + "".join(f"+{w}" for w in e.get("warnings", []))
        else:
            v = e["code"]
        if e["apply"] == "result":
            a = "applied" + (" (§7.5 bound)" if e.get("tolerance") else "")
        else:
            a = f"refused {self.apply_code}" if self.apply_code else "refused"
        return f"{v}, {a}"


@dataclass(frozen=True)
class Manifest:
    corpus: Path
    cases: tuple[Case, ...]
    features: Mapping[str, str]
    limits: Mapping[str, Mapping[str, Any]]
    not_applicable: Mapping[str, str]
    blocked: tuple[Mapping[str, str], ...]
    raw: Mapping[str, Any]

    def case(self, case_id: str) -> Case:
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(case_id)


def _case(raw: Mapping[str, Any], corpus: Path, features: Mapping[str, str], limits: Mapping[str, Any]) -> Case:
    def need(cond: bool, why: str) -> None:
        if not cond:
            raise ManifestError(f"case {raw.get('id')!r}: {why}")

    need(isinstance(raw.get("id"), str) and raw["id"], "no id")
    need(raw.get("family") in FAMILIES, f"family must be one of {FAMILIES}")
    files: Any = raw.get("files")
    expect: Any = raw.get("expect")
    if isinstance(files, dict) and "repository" in files:
        _check_repository_case(raw, need)
        return _make_case(raw, corpus, features, limits, need)
    if raw["family"] == "merge":
        _check_merge_case(raw, need)
        return _make_case(raw, corpus, features, limits, need)
    need(isinstance(files, dict) and isinstance(files.get("diff"), str), "no files.diff")
    need(isinstance(expect, dict), "no expect")
    need(expect.get("validate") in VALIDATE_OUTCOMES, f"expect.validate must be one of {VALIDATE_OUTCOMES}")
    need(expect.get("apply") in APPLY_OUTCOMES, f"expect.apply must be one of {APPLY_OUTCOMES}")
    need(isinstance(files.get("base"), str), "no files.base (apply needs one)")
    if expect["validate"] != "valid" or expect["apply"] == "refuse":
        need(isinstance(expect.get("code"), str) and bool(_CODE.fullmatch(expect["code"])), "no rule code")
    if expect["validate"] != "valid" and "codes" in expect:  # every code the file makes a validator report
        codes, warnings = expect["codes"], expect.get("warnings", [])
        need(isinstance(codes, list) and all(isinstance(c, str) and _CODE.fullmatch(c) for c in codes)
             and expect["code"] in codes, "expect.codes must be a list of rule codes that holds expect.code")
        need(isinstance(warnings, list) and all(isinstance(c, str) and _CODE.fullmatch(c) for c in warnings),
             "expect.warnings must be a list of rule codes")
    if "core" in expect:  # SPEC.md §12.2: the outcomes a core implementation may give, one of them whole
        core = expect["core"]
        need(isinstance(core, list) and bool(core), "expect.core must be a non-empty list of outcomes")
        for o in core:
            need(isinstance(o, dict) and o.get("validate") in VALIDATE_OUTCOMES and o.get("apply") in APPLY_OUTCOMES
                 and all(isinstance(c, str) and _CODE.fullmatch(c) for c in o.get("codes", []) + o.get("warnings", [])),
                 "an expect.core outcome needs validate, apply and lists of rule codes")
            need(o["validate"] == "valid" or bool(o.get("codes")), "an invalid expect.core outcome needs codes")
            need(o["apply"] == "refuse" or isinstance(o.get("parameters"), dict),
                 "an applied expect.core outcome needs parameters")
    if expect["apply"] == "result":
        need(isinstance(files.get("result"), str), "no files.result")
        tol = expect.get("tolerance")
        need(tol is None or (isinstance(tol, dict) and tol.get("kind") == "low_rank" and "bounds" in tol),
             "tolerance must be null or a low_rank bounds file")
    return _make_case(raw, corpus, features, limits, need)


def _check_repository_case(raw: Mapping[str, Any], need) -> None:
    files: Any = raw["files"]
    expect: Any = raw.get("expect")
    need(isinstance(files["repository"], str), "files.repository must be a path")
    need(isinstance(expect, dict) and expect.get("checkout") in CHECKOUT_OUTCOMES,
         f"expect.checkout must be one of {CHECKOUT_OUTCOMES}")
    revisions = expect.get("revisions")
    need(isinstance(revisions, list) and revisions, "no expect.revisions")
    for r in revisions:
        need(isinstance(r, dict) and isinstance(r.get("revision"), str) and r["revision"], "a revision without `revision`")
        if expect["checkout"] == "result":
            need(isinstance(r.get("result"), str), f"revision {r['revision']!r}: no result")
            tol = r.get("tolerance")
            need(tol is None or (isinstance(tol, dict) and tol.get("kind") == "low_rank" and "bounds" in tol),
                 "tolerance must be null or a low_rank bounds file")
    if expect["checkout"] == "refuse":
        need(isinstance(expect.get("code"), str) and bool(_CODE.fullmatch(expect["code"])), "no rule code")


def _check_merge_case(raw: Mapping[str, Any], need) -> None:
    files: Any = raw.get("files")
    expect: Any = raw.get("expect")
    options: Any = raw.get("merge", {})
    need(isinstance(files, dict) and all(isinstance(files.get(k), str) for k in ("ours", "base", "theirs")),
         "a merge case needs files.ours, files.base and files.theirs")
    need(isinstance(options, dict) and set(options) <= {"strategy", "all"}
         and (options.get("strategy") is None or isinstance(options["strategy"], str) and options["strategy"])
         and isinstance(options.get("all", False), bool) and (options.get("strategy") or not options.get("all")),
         "merge must be {strategy: null or a strategy, all: a boolean, true only with a strategy}")
    need(isinstance(expect, dict) and expect.get("merge") in MERGE_OUTCOMES, f"expect.merge must be one of {MERGE_OUTCOMES}")
    if expect["merge"] == "result":
        need(isinstance(files.get("result"), str), "no files.result")
    if expect["merge"] == "conflicts":
        conflicts = expect.get("conflicts")
        need(expect.get("code") == "MD804", "a merge with conflicts expects code MD804")
        need(isinstance(conflicts, list) and conflicts and all(isinstance(c, str) for c in conflicts)
             and len(set(conflicts)) == len(conflicts), "expect.conflicts must be a list of distinct parameter names")


def _make_case(raw: Mapping[str, Any], corpus: Path, features: Mapping[str, str], limits: Mapping[str, Any],
               need) -> Case:
    feats = tuple(raw.get("features", ()))
    need(all(f in features for f in feats), "names a feature the manifest does not define")
    lims = dict(raw.get("limits", {}))
    need(all(k in limits and isinstance(v, int) for k, v in lims.items()), "names an unknown limit")
    return Case(raw["id"], raw["family"], str(raw.get("section", "")), str(raw.get("description", "")),
                dict(raw["files"]), dict(raw["expect"]), feats, lims, corpus, dict(raw.get("merge", {})))


def load_manifest(corpus: str | Path | None = None) -> Manifest:
    """The manifest of the corpus at ``corpus`` (default: :func:`default_corpus`)."""
    corpus = Path(corpus) if corpus is not None else default_corpus()
    path = corpus / "manifest.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist; generate it with `python tools/gen_conformance.py`") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path} is not JSON: {exc}") from None
    if raw.get("format") != "mdiff-conformance" or raw.get("manifest_version") != 1:
        raise ManifestError(f"{path} is not an mdiff conformance manifest of version 1")
    features = dict(raw.get("features", {}))
    limits = dict(raw.get("limits", {}))
    cases = tuple(_case(c, corpus, features, limits) for c in raw.get("cases", []))
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ManifestError("case ids are not unique")
    return Manifest(corpus, cases, features, limits, dict(raw.get("not_applicable", {})),
                    tuple(raw.get("blocked", ())), raw)
