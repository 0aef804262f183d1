"""SPEC.md §7.8: the group `/update_types`, where a file defines update types of its own."""

from __future__ import annotations

import numpy as np

from mdiff.errors import InvalidFileError
from mdiff.format import canonical_json
from mdiff.format.findings import Finding
from mdiff.format.constants import ATTR_DEFINITION, UPDATE_TYPES_GROUP
from mdiff.hdf5walk.limits import Limits
from mdiff.format.names import decode_name
from mdiff.format.schemas import first_errors
from mdiff.format.parameters import Datasets
from mdiff.hdf5walk.walk import Inventory
from mdiff.updates import REGISTRY
from mdiff.updates.base import UpdateType

UPDATE_TYPES_PATH = "/" + UPDATE_TYPES_GROUP


def parse_update_types(inventory: Inventory, datasets: Datasets, limits: Limits) -> tuple[dict[str, UpdateType], list[Finding]]:
    container = inventory.objects.get(UPDATE_TYPES_PATH)
    if container is None:
        return {}, []
    if container.kind != "group":
        return {}, [Finding("MD420", UPDATE_TYPES_PATH, "`/update_types` must be a group")]
    findings = [Finding("MD303", UPDATE_TYPES_PATH, f"unknown attribute {a!r}") for a in sorted(container.attrs)]
    types: dict[str, UpdateType] = {}
    for link in container.members:
        path = f"{UPDATE_TYPES_PATH}/{link}"
        if inventory.objects.refused(path):
            continue  # reported once, under §8 (SPEC §12.1)
        try:
            name = decode_name(link)
        except InvalidFileError as exc:
            findings.append(Finding("MD302", path, exc.message))
            continue
        kind = _parse_one(name, path, inventory, datasets, limits, findings)
        if kind is not None:
            types[name] = kind
    return types, findings


def _parse_one(name: str, path: str, inventory: Inventory, datasets: Datasets, limits: Limits, findings: list[Finding]) -> UpdateType | None:
    # onnx and onnxruntime: imported for the files that define types of their own, not by every reader
    from mdiff.updates.embedded import DEFINITION_SCHEMA, TYPE_NAME, check_function, dtype_of_function_dataset, make_type

    info = inventory.objects.get(path)
    if info is None:
        return None
    if info.kind != "group" or not TYPE_NAME.fullmatch(name) or name in REGISTRY:
        findings.append(Finding("MD420", path, f"an update type is a group named x-… (lower case), not {name!r}"))
        return None
    for attr in sorted(set(info.attrs) - {ATTR_DEFINITION}):
        findings.append(Finding("MD303", path, f"unknown attribute {attr!r}"))
    try:
        definition = canonical_json.loads(info.attrs[ATTR_DEFINITION])
    except (KeyError, ValueError) as exc:
        findings.append(Finding("MD420", path, f"attribute `definition` is missing or not JSON: {exc}"))
        return None
    errors = first_errors(DEFINITION_SCHEMA, definition)
    if errors:
        findings.append(Finding("MD420", path, f"`definition` breaks its schema at {errors[0]}"))
        return None
    functions = {}
    broken = False
    for member in info.members:
        member_path = f"{path}/{member}"
        dtype_name = dtype_of_function_dataset(member)
        child = inventory.objects.get(member_path)
        if dtype_name is None and inventory.objects.refused(member_path):
            continue  # reported once, under §8 (SPEC §12.1)
        if dtype_name is None:
            findings.append(Finding("MD303", member_path, "unknown member of an update type"))
            continue
        if child is not None and child.kind == "group":
            findings.append(Finding("MD420", member_path, "a function is a 1-D uint8 dataset of ONNX model bytes, not a group"))
            broken = True
            continue
        if child is None or child.dataset is None:
            broken = True  # refused by the structure walk, already reported
            continue
        if child.dataset.dtype != np.dtype("<u1") or len(child.dataset.shape) != 1:
            findings.append(Finding("MD420", member_path, "a function is a 1-D uint8 dataset of ONNX model bytes"))
            broken = True
            continue
        if child.dataset.nbytes > limits.max_function_bytes:
            findings.append(Finding("MD421", member_path, f"{child.dataset.nbytes} bytes (limit {limits.max_function_bytes})"))
            broken = True
            continue
        try:
            data = datasets.lazy(member_path, child.dataset)[()].tobytes()
        except InvalidFileError as exc:  # a chunk that does not decode, or inflates past its size
            findings.append(Finding("MD513", member_path, f"the function cannot be read: {exc.message}"))
            broken = True
            continue
        except (OSError, ValueError) as exc:
            findings.append(Finding("MD513", member_path, f"the function cannot be read: {exc}"))
            broken = True
            continue
        model, problems = check_function(data, dtype_name, definition["inputs"], limits)
        for code, _, message in problems:
            findings.append(Finding(code, member_path, message))
        if model is None:
            broken = True
        else:
            functions[dtype_name] = (model, data)
    if not functions and not broken:
        findings.append(Finding("MD420", path, "an update type needs at least one function.<dtype> dataset"))
    if broken or not functions:
        return None
    return make_type(name, definition, functions, limits)
