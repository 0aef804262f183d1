"""How commands print: sizes, a result as JSON or as text, and a .mdiff file's description."""

from __future__ import annotations

import argparse
import json
import sys

from mdiff.words import count, format_size

__all__ = ["count", "differ", "format_size", "print_description", "print_result"]


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
        print(json.dumps(info, indent=1))
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
