"""`stats.rel_change`, summed in the order SPEC.md §11 fixes: the same float on every CPU, so the same commit id.

The expected values come from a transcription of §11's steps in plain Python (`spec_section_11`, in
tools/spec_rel_change.py, which tools/gen_conformance.py checks the writer vectors against too), and one of them is
pinned as a literal.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import mdiff
from mdiff import threads
from mdiff.format.dtypes import DTYPES
from mdiff.relative_change import BLOCK, relative_change

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTORS = os.path.join(ROOT, "conformance", "writer", "rel_change.json")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from spec_rel_change import spec_section_11, vector_values  # noqa: E402  (tools/spec_rel_change.py)


def expected_of(vector: dict) -> float | None:
    """A vector's `rel_change`: null, or a binary64 bit pattern in hex."""
    expected = vector["rel_change"]
    return None if expected is None else struct.unpack(">d", bytes.fromhex(expected["bits"]))[0]


def pair(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Values exact in binary32, made without a random generator (whose streams numpy may change)."""
    i = np.arange(size, dtype=np.int64)
    old = (((i * 7919) % 1000 - 500) / 256).astype(np.float32)
    new = (old.astype(np.float64) + (((i * 104729) % 2001) - 1000) * 2.0 ** -20).astype(np.float32)
    return old, new


# the float32 pair of BLOCK + 1234 elements (two blocks, the second short), as §11 sums it
PINNED = 0.0004885229880708707


def test_a_float32_change_is_summed_as_the_spec_says_and_pinned():
    old, new = pair(BLOCK + 1234)
    assert relative_change(old, new) == spec_section_11(old, new) == PINNED


@pytest.mark.parametrize("kind", ["bfloat16", "float16", "float64", "int32"])
def test_other_dtypes_are_widened_then_summed_as_the_spec_says(kind):
    old32, new32 = pair(BLOCK + 77)
    if kind == "int32":
        old, new = (old32 * 256).astype(np.int32), (new32 * 256 * 1024).astype(np.int32)
    else:
        dtype = ml_dtypes.bfloat16 if kind == "bfloat16" else np.dtype(kind)
        old, new = old32.astype(dtype), (old32.astype(np.float64) * 1.001).astype(dtype)
    expected = spec_section_11(old, new)
    assert expected is not None and expected > 0
    assert relative_change(old, new) == expected


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000, BLOCK - 1, BLOCK, 2 * BLOCK + 1, 5 * BLOCK + 3])
def test_every_length_pads_only_the_last_block(size):
    old, new = pair(size)
    assert relative_change(old, new) == spec_section_11(old, new)


def test_a_binary32_overflow_of_finite_values_is_summed_in_binary64():
    old = np.full(4, 3e38, np.float32)
    new = np.array([3e38, -3e38, 3e38, 3e38], np.float32)
    expected = spec_section_11(old, new)  # its step 4: the binary32 sums overflow, binary64 does not
    assert relative_change(old, new) == expected == pytest.approx(1.0)


@pytest.mark.parametrize("old, new, expected", [
    ([0.0, 0.0], [0.0, 1.0], None),  # a change from all zeros: infinite, left out
    ([0.0, 0.0], [0.0, 0.0], 0.0),
    ([1.0, np.nan], [2.0, np.nan], None),
    ([1.0, 2.0], [1.0, np.inf], None),
    ([3.0, 4.0, 0.0, 0.0], [3.0, 4.0, 0.0, 5.0], 1.0),
])
def test_edge_values(old, new, expected):
    assert relative_change(np.array(old, np.float32), np.array(new, np.float32)) == expected


def test_the_same_float_on_any_number_of_threads():
    old, new = pair(7 * BLOCK + 5)
    found = set()
    for n in (1, 2, 3):
        with threads.threads_for(n):
            found.add(relative_change(old, new))
    assert found == {spec_section_11(old, new)}


def test_a_diff_writes_the_statistic():
    old, new = pair(BLOCK + 1234)
    assert mdiff.diff({"w": old}, {"w": new})["w"].meta["stats"]["rel_change"] == PINNED


@pytest.mark.parametrize("kernel", ["Haswell", "Prescott", "SkylakeX"])
def test_the_statistic_does_not_depend_on_the_blas_kernel_the_cpu_chooses(kernel):
    """OpenBLAS picks a kernel for the CPU (OPENBLAS_CORETYPE forces one): the reference once summed with its dot
    product, and one commit got three ids under these three kernels. Where numpy's BLAS ignores the variable,
    this runs the one kernel it has."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.test_relative_change import pair; "
            "from mdiff.relative_change import relative_change, BLOCK; print(repr(relative_change(*pair(BLOCK + 1234))))")
    done = subprocess.run([sys.executable, "-c", code, ROOT], capture_output=True, text=True, check=True,
                          env={**os.environ, "OPENBLAS_CORETYPE": kernel})
    assert float(done.stdout.strip()) == PINNED


def _vectors() -> list[dict]:
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)["vectors"]


def _bits(value: float | None) -> str | None:
    return None if value is None else struct.pack(">d", value).hex()


@pytest.mark.parametrize("vector", _vectors(), ids=lambda v: v["id"])
def test_every_writer_vector_gives_its_bits(vector):
    """conformance/writer/rel_change.json (tools/gen_conformance.py): the reference gives each vector's rel_change
    bit for bit, or leaves it out where the vector's is null."""
    old, new = vector_values(vector["old"], vector["dtype"]), vector_values(vector["new"], vector["dtype"])
    assert old.size == new.size == vector["length"]
    expected = vector["rel_change"]
    assert _bits(relative_change(old, new)) == (None if expected is None else expected["bits"])
    assert expected is None or float(expected["decimal"]) == expected_of(vector)


def test_the_writer_vectors_cover_what_section_11_distinguishes():
    vectors = _vectors()
    lengths = {v["length"] for v in vectors}
    assert {1, 2, 3, 8, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 3} <= lengths
    assert {v["dtype"] for v in vectors} == set(DTYPES)
    assert any(v["rel_change"] is None for v in vectors) and any(expected_of(v) == 0.0 for v in vectors)


# Inputs on which the reference first differed from §11's words (found by the transcription above; the reference
# was mended to follow them): each is a writer vector too.
EDGES = [
    # step 4 returns to binary64 only where C or B is not finite; here B underflows to 0 in binary32 (finite), so
    # step 5 leaves the statistic out (the reference summed again in binary64 and wrote ~7.1e44)
    pytest.param(np.array([2.0**-149], np.float32), np.array([1.0], np.float32), None, id="binary32-base-underflows"),
    # step 5: absent where B is not finite, even with C = 0 (the reference wrote 0)
    pytest.param(np.array([1e200]), np.array([1e200]), None, id="binary64-base-overflows-unchanged"),
    # no elements: C = B = 0, so 0 (the reference raised)
    pytest.param(np.zeros(0, np.float32), np.zeros(0, np.float32), 0.0, id="no-elements"),
]


@pytest.mark.parametrize("old, new, expected", EDGES)
def test_where_the_reference_first_differed_from_section_11(old, new, expected):
    assert relative_change(old, new) == spec_section_11(old, new) == expected
