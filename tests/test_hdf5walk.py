"""mdiff.hdf5walk on its own (issue 28 item 4): the §8 structure walk, importable without the rest of mdiff,
on the corpus's hostile files and on files built here, with exact findings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from mdiff.hdf5walk import CODES, DEFAULT_LIMITS, Finding, Limits, walk_file

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "conformance"

# Hostile cases whose codes come from beyond the structure walk: a file libhdf5 cannot open (walk_file
# raises OSError: mdiff's MD100), chunks that do not decode (read by mdiff's chunk_reader.py, §8.3), and a
# shape an `update` attribute declares (§7.1).
BEYOND_THE_WALK = {
    "MD100-not_hdf5": "OSError", "MD100-empty_file": "OSError", "MD100-truncated": "OSError",
    "MD513-corrupt_chunk": "data", "MD513-sparse_xor_corrupt_chunk": "data", "MD513-sparse_sub_corrupt_chunk": "data",
    "MD513-unfiltered_chunk_too_long": "data", "MD513-fletcher32_mismatch": "data",
    "MD513-chunk_inflates_past_its_size": "data", "MD508-shape_beyond_64_bits": "update",
}


def hostile_cases() -> list[dict]:
    cases = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if c["family"] == "hostile"]


def walked(path: Path, limits: Limits = DEFAULT_LIMITS) -> list[tuple[str, str]]:
    _, findings = walk_file(path, limits)
    return [(f.code, f.path) for f in findings]


def test_every_hostile_case_gets_the_walk_codes_the_manifest_expects() -> None:
    """For each of the 151 hostile files, the walk reports exactly the codes of its expectation that are the
    walk's (the rest come from §3–§7 or from reading data, beyond it)."""
    cases = hostile_cases()
    assert len(cases) == 151
    differ = {}
    for case in cases:
        limits = Limits(**case.get("limits", {}))
        try:
            _, findings = walk_file(CORPUS / case["files"]["diff"], limits)
        except OSError:
            differ[case["id"]] = "OSError"
            continue
        got = sorted({f.code for f in findings})
        if got != sorted(set(case["expect"]["codes"]) & set(CODES)):
            differ[case["id"]] = "data" if case["expect"]["codes"] == ["MD513"] and not got else "update"
    assert differ == BEYOND_THE_WALK


@pytest.mark.parametrize("case, expected", [
    ("MD500-soft_link", [("MD500", "/parameters/v")]),
    ("MD514-link_count_two", [("MD514", "/parameters/w/xor")]),
    ("MD513-dense_attribute_index_root_over_full", [("MD513", "/")]),
    ("MD513-local_heap_free_list_loops", [("MD513", "/parameters/w")]),
    ("MD505-integer_reserved_bit", [("MD505", "/parameters/w/xor")]),
    ("MD509-contiguous_storage_at_address_0", [("MD509", "/parameters/w/xor")]),
    ("MD511-objects_over_limit", [("MD511", "/parameters")]),
])
def test_hostile_files_exact_findings(case: str, expected: list[tuple[str, str]]) -> None:
    raw = next(c for c in hostile_cases() if c["id"] == case)
    assert walked(CORPUS / raw["files"]["diff"], Limits(**raw.get("limits", {}))) == expected


def test_a_sound_file_gives_its_inventory(tmp_path: Path) -> None:
    path = tmp_path / "sound.h5"
    with h5py.File(path, "w") as f:
        f.attrs.create("format", np.array(b"mdiff", dtype="S5"))
        g = f.create_group("parameters/w")
        g.create_dataset("xor", data=np.arange(6000, dtype="<u4").reshape(60, 100), chunks=(10, 100),
                         compression="gzip", shuffle=True)
        g.create_dataset("small", data=np.arange(3, dtype="<f8"))
    inventory, findings = walk_file(path)
    assert findings == []
    assert inventory.objects["/"].attrs == {"format": "mdiff"}
    assert inventory.objects["/parameters/w"].members == ["small", "xor"]
    xor = inventory.objects["/parameters/w/xor"].dataset
    assert xor is not None and (xor.shape, xor.dtype, xor.nbytes) == ((60, 100), np.dtype("<u4"), 24000)
    assert xor.plan is not None and xor.plan.chunk_shape == (10, 100) and len(xor.plan.chunks) == 6
    assert [code for code, _ in xor.plan.filters] == [2, 1]  # shuffle, then deflate
    small = inventory.objects["/parameters/w/small"].dataset
    assert small is not None and small.plan is not None and small.plan.contiguous_offset is not None
    assert inventory.total_bytes == 24000 + 24


def test_built_files_exact_findings(tmp_path: Path) -> None:
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        f["soft"] = h5py.SoftLink("/a")
        a = f.create_group("a")
        a.create_dataset("text", data=np.array([b"x"], dtype="S1"))  # a string dataset: MD505
        a.create_dataset("grows", data=np.zeros(4, dtype="<i4"), maxshape=(None,), chunks=(4,))  # extendible: MD509
        a.create_dataset("lzf", data=np.zeros(64, dtype="<i4"), chunks=(64,), compression="lzf")  # off the allowlist
        a.attrs["count"] = np.int64(3)  # not a string: MD506
        a.create_dataset("shared", data=np.zeros(2, dtype="<i4"))
        f["twice"] = a["shared"]  # a second hard link: refused at both
    assert walked(path) == [
        ("MD506", "/a"), ("MD509", "/a/grows"), ("MD504", "/a/lzf"), ("MD514", "/a/shared"), ("MD505", "/a/text"),
        ("MD500", "/soft"), ("MD514", "/twice")]


def test_limits_bound_the_walk(tmp_path: Path) -> None:
    path = tmp_path / "deep.h5"
    with h5py.File(path, "w") as f:
        f.create_group("a/b/c/d")
        f.create_dataset("big", data=np.zeros((4, 5), dtype="<f4"))
    assert walked(path) == []
    assert walked(path, Limits(max_depth=3)) == [("MD511", "/a/b/c/d")]
    assert walked(path, Limits(max_elements=19)) == [("MD508", "/big")]
    assert walked(path, Limits(max_rank=1)) == [("MD507", "/big")]
    assert walked(path, Limits(max_objects=3)) == [("MD511", "/a/b/c")]  # the root, /a, /a/b: the fourth object


def test_findings_are_plain_data_and_mdiff_adds_severity() -> None:
    from mdiff.format.findings import Finding as MdiffFinding

    plain = Finding("MD514", "/x", "linked twice")
    full = MdiffFinding.of(plain)
    assert (full.code, full.path, full.message, full.severity, full.section) == ("MD514", "/x", "linked twice", "error", "8.1")
    assert MdiffFinding.of(full) is full
    from mdiff.rules import RULES
    assert all(RULES[c].severity == "error" and RULES[c].section.startswith(("5.2", "8.")) for c in CODES)


def test_the_walk_runs_with_no_other_module_of_mdiff(tmp_path: Path) -> None:
    """In a process where importing any other module of mdiff fails, the walk still imports and runs (but for
    mdiff.version, which the package mdiff's own __init__ imports: taken out of mdiff, the walk has no parent)."""
    path = tmp_path / "one.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(4, dtype="<i8"))
        f["y"] = h5py.SoftLink("/x")
    script = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("mdiff.") and not name.startswith(("mdiff.hdf5walk", "mdiff.version")):
            raise ImportError("blocked: " + name)
        return None
sys.meta_path.insert(0, Block())
from mdiff.hdf5walk import walk_file
inventory, findings = walk_file({str(path)!r})
print([(f.code, f.path) for f in findings], inventory.objects["/x"].dataset.shape)
print(sorted(m for m in sys.modules if m.startswith("mdiff")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == "[('MD500', '/y')] (4,)"
    assert {m for m in eval(lines[1]) if not m.startswith("mdiff.hdf5walk")} == {"mdiff", "mdiff.version"}
