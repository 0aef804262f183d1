"""The JSON Schemas of schemas/ against conformance/schema-tests/ (JSON-Schema-Test-Suite form:
``[{"description", "schema", "tests": [{"description", "data", "valid"}]}]``), validated with
mdiff's own validator, which gives ``pattern`` ECMA-262 semantics (``$`` is the end of input).

Every schema file in schemas/ must have a suite; a suite's ``schema`` is the schema itself or
``{"$ref": "<the schema's $id>"}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mdiff.format.schemas import ecma_validator

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"
SUITES = ROOT / "conformance" / "schema-tests"


def _schemas() -> dict[str, dict]:
    """$id -> schema, for every schema file in schemas/."""
    out = {}
    for path in sorted(SCHEMAS.rglob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert "$id" in schema, f"{path} has no $id"
        out[schema["$id"]] = schema
    return out


def _suites() -> dict[str, list]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(SUITES.glob("*.json"))}


SCHEMA_BY_ID = _schemas()
SUITE_FILES = _suites()


def _resolve(schema) -> tuple[dict, str | None]:
    """(the schema to validate with, the $id it names, if any)."""
    if isinstance(schema, dict) and set(schema) == {"$ref"}:
        ref = schema["$ref"]
        assert ref in SCHEMA_BY_ID, f"$ref {ref!r} names no schema in schemas/"
        return SCHEMA_BY_ID[ref], ref
    return schema, schema.get("$id") if isinstance(schema, dict) else None


def _cases():
    for file, groups in SUITE_FILES.items():
        for g, group in enumerate(groups):
            for t, test in enumerate(group["tests"]):
                yield pytest.param(group, test, id=f"{file}:{g}:{t}:{test['description'][:60]}")


def test_suites_are_well_formed():
    assert SUITE_FILES, f"no suites in {SUITES}"
    for file, groups in SUITE_FILES.items():
        assert isinstance(groups, list) and groups, file
        for group in groups:
            assert set(group) == {"description", "schema", "tests"}, (file, set(group))
            assert isinstance(group["description"], str) and group["description"], file
            _resolve(group["schema"])
            assert group["tests"], (file, group["description"])
            for test in group["tests"]:
                assert set(test) == {"description", "data", "valid"}, (file, test)
                assert isinstance(test["valid"], bool), (file, test)
            descriptions = [t["description"] for t in group["tests"]]
            assert len(set(descriptions)) == len(descriptions), (file, group["description"], "duplicate descriptions")


def test_every_schema_has_a_suite():
    covered = {_resolve(group["schema"])[1] for groups in SUITE_FILES.values() for group in groups}
    missing = sorted(set(SCHEMA_BY_ID) - covered)
    assert not missing, f"schemas without a suite in {SUITES.relative_to(ROOT)}: {missing}"
    # and each suite tests both outcomes
    for file, groups in SUITE_FILES.items():
        outcomes = {t["valid"] for g in groups for t in g["tests"]}
        assert outcomes == {True, False}, (file, outcomes)


def test_schemas_are_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    for sid, schema in SCHEMA_BY_ID.items():
        assert schema.get("$schema") == "https://json-schema.org/draft/2020-12/schema", sid
        Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("group,test", list(_cases()))
def test_schema_suite(group, test):
    schema, _ = _resolve(group["schema"])
    errors = list(ecma_validator(schema).iter_errors(test["data"]))
    assert (not errors) == test["valid"], (
        f"{group['description']} / {test['description']}: expected "
        f"{'valid' if test['valid'] else 'invalid'}, got {[e.message for e in errors] or 'valid'}"
    )
