"""Bugs the fuzzer found: ``KNOWN`` (open) and ``FIXED``.

Each has a minimised reproducer in ``tests/fuzz/regressions/`` and a signature: a regular
expression searched in ``"<signature> | <message>"`` of a failing target (see
:meth:`tests.fuzz.harness.Outcome.signature`). The regression files of an open bug are
``xfail(strict=True)``: when the bug is fixed they XPASS and fail, and the entry moves to FIXED.
The CI-sized run skips exactly the failures that match an open bug's signature, so that it still
fails on anything new. Crash signatures can only name the Python frame that called into libhdf5
(faulthandler shows no C frames), so each covers the libhdf5 crashes at that call site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownBug:
    id: str
    regressions: tuple[str, ...]  # file names in tests/fuzz/regressions/
    reason: str
    signature: str


KNOWN: list[KnownBug] = []

# Fixed since they were found (commit 0c759c5, "Fixes from fuzzing"; the last two after e05ab5c): their
# regression files are now ordinary tests that must end typed; the CI run no longer skips their signatures.
FIXED: list[KnownBug] = [
    KnownBug(
        "hdf5-btree2-header-fields",
        ("fuzz-hdf5-btree2-2gib-node-sigfpe-8gib.mdiff",),
        "libhdf5 2.0.0 trusts a v2 B-tree header's fields: it divides by the record size without checking "
        "it is not 0, and allocates a node buffer of the header's node size (up to 4 GiB; 2 GiB for a "
        "400 KB file) whose unread contents it then uses (H5B2__hdr_init): SIGFPE/SIGSEGV when mdiff asks "
        "for an object's info or attribute count (fuzz-...-8gib crashes only when that allocation can "
        "succeed, i.e. above the fuzzer's 2 GiB address-space limit; its test uses 8 GiB). A node size of 0 "
        "(fuzz-sigsegv-h5o-open-...) makes the allocation fail under that limit, and libhdf5's error path "
        "then corrupts the heap: the open is typed (MD513) but the process may die later. Fixed: the 2 GiB node is "
        "that of an attribute heap's index of huge objects, whose header the walk now checks as it checks a name "
        "index's, with the heap's own header (hdf5walk/object_header.py, §8.1 revision 9; found again by the "
        "differential run, seed 14, file 12651)",
        r"^CRASH \S+ (SIGFPE at mdiff/hdf5walk/walk\.py:|SIG(SEGV|BUS|ABRT) at mdiff/hdf5walk/walk\.py:_visit)",
    ),
    KnownBug(
        "hdf5-dense-links-iterate",
        ("crash-hdf5-dense-links-iterate-seed9-task1462.mdiff",),
        "a group of 60 densely stored links with two flipped bits in its link storage: libhdf5 2.0.0 crashes "
        "(SIGSEGV) while the walk lists the group's links (H5Literate2 in the index's own order); h5wasm, the "
        "same library in WebAssembly, reads garbage there and reports MD513. Found by the differential run, seed 9 (its link name index header said type 7). Fixed: the walk reads the "
        "header of a dense link storage's name index itself first and refuses (MD513) one that is not a B-tree of "
        "link names (type 5) with sane sizes, or whose record count is not the links listed (hdf5walk/object_header.py, §8.1)",
        r"^CRASH \S+ SIG(SEGV|BUS) at mdiff/hdf5walk/walk\.py:_links",
    ),
    KnownBug(
        "hdf5-btree2-type-confusion",
        ("crash-hdf5-btree2-header-type-0-null-deref.mdiff", "fuzz-hdf5-btree2-type-dense-attributes.mdiff"),
        "libhdf5 2.0.0 builds a v2 B-tree header with the callbacks of whatever class its type byte names "
        "(0-2: the test and fractal-heap classes) before checking that the class is the one the caller "
        "expects, and passes them the caller's context: H5B2__hdr_init -> H5B2__test_crt_context -> "
        "H5F_sizeof_size(NULL), SIGSEGV, when mdiff counts the attributes of an object that stores them densely. Fixed: the walk reads the "
        "dense storage's name index header itself first and refuses (MD513) one that is not a B-tree of attribute "
        "names (type 8) with records above 0 bytes and nodes of 64 B to 64 KiB (hdf5walk/object_header.py, §8.1)",
        r"^CRASH \S+ SIG(SEGV|BUS) at mdiff/hdf5walk/walk\.py:_read_attributes",
    ),
    KnownBug(
        "hdf5-btree2-record-size-0",
        ("crash-hdf5-btree2-record-size-0-sigfpe.mdiff", "fuzz-hdf5-btree2-record-size-0.mdiff",
         "fuzz-sigsegv-h5o-open-only-after-earlier-files.mdiff"),
        "libhdf5 2.0.0 divides by a v2 B-tree header's record size without checking it is not 0, and a node size "
        "of 0 fails an allocation whose error path corrupts the heap (H5B2__hdr_init): SIGFPE, or a crash later, "
        "when mdiff counted the attributes of an object that stores them densely. Fixed with the one above: the "
        "walk reads the name index's header itself first (hdf5walk/object_header.py, §8.1). The 2 GiB node of "
        "fuzz-hdf5-btree2-2gib-node-sigfpe-8gib is not in that index and stays open",
        r"^CRASH \S+ SIGFPE at mdiff/hdf5walk/walk\.py:_read_attributes",
    ),
    KnownBug(
        "hdf5-fletcher32-short-chunk",
        ("crash-hdf5-fletcher32-chunk-of-1-byte.mdiff", "fuzz-hdf5-fletcher32-short-chunk-function.mdiff"),
        "a chunk of fewer than 4 bytes in a dataset filtered with deflate and fletcher32 passes MD509 "
        "(deflate's 1100:1 allowance) and libhdf5's fletcher32 filter checksums nbytes - 4 bytes of it "
        "(unsigned underflow): SIGSEGV in H5_checksum_fletcher32 when mdiff reads the data (an embedded "
        "function while parsing /update_types, or a parameter's dataset)",
        r"^CRASH \S+ SIG(SEGV|BUS) at mdiff/(updates/base\.py:read_array|format/update_types\.py:_parse_one)",
    ),
    KnownBug(
        "attributes-by-index",
        ("hang-structure-4000-attributes-opened-by-index.mdiff",),
        "the structure walk opens attributes by index (h5py.h5a.open(oid, index=i), i.e. H5Aopen_by_idx); "
        "for dense attribute storage libhdf5 rebuilds and sorts the object's whole attribute table, "
        "reading every attribute, on each call: O(n^2 log n) time and O(n x total attribute bytes) copying "
        "- 4000 one-byte attributes take ~20 s, 10,000 ~290 s, within the 1,000,000-object limit",
        r"^HANG \S+ over [\d.]+ s (CPU|wall) at mdiff/hdf5walk/(walk\.py:_read_attributes|attributes\.py:\w+)",
    ),
    KnownBug(
        "format-version-digits",
        ("untyped-valueerror-format-version-4301-digits.mdiff", "fuzz-format-version-4301-digits.mdiff"),
        "a `format_version` component of more than 4300 digits raises ValueError (int() digit limit) "
        "from mdiff/format/header.py:parse_header instead of MD102",
        r"^UNTYPED \S+ builtins\.ValueError at mdiff/format/header\.py:parse_header .*Exceeds the limit",
    ),
    KnownBug(
        "json-deep-duplicates",
        ("untyped-recursionerror-commit-parents-deep-duplicates.mdiff",
         "untyped-recursionerror-definition-inputs-deep-duplicates.mdiff"),
        "two equal, deeply nested (900 levels) elements of a `uniqueItems` array (commit `parents`, "
        "definition `inputs`) make jsonschema recurse past the limit: RecursionError instead of MD202/MD420",
        r"^UNTYPED \S+ builtins\.RecursionError at mdiff/format/(commit\.py:schema_errors|update_types\.py:_parse_one)",
    ),
    KnownBug(
        "onnxruntime-exceptions",
        ("untyped-onnxruntime-notimplemented-embedded-ceil-bfloat16.mdiff",
         "untyped-onnxruntime-invalidgraph-embedded-reciprocal-int32.mdiff", "fuzz-onnxruntime-invalidgraph-xor-float.mdiff"),
        "an embedded function that passes every check of SPEC §7.8 but that onnxruntime refuses when it "
        "builds the session raises onnxruntime's NotImplemented/InvalidGraph/Fail (subclasses of "
        "Exception, not RuntimeError) out of update.apply and mdiff.apply instead of MD428",
        r"^UNTYPED \S+ onnxruntime\.capi\.onnxruntime_pybind11_state\.\w+ at mdiff/engines/onnxruntime_engine\.py:",
    ),
    KnownBug(
        "json-schema-all-errors",
        ("hang-commit-parents-520000-integers.mdiff", "fuzz-commit-parents-99999-integers.mdiff"),
        "the commit and update schemas are checked with iter_errors(), which builds one ValidationError "
        "per offending array element before the first is used: a 1 MiB `commit` takes about 25 s",
        r"^HANG \S+ over [\d.]+ s (CPU|wall) at mdiff/format/(commit\.py:(schema_errors|<lambda>)|parameters\.py:_parse_meta)",
    ),
    KnownBug(
        "chunk-filter-mask",
        ("crash-hdf5-chunk-filter-mask-skips-deflate-heap-overread.mdiff", "fuzz-chunk-filter-mask-low-rank-A.mdiff"),
        "a chunk stored with a filter mask that skips deflate passes MD509 with deflate's 1100:1 allowance, "
        "and libhdf5 reads a full chunk out of its shorter buffer: a heap over-read (SIGSEGV, or heap bytes "
        "in the data). mdiff's MD509 check ignores the chunk's filter mask",
        r"^CRASH \S+ SIG\w+ at mdiff/updates/base\.py:read_array",
    ),
    KnownBug(
        "onnx-enum-name",
        ("untyped-valueerror-embedded-input-elem-type-40.mdiff", "fuzz-embedded-input-elem-type-40.mdiff"),
        "an embedded function input of an undefined ONNX element type reaches check_shapes, whose message "
        "calls TensorProto.DataType.Name() on it: ValueError instead of MD427",
        r"^UNTYPED \S+ builtins\.ValueError at mdiff/updates/embedded\.py:check_shapes .*Enum DataType has no name",
    ),
    KnownBug(
        "onnx-data-propagation-unbounded",
        ("hang-onnx-shape-inference-reshape-huge-then-cast.mdiff", "fuzz-onnx-shape-inference-reshape-huge-then-cast.mdiff"),
        "an embedded function that Reshapes an input to a constant shape like [2**62] and then Casts it makes "
        "onnx.shape_inference.infer_shapes(strict_mode=True, data_prop=True), which check_shapes runs while "
        "the file is opened or validated, run without bound (onnx 1.23.2 spells out a 1-D input of a "
        "data-propagating node entry by entry: 18.7 GB resident after ~5 min, then the OOM killer). Now "
        "MD428 before any whole-graph inference: constant shapes over the limits are refused, every node's "
        "output is bounded as inference goes node by node, and data propagation runs only when a shape "
        "depends on values, over at most 2**16 entries",
        r"^HANG \S+ over [\d.]+ s (CPU|wall) at mdiff/updates/embedded\.py:check_shapes",
    ),
    KnownBug(
        "hdf5-dense-link-table-overflow",
        ("crash-hdf5-dense-links-btree-record-count-heap-overflow.mdiff",
         "fuzz-hdf5-dense-links-record-count-too-large.mdiff"),
        "libhdf5 2.0.0 sizes the link table of a densely stored group by the v2 B-tree header's record "
        "count and trusts it: fewer than the records found -> it writes past the table (H5G__dense_build_table "
        "-> H5O__link_copy, a heap buffer overflow, SIGABRT/SIGSEGV); more -> it sorts uninitialised "
        "entries (H5G__link_sort_table -> strcmp on garbage pointers). It builds that table only to list links "
        "in name order; the structure walk now lists them in the index's own order (H5_ITER_NATIVE, walking "
        "the B-tree's records) and sorts them itself, so the table is never built: all three files end typed "
        "or valid in 8 of 8 runs each (fuzz-hdf5-dense-links-heap-overflow.mdiff too)",
        r"^(CRASH \S+ SIG(ABRT|SEGV|BUS)|HANG \S+ over [\d.]+ s (CPU|wall)) at mdiff/hdf5walk/walk\.py:_link(_name)?s",
    ),
    KnownBug(
        "zero-size-huge-dimension",
        ("untyped-valueerror-replace-shape-0-by-2pow62.mdiff",),
        "a dataset of shape [0, 2**62] holds no element, so it passed every limit of SPEC §8.3, but "
        "read_array's np.empty(shape) raised ValueError ('array is too big'): untyped, out of validate "
        "(check_data) and apply. Now §8.3's limits count a dimension of 0 as 1 (MD508 in the structure "
        "walk, and for an embedded type's declared shape), and arrays made from file-declared shapes "
        "raise MD508 rather than numpy's ValueError",
        r"^UNTYPED \S+ builtins\.ValueError at mdiff/updates/base\.py:read_array .*array is too big",
    ),
]


# Inputs of an open bug whose outcome is not deterministic (a small heap overflow crashes or not,
# depending on the heap's layout): their tests are xfail(strict=False).
FLAKY: dict[str, str] = {
}


def known_bug(signature: str, message: str) -> KnownBug | None:
    text = f"{signature} | {message}"
    for bug in KNOWN:
        if re.search(bug.signature, text, re.DOTALL):
            return bug
    return None


def regression_reasons() -> dict[str, str]:
    """file name → the xfail reason of the bug it reproduces."""
    return {name: f"BUG {bug.id}: {bug.reason}" for bug in KNOWN for name in bug.regressions}
