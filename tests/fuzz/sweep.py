"""Sweeps (issue 17): every byte of the structures libhdf5 trusts, a few values each.

Random mutation rarely lands in a fractal heap or a version 2 B-tree with its checksum made right, so the
differential run (differential.py) met their disagreements about once in 5,000 files. Each sweep takes files
and, for every byte of the structures it names, writes a file with that byte set to each of 00, ff, 01 and 80
(every checksum made right), then validates every file with the reference (in process) and mdiff-js and
reports each file on which their code sets differ, or on which one gives no report (a crash or a hang).

- ``dense-storage``: the root's attributes stored densely, one of them a huge object (tests/invalid_files.py,
  ``_dense_root_attributes``), and a group's links stored densely (``_dense_link_index``): each fractal heap
  header, v2 B-tree header, B-tree root leaf and the first bytes of the heap's root direct block.
- ``symbol-tables``: a parameter's group whose links are a symbol table (``_symbol_table_group``): its B-tree
  node, its symbol table node, its local heap's header and data segment (no checksums: version 1 structures).
- ``chunk-index``: a dataset of 2 chunks indexed by a version 1 B-tree: its one node, a leaf.
- ``dense-internal``: a group of 60 links stored densely: its name index's root internal node (depth 1) and its
  heap's root indirect block.
- ``dataset-headers``: the object header of a contiguous dataset and of a chunked one stored through filters:
  every message but the null ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests import invalid_files
from tests.fuzz import differential, hdf5bytes

VALUES = (0x00, 0xFF, 0x01, 0x80)
HEAP_HEADER = 22 + 12 * 8 + 3 * 8  # a fractal heap header of 8-byte offsets and lengths, no filters: its checksum
BTREE_HEADER = 34  # a v2 B-tree header of 8-byte offsets and lengths: its checksum
BLOCK_PREFIX = 40  # bytes of the root direct block swept: its header and its first object


def _dense_bases(workdir: Path) -> dict[str, Path]:
    attributes, links = workdir / "attributes.mdiff", workdir / "links.mdiff"
    invalid_files._dense_root_attributes(attributes, lambda *_: None)
    invalid_files._dense_link_index(links, lambda *_: None)
    return {"attributes": attributes, "links": links}


def _symbol_table_bases(workdir: Path) -> dict[str, Path]:
    path = workdir / "symbol-table.mdiff"
    invalid_files._symbol_table_group(path)
    return {"symbol-table": path}


def _symbol_table_spans(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(name, address, length) of a symbol table's B-tree node (its header, siblings and the keys and children in
    use), its first symbol table node (the entries in use) and its local heap's header and data segment."""
    assert data.count(b"TREE\0") == data.count(b"HEAP") == 1, "expected one symbol table"
    tree = data.find(b"TREE\0")  # type 0: a group's, not a chunk index's
    children = int.from_bytes(data[tree + 6:tree + 8], "little")
    yield "TREE", tree, 24 + 16 * children + 8
    leaf = int.from_bytes(data[tree + 32:tree + 40], "little")  # after the header, siblings and the first key
    yield "SNOD", leaf, 8 + 40 * int.from_bytes(data[leaf + 6:leaf + 8], "little")
    heap = data.find(b"HEAP")
    yield "HEAP", heap, 32
    size, segment = int.from_bytes(data[heap + 8:heap + 16], "little"), int.from_bytes(data[heap + 24:heap + 32], "little")
    yield "segment", segment - 4, size + 4  # a sweep starts after a signature; the segment has none


def _chunk_index_bases(workdir: Path) -> dict[str, Path]:
    path = workdir / "chunk-index.mdiff"
    with invalid_files._edit(path) as f:  # `xor` in 2 chunks, indexed by a version 1 B-tree of one leaf
        invalid_files._replace_dataset(f["parameters/w"], "xor", data=invalid_files._dense_xor(), dtype="<u4", chunks=(1, 4))
    if path.read_bytes().count(b"TREE\x01\x00") != 1:
        raise invalid_files.CannotBuildHere("libhdf5 wrote no version 1 B-tree chunk index")
    return {"chunk-index": path}


def _chunk_index_spans(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(name, address, length) of a chunk index's one B-tree node, a leaf: its header, siblings, and the keys and
    children in use (a key of a rank-2 dataset: chunk size, filter mask, three offsets)."""
    node = data.find(b"TREE\x01\x00")
    entries = int.from_bytes(data[node + 6:node + 8], "little")
    yield "TREE", node, 24 + entries * (32 + 8) + 32


def _dense_internal_bases(workdir: Path) -> dict[str, Path]:
    path = workdir / "dense-internal.mdiff"
    with invalid_files._edit(path) as f:  # 60 links: a name index of depth 1, a heap whose root is an indirect block
        for i in range(60):
            f["parameters/w"].create_group(f"g{i:02d}")
    return {"dense-internal": path}


def _dense_internal(data: bytes) -> tuple[tuple[int, int], tuple[int, int]]:
    """(address, checksum's offset) of the root internal node of the link name index of depth 1, and of the root
    indirect block of the links' fractal heap."""
    index = data.find(b"BTHD\0\x05")
    node_size, size, depth, root, records = (int.from_bytes(data[index + a:index + b], "little")
                                            for a, b in ((6, 10), (10, 12), (12, 14), (16, 24), (24, 26)))
    assert depth == 1 and data[root:root + 4] == b"BTIN", "expected a name index of depth 1"
    pointer = 8 + ((node_size - 10) // size).bit_length() // 8 + 1  # a leaf's address and record count
    heap = data.find(b"FRHP")
    field = lambda a, b: int.from_bytes(data[heap + a:heap + b], "little")  # noqa: E731
    width, first, largest, bits, block, rows = field(110, 112), field(112, 120), field(120, 128), field(128, 130), field(132, 140), field(140, 142)
    assert rows and data[block:block + 4] == b"FHIB", "expected a root indirect block"
    direct_rows = largest.bit_length() - first.bit_length() + 2
    children = (min(rows, direct_rows) + max(rows - direct_rows, 0)) * width
    return (root, 6 + records * size + (records + 1) * pointer), (block, 5 + 8 + (bits + 7) // 8 + 8 * children)


def _dense_internal_checksums(data: bytes) -> Callable[[bytearray], None]:
    layout = hdf5bytes.scan(data)
    blocks = _dense_internal(data)
    for start, end in blocks:
        assert hdf5bytes.lookup3(bytes(data[start:start + end])).to_bytes(4, "little") == data[start + end:start + end + 4]

    def fix(copy: bytearray) -> None:
        hdf5bytes.fix_checksums(copy, layout)
        for start, end in blocks:
            copy[start + end:start + end + 4] = hdf5bytes.lookup3(bytes(copy[start:start + end])).to_bytes(4, "little")

    return fix


def _dense_internal_spans(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(name, address, length) of the name index's root internal node and the heap's root indirect block."""
    (node, node_end), (block, block_end) = _dense_internal(data)
    yield "BTIN", node, node_end
    yield "FHIB", block, block_end


def _checksums(data: bytes) -> Callable[[bytearray], None]:
    """What makes every checksum of a changed copy of ``data`` right again: those the fuzzer's scan knows (object
    headers, B-tree headers), the fractal heap's header, each B-tree's root leaf (over the records its header
    gives in ``data``) and the heap's root direct block."""
    layout = hdf5bytes.scan(data)
    heap = data.find(b"FRHP")
    leaves = []
    at = data.find(b"BTHD")
    while at >= 0:
        size, root, records = (int.from_bytes(data[at + a:at + b], "little") for a, b in ((10, 12), (16, 24), (24, 26)))
        if data[root:root + 4] == b"BTLF":
            leaves.append((root, root + 6 + records * size))
        at = data.find(b"BTHD", at + 1)
    block, block_size = int.from_bytes(data[heap + 132:heap + 140], "little"), int.from_bytes(data[heap + 112:heap + 120], "little")
    block_checksum = block + 5 + 8 + (int.from_bytes(data[heap + 128:heap + 130], "little") + 7) // 8
    checksummed = data[block:block + 4] == b"FHDB" and data[heap + 9] & 2

    def fix(copy: bytearray) -> None:
        hdf5bytes.fix_checksums(copy, layout)
        for root, end in leaves:
            copy[end:end + 4] = hdf5bytes.lookup3(bytes(copy[root:end])).to_bytes(4, "little")
        if checksummed:
            copy[block_checksum:block_checksum + 4] = bytes(4)
            copy[block_checksum:block_checksum + 4] = hdf5bytes.lookup3(bytes(copy[block:block + block_size])).to_bytes(4, "little")
        copy[heap + HEAP_HEADER:heap + HEAP_HEADER + 4] = hdf5bytes.lookup3(bytes(copy[heap:heap + HEAP_HEADER])).to_bytes(4, "little")

    return fix


def _object_header_checksums(data: bytes) -> Callable[[bytearray], None]:
    layout = hdf5bytes.scan(data)
    return lambda copy: hdf5bytes.fix_checksums(copy, layout)


def _spans(data: bytes) -> Iterator[tuple[str, int, int]]:
    """(name, address, length) of each structure swept."""
    heap = data.find(b"FRHP")
    yield "FRHP", heap, HEAP_HEADER
    at = data.find(b"BTHD")
    while at >= 0:
        yield "BTHD", at, BTREE_HEADER
        size, root, records = (int.from_bytes(data[at + a:at + b], "little") for a, b in ((10, 12), (16, 24), (24, 26)))
        if data[root:root + 4] == b"BTLF":
            yield "BTLF", root, 6 + records * size
        at = data.find(b"BTHD", at + 1)
    yield "FHDB", int.from_bytes(data[heap + 132:heap + 140], "little"), BLOCK_PREFIX


def _dataset_header_bases(workdir: Path) -> dict[str, Path]:
    """A dense update's contiguous `xor` (uint32), and a replace's `value` in one chunk through shuffle and deflate."""
    import mdiff

    contiguous, chunked = workdir / "contiguous.mdiff", workdir / "chunked.mdiff"
    invalid_files._write(contiguous)
    invalid_files._write(chunked, {"big": mdiff.replace(invalid_files.BIG)})
    return {"contiguous": contiguous, "chunked": chunked}


def _dataset_header_spans(data: bytes, path: Path) -> Iterator[tuple[str, int, int]]:
    """(name, address, length) of the object header of the base's one dataset of data (`xor` or `value`): its
    prefix and every message up to the last that is not a null message (its checksum is made right)."""
    import h5py

    with h5py.File(path, "r") as f:
        name = "parameters/w/xor" if "w" in f["parameters"] else "parameters/big/value"
        address = h5py.h5o.get_info(f[name].id).addr
    block = next(b for b in hdf5bytes.scan(bytearray(data)).blocks if b.start == address)
    yield "OHDR", address, max(m.body + m.size for m in block.messages if m.type != 0) - address


Spans = Callable[[bytes, Path], Iterator[tuple[str, int, int]]]  # (name, address, length) of each structure of a base
SWEEPS: dict[str, tuple[Callable[[Path], dict[str, Path]], Spans]] = {
    "dense-storage": (_dense_bases, lambda data, _: _spans(data)),
    "symbol-tables": (_symbol_table_bases, lambda data, _: _symbol_table_spans(data)),
    "chunk-index": (_chunk_index_bases, lambda data, _: _chunk_index_spans(data)),
    "dense-internal": (_dense_internal_bases, lambda data, _: _dense_internal_spans(data)),
    "dataset-headers": (_dataset_header_bases, _dataset_header_spans),
}
CHECKSUMS: dict[str, Callable[[bytes], Callable[[bytearray], None]]] = {
    "dense-storage": _checksums, "dense-internal": _dense_internal_checksums}


def files(workdir: Path, every: int = 1, kind: str = "dense-storage") -> list[Path]:
    """The files of the sweep ``kind`` — every one, or one in ``every`` — written under ``workdir``."""
    bases, spans = SWEEPS[kind]
    out = []
    n = 0
    for base_name, base in bases(workdir).items():
        data = base.read_bytes()
        fix = CHECKSUMS.get(kind, _object_header_checksums)(data)
        for name, address, length in spans(data, base):
            for offset in range(4, length):  # after the signature
                for value in VALUES:
                    if data[address + offset] == value:
                        continue
                    n += 1
                    if (n - 1) % every:
                        continue
                    copy = bytearray(data)
                    copy[address + offset] = value
                    fix(copy)
                    path = workdir / f"{base_name}-{name}@{address}+{offset}={value:02x}.mdiff"
                    path.write_bytes(bytes(copy))
                    out.append(path)
    return out


def run(workdir: Path, progress: Callable[[str], None] = print, batch: int = 40, timeout: float = 10,
        every: int = 1, kind: str = "dense-storage") -> list[str]:
    """Sweep ``kind`` (one file in ``every``); one line per disagreement (also told to ``progress``), empty when
    the two agree on every file."""
    paths = [str(p) for p in files(workdir, every, kind)]
    progress(f"{len(paths)} files")
    disagreements = []
    for start in range(0, len(paths), batch):
        chunk = paths[start:start + batch]
        with ThreadPoolExecutor(2) as pool:  # the two command lines side by side, one core each
            later = pool.submit(differential.mdiff_js, chunk, None, timeout)
            ref, js = differential.reference(chunk, None, timeout), later.result()
        for path in chunk:
            a, b = ref[path], js[path]
            if a.codes != b.codes or a.valid is None or b.valid is None:
                line = (f"{os.path.basename(path)}: reference {sorted(a.codes)}{a.note}, "
                        f"mdiff-js {sorted(b.codes)}{b.note}")
                disagreements.append(line)
                progress(line)
        progress(f"{min(start + batch, len(paths))} files, {len(disagreements)} disagreements")
    return disagreements
