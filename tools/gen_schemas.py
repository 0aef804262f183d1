#!/usr/bin/env python3
"""Write schemas/*.json from the Python definitions that own them (the commit module and
each update type's module). `--check` exits 1 if a committed schema differs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mdiff.format import commit  # noqa: E402
from mdiff.updates import REGISTRY  # noqa: E402


def schema_files() -> dict[Path, str]:
    files = {ROOT / "schemas" / "commit.schema.json": commit.SCHEMA}
    for name, kind in REGISTRY.items():
        files[ROOT / "schemas" / "updates" / f"{name}.schema.json"] = kind.schema
    return {path: json.dumps(schema, indent=2, ensure_ascii=False) + "\n" for path, schema in files.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for path, text in schema_files().items():
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"stale: {path.relative_to(ROOT)} (run tools/gen_schemas.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
