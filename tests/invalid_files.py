"""Builders of invalid (and warning-only) .mdiff files: at least one per rule code of
mdiff/rules.py (SPEC.md §12), except the checkpoint codes MD700–MD702 (tested in
tests/test_checkpoints.py) and the apply-time codes MD600–MD602 (tested through
``mdiff.apply`` in tests/test_rules.py, which uses :func:`base_state`).

Each ``build_MDxxx_<what>(path)`` writes one file whose first finding (for an error
code: its first error; for a warning code: its first finding, and no error) is the
code ``MDxxx``. Builders are deterministic — fixed commit date, fixed arrays, no
randomness — so that the files can become language-neutral conformance fixtures.
Most start from a valid file written by :func:`mdiff.write` and break exactly one
thing with h5py; a few build from scratch.

``CASES`` lists ``(code, case_id, builder)`` for every builder in this module, in
definition order. ``LIMITS`` gives, for the cases that need them, the
:class:`mdiff.Limits` fields a reader must use (every other case uses the defaults).
``DATA_LEVEL`` names the cases whose error only shows once dataset data is read
(``mdiff.open`` accepts them; ``mdiff.validate`` with ``check_data`` and
``mdiff.apply`` refuse them).

``VALID_CASES`` lists ``(case_id, builder)`` for ``build_valid_<what>`` builders: files on
edges the rules allow, for which a validator must report nothing.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from typing import Callable, Iterator

import h5py
import numpy as np

import mdiff
from tests import ia3
from mdiff.format import canonical_json
from mdiff.hdf5walk.attributes import write_string
from mdiff.format.dtypes import dtype_named
from mdiff.updates.base import sha256_hex

DATE = "2026-01-01T00:00:00Z"
# The writer is pinned too, so that the files do not change with mdiff's version.
COMMIT = mdiff.Commit("conformance case", author=mdiff.Author("Test", "test@example.org"), date=DATE,
                      writer_name="mdiff-conformance", writer_version="1")
ZERO_SHA = "0" * 64

# ---------------------------------------------------------------- the base state

W = (np.arange(8, dtype=np.float32) / 4).reshape(2, 4)  # float32 [2, 4]
W_NEW = W.copy()
W_NEW[0, 1] = 7.5
W_NEW[1, 3] = -1.0
FLAGS = np.array([1, 0, 1, 0, 1, 0, 1, 0], dtype=bool)  # bool [8]
FLAGS_NEW = FLAGS.copy()
FLAGS_NEW[1] = True
COUNTS = np.arange(4, dtype=np.int32)  # int32 [4]
BIG = np.arange(2048, dtype=np.float32)  # 8 KiB: the writer chunks and compresses it


def base_state() -> dict[str, np.ndarray]:
    """The base every case's updates were made against (for the apply-time checks)."""
    return {"w": W.copy(), "flags": FLAGS.copy(), "counts": COUNTS.copy(), "big": BIG.copy()}


# ---------------------------------------------------------------- helpers


def _write(path, updates=None, compression: str = "gzip") -> None:
    """A file of ``updates`` — by default one dense float32 update of ``w`` — written without the
    writer's own checks, so that builders can write invalid updates."""
    updates = updates if updates is not None else {"w": mdiff.dense(W, W_NEW)}
    mdiff.write(path, updates, COMMIT, compression, check_updates=False)


@contextmanager
def _edit(path, updates=None, compression: str = "gzip") -> Iterator[h5py.File]:
    """Write a valid file, then open it for editing."""
    _write(path, updates, compression)
    with h5py.File(path, "r+") as f:
        yield f


def _get_json(obj, name: str):
    return json.loads(bytes(obj.attrs[name]).rstrip(b"\0").decode("utf-8"))


def _set_json(obj, name: str, value) -> None:
    write_string(obj, name, canonical_json.dumps(value))


def _set_raw(obj, name: str, data: bytes) -> None:
    """A scalar fixed-length UTF-8 string attribute holding exactly ``data`` (maybe not UTF-8)."""
    if name in obj.attrs:
        del obj.attrs[name]
    obj.attrs.create(name, np.array(data, dtype=h5py.string_dtype("utf-8", max(len(data), 1))))


def _edit_update(path, name: str, change: Callable[[dict], None], updates=None) -> None:
    """A valid file whose parameter ``name`` has its ``update`` JSON changed by ``change``."""
    with _edit(path, updates) as f:
        group = f[f"parameters/{name}"]
        meta = _get_json(group, "update")
        change(meta)
        _set_json(group, "update", meta)


def _edit_commit(path, change: Callable[[dict], None]) -> None:
    with _edit(path) as f:
        commit = _get_json(f, "commit")
        change(commit)
        _set_json(f, "commit", commit)


def _replace_dataset(group: h5py.Group, name: str, **kwargs) -> h5py.Dataset:
    del group[name]
    return group.create_dataset(name, track_times=False, **kwargs)


def _untimed_dcpl():
    """A dataset creation property list without object timestamps (HDF5's default records them,
    which would make a file depend on the clock); for the low-level h5py API."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_obj_track_times(False)
    return dcpl


def _dense_xor() -> np.ndarray:
    return np.bitwise_xor(W.view(np.uint32), W_NEW.view(np.uint32))


def _low_rank_update(A=None, B=None, shape=(2, 4), dtype="float32") -> mdiff.Update:
    A = np.array([[1.0], [2.0]], dtype=np.float32) if A is None else A
    B = np.array([[0.5, 0.25, -1.0, 2.0]], dtype=np.float32) if B is None else B
    return mdiff.low_rank(A, B, shape, dtype_named(dtype), scale=0.5)


# ---------------------------------------------------------------- §3.1 container


def build_MD100_not_hdf5(path) -> None:
    with open(path, "wb") as fh:
        fh.write(b"this is not an HDF5 file\n" * 8)


def build_MD100_empty_file(path) -> None:
    with open(path, "wb"):
        pass


def build_MD100_truncated(path) -> None:
    """A valid file cut in half. HDF5 refuses to open a file whose end-of-file is before the
    end-of-allocation recorded in its superblock, so this is MD100 (not a readable HDF5 file),
    not MD513 (an object in an open file cannot be read)."""
    _write(path, {"big": mdiff.replace(BIG)})
    with open(path, "rb") as fh:
        data = fh.read()
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 2])


# ---------------------------------------------------------------- §3.2–§3.4 identity, version, extensions


def build_MD101_format_missing(path) -> None:
    with _edit(path) as f:
        del f.attrs["format"]


def build_MD101_format_hdf5(path) -> None:
    with _edit(path) as f:
        write_string(f, "format", "hdf5")


def build_MD101_format_trailing_space(path) -> None:
    """Only trailing NULs are padding (§8.2); a trailing space is part of the value."""
    with _edit(path) as f:
        write_string(f, "format", "mdiff ")


def build_MD102_version_missing(path) -> None:
    with _edit(path) as f:
        del f.attrs["format_version"]


def build_MD102_version_one_number(path) -> None:
    with _edit(path) as f:
        write_string(f, "format_version", "1")


def build_MD102_version_leading_zero(path) -> None:
    with _edit(path) as f:
        write_string(f, "format_version", "1.00")


def build_MD102_version_three_parts(path) -> None:
    with _edit(path) as f:
        write_string(f, "format_version", "1.0.0")


def build_MD102_version_ten_digits(path) -> None:
    """§3.2: each number of `format_version` has 1 to 9 digits (a reader need not parse huge integers)."""
    with _edit(path) as f:
        write_string(f, "format_version", "1.1234567890")


def build_MD103_version_2_0(path) -> None:
    with _edit(path) as f:
        write_string(f, "format_version", "2.0")


def build_MD103_version_0_9(path) -> None:
    with _edit(path) as f:
        write_string(f, "format_version", "0.9")


def build_MD103_version_0_9_malformed_extensions(path) -> None:
    """Version 0.9 and an `extensions` that is not JSON: MD103 ends the checks of §3–§7, `extensions` (MD105) among
    them (§12.1 rule 4; found by differential fuzzing, seed 13: mdiff-js went on to MD105)."""
    with _edit(path) as f:
        write_string(f, "format_version", "0.9")
        write_string(f, "extensions", "mdiff")


def build_MD403_update_version_1e308(path) -> None:
    """`w`'s update says `"version": 1e308`: a number with a zero fraction is an integer (§4.1), so this is version
    10^308 of `dense`, which no reader implements — MD403, not a schema error (found by differential fuzzing, seed 12:
    the reference read a float and said MD404)."""
    with _edit(path) as f:
        text = bytes(f["parameters/w"].attrs["update"]).rstrip(b"\0").decode("utf-8")
        assert text.count('"version":1') == 1
        write_string(f["parameters/w"], "update", text.replace('"version":1', '"version":1e308'))


def build_MD104_version_1_9(path) -> None:
    with _edit(path) as f:
        write_string(f, "format_version", "1.9")


def build_MD104_version_1_99_unknown_members(path) -> None:
    """A newer minor version may add `commit` and `update` members; an older reader ignores them."""
    with _edit(path) as f:
        write_string(f, "format_version", "1.99")
        commit = _get_json(f, "commit")
        commit["signature"] = "abc"
        _set_json(f, "commit", commit)
        group = f["parameters/w"]
        meta = _get_json(group, "update")
        meta["codec_hint"] = {"level": 3}
        _set_json(group, "update", meta)


def build_MD104_version_1_99_unknown_attribute(path) -> None:
    """§3.3 and §5.4: in a newer minor version an unknown `commit` member is ignored without a finding, and an
    unknown HDF5 attribute is still reported (MD303), as in every version."""
    with _edit(path) as f:
        write_string(f, "format_version", "1.99")
        commit = _get_json(f, "commit")
        commit["signature"] = "abc"
        _set_json(f, "commit", commit)
        write_string(f["parameters/w"], "checksum_kind", "crc32")


def build_MD105_extensions_not_json(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", "[{")


def build_MD105_extensions_object(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", '{"must_understand":false,"name":"x"}')


def build_MD105_extensions_no_must_understand(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", '[{"name":"x"}]')


def build_MD105_extensions_must_understand_string(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", '[{"must_understand":"false","name":"x"}]')


def build_MD105_extensions_duplicate_names(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", '[{"must_understand":false,"name":"x"},{"must_understand":false,"name":"x"}]')


def build_MD105_extensions_deeply_nested(path) -> None:
    """10,000 unclosed `[`: not JSON. A recursive-descent parser must not crash on it."""
    with _edit(path) as f:
        write_string(f, "extensions", "[" * 10_000)


def build_MD106_extension_must_understand(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", '[{"must_understand":true,"name":"org.example.encrypted"}]')


def build_MD107_extension_optional(path) -> None:
    with _edit(path) as f:
        write_string(f, "extensions", '[{"must_understand":false,"name":"org.example.hint"}]')


# ---------------------------------------------------------------- §4 commit


def build_MD200_commit_missing(path) -> None:
    with _edit(path) as f:
        del f.attrs["commit"]


def build_MD201_commit_truncated(path) -> None:
    with _edit(path) as f:
        write_string(f, "commit", "{")


def build_MD201_commit_duplicate_member(path) -> None:
    with _edit(path) as f:
        text = bytes(f.attrs["commit"]).rstrip(b"\0").decode("utf-8")
        write_string(f, "commit", text[:-1] + ',"message":"again"}')


def build_MD201_commit_nan(path) -> None:
    with _edit(path) as f:
        text = bytes(f.attrs["commit"]).rstrip(b"\0").decode("utf-8")
        write_string(f, "commit", text[:-1] + ',"x":NaN}')


def build_MD201_commit_trailing_text(path) -> None:
    with _edit(path) as f:
        text = bytes(f.attrs["commit"]).rstrip(b"\0").decode("utf-8")
        write_string(f, "commit", text + " {}")


def build_MD201_commit_not_object(path) -> None:
    """§4.1: the value is a JSON text encoding one object (MD201); `[]` is JSON but no object."""
    with _edit(path) as f:
        write_string(f, "commit", "[]")


def build_MD201_commit_deeply_nested(path) -> None:
    with _edit(path) as f:
        write_string(f, "commit", "[" * 10_000)


def build_MD202_date_february_30(path) -> None:
    _edit_commit(path, lambda c: c.update(date="2026-02-30T00:00:00Z"))


def build_MD202_date_with_offset(path) -> None:
    _edit_commit(path, lambda c: c.update(date="2026-01-01T00:00:00+00:00"))


def build_MD202_author_missing(path) -> None:
    _edit_commit(path, lambda c: c.pop("author"))


def build_MD202_commit_unknown_member(path) -> None:
    """In a version 1.0 file no other member may appear (§4.2)."""
    _edit_commit(path, lambda c: c.update(signature="abc"))


def build_MD202_parents_duplicate(path) -> None:
    _edit_commit(path, lambda c: c.update(parents=["ab" * 32, "ab" * 32]))


def build_MD202_parent_uppercase(path) -> None:
    _edit_commit(path, lambda c: c.update(parents=["AB" * 32]))


def build_MD202_email_with_angle_brackets(path) -> None:
    _edit_commit(path, lambda c: c.update(author={"name": "Test", "email": "<test@example.org>"}))


def build_MD202_meta_not_string(path) -> None:
    _edit_commit(path, lambda c: c.update(meta={"lr": 0.001}))


# JSON Schema patterns follow ECMA-262: `$` matches only at the end of the string (Python's `re`
# also matches before a final newline); mdiff checks them with ECMA semantics (format/schemas.py).


def build_MD202_date_trailing_newline(path) -> None:
    _edit_commit(path, lambda c: c.update(date=DATE + "\n"))


def build_MD202_parent_trailing_newline(path) -> None:
    _edit_commit(path, lambda c: c.update(parents=["ab" * 32 + "\n"]))


def build_MD202_email_with_control_character(path) -> None:
    """U+007F (DEL) is among the characters an email must not contain (SPEC.md §4.2)."""
    _edit_commit(path, lambda c: c.update(author={"name": "Test", "email": "te\x7fst@example.org"}))


# ---------------------------------------------------------------- §5 layout and names


def build_MD300_parameters_missing(path) -> None:
    with _edit(path) as f:
        del f["parameters"]


def build_MD300_parameters_is_dataset(path) -> None:
    with _edit(path) as f:
        del f["parameters"]
        f.create_dataset("parameters", data=np.zeros(4, dtype="<f4"), track_times=False)


def build_MD301_dataset_in_parameters(path) -> None:
    with _edit(path) as f:
        f["parameters"].create_dataset("x", data=np.zeros(4, dtype="<f4"), track_times=False)


def _rename(path, link: str | bytes) -> None:
    with _edit(path) as f:
        f["parameters"].move("w", link)


def build_MD302_needless_escape(path) -> None:
    _rename(path, "%41bc")


def build_MD302_lowercase_hex(path) -> None:
    _rename(path, "a%2fb")


def build_MD302_bare_percent(path) -> None:
    _rename(path, "100%")


def build_MD302_unescaped_leading_dot(path) -> None:
    _rename(path, ".hidden")


def build_MD302_escaped_inner_dot(path) -> None:
    _rename(path, "a%2Eb")


def build_MD302_unescaped_control(path) -> None:
    _rename(path, "a\tb")


def build_MD302_link_not_utf8(path) -> None:
    _rename(path, b"\xffab")


def build_MD302_link_truncated_utf8(path) -> None:
    """A name whose last byte opens a 2-byte UTF-8 sequence (0xC3) that never ends."""
    _rename(path, b"w\xc3")


def build_MD302_link_ends_with_continuation_byte(path) -> None:
    """A name whose last byte is a lone continuation byte (0x80): a lenient decoder reads past it into the name's
    terminating NUL, making a name of ASCII letters and a NUL."""
    _rename(path, b"w\x80")


def build_MD302_link_stray_continuation_byte(path) -> None:
    """A name that starts with a continuation byte (0x80): a lenient UTF-8 decoder makes another name of it."""
    _rename(path, b"\x80w")


def build_MD302_dataset_member_bad_name(path) -> None:
    """A dataset in `/parameters` whose link name is not a canonical encoding (a needless escape): the name is
    checked first and nothing else of the member is looked at (§12.1 rule 4) — MD302, not MD301 too."""
    with _edit(path) as f:
        f["parameters/%61"] = np.zeros(2, np.float32)


def build_MD303_root_attribute(path) -> None:
    with _edit(path) as f:
        write_string(f, "comment", "hello")


def build_MD303_root_member(path) -> None:
    with _edit(path) as f:
        f.create_group("extra")


def build_MD303_parameters_attribute(path) -> None:
    with _edit(path) as f:
        write_string(f["parameters"], "comment", "hello")


def build_MD303_parameter_attribute(path) -> None:
    with _edit(path) as f:
        write_string(f["parameters/w"], "comment", "hello")


def build_MD303_parameter_member(path) -> None:
    with _edit(path) as f:
        f["parameters/w"].create_dataset("note", data=np.zeros(2, dtype="<u1"), track_times=False)


def build_MD303_dataset_attribute(path) -> None:
    with _edit(path) as f:
        write_string(f["parameters/w/xor"], "comment", "hello")


# ---------------------------------------------------------------- §5.5–§5.6 files and the layout (1.1)

CONFIG = b'{"architectures": ["TinyModel"], "hidden_size": 4}\n'
VOCAB = b"[PAD]\n[UNK]\nhello\nworld\n"
LAYOUT = {"format": "safetensors", "files": [{"path": "model.safetensors", "metadata": {"format": "pt"},
                                              "tensors": ["big", "w", "counts", "flags"]}]}


def _file(data: bytes) -> mdiff.Update:
    return mdiff.replace(np.frombuffer(data, np.uint8))


def _layout(doc) -> mdiff.Update:
    return _file((doc if isinstance(doc, str) else canonical_json.dumps(doc)).encode("utf-8"))


def _write_files(path, files: dict, layout: mdiff.Update | None = None, updates=None) -> None:
    """A 1.1 file: ``updates`` (default: the dense update of ``w``), then ``files`` (path → Update) and the
    layout, written without the writer's checks."""
    updates = updates if updates is not None else {"w": mdiff.dense(W, W_NEW)}
    with mdiff.DiffWriter(path, COMMIT, check_updates=False) as writer:
        for name in sorted(updates):
            writer.add(name, updates[name])
        for file_path in sorted(files):
            writer.add_file(file_path, files[file_path])
        if layout is not None:
            writer.set_layout(layout)


def build_MD304_file_path_unsafe_update_not_json(path) -> None:
    """An unsafe path (a device name) whose `update` is not JSON: MD304 is about the group's name, so its update
    is still checked (§12.1 rule 4) — MD304 and MD401."""
    _write_files(path, {"con.json": _file(b"{}")})
    with h5py.File(path, "r+") as f:
        write_string(f["files/con.json"], "update", "[1]")


def build_MD404_file_collides_with_broken_update(path) -> None:
    """`tokenizer` and `tokenizer/vocab.txt` collide (a file and a folder of one name) though the second's update
    breaks its schema: collisions are among all safe paths, whatever their updates (§5.5) — MD304 and MD404."""
    _write_files(path, {"tokenizer": _file(b"x"), "tokenizer/vocab.txt": _file(VOCAB)})
    with h5py.File(path, "r+") as f:
        group = f["files/tokenizer%2Fvocab.txt"]
        _set_json(group, "update", {k: v for k, v in _get_json(group, "update").items() if k != "shape"})


def build_MD304_file_path_dotdot(path) -> None:
    """A path that climbs out of the folder it is written to."""
    _write_files(path, {"../escape.txt": _file(b"x")})


def build_MD304_file_path_absolute(path) -> None:
    _write_files(path, {"/etc/cron.d/job": _file(b"* * * * * root true\n")})


def build_MD304_file_path_hidden_git_hook(path) -> None:
    """A hidden folder: git would run this file."""
    _write_files(path, {".git/hooks/post-checkout": _file(b"#!/bin/sh\n")})


def build_MD304_file_path_drive_letter(path) -> None:
    _write_files(path, {"C:/Windows/evil.dll": _file(b"MZ")})


def build_MD304_file_path_backslash(path) -> None:
    _write_files(path, {"tokenizer\\..\\..\\evil": _file(b"x")})


def build_MD304_file_path_device_name(path) -> None:
    _write_files(path, {"con.json": _file(b"{}")})


def build_MD304_file_path_control_character(path) -> None:
    _write_files(path, {"config\x00.json": _file(b"{}")})


def build_MD304_file_path_empty_component(path) -> None:
    _write_files(path, {"tokenizer//vocab.txt": _file(VOCAB)})


def build_MD304_file_path_trailing_dot(path) -> None:
    """Windows strips a final dot: `config.` would be written as `config`."""
    _write_files(path, {"config.": _file(b"{}")})


def build_MD304_file_path_superscript_device(path) -> None:
    """Windows takes COM¹ for a serial port, like COM1."""
    _write_files(path, {"COM\u00b9.json": _file(b"{}")})


def build_MD304_file_paths_differ_in_case(path) -> None:
    """One file on a case-insensitive file system."""
    _write_files(path, {"config.json": _file(CONFIG), "Config.json": _file(b"{}")})


def build_MD304_file_and_folder_of_one_name(path) -> None:
    _write_files(path, {"tokenizer": _file(b"x"), "tokenizer/vocab.txt": _file(VOCAB)})


def build_MD305_file_dense(path) -> None:
    """Files are set or removed, never patched."""
    old = np.frombuffer(CONFIG, np.uint8)
    _write_files(path, {"config.json": mdiff.dense(old, old ^ np.uint8(1))})


def build_MD305_file_float32(path) -> None:
    _write_files(path, {"config.json": mdiff.replace(np.zeros(3, np.float32))})


def build_MD305_file_matrix(path) -> None:
    _write_files(path, {"config.json": mdiff.replace(np.zeros((2, 3), np.uint8))})


def build_MD305_layout_sparse(path) -> None:
    old = np.frombuffer(canonical_json.dumps(LAYOUT).encode(), np.uint8)
    new = old.copy()
    new[-2] = ord(" ")
    _write_files(path, {}, mdiff.sparse(old, new))


def build_MD305_files_is_a_dataset(path) -> None:
    _write_files(path, {"config.json": _file(CONFIG)})
    with h5py.File(path, "r+") as f:
        del f["files"]
        f.create_dataset("files", data=np.frombuffer(CONFIG, np.uint8), track_times=False)


def build_MD301_file_not_a_group(path) -> None:
    _write_files(path, {"config.json": _file(CONFIG)})
    with h5py.File(path, "r+") as f:
        del f["files/config.json"]
        f["files"].create_dataset("config.json", data=np.frombuffer(CONFIG, np.uint8), track_times=False)


def _dense_1_0() -> dict[str, mdiff.Update]:
    """The dense update of ``w`` as a 1.0 writer makes it: without `base_sha256` (1.2), which a 1.0 file
    may not hold (MD404), so that an MD306 case breaks that rule alone."""
    update = mdiff.dense(W, W_NEW)
    return {"w": mdiff.Update({k: v for k, v in update.meta.items() if k != "base_sha256"}, update.data)}


def build_MD306_files_in_version_1_0(path) -> None:
    """`/files` came with 1.1: a file that says 1.0 cannot hold it."""
    _write_files(path, {"config.json": _file(CONFIG)}, updates=_dense_1_0())
    with h5py.File(path, "r+") as f:
        write_string(f, "format_version", "1.0")


def build_MD306_layout_in_version_1_0(path) -> None:
    _write_files(path, {}, _layout(LAYOUT), updates=_dense_1_0())
    with h5py.File(path, "r+") as f:
        write_string(f, "format_version", "1.0")


def build_MD306_files_in_version_1_0_not_looked_into(path) -> None:
    """`/files` in a 1.0 file holds a file with an unknown attribute and an update that is not JSON: the group is
    MD306 and not looked into (§12.1 rule 4) — no MD303, no MD401."""
    build_MD306_files_in_version_1_0(path)
    with h5py.File(path, "r+") as f:
        group = f["files/config.json"]
        write_string(group, "note", "x")
        write_string(group, "update", "not json")


def build_MD500_soft_links_past_the_object_limit(path) -> None:
    """Limits(max_objects=8): `/parameters/w` holds 11 soft links next to `xor` — more links than the limit — and the
    file's objects and attributes make exactly 8 (the root, its 3 attributes, /parameters, /parameters/w, its
    `update` and `xor`). A link refused at its kind counts nothing (§12.1 rule 2): MD500 for each soft link and
    no MD511 — and `xor`, listed after them, is read (no MD405): a reader that stops listing a group's links at
    the object limit counts only the links that may count (found while settling the seed 14 differential run:
    the reference stopped after 9 links and reported `xor` missing)."""
    with _edit(path) as f:
        group = f["parameters/w"]
        for i in range(11):
            group[f"s{i:02d}"] = h5py.SoftLink("/nowhere")
        group.move("xor", "xor2")  # relinked last: listed after the soft links in the index's own order
        group.move("xor2", "xor")


def build_MD500_external_link_named_like_dot_dot(path) -> None:
    """An external link in `/parameters` named `%2E.` (a valid UTF-8 name): h5wasm cannot query a link of that name
    (its path lookup finds no object), but the link message says what it is — not a hard link: MD500, refused
    before anything about the object it names (§12.1 rule 3; found by differential fuzzing, seed 9)."""
    with _edit(path) as f:
        group = h5py.h5g.open(f.id, b"/parameters")  # held: the links proxy does not keep it open
        group.links.create_external(b"%2E.", b"other.h5", b"/parameters/w/xor")


def build_MD500_update_type_soft_link_member(path) -> None:
    """An embedded type's group holds, besides its function, a soft link `B` (MD500) and an unknown dataset
    `notes` (MD303): the soft link is refused at its link, so it is not an unknown member too (§12.1 rule 3)."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        f["update_types/x-ia3"]["B"] = h5py.SoftLink("/parameters/w32/s")
        f["update_types/x-ia3"]["notes"] = np.zeros(2, np.uint8)


def build_MD307_layout_not_json(path) -> None:
    _write_files(path, {}, _layout('{"format": "safetensors", "files": ['))


def build_MD307_layout_without_files(path) -> None:
    _write_files(path, {}, _layout({"format": "safetensors"}))


def build_MD307_layout_unsafe_path(path) -> None:
    _write_files(path, {}, _layout({"format": "safetensors", "files": [{"path": "../model.safetensors", "tensors": ["w"]}]}))


def build_MD307_layout_tensor_twice(path) -> None:
    _write_files(path, {}, _layout({"format": "safetensors", "files": [
        {"path": "model-00001-of-00002.safetensors", "tensors": ["w", "big"]},
        {"path": "model-00002-of-00002.safetensors", "tensors": ["w"]}]}))


def build_MD307_layout_path_inside_another(path) -> None:
    """The index would lie in a folder named like a shard: the layout's paths are taken together (§5.6)."""
    _write_files(path, {}, _layout({"format": "safetensors", "files": [{"path": "model.safetensors", "tensors": ["w"]}],
                                    "index": {"path": "model.safetensors/model.safetensors.index.json", "metadata": {}}}))


def build_MD500_layout_soft_link_beside_a_malformed_value(path) -> None:
    """A soft link in `/layout`, whose value is malformed: the link is refused (MD500, §8.1), which is not an error
    of the layout's update (§12.1 rule 5), so its value is still checked (rule 6): MD500 and MD307 (found by
    differential fuzzing, seed 9: the reference skipped MD307)."""
    build_MD307_layout_without_files(path)
    with h5py.File(path, "r+") as f:
        f["layout"]["a\tb"] = h5py.SoftLink("/parameters")


def build_MD404_file_update_without_type(path) -> None:
    """A file's `update` is read as a parameter's first: a missing `type` is MD404 (§5.5), not MD305."""
    _write_files(path, {"config.json": _file(CONFIG)})
    with h5py.File(path, "r+") as f:
        group = f["files/config.json"]
        meta = _get_json(group, "update")
        del meta["type"]
        _set_json(group, "update", meta)


def build_MD307_layout_not_safetensors(path) -> None:
    _write_files(path, {}, _layout({"format": "safetensors", "files": [{"path": "pytorch_model.bin", "tensors": ["w"]}]}))


# ---------------------------------------------------------------- §7.1 the update attribute


def build_MD400_update_missing(path) -> None:
    with _edit(path) as f:
        del f["parameters/w"].attrs["update"]


def build_MD401_update_truncated(path) -> None:
    with _edit(path) as f:
        write_string(f["parameters/w"], "update", '{"type":"dense"')


def build_MD401_update_duplicate_member(path) -> None:
    with _edit(path) as f:
        text = bytes(f["parameters/w"].attrs["update"]).rstrip(b"\0").decode("utf-8")
        write_string(f["parameters/w"], "update", text[:-1] + ',"version":1}')


def build_MD401_update_nan(path) -> None:
    with _edit(path, {"w": _low_rank_update()}) as f:
        text = bytes(f["parameters/w"].attrs["update"]).rstrip(b"\0").decode("utf-8")
        assert '"scale":0.5' in text
        write_string(f["parameters/w"], "update", text.replace('"scale":0.5', '"scale":NaN'))


def build_MD401_update_trailing_text(path) -> None:
    with _edit(path) as f:
        text = bytes(f["parameters/w"].attrs["update"]).rstrip(b"\0").decode("utf-8")
        write_string(f["parameters/w"], "update", text + "x")


def build_MD401_update_not_object(path) -> None:
    """§7.1: the value is a JSON text encoding one object (MD401); `[1]` is JSON but no object."""
    with _edit(path) as f:
        write_string(f["parameters/w"], "update", "[1]")


def build_MD401_update_nested_513_levels(path) -> None:
    """`shape` holds a number inside 512 arrays, inside the update's object: 513 levels (§4.1: a value inside
    more than 512 arrays and objects is an error, whatever a reader's parser could take) — MD401, not a schema
    error (MD404)."""
    nested: object = 1
    for _ in range(512):
        nested = [nested]
    _edit_update(path, "w", lambda m: m.update(shape=nested))


def build_MD404_update_nested_512_levels(path) -> None:
    """The same number inside 511 arrays and the object (512 levels): JSON every reader parses, then a `shape`
    that breaks the schema."""
    nested: object = 1
    for _ in range(511):
        nested = [nested]
    _edit_update(path, "w", lambda m: m.update(shape=nested))


def build_MD401_update_deeply_nested(path) -> None:
    with _edit(path) as f:
        write_string(f["parameters/w"], "update", "[" * 10_000)


def build_MD402_type_unknown(path) -> None:
    _edit_update(path, "w", lambda m: m.update(type="mystery"))


def build_MD402_type_capitalised(path) -> None:
    _edit_update(path, "w", lambda m: m.update(type="Dense"))


def build_MD403_dense_version_3(path) -> None:
    _edit_update(path, "w", lambda m: m.update(version=3))


def build_MD403_dense_version_2_in_format_1_2(path) -> None:
    """A valid version-2 dense update (SUB, §7.3) in a file that says it is 1.2: version 2 exists from 1.3,
    so a 1.2 reader refuses it (MD403), and so must every reader of what the file says it is."""
    with _edit(path, {"w": mdiff.dense(W, W_NEW, version=2)}) as f:
        write_string(f, "format_version", "1.2")


def build_MD403_sparse_version_2_in_format_1_2(path) -> None:
    """A valid version-2 sparse update (gaps and SUB, §7.4) in a file that says it is 1.2."""
    with _edit(path, {"w": mdiff.sparse(W, W_NEW, version=2)}) as f:
        write_string(f, "format_version", "1.2")


def build_MD403_dense_version_2_in_format_1_2_without_sub(path) -> None:
    """A version-2 dense update in a 1.2 file that lacks its `sub` dataset and has an unknown member: the
    version comes before the datasets (§12.1 rule 5), so its members are not looked at — MD403 alone, not
    MD405 or MD303."""
    with _edit(path, {"w": mdiff.dense(W, W_NEW, version=2)}) as f:
        write_string(f, "format_version", "1.2")
        del f["parameters/w/sub"]
        f["parameters/w/extra"] = np.zeros(2, np.float32)


def build_MD403_dense_bool_version_2(path) -> None:
    """A bool parameter's dense update is version 1 (XOR) only (§7.3): a version-2 one is refused."""
    sub = np.zeros(8, dtype=np.uint8)
    sub[1] = 2  # zigzag(+1): false → true
    meta = {"type": "dense", "version": 2, "shape": [8], "dtype": "bool", "sha256": sha256_hex(FLAGS_NEW)}
    _write(path, {"flags": mdiff.Update(meta, {"sub": sub})})


def build_MD403_dense_bool_version_2_shape_not_integers(path) -> None:
    """A bool parameter's version-2 dense update whose `shape` breaks the schema too: the version is checked
    first (§12.1 rule 5), so MD403 alone, not MD404."""
    sub = np.zeros(8, dtype=np.uint8)
    meta = {"type": "dense", "version": 2, "shape": [[8]], "dtype": "bool", "sha256": sha256_hex(FLAGS_NEW)}
    _write(path, {"flags": mdiff.Update(meta, {"sub": sub})})


def build_MD401_update_number_4097_characters(path) -> None:
    """An extra member `n` whose value is a number of 4097 characters (0.000…0): §4.1 refuses numbers of more than
    4096 characters, whatever a parser could take — MD401, not a schema error (MD404) for the extra member."""
    with _edit(path) as f:
        text = f["parameters/w"].attrs["update"]
        text = text.decode() if isinstance(text, bytes) else text
        write_string(f["parameters/w"], "update", text.replace('"type"', '"n":0.' + "0" * 4095 + ',"type"', 1))


def build_MD403_replace_version_0(path) -> None:
    _edit_update(path, "w", lambda m: m.update(version=0), {"w": mdiff.replace(W_NEW)})


def build_MD404_shape_missing(path) -> None:
    _edit_update(path, "w", lambda m: m.pop("shape"))


def build_MD404_update_unknown_member(path) -> None:
    """In a version 1.0 file an `update` member the schema lacks is an error (additionalProperties)."""
    _edit_update(path, "w", lambda m: m.update(codec_hint=3))


def build_MD405_required_dataset_is_a_group(path) -> None:
    """A group named `xor` is not the dataset a dense update needs (§7.1): MD405, not a valid file."""
    with _edit(path) as f:
        group = f["parameters/w"]
        del group["xor"]
        group.create_group("xor")


def build_MD404_base_sha256_in_version_1_1(path) -> None:
    """`base_sha256` exists from format version 1.2 (§3.3, §7.1): in a 1.1 file it breaks the schema."""
    with _edit(path) as f:
        write_string(f, "format_version", "1.1")


def build_MD404_base_sha256_on_replace(path) -> None:
    """A `replace` reads nothing from the base, so it names none (§7.1)."""
    _edit_update(path, "w", lambda m: m.update(base_sha256=m["sha256"]), {"w": mdiff.replace(W_NEW)})
    with h5py.File(path, "r+") as f:
        write_string(f, "format_version", "1.2")


def build_MD404_base_sha256_uppercase(path) -> None:
    _edit_update(path, "w", lambda m: m.update(base_sha256=m["base_sha256"].upper()))


def build_MD404_sha256_uppercase(path) -> None:
    _edit_update(path, "w", lambda m: m.update(sha256=m["sha256"].upper()))


def build_MD404_dtype_unknown(path) -> None:
    _edit_update(path, "w", lambda m: m.update(dtype="float8"))


def build_MD404_sha256_trailing_newline(path) -> None:
    _edit_update(path, "w", lambda m: m.update(sha256=m["sha256"] + "\n"))


def build_MD404_shape_rank_33(path) -> None:
    _edit_update(path, "w", lambda m: m.update(shape=[1] * 33))


def build_MD404_type_missing(path) -> None:
    _edit_update(path, "w", lambda m: m.pop("type"))


def build_MD404_shape_negative(path) -> None:
    _edit_update(path, "w", lambda m: m.update(shape=[2, -4]))


def build_MD404_delete_with_sha256(path) -> None:
    _edit_update(path, "w", lambda m: m.update(sha256=ZERO_SHA), {"w": mdiff.delete(W)})


def build_MD404_low_rank_scale_string(path) -> None:
    _edit_update(path, "w", lambda m: m.update(scale="0.5"), {"w": _low_rank_update()})


# ---------------------------------------------------------------- §7.1 datasets of each type


def build_MD405_dense_xor_missing(path) -> None:
    with _edit(path) as f:
        del f["parameters/w/xor"]


def build_MD405_sparse_indices_missing(path) -> None:
    with _edit(path, {"w": mdiff.sparse(W, W_NEW)}) as f:
        del f["parameters/w/indices"]


def build_MD405_replace_value_missing(path) -> None:
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        del f["parameters/w/value"]


def build_MD405_low_rank_B_missing(path) -> None:
    with _edit(path, {"w": _low_rank_update()}) as f:
        del f["parameters/w/B"]


def build_MD406_dense_xor_signed(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor().view("<i4"))


def build_MD406_sparse_indices_int64(path) -> None:
    with _edit(path, {"w": mdiff.sparse(W, W_NEW)}) as f:
        indices = f["parameters/w/indices"][()]
        _replace_dataset(f["parameters/w"], "indices", data=indices.astype("<i8"))


def build_MD406_replace_float16_as_int16(path) -> None:
    value = np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float16)
    with _edit(path, {"w": mdiff.replace(value)}) as f:
        _replace_dataset(f["parameters/w"], "value", data=value.view("<i2"))


def build_MD406_replace_float32_as_float64(path) -> None:
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        _replace_dataset(f["parameters/w"], "value", data=W_NEW.astype("<f8"))


def build_MD406_low_rank_A_float64(path) -> None:
    with _edit(path, {"w": _low_rank_update()}) as f:
        A = f["parameters/w/A"][()]
        _replace_dataset(f["parameters/w"], "A", data=A.astype("<f8"))


def build_MD407_dense_xor_flat(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor().reshape(-1))


def build_MD407_sparse_length_mismatch(path) -> None:
    with _edit(path, {"w": mdiff.sparse(W, W_NEW)}) as f:
        xor = f["parameters/w/xor"][()]
        _replace_dataset(f["parameters/w"], "xor", data=xor[:1])


def build_MD407_sparse_more_entries_than_elements(path) -> None:
    old = np.zeros(2, dtype=np.float32)
    new = np.ones(2, dtype=np.float32)
    with _edit(path, {"v": mdiff.sparse(old, new)}) as f:
        g = f["parameters/v"]
        _replace_dataset(g, "indices", data=np.array([0, 1, 1], dtype="<u8"))
        _replace_dataset(g, "xor", data=np.array([1, 1, 1], dtype="<u4"))


def build_MD407_sparse_indices_2d(path) -> None:
    with _edit(path, {"w": mdiff.sparse(W, W_NEW)}) as f:
        indices = f["parameters/w/indices"][()]
        _replace_dataset(f["parameters/w"], "indices", data=indices.reshape(1, -1))


def build_MD407_low_rank_rank_too_big(path) -> None:
    """m = 2, n = 4: the rank may be at most 2."""
    A = np.ones((2, 3), dtype=np.float32)
    B = np.ones((3, 4), dtype=np.float32)
    _write(path, {"w": _low_rank_update(A, B)})


def build_MD407_low_rank_rank_zero(path) -> None:
    A = np.ones((2, 0), dtype=np.float32)
    B = np.ones((0, 4), dtype=np.float32)
    _write(path, {"w": _low_rank_update(A, B)})


def build_MD407_low_rank_B_wrong_shape(path) -> None:
    A = np.ones((2, 1), dtype=np.float32)
    B = np.ones((1, 3), dtype=np.float32)
    _write(path, {"w": _low_rank_update(A, B)})


def build_MD407_replace_scalar_for_vector(path) -> None:
    with _edit(path, {"x": mdiff.replace(np.array([1.5], dtype=np.float32))}) as f:
        _replace_dataset(f["parameters/x"], "value", data=np.float32(1.5))


# ---------------------------------------------------------------- data-level rules


def _sparse_with_indices(path, indices) -> None:
    with _edit(path, {"w": mdiff.sparse(W, W_NEW)}) as f:
        g = f["parameters/w"]
        _replace_dataset(g, "indices", data=np.asarray(indices, dtype="<u8"))
        _replace_dataset(g, "xor", data=np.ones(len(indices), dtype="<u4"))


def build_MD408_sparse_unsorted(path) -> None:
    _sparse_with_indices(path, [5, 1])


def build_MD408_sparse_duplicate(path) -> None:
    _sparse_with_indices(path, [1, 1])


def build_MD408_sparse_out_of_range(path) -> None:
    _sparse_with_indices(path, [1, 8])  # numel is 8


def _sparse_with_gaps(path, gaps) -> None:
    with _edit(path, {"w": mdiff.sparse(W, W_NEW, version=2)}) as f:
        g = f["parameters/w"]
        _replace_dataset(g, "gaps", data=np.asarray(gaps, dtype="<u8"))
        _replace_dataset(g, "sub", data=np.full(len(gaps), 2, dtype="<u4"))


def build_MD408_sparse_gaps_reach_numel(path) -> None:
    """Version 2: gaps [3, 4] make positions 3 and 8; numel is 8."""
    _sparse_with_gaps(path, [3, 4])


def build_MD408_sparse_gap_wraps(path) -> None:
    """Version 2: a gap of 2^64 − 1, whose + 1 wraps a 64-bit sum back to the position before it."""
    _sparse_with_gaps(path, [1, 2**64 - 1])


def build_MD408_sparse_gaps_sum_overflows(path) -> None:
    """Version 2: gaps whose running sum passes 2^64 − 1 (positions 0, 2^63 + 1, then 2^64 + 2, which
    64-bit arithmetic wraps to 2: a reader must not take position 2)."""
    _sparse_with_gaps(path, [0, 2**63, 2**63])


def build_MD409_replace_bool_2(path) -> None:
    """A bool value of 2 whose `sha256` is right for the bytes stored: only MD409 is broken."""
    value = np.array([0, 1, 2, 1], dtype=np.uint8)
    meta = {"type": "replace", "version": 1, "shape": [4], "dtype": "bool", "sha256": sha256_hex(value)}
    _write(path, {"flags": mdiff.Update(meta, {"value": value})})


def build_MD409_dense_bool_xor_2(path) -> None:
    """A dense bool XOR of 2, with `sha256` that of the (non-bool) bytes the XOR gives."""
    xor = np.zeros(8, dtype=np.uint8)
    xor[1] = 2
    result = np.bitwise_xor(FLAGS.view(np.uint8), xor)
    meta = {"type": "dense", "version": 1, "shape": [8], "dtype": "bool", "sha256": sha256_hex(result)}
    _write(path, {"flags": mdiff.Update(meta, {"xor": xor})})


def build_MD409_sparse_bool_xor_2(path) -> None:
    with _edit(path, {"flags": mdiff.sparse(FLAGS, FLAGS_NEW)}) as f:
        _replace_dataset(f["parameters/flags"], "xor", data=np.array([3], dtype="<u1"))


def build_MD410_replace_wrong_sha256(path) -> None:
    _edit_update(path, "w", lambda m: m.update(sha256=ZERO_SHA), {"w": mdiff.replace(W_NEW)})


def build_MD410_replace_value_changed(path) -> None:
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        f["parameters/w/value"][0, 0] = np.float32(99.0)


def build_MD410_low_rank_A_sha256_wrong(path) -> None:
    _edit_update(path, "w", lambda m: m.update(A_sha256=ZERO_SHA), {"w": _low_rank_update()})


def build_MD410_low_rank_B_changed(path) -> None:
    with _edit(path, {"w": _low_rank_update()}) as f:
        f["parameters/w/B"][0, 0] = np.float32(99.0)


# ---------------------------------------------------------------- §7.8 embedded update types (tests/ia3.py)


def _embedded(path, code: str) -> None:
    ia3.write_with_function(path, ia3.HOSTILE[code]())


def build_MD420_definition_without_version(path) -> None:
    ia3.write_with_function(path, ia3.function("float32"), definition={"inputs": ["s"], "exact": True})


def build_MD420_definition_input_a_large_integer(path) -> None:
    """An input given as the integer 2^63 (a JSON number beyond 2^53): not a name, so the type is refused (MD420) and
    its parameter names an unknown type (MD402). Found by differential fuzzing (seed 13): mdiff-js could not quote
    the number in its message and refused the whole file (MD513)."""
    ia3.write_with_function(path, ia3.function("float32"), definition={"version": 1, "inputs": [2**63], "exact": True})


def build_MD500_dangling_soft_link_dot_dot(path) -> None:
    """A soft link `xor2` in `/parameters/w` to `/parameters/../x`, which names nothing: a soft link all the same
    (MD500), whose name is valid UTF-8 (not MD302 because looking it up as an object fails)."""
    with _edit(path) as f:
        f["parameters/w"]["xor2"] = h5py.SoftLink("/parameters/../x")


def build_MD500_update_type_soft_link_needing_escape(path) -> None:
    """A member of `/update_types` named by the control character U+0010 (which §5.2 would escape) that is a soft
    link: refused at its link (MD500), so its name is not looked at (§12.1 rule 3: no MD302)."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        f["update_types"]["\x10"] = h5py.SoftLink("/parameters")


def build_MD506_update_types_attribute_name_not_utf8(path) -> None:
    """An attribute of `/update_types` and one of its type `x-ia3`, each named by the bytes ff fe 30 (not UTF-8,
    §8.2): refused, so neither is an unknown attribute (MD303) too (§12.1 rule 3; found by differential fuzzing,
    seed 9: mdiff-js reported both)."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        data = np.array(b"x", dtype=h5py.string_dtype("utf-8", 1))
        tid = h5py.h5t.py_create(data.dtype, logical=True)
        for group in ("update_types", "update_types/x-ia3"):
            h5py.h5a.create(f[group].id, b"\xff\xfe0", tid, h5py.h5s.create(h5py.h5s.SCALAR)).write(data)


def build_MD500_function_soft_link(path) -> None:
    """The embedded type's only function is a soft link (refused at its link, MD500): the type has a refused
    function, so it is not defined (its parameter: MD402) — not a type without functions (no MD420, §12.1)."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        group = f["update_types/x-ia3"]
        group.move("function.float32", "kept")
        group["function.float32"] = h5py.SoftLink("/update_types/x-ia3/kept")
        del group["kept"]


def build_MD509_embedded_member_refused(path) -> None:
    """A parameter of an embedded type holds, besides its input `s`, an extendible dataset `t` with an attribute:
    refused (MD509), so neither it nor its attribute is unknown (no MD303, §12.1 rule 3)."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        t = f["parameters/w32"].create_dataset("t", data=np.ones(2, "<f4"), maxshape=(None,), chunks=(2,))
        write_string(t, "note", "x")


def build_MD420_type_name_without_x_prefix(path) -> None:
    with _edit(path) as f:
        group = f.create_group("update_types/ia3")
        write_string(group, "definition", json.dumps(ia3.DEFINITION))
        group.create_dataset("function.float32", data=np.frombuffer(ia3.function("float32"), np.uint8))


def build_MD421_function_not_onnx(path) -> None:
    _embedded(path, "MD421")


def build_MD422_function_old_opset(path) -> None:
    _embedded(path, "MD422")


def build_MD423_function_random_op(path) -> None:
    _embedded(path, "MD423")


def build_MD424_function_external_data(path) -> None:
    _embedded(path, "MD424")


def build_MD425_function_subgraph(path) -> None:
    _embedded(path, "MD425")


def build_MD426_function_too_many_nodes(path) -> None:
    _embedded(path, "MD426")


def build_MD427_function_of_another_dtype(path) -> None:
    _embedded(path, "MD427")


def build_MD428_function_with_huge_intermediate(path) -> None:
    _embedded(path, "MD428")


def _reshape_then_cast(shape_nodes, shape: str) -> bytes:
    """An x-ia3 float32 function: Reshape(s, <shape>) -> Cast -> ReduceMax -> Mul(base, .)."""
    from onnx import TensorProto, helper

    return ia3.function("float32", nodes=[
        *shape_nodes,
        helper.make_node("Reshape", ["s", shape], ["flat"]),
        helper.make_node("Cast", ["flat"], ["cast"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["cast"], ["top"], keepdims=0),
        helper.make_node("Mul", ["base", "top"], ["result"]),
    ])


def _int64_constant(name: str, values: list[int]):
    from onnx import TensorProto, helper

    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values))


def build_MD428_function_reshape_to_huge_constant_shape(path) -> None:
    """Reshape(s, [2**62]) then Cast: ONNX's data propagation would spell out 2**62 entries (the fuzzer's
    hang); a constant shape over the element limit is refused before inference runs."""
    ia3.write_with_function(path, _reshape_then_cast([_int64_constant("huge", [2**62])], "huge"))


def build_MD428_function_computed_huge_shape(path) -> None:
    """The same shape computed (2**31 * 2**31): `flat` is 1-D of a length only data propagation learns,
    and it feeds Cast, so data propagation cannot be bounded."""
    from onnx import helper

    ia3.write_with_function(path, _reshape_then_cast(
        [_int64_constant("a", [2**31]), _int64_constant("b", [2**31]), helper.make_node("Mul", ["a", "b"], ["huge"])], "huge"))


def build_MD428_function_shape_input_too_long(path) -> None:
    """A shape input of 64 entries (a constant doubled by Concat six times): a rank over the limit."""
    from onnx import helper

    nodes = [_int64_constant("c0", [1])]
    nodes += [helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0) for i in range(6)]
    ia3.write_with_function(path, _reshape_then_cast(nodes, "c6"))


def build_MD428_function_shape_from_data(path) -> None:
    """Reshape(base, Shape(base) + max(Cast(s))): a shape computed from a dataset's values is not a known
    value (§7.9), so no rule gives `r` a shape before the function runs."""
    from onnx import TensorProto, helper

    ia3.write_with_function(path, ia3.function("float32", nodes=[
        helper.make_node("Cast", ["s"], ["si"], to=TensorProto.INT64),
        helper.make_node("ReduceMax", ["si"], ["top"], keepdims=0),
        helper.make_node("Shape", ["base"], ["sb"]),
        helper.make_node("Add", ["sb", "top"], ["h"]),
        helper.make_node("Reshape", ["base", "h"], ["r"]),
        helper.make_node("Mul", ["r", "s"], ["result"]),
    ]))


def build_MD404_embedded_inexact_with_sha256(path) -> None:
    """An update of an embedded type whose `exact` is false carries `sha256` (§7.8: it MUST NOT)."""
    ia3.write_with_function(path, ia3.function("float32"), definition=dict(ia3.DEFINITION, exact=False))


def build_MD411_low_rank_int32(path) -> None:
    A = np.ones((4, 1), dtype=np.float32)
    B = np.ones((1, 1), dtype=np.float32)
    _write(path, {"counts": _low_rank_update(A, B, shape=(4,), dtype="int32")})


def build_MD411_low_rank_bool(path) -> None:
    A = np.ones((8, 1), dtype=np.float32)
    B = np.ones((1, 1), dtype=np.float32)
    _write(path, {"flags": _low_rank_update(A, B, shape=(8,), dtype="bool")})


def build_MD411_low_rank_rank_0(path) -> None:
    A = np.ones((1, 1), dtype=np.float32)
    B = np.ones((1, 1), dtype=np.float32)
    _write(path, {"s": _low_rank_update(A, B, shape=(), dtype="float32")})


# ---------------------------------------------------------------- §8.1 objects and links


def build_MD500_soft_link(path) -> None:
    with _edit(path) as f:
        f["parameters/v"] = h5py.SoftLink("/parameters/w")


def build_MD500_dangling_soft_link(path) -> None:
    with _edit(path) as f:
        f["parameters/v"] = h5py.SoftLink("/nowhere")


def build_MD500_external_link(path) -> None:
    with _edit(path) as f:
        f["parameters/v"] = h5py.ExternalLink("other.h5", "/parameters/w")


def build_MD501_committed_datatype(path) -> None:
    with _edit(path) as f:
        f["t"] = np.dtype("<f4")


def build_MD513_committed_datatype_unreadable(path) -> None:
    """A committed datatype `/t` whose datatype message records version 0: an HDF5 library cannot open it, so it is
    an object that cannot be read (MD513), which §12.1 rule 3 puts before "not a group or dataset" (MD501)
    (found by differential fuzzing, seed 9: a group's link info message had become a datatype message)."""
    build_MD501_committed_datatype(path)
    data, message = _committed_datatype_message(path)
    data[message] = 0x01  # version 0, class 1 (floating point)
    open(path, "wb").write(bytes(data))


def _committed_datatype_message(path) -> tuple[bytearray, int]:
    """The file's bytes and the address of the body of committed datatype `/t`'s datatype message, a float's (its
    first byte 0x11: version 1, class 1), in a version 1 object header (no checksum) whose first message it is."""
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f["t"].id).addr
    data = bytearray(open(path, "rb").read())
    # the header's prefix is 16 bytes; a message: its type (2 bytes), size, flags, reserved, then its body
    if not (data[address] == 1 and data[address + 16] == 0x03 and data[address + 24] == 0x11):
        raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote no version 1 header with the datatype "
                              f"message where this builder edits it: {data[address:address + 32].hex()}")
    return data, address + 24


def build_MD513_committed_datatype_float_sign_in_mantissa(path) -> None:
    """A committed float datatype `/t` whose datatype message puts the sign bit at position 5, inside the mantissa
    (bits 0 to 22): HDF5 libraries refuse the message when they open the object ("mantissa and sign positions
    overlap"), so it is an object that cannot be read (MD513), before MD501 — though they name its kind without
    opening it (found by differential fuzzing, seed 15: mdiff-js checked only the message's version)."""
    build_MD501_committed_datatype(path)
    data, message = _committed_datatype_message(path)
    assert data[message + 2] == 31, "expected the sign bit at 31"
    data[message + 2] = 5  # bits 8-15 of the class bit field: the sign's position
    open(path, "wb").write(bytes(data))


def build_MD501_committed_datatype_in_parameter(path) -> None:
    with _edit(path) as f:
        f["parameters/w/t"] = np.dtype("<u4")


def build_MD501_dataset_of_committed_datatype(path) -> None:
    """`xor`'s datatype is a committed datatype, whose own link is then removed: the dataset is refused
    (§8.1), and so is not reported missing (MD405) either (§12.1)."""
    with _edit(path) as f:
        f["t"] = np.dtype("<u4")
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), dtype=f["t"])
        del f["t"]


def build_MD513_corrupt_object_header(path) -> None:
    """The object header of `xor` with its signature overwritten: its checksum fails too."""
    with _edit(path) as f:
        address = h5py.h5o.get_info(f["parameters/w/xor"].id).addr
    with open(path, "r+b") as fh:
        fh.seek(address)
        assert fh.read(4) == b"OHDR", "expected a version 2 object header"
        fh.seek(address)
        fh.write(b"XXXX")


def _corrupt_message(path, obj: str, message_type: int, at: int, value: int | bytes) -> None:
    """Byte ``at`` of the body of the first message of type ``message_type`` in the (version 2) object header
    of ``obj`` set to ``value`` (or the bytes from ``at`` to ``value``), its checksum made valid again: the
    library decodes the message as changed."""
    from tests.fuzz import hdf5bytes

    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f[obj].id).addr
    data = bytearray(open(path, "rb").read())
    layout = hdf5bytes.scan(data)
    block = next(b for b in layout.blocks if b.start == address)
    message = next(m for m in block.messages if m.type == message_type)
    if isinstance(value, bytes):
        data[message.body + at:message.body + at + len(value)] = value
    else:
        data[message.body + at] = value
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def _big_value_message(path, message_type: int) -> tuple[bytes, int]:
    """`big` replaced (its value one chunk, stored through shuffle and deflate): the file's bytes and where the body of
    the first message of type ``message_type`` in its value's (version 2) object header starts."""
    from tests.fuzz import hdf5bytes

    _write(path, {"big": mdiff.replace(BIG)})
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f["parameters/big/value"].id).addr
    data = bytes(open(path, "rb").read())
    block = next(b for b in hdf5bytes.scan(bytearray(data)).blocks if b.start == address)
    return data, next(m for m in block.messages if m.type == message_type).body


def _filter_parameters(path, name: str, filter_id: int, values: bytes) -> None:
    """`big` replaced (stored through shuffle and deflate), the parameters of its filter ``filter_id`` in the
    filter pipeline message (version 2) of its `value` overwritten with ``values``, the header's checksum fixed."""
    data, body = _big_value_message(path, 0x0B)
    if data[body] != 2:
        raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote a filter pipeline message of version {data[body]}")
    at = body + 2  # version, number of filters; then each: id, flags, number of values, the values (4 bytes each)
    for _ in range(data[body + 1]):
        code, count = int.from_bytes(data[at:at + 2], "little"), int.from_bytes(data[at + 4:at + 6], "little")
        if code == filter_id:
            assert count * 4 == len(values), f"{name} has {count} parameters"
            _corrupt_message(path, "parameters/big/value", 0x0B, at + 6 - body, values)
            return
        at += 6 + 4 * count
    raise AssertionError(f"no {name} filter")


def build_MD504_deflate_level_over_9(path) -> None:
    """`big`'s value is deflated, and its filter pipeline message gives deflate the level 16,711,681: every HDF5
    library refuses to decode a chunk through a deflate filter whose level is over 9, though the chunk inflates
    (found by differential fuzzing, seed 13: the reference inflated it itself and took the file for valid)."""
    _filter_parameters(path, "deflate", 1, (0x00FF0001).to_bytes(4, "little"))


def build_MD504_shuffle_element_size_0(path) -> None:
    """`big`'s value is shuffled, and its filter pipeline message gives shuffle the element size 0, which no HDF5
    library unshuffles by: MD504."""
    _filter_parameters(path, "shuffle", 2, (0).to_bytes(4, "little"))


def build_MD509_single_chunk_size_past_2_32(path) -> None:
    """`big`'s value is one deflated chunk whose size, as its single-chunk index (layout message version 4) records
    it, is its true size + 2^42, past the end of the file: MD509. libhdf5 keeps the low 32 bits of that size and
    reads the chunk (found by differential fuzzing, seed 13: the reference called the file valid, mdiff-js MD509)."""
    data, body = _big_value_message(path, 0x08)
    if data[body:body + 2] != b"\x04\x02" or not data[body + 2] & 2:
        raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote no version 4 layout of a filtered chunk")
    at = 5 + data[body + 3] * data[body + 4]  # version, class, flags, dimensionality, bytes per dimension; dimensions
    assert data[body + at] == 1, "expected a single-chunk index"
    _corrupt_message(path, "parameters/big/value", 0x08, at + 1 + 5, data[body + at + 1 + 5] | 0x04)  # the size's byte 5: + 2^42


def build_MD509_contiguous_storage_at_address_0(path) -> None:
    """`xor` is contiguous and its layout message records its storage at address 0 with a size of 0 bytes, less than
    the 32 it declares: MD509 (found by differential fuzzing, seed 13: h5py raises on an offset of 0, and the
    reference took the dataset for unreadable, MD513)."""
    _write(path)  # a dataset this small is stored contiguously
    _corrupt_message(path, "parameters/w/xor", 0x08, 2, bytes(16))


def build_MD509_contiguous_storage_past_the_end(path) -> None:
    """`xor` is contiguous and its layout message records a storage size of 2^40 bytes, more than it declares
    (32) and past the end of the file: the storage must end within the file (§8.3), not only its declared
    bytes."""
    _write(path)  # a dataset this small is stored contiguously
    _corrupt_message(path, "parameters/w/xor", 0x08, 2 + 8, (1 << 40).to_bytes(8, "little"))


def build_MD509_chunk_past_the_end_of_file_address(path) -> None:
    """`big`'s one chunk (unfiltered) is the last thing in the file, and the superblock's end-of-file address is 1 byte
    short of the file's end: an HDF5 library reads nothing past that address, so the chunk does not end within the
    file (§8.3), though the file's bytes hold it (found by differential fuzzing, seed 9: one reader read the chunk
    itself, the other failed to; libhdf5 refuses contiguous storage past that address when it opens the dataset)."""
    from tests.fuzz import hdf5bytes

    _write_chunk(path, BIG.astype("<f4").tobytes())
    data = bytearray(open(path, "rb").read())
    assert data[8] in (2, 3) and data[9] == 8, "expected a version 2 or 3 superblock with 8-byte offsets"
    assert int.from_bytes(data[28:36], "little") == len(data)
    with h5py.File(path, "r") as f:
        chunk = f["parameters/big/value"].id.get_chunk_info(0)
        assert chunk.byte_offset + chunk.size == len(data), "expected the chunk at the end of the file"
    layout = hdf5bytes.scan(data)
    data[28:36] = (len(data) - 1).to_bytes(8, "little")
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def build_MD513_layout_message_version_5(path) -> None:
    """`xor` is chunked in one chunk of 2^33 elements: HDF5 2.0 writes such a layout in a data layout message of
    version 5, which HDF5 1.x libraries (h5wasm's among them) cannot read — §8.2 allows versions 1 to 4, so the
    dataset is one that cannot be read (MD513), before the limits of §8.3 and its missing storage (MD509) are
    looked at (found by differential fuzzing, seed 9)."""
    with _edit(path) as f:
        group = f["parameters/w"]
        del group["xor"]
        try:
            group.create_dataset("xor", shape=(2**33,), chunks=(2**33,), dtype="<u4")
        except ValueError as exc:  # HDF5 1.x: chunks of at most 2^32 - 1 elements in a dimension
            raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} cannot write the chunk: {exc}") from None


def build_MD513_dataset_unopenable_at_the_object_limit(path) -> None:
    """Limits(max_objects=7): `xor` is contiguous, the last thing in the file, and the superblock's end-of-file address
    is 1 byte short of it, so no HDF5 library opens the dataset ("invalid dataset size") — though one names its
    kind without opening it. Refused at its link (MD513), it counts nothing (§12.1 rule 2): the file holds 7
    objects and attributes besides, at the limit, so not MD511 (found by differential fuzzing, seed 8)."""
    from tests.fuzz import hdf5bytes

    _write(path)  # a dataset this small is stored contiguously, after the metadata
    data = bytearray(open(path, "rb").read())
    assert data[8] in (2, 3) and data[9] == 8, "expected a version 2 or 3 superblock with 8-byte offsets"
    assert int.from_bytes(data[28:36], "little") == len(data)
    layout = hdf5bytes.scan(data)
    data[28:36] = (len(data) - 1).to_bytes(8, "little")
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def build_MD513_attribute_name_length_wrong(path) -> None:
    """The attribute message of `/parameters/w`'s `update` records a name of 8 bytes for "update" and its NUL (7):
    the attribute cannot be read (MD513) — not even its name, so the group has no `update` it knows of (MD400);
    the object still counts one attribute, which a reader that lists only what it can read must notice."""
    _write(path)
    _corrupt_message(path, "parameters/w", 0x0C, 2, 8)


def build_MD513_dense_attribute_index_of_another_type(path) -> None:
    """The root's 12 attributes are stored densely; the type byte of their name index (a v2 B-tree header) says 0,
    not 8 (attribute names): libhdf5 2.0 then runs another tree class's callbacks and crashes, so a reader checks
    the header first (§8.1) — the root's attributes cannot be read, the root is refused: MD513 alone."""
    from tests.fuzz import hdf5bytes

    with _edit(path) as f:
        for i in range(9):
            write_string(f, f"note{i}", "x")
    data = bytearray(open(path, "rb").read())
    layout = hdf5bytes.scan(data)
    headers = [b for b in layout.blocks if data[b.start:b.start + 4] == b"BTHD" and data[b.start + 5] == 8]
    assert len(headers) == 1, "expected one dense attribute storage"
    data[headers[0].start + 5] = 0
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def _dense_root_attributes(path, edit: Callable[[bytearray, int, int, int], None]) -> None:
    """The root's attributes stored densely, one of them (`note`, 5,000 bytes) larger than the largest object its
    fractal heap manages (4,096 bytes), so kept as a huge object, indexed by a v2 B-tree of type 1;
    ``edit(data, heap, huge_index, name_index)`` changes the file, given the addresses of the heap's header
    and of the two B-trees' headers; the checksums of those, of the B-trees' root leaves and of the heap's root
    direct block are then made right."""
    from tests.fuzz import hdf5bytes

    with _edit(path) as f:
        for i in range(9):
            write_string(f, f"note{i}", "x")
        write_string(f, "note", "x" * 5000)
    data = bytearray(open(path, "rb").read())
    assert data[9] == data[10] == 8, "expected 8-byte offsets and lengths"
    layout = hdf5bytes.scan(data)
    heap = data.find(b"FRHP\x00")
    assert heap >= 0 and data.find(b"FRHP", heap + 1) < 0, "expected one fractal heap"
    header = 22 + 12 * 8 + 3 * 8  # signature to the current rows of the root block; no filters
    assert hdf5bytes.lookup3(bytes(data[heap:heap + header])) == int.from_bytes(data[heap + header:heap + header + 4], "little")
    trees = {data[b.start + 5]: b.start for b in layout.blocks if data[b.start:b.start + 4] == b"BTHD"}
    assert sorted(trees) == [1, 8] and int.from_bytes(data[heap + 22:heap + 30], "little") == trees[1]
    leaves = []  # each tree's root, a leaf: its records (as the header says before the edit), then their checksum
    for tree in trees.values():
        size, root, records = (int.from_bytes(data[tree + a:tree + b], "little") for a, b in ((10, 12), (16, 24), (24, 26)))
        assert data[root:root + 4] == b"BTLF"
        leaves.append((root, root + 6 + records * size))
    edit(data, heap, trees[1], trees[8])
    hdf5bytes.fix_checksums(data, layout)
    for root, end in leaves:
        data[end:end + 4] = hdf5bytes.lookup3(bytes(data[root:end])).to_bytes(4, "little")
    block, block_size = int.from_bytes(data[heap + 132:heap + 140], "little"), int.from_bytes(data[heap + 112:heap + 120], "little")
    assert data[block:block + 4] == b"FHDB" and data[heap + 9] & 2, "expected a root direct block, checksummed"
    at = block + 5 + 8 + (int.from_bytes(data[heap + 128:heap + 130], "little") + 7) // 8  # after its heap offset
    data[at:at + 4] = bytes(4)
    data[at:at + 4] = hdf5bytes.lookup3(bytes(data[block:block + block_size])).to_bytes(4, "little")
    data[heap + header:heap + header + 4] = hdf5bytes.lookup3(bytes(data[heap:heap + header])).to_bytes(4, "little")
    open(path, "wb").write(bytes(data))


def _name_record(data: bytearray, names: int, name: bytes) -> int:
    """The address of the record of attribute ``name`` in the root leaf of the name index whose header is at
    ``names``: the one that holds the Jenkins lookup3 hash of the name (after the heap ID, flags and creation
    order)."""
    from tests.fuzz import hdf5bytes

    size, root, records = (int.from_bytes(data[names + a:names + b], "little") for a, b in ((10, 12), (16, 24), (24, 26)))
    found = [root + 6 + i * size for i in range(records)
             if data[root + 6 + i * size + 13:root + 6 + i * size + 17] == hdf5bytes.lookup3(name).to_bytes(4, "little")]
    assert len(found) == 1, f"expected one record of {name!r}"
    return found[0]


def build_MD513_dense_attribute_record_marked_shared(path) -> None:
    """The record of the root's attribute `note3` in its name index has flag bit 1 set: the attribute message is
    shared, in a shared message table the file does not have. libhdf5 follows it and crashes (SIGSEGV) listing
    the attributes, so a reader checks the records of the name index first (§8.1): the root's attributes cannot
    be read, the root is refused — MD513 alone (found by a sweep of the name index's bytes)."""
    _dense_root_attributes(path, lambda data, heap, huge, names: data.__setitem__(_name_record(data, names, b"note3") + 8, 0x02))


def build_MD513_dense_attribute_hash_not_its_name(path) -> None:
    """The record of the root's attribute `note3` in its name index holds the hash of another name: a listing of
    the attributes finds it, but it cannot be found by its name, and an attribute is read by its name (§8.1) —
    MD513 for it (so not MD303), the other nine notes unknown root attributes (MD303; found by a sweep of the name
    index's bytes: the reference read the attribute by its place in the index, mdiff-js by its name)."""
    def edit(data, heap, huge, names):
        at = _name_record(data, names, b"note3") + 13
        data[at:at + 4] = (int.from_bytes(data[at:at + 4], "little") ^ 1).to_bytes(4, "little")

    _dense_root_attributes(path, edit)


def build_MD513_dense_attribute_huge_object_past_the_end(path) -> None:
    """The root's attribute `note`, a huge object of 5,000 bytes, has a length of 2^32 + 5,000 in the record of the
    heap's index of huge objects: libhdf5 refuses it, h5wasm (whose lengths are 32 bits) reads 5,000 bytes. Every
    huge object lies within the file (§8.1): the root's attributes cannot be read, the root is refused — MD513
    alone (found by a sweep of that index's bytes)."""
    def edit(data, heap, huge, names):
        leaf = int.from_bytes(data[huge + 16:huge + 24], "little")
        assert data[leaf:leaf + 4] == b"BTLF" and 5000 < int.from_bytes(data[leaf + 14:leaf + 22], "little") < 6000
        data[leaf + 18] = 1  # after its address, the length's fifth byte: 2^32 more

    _dense_root_attributes(path, edit)


def build_MD513_dense_attribute_heap_root_block_offset(path) -> None:
    """The root direct block of the heap of the root's attributes records a block offset of 2^32, not 0: libhdf5
    refuses the block, h5wasm (whose offsets are 32 bits) reads it. The heap's root block lies at offset 0 (§8.1):
    the root's attributes cannot be read, the root is refused — MD513 alone (found by a sweep of the block's
    bytes)."""
    def edit(data, heap, huge, names):
        block = int.from_bytes(data[heap + 132:heap + 140], "little")
        data[block + 5 + 8 + 4] = 1

    _dense_root_attributes(path, edit)


def build_MD506_dense_attribute_name_not_utf8(path) -> None:
    """The root's attributes are stored densely, one of them named by the bytes ff fe 30, which are not UTF-8
    (§8.2): MD506 — a reader that lists the attribute names through an HDF5 library decodes them leniently, so it
    reads the names in the heap (found by a sweep of the heap's bytes: mdiff-js read only compact attribute
    messages for their raw names)."""
    with _edit(path) as f:
        for i in range(9):
            write_string(f, f"note{i}", "x")
        data = np.array(b"x", dtype=h5py.string_dtype("utf-8", 1))
        tid = h5py.h5t.py_create(data.dtype, logical=True)
        aid = h5py.h5a.create(f.id, b"\xff\xfe0", tid, h5py.h5s.create(h5py.h5s.SCALAR))
        aid.write(data)


def build_MD513_dense_attribute_huge_object_index_records_0_bytes(path) -> None:
    """The root's attributes are stored densely, one of them as a huge object of their fractal heap, whose index of
    huge objects (a v2 B-tree header) records records of 0 bytes: libhdf5 divides by that size and dies (SIGFPE),
    so a reader checks the heap's header and that index's first (§8.1) — the root's attributes cannot be read, the
    root is refused: MD513 alone (found by differential fuzzing, seed 14)."""
    _dense_root_attributes(path, lambda data, heap, huge, names: data.__setitem__(slice(huge + 10, huge + 12), b"\0\0"))


def build_MD513_dense_attribute_heap_table_width_0(path) -> None:
    """The fractal heap of the root's densely stored attributes records a table width of 0: libhdf5 crashes on it
    (SIGSEGV), so the heap's header is checked first (§8.1): the root is refused, MD513 alone."""
    _dense_root_attributes(path, lambda data, heap, huge, names: data.__setitem__(slice(heap + 110, heap + 112), b"\0\0"))


def build_MD513_dense_attribute_heap_without_huge_objects(path) -> None:
    """The fractal heap of the root's densely stored attributes has an index of huge objects and records 0 huge
    objects: libhdf5 reads the huge attribute, then corrupts its metadata cache releasing the heap and dies later
    (SIGSEGV), so the heap's header is checked first (§8.1): the root is refused, MD513 alone."""
    _dense_root_attributes(path, lambda data, heap, huge, names: data.__setitem__(slice(heap + 86, heap + 94), bytes(8)))


def build_MD513_dense_attribute_index_root_over_full(path) -> None:
    """The name index of the root's densely stored attributes says its root node holds 4,096 records, where a node of
    512 bytes holds at most (512 - 10) // 17 = 29: libhdf5 reads that many into a buffer of one node (past it: a
    crash or garbage), so the header is checked first (§8.1): the root is refused, MD513 alone."""
    def edit(data, heap, huge, names):
        assert int.from_bytes(data[names + 6:names + 10], "little") == 512 and data[names + 10] == 17
        data[names + 24:names + 26] = (4096).to_bytes(2, "little")

    _dense_root_attributes(path, edit)


def build_MD511_attributes_over_64_uncountable(path) -> None:
    """The root holds 70 attributes, stored densely, and the checksum of their name index's B-tree header is wrong:
    libhdf5 cannot count them, but the header records 70, over the limit of 64 on one object — checked on that count
    before any attribute is read (§12.1 rule 2): MD511 alone, not MD513 (found by differential fuzzing, seed 9)."""
    from tests.fuzz import hdf5bytes

    with _edit(path) as f:
        for i in range(67):
            write_string(f, f"note{i}", "x")
    data = bytearray(open(path, "rb").read())
    layout = hdf5bytes.scan(data)
    headers = [b for b in layout.blocks if data[b.start:b.start + 4] == b"BTHD" and data[b.start + 5] == 8]
    assert len(headers) == 1, "expected one dense attribute storage"
    checksum = headers[0].start + 18 + 8 + 8  # signature .. records in all (offsets and lengths of 8 bytes)
    data[checksum] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _dense_link_index(path, edit: Callable[[bytearray, int], None]) -> None:
    """`/parameters/w` holds 9 more groups, so that its links are stored densely; ``edit`` changes the header of
    their name index (a version 2 B-tree of type 5, at the offset it is given), whose checksum is then made valid."""
    from tests.fuzz import hdf5bytes

    with _edit(path) as f:
        for i in range(9):
            f["parameters/w"].create_group(f"g{i}")
    data = bytearray(open(path, "rb").read())
    layout = hdf5bytes.scan(data)
    headers = [b for b in layout.blocks if data[b.start:b.start + 4] == b"BTHD" and data[b.start + 5] == 5]
    assert len(headers) == 1, "expected one dense link storage"
    edit(data, headers[0].start)
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def build_MD500_dense_soft_link_hash_not_its_name(path) -> None:
    """`/parameters/w` holds 9 more groups and a soft link `zz`, so that its links are stored densely, and the record
    of `zz` in their name index holds the hash of another name: no HDF5 library finds the link by its name, but a
    link's kind is the type its link message records (§8.1), so it is MD500 — not MD513 — and nothing else (found by
    differential fuzzing, seed 15: mdiff-js read only the link messages of compact storage)."""
    from tests.fuzz import hdf5bytes

    with _edit(path) as f:
        for i in range(9):
            f["parameters/w"].create_group(f"g{i}")
        f["parameters/w"]["zz"] = h5py.SoftLink("/nowhere")
    data = bytearray(open(path, "rb").read())
    layout = hdf5bytes.scan(data)
    names = [b.start for b in layout.blocks if data[b.start:b.start + 4] == b"BTHD" and data[b.start + 5] == 5]
    assert len(names) == 1, "expected one dense link storage"
    size, root, records = (int.from_bytes(data[names[0] + a:names[0] + b], "little") for a, b in ((10, 12), (16, 24), (24, 26)))
    assert size == 11 and data[root:root + 4] == b"BTLF"
    mine = hdf5bytes.lookup3(b"zz").to_bytes(4, "little")
    found = [root + 6 + i * size for i in range(records) if data[root + 6 + i * size:root + 10 + i * size] == mine]
    assert len(found) == 1, "expected one record of zz"
    data[found[0]] ^= 1  # the hash's low bit
    end = root + 6 + records * size
    data[end:end + 4] = hdf5bytes.lookup3(bytes(data[root:end])).to_bytes(4, "little")
    open(path, "wb").write(bytes(data))


def build_MD513_dense_link_index_of_another_type(path) -> None:
    """The name index of `/parameters/w`'s densely stored links says type 7, not 5 (link names): libhdf5 runs
    another tree class's callbacks on it and crashes, so a reader checks the header first (§8.1) — the group's
    links cannot be read, and it is refused whole: MD513 alone (found by differential fuzzing, seed 9)."""
    _dense_link_index(path, lambda data, at: data.__setitem__(at + 5, 7))


def build_MD513_dense_link_count_wrong(path) -> None:
    """The name index of `/parameters/w`'s densely stored links records 4,157 links in all; it holds 10: listed in
    name order, libhdf5 sizes its table by the record and fails (or crashes); listed in the index's order, all
    10 are read. The number recorded must be the number listed (§8.1): MD513 alone."""
    _dense_link_index(path, lambda data, at: data.__setitem__(slice(at + 26, at + 34), (4157).to_bytes(8, "little")))


def build_MD513_dense_link_count_wrong_over_the_object_limit(path) -> None:
    """Limits(max_objects=8): the file of MD513-dense_link_count_wrong, whose `/parameters/w` holds 10 links — more
    than the limit — and whose name index records 4,157. The group's links cannot be read (§8.1), so it is refused
    whole before anything below it counts (§12.1 rules 2, 3): MD513 alone, not MD511 — a reader that stops
    listing at the object limit still checks the record against every link (found by differential fuzzing,
    seed 14)."""
    build_MD513_dense_link_count_wrong(path)


def build_MD513_dense_link_total_past_its_depth(path) -> None:
    """The name index of `/parameters/w`'s densely stored links records 2^24 links in all in a tree of depth 0, whose
    root leaf holds 10: a leaf root holds every record (§8.1), so its header is not sound — MD513 alone, before any
    HDF5 library lists the links (h5wasm sized its listing by that total and ran for minutes; found by a sweep of
    the header's bytes)."""
    _dense_link_index(path, lambda data, at: data.__setitem__(slice(at + 26, at + 34), (1 << 24).to_bytes(8, "little")))


def _symbol_table_group(path) -> tuple[int, int]:
    """`/parameters/w` rebuilt as a group of the earliest format, whose links are a symbol table: the addresses of
    its B-tree and its local heap (those its symbol table message names)."""
    from mdiff.hdf5walk.walk import _header_reader

    with _edit(path) as f:  # opened with h5py's default, the earliest format: new groups get a symbol table
        f.move("parameters/w", "parameters/old")
        group = f["parameters"].create_group("w")
        for name, value in f["parameters/old"].attrs.items():
            group.attrs[name] = value
        for name in list(f["parameters/old"]):
            f.move(f"parameters/old/{name}", f"parameters/w/{name}")
        del f["parameters/old"]
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f["parameters/w"].id).addr
        tables = [body for kind, body in _header_reader(f, os.path.getsize(path)).messages(address) if kind == 0x11]
    if not tables:  # libhdf5 1.14 writes a new group of a file of mdiff's writer in the newer format
        raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote no symbol table for a new group")
    return int.from_bytes(tables[0][:8], "little"), int.from_bytes(tables[0][8:16], "little")


def _symbol_table_heap(path, edit: Callable[[bytearray, int, int, int], None]) -> None:
    """`/parameters/w` rebuilt as a symbol table group (:func:`_symbol_table_group`); ``edit(data, heap, segment,
    free)`` changes its local heap, given the addresses of its header and data segment and the offset of the first
    free block in it."""
    _, heap = _symbol_table_group(path)
    data = bytearray(open(path, "rb").read())
    assert data[heap:heap + 4] == b"HEAP"
    size, free, segment = (int.from_bytes(data[heap + at:heap + at + 8], "little") for at in (8, 16, 24))
    assert free != 1 and free + 16 <= size, "expected a free block in the heap"
    edit(data, heap, segment, free)
    open(path, "wb").write(bytes(data))


def build_MD513_local_heap_free_list_loops(path) -> None:
    """`/parameters/w` is a symbol table group whose local heap's free list loops (its one free block names itself
    as the next): libhdf5 follows the list with no bound, allocating until memory runs out (8 GB in 26 s), so a
    reader checks the heap before its HDF5 library lists the links (§8.1) — the group is refused whole: MD513
    alone."""
    _symbol_table_heap(path, lambda data, heap, segment, free:
                       data.__setitem__(slice(segment + free, segment + free + 8), free.to_bytes(8, "little")))


def build_MD513_local_heap_segment_past_the_file(path) -> None:
    """`/parameters/w`'s local heap (a symbol table's) has no free block and records its data segment at 2^30, past
    the end of the file: its links cannot be read (§8.1), and the group is refused whole: MD513 alone."""
    def edit(data, heap, segment, free):
        data[heap + 16:heap + 32] = (1).to_bytes(8, "little") + (1 << 30).to_bytes(8, "little")
    _symbol_table_heap(path, edit)


def build_MD513_local_heap_free_block_past_its_segment(path) -> None:
    """The one free block of `/parameters/w`'s local heap (a symbol table's) records a size that ends past the
    heap's data segment: its links cannot be read (§8.1), and the group is refused whole: MD513 alone."""
    def edit(data, heap, segment, free):
        size = int.from_bytes(data[heap + 8:heap + 16], "little")
        data[segment + free + 8:segment + free + 16] = (size - free + 1).to_bytes(8, "little")
    _symbol_table_heap(path, edit)


def _symbol_table_name_offset(path, in_leaf: bool) -> None:
    """Adds 2^32 to the first name offset `/parameters/w`'s symbol table records: its first entry's (in its first
    symbol table node) or its B-tree root's first key."""
    btree, _ = _symbol_table_group(path)
    data = bytearray(open(path, "rb").read())
    assert data[btree:btree + 5] == b"TREE\0" and data[btree + 5] == 0, "expected a B-tree of one level"
    at = btree + 24  # signature, type, level, children, two siblings; then a key (8 bytes) and a child
    if in_leaf:
        leaf = int.from_bytes(data[at + 8:at + 16], "little")
        assert data[leaf:leaf + 4] == b"SNOD"
        at = leaf + 8  # signature, version, reserved, entries; then the first entry's name offset
    data[at:at + 8] = (int.from_bytes(data[at:at + 8], "little") + (1 << 32)).to_bytes(8, "little")
    open(path, "wb").write(bytes(data))


def build_MD513_symbol_table_entry_name_past_its_heap(path) -> None:
    """The first entry of `/parameters/w`'s symbol table names its link at an offset 2^32 past where the name
    lies, past its local heap's data segment: libhdf5 cannot list the links (h5wasm, whose sizes are 32 bits,
    reads the offset as the name's), so the group is refused whole (§8.1): MD513 alone."""
    _symbol_table_name_offset(path, in_leaf=True)


def build_MD513_symbol_table_key_past_its_heap(path) -> None:
    """The first key of `/parameters/w`'s symbol table B-tree names an offset 2^32 past its local heap's data
    segment: libhdf5 lists the links but finds none by name (h5wasm, whose sizes are 32 bits, finds them), so the
    group's links cannot be read and it is refused whole (§8.1): MD513 alone."""
    _symbol_table_name_offset(path, in_leaf=False)


def build_MD513_group_info_unreadable(path) -> None:
    """`/parameters/w`'s group info message (0x0A) has version 0x80: the group cannot be read (listing its links
    decodes it), so it is refused whole — neither its attributes nor its members are looked at (§12.1)."""
    _write(path)
    _corrupt_message(path, "parameters/w", 0x0A, 0, 0x80)


def build_MD513_root_group_info_unreadable(path) -> None:
    """The root group's group info message has version 0x80: the root is refused, so nothing of the file is read
    as mdiff — not MD101, MD200 or MD300 (§12.1)."""
    _write(path)
    _corrupt_message(path, "/", 0x0A, 0, 0x80)


def _write_chunk(path, data: bytes, **dataset_kwargs) -> None:
    """`big` replaced, its one chunk written raw (bypassing the filters)."""
    with _edit(path, {"big": mdiff.replace(BIG)}) as f:
        ds = _replace_dataset(f["parameters/big"], "value", shape=BIG.shape, dtype="<f4", chunks=BIG.shape, **dataset_kwargs)
        ds.id.write_direct_chunk((0,), data)


def build_MD513_corrupt_chunk(path) -> None:
    """A deflated chunk whose bytes are not a deflate stream: only reading the data shows it."""
    _write_chunk(path, bytes(range(256)) * 4, compression="gzip", compression_opts=1, shuffle=True)


def build_MD513_sparse_xor_corrupt_chunk(path) -> None:
    """A float32 sparse update whose `xor` (read by no value rule: the type is not bool) is one deflated chunk
    that is not a deflate stream: a validator decodes every stored byte of a group (§12.1), so only reading it
    shows it."""
    big_new = BIG.copy()
    big_new[::8] += 1
    with _edit(path, {"big": mdiff.sparse(BIG, big_new)}) as f:
        group = f["parameters/big"]
        k = group["xor"].shape[0]
        ds = _replace_dataset(group, "xor", shape=(k,), dtype="<u4", chunks=(k,), compression="gzip", compression_opts=1)
        ds.id.write_direct_chunk((0,), bytes(range(256)) * 4)


def build_MD513_sparse_sub_corrupt_chunk(path) -> None:
    """A version 2 sparse update whose `sub` is one deflated chunk that is not a deflate stream: a validator decodes
    every stored byte of the datasets a group's type requires (§12.1 rule 6), `sub` as well as `gaps`: MD513 — and
    MD513 alone where the gaps break MD408 too (found by differential fuzzing, seed 9: mdiff-js decoded `gaps`
    only)."""
    with _edit(path, {"w": mdiff.sparse(W, W_NEW, version=2)}) as f:
        g = f["parameters/w"]
        _replace_dataset(g, "gaps", data=np.asarray([3, 2], dtype="<u8"))
        ds = _replace_dataset(g, "sub", shape=(2,), dtype="<u4", chunks=(2,), compression="gzip", compression_opts=1)
        ds.id.write_direct_chunk((0,), bytes(range(12)))


def build_MD513_unfiltered_chunk_too_long(path) -> None:
    """A chunk of a dataset without filters that stores 4 bytes more than the chunk holds: it does not decode to
    exactly its size (§8.3), though its storage is large enough (so not MD509)."""
    _write_chunk(path, BIG.tobytes() + b"\0\0\0\0")
    with h5py.File(path, "r") as f:
        stored = f["parameters/big/value"].id.get_chunk_info(0).size
    if stored != BIG.nbytes + 4:  # libhdf5 1.14 records an unfiltered chunk at its own size, whatever was written
        raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} stored the unfiltered chunk as {stored} bytes")


def build_MD513_fletcher32_mismatch(path) -> None:
    """A chunk whose fletcher32 checksum does not match its data."""
    _write_chunk(path, BIG.tobytes() + b"\0\0\0\0", fletcher32=True)


def build_MD513_chunk_inflates_past_its_size(path) -> None:
    """An 8 KiB deflated chunk whose stream inflates to 16 KiB: its first 8 KiB are the value (its
    sha256 holds), the rest is more than the chunk. A reader that inflates until the stream ends
    holds whatever the stream makes — a few megabytes can make gigabytes — so a reader inflates a
    chunk into at most its size (§8.3)."""
    import zlib

    _write_chunk(path, zlib.compress(BIG.tobytes() + bytes(BIG.nbytes), 9), compression="gzip", compression_opts=1)


class CannotBuildHere(Exception):
    """The HDF5 library in use cannot make this case's file (the committed corpus file, made with the
    suite's versions, still covers it)."""


def build_MD514_link_count_two(path) -> None:
    """`xor` is reached through one link, but its object header records two (§8.1: the count must be 1, and
    the dataset is refused, so the dense update's `xor` is not reported missing)."""
    _write(path)
    with h5py.File(path, "r+", libver=("earliest", "v110")) as f:  # a version 1 object header: a count field
        xor = _replace_dataset(f["parameters/w"], "xor", data=_dense_xor())
        address = h5py.h5o.get_info(xor.id).addr
    with open(path, "r+b") as fh:
        fh.seek(address)
        header = bytearray(fh.read(8))
        if not (header[0] == 1 and header[4:8] == (1).to_bytes(4, "little")):  # older libhdf5 (1.14) wrote v2
            raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote no version 1 object header for `xor`")
        fh.seek(address + 4)
        fh.write((2).to_bytes(4, "little"))


def build_MD514_group_alias(path) -> None:
    with _edit(path) as f:
        f["parameters/v"] = f["parameters/w"]


def build_MD514_dataset_alias(path) -> None:
    with _edit(path) as f:
        f["parameters/w/xor2"] = f["parameters/w/xor"]


def build_MD514_link_to_root(path) -> None:
    with _edit(path) as f:
        f["parameters/w/up"] = f["/"]


def build_MD514_link_to_root_whose_count_is_1(path) -> None:
    """`/parameters/w/up` links back to the root, and the root's object header records a reference count of 1 (its
    reference count message edited back from 2): the walk reaches the root a second time, so the link is refused
    (MD514) though no header counts two links (found by differential fuzzing, seed 16: the reference looked only at
    the count for the root, which it reaches through no link)."""
    from mdiff.hdf5walk.walk import _header_reader
    from tests.fuzz import hdf5bytes

    build_MD514_link_to_root(path)
    with h5py.File(path, "r") as f:
        root = _header_reader(f, os.path.getsize(path)).root_address()
    data = bytearray(open(path, "rb").read())
    layout = hdf5bytes.scan(data)
    # in its header or a continuation block: type 0x16, size 5, flags; version 0, count 2
    found = [m.start() for m in re.finditer(rb"\x16\x05\x00.\x00\x02\x00\x00\x00", bytes(data), re.DOTALL)]
    assert data[root:root + 4] == b"OHDR" and len(found) == 1, "expected the root's reference count message"
    data[found[0] + 5] = 1
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def build_MD514_link_to_root_at_object_limit(path) -> None:
    """Limits(max_objects=8): the root, its 3 attributes, /parameters, /parameters/w, its `update` and `xor` make
    8; the link `up` back to the root is refused (MD514) and counts for nothing — the root is one object, counted
    once (§12.1 rule 2) — so the file is at the limit, not over it."""
    build_MD514_link_to_root(path)


def build_MD514_link_to_root_not_canonical(path) -> None:
    """A member `%2fx` of `/files` (lower-case hex: not a canonical encoding, §5.2) that links to the root
    group: refused at its link (MD514), it is not decoded as a path too (§12.1: no MD302)."""
    _write_files(path, {"config.json": _file(CONFIG)})
    with h5py.File(path, "r+") as f:
        f["files/%2fx"] = f["/"]


def build_MD514_cycle(path) -> None:
    with _edit(path) as f:
        f["parameters/w/loop"] = f["parameters"]


# ---------------------------------------------------------------- §8.2 datasets and attributes


def build_MD502_external_storage(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", shape=(2, 4), dtype="<u4", external=[("xor.bin", 0, 32)])


def build_MD503_virtual_dataset(path) -> None:
    """`xor` mapped from a dataset of another file (which need not exist)."""
    with _edit(path) as f:
        group = f["parameters/w"]
        del group["xor"]
        dcpl = _untimed_dcpl()
        space = h5py.h5s.create_simple((2, 4))
        dcpl.set_virtual(space, b"source.h5", b"/xor", h5py.h5s.create_simple((2, 4)))
        h5py.h5d.create(group.id, b"xor", h5py.h5t.STD_U32LE, space, dcpl=dcpl).close()


def build_MD504_lzf(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), chunks=(1, 4), compression="lzf")


def build_MD504_scaleoffset(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), chunks=(1, 4), scaleoffset=0)


def _replace_value(path, **kwargs) -> None:
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        _replace_dataset(f["parameters/w"], "value", **kwargs)


def build_MD505_big_endian(path) -> None:
    _replace_value(path, data=W_NEW.astype(">f4"))


def build_MD505_uint8_big_endian(path) -> None:
    """A bool replace whose uint8 `value` dataset records big-endian byte order: §8.2 asks for
    little-endian datatypes, one byte wide too (found by differential fuzzing: mdiff-js let it by)."""
    with _edit(path, {"flags": mdiff.replace(FLAGS_NEW)}) as f:
        group = f["parameters/flags"]
        del group["value"]
        dsid = h5py.h5d.create(group.id, b"value", h5py.h5t.STD_U8BE, h5py.h5s.create_simple((8,)), dcpl=_untimed_dcpl())
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, FLAGS_NEW.view(np.uint8), mtype=h5py.h5t.STD_U8LE)
        dsid.close()


def _padded_value(path, base, pads) -> None:
    """A float32 replace whose `value` datatype is ``base`` (32-bit) with the padding types ``pads`` (lsb, msb)."""
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        group = f["parameters/w"]
        del group["value"]
        tid = base.copy()
        tid.set_pad(*pads)
        dsid = h5py.h5d.create(group.id, b"value", tid, h5py.h5s.create_simple(W_NEW.shape), dcpl=_untimed_dcpl())
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, W_NEW, mtype=h5py.h5t.IEEE_F32LE)
        dsid.close()


def build_MD505_float_padding_ones(path) -> None:
    """A float32 datatype whose most significant padding is "ones" (the bit field's bit 2): not the standard
    binary32, whose padding types are all zero (§8.2: every field of the datatype is the standard one's)."""
    _padded_value(path, h5py.h5t.IEEE_F32LE, (h5py.h5t.PAD_ZERO, h5py.h5t.PAD_ONE))


def build_MD505_integer_padding_ones(path) -> None:
    """A uint8 `value` (a bool replace) whose datatype records "ones" as its least significant padding."""
    with _edit(path, {"flags": mdiff.replace(FLAGS_NEW)}) as f:
        group = f["parameters/flags"]
        del group["value"]
        tid = h5py.h5t.STD_U8LE.copy()
        tid.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ZERO)
        dsid = h5py.h5d.create(group.id, b"value", tid, h5py.h5s.create_simple((8,)), dcpl=_untimed_dcpl())
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, FLAGS_NEW.view(np.uint8), mtype=h5py.h5t.STD_U8LE)
        dsid.close()


def build_MD505_float_byte_order_bit_6(path) -> None:
    """A float32 replace whose `value`'s class bit field is 0x1f60: bit 6, the second bit of a float's byte order,
    set alone — reserved in HDF5's format; libhdf5 reads it as little-endian, and so as the standard binary32 (found
    by differential fuzzing, seed 17). §8.2 compares every field of the message, its bit field's too: MD505."""
    _write(path, {"w": mdiff.replace(W_NEW)})
    _corrupt_message(path, "parameters/w/value", 0x03, 1, 0x60)


def build_MD505_integer_reserved_bit(path) -> None:
    """`/parameters/w/xor`'s datatype (uint32) with bit 4 of its class bit field set, a bit HDF5 reserves for an
    integer: libhdf5 ignores it and reads the standard uint32. §8.2 compares every field of the message: MD505."""
    _write(path)
    _corrupt_message(path, "parameters/w/xor", 0x03, 1, 0x10)


def build_MD505_low_rank_A_refused(path) -> None:
    """`A` stored big-endian (refused, §8.2) and `B` of shape [3, 4]: without `A` the rank r is unknown, so `B`'s
    shape is not checked (§12.1 rule 5: the pair's shapes are checked together) — MD505 alone, not MD407."""
    with _edit(path, {"w": _low_rank_update(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))}) as f:
        _replace_dataset(f["parameters/w"], "A", data=np.ones((2, 3), ">f4"))
        _replace_dataset(f["parameters/w"], "B", data=np.ones((3, 4), "<f4"))


def build_MD505_sparse_indices_refused(path) -> None:
    """`indices` stored big-endian (refused, §8.2) next to a 2-D `xor`: the pair's shapes are checked together
    (§12.1 rule 5), so `xor` is not MD407 — MD505 alone."""
    new = W_NEW.copy()
    new[0, 0] += 1
    with _edit(path, {"w": mdiff.sparse(W, new)}) as f:
        group = f["parameters/w"]
        k = group["xor"].shape[0]
        _replace_dataset(group, "indices", data=np.arange(k, dtype=">u8"))
        _replace_dataset(group, "xor", data=np.zeros((k, 1), "<u4"))


def build_MD505_float16_dataset(path) -> None:
    value = np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float16)
    with _edit(path, {"h": mdiff.replace(value)}) as f:
        _replace_dataset(f["parameters/h"], "value", data=value)


def build_MD505_string_dataset(path) -> None:
    _replace_value(path, data=np.array([b"abcd"] * 8, dtype="S4").reshape(2, 4))


def build_MD505_dataset_null_dataspace(path) -> None:
    _replace_value(path, data=h5py.Empty("<f4"))


def build_MD505_compound(path) -> None:
    _replace_value(path, data=np.zeros((2, 4), dtype=[("a", "<f4")]))


def build_MD505_enum_bool(path) -> None:
    """h5py stores numpy bool as an HDF5 enum; the bool storage datatype is uint8."""
    with _edit(path, {"flags": mdiff.replace(FLAGS_NEW)}) as f:
        _replace_dataset(f["parameters/flags"], "value", data=FLAGS_NEW)


def build_MD505_array_type(path) -> None:
    """An HDF5 array datatype (4 × binary32) in a dataset of shape [2]. (numpy would flatten a
    subarray dtype into shape [2, 4], so the dataset is made with the low-level API.)"""
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        group = f["parameters/w"]
        del group["value"]
        tid = h5py.h5t.array_create(h5py.h5t.IEEE_F32LE, (4,))
        dsid = h5py.h5d.create(group.id, b"value", tid, h5py.h5s.create_simple((2,)), dcpl=_untimed_dcpl())
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, W_NEW, mtype=tid)
        dsid.close()


def build_MD505_vlen_sequence(path) -> None:
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        ds = _replace_dataset(f["parameters/w"], "value", shape=(2,), dtype=h5py.vlen_dtype("<f4"))
        ds[0] = W_NEW[0]
        ds[1] = W_NEW[1]


def build_MD505_opaque(path) -> None:
    _replace_value(path, data=np.zeros((2, 4), dtype="V4"))


def build_MD505_integer_precision_24(path) -> None:
    """A little-endian 4-byte unsigned integer with 24 bits of precision: not the standard uint32."""
    value = np.array([1, 2, 3, 4], dtype=np.uint32)
    with _edit(path, {"u": mdiff.replace(value)}) as f:
        group = f["parameters/u"]
        del group["value"]
        tid = h5py.h5t.STD_U32LE.copy()
        tid.set_precision(24)
        dsid = h5py.h5d.create(group.id, b"value", tid, h5py.h5s.create_simple((4,)), dcpl=_untimed_dcpl())
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, value, mtype=h5py.h5t.NATIVE_UINT32)
        dsid.close()


def build_MD506_vlen_string(path) -> None:
    with _edit(path) as f:
        f.attrs.create("format", "mdiff", dtype=h5py.string_dtype("utf-8"))


def build_MD506_numeric(path) -> None:
    with _edit(path) as f:
        f.attrs["format_version"] = np.float64(1.0)


def build_MD506_array_of_strings(path) -> None:
    with _edit(path) as f:
        f.attrs.create("format", np.array([b"mdiff"], dtype=h5py.string_dtype("utf-8", 5)))


def build_MD506_attribute_not_utf8(path) -> None:
    with _edit(path) as f:
        _set_raw(f["parameters/w"], "comment", b"caf\xe9")


def build_MD506_dataset_attribute_numeric(path) -> None:
    with _edit(path) as f:
        f["parameters/w/xor"].attrs["scale"] = np.float32(1.0)


def build_MD506_attribute_name_stray_continuation_byte(path) -> None:
    """An attribute of `/parameters/w` named by the bytes 80 78: a lenient UTF-8 decoder makes another name of
    them, which then names no attribute — still MD506 (§8.2), not MD513."""
    with _edit(path) as f:
        data = np.array(b"x", dtype=h5py.string_dtype("utf-8", 1))
        tid = h5py.h5t.py_create(data.dtype, logical=True)
        aid = h5py.h5a.create(f["parameters/w"].id, b"\x80x", tid, h5py.h5s.create(h5py.h5s.SCALAR))
        aid.write(data)


def build_MD506_attribute_name_not_utf8(path) -> None:
    """An attribute of `/parameters/w` named by the bytes ff fe 30, which are not UTF-8 (§8.2): refused, so not
    an unknown attribute (MD303) too."""
    with _edit(path) as f:
        data = np.array(b"x", dtype=h5py.string_dtype("utf-8", 1))
        tid = h5py.h5t.py_create(data.dtype, logical=True)
        aid = h5py.h5a.create(f["parameters/w"].id, b"\xff\xfe0", tid, h5py.h5s.create(h5py.h5s.SCALAR))
        aid.write(data)


def build_MD506_attribute_null_dataspace(path) -> None:
    with _edit(path) as f:
        f["parameters/w"].attrs.create("comment", h5py.Empty(h5py.string_dtype("utf-8", 4)))


def build_MD506_attribute_dataspace_class_4(path) -> None:
    """The dataspace message of `/parameters/w`'s `update` attribute records class 4 (none of scalar 0, simple 1,
    null 2): libhdf5 decodes it without an error and h5wasm shows it as a scalar, but it is not a scalar (§8.2):
    MD506, and the refused `update` is not MD400 (§12.1)."""
    from tests.fuzz import hdf5bytes

    _write(path)
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f["parameters/w"].id).addr
    data = bytes(open(path, "rb").read())
    block = next(b for b in hdf5bytes.scan(bytearray(data)).blocks if b.start == address)
    body = next(m for m in block.messages if m.type == 0x0C).body
    version, name_size, type_size = data[body], int.from_bytes(data[body + 2:body + 4], "little"), \
        int.from_bytes(data[body + 4:body + 6], "little")
    assert version == 3, version
    space = 9 + name_size + type_size
    assert data[body + space] == 2, "expected a version 2 dataspace message"
    _corrupt_message(path, "parameters/w", 0x0C, space + 3, 4)


def build_MD506_update_vlen(path) -> None:
    with _edit(path) as f:
        text = bytes(f["parameters/w"].attrs["update"]).rstrip(b"\0").decode("utf-8")
        f["parameters/w"].attrs.create("update", text, dtype=h5py.string_dtype("utf-8"))


# ---------------------------------------------------------------- §8.3 limits and storage


def build_MD507_rank_over_limit(path) -> None:
    """Limits(max_rank=1): `xor` has rank 2. (HDF5 cannot store rank 33, the default limit + 1.)"""
    _write(path)


def build_MD507_declared_rank_over_limit(path) -> None:
    """Limits(max_rank=1): a delete update declares shape [2, 4] and the file has no dataset; §8.3 holds the
    declared shape to the rank limit with the rank's own code."""
    _write(path, {"w": mdiff.delete(W)})


def build_MD508_elements_over_default_limit(path) -> None:
    """A dense update declaring 2³⁶ + 1 uint8 elements (in chunks never written): the default
    limits refuse it before anything else is looked at."""
    n = 2**36 + 1
    with _edit(path) as f:
        g = f["parameters/w"]
        meta = {"type": "dense", "version": 1, "shape": [n], "dtype": "uint8", "sha256": ZERO_SHA}
        _set_json(g, "update", meta)
        _replace_dataset(g, "xor", shape=(n,), dtype="<u1", chunks=(2**20,))


def build_MD508_elements_over_limit(path) -> None:
    """Limits(max_elements=4): `xor` has 8."""
    _write(path)


def build_MD508_bytes_over_limit(path) -> None:
    """Limits(max_dataset_bytes=16): `xor` declares 32 bytes."""
    _write(path)


def build_MD508_empty_dataset_with_huge_dimension(path) -> None:
    """A replace of shape [0, 2**62]: no element, but a dimension of 0 counts as 1, so it declares 2**62
    (numpy cannot even allocate the empty array)."""
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        g = f["parameters/w"]
        _replace_dataset(g, "value", shape=(0, 2**62), dtype="<f4")
        _set_json(g, "update", {"type": "replace", "version": 1, "shape": [0, 2**62], "dtype": "float32",
                                "sha256": sha256_hex(np.zeros((0,), np.float32))})


def build_MD508_empty_dataset_over_limit(path) -> None:
    """Limits(max_elements=4): `value` has shape [0, 8], no element but an extent of 8."""
    with _edit(path, {"w": mdiff.replace(W_NEW)}) as f:
        g = f["parameters/w"]
        _replace_dataset(g, "value", shape=(0, 8), dtype="<f4")
        _set_json(g, "update", {"type": "replace", "version": 1, "shape": [0, 8], "dtype": "float32",
                                "sha256": sha256_hex(np.zeros((0, 8), np.float32))})


def build_MD508_declared_shape_over_limit(path) -> None:
    """A sparse update (no dataset of the parameter's shape) declaring shape [2**40, 2**40]: the
    declared shape is held to the same limits as a dataset's (§8.3)."""
    _edit_update(path, "w", lambda u: u.update(shape=[2**40, 2**40]), {"w": mdiff.sparse(W, W_NEW)})


def build_MD509_extendible_dataset(path) -> None:
    """Fully written, but its maximum shape is unlimited: readers need not parse growable chunk indexes."""
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), chunks=(1, 4), maxshape=(None, 4))


def build_MD404_update_version_missing(path) -> None:
    _edit_update(path, "w", lambda u: u.pop("version"))


def build_MD513_chunk_index_key_off_grid(path) -> None:
    """`xor` in chunks of (1, 4), indexed by a version 1 B-tree (layout version 3), whose second key records the
    offset (1, 1): not a multiple of the chunk's dimension, so every HDF5 library refuses the index ("bad
    coordinate offset") — a part of the header that §8.3's checks need cannot be read: MD513, not MD509 (found by
    differential fuzzing, seed 13: mdiff-js read the index itself and found a chunk off the grid)."""
    from mdiff.hdf5walk.walk import _header_reader

    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), dtype="<u4", chunks=(1, 4))
    with h5py.File(path, "r") as f:
        ds = f["parameters/w/xor"]
        address = h5py.h5o.get_info(ds.id).addr
        if _header_reader(f, os.path.getsize(path)).layout_version(address) != 3:
            raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote no version 1 B-tree chunk index")
        first = ds.id.get_chunk_info(0).byte_offset
    data = bytearray(open(path, "rb").read())
    node = data.rfind(b"TREE\x01\x00", 0, first) if data.count(b"TREE\x01\x00") > 1 else data.find(b"TREE\x01\x00")
    assert node >= 0 and int.from_bytes(data[node + 6:node + 8], "little") == 2, "expected a leaf of 2 chunks"
    key = node + 8 + 2 * 8 + (4 + 4 + 8 * 3) + 8  # after the header, key 0 and child 0: key 1
    assert int.from_bytes(data[key + 8:key + 16], "little") == 1, "expected key 1 at offset (1, 0)"
    data[key + 16:key + 24] = (1).to_bytes(8, "little")
    open(path, "wb").write(bytes(data))


def build_MD513_chunk_index_node_past_the_end_of_file(path) -> None:
    """`xor` in chunks of (1, 4), indexed by a version 1 B-tree (layout version 3) whose one node is a leaf of 2
    entries, and the superblock's end-of-file address just after those entries (136 bytes): a node is read
    whole, at the size of one of 2K = 64 entries (2,616 bytes), which does not end within the file, so every
    HDF5 library refuses the index — it does not decode (§8.3): MD513, not MD509 for the chunks that lie past
    that address too (found by differential fuzzing, seed 14: mdiff-js read only the node's entries)."""
    from mdiff.hdf5walk.walk import _header_reader
    from tests.fuzz import hdf5bytes

    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), dtype="<u4", chunks=(1, 4))
    with h5py.File(path, "r") as f:
        ds = f["parameters/w/xor"]
        if _header_reader(f, os.path.getsize(path)).layout_version(h5py.h5o.get_info(ds.id).addr) != 3:
            raise CannotBuildHere(f"libhdf5 {h5py.version.hdf5_version} wrote no version 1 B-tree chunk index")
        first = min(ds.id.get_chunk_info(i).byte_offset for i in range(ds.id.get_num_chunks()))
    data = bytearray(open(path, "rb").read())
    assert data[8] in (2, 3) and data[9] == 8, "expected a version 2 or 3 superblock with 8-byte offsets"
    node = data.find(b"TREE\x01\x00\x02\x00")
    assert node >= 0 and data.count(b"TREE") == 1, "expected one B-tree node, a leaf of 2 chunks"
    end = node + 8 + 2 * 8 + 2 * (4 + 4 + 8 * 3 + 8) + (4 + 4 + 8 * 3)  # its header, 2 entries, the last key
    whole = node + 8 + 2 * 8 + 64 * 8 + 65 * (4 + 4 + 8 * 3)
    assert end < whole <= first and whole <= len(data), "expected the node's space, then the chunks, at the end"
    layout = hdf5bytes.scan(data)
    data[28:36] = end.to_bytes(8, "little")  # the superblock's end-of-file address
    hdf5bytes.fix_checksums(data, layout)
    open(path, "wb").write(bytes(data))


def build_MD507_declared_rank_over_limit_xor_a_group(path) -> None:
    """Limits(max_rank=1): `w`'s update declares rank 2, and its `xor` is a group: the declared shape over the limit
    is the group's last finding, and its members are not looked at (§12.1 rule 5) — not MD405 for `xor` (found by
    differential fuzzing, seed 12: the reference reported the group)."""
    with _edit(path) as f:
        del f["parameters/w/xor"]
        f["parameters/w"].create_group("xor")


def build_MD509_chunked_never_written(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", shape=(2, 4), dtype="<u4", chunks=(1, 4))


def build_MD509_chunked_half_written(path) -> None:
    with _edit(path) as f:
        ds = _replace_dataset(f["parameters/w"], "xor", shape=(2, 4), dtype="<u4", chunks=(1, 4))
        ds[0] = _dense_xor()[0]


def build_MD509_contiguous_unallocated(path) -> None:
    with _edit(path) as f:
        _replace_dataset(f["parameters/w"], "xor", shape=(2, 4), dtype="<u4")


def build_MD509_chunk_too_small(path) -> None:
    """An unfiltered chunk of 8 KiB that stores 16 bytes."""
    _write_chunk(path, BIG.tobytes()[:16], shuffle=True)


def build_MD509_deflate_ratio(path) -> None:
    """A deflated 8 KiB chunk that stores 4 bytes: more than deflate's ~1032:1 can expand."""
    _write_chunk(path, b"\x78\x01\x03\x00", compression="gzip", compression_opts=1)


def build_MD510_attribute_over_limit(path) -> None:
    """Limits(max_attribute_bytes=64): the `commit` attribute is longer."""
    _write(path)


def build_MD511_objects_over_limit(path) -> None:
    """Limits(max_objects=4): 3 root attributes, /parameters, and three parameter groups."""
    _write(path, {name: mdiff.delete(W) for name in ("a", "b", "c")})


def build_MD511_objects_over_limit_root_counted(path) -> None:
    """Limits(max_objects=6): the root group, its 3 attributes, /parameters, /parameters/w and its `update`:
    7 in one total (§8.3: the root counts); without the root it would be exactly at the limit."""
    _write(path, {"w": mdiff.delete(W)})


def build_MD511_attributes_over_limit(path) -> None:
    """Limits(max_objects=8): the root group alone has 12 attributes."""
    with _edit(path) as f:
        for i in range(9):
            write_string(f, f"note{i}", "x")


NESTING_DEPTH = 33  # one more link below the root than §8.3's default limit (32)


def build_MD511_nested_too_deep(path) -> None:
    """Unknown groups nested 33 links below the root (`/deep/deep/…`): deeper than §8.3 allows."""
    with _edit(path) as f:
        group = f
        for _ in range(NESTING_DEPTH):
            group = group.create_group("deep")


def build_MD512_total_bytes_over_limit(path) -> None:
    """Limits(max_total_bytes=48): two 32-byte datasets."""
    _write(path, {"w": mdiff.dense(W, W_NEW), "w2": mdiff.replace(W_NEW)})


# ---------------------------------------------------------------- files that must be valid
# Each ``build_valid_<what>(path)`` writes a file on an edge the rules allow: a validator must
# report nothing for it (no error, no warning).


def build_valid_escaped_names(path) -> None:
    """The names of SPEC.md §5.2's table, plus a control character and a leading `..`."""
    names = ["encoder.layer.0.weight", "model/decoder/w", ".hidden", "..", "100% sure", "poids_é", "a\tb"]
    _write(path, {name: mdiff.replace(np.array([i], dtype=np.int8)) for i, name in enumerate(names)})


def build_valid_empty_parameters(path) -> None:
    _write(path, {})


def build_valid_every_type(path) -> None:
    import ml_dtypes

    _write(path, {
        "w": mdiff.dense(W, W_NEW),
        "flags": mdiff.sparse(FLAGS, FLAGS_NEW),
        "counts": mdiff.delete(COUNTS),
        "big": _low_rank_update(np.ones((2048, 1), np.float32), np.ones((1, 1), np.float32), shape=(2048,)),
        "scalar": mdiff.replace(np.float64(-0.0)),
        "empty": mdiff.replace(np.zeros((0, 4), dtype=np.float16)),
        "bf16": mdiff.replace(np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)),
    })


def build_valid_sparse_without_entries(path) -> None:
    _write(path, {"w": mdiff.sparse(W, W)})


def build_valid_storage_variants(path) -> None:
    """A compact dataset, a chunked one with fletcher32 + shuffle + deflate, an ASCII attribute
    padded with NULs, and JSON that is valid but not canonical."""
    with _edit(path, {"w": mdiff.dense(W, W_NEW), "v": mdiff.replace(W_NEW)}) as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        _replace_dataset(f["parameters/w"], "xor", data=_dense_xor(), dcpl=dcpl)
        _replace_dataset(f["parameters/v"], "value", data=W_NEW, chunks=(1, 4), fletcher32=True, shuffle=True,
                         compression="gzip", compression_opts=9)
        del f.attrs["format"]
        f.attrs.create("format", np.array(b"mdiff\0\0\0", dtype="S8"))
        group = f["parameters/v"]
        write_string(group, "update", json.dumps(_get_json(group, "update"), indent=2, ensure_ascii=True))


def build_valid_json_integral_floats(path) -> None:
    """JSON Schema's `integer` is any number with a zero fraction: `1.0` and `4.0` are integers."""
    _write(path, {"w": mdiff.dense(W, W_NEW), "counts": mdiff.delete(COUNTS)})
    with h5py.File(path, "r+") as f:
        for name in ("w", "counts"):
            group = f[f"parameters/{name}"]
            text = bytes(group.attrs["update"]).rstrip(b"\0").decode("utf-8")
            text = text.replace('"version":1', '"version":1.0').replace('"shape":[2,4]', '"shape":[2.0,4e0]')
            text = text.replace('"shape":[4]', '"shape":[4.0]')
            write_string(group, "update", text)


def build_valid_commit_edges(path) -> None:
    """A leap day with nine fraction digits, a merge commit, an empty email and message, meta."""
    def change(c):
        c.update(date="2024-02-29T23:59:59.123456789Z", parents=["ab" * 32, "cd" * 32], message="",
                 author={"name": "Ünïcode", "email": ""}, meta={"lr": "1e-4", "": ""})
    _edit_commit(path, change)


def build_valid_empty_extensions(path) -> None:
    """A writer must not write `[]` (§3.4), but it is an array of (no) well-formed objects."""
    with _edit(path) as f:
        write_string(f, "extensions", "[]")


def build_valid_files_and_layout(path) -> None:
    """Format 1.1: files beside the weights (one in a sub-folder, one removed, an empty one) and a sharded layout."""
    layout = {"format": "safetensors", "index": {"path": "model.safetensors.index.json",
                                                 "metadata": {"total_parameters": 2068, "total_size": 8272}},
              "files": [{"path": "model-00001-of-00002.safetensors", "metadata": {"format": "pt"}, "tensors": ["big"]},
                        {"path": "model-00002-of-00002.safetensors", "metadata": {"format": "pt"},
                         "tensors": ["w", "counts", "flags"]}]}
    _write_files(path, {"config.json": _file(CONFIG), "tokenizer/vocab.txt": _file(VOCAB),
                        "README.md": mdiff.delete(np.zeros(12, np.uint8)), "added_tokens.json": _file(b"")},
                 _layout(layout))


# ---------------------------------------------------------------- issue 28: points an implementer could not decide


def _edit_text(obj, name: str, old: str, new: str, prefix: bytes = b"") -> None:
    """Replace ``old`` by ``new`` in the JSON text of the attribute ``name`` (both as they are written, escapes
    included), and put ``prefix``'s bytes before it."""
    text = bytes(obj.attrs[name]).rstrip(b"\0").decode("utf-8")
    assert old in text, (name, old, text)
    _set_raw(obj, name, prefix + text.replace(old, new).encode("utf-8"))


def build_MD201_commit_lone_surrogate(path) -> None:
    """The commit's `message` holds the escape `\\ud800`, a high surrogate no low one follows: valid RFC 8259, but
    no UTF-8 text can hold what it denotes (§4.1), so the file could not be written or shown as read — MD201."""
    with _edit(path) as f:
        _edit_text(f, "commit", '"message":"conformance case"', '"message":"conformance\\ud800case"')


def build_MD201_commit_meta_key_lone_low_surrogate(path) -> None:
    """A member name of the commit's `meta` is the escape `\\udc00`, a low surrogate with no high one before it (§4.1:
    a member's name is a string too) — MD201, not a schema error."""
    with _edit(path) as f:
        _edit_text(f, "commit", '"meta":{}', '"meta":{"\\udc00":"x"}')


def build_MD401_update_lone_surrogate(path) -> None:
    """The update's `dtype` is `float32` followed by the escape `\\udbff` (a high surrogate at the end of the string):
    not JSON an mdiff reader takes (§4.1), so MD401 — not MD404, the schema's finding on a dtype it does not know."""
    with _edit(path) as f:
        _edit_text(f["parameters/w"], "update", '"dtype":"float32"', '"dtype":"float32\\udbff"')


def build_MD105_extensions_lone_surrogate(path) -> None:
    """An optional extension named `x` and the escape `\\ud800` (§4.1: MD105 in `extensions`, not the MD107 warning an
    unknown optional extension gets)."""
    with _edit(path) as f:
        _set_raw(f, "extensions", b'[{"must_understand":false,"name":"x\\ud800"}]')


def build_MD420_definition_lone_surrogate(path) -> None:
    """The x-ia3 type's `definition` has a `description` starting with the escape `\\ud800` (§4.1: MD420 in a definition); the
    type is then not defined, and its parameter is MD402 (§7.8)."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        group = f["update_types/x-ia3"]
        _edit_text(group, "definition", '"description":"IA3', '"description":"\\ud800IA3')


def build_MD307_layout_lone_surrogate(path) -> None:
    """The layout's tensor name is `w` and the escape `\\udfff` (§4.1: MD307 in the layout): not a name UTF-8 holds."""
    _write_files(path, {}, _layout('{"files":[{"path":"model.safetensors","tensors":["w\\udfff"]}],"format":"safetensors"}'))


def build_MD201_commit_byte_order_mark(path) -> None:
    """The commit's JSON text starts with a UTF-8 byte-order mark (EF BB BF): not JSON whitespace, and an mdiff reader
    never strips it (§4.1; RFC 8259 §8.1 lets other parsers ignore it, as a JavaScript TextDecoder does by default)."""
    with _edit(path) as f:
        _edit_text(f, "commit", "{", "{", prefix=b"\xef\xbb\xbf")


def build_MD401_update_byte_order_mark(path) -> None:
    """The update's JSON text starts with a UTF-8 byte-order mark (§4.1: MD401)."""
    with _edit(path) as f:
        _edit_text(f["parameters/w"], "update", "{", "{", prefix=b"\xef\xbb\xbf")


def _nested(levels: int, innermost):
    value = innermost
    for _ in range(levels):
        value = [value]
    return value


def build_MD404_update_nested_512_levels_empty_innermost(path) -> None:
    """`shape` is 511 arrays around an empty array `[]`, inside the update's object: the empty array is a value inside
    512 arrays and objects, which every reader parses (§4.1) — then a schema error (MD404), not MD401."""
    _edit_update(path, "w", lambda m: m.update(shape=_nested(511, [])))


def build_MD404_update_nested_512_levels_empty_object_innermost(path) -> None:
    """The same with an empty object `{}` innermost, inside 512 arrays and objects: JSON, then MD404."""
    _edit_update(path, "w", lambda m: m.update(shape=_nested(511, {})))


def build_MD401_update_nested_513_levels_empty_innermost(path) -> None:
    """`shape` is 512 arrays around an empty array: the empty array lies inside 513 arrays and objects — MD401 (§4.1),
    though it holds no value of its own."""
    _edit_update(path, "w", lambda m: m.update(shape=_nested(512, [])))


def build_MD202_date_year_0000(path) -> None:
    """`date` 0000-01-01T00:00:00Z: RFC 3339 allows year 0000, §4.2 does not (years 0001–9999)."""
    _edit_commit(path, lambda c: c.update(date="0000-01-01T00:00:00Z"))


def build_valid_commit_date_year_0001(path) -> None:
    """`date` 0001-01-01T00:00:00.000000001Z, the first instant §4.2 allows (with 9 fraction digits)."""
    _edit_commit(path, lambda c: c.update(date="0001-01-01T00:00:00.000000001Z"))


def build_MD404_version_string(path) -> None:
    """The dense update's `version` is the string "1": no integer, so no version at all — MD404 (§7.1), not MD403."""
    _edit_update(path, "w", lambda m: m.update(version="1"))


def build_MD404_version_true(path) -> None:
    """`version` true (a boolean is not an integer, though some languages count it as 1): MD404 (§7.1)."""
    _edit_update(path, "w", lambda m: m.update(version=True))


def build_MD404_version_null(path) -> None:
    """`version` null: MD404 (§7.1)."""
    _edit_update(path, "w", lambda m: m.update(version=None))


def build_MD404_version_1_5(path) -> None:
    """`version` 1.5, a number with a fraction: not an integer (2.0 would be 2, §4.1), so MD404 (§7.1), not MD403."""
    _edit_update(path, "w", lambda m: m.update(version=1.5))


def build_MD500_function_soft_link_beside_a_function(path) -> None:
    """The x-ia3 type has its sound float32 function and a soft link `function.float64` (MD500): a refused
    `function.<dtype>` member leaves the type undefined whatever its other functions (§7.8), so the float32
    parameter that names it is MD402."""
    ia3.write_with_function(path, ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        f["update_types/x-ia3"]["function.float64"] = h5py.SoftLink("/update_types/x-ia3/function.float32")


def _set_padded(obj, name: str, data: bytes, pad: int) -> None:
    """A scalar fixed-length UTF-8 string attribute of exactly len(data) bytes and the padding type ``pad``."""
    if name in obj.attrs:
        del obj.attrs[name]
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(data))
    tid.set_strpad(pad)
    tid.set_cset(h5py.h5t.CSET_UTF8)
    attr = h5py.h5a.create(obj.id, name.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    attr.write(np.array(data, dtype=f"S{len(data)}"), mtype=tid)


def build_valid_attributes_fill_their_size(path) -> None:
    """Every attribute (`format`, `format_version`, `commit`, `update`) is a null-terminated string (H5T_STR_NULLTERM)
    whose text fills its size, without a NUL: its value is all of its bytes (§8.2), `mdiff` — not the `mdif` a
    conversion to a null-terminated string of 5 bytes gives, nor a `commit` cut before its last brace."""
    with _edit(path) as f:
        for obj in (f, f["parameters/w"]):
            for name in sorted(obj.attrs):
                _set_padded(obj, name, bytes(obj.attrs[name]).rstrip(b"\0"), h5py.h5t.STR_NULLTERM)


def build_MD101_format_space_padded(path) -> None:
    """`format` is the space-padded string (H5T_STR_SPACEPAD) `mdiff ` of 6 bytes: its value is its bytes, spaces
    kept (§8.2), so not "mdiff" — though h5py's converting read gives "mdiff"."""
    with _edit(path) as f:
        _set_padded(f, "format", b"mdiff ", h5py.h5t.STR_SPACEPAD)


# ---------------------------------------------------------------- registry

# Limits a reader must use for a case (Limits field -> value); all other cases use the defaults.
LIMITS: dict[str, dict[str, int]] = {
    "declared_rank_over_limit_xor_a_group": {"max_rank": 1},
    "dataset_unopenable_at_the_object_limit": {"max_objects": 7},
    "link_to_root_at_object_limit": {"max_objects": 8},
    "dense_link_count_wrong_over_the_object_limit": {"max_objects": 8},
    "soft_links_past_the_object_limit": {"max_objects": 8},
    "rank_over_limit": {"max_rank": 1},
    "elements_over_limit": {"max_elements": 4},
    "bytes_over_limit": {"max_dataset_bytes": 16},
    "empty_dataset_over_limit": {"max_elements": 4},
    "attribute_over_limit": {"max_attribute_bytes": 64},
    "objects_over_limit": {"max_objects": 4},
    "objects_over_limit_root_counted": {"max_objects": 6},
    "declared_rank_over_limit": {"max_rank": 1},
    "attributes_over_limit": {"max_objects": 8},
    "total_bytes_over_limit": {"max_total_bytes": 48},
}

# Every other code a case's file makes a validator report besides its own (SPEC.md §12.1), by case id;
# a case breaks one rule unless it is listed here.
ALSO_REPORTED: dict[str, tuple[str, ...]] = {
    # §12.1 rule 6: a refused member of /layout (rule 3) does not keep its value from being checked
    "layout_soft_link_beside_a_malformed_value": ("MD307",),
    "function_soft_link": ("MD402",), "function_soft_link_beside_a_function": ("MD402",),
    "definition_lone_surrogate": ("MD402",),
    "update_type_soft_link_member": ("MD303",),
    # §12.1 rule 3: an attribute whose name cannot be read is not known by it
    "attribute_name_length_wrong": ("MD400",),
    # §12.1 rule 4: MD304 is about a file group's name; its update is checked all the same
    "file_path_unsafe_update_not_json": ("MD401",), "file_collides_with_broken_update": ("MD304",),
    # §7.8: a parameter whose embedded update type was refused has a type this reader does not implement
    **{case_id: ("MD402",) for case_id in (
        "definition_without_version", "definition_input_a_large_integer", "function_not_onnx", "function_old_opset",
        "function_random_op",
        "function_external_data", "function_subgraph", "function_too_many_nodes", "function_of_another_dtype")},
    # §3.3, §5.4: a newer minor version's unknown attribute is still MD303 (its unknown JSON member is ignored)
    "version_1_99_unknown_attribute": ("MD303",),
    # the notes and groups that make the storage dense are unknown members and attributes (§5.4)
    "dense_attribute_hash_not_its_name": ("MD303",), "dense_attribute_name_not_utf8": ("MD303",),
    "dense_soft_link_hash_not_its_name": ("MD303",),
}


def expected_codes(code: str, case_id: str) -> set[str]:
    """Every code (errors and warnings) a validator reports for the case ``code``-``case_id``."""
    return {code, *ALSO_REPORTED.get(case_id, ())}


# Cases whose error only shows once the data is read.
DATA_LEVEL: frozenset[str] = frozenset({
    "sparse_unsorted", "sparse_duplicate", "sparse_out_of_range",
    "sparse_gaps_reach_numel", "sparse_gap_wraps", "sparse_gaps_sum_overflows",
    "replace_bool_2", "dense_bool_xor_2", "sparse_bool_xor_2",
    "replace_wrong_sha256", "replace_value_changed", "low_rank_A_sha256_wrong", "low_rank_B_changed",
    "corrupt_chunk", "sparse_xor_corrupt_chunk", "fletcher32_mismatch", "chunk_inflates_past_its_size",
    "unfiltered_chunk_too_long", "sparse_sub_corrupt_chunk",
    "layout_not_json", "layout_without_files", "layout_unsafe_path", "layout_tensor_twice", "layout_not_safetensors",
    "layout_path_inside_another", "layout_lone_surrogate",
})


def _registry() -> list[tuple[str, str, Callable]]:
    cases = []
    for name, fn in list(globals().items()):
        if name.startswith("build_MD") and callable(fn):
            code, case_id = name[len("build_"):len("build_") + 5], name[len("build_") + 6:]
            cases.append((code, case_id, fn))
    return cases


CASES: list[tuple[str, str, Callable]] = _registry()

VALID_CASES: list[tuple[str, Callable]] = [
    (name[len("build_"):], fn) for name, fn in list(globals().items()) if name.startswith("build_valid_")
]


def limits_for(case_id: str) -> mdiff.Limits:
    return mdiff.Limits(**LIMITS.get(case_id, {}))


def case_ids() -> list[str]:
    return [case_id for _, case_id, _ in CASES]


assert len(set(case_ids()) | {v for v, _ in VALID_CASES}) == len(CASES) + len(VALID_CASES), "case ids must be unique"
assert set(LIMITS) <= set(case_ids()) and DATA_LEVEL <= set(case_ids()) and set(ALSO_REPORTED) <= set(case_ids())
