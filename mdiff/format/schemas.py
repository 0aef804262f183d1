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
