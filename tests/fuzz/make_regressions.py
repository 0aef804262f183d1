"""Rebuild the minimised reproducers in tests/fuzz/regressions/ (``python -m tests.fuzz.make_regressions``).

Each builder writes the smallest file found that triggers one bug the fuzzer reported: a valid
file written by mdiff with exactly one thing changed. The committed files are the regression
corpus; this module documents how each was made. The raw fuzzer inputs that first showed the
bugs are committed beside them as ``fuzz-<what>.mdiff`` (see README.md there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np

import mdiff
from mdiff.hdf5walk.attributes import write_string
from tests import ia3
from tests import invalid_files as inv
from tests.fuzz import hdf5bytes

REGRESSIONS = Path(__file__).resolve().parent / "regressions"


def _set_commit(path, change) -> None:
    """A valid one-parameter file whose ``commit`` JSON text is ``change(text)``."""
    inv._write(path)
    with h5py.File(path, "r+") as f:
        text = bytes(f.attrs["commit"]).rstrip(b"\0").decode()
        write_string(f, "commit", change(text))


def format_version_minor_of_4301_digits(path) -> None:
    """`format_version` = "1.111…1" (4301 digits): int() refuses more than 4300 digits (ValueError)."""
    inv._write(path)
    with h5py.File(path, "r+") as f:
        write_string(f, "format_version", "1." + "1" * 4301)


def commit_parents_two_deep_arrays(path) -> None:
    """`parents` = [deep, deep], 900 levels each: jsonschema's uniqueItems compares them recursively."""
    deep = "[" * 900 + "1" + "]" * 900
    _set_commit(path, lambda text: text.replace('"parents":[]', f'"parents":[{deep},{deep}]'))


def definition_inputs_two_deep_arrays(path) -> None:
    """An embedded type's `definition.inputs` = [deep, deep]: the same, in /update_types."""
    ia3.write_with_function(path, ia3.function("float32"))
    deep = "[" * 900 + "1" + "]" * 900
    with h5py.File(path, "r+") as f:
        write_string(f["update_types/x-ia3"], "definition", '{"version":1,"inputs":[%s,%s],"exact":true}' % (deep, deep))


def _embedded_unary(path, op: str, elem_type: int) -> None:
    """An x-ia3 function that casts `base` to ``elem_type`` and applies ``op``: every check of §7.8
    passes, and onnxruntime refuses the model when it builds the session."""
    from onnx import TensorProto as T, helper

    nodes = [
        helper.make_node("Cast", ["base"], ["c"], to=elem_type),
        helper.make_node(op, ["c"], ["o"]),
        helper.make_node("Cast", ["o"], ["of"], to=T.FLOAT),
        helper.make_node("Mul", ["of", "s"], ["result"]),
    ]
    ia3.write_with_function(path, ia3.function("float32", nodes=nodes))


def embedded_ceil_bfloat16_not_implemented(path) -> None:
    """onnxruntime has no CPU kernel for Ceil on bfloat16: onnxruntime...NotImplemented (an Exception,
    not a RuntimeError) escapes update.apply and mdiff.apply."""
    from onnx import TensorProto as T

    _embedded_unary(path, "Ceil", T.BFLOAT16)


def embedded_reciprocal_int32_invalid_graph(path) -> None:
    """Reciprocal of int32 passes mdiff's checks (ONNX shape inference) but onnxruntime calls the
    model invalid: onnxruntime...InvalidGraph escapes."""
    from onnx import TensorProto as T

    _embedded_unary(path, "Reciprocal", T.INT32)


def commit_parents_520000_integers(path) -> None:
    """A 1 MiB `commit` whose `parents` holds 520,000 integers: the validator builds one
    ValidationError per element (and a 24 MB message) — about 25 s on a 2-core CI machine."""
    _set_commit(path, lambda text: text.replace('"parents":[]', '"parents":[' + ",".join(["0"] * 520_000) + "]"))


def dense_link_btree_record_count(path) -> None:
    """Ten parameters (so /parameters stores its links densely: fractal heap + v2 B-tree name index),
    then the B-tree header's total record count set to 1 (checksum recomputed). libhdf5 sizes its
    link table by that count and writes all ten links into it: a heap buffer overflow in
    H5G__dense_build_table / H5O__link_copy when mdiff lists the group's links."""
    mdiff.write(path, {f"p{i}": mdiff.delete(np.zeros(1, np.float32)) for i in range(10)}, inv.COMMIT)

    def one_record(data, start, layout):
        at = start + 18 + layout.offset_size
        assert int.from_bytes(data[at:at + layout.length_size], "little") == 10
        data[at:at + layout.length_size] = (1).to_bytes(layout.length_size, "little")

    _edit_btree2_header(path, one_record)


def _edit_btree2_header(path, edit) -> None:
    """``edit(data, header start, layout)`` on the file's one v2 B-tree header, checksums recomputed."""
    data = bytearray(Path(path).read_bytes())
    layout = hdf5bytes.scan(data)
    (header,) = [b for b in layout.blocks if b.kind == "BTHD"]
    edit(data, header.start, layout)
    hdf5bytes.fix_checksums(data, layout)
    Path(path).write_bytes(bytes(data))


def _dense_root_attributes(path) -> None:
    """A valid file whose root stores its attributes densely (fractal heap + v2 B-tree name index)."""
    inv._write(path)
    with h5py.File(path, "r+") as f:
        for i in range(9):
            write_string(f, f"note{i}", "x")


def btree2_header_of_another_type(path) -> None:
    """Nine extra root attributes (so the root stores its attributes densely: fractal heap + v2 B-tree
    name index), then the B-tree header's type byte set from 8 (attribute names) to 0 (libhdf5's
    internal test class), checksum recomputed. libhdf5 builds the header with that class's callbacks
    and the attribute code's context: H5B2__hdr_init -> H5B2__test_crt_context -> H5F_sizeof_size(NULL),
    a SIGSEGV in H5Aget_num_attrs (types 1 and 2, the fractal heap's "huge object" classes, crash too)."""
    _dense_root_attributes(path)

    def type_0(data, start, layout):
        assert data[start + 5] == 8
        data[start + 5] = 0

    _edit_btree2_header(path, type_0)


def btree2_header_record_size_zero(path) -> None:
    """Dense root attributes as above, with the v2 B-tree header's record size set to 0 (checksum
    recomputed): libhdf5 divides by it in H5B2__hdr_init — SIGFPE in H5Aget_num_attrs."""
    _dense_root_attributes(path)

    def record_size_0(data, start, layout):
        data[start + 10:start + 12] = bytes(2)

    _edit_btree2_header(path, record_size_0)


def chunk_with_deflate_skipped(path) -> None:
    """A deflated 1024 x 1024 float32 `value` (one 4 MiB chunk) whose only chunk is written raw with
    filter mask 1 — "deflate was not applied" — and 4000 bytes. MD509 lets it through (4000 x 1100 is
    over 4 MiB: the deflate ratio is allowed although the chunk is not deflated); libhdf5 then reads a
    4 MiB chunk out of a 4000-byte buffer (H5D__compact_readvv / H5VM_memcpyvv): a heap over-read,
    SIGSEGV (small chunks read heap memory into the value instead, which its sha256 then refuses)."""
    value = np.zeros((1024, 1024), np.float32)
    inv._write(path, {"big": mdiff.replace(value)})
    with h5py.File(path, "r+") as f:
        group = f["parameters/big"]
        del group["value"]
        ds = group.create_dataset("value", shape=value.shape, dtype="<f4", chunks=value.shape, compression="gzip",
                                  track_times=False)
        ds.id.write_direct_chunk((0, 0), b"\xab" * 4000, 1)


def embedded_input_of_unknown_elem_type(path) -> None:
    """The x-ia3 function with input `s` declared of ONNX element type 40 (no such type): the checks
    pass it to check_shapes, whose message calls TensorProto.DataType.Name(40): ValueError."""
    import onnx

    from mdiff.format.onnx_functions import serialize

    model = onnx.load_from_string(ia3.function("float32"))
    model.graph.input[1].type.tensor_type.elem_type = 40
    ia3.write_with_function(path, serialize(model))


def many_attributes(path) -> None:
    """4000 one-byte attributes on /parameters/w (a 240 KB file). The structure walk opens them by index
    (h5py.h5a.open(oid, index=i)): for dense attribute storage libhdf5 rebuilds and sorts the whole
    attribute table on every call, so the walk costs O(n^2 log n) — 0.07 s for 300 attributes, 10 s
    for 3000, 20 s for 4000, 290 s for 10,000 (600 KB), well inside the 1,000,000-object limit."""
    inv._write(path)
    with h5py.File(path, "r+") as f:
        group = f["parameters/w"]
        for i in range(4000):
            write_string(group, f"a{i:05d}", "x")


def fletcher32_chunk_under_4_bytes(path) -> None:
    """`value` (2 x 4 float32) chunked with deflate and fletcher32, its chunk written raw as one byte.
    MD509 admits it (deflate may expand 1100:1, and 32 bytes <= 1100 x 1); when the data is read,
    libhdf5's fletcher32 filter checksums `nbytes - 4` bytes of a 1-byte buffer (an unsigned
    underflow): SIGSEGV in H5_checksum_fletcher32."""
    inv._write(path, {"w": mdiff.replace(inv.W_NEW)})
    with h5py.File(path, "r+") as f:
        group = f["parameters/w"]
        del group["value"]
        ds = group.create_dataset("value", shape=(2, 4), dtype="<f4", chunks=(2, 4), compression="gzip", fletcher32=True,
                                  track_times=False)
        ds.id.write_direct_chunk((0, 0), b"\x01", 0)


def embedded_reshape_to_huge_then_cast(path) -> None:
    """An x-ia3 function: Reshape(s, [2**62]) -> Cast(float) -> ReduceMax -> Mul(base, .). mdiff's
    check_shapes runs onnx.shape_inference.infer_shapes(strict_mode=True, data_prop=True) on it while
    opening the file: the Cast of a tensor declared [2**62] makes ONNX's inference run without bound
    (without an address-space limit: 18.7 GB resident after ~5 min, then the OOM killer; within 2 GiB:
    well over 10 s). Reshape alone is refused in 0.03 s (MD428)."""
    from onnx import TensorProto as T, helper

    nodes = [
        helper.make_node("Constant", [], ["huge"], value=helper.make_tensor("huge", T.INT64, [1], [2**62])),
        helper.make_node("Reshape", ["s", "huge"], ["flat"]),
        helper.make_node("Cast", ["flat"], ["cast"], to=T.FLOAT),
        helper.make_node("ReduceMax", ["cast"], ["top"], keepdims=0),
        helper.make_node("Mul", ["base", "top"], ["result"]),
    ]
    ia3.write_with_function(path, ia3.function("float32", nodes=nodes))


def replace_of_shape_0_by_2pow62(path) -> None:
    """A replace update of shape [0, 2**62] (float32) with a `value` dataset of that shape: no element,
    no byte, so every limit of SPEC §8.3 passes (elements = 0); reading it makes numpy allocate
    np.empty((0, 2**62)), which numpy refuses ("array is too big"): ValueError out of validate and apply."""
    inv._write(path, {"w": mdiff.replace(inv.W_NEW)})
    with h5py.File(path, "r+") as f:
        group = f["parameters/w"]
        del group["value"]
        group.create_dataset("value", shape=(0, 2**62), dtype="<f4", track_times=False)
        meta = {"type": "replace", "version": 1, "shape": [0, 2**62], "dtype": "float32",
                "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
        write_string(group, "update", json.dumps(meta))


BUILDERS = {
    "untyped-valueerror-format-version-4301-digits.mdiff": format_version_minor_of_4301_digits,
    "untyped-recursionerror-commit-parents-deep-duplicates.mdiff": commit_parents_two_deep_arrays,
    "untyped-recursionerror-definition-inputs-deep-duplicates.mdiff": definition_inputs_two_deep_arrays,
    "untyped-onnxruntime-notimplemented-embedded-ceil-bfloat16.mdiff": embedded_ceil_bfloat16_not_implemented,
    "untyped-onnxruntime-invalidgraph-embedded-reciprocal-int32.mdiff": embedded_reciprocal_int32_invalid_graph,
    "hang-commit-parents-520000-integers.mdiff": commit_parents_520000_integers,
    "crash-hdf5-dense-links-btree-record-count-heap-overflow.mdiff": dense_link_btree_record_count,
    "crash-hdf5-btree2-header-type-0-null-deref.mdiff": btree2_header_of_another_type,
    "crash-hdf5-btree2-record-size-0-sigfpe.mdiff": btree2_header_record_size_zero,
    "crash-hdf5-chunk-filter-mask-skips-deflate-heap-overread.mdiff": chunk_with_deflate_skipped,
    "untyped-valueerror-embedded-input-elem-type-40.mdiff": embedded_input_of_unknown_elem_type,
    "hang-structure-4000-attributes-opened-by-index.mdiff": many_attributes,
    "crash-hdf5-fletcher32-chunk-of-1-byte.mdiff": fletcher32_chunk_under_4_bytes,
    "hang-onnx-shape-inference-reshape-huge-then-cast.mdiff": embedded_reshape_to_huge_then_cast,
    "untyped-valueerror-replace-shape-0-by-2pow62.mdiff": replace_of_shape_0_by_2pow62,
}


def main(names=None) -> None:
    REGRESSIONS.mkdir(exist_ok=True)
    for name, builder in BUILDERS.items():
        if names and name not in names:
            continue
        builder(REGRESSIONS / name)
        print(f"{name}: {(REGRESSIONS / name).stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
