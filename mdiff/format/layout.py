"""SPEC.md §5.6: the weights layout — which checkpoint file holds which tensors, in what order.

The layout is a JSON document stored as the value of ``/layout`` (a ``uint8`` vector). It changes
no tensor; writers of checkpoints use it (§10.2) to give a model folder, or a single
``.safetensors`` file, its committed shape back. Its ``format`` says what kind of files it describes:
``safetensors`` (``*.safetensors`` with ``*.safetensors.index.json``), or, since revision 11, ``torch``
(PyTorch state dicts ``*.bin`` with ``*.bin.index.json``, as a ``pytorch_model*.bin`` folder holds them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mdiff.errors import InvalidFileError
from mdiff.format import canonical_json
from mdiff.format.paths import collisions, path_problem
from mdiff.format.schemas import first_errors

FORMAT = "safetensors"  # the format of every layout before revision 11, and the default
TORCH = "torch"
SHARD_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
# format → (the suffix of its files' paths, the suffix of its index's path)
SUFFIXES = {FORMAT: (SHARD_SUFFIX, INDEX_SUFFIX), TORCH: (".bin", ".bin.index.json")}

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://mdiff.dev/schemas/layout.schema.json",
    "title": "mdiff weights layout (SPEC.md §5.6)",
    "type": "object",
    "required": ["format", "files"],
    "additionalProperties": False,
    "properties": {
        "format": {"enum": [FORMAT, TORCH]},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "tensors"],
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string"},
                    "tensors": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "metadata": _STRING_MAP,
                },
            },
        },
        "index": {
            "type": "object",
            "required": ["path", "metadata"],
            "additionalProperties": False,
            "properties": {"path": {"type": "string"}, "metadata": {"type": "object"}},
        },
    },
}


@dataclass(frozen=True)
class Shard:
    path: str
    tensors: tuple[str, ...]
    metadata: Mapping[str, str] | None  # the file's __metadata__, when it has one (never for torch files)


@dataclass(frozen=True)
class Layout:
    """A parsed, checked layout (§5.6)."""

    shards: tuple[Shard, ...]
    index_path: str | None = None
    index_metadata: Mapping[str, Any] | None = None
    format: str = FORMAT  # "safetensors" or "torch"

    @property
    def tensors(self) -> set[str]:
        return {name for shard in self.shards for name in shard.tensors}

    def to_json(self) -> dict[str, Any]:
        files = []
        for shard in self.shards:
            entry: dict[str, Any] = {"path": shard.path, "tensors": list(shard.tensors)}
            if shard.metadata is not None:
                entry["metadata"] = dict(shard.metadata)
            files.append(entry)
        doc: dict[str, Any] = {"format": self.format, "files": files}
        if self.index_path is not None:
            doc["index"] = {"path": self.index_path, "metadata": dict(self.index_metadata or {})}
        return doc

    def encode(self) -> bytes:
        """The layout as canonical JSON (Appendix A): the bytes a writer stores."""
        text = canonical_json.dumps(self.to_json())
        problems = layout_problems(canonical_json.loads(text))
        if problems:
            raise ValueError(f"invalid layout: {problems[0]}")
        return text.encode("utf-8")


def layout_problems(doc: Any) -> list[str]:
    """Every way ``doc`` (parsed JSON) breaks §5.6; empty when it is a layout."""
    schema_errors = first_errors(SCHEMA, doc)
    if schema_errors:
        return [f"it breaks schemas/layout.schema.json at {schema_errors[0]}"]
    problems = []
    paths = [f["path"] for f in doc["files"]] + ([doc["index"]["path"]] if "index" in doc else [])
    for path in paths:
        problem = path_problem(path)
        if problem:
            problems.append(f"path {path!r}: {problem}")
    shard_suffix, index_suffix = SUFFIXES[doc["format"]]
    for f in doc["files"]:
        if not f["path"].endswith(shard_suffix):
            problems.append(f"file path {f['path']!r} does not end in {shard_suffix}")
        if doc["format"] == TORCH and "metadata" in f:
            problems.append(f"file {f['path']!r} has metadata, which a torch file cannot hold")
    if "index" in doc and not doc["index"]["path"].endswith(index_suffix):
        problems.append(f"index path {doc['index']['path']!r} does not end in {index_suffix}")
    for path, other, why in collisions(paths):
        problems.append(f"paths {path!r} and {other!r}: {why}")
    names = [name for f in doc["files"] for name in f["tensors"]]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        problems.append(f"tensor {twice[0]!r} is listed twice")
    return problems


def parse(data: bytes | bytearray | memoryview, path: str = "/layout") -> Layout:
    """The layout stored as ``data``; InvalidFileError (MD307) when it is not one."""
    try:
        doc = canonical_json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidFileError("MD307", f"the layout is not a UTF-8 JSON text: {exc}", path) from None
    problems = layout_problems(doc)
    if problems:
        raise InvalidFileError("MD307", f"the layout is malformed: {problems[0]}", path)
    return from_json(doc)


def from_json(doc: Mapping[str, Any]) -> Layout:
    shards = tuple(Shard(f["path"], tuple(f["tensors"]), f.get("metadata")) for f in doc["files"])
    index = doc.get("index")
    return Layout(shards, index["path"] if index else None, index["metadata"] if index else None, doc["format"])


def single_file(tensors: Sequence[str], metadata: Mapping[str, str] | None, path: str = "model.safetensors") -> Layout:
    """The layout of one ``.safetensors`` file (§10.1: as a folder holding it as model.safetensors)."""
    return Layout((Shard(path, tuple(tensors), dict(metadata) if metadata is not None else None),))
