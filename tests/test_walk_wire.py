"""The walk an isolated child sends its parent, in its compact form (hdf5walk/wire.py, issue 31.3): the parent
rebuilds exactly the walk the child made, and refuses whole what is not one."""

from __future__ import annotations

import os
import struct
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.errors import MdiffError
from mdiff.format import reader
from mdiff.format.findings import Finding
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.hdf5walk.storage import Chunk, StoragePlan
from mdiff.hdf5walk.walk import DatasetInfo, Inventory, ObjectInfo, inspect_structure
from mdiff.isolation import Isolation, isolation_supported, shared_worker, task

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"
pytestmark = pytest.mark.skipif(not isolation_supported(), reason="needs fork")


@task("test-walk-crossed")
def _crossed(path, shown: str, limits: dict) -> list:
    """In the child: the file's walk (as the task "vet" makes it) against the walk its compact form rebuilds;
    what the JSON records rebuild too, where they can ([] where they cannot: a walk whose root was refused
    after its members were found)."""
    with reader.FILTER_PLUGINS.off():
        f, size = reader.open_hdf5(path)
        try:
            inventory, findings = inspect_structure(f, size, DEFAULT_LIMITS)
            if not any(x.code in ("MD511", "MD512") for x in findings):
                reader._with_compact_data(f, inventory)
        finally:
            f.close()
    vetted = reader.Vetted((1, 2, 3, 4), inventory, [Finding.of(x) for x in findings])
    compact = vetted.to_wire()
    assert isinstance(compact, bytes)
    again = reader.Vetted.from_wire(compact)
    assert_same(vetted, again)
    assert again.to_wire() == compact
    try:
        return [reader.Vetted.from_json(vetted.to_json()).inventory.to_records() == again.inventory.to_records()]
    except ValueError:
        return []


def _nodes(inventory: Inventory) -> list[ObjectInfo]:
    out, stack = [], [inventory.root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(list(node.children.values())))
    return out


def assert_same(one: reader.Vetted, two: reader.Vetted) -> None:
    """The same walk: records, findings, and every field of every object (each slot set, as __init__ sets it)."""
    assert one.identity == two.identity and one.findings == two.findings
    assert one.inventory.to_records() == two.inventory.to_records()
    a, b = _nodes(one.inventory), _nodes(two.inventory)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for slot in ObjectInfo.__slots__:
            assert hasattr(y, slot), slot
        assert (x.name, x.kind, x.depth, dict(x.attrs), set(x.refused_attrs), x.dataset, type(x.children)) == \
               (y.name, y.kind, y.depth, dict(y.attrs), set(y.refused_attrs), y.dataset, type(y.children))
        assert (x.parent is None) == (y.parent is None) and (x.parent is None or x.parent.path == y.parent.path)
        assert list(x.children) == list(y.children) and all(y.children[k].parent is y for k in y.children)


def _corpus_files() -> list[Path]:
    return sorted(CONFORMANCE.rglob("*.mdiff"))


def test_every_conformance_file_crosses_whole():
    worker = shared_worker(Isolation(timeout_s=301.0))  # forked here: it knows this module's task
    crossed, as_records = 0, 0
    for path in _corpus_files():
        fd = os.open(path, os.O_RDONLY)
        try:
            answer = worker.call("test-walk-crossed", fd, path, asdict(DEFAULT_LIMITS))
        except MdiffError:
            continue  # not HDF5 (MD100): no walk to send
        finally:
            os.close(fd)
        assert answer in ([], [True]), path
        crossed += 1
        as_records += len(answer)
    assert crossed > 450  # all but the few that are not HDF5 (MD100)
    # the JSON records could not carry 8 of them (a root or group refused after its members were found: the
    # parent answered MD515 instead of their own findings); the compact form carries them all
    assert crossed - as_records == 8


def test_a_walk_of_ten_thousand_parameters_crosses_whole(tmp_path):
    path = tmp_path / "many.mdiff"
    with mdiff.DiffWriter(path, mdiff.Commit("many", date="2026-01-01T00:00:00Z")) as writer:
        for i in range(10_000):
            old = np.full(4, i, np.float32)
            writer.add(f"layer.{i:05d}.w", mdiff.dense(old, old + 1) if i % 3 else mdiff.replace(old + 2))
    with reader.DiffFile(path, keep_structure=True) as diff:
        vetted = diff.structure
    assert isinstance(vetted, reader.Vetted)
    message = vetted.to_wire()
    assert isinstance(message, bytes)
    assert_same(vetted, reader.Vetted.from_wire(message))
    assert_same(vetted, reader.Vetted.from_wire(memoryview(message)))


def test_plans_made_in_bulk_are_those_made_one_by_one():
    made = StoragePlan.contiguous_at([0, 4096, 1 << 40])
    assert made == [StoragePlan(0), StoragePlan(4096), StoragePlan(1 << 40)]
    assert [hash(p) for p in made] == [hash(StoragePlan(x)) for x in (0, 4096, 1 << 40)]
    with pytest.raises(AttributeError):
        made[0].contiguous_offset = 1  # type: ignore[misc]  # frozen, as one made by its __init__


def _small_message() -> bytes:
    path = CONFORMANCE / "valid" / "valid_storage_variants" / "diff.mdiff"
    if not path.exists():
        path = next(p for p in _corpus_files() if "valid_storage_variants" in str(p))
    with reader.DiffFile(path, keep_structure=True) as diff:
        vetted = diff.structure
    assert isinstance(vetted, reader.Vetted)
    message = vetted.to_wire()
    assert isinstance(message, bytes)
    assert any(node.dataset is not None and node.dataset.plan is not None and node.dataset.plan.chunks
               for node in _nodes(vetted.inventory))  # a chunked plan too
    return message


def test_a_truncated_walk_is_refused_at_every_length():
    message = _small_message()
    for end in range(0, len(message), 97):
        with pytest.raises(ValueError):
            reader.Vetted.from_wire(message[:end])
    with pytest.raises(ValueError):
        reader.Vetted.from_wire(message + b"\0")


def _header(message: bytes) -> list:
    return list(struct.unpack_from("<4s3Qqq10Q", message))


def _with_header(message: bytes, fields: list) -> bytes:
    return struct.pack("<4s3Qqq10Q", *fields) + message[struct.calcsize("<4s3Qqq10Q"):]


def test_a_walk_with_a_bad_index_or_a_huge_count_is_refused():
    message = _small_message()
    size = struct.calcsize("<4s3Qqq10Q")
    fields = _header(message)
    n, d = fields[6], fields[7]
    bad = []
    for k in range(6, 16):  # each count, huge: never allocated by, refused by the message's size
        huge = list(fields)
        huge[k] = 1 << 60
        bad.append(_with_header(message, huge))
    table = bytearray(message)
    struct.pack_into("<q", table, size, n)  # the first dataset's object: one past the last object
    bad.append(bytes(table))
    table = bytearray(message)
    struct.pack_into("<q", table, size + 8 * d, 99)  # its dtype: one of 99 (there are a few)
    bad.append(bytes(table))
    counts = size + 8 * (8 * d + fields[11] + fields[12])
    moved = bytearray(message)  # the root's member count one less, the first member's one more: a member
    root, first = struct.unpack_from("<2I", moved, counts)  # before its group, or counts that are not the objects
    struct.pack_into("<2I", moved, counts, root - 1, first + 1)
    bad.append(bytes(moved))
    kinds = bytearray(message)
    kinds[counts + 12 * n] = 9  # a kind of none
    bad.append(bytes(kinds))
    magic = bytearray(message)
    magic[0:4] = b"MDW\x02"
    bad.append(bytes(magic))
    for message in bad:
        with pytest.raises(ValueError):
            reader.Vetted.from_wire(message)


def _no_walk(path, shown, limits):
    answer = reader._metadata_only(path, shown, limits)
    return answer[:len(answer) // 2]


def test_a_child_that_answers_half_a_walk_is_MD515(tmp_path, monkeypatch):
    from mdiff import isolation

    path = tmp_path / "d.mdiff"
    with mdiff.DiffWriter(path, mdiff.Commit("one", date="2026-01-01T00:00:00Z")) as writer:
        writer.add("w", mdiff.replace(np.ones(4, np.float32)))
    monkeypatch.setitem(isolation._TASKS, "vet", _no_walk)
    with pytest.raises(mdiff.InvalidFileError) as info:
        reader.open_diff(path, isolation=Isolation(timeout_s=302.0))  # a child forked after the change
    assert info.value.code == "MD515" and "no structure walk" in info.value.message


def _tree(name: str, nbytes: int) -> Inventory:
    root = ObjectInfo("", None, "group")
    node = root.adopt(ObjectInfo(name, root, "dataset"))
    node.dataset = DatasetInfo((4,), np.dtype("<f4"), nbytes, StoragePlan(None, (2,), (Chunk((0,), 8, 8), Chunk((2,), 16, 8)),
                                                                     ((1, (4,)),)), 16)
    return Inventory(root, 16)


@pytest.mark.parametrize("inventory", [_tree("a\0b", 16), _tree("w", 1 << 70)], ids=["nul-in-a-name", "past-64-bits"])
def test_a_walk_the_compact_form_cannot_carry_goes_as_records(inventory):
    vetted = reader.Vetted((1, 2, 3, 4), inventory, [Finding("MD303", "/w", "an unknown attribute")])
    answer = vetted.to_wire()
    assert isinstance(answer, dict)
    assert_same(vetted, reader.Vetted.from_wire(answer))


def test_a_finding_of_no_rule_is_refused():
    vetted = reader.Vetted((1, 2, 3, 4), _tree("w", 16), [Finding("MD999", "/w", "no such rule")])
    message = vetted.to_wire()
    assert isinstance(message, bytes)
    with pytest.raises(ValueError):
        reader.Vetted.from_wire(message)
