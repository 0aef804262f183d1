"""JSON Schema validation with the semantics the schemas are written for.

JSON Schema's ``pattern`` is an ECMA-262 regular expression, where ``$``
matches only at the very end of the string. Python's ``re`` also lets ``$``
match before a final newline, so ``"…Z\n"`` would pass a date pattern here and
fail in every other language. Patterns are run with ``$`` meaning end of input.
"""

from __future__ import annotations

import re
from functools import lru_cache

import jsonschema
from jsonschema import ValidationError


@lru_cache(maxsize=None)
def _compile(pattern: str) -> re.Pattern:
    # Every unescaped ``$`` becomes ``\\Z``: mdiff's schemas use ``$`` only as an anchor.
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _compile(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern})


def ecma_validator(schema: dict) -> jsonschema.protocols.Validator:
    return _Validator(schema)


_compiled: dict[int, jsonschema.protocols.Validator] = {}


def _validator_for(schema: dict) -> jsonschema.protocols.Validator:
    """One validator per schema object: building one costs more than validating a small document."""
    validator = _compiled.get(id(schema))
    if validator is None or validator.schema is not schema:
        validator = _compiled[id(schema)] = _Validator(schema)
    return validator


MAX_REPORTED = 8  # a hostile document can break a schema a million times; a few say enough


def first_errors(schema: dict, instance) -> list[str]:
    """Up to MAX_REPORTED messages ("location: problem"), found lazily; [] when ``instance`` is valid.

    A document nested too deeply for the validator to walk is reported, not raised.
    """
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
