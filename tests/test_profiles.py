"""Conformance profiles (SPEC.md §12.2, issue 28): every hostile case states what a core implementation
must report, and tests/core_impl/mdiff_core.py -- an implementation through h5py alone, isolated, that
does not import mdiff -- passes every one of them, judged as core."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mdiff.conformance import CommandImplementation, load_manifest, run_cases
from mdiff.conformance.runner import profile_of

ROOT = Path(__file__).resolve().parents[1]
CORE = [sys.executable, str(ROOT / "tests" / "core_impl" / "mdiff_core.py")]

pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


def test_every_hostile_case_states_core_outcomes(manifest) -> None:
    hostile = [c for c in manifest.cases if c.family == "hostile"]
    assert len(hostile) == 151
    assert all(c.expect.get("core") for c in hostile)
    assert not [c.id for c in manifest.cases if c.family != "hostile" and "core" in c.expect]
    differ = sorted(c.id for c in hostile if c.expect["core"] != [
        {k: c.expect[k] for k in ("validate", "codes", "warnings", "apply")}])
    assert len(differ) == 23
    applied = sorted(c.id for c in hostile if any(o["apply"] == "result" for o in c.expect["core"]))
    assert applied == ["MD505-float_byte_order_bit_6", "MD505-integer_reserved_bit",
                       "MD509-single_chunk_size_past_2_32", "MD513-dense_attribute_hash_not_its_name",
                       "MD513-group_info_unreadable", "MD513-root_group_info_unreadable"]


def test_profile_is_the_claim() -> None:
    assert profile_of(None) == "hardened"  # no `features` command claims every feature
    assert profile_of(frozenset({"hardened", "merge"})) == "hardened"
    assert profile_of(frozenset({"configurable-limits"})) == "core"
    done = subprocess.run([*CORE, "features"], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == ["configurable-limits", "checkpoint-rule-codes", "embedded-update-types", "apply-many"]


def test_core_implementation_passes_the_whole_corpus_as_core(manifest) -> None:
    """Every case of every family, embedded update types included; only the features it does not claim
    (repository, merge: optional contract commands) are skipped. Files are validated and applied 16 to a
    command (each still in a child process of its own), as the runner's --batch does, to save start-ups."""
    impl = CommandImplementation(CORE)
    results = run_cases(impl, manifest, lambda c: True, jobs=2, batch=16)
    failed = [(r.id, r.got, r.problems) for r in results if r.status == "fail"]
    assert failed == []
    passed = Counter(r.family for r in results if r.status == "pass")
    assert passed == {"hostile": 151, "valid": 45, "invalid": 179}
    skipped = {c.id: c for c in manifest.cases if c.id in {r.id for r in results if r.status == "skip"}}
    assert len(skipped) == 58  # 54 + the four repository cases of format 2 (issue 31)
    assert {f for c in skipped.values() for f in c.features} == {"repository", "merge"}


def test_core_implementation_fails_the_hardened_outcomes_it_cannot_reach(manifest) -> None:
    """Judged as hardened, the core implementation fails exactly the cases whose core outcome differs."""
    differ = {c.id for c in manifest.cases if c.family == "hostile" and c.expect["core"] != [
        {k: c.expect[k] for k in ("validate", "codes", "warnings", "apply")}]}
    pick = ["MD505-integer_reserved_bit", "MD513-group_info_unreadable", "MD509-contiguous_storage_at_address_0",
            "MD505-float_padding_ones", "MD500-soft_link"]
    impl = CommandImplementation(CORE)
    results = {r.id: r for r in run_cases(impl, manifest, lambda c: c.id in pick, jobs=2, profile="hardened")}
    assert {i for i, r in results.items() if r.status == "fail"} == {i for i in pick if i in differ}
    assert {i for i in pick if i in differ} == {"MD505-integer_reserved_bit", "MD513-group_info_unreadable",
                                                 "MD509-contiguous_storage_at_address_0"}
