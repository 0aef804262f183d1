#!/usr/bin/env python3
"""Write schemas/ from the Python definitions that own them: the JSON Schemas (the commit
module, each update type's module) and the normative ONNX models (schemas/onnx/, each update
type's module). `--check` exits 1 if a committed file differs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mdiff.format import commit, layout  # noqa: E402
from mdiff.format.onnx_functions import serialize  # noqa: E402
from mdiff.updates import ALL_TYPES, REGISTRY  # noqa: E402
from mdiff.updates.embedded import DEFINITION_SCHEMA  # noqa: E402


def schema_files() -> dict[Path, bytes]:
    schemas = {ROOT / "schemas" / "commit.schema.json": commit.SCHEMA}
    for name, kind in REGISTRY.items():
        schemas[ROOT / "schemas" / "updates" / f"{name}.schema.json"] = kind.schema
    schemas[ROOT / "schemas" / "update-type-definition.schema.json"] = DEFINITION_SCHEMA
    schemas[ROOT / "schemas" / "layout.schema.json"] = layout.SCHEMA
    files = {path: (json.dumps(schema, indent=2, ensure_ascii=False) + "\n").encode() for path, schema in schemas.items()}
    for kind in ALL_TYPES:  # every version of every type
        for name, model in kind.onnx_models().items():
            files[ROOT / "schemas" / "onnx" / f"{name}.onnx"] = serialize(model)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    files = schema_files()
    committed = set((ROOT / "schemas").rglob("*.json")) | set((ROOT / "schemas").rglob("*.onnx"))
    stale += sorted(committed - set(files)) if args.check else []
    for path, data in files.items():
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for path in stale:
        print(f"stale: {path.relative_to(ROOT)} (run tools/gen_schemas.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
