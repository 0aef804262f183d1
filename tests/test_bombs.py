"""Memory and time bombs: small files made to expand when read are refused with bounded memory and
time, on every path that reads them (SPEC.md §8.3, §8.5, §10; issue 14 items 8 and 11).

Each attack runs in a fresh child, which reports what the attack cost it: the growth of its peak
resident memory over what it held once its modules were imported, and its CPU time. (The peak is Linux's
VmHWM, reset before the attack: ``ru_maxrss`` carries the parent's peak across fork and exec.)

The time bound is CPU time, the child's own threads' and that of the reading process it forks and
reaps (``validate-isolated``), never wall time: a bomb costs CPU to inflate (libhdf5 took 2.4 s of it
for the 512 MiB chunk below), and a loaded machine stretches wall time, not CPU time."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import open_checkpoint
from tests.helpers import plant_commit

BOUND_MIB = 200  # what a refused bomb may cost; libhdf5 took 2 GiB on the 1 MB chunk bomb below
# Seconds of CPU an attack may cost. Measured (median of 3 runs, 2 cores shared with other work): the
# costliest refusal, checkout, 0.116 s; validate-isolated 0.028 s (its reading process included); every
# other attack 0.007-0.024 s. 0.6 s is 5.2x the costliest, and a quarter of the 2.4 s the unbounded
# inflate of the 512 MiB bomb took (onnx is imported before the clock starts: 0.4 s of loading).
BOUND_CPU_S = 0.6
DATE = "2026-01-01T00:00:00Z"

_CHILD = r"""
import json, resource, sys, time
import numpy as np, h5py
import mdiff, mdiff.applying, mdiff.describe, mdiff.validation, mdiff.checkpoints, mdiff.engines
from mdiff.checkpoints import open_checkpoint
from mdiff.errors import MdiffError
try:
    import onnx, onnx.shape_inference  # what an embedded type's check loads on first use: 0.4 s, not the attack's
except ImportError:
    pass

def cpu_s():
    # this process's threads, and the children it reaped (validate-isolated's reading process)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime

def peak_kib():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmHWM:")[1].split()[0])

args = json.loads(sys.argv[1])
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak starts again from what is resident now
before = peak_kib()
start, start_cpu = time.perf_counter(), cpu_s()
try:
    exec(args["code"])
except MdiffError as exc:
    outcome = exc.code
from mdiff import isolation
for worker in list(isolation._WORKERS.values()):
    worker.close()  # reaped now, so that the reading process's CPU time counts
print(json.dumps({"outcome": outcome, "cpu_s": cpu_s() - start_cpu, "wall_s": time.perf_counter() - start,
                  "grown_mib": (peak_kib() - before) / 1024}))
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures memory with Linux's /proc")


def attack(code: str, **names) -> dict:
    """Run ``code`` (which sets ``outcome``; an MdiffError sets it to its code) in a fresh child."""
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps({"code": code, **{k: str(v) for k, v in names.items()}})],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def assert_bounded(report: dict, outcome) -> None:
    assert report["outcome"] == outcome, report
    assert report["grown_mib"] < BOUND_MIB, report
    assert report["cpu_s"] < BOUND_CPU_S, report  # wall_s is there to read, never bounded


# ---------------------------------------------------------------- a chunk that inflates past its size (§8.3)


def deflate_bomb(mib: int) -> bytes:
    """A valid zlib stream of ``mib`` MiB of zero bytes, about a thousand times smaller: one flushed
    1 MiB deflate block, repeated (its back-references reach only zeros), then the end and adler32."""
    compressor = zlib.compressobj(9)
    first = compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_SYNC_FLUSH)
    header, block = first[:2], first[2:]
    adler, zeros = 1, bytes(1 << 20)
    for _ in range(mib):
        adler = zlib.adler32(zeros, adler)
    return header + block * mib + b"\x03\x00" + adler.to_bytes(4, "big")


BOMB_MIB = 512
VALUE = np.zeros(1 << 16, np.float32)  # 256 KiB declared: the stored 0.5 MB is more than any deflate of it needs


def write_chunk_bomb(path: Path) -> Path:
    """A root commit replacing ``v`` (256 KiB of zeros, its true sha256) whose one chunk is a valid
    deflate stream of 512 MiB of zeros: the chunk's first 256 KiB are the value, the rest is the bomb."""
    commit = mdiff.Commit("bomb", date=DATE)
    mdiff.write(path, {"v": mdiff.replace(VALUE)}, commit, "gzip")
    with h5py.File(path, "r+") as f:
        group = f["parameters/v"]
        del group["value"]
        dataset = group.create_dataset("value", shape=VALUE.shape, dtype="<f4", chunks=VALUE.shape,
                                       compression="gzip", shuffle=True, track_times=False)
        dataset.id.write_direct_chunk((0,), deflate_bomb(BOMB_MIB))
    return path


@pytest.fixture(scope="module")
def chunk_bomb(tmp_path_factory) -> Path:
    path = write_chunk_bomb(tmp_path_factory.mktemp("bomb") / "bomb.mdiff")
    assert path.stat().st_size < 600_000
    return path


def test_the_bomb_is_what_libhdf5_inflates_without_bound(chunk_bomb):
    """The file is a real bomb: libhdf5 reads its value (the first 256 KiB of 512 MiB inflated)."""
    with h5py.File(chunk_bomb, "r") as f:
        assert f["parameters/v/value"][:4].tolist() == [0.0] * 4


PATHS = {
    "validate": "outcome = [x.code for x in mdiff.validate(args['diff']) if x.is_error]",
    "validate-isolated": "from mdiff.isolation import Isolation\n"
                         "outcome = [x.code for x in mdiff.validate(args['diff'], isolation=Isolation(60, 4 << 30))]",
    "read": "with mdiff.open(args['diff']) as d:\n    d['v'].array('value')\noutcome = 'read'",
    "apply": "mdiff.apply_files(args['base'], args['diff'], args['out'])\noutcome = 'applied'",
    "dump-values": "mdiff.describe.describe(args['diff'], values=4)\noutcome = 'described'",
    "checkout": "repo = mdiff.Repository.find(args['repo'])\nrepo.checkout('main', args['out'])\noutcome = 'checked out'",
}
EXPECTED = {"validate": ["MD513"], "validate-isolated": ["MD513"], "checkout": "MD802"}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_chunk_bomb_is_md513_in_bounded_memory_and_time_on_every_path(tmp_path, chunk_bomb, path):
    """Before: 1.1 GB resident and 2.4 s for `validate`, the same for apply, dump --values and checkout
    of a repository that holds it (libhdf5's deflate filter doubles its buffer until the stream ends)."""
    from safetensors.numpy import save_file

    save_file({"v": np.ones_like(VALUE)}, str(tmp_path / "base.safetensors"))
    repo = mdiff.Repository.init(tmp_path / "project")
    data = chunk_bomb.read_bytes()
    commit_id = plant_commit(repo, data)
    (tmp_path / "project/.mdiff/refs/heads/main").write_text(commit_id + "\n")
    report = attack(PATHS[path], diff=chunk_bomb, base=tmp_path / "base.safetensors", out=tmp_path / "out.safetensors",
                    repo=repo.root)
    assert_bounded(report, EXPECTED.get(path, "MD513"))
    assert not (tmp_path / "out.safetensors").exists()


def test_an_embedded_function_whose_chunk_is_a_bomb_is_md513(tmp_path):
    """The ONNX bytes of an embedded type (§7.8) are read while the file is opened: bounded too."""
    from tests import ia3

    path = ia3.write_with_function(tmp_path / "f.mdiff", ia3.function("float32"))
    with h5py.File(path, "r+") as f:
        group = f["update_types/x-ia3"]
        del group["function.float32"]
        dataset = group.create_dataset("function.float32", shape=(1 << 16,), dtype="<u1", chunks=(1 << 16,),
                                       compression="gzip", track_times=False)
        dataset.id.write_direct_chunk((0,), deflate_bomb(BOMB_MIB))
    report = attack("outcome = [x.code for x in mdiff.validate(args['diff']) if x.is_error]", diff=path)
    assert_bounded(report, ["MD513", "MD402"])  # the type, unusable, is then unknown to its update


# ---------------------------------------------------------------- checkpoints (§10)


def overlapping_npz(path: Path, members: int = 32, mib: int = 64) -> Path:
    """An .npz whose ``members`` members are one deflate stream of a uint8 [mib MiB] array: each local
    header's extra field reaches over the headers after it to the one shared stream, which Python
    3.10–3.12's zipfile reads once per member."""
    import struct

    from numpy.lib import format as npy_format

    header = io.BytesIO()
    npy_format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (mib << 20,)})
    payload_size = len(header.getvalue()) + (mib << 20)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = deflater.compress(header.getvalue()) + deflater.compress(bytes(mib << 20)) + deflater.flush()
    crc = zlib.crc32(bytes(mib << 20), zlib.crc32(header.getvalue()))
    names = [f"t{i:02d}.npy".encode() for i in range(members)]
    offsets, at = [], 0
    for name in names:
        offsets.append(at)
        at += 30 + len(name)
    shared = at  # where the stream starts: every member's data
    local = b"".join(
        struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(stream), payload_size, len(name),
                    shared - offset - 30 - len(name)) + name
        for name, offset in zip(names, offsets))
    central = b"".join(
        struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(stream), payload_size, len(name),
                    0, 0, 0, 0, 0, offset) + name
        for name, offset in zip(names, offsets))
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, members, members, len(central), shared + len(stream), 0)
    path.write_bytes(local + stream + central + end)
    return path


def test_the_npz_bomb_is_one_numpy_reads_member_by_member(tmp_path):
    """The archive is what the attack says: numpy (zipfile) reads each member, all the same stream."""
    path = overlapping_npz(tmp_path / "bomb.npz", members=3, mib=1)
    with np.load(path) as loaded:
        assert sorted(loaded.files) == ["t00", "t01", "t02"]
        assert all(loaded[name].shape == (1 << 20,) for name in loaded.files)


def test_an_npz_whose_members_overlap_is_md701_before_anything_is_inflated(tmp_path):
    """Before: 32 members of 64 MiB from one 65 KB stream — 2 GiB resident to load (the issue's 1 MB
    file of 32 × 1 GiB: 283 s, 3.2 GB). Members may not share bytes: refused from the directory."""
    path = overlapping_npz(tmp_path / "bomb.npz")
    assert path.stat().st_size < 100_000
    report = attack("state = mdiff.checkpoints.load_checkpoint(args['npz'])\noutcome = len(state)", npz=path)
    assert_bounded(report, "MD701")
    with pytest.raises(mdiff.CheckpointError, match="overlap") as info:
        open_checkpoint(path)
    assert info.value.code == "MD701"


def test_safetensors_whose_tensors_share_bytes_are_md701_before_anything_is_read(tmp_path):
    """2048 tensors of 1 MiB over one stored MiB would be 2 GiB to load from a 1.1 MB file."""
    header = {f"t{i:04d}": {"dtype": "U8", "shape": [1 << 20], "data_offsets": [0, 1 << 20]} for i in range(2048)}
    text = json.dumps(header).encode()
    path = tmp_path / "shared.safetensors"
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(1 << 20))
    report = attack("state = mdiff.checkpoints.load_checkpoint(args['st'])\noutcome = len(state)", st=path)
    assert_bounded(report, "MD701")
