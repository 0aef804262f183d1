"""Memory and time bombs: small files made to expand when read are refused with bounded memory and
time, on every path that reads them (SPEC.md §8.3, §8.5, §10; issue 14 items 8 and 11).

Each attack runs in a fresh child, which reports what the attack cost it: the growth of its peak
resident memory over what it held once its modules were imported, and the time. (The peak is Linux's
VmHWM, reset before the attack: ``ru_maxrss`` carries the parent's peak across fork and exec.)"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

import mdiff

BOUND_MIB = 200  # what a refused bomb may cost; libhdf5 took 2 GiB on the 1 MB chunk bomb below
BOUND_S = 5.0
DATE = "2026-01-01T00:00:00Z"

_CHILD = r"""
import json, sys, time
import numpy as np, h5py
import mdiff, mdiff.applying, mdiff.describe, mdiff.validation, mdiff.checkpoints, mdiff.engines
from mdiff.checkpoints import open_checkpoint
from mdiff.errors import MdiffError

def peak_kib():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmHWM:")[1].split()[0])

args = json.loads(sys.argv[1])
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak starts again from what is resident now
before = peak_kib()
start = time.perf_counter()
try:
    exec(args["code"])
except MdiffError as exc:
    outcome = exc.code
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start, "grown_mib": (peak_kib() - before) / 1024}))
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
    assert report["seconds"] < BOUND_S, report


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
    commit_id = hashlib.sha256(data).hexdigest()
    (tmp_path / "project/.mdiff/commits" / f"{commit_id}.mdiff").write_bytes(data)
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
