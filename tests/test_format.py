"""The format's building blocks: names, commit metadata, schemas, laziness, atomic writes, h5dump."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mdiff
from mdiff.engines import apply_update
from mdiff.errors import InvalidFileError
from mdiff.format.commit import SCHEMA as COMMIT_SCHEMA, Author, Commit, parse_attribute
from mdiff.format.names import decode_name, encode_name
from mdiff.format.writer import DiffWriter, chunk_shape

ROOT = Path(__file__).resolve().parent.parent
FIXED = Commit("t", date="2026-01-01T00:00:00Z")


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
def test_name_encoding_is_a_bijection(name):
    link = encode_name(name)
    assert decode_name(link) == name
    assert "/" not in link and not link.startswith(".") and all(ord(c) >= 0x20 and c != "\x7f" for c in link)


@pytest.mark.parametrize("name,link", [
    ("encoder.layer.0.weight", "encoder.layer.0.weight"), ("model/decoder/w", "model%2Fdecoder%2Fw"),
    (".hidden", "%2Ehidden"), ("..", "%2E."), ("100% sure", "100%25 sure"), ("poids_é", "poids_é"),
])
def test_name_encoding_examples_of_the_spec(name, link):
    assert encode_name(name) == link and decode_name(link) == name


@pytest.mark.parametrize("link", ["%2f", "%41", ".x", "a%", "%ZZ", "", "a/b", "%C3%A9"])
def test_non_canonical_link_names_are_refused(link):
    with pytest.raises(InvalidFileError) as info:
        decode_name(link)
    assert info.value.code == "MD302"


def test_author_parsing():
    assert Author.parse("Ada Lovelace <ada@example.org>") == Author("Ada Lovelace", "ada@example.org")
    assert Author.parse("  Grace ") == Author("Grace", "")


@pytest.mark.parametrize("change,ok", [
    ({}, True),
    ({"date": "2026-01-01T00:00:00.123456789Z"}, True),
    ({"date": "2026-01-01T00:00:00+00:00"}, False),
    ({"date": "2026-02-30T00:00:00Z"}, False),
    ({"parents": ["a" * 64, "b" * 64]}, True),
    ({"parents": ["a" * 64, "a" * 64]}, False),
    ({"parents": ["A" * 64]}, False),
    ({"author": {"name": "", "email": ""}}, False),
    ({"author": {"name": "x", "email": "not an email"}}, False),
    ({"meta": {"k": 1}}, False),
    ({"extra": 1}, False),
])
def test_commit_schema(change, ok):
    obj = {**FIXED.to_json(), **change}
    text = json.dumps(obj)
    if ok:
        assert parse_attribute(text).to_json() == obj
    else:
        with pytest.raises(InvalidFileError) as info:
            parse_attribute(text)
        assert info.value.code == "MD202"


def test_commit_json_is_strict():
    text = FIXED.to_attribute()
    for bad, code in [(text[:-1], "MD201"), (text.replace('"message":"t"', '"message":"t","message":"u"'), "MD201"),
                      ("[]", "MD201"), (text.replace('"t"', "NaN"), "MD201"), (None, "MD200")]:
        with pytest.raises(InvalidFileError) as info:
            parse_attribute(bad)
        assert info.value.code == code


def test_committed_schemas_are_generated_from_the_code():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_schemas.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((ROOT / "schemas" / "commit.schema.json").read_text()) == COMMIT_SCHEMA


def test_reading_one_parameter_does_not_touch_the_others(tmp_path):
    """Laziness: another parameter's data is garbage, yet this one reads and verifies."""
    a = np.arange(100_000, dtype=np.float32)
    path = tmp_path / "lazy.mdiff"
    mdiff.write(path, {"a": mdiff.replace(a), "b": mdiff.replace(a * 2)}, FIXED, compression="none")
    with h5py.File(path, "r") as f:
        offset = f["parameters/b/value"].id.get_offset()
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xff" * 4096)
    with mdiff.open(path) as diff:
        assert np.array_equal(apply_update(diff["a"], None, "a"), a)
        with pytest.raises(mdiff.ApplyError) as info:
            apply_update(diff["b"], None, "b")
        assert info.value.code == "MD602"
    assert [f.code for f in mdiff.validate(path)] == ["MD410"]


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    path = tmp_path / "x.mdiff"
    with pytest.raises(RuntimeError):
        with DiffWriter(path, FIXED) as w:
            w.add("a", mdiff.replace(np.zeros(3, np.int8)))
            raise RuntimeError("killed mid-write")
    assert os.listdir(tmp_path) == []


def test_writer_refuses_duplicates_and_invalid_updates(tmp_path):
    with DiffWriter(tmp_path / "x.mdiff", FIXED) as w:
        w.add("a", mdiff.replace(np.zeros(3, np.int8)))
        with pytest.raises(ValueError):
            w.add("a", mdiff.replace(np.zeros(3, np.int8)))
        bad = mdiff.Update({"type": "replace", "version": 1, "shape": [-1], "dtype": "int8", "sha256": "0" * 64}, {})
        with pytest.raises(Exception):
            w.add("b", bad)
    assert mdiff.validate(tmp_path / "x.mdiff") == []


@pytest.mark.parametrize("shape,itemsize,chunk", [
    ((4096, 4096), 4, (64, 4096)), ((10,), 4, (10,)), ((1, 10_000_000), 2, (1, 524288)), ((3, 5, 1 << 20), 4, (1, 1, 262144)),
])
def test_chunks_are_about_one_mebibyte(shape, itemsize, chunk):
    assert chunk_shape(shape, itemsize) == chunk


def test_files_use_only_allowed_filters_and_hdf5_1_10_bounds(tmp_path):
    path = tmp_path / "c.mdiff"
    mdiff.write(path, {"w": mdiff.replace(np.arange(10_000, dtype=np.float32))}, FIXED)
    with h5py.File(path, "r") as f:
        ds = f["parameters/w/value"]
        assert (ds.compression, ds.compression_opts, ds.shuffle, ds.chunks) == ("gzip", 1, True, (10_000,))
        superblock = f.id.get_create_plist().get_version()[0]
        assert superblock == 3  # what HDF5 1.10 writes and reads; 2.0's newer superblock would lock it out


def _valid_files(tmp_path) -> list[Path]:
    from tests.helpers import ALL_DTYPES, random_tensor

    rng = np.random.default_rng(0)
    updates = {}
    for dtype in ALL_DTYPES:
        a, b = random_tensor(dtype, (30, 7), 1), random_tensor(dtype, (30, 7), 2)
        updates[f"dense/{dtype}"] = mdiff.dense(a, b)
        updates[f"replace/{dtype}"] = mdiff.replace(b)
        updates[f"sparse/{dtype}"] = mdiff.sparse(a, np.where(np.arange(a.size).reshape(a.shape) % 10 == 0, b, a))
    updates["scalar"] = mdiff.replace(np.array(1.5, np.float32))
    updates["empty"] = mdiff.replace(np.zeros((0, 4), np.float32))
    updates["lr"] = mdiff.low_rank(rng.standard_normal((30, 2)), rng.standard_normal((2, 7)), (30, 7), mdiff.format.dtypes.DTYPES["bfloat16"])
    updates["gone"] = mdiff.delete(np.zeros(3, np.int8))
    paths = []
    for compression in ("gzip", "none"):
        path = tmp_path / f"{compression}.mdiff"
        mdiff.write(path, updates, FIXED, compression=compression)
        assert mdiff.validate(path) == []
        paths.append(path)
    return paths


def test_debian_h5dump_reads_every_file(tmp_path):
    h5dump = shutil.which("h5dump")
    if h5dump is None:
        pytest.skip("h5dump not installed (apt-get install hdf5-tools); CI installs it")
    for path in _valid_files(tmp_path):
        proc = subprocess.run([h5dump, str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert 'ATTRIBUTE "update"' in proc.stdout and "h5dump error" not in proc.stderr


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_validate_decodes_every_stored_byte(tmp_path, compression):
    """Four bytes overwritten inside a dense update's compressed data: validation reads every chunk
    (MD513); only --structure-only (check_data=False) skips it, and says so."""
    rng = np.random.default_rng(5)
    old = rng.standard_normal((64, 1024)).astype(np.float32)
    new = old.copy()
    new.reshape(-1)[::3] += np.float32(1e-3)
    path = tmp_path / "d.mdiff"
    mdiff.write(path, {"w": mdiff.dense(old, new)}, FIXED, compression=compression)
    assert mdiff.validate(path) == []
    with h5py.File(path, "r") as f:
        ds = f["parameters/w/xor"]
        offset = ds.id.get_chunk_info(0).byte_offset + 100 if ds.chunks else ds.id.get_offset() + 4096
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xde\xad\xbe\xef")
    findings = mdiff.validate(path)
    if compression == "gzip":
        assert [f.code for f in findings] == ["MD513"] and findings[0].path == "/parameters/w/xor"
    else:  # raw XOR bits: only applying it to its base can tell (its sha256, MD602)
        assert findings == []
    assert mdiff.validate(path, check_data=False) == []


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_a_fifo_a_device_or_a_folder_is_md100_at_once(tmp_path, kind):
    """Not a regular file: refused without blocking on it or reading it (a child with a timeout,
    so that a regression fails instead of hanging)."""
    path = tmp_path / "x.mdiff"
    {"fifo": os.mkfifo, "/dev/zero": lambda p: p.symlink_to("/dev/zero"), "folder": Path.mkdir}[kind](path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    for argv in (["validate", "--no-isolation"], ["validate"], ["dump", "--no-isolation"]):
        try:
            proc = subprocess.run([sys.executable, "-m", "mdiff", *argv, str(path)], capture_output=True, text=True,
                                  timeout=60, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mdiff {argv} on {kind} still ran after 60 s")
        assert proc.returncode == 2 and "MD100" in proc.stdout + proc.stderr, (argv, proc.stdout, proc.stderr)
        assert "not a regular file" in proc.stdout + proc.stderr or kind == "folder"


def test_an_object_header_s_blocks_together_fit_in_the_file(tmp_path):
    """§8.1: continuation messages that point into each other's blocks would make the header walk read
    the same bytes once per message (up to 100,000 blocks of up to the file's size); the blocks of one
    header do not overlap, so more bytes than the file holds is an error (MD513), not a long read."""
    from mdiff.hdf5walk.object_header import HeaderError, HeaderReader

    messages = 40
    step = 8 + 16  # a version-1 message: type, size, flags, reserved; a continuation's offset and length
    size = messages * step
    blob = b"".join((0x10).to_bytes(2, "little") + (16).to_bytes(2, "little") + bytes(4)
                    + (k * step).to_bytes(8, "little") + (size - k * step).to_bytes(8, "little")
                    for k in range(1, messages + 1))
    path = tmp_path / "headers.bin"
    path.write_bytes(blob)
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = HeaderReader(functools.partial(os.pread, fd), size, 0, 8, 8)
        with pytest.raises(HeaderError, match="too large"):
            list(reader._blocks([(0, size, False)], 8, version=1))
    finally:
        os.close(fd)



def test_a_symbol_table_of_several_levels_reads_whole(tmp_path):
    """§8.1: the walk of a symbol table's B-tree follows every node libhdf5 lists a group through — here a root of
    level 1 above nodes of level 0 above a hundred symbol table nodes — and refuses one whose name offset lies past the local heap, as
    libhdf5 does when it lists the group."""
    from mdiff.hdf5walk.object_header import HeaderError
    from mdiff.hdf5walk.walk import _header_reader

    path = tmp_path / "groups.h5"
    with h5py.File(path, "w", libver="earliest") as f:  # groups of the earliest format: symbol tables
        for i in range(600):
            f.create_group(f"many/g{i:03d}")
    with h5py.File(path, "r") as f:
        reader = _header_reader(f, os.path.getsize(path))
        address = h5py.h5o.get_info(f["many"].id).addr
        assert reader is not None and reader.checked_link_count(address) is None  # a symbol table: checked, no count
        assert reader._group_k == (16, 4)  # libhdf5's defaults, from the version 0 superblock
        root = next(int.from_bytes(body[:8], "little") for kind, body in reader.messages(address) if kind == 0x11)
    data = bytearray(path.read_bytes())
    assert data[root:root + 4] == b"TREE" and data[root + 5] == 1  # level 1: the walk goes down to every SNOD
    def last_child(node: int) -> int:  # after the header and siblings: keys and children alternate
        at = node + 24 + 16 * (int.from_bytes(data[node + 6:node + 8], "little") - 1) + 8
        return int.from_bytes(data[at:at + 8], "little")

    below = last_child(root)
    assert data[below:below + 4] == b"TREE" and data[below + 5] == 0
    leaf = last_child(below)
    assert data[leaf:leaf + 4] == b"SNOD"
    entries = int.from_bytes(data[leaf + 6:leaf + 8], "little")
    data[leaf + 8 + 40 * (entries - 1) + 4] ^= 0x01  # its last entry's name offset, + 2^32
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f:
        with pytest.raises(Exception, match="offset into local heap"):
            list(f["many"])
        with pytest.raises(HeaderError, match="past its heap"):
            _header_reader(f, os.path.getsize(path)).checked_link_count(address)
