"""How commands print: sizes, a result as JSON or as text, and a .mdiff file's description."""

from __future__ import annotations

import argparse
import json
import sys
from json.encoder import encode_basestring_ascii

from mdiff.words import count, format_size

__all__ = ["count", "differ", "dumps_indented", "format_size", "print_description", "print_result"]


class _Unusual(Exception):
    """A value :func:`dumps_indented` leaves to json.dumps (a key that is not a string, a type JSON does not know)."""


def dumps_indented(value: object) -> str:
    """``json.dumps(value, indent=1)``, character for character, without its pure-Python encoder's generators
    (json encodes an indented document in Python, not C: 1.2 s of `dump --json` of 10^5 parameters). Anything
    but JSON's own types (str, int, float, bool, None, list, tuple, dict with str keys) is left to json.dumps."""
    parts: list[str] = []
    try:
        _encode(value, parts, "\n")
    except (_Unusual, RecursionError):
        return json.dumps(value, indent=1)
    return "".join(parts)


def _leaf(value: object) -> str:
    """A scalar as json.dumps writes it (ensure_ascii, NaN and the infinities allowed)."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    raise _Unusual


def _encode(value: object, parts: list[str], newline: str) -> None:
    """Append ``value`` indented as json.dumps(indent=1) does, ``newline`` being a line break and the indent of
    its own level."""
    if isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        inner = newline + " "
        separator = "{" + inner
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual
            parts.append(separator)
            parts.append(encode_basestring_ascii(key))
            parts.append(": ")
            _member(item, parts, inner)
            separator = "," + inner
        parts.append(newline + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        inner = newline + " "
        separator = "[" + inner
        for item in value:
            parts.append(separator)
            _member(item, parts, inner)
            separator = "," + inner
        parts.append(newline + "]")
    else:
        parts.append(_leaf(value))


def _member(item: object, parts: list[str], inner: str) -> None:
    """A dict's value or a list's item: the common leaves at once, the rest by :func:`_encode`."""
    if type(item) is str:
        parts.append(encode_basestring_ascii(item))
    elif type(item) is int:
        parts.append(int.__repr__(item))
    else:
        _encode(item, parts, inner)


def differ(parameters: int, files: int) -> str:
    """"1 parameter differs", "3 parameters and 1 file differ" (files named only when some differ)."""
    what = count(parameters, "parameter") + (f" and {count(files, 'file')}" if files else "")
    return f"{what} {'differs' if parameters == 1 and not files else 'differ'}"


def print_result(args: argparse.Namespace, data, text: str) -> None:
    """``data`` as one line of JSON with --json, else ``text`` — unless -q: a summary is not printed then."""
    if args.json:
        print(json.dumps(data))
    elif not quiet(args):
        print(text)


def quiet(args: argparse.Namespace) -> bool:
    """Whether -q asks for no summary (every command takes it: cli/dispatch.py)."""
    return bool(getattr(args, "quiet", False))


def print_description(args: argparse.Namespace, info: dict) -> int:
    """What describe() says of a file, as `dump` (and a repository's `show`) prints it."""
    if args.json:
        print(dumps_indented(info))
        return 0
    c = info["commit"]
    print(f"file     {info['file']}  (mdiff {info['format_version']}, {format_size(info['totals']['file_bytes'])})")
    print(f"author   {c['author']['name']}" + (f" <{c['author']['email']}>" if c['author']['email'] else ""))
    print(f"date     {c['date']}")
    print(f"parents  {' '.join(c['parents']) or '(root commit)'}")
    print(f"writer   {c['writer']['name']} {c['writer']['version']}")
    for k, v in sorted(c["meta"].items()):
        print(f"meta     {k}={v}")
    print()
    for line in c["message"].splitlines() or ["(no message)"]:
        print(f"    {line}")
    print()
    rows = [("NAME", "TYPE", "SHAPE", "DTYPE", "STORED", "DETAILS")]
    for p in info["parameters"]:
        details = []
        if "nnz" in p:
            details.append(f"nnz={p['nnz']} density={p['density']:.4g}")
        if "rank" in p:
            details.append(f"rank={p['rank']} scale={p['scale']:g}")
        if "rel_change" in p:
            details.append(f"rel_change={p['rel_change']:.3g}")
        if p.get("lossy"):
            details.append("LOSSY")
        rows.append((p["name"], p["type"], "x".join(map(str, p["shape"])) or "()", p["dtype"], format_size(p["stored_bytes"]), " ".join(details)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row, r in enumerate(rows):
        print("  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5])
        if row and args.values:
            for key, vals in info["parameters"][row - 1]["values"].items():
                print(f"    {key}: {vals}")
    if info["files"]:
        print(f"\nfiles beside the weights ({len(info['files'])}):")
        for f in info["files"]:
            size = f"{format_size(f['size'])}, {format_size(f['stored_bytes'])} stored" if f["type"] == "replace" else "removed"
            print(f"  {f['type']:<8} {f['path']}  ({size})")
    layout = info["layout"]
    if layout is not None:
        shards = "removed" if layout["type"] == "delete" else (
            count(len(layout["files"]), "file")
            + (f" with index {layout['index']}" if layout["index"] else f": {', '.join(layout['files'])}"))
        print(f"\nweights layout: {shards}")
    t = info["totals"]
    by_type = ", ".join(f"{n} {k}" for k, n in t["by_type"].items())
    print(f"\n{count(t['parameters'], 'parameter')} ({by_type or 'none'}); {format_size(t['stored_bytes'])} stored, "
          f"{format_size(t['data_bytes'])} uncompressed")
    for w in info["warnings"]:
        print(f"warning {w['code']} {w['path']}: {w['message']}", file=sys.stderr)
    return 0
