"""JSON Schema validation with the semantics the schemas are written for.

JSON Schema's ``pattern`` is an ECMA-262 regular expression, where ``$``
matches only at the very end of the string. Python's ``re`` also lets ``$``
match before a final newline, so ``"…Z\n"`` would pass a date pattern here and
fail in every other language. Patterns are run with ``$`` meaning end of input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use (~30 ms): a valid document is recognised by the compiled check
    import jsonschema
    from jsonschema import ValidationError

Json = Any  # a JSON document or value, as json.loads gives it: None, bool, int, float, str, list or dict
Check = Callable[[Json], bool]  # a compiled schema: is this document valid?


@lru_cache(maxsize=None)
def _compile(pattern: str) -> re.Pattern:
    # Every unescaped ``$`` becomes ``\\Z``: mdiff's schemas use ``$`` only as an anchor.
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _pattern(validator: jsonschema.protocols.Validator, pattern: str, instance: Json,
             schema: dict[str, Json]) -> Iterator[ValidationError]:
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not _compile(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@lru_cache(maxsize=1)
def _validator_class() -> type[jsonschema.protocols.Validator]:
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern})


def ecma_validator(schema: dict) -> jsonschema.protocols.Validator:
    return _validator_class()(schema)


_compiled: dict[int, jsonschema.protocols.Validator] = {}


def _validator_for(schema: dict) -> jsonschema.protocols.Validator:
    """One validator per schema object: building one costs more than validating a small document."""
    validator = _compiled.get(id(schema))
    if validator is None or validator.schema is not schema:
        validator = _compiled[id(schema)] = ecma_validator(schema)
    return validator


MAX_REPORTED = 8  # a hostile document can break a schema a million times; a few say enough


def first_errors(schema: dict, instance: Json) -> list[str]:
    """Up to MAX_REPORTED messages ("location: problem"), found lazily; [] when ``instance`` is valid.

    A document nested too deeply for the validator to walk is reported, not raised. A valid document
    is recognised by the schema's compiled check (:func:`compiled_check`) where there is one: a file
    holds one `update` per parameter, and jsonschema spends ~200 µs on each; the messages of an
    invalid one always come from jsonschema.
    """
    check = _check_for(schema)
    if check is not None:
        try:
            if check(instance):
                return []
        except (_Unsure, RecursionError):
            pass
    messages = []
    try:
        for error in _validator_for(schema).iter_errors(instance):
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            messages.append(f"{where}: {error.message[:200]}")
            if len(messages) == MAX_REPORTED:
                break
    except RecursionError:
        messages.append("(root): nested too deeply to check")
    return messages


# ---------------------------------------------------------------- the compiled check
#
# The subset of JSON Schema 2020-12 that mdiff's schemas use, compiled into nested closures that say
# only whether a document is valid. It mirrors jsonschema's semantics keyword by keyword (type,
# const, enum, required, properties, additionalProperties, items, maxItems, minLength, minimum,
# pattern with ECMA-262 `$`, not, uniqueItems) and is held to them by tests/test_scale.py, which
# runs both on every case of conformance/schema-tests. A schema with any other keyword is not
# compiled: jsonschema checks it. Where the check cannot decide cheaply it raises _Unsure, and
# jsonschema decides.

_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "examples", "default"})


class _Unsure(Exception):
    pass


class _NotCompilable(Exception):
    pass


def _is_integer(value: Json) -> bool:
    return (type(value) is int) or (type(value) is float and value.is_integer())


_TYPE_TESTS: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer())),
    "number": lambda v: not isinstance(v, bool) and isinstance(v, (int, float)),
}


def _json_equal(a: Json, b: Json) -> bool:
    """jsonschema's equality: true and 1 differ, 1 and 1.0 do not, containers compare element-wise."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(k in b and _json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return a == b


def _compile_check(schema: Json) -> Check:
    """A function instance → bool for ``schema``; _NotCompilable when it uses another keyword."""
    if schema is True:
        return lambda _: True
    if schema is False:
        return lambda _: False
    if not isinstance(schema, dict):
        raise _NotCompilable(repr(schema)[:40])
    tests: list[Check] = []
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS:
            continue
        if keyword == "additionalProperties" and "properties" in schema:
            continue  # compiled with properties, below
        tests.append(_compile_keyword(keyword, value, schema))

    if len(tests) == 1:
        return tests[0]

    def check(instance: Json) -> bool:
        for test in tests:
            if not test(instance):
                return False
        return True

    return check


def _compile_keyword(keyword: str, value: Json, schema: dict[str, Json]) -> Check:
    if keyword == "type":
        kinds = [value] if isinstance(value, str) else value
        if not isinstance(kinds, list) or not all(k in _TYPE_TESTS for k in kinds):
            raise _NotCompilable(f"type {value!r}")
        type_tests = [_TYPE_TESTS[k] for k in kinds]
        if len(type_tests) == 1:
            return type_tests[0]
        return lambda v: any(t(v) for t in type_tests)
    if keyword == "const":
        return lambda v: _json_equal(v, value)
    if keyword == "enum":
        if not isinstance(value, list):
            raise _NotCompilable("enum")
        if all(isinstance(e, str) for e in value):
            allowed = frozenset(value)
            return lambda v: isinstance(v, str) and v in allowed
        return lambda v: any(_json_equal(v, e) for e in value)
    if keyword == "required":
        if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
            raise _NotCompilable("required")
        return lambda v: not isinstance(v, dict) or all(k in v for k in value)
    if keyword in ("properties", "additionalProperties"):
        return _compile_properties(schema)
    if keyword == "items":
        if "prefixItems" in schema:
            raise _NotCompilable("prefixItems")
        item = _compile_check(value)
        return lambda v: not isinstance(v, list) or all(item(x) for x in v)
    if keyword in ("maxItems", "minLength") and _is_integer(value):
        limit = int(value)
        if keyword == "maxItems":
            return lambda v: not isinstance(v, list) or len(v) <= limit
        return lambda v: not isinstance(v, str) or len(v) >= limit
    if keyword == "minimum" and _TYPE_TESTS["number"](value):
        return lambda v: not _TYPE_TESTS["number"](v) or v >= value
    if keyword == "pattern" and isinstance(value, str):
        search = _compile(value).search
        return lambda v: not isinstance(v, str) or search(v) is not None
    if keyword == "not":
        inner = _compile_check(value)
        return lambda v: not inner(v)
    if keyword == "uniqueItems" and isinstance(value, bool):
        if not value:
            return lambda v: True

        def unique(v: Json) -> bool:
            if not isinstance(v, list):
                return True
            if all(isinstance(x, str) for x in v):
                return len(set(v)) == len(v)
            raise _Unsure
        return unique
    raise _NotCompilable(keyword)


def _compile_properties(schema: dict[str, Json]) -> Check:
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or "patternProperties" in schema:
        raise _NotCompilable("properties")
    checks = {name: _compile_check(sub) for name, sub in properties.items()}
    extra = schema.get("additionalProperties", True)
    extra_check = None if extra is True else _compile_check(extra)

    def check(v: Json) -> bool:
        if not isinstance(v, dict):
            return True
        for key, item in v.items():
            sub = checks.get(key)
            if sub is not None:
                if not sub(item):
                    return False
            elif extra_check is not None and not extra_check(item):
                return False
        return True

    return check


_checks: dict[int, tuple[dict, Check | None]] = {}
_MAX_CACHED = 256


def _check_for(schema: dict) -> Check | None:
    """The compiled check of ``schema`` (cached per schema object), or None when it is not compilable."""
    cached = _checks.get(id(schema))
    if cached is None or cached[0] is not schema:
        try:
            check: Check | None = _compile_check(schema)
        except (_NotCompilable, re.error, RecursionError):
            check = None
        if len(_checks) >= _MAX_CACHED:  # schemas of types files define come and go with the files
            _checks.clear()
        cached = _checks[id(schema)] = (schema, check)
    return cached[1]


def compiled_check(schema: Json) -> Check | None:
    """For tests: the compiled check of ``schema`` (True/False per document; _Unsure may escape), or None."""
    try:
        return _compile_check(schema)
    except (_NotCompilable, re.error, RecursionError):
        return None
