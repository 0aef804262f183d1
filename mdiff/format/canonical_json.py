"""SPEC.md Appendix A: the canonical JSON form writers use for attributes.

Sorted keys, no insignificant whitespace, UTF-8 without escaping non-ASCII.
Canonical form is what makes two writes of the same content byte-identical;
readers accept any valid JSON.
"""

from __future__ import annotations

import json
import math
import re
from sys import intern
from typing import Any


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _finite_float(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise ValueError(f"{token[:40]} overflows binary64")
    return value


MAX_DEPTH = 512  # §4.1: no value lies inside more than this many arrays and objects
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_VALUE_START = frozenset('[{"-0123456789tfnNI')


def _check_depth(text: str) -> None:
    """ValueError when a value lies inside more than MAX_DEPTH arrays and objects (§4.1)."""
    depth = 0
    for c in _STRING.sub('"', text):  # a string is one value; brackets inside it do not nest
        if c in _VALUE_START and depth > MAX_DEPTH:
            raise ValueError(f"JSON nested more than {MAX_DEPTH} levels deep")
        if c == "[" or c == "{":
            depth += 1
        elif c == "]" or c == "}":
            depth -= 1


MAX_NUMBER = 4096  # §4.1: characters of one number token
_LONG_NUMBER = re.compile(r"-?[0-9][0-9.eE+-]{%d,}" % MAX_NUMBER)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")  # only then can a string hold one
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any) -> bool:
    """Whether a string of ``value`` (a member name included) holds a surrogate: json.loads joins an escaped
    pair into its character, so any left is lone (§4.1)."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_SURROGATE.search(k) is not None or _lone_surrogate(v) for k, v in value.items())
    return False


def check_bounds(text: str) -> None:
    """ValueError when a value of ``text`` lies inside more than 512 arrays and objects or a number has more than
    4096 characters (§4.1): what :func:`loads` refuses in a text that :func:`dumps` writes all the same (a writer
    checks its attributes with this before it writes them, §8.3). Cheap unless the text could break either."""
    if text.count("[") + text.count("{") > MAX_DEPTH:  # only then can a value lie that deep
        _check_depth(text)
    if len(text) > MAX_NUMBER and _LONG_NUMBER.search(_STRING.sub('"', text)):
        raise ValueError(f"a number of more than {MAX_NUMBER} characters")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError(f"duplicate key {k!r}")
        obj[intern(k)] = v  # a file holds one `update` per parameter, all with the same few keys
    return obj


# json.loads with these arguments makes a decoder per call (a file holds one `update` per parameter: 10^5)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_no_duplicates)


def loads(text: str) -> Any:
    """Strict JSON (§4.1): NaN/Infinity, duplicate keys, a value inside more than 512 arrays and objects, a number of
    more than 4096 characters, a byte-order mark before the value and a string holding a lone surrogate (an escape
    `\\ud800` no UTF-8 text can hold) are refused with ValueError."""
    check_bounds(text)
    try:
        if isinstance(text, str):  # json.loads's own check of a str, then its decoding, by one decoder for all
            if text.startswith("\ufeff"):
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
            value = _DECODER.decode(text)
        else:
            value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                               object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if "\\u" in text or not text.isascii():
        if _SURROGATE_ESCAPE.search(text) and _lone_surrogate(value):
            raise ValueError("a string holds a lone surrogate (an escape such as \\ud800 that is not half of a pair), "
                             "which no UTF-8 text can hold")
    return value
