#!/usr/bin/env python3
"""Generates the conformance corpus in conformance/ (see conformance/README.md).

    python tools/gen_conformance.py            # (re)write conformance/ from scratch
    python tools/gen_conformance.py --check    # exit 1 if conformance/ differs in any way

Everything is deterministic: fixed commit dates and writers, fixed seeds, no clocks. The
corpus is built in a temporary directory and then compared with, or copied over, every
generated path of conformance/: ``manifest.json``, ``bases/``, ``valid/``, ``invalid/``,
``hostile/``, ``merge/`` and ``writer/`` (test vectors for writers, outside the manifest). A file
there that the generator does not make is a difference too. The hand-written parts — ``README.md`` and ``schema-tests/`` — are left alone.

The invalid and hostile cases reuse the builders of tests/invalid_files.py (one per rule);
the valid cases are written here with the reference writer, and their expected results
computed with the reference applier — except low_rank results, which are computed exactly
(rational arithmetic), with their SPEC.md §7.5 bounds. The bytes depend on the installed
HDF5 library (through h5py): regenerate with the versions the test suite pins.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import filecmp
import io
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Callable
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import mdiff  # noqa: E402
from mdiff.checkpoints import load_checkpoint, save_checkpoint  # noqa: E402
from mdiff.engines import apply_update  # noqa: E402
from mdiff.hdf5walk.attributes import overwrite_string, write_string  # noqa: E402
from mdiff.format.dtypes import DTYPES, dtype_of  # noqa: E402
from mdiff.rules import RULES  # noqa: E402
from mdiff.repo import Repository  # noqa: E402
from mdiff.repo.states import StateClaims  # noqa: E402
from mdiff.updates.base import sha256_hex  # noqa: E402
from tests import ia3  # noqa: E402
from tests import invalid_files as inv  # noqa: E402

CORPUS = ROOT / "conformance"
GENERATED = ("manifest.json", "bases", "valid", "invalid", "hostile", "merge", "writer")
MAX_FILE_BYTES = 64 * 1024
MAX_CORPUS_BYTES = 5 * 1024 * 1024

DATE = inv.DATE
COMMIT = inv.COMMIT


def commit(message: str, parents=(), meta=None, date: str = DATE) -> mdiff.Commit:
    return mdiff.Commit(message, author=mdiff.Author("Conformance", "conformance@example.org"), date=date,
                        parents=tuple(parents), meta=dict(meta or {}), writer_name="mdiff-conformance",
                        writer_version="1")


# ---------------------------------------------------------------- the manifest's fixed parts

FEATURES = {
    "embedded-update-types": "SPEC.md §7.8-§7.9: checking and running embedded ONNX functions needs ONNX "
                             "parsing, shape inference and an ONNX runtime",
    "configurable-limits": "SPEC.md §8.3 makes the limits configurable but does not say how; these cases "
                           "pass `--limit NAME=N` to validate and apply",
    "checkpoint-rule-codes": "SPEC.md §10: other implementations MAY report checkpoint problems with "
                             "MD700-MD703; these cases expect apply to name the code",
    "repository": "SPEC.md §13: reading a repository (.mdiff/format, HEAD, refs, commits, snapshots), resolving "
                  "revisions and reconstructing the state at a commit; these cases run the optional contract "
                  "command `checkout REVISION -o OUT -C REPO_DIR --json`",
    "merge": "SPEC.md §13.7: the three-way merge of parameters and its strategies, without a repository; these "
             "cases run the optional contract command `merge-file OURS BASE THEIRS -o OUT [--strategy S] [--all] --json`",
}

LIMITS_DOC = {
    "max_rank": {"default": 32, "code": "MD507", "meaning": "rank of a dataset"},
    "max_elements": {"default": 2**36, "code": "MD508", "meaning": "elements in a dataset"},
    "max_dataset_bytes": {"default": 2**38, "code": "MD508", "meaning": "declared bytes of a dataset"},
    "max_attribute_bytes": {"default": 2**20, "code": "MD510", "meaning": "bytes of one attribute"},
    "max_objects": {"default": 1_000_000, "code": "MD511", "meaning": "objects and attributes in the file"},
    "max_total_bytes": {"default": 2**40, "code": "MD512", "meaning": "declared bytes of all datasets"},
}

TOLERANCES = {
    "low_rank": (
        "SPEC.md §7.5. The case's `bounds` file (.safetensors) holds, for each low_rank parameter of "
        "the result, a float64 tensor of shape [*shape, 2]: the lower and upper end of the interval "
        "R - bound .. R + bound that §7.5 allows for each element, rounded outward to binary64 "
        "(an end is ±inf where §7.5 allows an infinity). Convert the result's element exactly to "
        "binary64 and check lower <= y <= upper. A pair of NaNs means y MUST be a NaN (any payload). "
        "The `result` file holds, for these parameters, the correctly rounded R (one allowed answer)."
    ),
}

NOT_APPLICABLE = {
    "MD515": "reports a failure of the reader itself (a crash, hang or runaway allocation of an isolated "
             "reader, §8.5), not a rule a file breaks: no file makes every conforming reader report it",
    "MD700": "which checkpoint formats an implementation reads is its own choice; the corpus uses "
             ".safetensors, the interchange format every implementation must read",
    "MD803": "SPEC.md §13.6: the lock is held by a running writer (POSIX flock on .mdiff/lock), which files at rest "
             "cannot hold; and the contract's only repository command, checkout, reads and takes no lock",
    "MD704": "SPEC.md §10.1: model folders are checkpoints, read by writers of commits; the contract's apply and "
             "checkout read and write single .safetensors files",
    "MD705": "SPEC.md §10.1: model folders are checkpoints, read by writers of commits; the contract's apply and "
             "checkout read and write single .safetensors files",
    "MD706": "SPEC.md §10.2: a guard of writers against the output path they are given (a folder that is not "
             "empty, a device, FIFO, socket or link); no file at rest breaks it",
    "MD807": "SPEC.md §13.5: a reader takes nothing from a snapshot that disagrees with its commits and checks the "
             "revision out from the commits, so no checkout refuses it (the valid repository-snapshots-disagree case "
             "checks that the state is the commits'); reporting it is a repository checker's (fsck), not the "
             "contract's",
    "MD809": "SPEC.md §13.10: who owns a repository's folder is a fact of the machine it is on, which no file at "
             "rest carries: a corpus checked out by its user is that user's own",
    "MD806": "SPEC.md §13.6: a guard of commit writers (a state lacking half its parent's parameters is confirmed "
             "first); no file at rest breaks it, and the contract's only repository command, checkout, reads",
}

# tests/invalid_files.py cases that are attacks on a reader rather than mistakes of a writer
# Profiles (SPEC.md §12.2). The top-level `expect` of a case is what the *hardened* profile must report. A
# hostile case also states `expect.core`: the outcomes a *core* implementation (a standard HDF5 library,
# isolated, §8.5) may give, one of which it must give exactly. By default that is the hardened outcome alone:
# the library decides the case. The cases below break a rule of §8.1-§8.3 that only a reader parsing HDF5
# metadata itself can see; each lists what a core reader gets instead (found with tests/core_impl/, an
# implementation through h5py alone, and checked rule by rule against SPEC.md). "applied" is an outcome
# where the library reads the file as valid: validate finds no error (and the hardened warnings), and apply must give the state the
# updates' sha256 values name (`parameters`, computed here from the base and the updates), every value
# verified. "MD515" is the isolated reader's crash, hang or runaway allocation, whatever code it would
# have reported had it survived.
_APPLIED = "applied"
CORE_OUTCOMES: dict[str, tuple[tuple[str, ...] | str, ...]] = {
    # a single chunk's size past 2^32: libhdf5 keeps its low 32 bits and reads the chunk whole
    "MD509-single_chunk_size_past_2_32": (_APPLIED,),
    # contiguous storage at address 0: h5py's H5Dget_offset raises; the library reads nothing there
    "MD509-contiguous_storage_at_address_0": (("MD513",),),
    # a chunk past the superblock's end-of-file address: the library refuses to read it (data does not decode)
    "MD509-chunk_past_the_end_of_file_address": (("MD513",),),
    # a layout message of version 5: HDF5 2.0 reads it (and finds the storage short), 1.x cannot open it
    "MD513-layout_message_version_5": (("MD509",), ("MD513",)),
    # dense attribute storage: fractal heap and v2 B-tree soundness, shared records, hashes (§8.1)
    "MD513-dense_attribute_index_of_another_type": (("MD515",), ("MD513",)),
    "MD513-dense_attribute_record_marked_shared": (("MD515",), ("MD513",)),
    "MD513-dense_attribute_hash_not_its_name": (_APPLIED, ("MD513",)),
    "MD513-dense_attribute_huge_object_past_the_end": (("MD101", "MD102", "MD513"), ("MD515",)),
    "MD513-dense_attribute_heap_root_block_offset": (("MD101", "MD102", "MD513"), ("MD515",)),
    "MD513-dense_attribute_huge_object_index_records_0_bytes": (("MD515",), ("MD513",)),
    "MD513-dense_attribute_heap_table_width_0": (("MD515",), ("MD513",)),
    # the root node's records past its one-node buffer: libhdf5 crashes (MD515), or reads what lies past it
    # and then fails to open the attributes one by one, as for the two above (found by tests/core_impl/)
    "MD513-dense_attribute_index_root_over_full": (("MD515",), ("MD513",), ("MD101", "MD102", "MD513")),
    # an attribute count read from the header's name index: the library cannot count them
    "MD511-attributes_over_64_uncountable": (("MD513",),),
    # a link's kind from its link message, not from a lookup by its name's hash
    "MD500-dense_soft_link_hash_not_its_name": (("MD513",),),
    # dense links: v2 B-tree and fractal heap soundness, record totals
    "MD513-dense_link_index_of_another_type": (("MD515",), ("MD513",)),
    "MD513-dense_link_count_wrong": (("MD515",), ("MD513",)),
    "MD513-dense_link_count_wrong_over_the_object_limit": (("MD515",), ("MD513",)),
    "MD513-dense_link_total_past_its_depth": (("MD515",), ("MD513",)),
    # a symbol table's local heap whose free list loops: libhdf5 allocates without bound
    "MD513-local_heap_free_list_loops": (("MD515",),),
    # group info messages the library does not decode when it lists links
    "MD513-group_info_unreadable": (_APPLIED,),
    "MD513-root_group_info_unreadable": (_APPLIED,),
    # datatype class bits HDF5 libraries ignore (§8.2: compared whole)
    "MD505-float_byte_order_bit_6": (_APPLIED,),
    "MD505-integer_reserved_bit": (_APPLIED,),
}


def applied_parameters(diff: Path, base: Path) -> dict:
    """The state a file's updates name (SPEC.md §9.1), each parameter as {dtype, shape, sha256}: the base's
    parameters, each updated one as its update's `dtype`, `shape` and `sha256`, no deleted one. Only for
    files whose updates are all exact (a core outcome "applied")."""
    state = {name: {"dtype": dtype_of(v).name, "shape": list(v.shape), "sha256": sha256_hex(v)}
             for name, v in load_checkpoint(base).items()}
    with h5py.File(diff, "r") as f:
        for link, group in f["parameters"].items():
            meta = json.loads(group.attrs["update"])
            name = link  # the corpus's hostile files name their parameters plainly
            assert "%" not in link and not link.startswith("."), link
            if meta["type"] == "delete":
                del state[name]
            else:
                assert meta["type"] in ("dense", "sparse", "replace"), (diff, meta["type"])
                state[name] = {"dtype": meta["dtype"], "shape": meta["shape"], "sha256": meta["sha256"]}
    return dict(sorted(state.items()))


def core_outcomes(case: dict, corpus: Path) -> list[dict]:
    """`expect.core` of a hostile case (see CORE_OUTCOMES)."""
    e = case["expect"]
    hardened = {"validate": e["validate"], "codes": e["codes"], "warnings": e["warnings"], "apply": e["apply"]}
    out = []
    for o in CORE_OUTCOMES.get(case["id"], (tuple(e["codes"]),)):
        if o == _APPLIED:
            params = applied_parameters(corpus / case["files"]["diff"], corpus / case["files"]["base"])
            out.append({"validate": "valid", "warnings": e["warnings"], "apply": "result", "parameters": params})
        elif list(o) == e["codes"]:
            out.append(hardened)
        else:
            out.append({"validate": "invalid", "codes": sorted(o), "warnings": e["warnings"], "apply": "refuse"})
    return out


HOSTILE_CASES = {
    "not_hdf5", "empty_file", "truncated",
    "version_2_0",
    "extensions_deeply_nested", "commit_deeply_nested", "update_deeply_nested",
    "commit_lone_surrogate", "commit_meta_key_lone_low_surrogate", "update_lone_surrogate",
    "extensions_lone_surrogate", "definition_lone_surrogate", "layout_lone_surrogate",
    "commit_nan", "update_nan", "commit_duplicate_member", "update_duplicate_member",
    "commit_truncated", "update_truncated", "commit_trailing_text", "update_trailing_text",
    "link_not_utf8", "link_truncated_utf8", "link_stray_continuation_byte", "link_ends_with_continuation_byte",
    "shape_rank_33", "shape_negative",
    "dense_xor_flat", "sparse_length_mismatch", "sparse_more_entries_than_elements", "sparse_indices_2d",
    "low_rank_rank_too_big", "low_rank_B_wrong_shape", "replace_scalar_for_vector",
    "sparse_unsorted", "sparse_duplicate", "sparse_out_of_range",
    "replace_bool_2", "dense_bool_xor_2", "sparse_bool_xor_2",
    "replace_value_changed", "low_rank_B_changed",
    "function_not_onnx", "function_random_op", "function_external_data", "function_subgraph",
    "function_too_many_nodes", "function_with_huge_intermediate",
    "soft_link", "dangling_soft_link", "soft_links_past_the_object_limit", "dense_soft_link_hash_not_its_name", "external_link",
    "committed_datatype", "committed_datatype_in_parameter",
    "corrupt_object_header", "attribute_name_length_wrong", "dense_attribute_index_of_another_type", "dense_attribute_huge_object_index_records_0_bytes", "dense_attribute_heap_table_width_0", "dense_attribute_heap_without_huge_objects", "dense_attribute_index_root_over_full", "dense_attribute_record_marked_shared", "dense_attribute_hash_not_its_name", "dense_attribute_huge_object_past_the_end", "dense_attribute_heap_root_block_offset", "dense_link_index_of_another_type", "dense_link_count_wrong", "dense_link_count_wrong_over_the_object_limit", "dense_link_total_past_its_depth", "local_heap_free_list_loops", "local_heap_free_block_past_its_segment", "local_heap_segment_past_the_file", "symbol_table_entry_name_past_its_heap", "symbol_table_key_past_its_heap", "attributes_over_64_uncountable", "chunk_past_the_end_of_file_address", "committed_datatype_unreadable", "committed_datatype_float_sign_in_mantissa", "sparse_sub_corrupt_chunk", "layout_message_version_5", "dataset_unopenable_at_the_object_limit", "chunk_index_key_off_grid", "chunk_index_node_past_the_end_of_file", "attribute_dataspace_class_4", "group_info_unreadable", "root_group_info_unreadable", "corrupt_chunk", "sparse_xor_corrupt_chunk", "fletcher32_mismatch", "chunk_inflates_past_its_size", "unfiltered_chunk_too_long",
    "group_alias", "dataset_alias", "link_to_root", "link_to_root_at_object_limit", "link_to_root_whose_count_is_1", "cycle", "link_count_two", "link_to_root_not_canonical",
    "dataset_of_committed_datatype",
    "external_storage", "virtual_dataset", "lzf", "scaleoffset",
    "string_dataset", "compound", "vlen_sequence", "opaque", "array_type", "dataset_null_dataspace",
    "float_padding_ones", "integer_padding_ones", "float_byte_order_bit_6", "integer_reserved_bit",
    "vlen_string", "attribute_null_dataspace", "attribute_not_utf8", "attribute_name_not_utf8", "attribute_name_stray_continuation_byte",
    "rank_over_limit", "elements_over_default_limit", "elements_over_limit", "bytes_over_limit",
    "extendible_dataset", "chunked_never_written", "chunked_half_written", "contiguous_unallocated", "contiguous_storage_past_the_end", "contiguous_storage_at_address_0", "single_chunk_size_past_2_32", "deflate_level_over_9", "shuffle_element_size_0",
    "chunk_too_small", "deflate_ratio",
    "attribute_over_limit", "objects_over_limit", "attributes_over_limit", "nested_too_deep", "total_bytes_over_limit",
    "file_path_dotdot", "file_path_absolute", "file_path_hidden_git_hook", "file_path_drive_letter",
    "file_path_backslash", "file_path_device_name", "file_path_control_character", "layout_unsafe_path",
}

# Cases written by tests/ia3.py's write_with_function: their parameter is `w32`, float32 [8, 6].
IA3_BASE_CASES = {
    "definition_without_version", "definition_input_a_large_integer", "function_not_onnx", "function_old_opset", "function_random_op",
    "function_external_data", "function_subgraph", "function_too_many_nodes", "function_of_another_dtype",
    "function_with_huge_intermediate", "function_shape_from_data", "embedded_inexact_with_sha256",
    "update_type_soft_link_needing_escape", "embedded_member_refused", "update_type_soft_link_member", "function_soft_link",
    "function_soft_link_beside_a_function", "definition_lone_surrogate",
}

# A type refused for one of these is not defined: the parameters naming it are MD402 too (§7.8)
REFUSED_TYPE_CODES = {"MD420", "MD421", "MD422", "MD423", "MD424", "MD425", "MD426", "MD427"}

WARNING_CODES = {code for code, rule in RULES.items() if rule.severity == "warning"}


# ---------------------------------------------------------------- arrays

NP = {name: dt.value for name, dt in DTYPES.items()}
BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
FLOATS = ("float16", "bfloat16", "float32", "float64")

# NaN with a payload, a signalling NaN, a negative NaN, -0, +inf, -inf, the smallest subnormal,
# the largest negative subnormal, the largest finite number, the smallest normal.
SPECIAL = {
    "float16": [0x7E01, 0x7C01, 0xFE00, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x7BFF, 0x0400],
    "bfloat16": [0x7FC1, 0x7F81, 0xFFC0, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x7F7F, 0x0080],
    "float32": [0x7FC00001, 0x7F800001, 0xFFC00000, 0x80000000, 0x7F800000, 0xFF800000, 0x1, 0x807FFFFF,
                0x7F7FFFFF, 0x00800000],
    "float64": [0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8000000000000, 0x8000000000000000,
                0x7FF0000000000000, 0xFFF0000000000000, 0x1, 0x800FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF,
                0x0010000000000000],
}

# Parameter names that need care: '/', '%', leading '.', spaces, non-ASCII, control characters.
ODD_NAMES = [
    "model/decoder/w", "100% sure", ".hidden", "..", "with space ", " leading space", "poids_é",
    "日本語の重み", "emoji 😀", "tab\tand\x01ctl", "%2F not an escape", "a.b.c", "x\x7f", "/", "%",
]


def rng_bits(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    """An array with random bit patterns (floats: NaNs, infinities, subnormals and all), the
    special patterns first."""
    dt = np.dtype(NP[dtype])
    n = math.prod(shape)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    a = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).view(BITS[dt.itemsize]).copy()
    if dtype in SPECIAL and n:
        k = min(n, len(SPECIAL[dtype]))
        a[:k] = np.array(SPECIAL[dtype][:k], dtype=BITS[dt.itemsize])
    return a.view(dt).reshape(shape)


def changed(rng: np.random.Generator, a: np.ndarray, fraction: float) -> np.ndarray:
    """``a`` with the bits of about ``fraction`` of its elements changed (at least one)."""
    flat = a.reshape(-1)
    if flat.size == 0:
        return a.copy()
    mask = rng.random(flat.size) < fraction
    mask[-1] = True
    if a.dtype == bool:
        return np.logical_xor(flat, mask).reshape(a.shape)
    u = flat.view(BITS[a.dtype.itemsize]).copy()
    noise = rng.integers(1, 256, size=flat.size * a.dtype.itemsize, dtype=np.uint8).view(u.dtype)
    u[mask] ^= noise[mask]
    return u.view(a.dtype).reshape(a.shape)


def floats(rng: np.random.Generator, dtype: str, shape, scale: float = 4.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(NP[dtype])


# ---------------------------------------------------------------- exact low_rank (SPEC.md §7.5)

# precision p (with the implicit bit), smallest normal exponent, largest exponent
FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127), "float64": (53, -1022, 1023)}


def _exponent(a: Fraction, emin: int) -> int:
    """e with 2**e <= a < 2**(e+1), at least emin (a > 0)."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    return max(e, emin)


def round_to(x: Fraction, dtype: str) -> float:
    """x rounded to dtype, to nearest, ties to even (as a Python float, which holds it exactly)."""
    p, emin, emax = FORMATS[dtype]
    if x == 0:
        return 0.0
    a = abs(x)
    q = Fraction(2) ** (_exponent(a, emin) - p + 1)
    n = a / q
    whole, rest = divmod(n.numerator, n.denominator)
    if 2 * rest > n.denominator or (2 * rest == n.denominator and whole % 2 == 1):
        whole += 1
    r = whole * q
    largest = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    value = math.inf if r > largest else float(r)
    return value if x > 0 else -value


_F64_MAX = Fraction(np.finfo(np.float64).max.item())


def _float(x: Fraction) -> float:
    """x to the nearest binary64, saturating at the largest finite value."""
    if abs(x) > _F64_MAX:
        return float(_F64_MAX) if x > 0 else -float(_F64_MAX)
    return float(x)


def _down(x: Fraction) -> float:
    f = _float(x)
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


def _up(x: Fraction) -> float:
    f = _float(x)
    return math.nextafter(f, math.inf) if Fraction(f) < x else f


def low_rank_exact(base: np.ndarray, A: np.ndarray, B: np.ndarray, scale: float, dtype: str):
    """(correctly rounded result, bounds [*shape, 2]) for one low_rank parameter, per SPEC.md §7.5."""
    p, emin, emax = FORMATS[dtype]
    u = Fraction(1, 2**53) if dtype == "float64" else Fraction(1, 2**24)
    largest = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    m, r = A.shape
    n = B.shape[1]
    with np.errstate(invalid="ignore"):
        b2 = base.reshape(m, n).astype(np.float64)
    s = Fraction(scale)
    out = np.zeros((m, n), np.float64)
    bounds = np.zeros((m, n, 2), np.float64)
    for i in range(m):
        for j in range(n):
            b = float(b2[i, j])
            if math.isnan(b):
                out[i, j] = b
                bounds[i, j] = (math.nan, math.nan)
                continue
            if math.isinf(b):
                out[i, j] = b
                bounds[i, j] = (b, b)
                continue
            prods = [Fraction(float(A[i, k])) * Fraction(float(B[k, j])) for k in range(r)]
            R = Fraction(b) + s * sum(prods, Fraction(0))
            ulp = Fraction(2) ** (_exponent(abs(R), emin) - p + 1) if R else Fraction(2) ** (emin - p + 1)
            bound = ulp + (r + 2) * u * (abs(Fraction(b)) + abs(s) * sum((abs(x) for x in prods), Fraction(0)))
            lo, hi = _down(R - bound), _up(R + bound)
            if R - bound > largest:
                hi = math.inf
            if R + bound < -largest:
                lo = -math.inf
            out[i, j] = round_to(R, dtype)
            if out[i, j] == 0 and b == 0 and math.copysign(1, b) < 0 and R == 0:
                out[i, j] = -0.0
            bounds[i, j] = (lo, hi)
    return out.reshape(base.shape).astype(NP[dtype]), bounds.reshape((*base.shape, 2))


def within(y: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    y = y.astype(np.float64)
    lo, hi = bounds[..., 0], bounds[..., 1]
    return np.where(np.isnan(lo), np.isnan(y), (lo <= y) & (y <= hi))


# ---------------------------------------------------------------- raw safetensors (for broken bases)

ST_TAGS = {"bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
           "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
           "float32": "F32", "float64": "F64"}


def raw_safetensors(tensors: dict[str, tuple[str, list, bytes]], gap_after: str | None = None) -> bytes:
    """{name: (safetensors dtype tag, shape, raw bytes)} -> file bytes, any tag allowed; with ``gap_after``,
    8 bytes that belong to no tensor follow that tensor's."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        tag, shape, raw = tensors[name]
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
        if name == gap_after:
            blobs.append(bytes(8))
            off += 8
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def raw_state(state: dict[str, np.ndarray]) -> dict[str, tuple[str, list, bytes]]:
    from mdiff.format.dtypes import dtype_of

    return {k: (ST_TAGS[dtype_of(v).name], list(v.shape), v.tobytes()) for k, v in state.items()}


def uses_embedded_types(path: Path) -> bool:
    """The file defines update types of its own (§7.8): a root member `update_types`."""
    try:
        with h5py.File(path, "r") as f:
            return "update_types" in f
    except Exception:  # not HDF5, or too broken to tell: no
        return False


# ---------------------------------------------------------------- the corpus builder


class Corpus:
    def __init__(self, out: Path):
        self.out = out
        self.cases: list[dict] = []
        for sub in ("bases", "valid", "invalid", "hostile", "merge"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        self.rules_base = self.base("rules", inv.base_state())
        self.ia3_base = self.base("ia3-hostile", {"w32": np.ones((8, 6), np.float32)})
        self.empty_base = self.base("empty", {})

    def rel(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    def base(self, name: str, state: dict[str, np.ndarray]) -> str:
        path = self.out / "bases" / f"{name}.safetensors"
        save_checkpoint(path, state)
        return self.rel(path)

    def case_dir(self, family: str, case_id: str) -> Path:
        d = self.out / family / case_id
        assert not d.exists(), f"case {case_id} made twice"
        d.mkdir(parents=True)
        return d

    def add(self, case: dict) -> None:
        assert case["id"] not in {c["id"] for c in self.cases}, case["id"]
        self.cases.append(case)

    # ------------------------------------------------------------ valid cases

    def valid(self, case_id: str, section: str, description: str, write: Callable[[Path], None],
              base: dict[str, np.ndarray] | str, warnings=(), features=(), limits=None) -> None:
        """A valid file: written by ``write(path)``, applied to ``base`` (a state, or the path of a
        shared base) by the reference; low_rank results replaced by the exact ones."""
        d = self.case_dir("valid", case_id)
        diff_path = d / "diff.mdiff"
        write(diff_path)
        if isinstance(base, str):
            base_rel = base
            state = load_checkpoint(self.out / base)
        else:
            save_checkpoint(d / "base.safetensors", base)
            base_rel = self.rel(d / "base.safetensors")
            state = base
        findings = mdiff.validate(diff_path, mdiff.Limits(**(limits or {})))
        assert {f.code for f in findings} == set(warnings), (case_id, findings)
        with mdiff.open(diff_path) as diff:
            result = mdiff.apply(state, diff)
            bounds = {}
            for name, update in diff.items():
                if update.type != "low_rank":
                    continue
                A, B = update.array("A"), update.array("B")
                exact, bounds[name] = low_rank_exact(state[name], A, B, update.meta["scale"], update.dtype.name)
                ok = within(result[name], bounds[name])
                assert ok.all(), (case_id, name, "the reference is outside §7.5's bound")
                assert within(exact, bounds[name]).all(), (case_id, name, "the rounded R is outside the bound")
                result[name] = exact
        save_checkpoint(d / "result.safetensors", result)
        files = {"diff": self.rel(diff_path), "base": base_rel, "result": self.rel(d / "result.safetensors")}
        tolerance = None
        if bounds:
            save_checkpoint(d / "bounds.safetensors", bounds)
            files["bounds"] = self.rel(d / "bounds.safetensors")
            tolerance = {"kind": "low_rank", "section": "7.5", "parameters": sorted(bounds), "bounds": files["bounds"]}
        case = {"id": case_id, "family": "valid", "section": section, "description": description, "files": files,
                "expect": {"validate": "valid", "warnings": sorted(set(warnings)), "apply": "result",
                           "tolerance": tolerance}}
        if limits:
            case["limits"] = dict(limits)
        features = set(features) | ({"configurable-limits"} if limits else set())
        if features:
            case["features"] = sorted(features)
        self.add(case)

    def valid_updates(self, case_id, section, description, base, updates, message=None, commit_=None, **kw):
        def write(path):
            mdiff.write(path, updates, commit_ or commit(message or description))

        self.valid(case_id, section, description, write, base, **kw)

    # ------------------------------------------------------------ invalid and hostile cases

    def invalid(self, case_id: str, family: str, code: str, section: str, description: str,
                write: Callable[[Path], None], base: str, limits=None, features=(), also=()) -> None:
        """A file that breaks the rule ``code`` (and, listed in ``also``, the codes SPEC.md §12.1 says it
        reports besides): the manifest lists every code, and the reference must report exactly those."""
        d = self.case_dir(family, case_id)
        diff_path = d / "diff.mdiff"
        write(diff_path)
        if uses_embedded_types(diff_path):  # whatever its rule, a reader without §7.8 cannot reach it
            features = {*features, "embedded-update-types"}
        expected = {code, *also}
        found = mdiff.validate(diff_path, mdiff.Limits(**(limits or {})))
        assert {f.code for f in found} == expected, (case_id, sorted(expected), [(f.code, f.path) for f in found])
        errors = sorted(c for c in expected if c not in WARNING_CODES)
        warnings = sorted(c for c in expected if c in WARNING_CODES)
        case = {"id": case_id, "family": family, "section": section, "description": description,
                "files": {"diff": self.rel(diff_path), "base": base},
                "expect": {"validate": "not-hdf5" if code == "MD100" else "invalid", "code": code,
                           "codes": errors, "warnings": warnings, "apply": "refuse"}}
        if limits:
            case["limits"] = dict(limits)
        features = set(features) | ({"configurable-limits"} if limits else set())
        if features:
            case["features"] = sorted(features)
        self.add(case)

    def apply_refused(self, case_id: str, code: str, description: str, write: Callable[[Path], None],
                      base: dict[str, np.ndarray] | bytes | str, features=()) -> None:
        """A valid file that apply must refuse with ``code`` given this base (§9.2, §9.3, §10)."""
        d = self.case_dir("invalid", case_id)
        diff_path = d / "diff.mdiff"
        write(diff_path)
        assert not [f for f in mdiff.validate(diff_path) if f.is_error], case_id
        if isinstance(base, str):
            base_rel = base
        else:
            path = d / "base.safetensors"
            if isinstance(base, bytes):
                path.write_bytes(base)
            else:
                save_checkpoint(path, base)
            base_rel = self.rel(path)
        case = {"id": case_id, "family": "invalid", "section": RULES[code].section,
                "description": description, "files": {"diff": self.rel(diff_path), "base": base_rel},
                "expect": {"validate": "valid", "warnings": [], "apply": "refuse", "code": code}}
        if features:
            case["features"] = sorted(features)
        self.add(case)

    # ------------------------------------------------------------ repository cases (§13)

    def repository_case(self, case_id: str, family: str, section: str, description: str, repo_dir: Path,
                        revisions: list[tuple[str, str | None]], ids: dict[str, str] | None = None,
                        what: dict[str, str] | None = None, states: dict[str, Path] | None = None,
                        bounds: dict[str, Path] | None = None, code: str | None = None,
                        reflogs: bool = False) -> None:
        """A repository and the revisions to check out: each giving a state (``family`` valid: the
        revision's label names the commit in ``ids`` and its state file) or refused with ``code``.
        Every expectation is checked here against the reference's command line. Its reflogs are
        removed unless ``reflogs`` (a case whose revisions read them: see :func:`pin_reflogs`)."""
        bounds = bounds or {}
        entries = []
        if not reflogs:  # reflogs (§13.6) record the time of each move, which no fixed date pins
            shutil.rmtree(repo_dir / ".mdiff" / "logs", ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="mdiff-conf-checkout-") as tmp:
            for i, (rev, label) in enumerate(revisions):
                out = Path(tmp) / f"{i}.safetensors"
                status, report = reference_checkout(repo_dir, rev, out)
                if code:
                    assert status != 0 and report["error"]["code"] == code and not out.exists(), (case_id, rev, report)
                    entries.append({"revision": rev})
                    continue
                assert status == 0 and report["commit"] == ids[label], (case_id, rev, report)
                got, want = load_checkpoint(out), load_checkpoint(states[label])
                if label in bounds:
                    b = load_checkpoint(bounds[label])
                    assert all(within(got[k], b[k]).all() for k in b), (case_id, rev)
                    got = {**got, **{k: want[k] for k in b}}
                assert same_state(got, want), (case_id, rev)
                tolerance = None
                if label in bounds:
                    tolerance = {"kind": "low_rank", "section": "7.5",
                                 "parameters": sorted(load_checkpoint(bounds[label])), "bounds": self.rel(bounds[label])}
                entries.append({"revision": rev, "commit": ids[label], "result": self.rel(states[label]),
                                "tolerance": tolerance})
        # the working records these checkouts left (§13.6) name this machine's paths, and no checkout reads them
        shutil.rmtree(repo_dir / ".mdiff" / "working", ignore_errors=True)
        case = {"id": case_id, "family": family, "section": section, "description": description,
                "files": {"repository": self.rel(repo_dir)}, "features": ["repository"]}
        if ids:
            case["commits"] = [{"label": label, "id": cid, "what": (what or {}).get(label, ""),
                                "state": self.rel(states[label])} for label, cid in ids.items()]
        case["expect"] = ({"checkout": "refuse", "code": code, "revisions": entries} if code
                          else {"checkout": "result", "revisions": entries})
        self.add(case)

    # ------------------------------------------------------------ the manifest

    def manifest(self) -> dict:
        covered = {c["expect"]["code"] for c in self.cases if "code" in c["expect"]}
        covered |= {w for c in self.cases for w in c["expect"].get("warnings", [])}
        not_applicable = dict(NOT_APPLICABLE)
        assert not covered & set(not_applicable), sorted(covered & set(not_applicable))
        missing = sorted(set(RULES) - covered - set(not_applicable))
        assert not missing, f"rule codes with no case and no reason: {missing}"
        unknown = sorted(set(CORE_OUTCOMES) - {c["id"] for c in self.cases if c["family"] == "hostile"})
        assert not unknown, f"core outcomes for cases that are not hostile: {unknown}"
        for case in self.cases:
            if case["family"] == "hostile":
                case["expect"]["core"] = core_outcomes(case, self.out)
        return {
            "format": "mdiff-conformance",
            "manifest_version": 1,
            "spec_version": "1.3",
            "generator": "tools/gen_conformance.py",
            "contract": "README.md",
            "paths": "relative to the directory of this manifest",
            "features": FEATURES,
            "limits": LIMITS_DOC,
            "tolerances": TOLERANCES,
            "not_applicable": dict(sorted(not_applicable.items())),
            "cases": self.cases,
        }


# ---------------------------------------------------------------- the cases


def rng_for(tag: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(tag.encode()).digest()[:4], "little"))


def first_sentence(fn) -> str:
    return " ".join((fn.__doc__ or "").split()).split(". ")[0].rstrip(".")


def build_valid(c: Corpus) -> None:
    shapes = {"v": (7,), "m": (3, 4)}

    # every update type x every dtype
    rng = rng_for("dense")
    base, ups = {}, {}
    for dtype in DTYPES:
        for tag, shape in shapes.items():
            old = rng_bits(rng, dtype, shape)
            base[f"{dtype}/{tag}"] = old
            ups[f"{dtype}/{tag}"] = mdiff.dense(old, changed(rng, old, 0.5))
    c.valid_updates("dense-every-dtype", "7.3", "dense (XOR) updates of every dtype of §6.1, a vector and a "
                    "matrix each, random bit patterns (floats: NaN payloads, infinities, subnormals)", base, ups)

    rng = rng_for("sparse")
    base, ups = {}, {}
    for dtype in DTYPES:
        for tag, shape in shapes.items():
            old = rng_bits(rng, dtype, shape)
            base[f"{dtype}/{tag}"] = old
            ups[f"{dtype}/{tag}"] = mdiff.sparse(old, changed(rng, old, 0.3))
    old = rng_bits(rng, "float32", (5,))
    base["no-entries"] = old
    ups["no-entries"] = mdiff.sparse(old, old)
    c.valid_updates("sparse-every-dtype", "7.4", "sparse updates of every dtype of §6.1 (vector and matrix), and "
                    "one with no entries (k = 0)", base, ups)

    # version 2 (format 1.3): integer deltas (SUB) and sparse gaps, every dtype but bool (§7.1, §7.3, §7.4)
    rng = rng_for("dense-v2")
    base, ups = {}, {}
    for dtype in DTYPES:
        if dtype == "bool":
            continue
        for tag, shape in {**shapes, "s": ()}.items():
            old = rng_bits(rng, dtype, shape)
            base[f"{dtype}/{tag}"] = old
            ups[f"{dtype}/{tag}"] = mdiff.dense(old, changed(rng, old, 0.5), version=2)
    c.valid_updates("dense-v2-every-dtype", "7.3", "dense version 2 (zigzag integer differences, `sub`) of every "
                    "dtype of §6.1 but bool, a vector, a matrix and a scalar each, random bit patterns", base, ups)

    rng = rng_for("sparse-v2")
    base, ups = {}, {}
    for dtype in DTYPES:
        if dtype == "bool":
            continue
        for tag, shape in shapes.items():
            old = rng_bits(rng, dtype, shape)
            base[f"{dtype}/{tag}"] = old
            ups[f"{dtype}/{tag}"] = mdiff.sparse(old, changed(rng, old, 0.3), version=2)
    old = rng_bits(rng, "float32", (5,))
    base["no-entries"] = old
    ups["no-entries"] = mdiff.sparse(old, old, version=2)
    old = rng_bits(rng, "int16", (6,))
    base["every-entry"] = old
    ups["every-entry"] = mdiff.sparse(old, old ^ np.int16(-1), version=2)
    old = rng_bits(rng, "uint8", (300,))
    base["last-only"] = old
    ups["last-only"] = mdiff.sparse(old, np.concatenate([old[:-1], old[-1:] + np.uint8(1)]), version=2)
    c.valid_updates("sparse-v2-every-dtype", "7.4", "sparse version 2 (`gaps`, `sub`) of every dtype of §6.1 but "
                    "bool (vector and matrix), one with no entries (k = 0), one with every element (all gaps 0), "
                    "one whose only entry is the last element (gaps[0] = numel - 1)", base, ups)

    base, ups = {}, {}
    for width, bits_dtype, dtype in ((1, np.uint8, "uint8"), (1, np.uint8, "int8"), (2, np.uint16, "float16"),
                                     (2, np.uint16, "bfloat16"), (4, np.uint32, "float32"), (4, np.uint32, "int32"),
                                     (8, np.uint64, "float64"), (8, np.uint64, "int64")):
        top = (1 << (8 * width)) - 1
        sign = 1 << (8 * width - 1)
        pairs = [(0, top), (top, 0), (0, 1), (1, 0), (sign - 1, sign), (sign, sign - 1), (sign, 0), (0, sign),
                 (top, sign - 1), (sign - 1, top), (5, sign + 5), (sign + 5, 5), (0, sign - 1), (sign - 1, 0)]
        if dtype in FLOATS:
            exp = {2: 0x7C00 if dtype == "float16" else 0x7F80, 4: 0x7F800000, 8: 0x7FF0000000000000}[width]
            pairs += [(exp | 1, exp | (sign - 1 - exp)),  # NaN payloads: smallest to largest
                      (exp | 1, sign | exp | 1),  # NaN to negative NaN
                      (0, sign), (sign, 0),  # +0 ↔ −0
                      (exp, sign | exp),  # +inf → −inf
                      (1, sign | 1)]  # smallest subnormal → its negative
        old = np.array([a for a, _ in pairs], dtype=bits_dtype).view(NP[dtype])
        new = np.array([b for _, b in pairs], dtype=bits_dtype).view(NP[dtype])
        base[f"dense/{dtype}"] = old
        ups[f"dense/{dtype}"] = mdiff.dense(old, new, version=2)
        base[f"sparse/{dtype}"] = old.copy()
        ups[f"sparse/{dtype}"] = mdiff.sparse(old, new, version=2)
    c.valid_updates("v2-wrap-around", "7.1", "version-2 dense and sparse updates at the edges of modulo-2^W "
                    "arithmetic, per width (1, 2, 4, 8 bytes): 0 - 1 and max + 1 (the difference wraps), sign "
                    "crossings 0x7F.. <-> 0x80.. and the largest differences (zigzag 2^W - 1), and for floats NaN "
                    "payloads, NaN to negative NaN, +0 <-> -0, +inf -> -inf, a subnormal to its negative", base, ups)

    rng = rng_for("replace")
    base, ups = {}, {}
    for dtype in DTYPES:
        for tag, shape in shapes.items():
            base[f"{dtype}/{tag}"] = rng_bits(rng, dtype, shape)
            ups[f"{dtype}/{tag}"] = mdiff.replace(rng_bits(rng, dtype, shape))
    c.valid_updates("replace-every-dtype", "7.6", "replace updates of every dtype of §6.1 (vector and matrix) "
                    "over existing parameters of the same shape and dtype", base, ups)

    rng = rng_for("delete")
    base, ups = {"kept": np.arange(3, dtype=np.int16)}, {}
    for dtype in DTYPES:
        for tag, shape in shapes.items():
            base[f"{dtype}/{tag}"] = rng_bits(rng, dtype, shape)
            ups[f"{dtype}/{tag}"] = mdiff.delete(base[f"{dtype}/{tag}"])
    c.valid_updates("delete-every-dtype", "7.7", "delete updates of every dtype of §6.1; one parameter is kept",
                    base, ups)

    rng = rng_for("low_rank")
    base, ups = {}, {}
    for dtype in FLOATS:
        cdt = np.float64 if dtype == "float64" else np.float32
        for tag, (shape, r, scale) in {"m": ((8, 6), 2, 0.5), "v": ((5,), 1, 2.0), "t": ((3, 4, 5), 2, -1.25),
                                       "r3": ((6, 6), 3, 0.125)}.items():
            m, n = shape[0], math.prod(shape[1:])
            old = floats(rng, dtype, shape)
            base[f"{dtype}/{tag}"] = old
            ups[f"{dtype}/{tag}"] = mdiff.low_rank(rng.standard_normal((m, r)).astype(cdt),
                                                   rng.standard_normal((r, n)).astype(cdt), shape, DTYPES[dtype], scale)
    c.valid_updates("low_rank-every-float-dtype", "7.5", "low_rank updates of float16, bfloat16, float32 and float64 "
                    "parameters of rank 1, 2 and 3, factor ranks r = 1-3, positive and negative scales; compared within §7.5's "
                    "bound", base, ups)

    # special float bit patterns
    base, ups = {}, {}
    for dtype in FLOATS:
        bits = np.array(SPECIAL[dtype], dtype=BITS[np.dtype(NP[dtype]).itemsize])
        sp = bits.view(NP[dtype])
        rolled = np.roll(sp, 3)
        base[f"dense/{dtype}"] = sp.copy()
        ups[f"dense/{dtype}"] = mdiff.dense(sp, rolled)
        base[f"sparse/{dtype}"] = sp.copy()
        new = sp.copy()
        new[[0, 3, 6]] = rolled[[0, 3, 6]]
        ups[f"sparse/{dtype}"] = mdiff.sparse(sp, new)
        ups[f"replace/{dtype}"] = mdiff.replace(rolled.copy())
        cdt = np.float64 if dtype == "float64" else np.float32
        lr_base = sp.copy().reshape(2, 5)
        base[f"low_rank/{dtype}"] = lr_base
        ups[f"low_rank/{dtype}"] = mdiff.low_rank(np.array([[1.0], [-0.5]], cdt),
                                                  np.array([[0.25, 0.5, 0.0, -0.0, 2.0]], cdt), (2, 5), DTYPES[dtype], 0.5)
    # float16: a result beyond the largest finite value by more than the bound (may be +inf)
    base["low_rank/float16-overflow"] = np.array([65504.0, -65504.0, 1.0], np.float16)
    ups["low_rank/float16-overflow"] = mdiff.low_rank(np.array([[1.0], [-1.0], [1.0]], np.float32),
                                                      np.array([[200.0]], np.float32), (3,), DTYPES["float16"], 1.0)
    c.valid_updates("special-float-bit-patterns", "6.2", "NaN payloads, signalling and negative NaNs, -0, ±inf, "
                    "subnormals, the largest finite values: passed through dense, sparse and replace bit for bit; "
                    "low_rank of such bases (NaN stays NaN, infinities stay, overflow may give inf)", base, ups)

    # names that need escaping (§5.2)
    rng = rng_for("names")
    base, ups = {}, {}
    for i, name in enumerate(ODD_NAMES):
        old = rng_bits(rng, "float32", (3,))
        kind = ("dense", "sparse", "replace", "delete")[i % 4]
        if kind != "replace":
            base[name] = old
        ups[name] = {"dense": lambda: mdiff.dense(old, changed(rng, old, 0.7)),
                     "sparse": lambda: mdiff.sparse(old, changed(rng, old, 0.3)),
                     "replace": lambda: mdiff.replace(old),
                     "delete": lambda: mdiff.delete(old)}[kind]()
    base["unchanged/é"] = np.arange(2, dtype=np.uint8)
    c.valid_updates("names-needing-escapes", "5.2", "parameter names with '/', '%', a leading '.', '..', spaces, "
                    "non-ASCII letters, an emoji and control characters, with every exact update type", base, ups)

    # 0-d and zero-size tensors
    rng = rng_for("zero-d")
    base, ups = {}, {}
    for dtype in DTYPES:
        for kind in ("dense", "sparse", "replace", "delete"):
            old = rng_bits(rng, dtype, ())
            name = f"{kind}/{dtype}"
            if kind == "replace":
                ups[name] = mdiff.replace(rng_bits(rng, dtype, ()))
                continue
            base[name] = old
            ups[name] = {"dense": lambda: mdiff.dense(old, changed(rng, old, 1.0)),
                         "sparse": lambda: mdiff.sparse(old, changed(rng, old, 1.0)),
                         "delete": lambda: mdiff.delete(old)}[kind]()
    base["unchanged"] = np.array(5, dtype=np.int64)
    c.valid_updates("zero-d-tensors", "6.2", "rank-0 (scalar) parameters of every dtype with dense, sparse, "
                    "replace and delete; a rank-0 tensor has one element and is stored in a scalar dataset", base, ups)

    rng = rng_for("zero-size")
    base, ups = {}, {}
    for dtype in ("bool", "int8", "uint64", "float16", "bfloat16", "float32"):
        for tag, shape in {"z": (0,), "z2": (3, 0)}.items():
            for kind in ("dense", "sparse", "delete"):
                base[f"{kind}/{dtype}/{tag}"] = rng_bits(rng, dtype, shape)
            ups[f"dense/{dtype}/{tag}"] = mdiff.dense(base[f"dense/{dtype}/{tag}"], base[f"dense/{dtype}/{tag}"])
            ups[f"sparse/{dtype}/{tag}"] = mdiff.sparse(base[f"sparse/{dtype}/{tag}"], base[f"sparse/{dtype}/{tag}"])
            ups[f"delete/{dtype}/{tag}"] = mdiff.delete(base[f"delete/{dtype}/{tag}"])
            ups[f"replace/{dtype}/{tag}"] = mdiff.replace(rng_bits(rng, dtype, shape))
    for dtype, shape in (("float16", (0, 4)), ("float32", (4, 0)), ("bfloat16", (0,)), ("float64", (2, 0, 3))):
        cdt = np.float64 if dtype == "float64" else np.float32
        m, n = shape[0], math.prod(shape[1:])
        base[f"low_rank/{dtype}"] = np.zeros(shape, NP[dtype])
        ups[f"low_rank/{dtype}"] = mdiff.low_rank(np.ones((m, 1), cdt), np.ones((1, n), cdt), shape, DTYPES[dtype], 1.0)
    c.valid_updates("zero-size-tensors", "6.2", "tensors with a zero in their shape ([0], [3, 0], [2, 0, 3]) with "
                    "every update type: no bytes, sha256 of the empty string", base, ups)

    # added, deleted and retyped parameters
    rng = rng_for("added")
    base = {"kept": rng_bits(rng, "float32", (4,)), "gone": rng_bits(rng, "int32", (2, 2)),
            "retyped": rng_bits(rng, "float32", (2, 3)), "reshaped": rng_bits(rng, "bfloat16", (6,))}
    ups = {"gone": mdiff.delete(base["gone"]), "retyped": mdiff.replace(rng_bits(rng, "int8", (2, 3))),
           "reshaped": mdiff.replace(rng_bits(rng, "bfloat16", (3, 2, 1))),
           "new/bias": mdiff.replace(rng_bits(rng, "float64", (5,))), "new/flag": mdiff.replace(np.array([True, False]))}
    c.valid_updates("added-deleted-retyped", "9.1", "replace adds parameters the base lacks and changes a "
                    "parameter's dtype or shape; delete removes one; untouched parameters are carried over", base, ups)

    # a root commit: an empty base, every parameter replaced in
    rng = rng_for("root")
    ups = {f"p{i}/{dtype}": mdiff.replace(rng_bits(rng, dtype, (2, 2))) for i, dtype in enumerate(DTYPES)}
    c.valid_updates("root-commit", "4.2", "a root commit (no parents) applied to an empty checkpoint: every "
                    "parameter is a replace", c.empty_base, ups)

    c.valid_updates("empty-diff", "5.1", "an empty /parameters: the commit changes nothing and the result equals "
                    "the base", c.rules_base, {})

    def merge(path):
        parents = [hashlib.sha256((c.out / "valid" / cid / "diff.mdiff").read_bytes()).hexdigest()
                   for cid in ("dense-every-dtype", "sparse-every-dtype")]
        mdiff.write(path, {"w": mdiff.dense(inv.W, inv.W_NEW)},
                    commit("Merge branch 'sparse' into 'dense'", parents=parents, meta={"strategy": "ours"}))

    c.valid("merge-commit", "4.2", "a merge commit: two parents (the commit ids of the dense-every-dtype and "
            "sparse-every-dtype cases' files) in the commit metadata", merge, c.rules_base)

    # the example embedded update type
    rng = rng_for("ia3")
    base = {"q/float32": floats(rng, "float32", (4, 3)), "k/float16": floats(rng, "float16", (4, 3)),
            "v/bfloat16": floats(rng, "bfloat16", (2, 5)), "other": np.arange(3, dtype=np.int8)}
    scales = {"q/float32": floats(rng, "float32", (4, 1), 1.0), "k/float16": floats(rng, "float16", (1, 3), 1.0),
              "v/bfloat16": floats(rng, "bfloat16", (2, 1), 1.0)}
    c.valid("embedded-x-ia3", "7.8", "the example embedded update type x-ia3 (tests/ia3.py: result = base * s, s "
            "broadcast, float32 arithmetic rounded to nearest even), exact, for float16, bfloat16 and float32",
            lambda path: ia3.write(path, base, scales, commit("x-ia3 scaling")), base,
            features=["embedded-update-types"])

    def ia3_with_unknown_member(path):
        ia3.write(path, base, scales, commit("x-ia3 scaling"))
        with h5py.File(path, "r+") as f:
            f["update_types/x-ia3"].create_dataset("notes", data=np.zeros(3, np.uint8))

    c.valid("embedded-unknown-member", "7.8", "x-ia3 whose group holds a dataset `notes` besides its functions: an "
            "unknown member of an update type's group is MD303 (§5.4, a warning), and the type is still defined",
            ia3_with_unknown_member, base, warnings=["MD303"], features=["embedded-update-types"])

    # storage variants (§8.2)
    rng = rng_for("storage")
    old = rng_bits(rng, "float32", (64, 40))
    base = {"w": old, "i": rng_bits(rng, "int64", (300,))}
    ups = {"w": mdiff.dense(old, changed(rng, old, 0.2)), "i": mdiff.sparse(base["i"], changed(rng, base["i"], 0.1)),
           "new": mdiff.replace(rng_bits(rng, "uint16", (50, 30)))}
    c.valid("storage-uncompressed", "8.2", "the same kinds of updates written without compression (contiguous "
            "datasets)", lambda path: mdiff.write(path, ups, commit("uncompressed"), compression="none"), base)

    def edge_chunks(path):
        mdiff.write(path, ups, commit("edge chunks"), compression="none")
        with h5py.File(path, "r+") as f:
            g = f["parameters/w"]
            x = g["xor"][()]
            del g["xor"]
            g.create_dataset("xor", data=x, chunks=(7, 9), shuffle=True, compression="gzip", compression_opts=6,
                             track_times=False)
            g = f["parameters/new"]
            x = g["value"][()]
            del g["value"]
            g.create_dataset("value", data=x, chunks=(16, 7), fletcher32=True, track_times=False)
            g = f["parameters/i"]
            x = g["xor"][()]
            del g["xor"]
            g.create_dataset("xor", data=x, chunks=(1,), compression="gzip", compression_opts=9, track_times=False)

    c.valid("storage-edge-chunks", "8.2", "chunked datasets whose chunk shape does not divide the dataset shape "
            "(partial edge chunks): shuffle + deflate, fletcher32 alone, and one-element chunks", edge_chunks, base)

    def old_format(path):
        tmp = path.with_suffix(".tmp")
        mdiff.write(tmp, ups, commit("HDF5 1.8 structures"))
        with h5py.File(tmp, "r") as src, h5py.File(path, "w", libver=("earliest", "v108"), track_order=False) as dst:
            for k in sorted(src.attrs):
                write_string(dst, k, bytes(src.attrs[k]).rstrip(b"\0").decode("utf-8"))
            params = dst.create_group("parameters")
            for name in sorted(src["parameters"]):
                sg, dg = src["parameters"][name], params.create_group(name)
                for k in sorted(sg.attrs):
                    write_string(dg, k, bytes(sg.attrs[k]).rstrip(b"\0").decode("utf-8"))
                for k in sorted(sg):
                    ds = sg[k]
                    kw = {"chunks": ds.chunks, "compression": ds.compression, "compression_opts": ds.compression_opts,
                          "shuffle": ds.shuffle} if ds.chunks else {}
                    dg.create_dataset(k, data=ds[()], track_times=False, **kw)
        tmp.unlink()

    c.valid("storage-hdf5-1.8-structures", "3.1", "a file made with the oldest HDF5 structures (superblock 0, "
            "symbol-table groups, version 1 object headers, version 1 B-tree chunk indexes)", old_format, base)

    # optional members of `update` (§7.1): lossy and stats
    rng = rng_for("optional-members")
    base = {"d": rng_bits(rng, "float32", (4,)), "s": rng_bits(rng, "int16", (6,)), "l": floats(rng, "float32", (3, 2))}
    d_new, s_new = changed(rng, base["d"], 0.5), changed(rng, base["s"], 0.3)

    def with_members(update, **members):
        return mdiff.Update({**update.meta, **members}, update.data)

    ups = {"d": with_members(mdiff.dense(base["d"], d_new), lossy=False, stats={"changed": 2, "rel_change": 0.25}),
           "s": with_members(mdiff.sparse(base["s"], s_new), stats={"changed": 1}),
           "r": with_members(mdiff.replace(np.arange(3, dtype=np.uint8)), lossy=False, stats={}),
           "l": with_members(mdiff.low_rank(np.ones((3, 1), np.float32), np.ones((1, 2), np.float32), (3, 2),
                                            DTYPES["float32"], 0.25), stats={"rel_change": 0.5})}
    c.valid_updates("optional-update-members", "7.1", "updates with the optional members `lossy` and `stats` "
                    "(informative: they change nothing)", base, ups)

    def many_root_attributes(path):
        with inv._edit(path) as f:
            for i in range(10):
                write_string(f, f"note{i:02d}", f"unknown attribute {i}")

    c.valid("MD303-many_root_attributes", "5.4", "MD303 (a warning; the file is valid): 13 attributes on the root "
            "group, more than HDF5 keeps in the object header (dense attribute storage in a fractal heap)",
            many_root_attributes, c.rules_base, warnings=["MD303"])

    # the reference's edge cases (tests/invalid_files.py VALID_CASES) and warning-only cases
    sections = {"valid_escaped_names": "5.2", "valid_empty_parameters": "5.1", "valid_every_type": "7.1",
                "valid_sparse_without_entries": "7.4", "valid_storage_variants": "8.2",
                "valid_json_integral_floats": "4.1", "valid_commit_edges": "4.2", "valid_empty_extensions": "3.4",
                "valid_commit_date_year_0001": "4.2", "valid_attributes_fill_their_size": "8.2"}
    for case_id, build in inv.VALID_CASES:
        doc = first_sentence(build)
        c.valid(case_id, sections.get(case_id, "12"),
                f"an edge the rules allow: {case_id.replace('_', ' ')}" + (f". {doc}" if doc else ""),
                build, c.rules_base)
    for code, case_id, build in inv.CASES:
        if code in WARNING_CODES:
            doc = first_sentence(build)
            c.valid(f"{code}-{case_id}", RULES[code].section, f"{code} (a warning; the file is valid): "
                    f"{case_id.replace('_', ' ')}" + (f". {doc}" if doc else ""), build, c.rules_base,
                    warnings=sorted(inv.expected_codes(code, case_id)))

    # §8.3, §12.1: the object limit counts the root group and every attribute in one total
    c.valid("MD511-objects_at_limit", "8.3", "exactly at the object limit (max_objects 7): the root group, its 3 "
            "attributes, /parameters, /parameters/w and its `update` attribute — the root counted, one total "
            "(MD511-objects_over_limit_root_counted is the same file under a limit of 6)",
            inv.build_MD511_objects_over_limit_root_counted, {"w": inv.W.copy()}, limits={"max_objects": 7})


def _older_than_its_members(path, updates, meta, version: str) -> None:
    """A file whose `format_version` says ``version``, older than members it has (a writer never makes one)."""
    mdiff.write(path, updates, meta)
    with h5py.File(path, "r+") as f:
        overwrite_string(f, "format_version", version)


def build_invalid(c: Corpus) -> None:
    for code, case_id, build in inv.CASES:
        if code in WARNING_CODES:
            continue
        rule = RULES[code]
        doc = first_sentence(build)
        # (the rule's title is not repeated: its code says it, and titles get reworded)
        description = f"{code}: {case_id.replace('_', ' ')}" + (f". {doc}" if doc else "")
        features = ["embedded-update-types"] if rule.section == "7.8" else []
        if code in REFUSED_TYPE_CODES and case_id in IA3_BASE_CASES:
            description += (f" Codes reported: {code} and MD402 (SPEC.md §7.8: a type whose group breaks a rule is "
                            "not defined, so the parameter `w32` that names it is MD402 too).")
        family = "hostile" if case_id in HOSTILE_CASES else "invalid"
        base = c.ia3_base if case_id in IA3_BASE_CASES else c.rules_base
        c.invalid(f"{code}-{case_id}", family, code, rule.section, description, build, base,
                  limits=inv.LIMITS.get(case_id), features=features, also=inv.ALSO_REPORTED.get(case_id, ()))

    # hostile files tests/invalid_files.py lacks
    def absurd_dimensions(path):
        n = 2**40
        with inv._edit(path) as f:
            g = f["parameters/w"]
            inv._set_json(g, "update", {"type": "dense", "version": 1, "shape": [n, n], "dtype": "uint8",
                                        "sha256": inv.ZERO_SHA})
            inv._replace_dataset(g, "xor", shape=(n, n), dtype="<u1", chunks=(2**10, 2**10))

    c.invalid("MD508-absurd_dimensions", "hostile", "MD508", "8.3", "a dense update of shape [2^40, 2^40] with a "
              "matching chunked dataset (never written): 2^80 elements, more than 64-bit arithmetic holds",
              absurd_dimensions, c.rules_base)

    def index_max(path):
        inv._sparse_with_indices(path, [1, 2**64 - 1])

    c.invalid("MD408-sparse_index_uint64_max", "hostile", "MD408", "7.4", "a sparse index of 2^64 - 1, which "
              "overflows any signed or 64-bit `index + 1` arithmetic", index_max, c.rules_base)

    def update_text(path, old, new):
        with inv._edit(path) as f:
            g = f["parameters/w"]
            text = bytes(g.attrs["update"]).rstrip(b"\0").decode("utf-8")
            assert old in text
            write_string(g, "update", text.replace(old, new))

    c.invalid("MD508-shape_beyond_64_bits", "hostile", "MD508", "8.3", "a declared dimension of 2^64 + 4 (an integer "
              "the schema allows) with a dataset of shape [2, 4]: over the element limit, which keeps any 64-bit "
              "wrap-around from making them agree",
              lambda path: update_text(path, '"shape":[2,4]', '"shape":[2,18446744073709551620]'), c.rules_base)

    # §4.1: a number whose magnitude rounds to infinity is an error, like `Infinity`
    def overflowing_number(path, where):
        mdiff.write(path, {"w": inv._low_rank_update()}, commit("a number beyond binary64"))
        with h5py.File(path, "r+") as f:
            obj = f["parameters/w"] if where == "update" else f
            text = bytes(obj.attrs[where]).rstrip(b"\0").decode("utf-8")
            old, new = ('"scale":0.5', '"scale":1e400') if where == "update" else \
                ('"message":"a number beyond binary64"', '"message":1e400')
            assert old in text
            write_string(obj, where, text.replace(old, new))

    c.invalid("MD401-update_number_overflows", "invalid", "MD401", "4.1", "MD401: a low_rank update whose `scale` "
              "is 1e400, a JSON number whose magnitude rounds to infinity in binary64: an error like `Infinity` (§4.1), "
              "not a number the schema refuses", lambda path: overflowing_number(path, "update"), c.rules_base)
    c.invalid("MD201-commit_number_overflows", "invalid", "MD201", "4.1", "MD201: `commit` holds the number 1e400 "
              "(its `message`), which rounds to infinity in binary64: an error like `Infinity` (§4.1)",
              lambda path: overflowing_number(path, "commit"), c.rules_base)

    # §3.3, §4.2: `state_sha256` came with format version 1.3
    c.invalid("MD202-state_sha256_before_1_3", "invalid", "MD202", "4.2", "MD202: the commit has a well-formed "
              "`state_sha256`, a member that came with format version 1.3; the file says 1.2",
              lambda path: _older_than_its_members(path, {"w": mdiff.dense(inv.W, inv.W_NEW)}, dataclasses.replace(
                  commit("a member of a later version"), state_sha256=hashlib.sha256(b"a state").hexdigest()), "1.2"),
              c.rules_base)

    # apply-time rules: a valid file, a base that does not fit (§9.2, §9.3)
    state = inv.base_state()

    def dense_w(path):
        mdiff.write(path, {"w": mdiff.dense(inv.W, inv.W_NEW), "counts": mdiff.sparse(inv.COUNTS, inv.COUNTS + 1)},
                    commit("dense w, sparse counts"))

    def without(name):
        return {k: v for k, v in state.items() if k != name}

    c.apply_refused("MD600-base_lacks_dense_parameter", "MD600", "the base has no parameter `w` for a dense update",
                    dense_w, without("w"))

    def delete_flags(path):
        mdiff.write(path, {"flags": mdiff.delete(inv.FLAGS)}, commit("delete flags"))

    c.apply_refused("MD600-base_lacks_deleted_parameter", "MD600", "the base has no parameter `flags` for a delete "
                    "update", delete_flags, without("flags"))

    c.apply_refused("MD601-base_shape_differs", "MD601", "the base's `w` is float32 [4, 2], the dense update's "
                    "float32 [2, 4]", dense_w, {**state, "w": inv.W.reshape(4, 2).copy()})
    c.apply_refused("MD601-base_dtype_differs", "MD601", "the base's `w` is float64 [2, 4], the dense update's "
                    "float32 [2, 4]", dense_w, {**state, "w": inv.W.astype(np.float64)})
    c.apply_refused("MD601-delete_base_dtype_differs", "MD601", "the base's `flags` is uint8, the delete update's "
                    "bool", delete_flags, {**state, "flags": inv.FLAGS.astype(np.uint8)})

    def low_rank_w(path):
        mdiff.write(path, {"w": inv._low_rank_update()}, commit("low_rank w"))

    c.apply_refused("MD601-low_rank_base_shape_differs", "MD601", "the base's `w` is [8], the low_rank update's "
                    "[2, 4]", low_rank_w, {**state, "w": inv.W.reshape(8).copy()})

    def unfingerprinted(update):  # as a 1.0 writer made it: no `base_sha256` (§7.1)
        return mdiff.Update({k: v for k, v in update.meta.items() if k != "base_sha256"}, update.data)

    def dense_w_1_0(path):
        mdiff.write(path, {"w": unfingerprinted(mdiff.dense(inv.W, inv.W_NEW)),
                           "counts": unfingerprinted(mdiff.sparse(inv.COUNTS, inv.COUNTS + 1))}, commit("dense w, sparse counts"))

    other = inv.W.copy()
    other[1, 1] = -other[1, 1]
    c.apply_refused("MD602-dense_other_base", "MD602", "the dense update (format 1.0: no `base_sha256`) was made from "
                    "another base: the result's sha256 differs", dense_w_1_0, {**state, "w": other})
    c.apply_refused("MD602-sparse_other_base", "MD602", "the sparse update (format 1.0: no `base_sha256`) was made "
                    "from another base: the result's sha256 differs", dense_w_1_0, {**state, "counts": inv.COUNTS[::-1].copy()})
    c.apply_refused("MD603-dense_other_base", "MD603", "the dense update's `base_sha256` is not the sha256 of the "
                    "base's `w` (one element negated)", dense_w, {**state, "w": other})
    c.apply_refused("MD603-sparse_other_base", "MD603", "the sparse update's `base_sha256` is not the sha256 of the "
                    "base's `counts`", dense_w, {**state, "counts": inv.COUNTS[::-1].copy()})
    flipped = inv.W.copy()
    flipped.view(np.uint32)[0, 0] ^= 1  # one bit: +0.0 becomes the smallest subnormal

    def low_rank_w_named(path):
        mdiff.write(path, {"w": mdiff.Update({**inv._low_rank_update().meta, "base_sha256": sha256_hex(inv.W)},
                                             inv._low_rank_update().data)}, commit("low_rank w, from a named base"))

    c.apply_refused("MD603-low_rank_other_base", "MD603", "the low_rank update names its base by `base_sha256`; the "
                    "base's `w` differs from it in one bit (low_rank has no result sha256 to catch it)",
                    low_rank_w_named, {**state, "w": flipped})

    # checkpoint rules (§10): the base checkpoint is not a usable .safetensors file
    good = raw_safetensors(raw_state(state))
    feats = ["checkpoint-rule-codes"]
    c.apply_refused("MD701-base_truncated", "MD701", "the base checkpoint is cut short: its last tensor's bytes "
                    "are missing", dense_w, good[: len(good) - 16], features=feats)
    c.apply_refused("MD701-base_header_not_json", "MD701", "the base checkpoint's header is not JSON", dense_w,
                    struct.pack("<Q", 16) + b"{not json at all", features=feats)
    overlap = {**raw_state(state)}
    bad = raw_safetensors(overlap)
    (n,) = struct.unpack("<Q", bad[:8])
    header = json.loads(bad[8: 8 + n])
    header["flags"]["data_offsets"] = [0, 8]  # overlaps `big`
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    c.apply_refused("MD701-base_tensors_overlap", "MD701", "two tensors of the base checkpoint share bytes "
                    "(data_offsets overlap)", dense_w, struct.pack("<Q", len(h)) + h + bad[8 + n:], features=feats)
    c.apply_refused("MD701-base_bytes_after_last_tensor", "MD701", "the base checkpoint has 8 bytes after its last "
                    "tensor, which belong to no tensor (§10: the data_offsets tile the data)", dense_w,
                    good + bytes(8), features=feats)
    c.apply_refused("MD701-base_gap_between_tensors", "MD701", "the base checkpoint's data_offsets leave 8 bytes "
                    "after its first tensor, which belong to no tensor (§10)", dense_w,
                    raw_safetensors(raw_state(state), gap_after=min(state)), features=feats)
    fp8 = {**raw_state(state), "fp8": ("F8_E4M3", [4], bytes([0x38, 0x40, 0xB8, 0x00]))}
    c.apply_refused("MD702-base_float8_tensor", "MD702", "the base checkpoint holds an F8_E4M3 tensor (untouched by "
                    "the diff): a dtype outside §6.1", dense_w, raw_safetensors(fp8), features=feats)

    # §10 (issue 17): what a malformed .safetensors base is, and which code a dtype string gets
    quantized = {**raw_state(state), "q": ("Q4_0", [4], bytes(4))}
    c.apply_refused("MD701-base_dtype_not_safetensors", "MD701", "a tensor of the base checkpoint has the dtype "
                    "string `Q4_0`, which the safetensors format does not define: a malformed file (MD701), not a "
                    "dtype outside §6.1 (MD702, for the format's own F8_E4M3, …)", dense_w,
                    raw_safetensors(quantized), features=feats)
    metadata_tensor = {**raw_state(state), "__metadata__": ("F32", [1], bytes(4))}
    c.apply_refused("MD701-base_metadata_is_a_tensor", "MD701", "the base checkpoint's reserved key `__metadata__` "
                    "holds a tensor's entry (dtype, shape, data_offsets) instead of an object of strings: a "
                    "malformed file, never a parameter named `__metadata__`", dense_w,
                    raw_safetensors(metadata_tensor), features=feats)
    two = raw_state(state)
    tag, shape, data = two["flags"]
    two["flags"] = (tag, shape, bytes([2]) + data[1:])
    c.apply_refused("MD701-base_bool_byte_2", "MD701", "the base checkpoint's bool tensor `flags` (which the diff "
                    "does not touch) holds the byte 2: §6.1 allows 0 and 1 only, so the checkpoint is malformed",
                    dense_w, raw_safetensors(two), features=feats)

    def metadata_name(path):
        mdiff.write(path, {"__metadata__": mdiff.replace(np.arange(4, dtype=np.int32))}, commit("__metadata__"))

    c.apply_refused("MD703-parameter_named___metadata__", "MD703", "the diff adds a parameter named `__metadata__`, "
                    "which a .safetensors file cannot hold (the name is its metadata key)", metadata_name,
                    c.rules_base, features=feats)


# ---------------------------------------------------------------- repositories (SPEC.md §13)

REPO_AUTHOR = "Conformance <conformance@example.org>"


@contextlib.contextmanager
def pinned_writer():
    """mdiff's repository API stamps its commits (and snapshots) with writer {"name": "mdiff", "version":
    mdiff.version.__version__}: pin the version, so that the bytes, and with them the commit ids, do not
    change with mdiff's version."""
    import mdiff.version

    with mock.patch.object(mdiff.version, "__version__", "conformance"):
        yield


def repo_date(i: int) -> str:
    return f"2026-01-02T00:{i // 60:02d}:{i % 60:02d}Z"


def reference_checkout(repo_dir: Path, revision: str, out: Path) -> tuple[int, dict]:
    """The reference's command line on the contract's checkout command: (exit status, its JSON)."""
    from mdiff.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        status = main(["checkout", revision, "-o", str(out), "-C", str(repo_dir), "--json", "-q"])
    return status, json.loads(buf.getvalue())


def same_state(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    from mdiff.format.dtypes import dtype_of

    return set(a) == set(b) and all(
        a[k].shape == b[k].shape and dtype_of(a[k]) == dtype_of(b[k])
        and np.ascontiguousarray(a[k]).tobytes() == np.ascontiguousarray(b[k]).tobytes() for k in a)


def _commit_explicit(repo: Repository, branch: str, old: dict, explicit: dict, message: str, when: int):
    """A commit on ``branch`` made with the reference API, every update given explicitly (so each has the
    type the case wants); returns (id, new state)."""
    new = dict(old)
    for name, update in explicit.items():  # the new value (unused by the commit: every change is explicit)
        value = apply_update(update, old.get(name), name)
        if value is None:
            del new[name]
        else:
            new[name] = value
    repo.set_head(branch=branch)
    cid = repo.commit(new, message, author=REPO_AUTHOR, date=repo_date(when), explicit=explicit)
    return cid, new


def build_repositories(c: Corpus) -> None:
    with pinned_writer():
        branch_merge_repository(c)
        detached_head_repository(c)
        lying_snapshots_repository(c)
        inexact_snapshot_repository(c)
        parented_snapshot_repository(c)
        commit_id_named_branches_repository(c)
        tags_repository(c)
        reflogs_repository(c)
        refused_repositories(c)
        refused_reflog_revisions(c)
        format_2_repositories(c)


def branch_merge_repository(c: Corpus) -> None:
    """Two branches off `main` (one with a `/` in its name), a merge, a snapshot; every update type."""
    case_id = "repository-branch-merge"
    d = c.case_dir("valid", case_id)
    repo = Repository.init(d / "repo", repository_format=1)
    rng = rng_for(case_id)
    ids: dict[str, str] = {}
    states: dict[str, dict[str, np.ndarray]] = {}
    what: dict[str, str] = {}

    def step(label, branch, old, updates, message, when, new=None):
        ids[label], state = _commit_explicit(repo, branch, states[old] if old else {}, updates, message, when)
        states[label] = state if new is None else new
        what[label] = message

    root = {"embed": floats(rng, "float32", (4, 3)), "bias": floats(rng, "float16", (3,)),
            "norm": floats(rng, "float64", (3,)), "steps": np.array(100, np.int64),
            "mask": np.array([True, False, True, True, False]), "old": np.arange(4, dtype=np.int8)}
    step("root", "main", None, {k: mdiff.replace(v) for k, v in root.items()},
         "root: six parameters (replace)", 0, root)

    def moved(state, name, scale=0.5, where=None):
        v = state[name]
        delta = floats(rng, "float64", v.shape, scale)
        if where is not None:
            delta = np.where(np.isin(np.arange(v.size).reshape(v.shape), where), delta, 0.0)
        return (v.astype(np.float64) + delta).astype(v.dtype)

    r = states["root"]
    new_embed, new_bias = moved(r, "embed"), moved(r, "bias", where=[1])
    step("main-1", "main", "root", {"embed": mdiff.dense(r["embed"], new_embed), "bias": mdiff.sparse(r["bias"], new_bias)},
         "main-1: embed dense, bias sparse", 1, {**r, "embed": new_embed, "bias": new_bias})
    repo.set_branch("feature", ids["main-1"])
    repo.set_branch("exp/lora", ids["main-1"])

    a = states["main-1"]
    head = np.array([[1.5, -2.0], [0.25, 3.0]], NP["bfloat16"])
    new_embed = moved(a, "embed", where=[2, 7])
    step("main-2", "main", "main-1", {"steps": mdiff.replace(np.array(200, np.int64)), "old": mdiff.delete(a["old"]),
                                       "head": mdiff.replace(head), "embed": mdiff.sparse(a["embed"], new_embed)},
         "main-2: steps replaced, old deleted, head added, embed sparse", 2,
         {**{k: v for k, v in a.items() if k != "old"}, "steps": np.array(200, np.int64), "head": head,
          "embed": new_embed})

    new_embed, new_mask = moved(a, "embed"), a["mask"] ^ np.array([False, True, False, False, True])
    adapter = np.array([0.5, -0.75], np.float32)
    step("feature-1", "feature", "main-1", {"embed": mdiff.dense(a["embed"], new_embed), "adapter": mdiff.replace(adapter),
                                             "mask": mdiff.sparse(a["mask"], new_mask)},
         "feature-1: embed dense, adapter added, mask sparse (bool)", 3,
         {**a, "embed": new_embed, "adapter": adapter, "mask": new_mask})
    f1 = states["feature-1"]
    new_bias, new_norm = moved(f1, "bias"), moved(f1, "norm", where=[0])
    step("feature-2", "feature", "feature-1", {"bias": mdiff.dense(f1["bias"], new_bias),
                                                "norm": mdiff.sparse(f1["norm"], new_norm)},
         "feature-2: bias dense, norm sparse", 4, {**f1, "bias": new_bias, "norm": new_norm})

    repo.set_head(branch="main")
    merged = repo.merge("feature", "average", message="merge feature into main (three-way, conflicts: average)",
                        author=REPO_AUTHOR, date=repo_date(5))
    merge_id = merged.commit
    assert merge_id and not merged.conflicts, merged.conflicts
    ids["merge"] = merge_id
    what["merge"] = ("merge of feature into main (three-way, §13.7: embed, changed on both sides, averaged; bias, norm, "
                     "mask and adapter from feature; steps and head from main): parents main-2, feature-2")
    assert repo.parents(merge_id) == (ids["main-2"], ids["feature-2"])
    states["merge"] = repo.checkout(merge_id)
    ours, theirs = states["main-2"], states["feature-2"]
    assert same_state(states["merge"], {  # §13.7, by hand: the one conflict averaged, the rest three-way
        "embed": (0.5 * ours["embed"].astype(np.float64) + 0.5 * theirs["embed"].astype(np.float64)).astype(np.float32),
        "bias": theirs["bias"], "norm": theirs["norm"], "steps": ours["steps"], "mask": theirs["mask"],
        "head": ours["head"], "adapter": theirs["adapter"]})

    m = states["merge"]
    new_embed, new_norm = moved(m, "embed", where=[5]), floats(rng, "float64", (3,))
    step("main-3", "main", "merge", {"embed": mdiff.sparse(m["embed"], new_embed), "norm": mdiff.replace(new_norm)},
         "main-3: after the merge, embed sparse, norm replaced", 6, {**m, "embed": new_embed, "norm": new_norm})

    # exp/lora: a low_rank update (§7.5; compared within its bound)
    A = np.array([[1.0], [-2.0], [0.5], [4.0]], np.float32)
    B = np.array([[0.25, -1.0, 2.0]], np.float32)
    step("lora-1", "exp/lora", "main-1", {"embed": mdiff.low_rank(A, B, (4, 3), DTYPES["float32"], 0.5)},
         "lora-1 (branch exp/lora): embed low_rank, rank 1", 7)
    exact, lora_bounds = low_rank_exact(a["embed"], A, B, 0.5, "float32")
    states["lora-1"] = {**a, "embed": exact}

    repo.set_head(branch="main")
    repo.snapshot(ids["main-1"])  # checkouts of every commit but the root may start there (§13.5)
    # what an interrupted writer leaves behind; readers ignore files starting with '.' (§13.1)
    (repo.dir / "commits" / ".commit.q7x2k9.mdiff").write_bytes(b"a partial commit file\n")
    (repo.dir / "refs" / "heads" / ".main.a81f.tmp").write_text("not a ref\n", encoding="utf-8")

    # the reference's checkout of every commit is the state committed
    for label, cid in ids.items():
        got = repo.checkout(cid)
        if label == "lora-1":
            assert within(got["embed"], lora_bounds).all()
            assert same_state({k: v for k, v in got.items() if k != "embed"},
                              {k: v for k, v in states[label].items() if k != "embed"})
        else:
            assert same_state(got, states[label]), label

    (d / "states").mkdir()
    for label, state in states.items():
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    save_checkpoint(d / "states" / "lora-1.bounds.safetensors", {"embed": lora_bounds})

    def unique_prefix(cid: str) -> str:
        n = 4
        while sum(other.startswith(cid[:n]) for other in repo.commit_ids()) > 1:
            n += 1
        return cid[:n]

    revisions = [("HEAD", "main-3"), ("main", "main-3"), ("main~0", "main-3"), ("main^", "merge"), ("main~", "merge"),
                 ("main~2", "main-2"), ("main~2^", "main-1"), ("main~4", "root"), ("feature", "feature-2"),
                 ("feature^", "feature-1"), ("feature~2", "main-1"), ("exp/lora", "lora-1"), ("exp/lora^", "main-1")]
    revisions += [(cid, label) for label, cid in ids.items()]
    revisions += [(unique_prefix(ids["merge"]), "merge"), (ids["root"][:10], "root"),
                  (unique_prefix(ids["feature-2"]) + "~1", "feature-1")]
    c.repository_case(case_id, "valid", "13.4", "a repository: root, three commits on main, a branch `feature` "
                      "(two commits) merged into main (a merge commit with two parents, made by the reference's "
                      "three-way merge, its one conflict averaged), a branch `exp/lora` (a low_rank commit), a snapshot of main-1 (§13.5), "
                      "and temporary files a reader ignores; every update type. The state at each commit, checked out "
                      "by branch, HEAD, ~N, ^, full id and prefix", d / "repo", revisions=revisions, ids=ids,
                      what=what, states={k: d / "states" / f"{k}.safetensors" for k in states},
                      bounds={"lora-1": d / "states" / "lora-1.bounds.safetensors"})


def small_repository(path: Path, detach: bool = False, repository_format: int = 1):
    """root (w float32 [2, 4] and c int32 [3], replaced), k1 (w dense), k2 (c sparse) on main; of format 1
    (ids the SHA-256 of each file: the cases written before revision 12) unless told."""
    repo = Repository.init(path, repository_format=repository_format)
    ids, updates = {}, {}
    root = {"w": inv.W.copy(), "c": np.array([7, -1, 3], np.int32)}
    updates["root"] = {k: mdiff.replace(v) for k, v in root.items()}
    ids["root"], s0 = _commit_explicit(repo, "main", {}, updates["root"], "root", 0)
    updates["k1"] = {"w": mdiff.dense(inv.W, inv.W_NEW)}
    ids["k1"], s1 = _commit_explicit(repo, "main", s0, updates["k1"], "k1: w dense", 1)
    updates["k2"] = {"c": mdiff.sparse(root["c"], np.array([7, 5, 3], np.int32))}
    ids["k2"], _ = _commit_explicit(repo, "main", s1, updates["k2"], "k2: c sparse", 2)
    states = {"root": root, "k1": {**root, "w": inv.W_NEW.copy()},
              "k2": {"w": inv.W_NEW.copy(), "c": np.array([7, 5, 3], np.int32)}}
    return repo, ids, updates, states


def detached_head_repository(c: Corpus) -> None:
    case_id = "repository-detached-head"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo")
    repo.set_head(commit_id=ids["k1"])
    (d / "states").mkdir()
    for label, state in states.items():
        assert same_state(repo.checkout(ids[label]), state), label
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    c.repository_case(case_id, "valid", "13.1", "a detached HEAD (a commit id, not a branch): HEAD, HEAD^ and the "
                      "branch main", d / "repo", revisions=[("HEAD", "k1"), ("HEAD^", "root"), ("main", "k2")], ids=ids,
                      what={"root": "root: w, c (replace)", "k1": "k1: w dense", "k2": "k2: c sparse"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states})


def lying_snapshots_repository(c: Corpus) -> None:
    """Snapshots that disagree with their commits (§13.5, MD807): each well formed, named after its
    commit and listing it in `meta.snapshot_of`, but holding other values, a parameter more or one less
    than the state its commits define. A reader takes nothing from them."""
    case_id = "repository-snapshots-disagree"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo")

    def lie(label: str, state: dict, what: str) -> None:
        mdiff.write(repo.snapshot_path(ids[label]), {k: mdiff.replace(v) for k, v in sorted(state.items())},
                    commit(f"snapshot: {what}", meta={"snapshot_of": ids[label]}, date=repo_date(9)))

    other = states["k1"]["w"].copy()
    other[0, 0] += np.float32(1)
    lie("k1", {**states["k1"], "w": other}, "w holds another value than the sha256 its commits record")
    lie("k2", {**states["k2"], "x": np.zeros(2, np.int8)}, "a parameter x that the state does not hold")
    lie("root", {"w": states["root"]["w"]}, "c, which the state holds, left out")
    (d / "states").mkdir()
    for label, state in states.items():
        assert same_state(repo.checkout(ids[label]), state), label
        with repo.open_state(ids[label]) as view:
            assert view.snapshot is None and view.rejected[ids[label]][0] == "MD807", label
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    c.repository_case(case_id, "valid", "13.5", "every commit of main (root, k1, k2) has a snapshot that disagrees "
                      "with its commits (MD807): k1's holds another value of w, k2's a parameter x more, the root's "
                      "lacks c; each is a valid file of replace updates whose meta.snapshot_of is its name. A reader "
                      "takes no value from them: every checkout gives the state the commits define",
                      d / "repo", revisions=[("main", "k2"), ("main~1", "k1"), ("main~2", "root")], ids=ids,
                      what={"root": "root: w, c (replace); a snapshot without c",
                            "k1": "k1: w dense; a snapshot with another w",
                            "k2": "k2: c sparse; a snapshot with a parameter x more"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states})


def parented_snapshot_repository(c: Corpus) -> None:
    """A snapshot whose own metadata lists a parent (§13.5: a writer writes none) but which agrees with its
    commits: its parents, like its author and message, mean nothing to a reader, which may start there — and
    gets the commits' state either way, since it takes only values whose sha256 the commits record."""
    case_id = "repository-snapshot-with-parents"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo")
    mdiff.write(repo.snapshot_path(ids["k1"]), {k: mdiff.replace(v) for k, v in sorted(states["k1"].items())},
                commit("snapshot of k1, naming root as a parent", parents=[ids["root"]],
                       meta={"snapshot_of": ids["k1"]}, date=repo_date(9)))
    with repo.open_state(ids["k2"]) as view:
        assert view.snapshot == ids["k1"]  # the reference starts there
    (d / "states").mkdir()
    for label, state in states.items():
        assert same_state(repo.checkout(ids[label]), state), label
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    c.repository_case(case_id, "valid", "13.5", "k1's snapshot agrees with its commits but its metadata lists a "
                      "parent (root), which §13.5's writers never write: parents are not among the conditions a "
                      "reader checks, and every checkout gives the state the commits define",
                      d / "repo", revisions=[("main", "k2"), ("main~1", "k1"), ("main~2", "root")], ids=ids,
                      what={"root": "root: w, c (replace)", "k1": "k1: w dense; a snapshot that names a parent",
                            "k2": "k2: c sparse"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states})


def inexact_snapshot_repository(c: Corpus) -> None:
    """A snapshot that agrees with its commits, of a state with an inexact value (§13.4): the value a
    low_rank update made has no sha256 to check a snapshot's bits against, so a reader replays it from
    the commits — the snapshot's, zeros, are far outside §7.5's tolerance."""
    case_id = "repository-snapshot-inexact-value"
    d = c.case_dir("valid", case_id)
    repo = Repository.init(d / "repo", repository_format=1)
    A = np.array([[1.0], [2.0]], np.float32)
    B = np.array([[0.5, 0.25, -1.0, 2.0]], np.float32)
    v = np.array([3, 1, 4], np.int16)
    r0 = repo.store(lambda w: [w.add("v", mdiff.replace(v)), w.add("w", mdiff.replace(inv.W.copy()))],
                    commit("root: v, w (replace)", date=repo_date(0)))
    p1 = repo.store(lambda w: w.add("w", mdiff.low_rank(A, B, (2, 4), DTYPES["float32"], 0.5)),
                    commit("lora: w low_rank", parents=[r0], date=repo_date(1)))
    repo.set_branch("main", p1)
    mdiff.write(repo.snapshot_path(p1), {"v": mdiff.replace(v), "w": mdiff.replace(np.zeros((2, 4), np.float32))},
                commit("snapshot: w inexact, its bits zeros", meta={"snapshot_of": p1, "inexact": '["w"]'},
                       date=repo_date(9)))
    exact, bounds = low_rank_exact(inv.W, A, B, 0.5, "float32")
    states = {"root": {"v": v, "w": inv.W.copy()}, "lora": {"v": v, "w": exact}}
    with repo.open_state(p1) as view:
        assert view.snapshot == p1  # it agrees with its commits: v may come from it, w may not
        assert within(view.read("w"), bounds).all() and view.read("w").any()
    (d / "states").mkdir()
    for label, state in states.items():
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    save_checkpoint(d / "states" / "lora.bounds.safetensors", {"w": bounds})
    c.repository_case(case_id, "valid", "13.5", "main: a root (v, w replaced) and a low_rank commit of w, whose "
                      "snapshot agrees with its commits (meta.inexact [\"w\"]) but holds zeros for w: an inexact "
                      "value is never taken from a snapshot (no sha256 pins it), so w is the low_rank result, within "
                      "§7.5's bound", d / "repo", revisions=[("main", "lora"), ("main~1", "root")],
                      ids={"root": r0, "lora": p1},
                      what={"root": "root: v, w (replace)", "lora": "lora: w low_rank; a snapshot with w zeros"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states},
                      bounds={"lora": d / "states" / "lora.bounds.safetensors"})


def commit_id_named_branches_repository(c: Corpus) -> None:
    case_id = "repository-full-id-names-the-commit"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo")
    # files of refs/heads named like full commit ids: §13.1 makes them no branch, and §13.3 looks a
    # full id up as a commit before any branch
    for name, target in ((ids["root"], ids["k2"]), (ids["k1"], ids["root"])):
        (repo.dir / "refs" / "heads" / name).write_text(target + "\n", encoding="utf-8")
    (d / "states").mkdir()
    for label, state in states.items():
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    c.repository_case(case_id, "valid", "13.3", "files of refs/heads named like full commit ids (root's, at k2; "
                      "k1's, at root), which §13.1 makes no branch: a full id always names that commit (§13.3)",
                      d / "repo", revisions=[(ids["root"], "root"), (ids["k1"], "k1"), (ids["k1"] + "^", "root"),
                                             ("main", "k2")],
                      ids=ids, what={"root": "root: w, c (replace)", "k1": "k1: w dense", "k2": "k2: c sparse"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states})


def tags_repository(c: Corpus) -> None:
    case_id = "repository-tags"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo")
    prefix = ids["k2"][:8]
    with repo.lock():
        repo.create_tag("v1", ids["root"])
        repo.create_tag("release/k1", ids["k1"])
        repo.create_tag(prefix, ids["root"])  # a tag named like a prefix of k2's id wins over the prefix
    # a tag named like a branch, which no writer makes (§13.3): the branch is meant
    (repo.dir / "refs" / "tags" / "main").write_text(ids["root"] + "\n", encoding="utf-8")
    (d / "states").mkdir()
    for label, state in states.items():
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    c.repository_case(case_id, "valid", "13.3", f"tags (refs/tags/, §13.1): v1 at root, release/k1 at k1, {prefix} "
                      "(the first 8 digits of k2's id) at root, and main at root beside the branch main (at k2). A "
                      "name is looked up as a branch, then as a tag, then as a prefix: main is the branch, "
                      f"{prefix} the tag", d / "repo",
                      revisions=[("v1", "root"), ("release/k1", "k1"), ("release/k1^", "root"), ("v1~0", "root"),
                                 ("main", "k2"), (prefix, "root"), (ids["k2"], "k2")],
                      ids=ids, what={"root": "root: w, c (replace)", "k1": "k1: w dense", "k2": "k2: c sparse"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states})


def pin_reflogs(repo: Repository) -> None:
    """Every reflog's times (§13.6) replaced by fixed ones — the i-th line of a reflog at 2026-01-02
    00:00:00Z + i seconds — so that the corpus's bytes do not depend on when it was made."""
    for path in sorted((repo.dir / "logs").rglob("*")):
        if path.is_file():
            lines = path.read_bytes().split(b"\n")
            assert lines[-1] == b"", path  # every line whole
            path.write_bytes(b"".join(b" ".join([*line.split(b" ", 3)[:2], str(1767312000 + i).encode(),
                                                  line.split(b" ", 3)[3]]) + b"\n"
                                      for i, line in enumerate(lines[:-1])))


def reflog_repository(path: Path):
    """small_repository's main (root, k1, k2), then moves the reflogs record (§13.6): a branch `side`
    created at k1 and switched to and back, main reset to root, a switch to side and back, a tag v1 at
    k2, side deleted. main@{0..3}: root, k2, k1, root; HEAD's reflog holds main's moves and the switches."""
    repo, ids, updates, states = small_repository(path)
    with repo.lock():
        repo.create_tag("v1", ids["k2"])
    repo.switch("side", create=True, start=ids["k1"])
    repo.switch("main")
    repo.reset("HEAD~2")
    repo.switch("side")
    repo.switch("main")
    with repo.lock():
        repo.delete_branch("side")
    pin_reflogs(repo)
    return repo, ids, updates, states


def reflogs_repository(c: Corpus) -> None:
    case_id = "repository-reflogs"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = reflog_repository(d / "repo")
    (d / "states").mkdir()
    for label, state in states.items():
        assert same_state(repo.checkout(ids[label]), state), label
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    c.repository_case(case_id, "valid", "13.3", "revisions read from reflogs (§13.3, §13.6): main (root, k1, k2) "
                      "reset to root, a branch side made at k1, switched to and back twice and deleted, a tag v1 at "
                      "k2. main@{N} is entry N of logs/refs/heads/main from the newest (root, k2, k1, root); @{N} is "
                      "the current branch's (main's); HEAD@{N} is logs/HEAD's, which records main's moves and the "
                      "switches (HEAD@{1}: k1, where the last switch came from); @ is HEAD; side@{1} reads the "
                      "reflog a deleted branch leaves; ~N and ^ follow", d / "repo",
                      revisions=[("main@{0}", "root"), ("main@{1}", "k2"), ("main@{2}", "k1"), ("main@{3}", "root"),
                                 ("@{1}", "k2"), ("@{0}", "root"), ("HEAD@{0}", "root"), ("HEAD@{1}", "k1"),
                                 ("HEAD@{2}", "root"), ("HEAD@{3}", "k2"), ("@", "root"), ("main@{1}~1", "k1"),
                                 ("main@{1}^^", "root"), ("@{1}~2", "root"), ("v1@{0}", "k2"), ("side@{1}", "k1"),
                                 ("main@{00}", "root")],
                      ids=ids, what={"root": "root: w, c (replace)", "k1": "k1: w dense", "k2": "k2: c sparse"},
                      states={k: d / "states" / f"{k}.safetensors" for k in states}, reflogs=True)


def format_2_repositories(c: Corpus) -> None:
    """Repositories of format 2 (§4.3, §13.1): commit ids by block list, `commits/<id>.blocks` beside each."""
    case_id = "repository-format-2"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo", repository_format=2)
    (d / "states").mkdir()
    for label, state in states.items():
        assert same_state(repo.checkout(ids[label]), state), label
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    what = {"root": "root: w, c (replace)", "k1": "k1: w dense", "k2": "k2: c sparse"}
    revisions = [("main", "k2"), ("HEAD~1", "k1"), (ids["root"], "root"), (ids["k1"][:8], "k1")]
    c.repository_case(case_id, "valid", "4.3", "a repository of format 2 (`mdiff-repository 2`): each commit's id is "
                      "the SHA-256 of its block list's head (the file's length, then each 1 MiB group's hash of its "
                      "8 KiB leaves' hashes), and commits/<id>.blocks holds the block list", d / "repo",
                      revisions=revisions, ids=ids, what=what, states={k: d / "states" / f"{k}.safetensors" for k in states})

    case_id = "repository-format-2-block-list-ignored"
    d = c.case_dir("valid", case_id)
    repo, ids, _, states = small_repository(d / "repo", repository_format=2)
    (d / "states").mkdir()
    for label, state in states.items():
        save_checkpoint(d / "states" / f"{label}.safetensors", state)
    # k2's block list: k1's (it hashes to k1's id); k1's: cut short; the root's: gone
    repo.blocks_path(ids["k2"]).write_bytes(repo.blocks_path(ids["k1"]).read_bytes())
    repo.blocks_path(ids["k1"]).write_bytes(repo.blocks_path(ids["k1"]).read_bytes()[:-1])
    repo.blocks_path(ids["root"]).unlink()
    c.repository_case(case_id, "valid", "13.2", "a repository of format 2 whose block lists are wrong: main's commit's "
                      "`.blocks` is another commit's (it does not hash to its id), k1's is cut short, the root's is "
                      "missing. A checkout reads whole files and verifies them from their bytes: it reads no `.blocks` "
                      "(a reader of ranges, and a checker, would refuse these: MD800, MD801)", d / "repo",
                      revisions=[("main", "k2"), ("main~1", "k1")], ids=ids, what=what,
                      states={k: d / "states" / f"{k}.safetensors" for k in states})

    def refused(case_id: str, description: str, edit, revisions: list[str]) -> None:
        d = c.case_dir("invalid", case_id)
        repo, ids, _, _ = small_repository(d / "repo", repository_format=2)
        edit(repo, ids)
        c.repository_case(case_id, "invalid", RULES["MD800"].section, f"MD800: {description}", d / "repo",
                          revisions=[(r, None) for r in revisions], code="MD800")

    def swap(repo, ids):
        repo.commit_path(ids["k2"]).write_bytes(repo.commit_path(ids["k1"]).read_bytes())
        repo.blocks_path(ids["k2"]).write_bytes(repo.blocks_path(ids["k1"]).read_bytes())

    refused("MD800-format2_commit_swapped", "a repository of format 2 whose commits/<k2>.mdiff holds k1's bytes (and "
            "its .blocks k1's block list): a well-formed commit under another commit's id", swap, ["main", "HEAD"])

    def leaf(repo, ids):
        path = repo.commit_path(ids["root"])
        data = bytearray(path.read_bytes())
        data[-1] ^= 1  # the last leaf's last byte: its leaf hash (and so the id) no longer matches
        path.write_bytes(bytes(data))

    refused("MD800-format2_leaf_differs", "a repository of format 2 whose root commit file differs from its block "
            "list in one byte of its last leaf (its .blocks untouched): the bytes do not hash to the id",
            leaf, ["main", "main~2"])


def refused_reflog_revisions(c: Corpus) -> None:
    case_id = "MD801-reflog_entry_names_nothing"
    d = c.case_dir("invalid", case_id)
    repo, ids, _, _ = reflog_repository(d / "repo")
    with repo.lock():
        repo.create_branch("broken", ids["k1"])
        repo.create_branch("unlogged", ids["k1"])
    pin_reflogs(repo)
    # a branch whose reflog holds a line not of the form `<old> <new> <seconds> <message>` (§13.6)
    log = repo.dir / "logs" / "refs" / "heads" / "broken"
    log.write_bytes(log.read_bytes() + f"{ids['k1']} {ids['k2']} 01 leading zero\n".encode())
    # a branch whose reflog is missing
    (repo.dir / "logs" / "refs" / "heads" / "unlogged").unlink()
    c.repository_case(case_id, "invalid", RULES["MD801"].section,
                      "MD801: reflog revisions that name nothing (§13.3): an entry past the oldest (main@{4}, main has "
                      "4; main@{9}), the move that deleted side (side@{0}), a malformed reflog (broken@{0}: a line "
                      "whose seconds have a leading zero), a missing reflog (unlogged@{0}), a name that is no ref and "
                      "left no reflog, a commit id (which has none), ~N past the root, and forms of git that are no "
                      "revisions of mdiff (@{-1}, main@{upstream}, main@, main@{1}@{1})", d / "repo",
                      revisions=[(r, None) for r in ["main@{4}", "main@{9}", "side@{0}", "broken@{0}", "unlogged@{0}",
                                                     "nosuch@{0}", ids["k1"] + "@{0}", "main@{1}~3", "@{-1}",
                                                     "main@{upstream}", "main@", "main@{1}@{1}"]],
                      code="MD801", reflogs=True)


def refused_repositories(c: Corpus) -> None:
    def case(case_id: str, code: str, description: str, edit, revisions, small: bool = True,
             repository_format: int = 1) -> None:
        """``edit`` breaks a small repository (``small``) or makes its own; ``revisions`` (a list, or a
        function of the small repository's ids) must each be refused with ``code``."""
        d = c.case_dir("invalid", case_id)
        ids: dict[str, str] = {}
        if small:
            repo, ids, updates, _ = small_repository(d / "repo", repository_format=repository_format)
            edit(repo, ids, updates)
        else:
            edit(d / "repo")
        revs = revisions(ids) if callable(revisions) else revisions
        c.repository_case(case_id, "invalid", RULES[code].section, f"{code}: {description}", d / "repo",
                          revisions=[(r, None) for r in revs], code=code)

    def rewrite(repo, cid, updates):
        """commits/<cid>.mdiff replaced by another valid commit: the same parents and updates, another message."""
        meta = repo.metadata(cid)
        mdiff.write(repo.commit_path(cid), updates, dataclasses.replace(meta, message=meta.message + " (rewritten)"))

    case("MD800-commit_bytes_changed", "MD800", "the file of main's commit (k2) was replaced by another valid commit "
         "file (same parents and updates, another message): its bytes no longer hash to its name",
         lambda repo, ids, ups: rewrite(repo, ids["k2"], ups["k2"]), ["main", "HEAD"])
    case("MD800-root_bytes_changed", "MD800", "the root commit's file was replaced by another valid commit file "
         "(another message); every checkout of main walks through it",
         lambda repo, ids, ups: rewrite(repo, ids["root"], ups["root"]), ["main", "main~2", "HEAD^"])

    def write(path: Path, text: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))

    missing = hashlib.sha256(b"a commit that is not in the repository").hexdigest()
    case("MD801-head_malformed", "MD801", "HEAD holds `refs/heads/main` (without `ref: `)",
         lambda repo, ids, ups: write(repo.dir / "HEAD", "refs/heads/main\n"), ["HEAD"])
    case("MD801-ref_malformed", "MD801", "refs/heads/main holds the commit id in upper case; refs/heads/topic holds "
         "an id without the final newline",
         lambda repo, ids, ups: (write(repo.dir / "refs/heads/main", ids["k2"].upper() + "\n"),
                                 write(repo.dir / "refs/heads/topic", ids["k1"])), ["main", "topic", "HEAD"])
    case("MD801-ref_names_missing_commit", "MD801", "refs/heads/main names a well-formed commit id that is not in "
         "commits/", lambda repo, ids, ups: write(repo.dir / "refs/heads/main", missing + "\n"), ["main", "HEAD"])
    case("MD801-detached_head_names_missing_commit", "MD801", "HEAD is detached at a commit id that is not in commits/",
         lambda repo, ids, ups: write(repo.dir / "HEAD", missing + "\n"), ["HEAD"])
    case("MD801-first_parent_missing", "MD801", "the file of k1, the first parent of main's commit k2, is gone "
         "from commits/: a checkout of main cannot walk past k2",
         lambda repo, ids, ups: repo.commit_path(ids["k1"]).unlink(), ["main", "HEAD", "main~2"])
    case("MD801-format_unknown", "MD801", ".mdiff/format says `mdiff-repository 3`",
         lambda repo, ids, ups: write(repo.dir / "format", "mdiff-repository 3\n"), ["main", "HEAD"])

    def invalid_ref_names(repo, ids, ups):
        for name in ("x..y", "v1.lock", "a b"):
            write(repo.dir / "refs" / "heads" / name, ids["k1"] + "\n")

    case("MD801-ref_name_invalid", "MD801", "files of refs/heads whose names break §13.1 (`x..y`, `v1.lock`, `a b`), "
         "each holding a well-formed id: they are no branches, and no revision names them", invalid_ref_names,
         ["x..y", "v1.lock", "a b"])
    case("MD801-tag_malformed", "MD801", "refs/tags/v1 holds a commit id and two newlines; refs/tags/gone names a "
         "well-formed commit id that is not in commits/; refs/tags/x..y (a name §13.1 forbids) holds k1's id",
         lambda repo, ids, ups: (write(repo.dir / "refs/tags/v1", ids["k1"] + "\n\n"),
                                 write(repo.dir / "refs/tags/gone", missing + "\n"),
                                 write(repo.dir / "refs/tags/x..y", ids["k1"] + "\n")), ["v1", "gone", "gone~1", "x..y"])
    case("MD801-head_names_invalid_branch", "MD801", "HEAD holds `ref: refs/heads/x..y`, a name §13.1 forbids (the "
         "file refs/heads/x..y holds a well-formed id)",
         lambda repo, ids, ups: (write(repo.dir / "refs" / "heads" / "x..y", ids["k1"] + "\n"),
                                 write(repo.dir / "HEAD", "ref: refs/heads/x..y\n")), ["HEAD"])

    def cycle(repo, ids, ups):
        """commits/<x>.mdiff names x as its first parent: a cycle, which a file whose bytes hash to
        its name cannot make (§13.2); y names x."""
        x, y = (hashlib.sha256(f"conformance: a commit in a cycle ({n})".encode()).hexdigest() for n in "xy")
        for name, parent in ((x, x), (y, x)):
            made = repo.store(lambda w: w.add("c", mdiff.replace(np.array([1, 2, 3], np.int32))),
                              commit(f"names {parent[:12]} as its parent", parents=[parent], date=repo_date(3)))
            os.replace(repo.commit_path(made), repo.commit_path(name))
        write(repo.dir / "refs" / "heads" / "main", y + "\n")
        write(repo.dir / "refs" / "heads" / "self", x + "\n")

    case("MD800-parent_cycle", "MD800", "commits/<x>.mdiff names x as its first parent, and main's commit y names x: "
         "a cycle, which only files that do not hash to their names can make (§13.2): every walk ends with MD800",
         cycle, ["main", "self", "main~1", "main~100000000", "self~3"])

    def no_match(ids):
        return next(p for p in (f"{i:04x}" for i in range(1 << 16)) if not any(v.startswith(p) for v in ids.values()))

    case("MD801-revision_names_nothing", "MD801", "revisions that name nothing: an unknown name, ~N and ^ past the "
         "root, a prefix of 3 digits, a commit id in upper case, 65 digits, a 4-digit prefix of no commit, a ref's path",
         lambda repo, ids, ups: None,
         lambda ids: ["nosuch", "main~3", "HEAD^^^", ids["k1"][:3], ids["k1"].upper(), ids["k1"] + "0", no_match(ids),
                      "refs/heads/main"])

    shared: dict[str, str] = {}

    def ambiguous(repo, ids, ups):
        """Root commits without parameters, written until two commit ids share their first 4 digits."""
        seen = {v[:4]: v for v in repo.commit_ids()}
        with tempfile.TemporaryDirectory(prefix="mdiff-conf-ambiguous-") as tmp:
            for i in range(1 << 16):
                path = Path(tmp) / f"{i}.mdiff"
                mdiff.write(path, {}, commit("a commit made to share a prefix", meta={"attempt": str(i)}))
                cid = hashlib.sha256(path.read_bytes()).hexdigest()
                path = path.rename(Path(tmp) / f"{cid}.mdiff")
                if cid[:4] in seen:
                    for one in (cid, seen[cid[:4]]):
                        if not repo.commit_path(one).exists():
                            shutil.move(Path(tmp) / f"{one}.mdiff", repo.commit_path(one))
                    shared["prefix"] = cid[:4]
                    return
                seen[cid[:4]] = cid
        raise AssertionError("no two ids shared a prefix")

    case("MD801-ambiguous_prefix", "MD801", "a 4-digit prefix shared by two commits (two root commits without "
         "parameters, made until their ids shared 4 digits)", ambiguous, lambda ids: [shared["prefix"]])

    def chain(root_updates, k1_updates):
        def edit(path: Path):
            repo = Repository.init(path, repository_format=1)
            r0 = repo.store(lambda w: [w.add(k, u) for k, u in sorted(root_updates.items())],
                            commit("root", date=repo_date(0)))
            k1 = repo.store(lambda w: [w.add(k, u) for k, u in sorted(k1_updates.items())],
                            commit("k1", parents=[r0], date=repo_date(1)))
            repo.set_branch("main", k1)
        return edit

    dense_w = {"w": mdiff.dense(inv.W, inv.W_NEW)}
    case("MD802-parameter_missing_from_parent_state", "MD802", "main's commit has a dense update of `w`; its first "
         "parent's state has no `w`", chain({"v": mdiff.replace(inv.W.copy())}, dense_w), ["main"], small=False)
    case("MD802-shape_differs_from_parent_state", "MD802", "main's commit has a dense update of `w` float32 [2, 4]; "
         "its first parent's `w` is float32 [4, 2]", chain({"w": mdiff.replace(inv.W.reshape(4, 2).copy())}, dense_w),
         ["main"], small=False)
    other = inv.W.copy()
    other[1, 1] = -other[1, 1]
    case("MD802-result_hash_differs", "MD802", "main's commit has a dense update of `w` made from another value than "
         "its first parent's: the result's sha256 differs", chain({"w": mdiff.replace(other)}, dense_w), ["main"],
         small=False)

    def merge_against_second_parent(path: Path):
        repo = Repository.init(path, repository_format=1)
        w1, w2, wm = inv.W + 1, inv.W * 2, inv.W * 3
        r0 = repo.store(lambda w: w.add("w", mdiff.replace(inv.W.copy())), commit("root", date=repo_date(0)))
        p1 = repo.store(lambda w: w.add("w", mdiff.dense(inv.W, w1)), commit("main", parents=[r0], date=repo_date(1)))
        p2 = repo.store(lambda w: w.add("w", mdiff.dense(inv.W, w2)), commit("side", parents=[r0], date=repo_date(2)))
        m = repo.store(lambda w: w.add("w", mdiff.dense(w2, wm)), commit("merge", parents=[p1, p2], date=repo_date(3)))
        repo.set_branch("main", m)
        repo.set_branch("side", p2)

    case("MD802-merge_made_against_second_parent", "MD802", "a merge commit (parents main, side) whose dense update "
         "was made from its second parent's state: applied to its first parent's state (§13.4) its result's sha256 "
         "differs", merge_against_second_parent, ["main"], small=False)

    def xor_after_low_rank(path: Path):
        """root: w replaced; lora: w low_rank; next: w dense against the writer's own low_rank bits."""
        repo = Repository.init(path, repository_format=1)
        lora = inv._low_rank_update()
        r0 = repo.store(lambda w: w.add("w", mdiff.replace(inv.W.copy())), commit("root", date=repo_date(0)))
        p1 = repo.store(lambda w: w.add("w", lora), commit("lora", parents=[r0], date=repo_date(1)))
        mine = apply_update(lora, inv.W.copy(), "w")  # one answer within §7.5's tolerance: other appliers may differ
        changed = mine.copy()
        changed[0, 0] += np.float32(1)
        p2 = repo.store(lambda w: w.add("w", mdiff.dense(mine, changed)), commit("next", parents=[p1], date=repo_date(2)))
        repo.set_branch("main", p2)

    def state_digest_differs(path: Path):
        """root: w replaced; next: w dense, its commit's state_sha256 the digest of another value of w."""
        repo = Repository.init(path, repository_format=1)
        r0 = repo.store(lambda w: w.add("w", mdiff.replace(inv.W.copy())), commit("root", date=repo_date(0)))
        other = inv.W_NEW.copy()
        other[0, 0] += np.float32(1)
        lie = StateClaims({"w": ((2, 4), DTYPES["float32"], sha256_hex(other))}, {}, None).digest()
        meta = dataclasses.replace(commit("next", parents=[r0], date=repo_date(1)), state_sha256=lie)
        p1 = repo.store(lambda w: w.add("w", mdiff.dense(inv.W, inv.W_NEW)), meta)
        repo.set_branch("main", p1)

    case("MD808-state_sha256_differs", "MD808", "main's commit (format 1.3) has a dense update of `w` and a "
         "`state_sha256` that is the state digest (§4.2) of another value of `w` than the update makes: the commit "
         "id would name two states", state_digest_differs, ["main", "HEAD"], small=False)

    case("MD805-xor_after_low_rank", "MD805", "main's commit has a dense (XOR) update of `w`, whose value in its first "
         "parent's state a low_rank update made: appliers agree on that value only within §7.5's tolerance, so the XOR "
         "is refused whatever bits this applier computed", xor_after_low_rank, ["main", "HEAD"], small=False)


# ---------------------------------------------------------------- merges (SPEC.md §13.7)
#
# Each case is three .safetensors states (ours, base, theirs) that `merge-file` merges, and its expected
# outcome written out by hand here — the merged state, or the set of conflicting parameters — never
# computed by mdiff/repo/merge.py; the reference's merge-file must agree with it (checked below).
# Values a strategy combines are computed here in binary64 as the expression is written (Python floats),
# each operation checked to be exact (rational arithmetic), then rounded once to the dtype by round_to
# (§7.5's exact rounding above): so the expected numbers are the exact ones, rounded once.


def f(dtype: str, *values) -> np.ndarray:
    """An array of ``dtype`` holding ``values`` (Python numbers, each exactly representable)."""
    out = np.array(values, np.float64).astype(NP[dtype])
    assert (out.astype(np.float64) == np.array(values, np.float64)).all() or np.isnan(values).any(), values
    return out


def from_bits(dtype: str, *patterns: int) -> np.ndarray:
    """An array of ``dtype`` with these bit patterns (NaN payloads, -0.0)."""
    return np.array(patterns, BITS[np.dtype(NP[dtype]).itemsize]).view(NP[dtype])


def combined_by_hand(kind: str, weight: float, ours: np.ndarray, theirs: np.ndarray,
                     base: np.ndarray | None = None) -> np.ndarray:
    """§13.7 `weighted:α` (α·ours + (1 − α)·theirs) or `task-arithmetic:λ` (base + λ·((ours − base) +
    (theirs − base))), element by element: in binary64 as written, each operation checked to be exact,
    then rounded once to the dtype (to nearest, ties to even; a zero keeps the sign binary64 gave it)."""
    from mdiff.format.dtypes import dtype_of

    def exactly(op, a: float, b: float) -> float:
        r = op(a, b)
        assert math.isfinite(r) and Fraction(r) == op(Fraction(a), Fraction(b)), (kind, weight, a, b)
        return r

    add, sub, mul = (lambda a, b: a + b), (lambda a, b: a - b), (lambda a, b: a * b)
    dtype = dtype_of(ours).name
    xs, ys = ours.astype(np.float64).ravel().tolist(), theirs.astype(np.float64).ravel().tolist()
    zs = base.astype(np.float64).ravel().tolist() if base is not None else [0.0] * len(xs)
    out = []
    for x, y, z in zip(xs, ys, zs):
        assert all(math.isfinite(v) for v in (x, y, z)), "the corpus combines only finite numbers"
        if kind == "weighted":
            r = exactly(add, exactly(mul, weight, x), exactly(mul, exactly(sub, 1.0, weight), y))
        else:
            r = exactly(add, z, exactly(mul, weight, exactly(add, exactly(sub, x, z), exactly(sub, y, z))))
        out.append(r if r == 0 else round_to(Fraction(r), dtype))
    return np.array(out, np.float64).astype(NP[dtype]).reshape(ours.shape)


def double_rounding_witnesses(dtype: str, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` elements (ours, theirs, base) of ``dtype`` whose `task-arithmetic` value rounded once to
    ``dtype`` differs from that value rounded to float32 first and then to ``dtype``: found by search.
    Each is exact in binary64 (checked by combined_by_hand)."""
    rng = rng_for(f"merge-double-rounding-{dtype}")
    width = {"float16": (5, 10), "bfloat16": (8, 7)}[dtype]
    bias = 2 ** (width[0] - 1) - 1

    def draw(exponents: range) -> float:
        sign = int(rng.integers(2)) << (width[0] + width[1])
        bits = sign | (int(rng.choice(exponents)) << width[1]) | int(rng.integers(2 ** width[1]))
        return float(from_bits(dtype, bits).astype(np.float64)[0])

    found: list[tuple[float, float, float]] = []
    for _ in range(100_000):
        o, t = draw(range(bias, bias + 2)), draw(range(bias, bias + 2))  # in [1, 4)
        # tiny: below float32's precision at o + t, within binary64's (float16: its smallest subnormals)
        b = float(rng.choice([-3, -2, -1, 1, 2, 3])) * 2.0**-24 if dtype == "float16" else draw(range(bias - 40, bias - 26))
        exact = Fraction(o) + Fraction(t) - Fraction(b)
        if exact == 0 or (o, t, b) in found:
            continue
        once = round_to(exact, dtype)
        twice = round_to(Fraction(round_to(exact, "float32")), dtype)
        if once != twice:
            found.append((o, t, b))
            if len(found) == count:
                break
    assert len(found) == count, (dtype, found)
    return tuple(f(dtype, *column) for column in zip(*found))  # type: ignore[return-value]


def reference_merge_file(ours: Path, base: Path, theirs: Path, out: Path, strategy: str | None,
                         everything: bool) -> tuple[int, dict]:
    """The reference's command line on the contract's merge-file command: (exit status, its JSON)."""
    from mdiff.cli.main import main

    argv = ["merge-file", str(ours), str(base), str(theirs), "-o", str(out), "--json"]
    argv += (["--strategy", strategy] if strategy else []) + (["--all"] if everything else [])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        status = main(argv)
    return status, json.loads(buf.getvalue())


def merge_case(c: Corpus, case_id: str, description: str, ours: dict, base: dict | bytes, theirs: dict | bytes, *,
               strategy: str | None = None, everything: bool = False, result: dict | None = None,
               conflicts: list[str] | None = None) -> None:
    """A merge case (family `merge`): the three states, and either the merged ``result`` or the
    ``conflicts`` (parameter names) left; bytes for ``base`` or ``theirs``: an unreadable input (exit 2).
    The reference's merge-file must do exactly that."""
    assert case_id.startswith("merge-") and (result is None) + (conflicts is None) >= 1
    d = c.case_dir("merge", case_id)
    files = {}
    for label, state in (("ours", ours), ("base", base), ("theirs", theirs)):
        path = d / f"{label}.safetensors"
        if isinstance(state, bytes):
            path.write_bytes(state)
        else:
            save_checkpoint(path, state)
        files[label] = c.rel(path)
    with tempfile.TemporaryDirectory(prefix="mdiff-conf-merge-") as tmp:
        out = Path(tmp) / "merged.safetensors"
        status, report = reference_merge_file(d / "ours.safetensors", d / "base.safetensors", d / "theirs.safetensors",
                                              out, strategy, everything)
        if result is not None:
            assert status == 0 and same_state(load_checkpoint(out), result), (case_id, report)
            save_checkpoint(d / "result.safetensors", result)
            files["result"] = c.rel(d / "result.safetensors")
            expect: dict = {"merge": "result"}
        elif conflicts is not None:
            reported = sorted(f["path"] for f in report["findings"] if f["code"] == "MD804")
            assert status == 1 and not out.exists() and reported == sorted(conflicts), (case_id, report)
            expect = {"merge": "conflicts", "code": "MD804", "conflicts": sorted(conflicts)}
        else:
            assert status == 2 and not out.exists(), (case_id, report)
            expect = {"merge": "unreadable"}
    c.add({"id": case_id, "family": "merge", "section": "13.7", "description": description, "files": files,
           "features": ["merge"], "merge": {"strategy": strategy, "all": everything}, "expect": expect})


F32_MAX = float(np.finfo(np.float32).max)


def build_merges(c: Corpus) -> None:
    rng = rng_for("merges")

    # ------------------------------------------------------------ one side changes, or both alike
    base = {"ours_only": f("float32", 0.0, 1.0, math.nan, 2.0, 3.0, -1.0),
            "theirs_only": from_bits("float16", 0x0000, 0x7E00, 0x3C00, 0xC000),
            "theirs_signed_zero": f("float32", 0.0, 1.0),
            "theirs_nan_payload": from_bits("bfloat16", 0x7FC0, 0x3F80),
            "ours_int": np.array([1, -2, 3], np.int64), "theirs_bool": np.array([True, False, True]),
            "same_nan": from_bits("float64", 0x7FF8000000000001, 0x8000000000000000, 0x3FF0000000000000)}
    ours = {**base, "ours_only": from_bits("float32", 0x80000000, 0x3F800000, 0x7FC00001, 0x40200000, 0x7F800000,
                                           0xBF800000),
            "ours_int": np.array([1, -2, 2**40], np.int64)}
    theirs = {**base, "theirs_only": from_bits("float16", 0x8000, 0xFE01, 0x3C00, 0xC000),
              "theirs_signed_zero": f("float32", -0.0, 1.0), "theirs_nan_payload": from_bits("bfloat16", 0x7FC1, 0x3F80),
              "theirs_bool": np.array([True, True, True])}
    merge_case(c, "merge-one-sided-changes", "§13.7 rules 2 and 3: each parameter changed on one side only takes that "
               "side's bits exactly — -0.0 where base and ours hold +0.0, NaN payloads where base holds another NaN, "
               "an int64 and a bool; a parameter holding a NaN that no side changed stays. Values are the same when "
               "their bits are: a reader comparing by value (0.0 == -0.0, NaN != NaN) gets this wrong",
               ours, base, theirs,
               result={**base, "ours_only": ours["ours_only"], "ours_int": ours["ours_int"],
                       "theirs_only": theirs["theirs_only"], "theirs_signed_zero": theirs["theirs_signed_zero"],
                       "theirs_nan_payload": theirs["theirs_nan_payload"], "theirs_bool": theirs["theirs_bool"]})

    base = {"w": f("float32", 1.0, 0.0, 2.0), "k": np.array([1, 2], np.int8), "z": f("float16", 1.0), "x": f("bfloat16", 3.0)}
    alike = {"w": from_bits("float32", 0x7FC00005, 0x80000000, 0x40000000), "k": np.array([-1, 2], np.int8),
             "x": base["x"]}
    merge_case(c, "merge-changed-alike", "§13.7 rule 1: a parameter changed the same way on both sides (a NaN payload "
               "and -0.0 among its values), an int8 changed alike, a parameter deleted on both sides (absent), one "
               "unchanged: each takes that value", alike, base, dict(alike), result=alike)

    base = {"w": f("float32", 1.0, 2.0)}
    ours = {**base, "new_ours": f("float64", 0.5, -0.0)}
    theirs = {**base, "new_theirs": np.array([0, 255], np.uint8), "both_same": from_bits("bfloat16", 0x7FC1, 0x8000)}
    ours["both_same"] = theirs["both_same"].copy()
    merge_case(c, "merge-added-one-side", "§13.7: a parameter added on one side (float64 in ours, uint8 in theirs) is "
               "taken from it; one added on both sides with the same dtype, shape and bits (a NaN payload, -0.0) is "
               "that value", ours, base, theirs,
               result={**base, "new_ours": ours["new_ours"], "new_theirs": theirs["new_theirs"],
                       "both_same": theirs["both_same"]})

    base = {"gone_theirs": from_bits("float32", 0x7FC00002, 0x3F800000), "gone_ours": np.array([7], np.int32),
            "kept": from_bits("float16", 0x7E03)}
    merge_case(c, "merge-deleted-one-side", "§13.7 rules 2 and 3: a parameter deleted on one side and unchanged on the "
               "other (its bits, a NaN payload among them) is absent from the result; the one left alone is kept",
               {k: v for k, v in base.items() if k != "gone_ours"}, base,
               {k: v for k, v in base.items() if k != "gone_theirs"}, result={"kept": base["kept"]})

    # ------------------------------------------------------------ conflicts, no strategy
    base = {"w": f("float32", 1.0, 2.0, 3.0), "i": np.array([1, 2], np.int16), "split": f("float32", 1.0, 2.0),
            "a": f("float32", 5.0), "b": f("float16", 6.0)}
    ours = {**base, "w": f("float32", 1.0, 2.5, 3.0), "i": np.array([1, 3], np.int16), "split": f("float32", 1.5, 2.0),
            "a": f("float32", 5.5)}
    theirs = {**base, "w": f("float32", 1.0, 2.25, 3.0), "i": np.array([0, 2], np.int16),
              "split": f("float32", 1.0, 2.5), "b": f("float16", 6.5)}
    merge_case(c, "merge-conflict-changed-both", "§13.7 rule 4: parameters changed differently on both sides conflict "
               "(MD804, nothing written): a float32, an int16, and one whose sides changed different elements — a "
               "parameter is one value, never merged element by element; the parameters changed on one side only "
               "are no conflict", ours, base, theirs, conflicts=["i", "split", "w"])

    base = {"w": f("float32", 1.0)}
    ours = {**base, "new": f("float32", 1.0, 2.0), "new_typed": f("float32", 1.0), "same": f("float64", 4.0)}
    theirs = {**base, "new": f("float32", 1.0, 2.5), "new_typed": f("float16", 1.0), "same": f("float64", 4.0)}
    merge_case(c, "merge-conflict-added-both-differently", "§13.7 rule 4: parameters added on both sides with "
               "different values conflict — other values, or the same number in another dtype; one added alike does "
               "not", ours, base, theirs, conflicts=["new", "new_typed"])

    base = {"del_ours": f("float32", 1.0, 2.0), "del_theirs": np.array([1, 2], np.int32), "other": f("float16", 1.0)}
    merge_case(c, "merge-conflict-deleted-vs-changed", "§13.7 rule 4: deleted on one side and changed on the other, "
               "each way round, is a conflict",
               {"del_theirs": np.array([1, 3], np.int32), "other": base["other"]}, base,
               {"del_ours": f("float32", 1.0, 2.5), "other": base["other"]}, conflicts=["del_ours", "del_theirs"])

    six = np.arange(6, dtype=np.float32)
    base = {"r1": six.reshape(2, 3), "r2": six.reshape(2, 3), "r3": six.reshape(2, 3)}
    ours = {"r1": six.reshape(3, 2), "r2": six.reshape(6), "r3": six.reshape(6)}
    theirs = {"r1": six.reshape(2, 3) + 1, "r2": six.reshape(2, 3), "r3": six.reshape(3, 2)}
    merge_case(c, "merge-conflict-reshaped", "§13.7: a parameter reshaped on one side (its bytes unchanged) and changed "
               "on the other conflicts, and so does one reshaped differently on both sides; one reshaped on one side "
               "only takes that side's shape", ours, base, theirs, conflicts=["r1", "r3"])

    base = {"t1": f("float32", 1.0, 2.0), "t2": f("float32", 1.0, 2.0), "t3": f("float32", 1.0, 2.0)}
    ours = {"t1": base["t1"].view(np.int32), "t2": base["t2"], "t3": f("float16", 1.0, 2.0)}
    theirs = {"t1": f("float32", 1.0, 3.0), "t2": f("float16", 1.0, 2.0), "t3": f("bfloat16", 1.0, 2.0)}
    merge_case(c, "merge-conflict-retyped", "§13.7: a parameter retyped on one side (float32 to int32, the same bits) "
               "and changed on the other conflicts, and so does one retyped differently on both sides (float16 and "
               "bfloat16: the same numbers); one retyped on one side only takes that side's dtype",
               ours, base, theirs, conflicts=["t1", "t3"])

    # ------------------------------------------------------------ strategies resolving a float32 conflict
    w_base = [1.0, 0.0, 0.0, -0.0, 2.0, 0.0, 0.0, 1.0]
    w_ours = [1.0, 1 + 2**-23, -0.0, 0.0, 3.0, F32_MAX, 2.0**-149, 2.0**24]
    w_theirs = [1 + 2**-23, 1 + 2**-22, -0.0, -0.0, 5.0, F32_MAX, 0.0, 1.0]
    rand_base = floats(rng, "float32", (8,))
    rand_ours = (rand_base + floats(rng, "float32", (8,), 0.5)).astype(np.float32)
    rand_theirs = (rand_base + floats(rng, "float32", (8,), 2.0)).astype(np.float32)
    base = {"w": np.concatenate([f("float32", *w_base), rand_base]), "u": from_bits("float16", 0x3C00, 0x7E00),
            "v": f("bfloat16", 1.0, 2.0), "n": np.array([3, 4], np.int32)}
    ours = {**base, "w": np.concatenate([f("float32", *w_ours), rand_ours]), "u": from_bits("float16", 0x3C01, 0x7E07)}
    theirs = {**base, "w": np.concatenate([f("float32", *w_theirs), rand_theirs]), "v": from_bits("bfloat16", 0x8000, 0x4000)}
    kept = {**base, "u": ours["u"], "v": theirs["v"]}  # changed on one side only: never recomputed
    what = ("`w` (float32: ties, ±0, the largest float32, the smallest subnormal, 2^24 against 1, and random "
            "values) changed on both sides; `u` (float16, a NaN payload) changed in ours only, `v` (bfloat16, -0.0) in "
            "theirs only, `n` unchanged — these three keep their bits: a strategy resolves conflicts only")
    wo, wt, wb = ours["w"], theirs["w"], base["w"]
    strategies = [
        ("ours", "ours", "ours' value", wo),
        ("theirs", "theirs", "theirs' value", wt),
        ("average", "average", "½·ours + ½·theirs", combined_by_hand("weighted", 0.5, wo, wt)),
        ("weighted-0.25", "weighted:0.25", "0.25·ours + 0.75·theirs", combined_by_hand("weighted", 0.25, wo, wt)),
        ("task-arithmetic", "task-arithmetic", "base + ((ours − base) + (theirs − base)): the largest float32 twice "
         "overflows to +inf", combined_by_hand("task", 1.0, wo, wt, wb)),
        ("task-arithmetic-0.5", "task-arithmetic:0.5", "base + 0.5·((ours − base) + (theirs − base))",
         combined_by_hand("task", 0.5, wo, wt, wb)),
    ]
    for tag, strategy, formula, w in strategies:
        merge_case(c, f"merge-strategy-{tag}", f"§13.7 --strategy {strategy}: the conflict `w` becomes {formula}, "
                   "computed in binary64 and rounded once to float32 (to nearest, ties to even); " + what,
                   ours, base, theirs, strategy=strategy, result={**kept, "w": w})
    # the expected values hold what the case says
    average = combined_by_hand("weighted", 0.5, wo, wt)
    assert average[0] == 1.0 and average[1] == 1 + 2**-22 and average[7] == 2.0**23  # ties to even
    assert np.signbit(average[2]) and not np.signbit(average[3]) and average[5] == F32_MAX and average[6] == 0
    assert combined_by_hand("task", 1.0, wo, wt, wb)[5] == np.inf

    base = {"d": f("float32", 1.0), "a2": f("float32", 0.0), "r": f("float32", 1.0, 2.0)}
    ours = {"d": f("float32", 2.0), "a": f("float32", 1.0), "r": f("float32", 1.0, 2.0).reshape(2, 1)}
    theirs = {"a": f("float16", 1.0), "a2": f("float32", 0.0), "r": f("float32", 1.0, 2.0).reshape(1, 2)}
    merge_case(c, "merge-strategy-theirs-takes-a-deletion", "§13.7 --strategy theirs resolves every conflict by "
               "theirs' value, absent where theirs deleted it: `d` (changed in ours, deleted in theirs) is absent, `a` "
               "(added on both sides in different dtypes) and `r` (reshaped differently) are theirs', `a2` (deleted "
               "in ours only) stays deleted", ours, base, theirs, strategy="theirs",
               result={"a": theirs["a"], "r": theirs["r"]})

    # ------------------------------------------------------------ rounded once, in float16 and bfloat16
    for dtype in ("float16", "bfloat16"):
        o, t, b = double_rounding_witnesses(dtype, 4)
        expected = combined_by_hand("task", 1.0, o, t, b)
        via_float32 = np.array([round_to(Fraction(round_to(Fraction(float(x)), "float32")), dtype) for x in
                                (o.astype(np.float64) + t.astype(np.float64) - b.astype(np.float64))])
        assert (expected.astype(np.float64) != via_float32).all(), dtype  # rounding twice gives other numbers
        merge_case(c, f"merge-round-once-{dtype}", f"§13.7: the {dtype} conflict `h` resolved by task-arithmetic "
                   "(base + (ours − base) + (theirs − base)), each element computed exactly in binary64 and rounded "
                   f"once to {dtype}; rounded to float32 first, then to {dtype}, every element would be another "
                   "number (values found by search in the generator)", {"h": o}, {"h": b}, {"h": t},
                   strategy="task-arithmetic", result={"h": expected})

    # ------------------------------------------------------------ conflicts a strategy cannot resolve
    base = {"i": np.array([1, 2], np.int32), "bits": np.array([True, False]), "typed": f("float32", 1.0),
            "absent": f("float32", 1.0), "f": f("float32", 1.0, 2.0)}
    ours = {"i": np.array([1, 3], np.int32), "bits": np.array([False, False]), "typed": f("float16", 2.0),
            "f": f("float32", 2.0, 2.0)}
    theirs = {"i": np.array([2, 2], np.int32), "bits": np.array([True, True]), "typed": f("float32", 3.0),
              "absent": f("float32", 4.0), "f": f("float32", 1.0, 3.0)}
    merge_case(c, "merge-average-unresolvable", "§13.7: --strategy average cannot combine an int32 or a bool conflict, "
               "a conflict whose sides differ in dtype, or one absent on a side: each stays a conflict (MD804, nothing "
               "written), though the float32 conflict `f` is resolved", ours, base, theirs, strategy="average",
               conflicts=["absent", "bits", "i", "typed"])

    base = {"f": f("float32", 1.0), "rebased": f("float16", 1.0)}
    ours = {"f": f("float32", 2.0), "new": f("float32", 1.0), "rebased": f("float32", 2.0)}
    theirs = {"f": f("float32", 3.0), "new": f("float32", 2.0), "rebased": f("float32", 3.0)}
    merge_case(c, "merge-task-arithmetic-absent-in-base", "§13.7: task-arithmetic needs the parameter in base, alike "
               "in shape and dtype: `new` (added on both sides) and `rebased` (float16 in base, float32 on both sides) "
               "stay conflicts, though `f` is resolved", ours, base, theirs, strategy="task-arithmetic",
               conflicts=["new", "rebased"])

    # ------------------------------------------------------------ --all
    base = {"one_sided": f("float32", 1.0, 2.0, 3.0), "conflict": f("float32", 1.0), "zero": f("float32", 0.0),
            "alike": from_bits("float32", 0x7FC00009, 0x3F800000), "int_one_sided": np.array([5], np.int32),
            "retyped": f("float32", 1.0, 2.0), "bf": f("bfloat16", 1.0, 2.0)}
    ours = {**base, "one_sided": f("float32", 2.0, 2.0, 3.0 + 2**-22), "conflict": f("float32", 2.0),
            "zero": f("float32", -0.0), "alike": from_bits("float32", 0x7FC0000A, 0x3F800000),
            "int_one_sided": np.array([6], np.int32), "bf": f("bfloat16", 1.0078125, 2.0)}
    theirs = {**base, "conflict": f("float32", 4.0), "alike": ours["alike"].copy(), "retyped": f("float16", 1.0, 2.0),
              "added": f("float32", 7.0)}
    merge_case(c, "merge-all-average", "§13.7 --strategy average --all: every parameter present on both sides, not the "
               "same, alike in shape and floating-point dtype is ½·ours + ½·theirs — `one_sided`, changed in ours only "
               "(with a tie in float32), `bf` (bfloat16, a tie in bfloat16), `zero` (-0.0 against +0.0: +0.0) and the "
               "conflict; the others follow the three-way rules: `alike` (the same NaN payload on both sides) keeps its "
               "bits, `int_one_sided` (int32) is ours', `retyped` (float16 in theirs only) and `added` (in theirs only) "
               "are theirs'", ours, base, theirs, strategy="average", everything=True,
               result={"one_sided": combined_by_hand("weighted", 0.5, ours["one_sided"], theirs["one_sided"]),
                       "conflict": f("float32", 3.0), "zero": f("float32", 0.0), "alike": ours["alike"],
                       "int_one_sided": ours["int_one_sided"], "retyped": theirs["retyped"], "added": theirs["added"],
                       "bf": combined_by_hand("weighted", 0.5, ours["bf"], theirs["bf"])})
    assert combined_by_hand("weighted", 0.5, ours["one_sided"], theirs["one_sided"])[2] == 3.0  # the tie: to even
    assert combined_by_hand("weighted", 0.5, ours["bf"], theirs["bf"])[0] == 1.0

    base = {"a": f("float32", 1.0), "c": f("float32", 1.0), "d": np.array([1], np.int8), "same": f("float16", 2.0)}
    ours = {**base, "a": f("float32", 2.0), "c": f("float32", 3.0), "x": f("float32", 9.0)}
    theirs = {"a": base["a"], "c": f("float32", 4.0), "same": base["same"], "y": np.array([1, 2], np.uint16)}
    merge_case(c, "merge-all-theirs", "§13.7 --strategy theirs --all: the result is theirs' state whole — `a`, changed "
               "in ours only, is theirs' (base's) value, `x`, added in ours only, and `d`, deleted in theirs, are "
               "absent, `y`, added in theirs, and the conflict `c` are theirs'", ours, base, theirs, strategy="theirs",
               everything=True, result=theirs)

    # ------------------------------------------------------------ no common ancestor
    ours = {"same": f("float32", 1.0, -0.0), "differs": f("float32", 1.0), "only_ours": np.array([1], np.int64)}
    theirs = {"same": f("float32", 1.0, -0.0), "differs": f("float32", 3.0), "only_theirs": f("bfloat16", 2.0)}
    merge_case(c, "merge-no-common-ancestor", "§13.7: with no common ancestor the base is the empty state (a "
               ".safetensors file with no tensors): a parameter on both sides with different values is a conflict "
               "(added on both sides), one the same on both is no conflict, one on a side only is added there",
               ours, {}, theirs, conflicts=["differs"])
    merge_case(c, "merge-no-common-ancestor-soup", "§13.7 --strategy average --all with no common ancestor: the "
               "parameters on both sides are averaged (a model soup), the same ones kept, one on a side only taken "
               "from it", ours, {}, theirs, strategy="average", everything=True,
               result={"same": ours["same"], "differs": f("float32", 2.0), "only_ours": ours["only_ours"],
                       "only_theirs": theirs["only_theirs"]})

    # ------------------------------------------------------------ an input that cannot be read
    whole = raw_safetensors(raw_state({"w": f("float32", 1.0, 2.0)}))
    merge_case(c, "merge-unreadable-input", "an input that is not a readable .safetensors file (theirs: cut short, in "
               "the middle of its data) is refused with exit 2, and nothing is written",
               {"w": f("float32", 1.0, 2.0)}, {"w": f("float32", 1.0, 2.0)}, whole[:-3])


# ---------------------------------------------------------------- writer test vectors: conformance/writer/
#
# Not cases of the manifest, which are files for readers: data and expected values for a rule of writers, SPEC.md
# §11's `stats.rel_change` (§7.1), which a writer that is to give the reference's bytes MUST compute as §11 says —
# in JSON-Schema-Test-Suite style, so that any language runs them (conformance/README.md, "Writer test vectors").
# Each expected value is the reference's (mdiff.relative_change) and is asserted to equal a transcription of §11
# in tools/spec_rel_change.py, `spec_section_11`, which reads its five steps word for word.

REL_CHANGE_VECTORS = "writer/rel_change.json"
WRITER_DESCRIPTION = (
    "Test vectors for stats.rel_change (SPEC.md §7.1), which a writer that is to give the reference's bytes MUST "
    "compute as SPEC.md §11 says (revision 15): squares rounded in the working format, blocks of 65,536 summed by "
    "halving, blocks added in binary64 in order, binary64 again where binary32 overflows with finite values, "
    "√C / √B. Generated by tools/gen_conformance.py; conformance/README.md describes the format.")
WRITER_VALUES = (
    "`old` and `new` hold the values of one dtype, in the order of §6.2, either as a list of bit patterns — each "
    "element's bits as an unsigned integer in lowercase hex, 2 digits per byte (float32 1.0 is \"3f800000\", int8 -1 "
    "\"ff\", bool true \"01\") — or, for long vectors, as a formula: {\"length\": N, \"terms\": [{\"times\", \"mod\", "
    "\"minus\", \"scale\"}, ...], \"set\": [[index, bits], ...]}: element i (0 ≤ i < N) is the sum over the terms of "
    "(((times · i) mod mod) − minus) · 2^scale, then the elements named in `set` (if any) are replaced by those bit "
    "patterns. times · i stays below 2^53, and every term and every partial sum, in the order of the terms, is exact "
    "in binary64, so a binary64 evaluation gives the exact value, which the dtype holds exactly. `formula` says the "
    "same in words.")
WRITER_EXPECTED = (
    "`rel_change` is null where the statistic is absent (§11 step 5: the writer leaves it out), else an object: "
    "`bits`, the binary64 bit pattern in hex (16 digits), which is the value to compare, and `decimal`, its shortest "
    "round-trip decimal, for people.")


def _hex(values: np.ndarray) -> list[str]:
    dt = dtype_of(values)
    return [format(int(b), f"0{2 * dt.itemsize}x") for b in values.reshape(-1).view(dt.bits).tolist()]


def _exact(dtype: str, *numbers) -> np.ndarray:
    """Python numbers as an array of ``dtype``, each held exactly (integers as given, floats checked)."""
    dt = DTYPES[dtype]
    if dt.kind != "float":
        return np.array(numbers, dt.value)
    out = np.array(numbers, np.float64).astype(dt.value)
    wide = out.astype(np.float64)
    assert ((wide == np.array(numbers)) | (np.isnan(wide) & np.isnan(numbers))).all(), (dtype, numbers)
    return out


def _patterns(dtype: str, *patterns: int) -> np.ndarray:
    dt = DTYPES[dtype]
    return np.array(patterns, dt.bits).view(dt.value)


def _formula(length: int, *terms: tuple[int, int, int, int], sets: tuple[tuple[int, str], ...] = ()) -> dict:
    """A long vector's values: element i is Σ ((times · i mod mod) − minus) · 2^scale over ``terms`` (times, mod,
    minus, scale), checked here to be exact in binary64 at every partial sum."""
    assert all(t[0] * (length - 1) < 2**53 for t in terms)
    _exact_sums(length, terms)
    words = " + ".join(f"(({times}·i mod {mod}) − {minus})·2^{scale}" for times, mod, minus, scale in terms)
    spec = {"formula": f"{words}, i = 0 … {length - 1}", "length": length,
            "terms": [{"times": t[0], "mod": t[1], "minus": t[2], "scale": t[3]} for t in terms]}
    if sets:
        spec["set"] = [[index, bits] for index, bits in sets]
    return spec


def _exact_sums(length: int, terms) -> tuple[np.ndarray, int]:
    """A formula's elements exactly (Python integers, in units of 2^low), and low; asserting that binary64 holds
    every term and every partial sum, in the order of the terms, exactly."""
    low = min(t[3] for t in terms)
    i = np.arange(length).astype(object)  # Python integers: exact
    partial = np.zeros(length, object)
    for times, mod, minus, scale in terms:
        term = (times * i) % mod - minus
        assert max(abs(term)) < 2**53  # so binary64 holds the term exactly
        partial = partial + (term << (scale - low))
        assert max(abs(partial)) < 2**53, terms  # and each partial sum
    return partial, low


def _from_formula(spec: dict, dtype: str) -> np.ndarray:
    """The formula's values, decoded as the tests decode them, checked against the exact sums."""
    from spec_rel_change import vector_values

    values = vector_values(spec, dtype)
    exact, low = _exact_sums(spec["length"], [(t["times"], t["mod"], t["minus"], t["scale"]) for t in spec["terms"]])
    kept = np.ones(spec["length"], bool)
    kept[[index for index, _ in spec.get("set", [])]] = False
    assert (values.astype(np.float64)[kept] == exact.astype(np.float64)[kept] * 2.0**low).all(), (dtype, spec)
    return values


def _witness(kind: str, old: np.ndarray, new: np.ndarray, expected: float) -> None:
    """A vector that tells §11's sums from others: "order" — the squares §11 rounds, summed left to right, by
    numpy's pairwise sum or exactly, give another number; "squares" — squares in binary64 summed exactly do."""
    narrow = dtype_of(old).name in ("float16", "bfloat16", "float32")
    o, n = (a.astype(np.float32 if narrow and kind == "order" else np.float64) for a in (old, new))
    change, base = (n - o) * (n - o), o * o
    others = {math.sqrt(math.fsum(change.tolist())) / math.sqrt(math.fsum(base.tolist()))}
    if kind == "order":
        others |= {math.sqrt(float(np.cumsum(change)[-1])) / math.sqrt(float(np.cumsum(base)[-1])),
                   math.sqrt(float(np.sum(change))) / math.sqrt(float(np.sum(base)))}
    assert expected not in others, (kind, expected, others)


def rel_change_vectors() -> list[tuple[str, str, str, object, object, str | None]]:
    """(id, description, dtype, old, new, witness): old and new as arrays (written as bit patterns) or formulas;
    witness: what the vector tells §11's sums from, checked by _witness (or None)."""
    B = 1 << 16
    x = 2.0 ** -12
    F32_NAN, F32_SNAN, F32_INF = 0x7FC00000, 0x7FA00001, 0x7F800000
    # float32 values exact by construction: a base on a grid of 2^-8, a change on a grid of 2^-20 (pair() of
    # tests/test_relative_change.py)
    old32 = ((7919, 1000, 500, -8),)
    new32 = ((7919, 1000, 500, -8), (104729, 2001, 1000, -20))
    v: list[tuple[str, str, str, object, object, str | None]] = [
        ("length-1", "one element: a block of one, P = 1", "float32", _exact("float32", 3.0), _exact("float32", 3.5),
         None),
        ("length-2", "two elements", "float32", _exact("float32", 3.0, 4.0), _exact("float32", 3.25, 3.5), None),
        ("length-3-halving", "three elements, padded with +0 to P = 4: C = (c0 + c2) + (c1 + 0) = (2^-24 + 1) + "
         "2^-24 = 1 in binary32 (ties to even), where c0 + c1 + c2 from the left, or exactly, is 1 + 2^-23",
         "float32", _exact("float32", 1.0, 1.0, 1.0), _exact("float32", 1 + x, 1 + x, 2.0), "order"),
        ("length-8-halving", "eight elements (a power of two): the squares 1, 0, 0, 0, 0, 1, 2^-24, 9·2^-26 sum "
         "to 2 by halving in binary32, to 2 + 2^-22 from the left or pairwise, to 2 + 13·2^-26 exactly", "float32",
         _exact("float32", *[1.0] * 8), _exact("float32", 2.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1 + x, 1 + 3 * x / 2), "order"),
        ("length-65535", "65,535 elements: one block, padded with +0 to P = 65,536", "float32",
         _formula(B - 1, *old32), _formula(B - 1, *new32), "order"),
        ("length-65536", "65,536 elements: one whole block", "float32", _formula(B, *old32), _formula(B, *new32),
         "order"),
        ("length-65537", "65,537 elements: a whole block, then a block of one", "float32", _formula(B + 1, *old32),
         _formula(B + 1, *new32), "order"),
        ("length-131075", "2 × 65,536 + 3 elements: two whole blocks, then a block of three padded to P = 4, the "
         "three blocks' sums added in binary64 in order", "float32", _formula(2 * B + 3, *old32),
         _formula(2 * B + 3, *new32), "order"),
        ("zeros-unchanged", "all zeros, unchanged: C = B = 0, so 0", "float32", _exact("float32", 0.0, 0.0, 0.0),
         _exact("float32", 0.0, 0.0, 0.0), None),
        ("unchanged", "unchanged values: C = 0, so 0", "float32", _exact("float32", 1.0, -2.0, 3.0),
         _exact("float32", 1.0, -2.0, 3.0), None),
        ("zeros-among-values", "zeros in old and new among other values", "float32",
         _exact("float32", 0.0, 0.0, 1.0, 0.0), _exact("float32", 0.0, 0.5, 1.5, 0.0), None),
        ("change-from-zeros", "a change from all zeros: B = 0 and C is not, so absent", "float32",
         _exact("float32", 0.0, 0.0), _exact("float32", 0.0, 1.0), None),
        ("change-from-negative-zeros", "a change from all −0: B = 0 (−0 · −0 = +0) and C is not, so absent",
         "float32", _exact("float32", -0.0, -0.0), _exact("float32", -0.0, 1.0), None),
        ("negative-zeros", "−0 and +0 exchanged (differences ±0, squares +0) beside a change", "float32",
         _exact("float32", -0.0, 2.0, 0.0), _exact("float32", 0.0, 3.0, -0.0), None),
        ("negative-zeros-only", "−0 became +0: the bits changed, the numbers did not; C = B = 0, so 0", "float32",
         _exact("float32", -0.0, -0.0), _exact("float32", 0.0, -0.0), None),
        ("nan-in-old", "a NaN in old (the same NaN in new): C is NaN, so absent", "float32",
         _patterns("float32", 0x3F800000, F32_NAN), _patterns("float32", 0x40000000, F32_NAN), None),
        ("nan-in-new", "a signalling NaN with a payload in new: absent", "float32", _exact("float32", 1.0, 2.0),
         _patterns("float32", 0x3F800000, F32_SNAN), None),
        ("inf-in-new", "+inf in new: C is +inf, so absent (not a binary32 overflow: a value is not finite)",
         "float32", _exact("float32", 1.0, 2.0), _patterns("float32", 0x3F800000, F32_INF), None),
        ("inf-unchanged", "−inf unchanged: −inf − (−inf) is NaN, so absent", "float32",
         _exact("float32", -np.inf, 1.0), _exact("float32", -np.inf, 2.0), None),
        ("nan-in-a-later-block", "a NaN in new at element 65,540, in the second block: absent", "float32",
         _formula(B + 7, *old32), _formula(B + 7, *new32, sets=((B + 4, format(F32_NAN, "08x")),)), None),
        ("overflow-of-a-difference", "finite float32 values whose difference (−3·2^127) and squares overflow binary32: "
         "summed again in binary64 (§11 step 4), C = B = 9·2^254, so 1", "float32", _exact("float32", *[1.5 * 2.0**127] * 4),
         _exact("float32", 1.5 * 2.0**127, -1.5 * 2.0**127, 1.5 * 2.0**127, 1.5 * 2.0**127), None),
        ("overflow-of-a-square", "finite float32 values whose square (2^128) overflows binary32: summed again in "
         "binary64", "float32", _exact("float32", 2.0**64, 2.0**64), _exact("float32", 2.0**64, 2.0**64 + 2.0**41),
         None),
        ("overflow-unchanged", "unchanged finite values whose squares overflow binary32: B is +inf in binary32, so "
         "summed again in binary64: C = 0, so 0", "float32", _exact("float32", 2.0**64, 1.0),
         _exact("float32", 2.0**64, 1.0), None),
        ("overflow-of-a-halving-sum", "float32 values in [2^62, 2^63) whose squares are finite in binary32 but whose "
         "halving sums overflow it: summed again in binary64", "float32",
         _formula(B + 5, (7919, 1000, -1000, 52)), _formula(B + 5, (7919, 1000, -1000, 52), (104729, 2001, 1000, 40)),
         None),
        ("subnormal-squares-vanish", "a change of a subnormal float32 whose square (2^-280) is +0 in binary32: C = 0, "
         "so 0, where binary64 squares give 2^-80", "float32", _exact("float32", 2.0**-60, 2.0**-140),
         _exact("float32", 2.0**-60, 2.0**-139), "squares"),
        ("subnormals", "subnormal values and a subnormal difference (−2^-127) beside a normal change", "float32",
         _exact("float32", 1.0, 2.0**-126, 2.0**-149), _exact("float32", 1.5, 2.0**-127, 2.0**-148), None),
        # each dtype's widening (§11: float16 and bfloat16 to binary32 exactly, the others to binary64)
        ("float16", "float16 widened to binary32: its largest finite value negated and subnormals", "float16",
         _exact("float16", 65504.0, 2.0**-24, 1.0), _exact("float16", -65504.0, 2.0**-23, 1.0), None),
        ("float16-long", "float16 (on a grid of 2^-8), 65,537 elements, summed in binary32", "float16",
         _formula(B + 1, *old32), _formula(B + 1, *old32, (104729, 7, 3, -8)), "order"),
        ("bfloat16-overflow", "bfloat16's largest finite value negated: the difference overflows binary32, so "
         "binary64", "bfloat16", _patterns("bfloat16", 0x7F7F), _patterns("bfloat16", 0xFF7F), None),
        ("bfloat16-long", "bfloat16 (integers · 2^-4 of 8 bits), 65,537 elements, summed in binary32", "bfloat16",
         _formula(B + 1, (7919, 255, 127, -4)), _formula(B + 1, (7919, 255, 127, -4), (104729, 3, 1, -4)), "order"),
        ("float64", "float64, summed in binary64", "float64", _exact("float64", 1.0, 2.0**-30, 3.0),
         _exact("float64", 1.0 + 2.0**-52, 2.0**-29, -3.0), None),
        ("float64-halving", "float64, eight elements: the squares 1, 0, 0, 0, 0, 2^-54, 9·2^-56, 2^-54 sum to "
         "1 + 2^-51 by halving in binary64 (a tie to even at the last step), to 1 + 2^-52 from the left, pairwise "
         "or exactly", "float64", _exact("float64", *[1.0] * 8),
         _exact("float64", 2.0, 1.0, 1.0, 1.0, 1.0, 1 + 2.0**-27, 1 + 3 * 2.0**-28, 1 + 2.0**-27), "order"),
        ("float64-long", "float64 of 52 significant bits, 65,537 elements, summed in binary64", "float64",
         _formula(B + 1, (7919, 1000, 500, -8), (1000003, 2**30, 2**29, -50)),
         _formula(B + 1, (7919, 1000, 500, -8), (1000003, 2**30, 2**29, -50), (104729, 2001, 1000, -20)), None),
        ("float64-overflow", "float64 values whose square overflows binary64: B is +inf, so absent", "float64",
         _exact("float64", 1e200, 1.0), _exact("float64", 1e200, 2.0), None),
        ("float64-subnormals", "float64 subnormals changed: every square is +0 in binary64, C = B = 0, so 0",
         "float64", _patterns("float64", 3), _patterns("float64", 5), None),
        ("int8", "int8 extremes exchanged, converted to binary64", "int8", _exact("int8", -128, 127, 0),
         _exact("int8", 127, -128, 1), None),
        ("int16", "int16 extremes exchanged", "int16", _exact("int16", -32768, 32767), _exact("int16", 32767, -32768),
         None),
        ("int32", "int32 extremes exchanged: (2^32 − 1)² rounded in binary64", "int32",
         _exact("int32", -2**31, 2**31 - 1), _exact("int32", 2**31 - 1, -2**31), None),
        ("int32-long", "int32, 65,537 elements, squares past 2^53 rounded in binary64", "int32",
         _formula(B + 1, (7919, 1000, 500, 20), (104729, 2001, 1000, 0)),
         _formula(B + 1, (7919, 1000, 500, 20), (31337, 4093, 2046, 16), (1, 7, 3, 0)), None),
        ("int64-rounded", "int64 values converted to binary64 to nearest, ties to even: 2^53 + 1 → 2^53, 2^53 + 3 → "
         "2^53 + 4, so the difference is 4", "int64", _exact("int64", 2**53 + 1, 3),
         _exact("int64", 2**53 + 3, 3), None),
        ("int64", "int64 extremes exchanged: 2^63 − 1 → 2^63", "int64", _exact("int64", -2**63, 2**63 - 1),
         _exact("int64", 2**63 - 1, -2**63), None),
        ("uint8", "uint8 extremes exchanged", "uint8", _exact("uint8", 0, 255), _exact("uint8", 255, 0), None),
        ("uint16", "uint16 extremes exchanged", "uint16", _exact("uint16", 0, 65535), _exact("uint16", 65535, 0),
         None),
        ("uint32", "uint32 extremes", "uint32", _exact("uint32", 4294967295, 1), _exact("uint32", 0, 1), None),
        ("uint64-rounded", "uint64 converted to binary64 to nearest, ties to even: 2^63 + 1024 → 2^63, 2^63 + 3072 → "
         "2^63 + 4096, 2^64 − 1 → 2^64", "uint64", _exact("uint64", 2**63 + 1024, 2**64 - 1),
         _exact("uint64", 2**63 + 3072, 2**63), None),
        ("bool", "bool as 0 and 1 (§6.1), converted to binary64", "bool", np.array([True, False, True]),
         np.array([False, False, True]), None),
        # where the reference first differed from §11's words (tests/test_relative_change.py, EDGES)
        ("binary32-base-underflows", "B underflows to 0 in binary32, which is finite: no binary64 sums (step 4), "
         "and B = 0 with C not 0 is absent (step 5)", "float32", _exact("float32", 2.0 ** -149),
         _exact("float32", 1.0), None),
        ("binary64-base-overflows-unchanged", "no change, but B overflows to +inf: absent (step 5), not 0",
         "float64", _exact("float64", 1e200), _exact("float64", 1e200), None),
        ("no-elements", "no elements: C = B = 0, so 0", "float32", np.zeros(0, np.float32), np.zeros(0, np.float32),
         None),
    ]
    return v


def rel_change_vectors_text() -> str:
    from mdiff.relative_change import relative_change
    from spec_rel_change import spec_section_11

    vectors = []
    for id_, description, dtype, old, new, witness in rel_change_vectors():
        written = [_hex(a) if isinstance(a, np.ndarray) else a for a in (old, new)]
        o, n = (a if isinstance(a, np.ndarray) else _from_formula(a, dtype) for a in (old, new))
        assert dtype_of(o).name == dtype_of(n).name == dtype and o.shape == n.shape, id_
        expected = relative_change(o, n)
        # §11's five steps transcribed word for word, from the values of any dtype (tools/spec_rel_change.py)
        transcribed = spec_section_11(o, n)
        same = lambda a, b: a is b is None or (a is not None and b is not None  # noqa: E731
                                                 and struct.pack(">d", a) == struct.pack(">d", b))
        assert same(expected, transcribed), (id_, expected, transcribed)
        if witness:
            _witness(witness, o, n, expected)
        vectors.append({"id": id_, "description": description, "dtype": dtype, "length": int(o.size),
                        "old": written[0], "new": written[1],
                        "rel_change": None if expected is None else {"bits": struct.pack(">d", expected).hex(),
                                                                     "decimal": repr(expected)}})
    assert len({v["id"] for v in vectors}) == len(vectors)
    return manifest_text({"description": WRITER_DESCRIPTION, "values": WRITER_VALUES, "rel_change": WRITER_EXPECTED,
                          "vectors": vectors})


def build_writer_vectors(out: Path) -> None:
    (out / "writer").mkdir(parents=True, exist_ok=True)
    (out / REL_CHANGE_VECTORS).write_text(rel_change_vectors_text(), encoding="utf-8")


def _dump(value: object) -> str:
    """One JSON value on one line, as the corpus's files write it (their diffs stay readable)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def manifest_text(manifest: dict) -> str:
    """JSON, one case per line (diffs of the corpus stay readable, the file small): the manifest, and the writer
    vectors' file."""
    lines = ["{"]
    items = list(manifest.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f" {_dump(key)}: [")
            lines += [f"  {_dump(v)}{',' if j < len(value) - 1 else ''}" for j, v in enumerate(value)]
            lines.append(f" ]{comma}")
        elif isinstance(value, dict) and value:
            lines.append(f" {_dump(key)}: {{")
            lines += [f"  {_dump(k)}: {_dump(v)}{',' if j < len(value) - 1 else ''}" for j, (k, v) in enumerate(value.items())]
            lines.append(f" }}{comma}")
        else:
            lines.append(f" {_dump(key)}: {_dump(value)}{comma}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == manifest
    return text


def build(out: Path) -> dict:
    c = Corpus(out)
    build_valid(c)
    build_invalid(c)
    build_repositories(c)
    build_merges(c)
    build_writer_vectors(out)
    manifest = c.manifest()
    (out / "manifest.json").write_text(manifest_text(manifest), encoding="utf-8")
    for path in out.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the reference writer makes its files 0600
    return manifest


# ---------------------------------------------------------------- compare / write


def generated_files(root: Path) -> set[str]:
    files = set()
    for top in GENERATED:
        p = root / top
        if p.is_file():
            files.add(top)
        elif p.is_dir():
            files |= {q.relative_to(root).as_posix() for q in p.rglob("*") if q.is_file() or q.is_symlink()}
    return files


def differences(built: Path, committed: Path) -> list[str]:
    want, have = generated_files(built), generated_files(committed)
    out = [f"missing: {p}" for p in sorted(want - have)]
    out += [f"not generated (should not be there): {p}" for p in sorted(have - want)]
    for p in sorted(want & have):
        if (committed / p).is_symlink() or not filecmp.cmp(built / p, committed / p, shallow=False):
            out.append(f"differs: {p}")
    return out


def check_sizes(root: Path) -> None:
    total = 0
    for p in generated_files(root):
        size = (root / p).stat().st_size
        # the manifest is the index, not a fixture: only the fixtures are held to the per-file limit
        assert size < MAX_FILE_BYTES or p == "manifest.json", f"{p} is {size} bytes (at most {MAX_FILE_BYTES})"
        total += size
    assert total < MAX_CORPUS_BYTES, f"the corpus is {total} bytes (at most {MAX_CORPUS_BYTES})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with conformance/; exit 1 on any difference")
    parser.add_argument("--out", type=Path, default=CORPUS, help="the corpus directory (default: conformance/)")
    parser.add_argument("--keep", type=Path, help=argparse.SUPPRESS)  # debugging: build into this directory
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mdiff-conformance-") as tmp:
        built = args.keep or Path(tmp) / "corpus"
        manifest = build(built)
        check_sizes(built)
        if args.check:
            diffs = differences(built, args.out)
            for d in diffs:
                print(d)
            if diffs:
                print(f"{len(diffs)} differences: run `python tools/gen_conformance.py` to regenerate", file=sys.stderr)
                return 1
            print(f"conformance/ is up to date ({len(manifest['cases'])} cases)")
            return 0
        args.out.mkdir(parents=True, exist_ok=True)
        for top in GENERATED:
            target = args.out / top
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            source = built / top
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                shutil.copy2(source, target)
        counts = {}
        for case in manifest["cases"]:
            counts[case["family"]] = counts.get(case["family"], 0) + 1
        print(f"wrote {args.out}: {len(manifest['cases'])} cases ({', '.join(f'{n} {k}' for k, n in counts.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
