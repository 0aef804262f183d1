"""Cross-checks tools/mdiff-js (an independent JavaScript implementation of SPEC.md, on h5wasm)
against the Python reference: files the reference writes must validate in mdiff-js, and applying
them with mdiff-js must give the reference's result bit for bit (low_rank: within SPEC.md §7.5's
bound). Broken files must be refused with the exact rule codes.

Needs `node` and `npm ci --prefix tools/mdiff-js`; skipped otherwise.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

import mdiff
from mdiff.engines import apply_update
from mdiff.format.dtypes import DTYPES

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "mdiff-js"
CLI = TOOL / "bin" / "mdiff-js.js"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed; mdiff-js tests need Node.js 20+"),
    pytest.mark.skipif(
        not (TOOL / "node_modules" / "h5wasm").is_dir(),
        reason="tools/mdiff-js/node_modules is missing; run `npm ci --prefix tools/mdiff-js`",
    ),
]

# ---------------------------------------------------------------------------------------------
# helpers

NP = {
    "bool": np.dtype(bool),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}
ST = {
    "bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
    "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
    "float32": "F32", "float64": "F64",
}
BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

# Special bit patterns: NaN with payload, signalling NaN, negative NaN, -0.0, +inf, -inf,
# the smallest subnormal, the largest negative subnormal, the largest finite number.
SPECIAL = {
    "float16": [0x7E01, 0x7C01, 0xFE00, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x7BFF],
    "bfloat16": [0x7FC1, 0x7F81, 0xFFC0, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x7F7F],
    "float32": [0x7FC00001, 0x7F800001, 0xFFC00000, 0x80000000, 0x7F800000, 0xFF800000, 0x1, 0x807FFFFF, 0x7F7FFFFF],
    "float64": [0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8000000000000, 0x8000000000000000,
                0x7FF0000000000000, 0xFFF0000000000000, 0x1, 0x800FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF],
}

# Parameter names that need care: '/', '%', leading '.', spaces, non-ASCII, controls.
ODD_NAMES = [
    "model/decoder/w", "100% sure", ".hidden", "..", "with space ", "poids_é", "日本語の重み",
    "emoji 😀", "tab\tand\x01ctl", "%2F not an escape", "a.b.c", "x\x7f",
]


def save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Writes a .safetensors file by hand (every dtype, bfloat16 included)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        a = a if a.flags.c_contiguous else a.copy()  # (np.ascontiguousarray makes 0-d arrays 1-d)
        dt = next(k for k, v in NP.items() if v == a.dtype)
        raw = a.tobytes()
        header[name] = {"dtype": ST[dt], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_safetensors(path: Path) -> dict[str, tuple[str, tuple, bytes]]:
    """{name: (dtype, shape, raw bytes)} without interpreting the data."""
    buf = path.read_bytes()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n])
    data = buf[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[b:en])
    return out


def as_array(entry) -> np.ndarray:
    dtype, shape, raw = entry
    dt = next(k for k, v in ST.items() if v == dtype)
    return np.frombuffer(raw, dtype=NP[dt]).reshape(shape)


def run_js(*args: str, check_json: bool = True):
    p = subprocess.run([NODE, str(CLI), *args], capture_output=True, text=True, timeout=120)
    assert "    at " not in p.stderr, f"stack trace from mdiff-js:\n{p.stderr}"
    out = json.loads(p.stdout) if (check_json and p.stdout.strip()) else None
    return p.returncode, out, p


def js_validate(path: Path):
    rc, out, p = run_js("validate", str(path), "--json")
    assert out is not None, p.stderr
    assert out["file"] == str(path)
    return rc, out


def ref_apply(base: Path, diff: Path, out: Path) -> None:
    p = subprocess.run(["mdiff", "apply", str(base), str(diff), "-o", str(out), "-q"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def rng_bits(rng, dtype: str, shape) -> np.ndarray:
    """An array of dtype with random bit patterns (floats: NaNs, infinities, subnormals and all)."""
    dt = NP[dtype]
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return np.asarray(rng.integers(0, 2, size=shape)).astype(bool)
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    a = raw.view(BITS[dt.itemsize]).copy()
    if dtype in SPECIAL and n:
        sp = np.array(SPECIAL[dtype], dtype=BITS[dt.itemsize])
        k = min(n, len(sp))
        a[:k] = sp[:k]
    return a.view(dt).reshape(shape)


def changed(rng, a: np.ndarray, fraction: float) -> np.ndarray:
    """a with the bits of about `fraction` of its elements changed (at least one when it has any)."""
    flat = a.reshape(-1)
    if flat.size == 0:
        return a.copy()
    if a.dtype == bool:
        mask = rng.random(flat.size) < fraction
        mask[0] = True
        return np.logical_xor(flat, mask).reshape(a.shape)
    u = flat.view(BITS[a.dtype.itemsize]).copy()
    mask = rng.random(flat.size) < fraction
    mask[-1] = True
    noise = rng_bits(rng, "uint64", (flat.size,)).astype(u.dtype)
    noise[noise == 0] = 1
    u[mask] ^= noise[mask]
    return u.view(a.dtype).reshape(a.shape)


SHAPES = {"s0": (), "z": (0,), "z2": (3, 0), "v": (7,), "m": (4, 5)}
ALL = list(NP)
LOW_RANK_DTYPES = ["float16", "bfloat16", "float32", "float64"]


# ---------------------------------------------------------------------------------------------
# the corpus: one base checkpoint, diffs written by the reference


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("mdiff_js")
    rng = np.random.default_rng(20240607)
    base: dict[str, np.ndarray] = {}
    updates: dict[str, mdiff.Update] = {}

    # exact updates: every type x every dtype x 0-d / zero-size / vector / matrix
    for dtype in ALL:
        for tag, shape in SHAPES.items():
            old = rng_bits(rng, dtype, shape)
            new = changed(rng, old, 0.5)
            base[f"dense/{dtype}/{tag}"] = old
            updates[f"dense/{dtype}/{tag}"] = mdiff.dense(old, new)
            old = rng_bits(rng, dtype, shape)
            new = changed(rng, old, 0.2)
            base[f"sparse/{dtype}/{tag}"] = old
            updates[f"sparse/{dtype}/{tag}"] = mdiff.sparse(old, new)
            base[f"delete/{dtype}/{tag}"] = rng_bits(rng, dtype, shape)
            updates[f"delete/{dtype}/{tag}"] = mdiff.delete(base[f"delete/{dtype}/{tag}"])
            updates[f"replace/{dtype}/{tag}"] = mdiff.replace(rng_bits(rng, dtype, shape))  # a new parameter
        # replace that changes the dtype and the shape of an existing parameter
        base[f"retype/{dtype}"] = rng_bits(rng, "float32", (2, 3))
        updates[f"retype/{dtype}"] = mdiff.replace(rng_bits(rng, dtype, (3, 2, 1)))
    # parameters the diff leaves alone
    for dtype in ALL:
        base[f"unchanged/{dtype}"] = rng_bits(rng, dtype, (5,))
    # odd names, with each exact type
    for i, name in enumerate(ODD_NAMES):
        old = rng_bits(rng, "float32", (3,))
        kind = ("dense", "sparse", "replace", "delete")[i % 4]
        if kind != "replace":
            base[name] = old
        updates[name] = {
            "dense": lambda: mdiff.dense(old, changed(rng, old, 0.7)),
            "sparse": lambda: mdiff.sparse(old, changed(rng, old, 0.3)),
            "replace": lambda: mdiff.replace(old),
            "delete": lambda: mdiff.delete(old),
        }[kind]()
    # large enough for chunked, compressed storage (several chunks, fixed-array index)
    big = rng.standard_normal((700, 600)).astype(np.float32)
    base["big/dense"] = big
    updates["big/dense"] = mdiff.dense(big, (big * 1.5).astype(np.float32))
    bigi = rng.integers(-(2**63), 2**63 - 1, size=(300_000,), dtype=np.int64)
    base["big/sparse"] = bigi
    new = bigi.copy()
    new[::7] += 3
    updates["big/sparse"] = mdiff.sparse(bigi, new)
    updates["big/replace"] = mdiff.replace(rng_bits(rng, "bfloat16", (1100, 600)))

    # low_rank: each floating dtype; rank 1, 2 and 3 parameters; zero-size; special base values
    lr_cases = {"m": ((8, 6), 2), "v": ((5,), 1), "t": ((3, 4, 5), 2), "z": ((0, 4), 1), "z2": ((4, 0), 1), "w": ((64, 48), 4)}
    lowrank = {}
    for dtype in LOW_RANK_DTYPES:
        cdt = np.float64 if dtype == "float64" else np.float32
        for tag, (shape, r) in lr_cases.items():
            m = shape[0]
            n = int(np.prod(shape[1:], dtype=np.int64))
            old = (rng.standard_normal(shape) * 4).astype(NP[dtype])
            flat = old.reshape(-1)
            specials = [np.inf, -np.inf, np.nan, -0.0, float(ml_dtypes.finfo(NP[dtype]).smallest_subnormal)]
            flat[: min(len(specials), flat.size)] = np.array(specials[: flat.size], dtype=NP[dtype])
            A = rng.standard_normal((m, r)).astype(cdt)
            B = rng.standard_normal((r, n)).astype(cdt)
            scale = -1.25 if tag == "t" else 0.5
            name = f"low_rank/{dtype}/{tag}"
            base[name] = old
            updates[name] = mdiff.low_rank(A, B, shape, DTYPES[dtype], scale)
            lowrank[name] = (old, A, B, scale)

    base_path = d / "base.safetensors"
    save_safetensors(base_path, base)
    diff_path = d / "all.mdiff"
    mdiff.write(diff_path, updates, mdiff.Commit("every update type x every dtype", date="2024-06-07T12:00:00Z"))

    # a diff computed by the reference's own mdiff.diff (it picks the update types)
    new_state = {k: v for k, v in base.items() if not k.startswith(("low_rank/", "delete/"))}
    for k in list(new_state)[::3]:
        new_state[k] = changed(rng, new_state[k], 0.05)
    new_state["added/param"] = rng_bits(rng, "int8", (4, 4))
    auto_path = d / "auto.mdiff"
    mdiff.write(auto_path, mdiff.diff(base, new_state), mdiff.Commit("auto", date="2024-06-07T12:00:01Z"))

    return {"dir": d, "base": base_path, "diff": diff_path, "auto": auto_path, "lowrank": lowrank,
            "updates": updates, "base_state": base}


# ---------------------------------------------------------------------------------------------
# valid files


@pytest.mark.parametrize("which", ["diff", "auto"])
def test_reference_files_validate(corpus, which):
    rc, out = js_validate(corpus[which])
    assert out["findings"] == [], out["findings"][:5]
    assert out["valid"] is True and rc == 0


def check_low_rank_bound(name, y: np.ndarray, case) -> None:
    """SPEC.md §7.5: |y - R| <= ulp_T(R) + (r + 2) u_C (|base| + |scale| sum_k |A_ik| |B_kj|)."""
    old, A, B, scale = case
    dt = old.dtype
    m, r = A.shape
    n = B.shape[1]
    assert y.dtype == dt and y.shape == old.shape, name
    if dt == np.float16:
        mant, emin = 10, -14
    elif dt == np.dtype(ml_dtypes.bfloat16):
        mant, emin = 7, -126
    elif dt == np.float32:
        mant, emin = 23, -126
    else:
        mant, emin = 52, -1022
    u_c = Fraction(1, 2**53) if dt == np.float64 else Fraction(1, 2**24)
    base = old.reshape(m, n).astype(np.float64)
    yy = y.reshape(m, n).astype(np.float64)
    s = Fraction(scale)
    for i in range(m):
        for j in range(n):
            b, v = float(base[i, j]), float(yy[i, j])
            if not math.isfinite(b):
                if math.isnan(b):
                    assert math.isnan(v), (name, i, j, b, v)
                else:
                    assert v == b, (name, i, j, b, v)
                continue
            prods = [Fraction(float(A[i, k])) * Fraction(float(B[k, j])) for k in range(r)]
            R = Fraction(b) + s * sum(prods, Fraction(0))
            assert math.isfinite(v), (name, i, j, float(R), v)
            aR = abs(R)
            e = emin
            if aR >= Fraction(2) ** emin:
                e = math.floor(math.log2(aR))
                while Fraction(2) ** e > aR:
                    e -= 1
                while Fraction(2) ** (e + 1) <= aR:
                    e += 1
            ulp = Fraction(2) ** (e - mant)
            bound = ulp + (r + 2) * u_c * (abs(Fraction(b)) + abs(s) * sum((abs(p) for p in prods), Fraction(0)))
            assert abs(Fraction(v) - R) <= bound, (name, i, j, float(R), v, float(bound))


@pytest.mark.parametrize("which", ["diff", "auto"])
def test_apply_matches_reference(corpus, which):
    d = corpus["dir"]
    ref_out = d / f"ref_{which}.safetensors"
    js_out = d / f"js_{which}.safetensors"
    ref_apply(corpus["base"], corpus[which], ref_out)
    rc, out, p = run_js("apply", str(corpus["base"]), str(corpus[which]), "-o", str(js_out), "--json")
    assert rc == 0, p.stdout + p.stderr
    assert out["output"] == str(js_out)
    ref = load_safetensors(ref_out)
    js = load_safetensors(js_out)
    assert sorted(js) == sorted(ref)
    assert out["parameters"] == len(ref)
    lowrank = corpus["lowrank"]
    n_exact = 0
    for name in ref:
        assert js[name][:2] == ref[name][:2], name  # dtype and shape
        if name in lowrank and which == "diff":
            check_low_rank_bound(name, as_array(js[name]), lowrank[name])
            check_low_rank_bound(name, as_array(ref[name]), lowrank[name])
        else:
            assert js[name][2] == ref[name][2], f"{name!r} differs from the reference's result"
            n_exact += 1
    assert n_exact > 100 if which == "diff" else n_exact > 50
    if which == "diff":
        # the exact results are the `new` states the diffs were made from
        ups = corpus["updates"]
        for name, u in ups.items():
            if u.meta["type"] == "delete":
                assert name not in js
            elif u.meta["type"] != "low_rank":
                import hashlib

                assert hashlib.sha256(js[name][2]).hexdigest() == u.meta["sha256"], name


# ---------------------------------------------------------------------------------------------
# broken files


def set_str_attr(obj, name: str, value) -> None:
    """A scalar fixed-length UTF-8 string attribute, as §8.2 requires."""
    b = value.encode() if isinstance(value, str) else value
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(max(len(b), 1))
    tid.set_cset(h5py.h5t.CSET_UTF8)
    tid.set_strpad(h5py.h5t.STR_NULLPAD)
    if name in obj.attrs:
        del obj.attrs[name]
    aid = h5py.h5a.create(obj.id, name.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    aid.write(np.array(b, dtype=f"S{max(len(b), 1)}"), mtype=tid)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("mdiff_js_broken")
    rng = np.random.default_rng(7)
    old = {
        "w": rng.standard_normal((4, 3)).astype(np.float32),
        "s": np.arange(10, dtype=np.int64),
        "flag": np.array([True, False, True]),
    }
    ups = {
        "w": mdiff.dense(old["w"], old["w"] * 2),
        "s": mdiff.sparse(old["s"], np.where(np.arange(10) % 3 == 0, 5, old["s"]).astype(np.int64)),
        "flag": mdiff.replace(np.array([False, False, True])),
        "lr": mdiff.low_rank(np.ones((4, 1), np.float32), np.ones((1, 3), np.float32), (4, 3), DTYPES["float32"], 1.0),
    }
    path = d / "small.mdiff"
    mdiff.write(path, ups, mdiff.Commit("small", date="2024-06-07T12:00:00Z"))
    base = d / "small_base.safetensors"
    save_safetensors(base, {**old, "lr": np.zeros((4, 3), np.float32)})
    return {"dir": d, "file": path, "old": old, "base": base}


def mutate(small, label, fn) -> Path:
    dst = small["dir"] / f"{label}.mdiff"
    shutil.copy(small["file"], dst)
    with h5py.File(dst, "r+") as f:
        fn(f)
    return dst


def _wrong_dtype(f):
    g = f["parameters/w"]
    x = g["xor"][()]
    del g["xor"]
    g.create_dataset("xor", data=x.view(np.int32))


def _unsorted(f):
    g = f["parameters/s"]
    idx, x = g["indices"][()], g["xor"][()]
    del g["indices"], g["xor"]
    g.create_dataset("indices", data=idx[::-1].copy())
    g.create_dataset("xor", data=x[::-1].copy())


def _bool_two(f):
    f["parameters/flag/value"][0] = 2


def _overflow(obj, name, old, new):
    text = bytes(obj.attrs[name]).rstrip(b"\0").decode()
    assert old in text, text
    set_str_attr(obj, name, text.replace(old, new, 1))


def _replace_corrupt(f):
    f["parameters/flag/value"][0] = 1


BROKEN = {
    "soft_link": (lambda f: f["parameters"].__setitem__("alias", h5py.SoftLink("/parameters/w")), {"MD500"}),
    "external_link": (lambda f: f["parameters"].__setitem__("ext", h5py.ExternalLink("/etc/passwd", "/x")), {"MD500"}),
    "wrong_storage_dtype": (_wrong_dtype, {"MD406"}),
    "format_version_2": (lambda f: set_str_attr(f, "format_version", "2.0"), {"MD103"}),
    "format_version_bad": (lambda f: set_str_attr(f, "format_version", "1.00"), {"MD102"}),
    "not_mdiff": (lambda f: set_str_attr(f, "format", "ndiff"), {"MD101"}),
    "must_understand": (lambda f: set_str_attr(f, "extensions", '[{"name":"x","must_understand":true}]'), {"MD106"}),
    "commit_dup_key": (lambda f: set_str_attr(f, "commit", '{"message":"a","message":"b"}'), {"MD201"}),
    "bad_link_name": (lambda f: f["parameters"].move("w", "w%2f"), {"MD302"}),
    "unknown_type": (lambda f: set_str_attr(f["parameters/w"], "update", '{"type":"fancy","version":1}'), {"MD402"}),
    "sparse_unsorted": (_unsorted, {"MD408"}),
    "bool_value_2": (_bool_two, {"MD409", "MD410"}),
    "replace_corrupt": (_replace_corrupt, {"MD410"}),
    "no_parameters": (lambda f: f.__delitem__("parameters"), {"MD300"}),
    # SPEC.md §4.1: a number that rounds to infinity in binary64 is an error of the JSON, like Infinity
    "update_number_overflows": (lambda f: _overflow(f["parameters/lr"], "update", '"scale":1', '"scale":1e400'), {"MD401"}),
    "commit_number_overflows": (lambda f: _overflow(f, "commit", '"message":"small"', '"message":-1e400'), {"MD201"}),
}


@pytest.mark.parametrize("label", sorted(BROKEN))
def test_broken_files_are_refused(small, label):
    fn, expected = BROKEN[label]
    path = mutate(small, label, fn)
    rc, out = js_validate(path)
    errors = {f["code"] for f in out["findings"] if f["severity"] == "error"}
    assert errors == expected, out["findings"]
    assert out["valid"] is False and rc == 1
    for f in out["findings"]:
        assert set(f) == {"code", "severity", "path", "section", "message"}


def test_not_hdf5(tmp_path):
    p = tmp_path / "junk.mdiff"
    p.write_bytes(b"this is not an HDF5 file\n" * 10)
    rc, out = js_validate(p)
    assert rc == 2
    assert [f["code"] for f in out["findings"]] == ["MD100"]
    assert out["valid"] is False


def test_small_file_applies(small, tmp_path):
    out = tmp_path / "out.safetensors"
    ref = tmp_path / "ref.safetensors"
    ref_apply(small["base"], small["file"], ref)
    rc, res, p = run_js("apply", str(small["base"]), str(small["file"]), "-o", str(out), "--json")
    assert rc == 0, p.stdout + p.stderr
    a, b = load_safetensors(out), load_safetensors(ref)
    assert {k: v for k, v in a.items() if k != "lr"} == {k: v for k, v in b.items() if k != "lr"}
    assert np.array_equal(as_array(a["lr"]), np.ones((4, 3), np.float32))


@pytest.mark.parametrize(
    "label,change,code",
    [
        ("missing", lambda s: s.pop("w"), "MD600"),
        ("wrong_dtype", lambda s: s.__setitem__("w", s["w"].astype(np.float64)), "MD601"),
        ("wrong_shape", lambda s: s.__setitem__("w", s["w"].reshape(3, 4)), "MD601"),
        ("other_base", lambda s: s.__setitem__("s", s["s"] + 1), "MD603"),  # the update names its base (base_sha256, §9.2)
    ],
)
def test_apply_refuses_wrong_base(small, tmp_path, label, change, code):
    state = dict(small["old"])
    state["lr"] = np.zeros((4, 3), np.float32)
    change(state)
    base = tmp_path / f"{label}.safetensors"
    save_safetensors(base, state)
    out = tmp_path / "out.safetensors"
    rc, res, p = run_js("apply", str(base), str(small["file"]), "-o", str(out), "--json")
    assert rc == 1, p.stdout + p.stderr
    assert res["error"]["code"] == code, res
    assert not out.exists()


def test_apply_refuses_invalid_diff(small, tmp_path):
    path = mutate(small, "apply_soft", BROKEN["soft_link"][0])
    out = tmp_path / "out.safetensors"
    rc, res, p = run_js("apply", str(small["base"]), str(path), "-o", str(out))
    assert rc == 1 and res is None
    assert "MD500" in p.stderr and "    at " not in p.stderr
    assert not out.exists()


def test_apply_many_reports_each_apply_as_apply_would(small, tmp_path):
    """`apply-many` (the conformance runner's --batch): one report per apply, in order, the outputs of
    those that succeed, none of those refused, and the largest exit status."""
    state = dict(small["old"])
    state["lr"] = np.zeros((4, 3), np.float32)
    state.pop("w")
    missing = tmp_path / "missing.safetensors"
    save_safetensors(missing, state)
    soft = mutate(small, "apply_many_soft", BROKEN["soft_link"][0])
    outs = [tmp_path / f"out{i}.safetensors" for i in range(4)]
    triples = [(small["base"], small["file"]), (missing, small["file"]), (small["base"], soft), (small["base"], small["file"])]
    args = [str(p) for (base, diff), out in zip(triples, outs) for p in (base, diff, out)]
    p = subprocess.run([NODE, str(CLI), "apply-many", "--json", *args], capture_output=True, text=True, timeout=120)
    reports = [json.loads(line) for line in p.stdout.splitlines()]
    assert p.returncode == 1, p.stderr
    assert reports == [{"output": str(outs[0]), "parameters": 4}, reports[1], reports[2], {"output": str(outs[3]), "parameters": 4}]
    assert (reports[1]["error"]["code"], reports[2]["error"]["code"]) == ("MD600", "MD500")
    assert [out.exists() for out in outs] == [True, False, False, True]
    single = tmp_path / "single.safetensors"
    run_js("apply", str(small["base"]), str(small["file"]), "-o", str(single), "--json")
    assert outs[0].read_bytes() == outs[3].read_bytes() == single.read_bytes()
    rc, _, p = run_js("apply-many", "--json", str(small["base"]), str(small["file"]), check_json=False)
    assert rc == 2 and "BASE DIFF OUT" in p.stderr


# ---------------------------------------------------------------------------------------------
# the reference's corpus of hostile files (tests/invalid_files.py), one per rule


JS_LIMIT_NAMES = {
    "max_rank": "maxRank", "max_elements": "maxElements", "max_dataset_bytes": "maxDatasetBytes",
    "max_attribute_bytes": "maxAttributeBytes", "max_objects": "maxObjects", "max_total_bytes": "maxTotalBytes",
    "max_function_bytes": "maxFunctionBytes", "max_function_nodes": "maxFunctionNodes",
    "max_function_constant_bytes": "maxFunctionConstantBytes",
}
WARNING_CODES = {"MD104", "MD107", "MD303"}


def _js_validate_many(paths: list[Path], limits: dict[str, int]) -> dict[str, dict]:
    """One mdiff-js process for many files (it prints one JSON object per file)."""
    args = []
    for k, v in limits.items():
        args += ["--limit", f"{JS_LIMIT_NAMES[k]}={v}"]
    p = subprocess.run([NODE, str(CLI), "validate", "--json", *args, *map(str, paths)],
                       capture_output=True, text=True, timeout=300)
    assert "    at " not in p.stderr, p.stderr
    dec, text, pos, out = json.JSONDecoder(), p.stdout, 0, {}
    while text[pos:].strip():
        while text[pos].isspace():
            pos += 1
        obj, pos = dec.raw_decode(text, pos)
        out[obj["file"]] = obj
    assert len(out) == len(paths)
    return out


def test_reference_rule_corpus(tmp_path):
    """Every case of the reference's rule corpus is refused by mdiff-js with exactly the codes the
    reference reports (warning cases: reported, and the file stays valid); every edge case it allows is clean.
    Embedded update types (§7.8, MD420-MD428) are not implemented by mdiff-js and are skipped."""
    """Every case of the reference's rule corpus is refused by mdiff-js with the case's code
    (warning cases: reported, and the file stays valid); every edge case it allows is clean.
    Embedded update types (§7.8, MD420-MD428) included."""
    inv = pytest.importorskip("tests.invalid_files", reason="tests/invalid_files.py is not available")
    cases = list(inv.CASES)
    assert len(cases) > 100
    groups: dict[tuple, list] = {}
    for code, cid, build in cases:
        path = tmp_path / f"{cid}.mdiff"
        build(path)
        groups.setdefault(tuple(sorted(inv.LIMITS.get(cid, {}).items())), []).append((code, cid, path))
    valid = []
    for cid, build in inv.VALID_CASES:
        path = tmp_path / f"valid_{cid}.mdiff"
        build(path)
        valid.append(path)
    failures = []
    for limits, members in groups.items():
        results = _js_validate_many([p for _, _, p in members], dict(limits))
        for code, cid, path in members:
            r = results[str(path)]
            codes = {f["code"] for f in r["findings"]}
            errors = {f["code"] for f in r["findings"] if f["severity"] == "error"}
            # SPEC.md §12.1: exactly the codes the reference reports (the case's, and ALSO_REPORTED's)
            ok = codes == inv.expected_codes(code, cid) and r["valid"] == (code in WARNING_CODES)
            ok = ok and (not errors if code in WARNING_CODES else code in errors)
            if not ok:
                failures.append((code, cid, sorted(codes)))
    for path, r in _js_validate_many(valid, {}).items():
        if r["findings"]:
            failures.append(("valid", path, r["findings"]))
    assert not failures, failures


# ---------------------------------------------------------------------------------------------
# repositories (SPEC.md §13): `mdiff-js checkout`; the conformance corpus's repository cases run in
# tests/test_conformance.py, these are the edges a corpus of files at rest does not reach


CORPUS_REPO = ROOT / "conformance" / "valid" / "repository-branch-merge"


def _corpus_repo(tmp_path) -> tuple[Path, dict]:
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS_REPO / "repo", repo)
    manifest = json.loads((ROOT / "conformance" / "manifest.json").read_text())
    case = next(c for c in manifest["cases"] if c["id"] == "repository-branch-merge")
    return repo, {c["label"]: c["id"] for c in case["commits"]}


def js_checkout(repo: Path, rev: str, out: Path):
    rc, report, p = run_js("checkout", rev, "-o", str(out), "-C", str(repo), "--json")
    assert report is not None, p.stderr
    return rc, report


def test_a_snapshot_does_not_stand_in_for_the_commits_before_it(tmp_path):
    """§13.5: a snapshot is checked against every commit back to the root, so without the root commit's
    file even main-1's descendants, which main-1's snapshot holds the way to, are MD801."""
    repo, ids = _corpus_repo(tmp_path)
    (repo / ".mdiff" / "commits" / f"{ids['root']}.mdiff").unlink()
    for rev in ("main", "feature", "main~4"):
        out = tmp_path / "out.safetensors"
        rc, report = js_checkout(repo, rev, out)
        assert rc == 1 and report["error"]["code"] == "MD801" and "not in commits/" in report["error"]["message"]
        assert not out.exists()


@pytest.mark.parametrize("lie", ["other values", "a parameter less", "a parameter more", "another dtype"])
def test_checkout_walks_past_a_snapshot_that_disagrees_with_its_commits(tmp_path, lie):
    """MD807 (§13.5): main-1's snapshot replaced by a well-formed one that lies; every checkout still
    gives the state the commits define."""
    repo, ids = _corpus_repo(tmp_path)
    truth = {k: as_array(v) for k, v in load_safetensors(CORPUS_REPO / "states" / "main-1.safetensors").items()}
    fake = dict(truth)
    if lie == "other values":
        fake["embed"] = truth["embed"] + np.float32(1)
    elif lie == "a parameter less":
        del fake["old"]
    elif lie == "a parameter more":
        fake["extra"] = np.ones(3, np.float32)
    else:
        fake["norm"] = truth["norm"].astype(np.float32)
    path = repo / ".mdiff" / "snapshots" / f"{ids['main-1']}.mdiff"
    mdiff.write(path, {k: mdiff.replace(v) for k, v in fake.items()},
                mdiff.Commit("snapshot", date="2026-01-02T00:00:01Z", meta={"snapshot_of": ids["main-1"]}))
    for rev, label in [("main~2^", "main-1"), ("feature", "feature-2"), ("main", "main-3")]:
        out = tmp_path / f"{label}.safetensors"
        rc, report = js_checkout(repo, rev, out)
        assert rc == 0 and report["commit"] == ids[label], report
        assert load_safetensors(out) == load_safetensors(CORPUS_REPO / "states" / f"{label}.safetensors")


def test_checkout_ignores_an_unusable_snapshot(tmp_path):
    """A snapshot is a shortcut (§13.5): one that is not a valid file is walked past."""
    repo, ids = _corpus_repo(tmp_path)
    (repo / ".mdiff" / "snapshots" / f"{ids['main-1']}.mdiff").write_bytes(b"not an HDF5 file")
    out = tmp_path / "feature.safetensors"
    rc, report = js_checkout(repo, "feature", out)
    assert rc == 0 and report["commit"] == ids["feature-2"]
    assert load_safetensors(out) == load_safetensors(CORPUS_REPO / "states" / "feature-2.safetensors")


def test_checkout_revisions_like_the_reference(tmp_path):
    """§13.3: a branch wins over a commit-id prefix of the same name; `~0`; HEAD on a branch without
    commits names nothing; every answer as the reference's `mdiff checkout`."""
    repo = mdiff.Repository.init(tmp_path / "r")
    a = np.arange(6, dtype=np.float32)
    root = repo.commit({"a": a}, "root", author="T <t@example.org>", date="2026-01-01T00:00:00Z")
    second = repo.commit({"a": a * 2}, "second", author="T <t@example.org>", date="2026-01-01T00:00:01Z")
    repo.set_branch(root[:4], second)  # a branch named like the root's 4-digit prefix
    for rev, want in [(root[:4], second), (root[:5], root), ("main~0", second), ("main~1", root)]:
        out = tmp_path / "out.safetensors"
        rc, report = js_checkout(repo.root, rev, out)
        assert rc == 0 and report["commit"] == want, (rev, report)
        ref = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "checkout", rev, "-o", str(tmp_path / "ref.safetensors"),
                              "-C", str(repo.root), "--json", "-q"], capture_output=True, text=True)
        assert json.loads(ref.stdout)["commit"] == want, (rev, ref.stdout, ref.stderr)
        assert load_safetensors(out) == load_safetensors(tmp_path / "ref.safetensors")
    repo.set_head(branch="unborn")
    rc, report = js_checkout(repo.root, "HEAD", tmp_path / "none.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD801"
    rc, report = js_checkout(tmp_path, "HEAD", tmp_path / "none.safetensors")  # no .mdiff/ there
    assert rc == 1 and report["error"]["code"] == "MD801"



def test_checkout_of_a_remote_tracking_ref_like_the_reference(tmp_path):
    """§13.8: `<remote>/<branch>` names refs/remotes/<remote>/<branch>, looked up after the branches
    (a local branch of that name wins) and before prefixes; a malformed one is MD801."""
    repo = mdiff.Repository.init(tmp_path / "r")
    a = np.arange(6, dtype=np.float32)
    root = repo.commit({"a": a}, "root", author="T <t@example.org>", date="2026-01-01T00:00:00Z")
    second = repo.commit({"a": a * 2}, "second", author="T <t@example.org>", date="2026-01-01T00:00:01Z")
    with repo.lock():
        repo.write_ref("refs/remotes/origin/team/main", root)
        repo.write_ref("refs/remotes/up/main", second)
        repo.create_branch("up/main", root)  # a branch wins over a remote-tracking ref of the same name
    for rev, want in [("origin/team/main", root), ("up/main", root), ("origin/team/main~0", root)]:
        out = tmp_path / "out.safetensors"
        rc, report = js_checkout(repo.root, rev, out)
        assert rc == 0 and report["commit"] == want, (rev, report)
        ref = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "checkout", rev, "-o", str(tmp_path / "ref.safetensors"),
                              "-C", str(repo.root), "--json", "-q"], capture_output=True, text=True)
        assert json.loads(ref.stdout)["commit"] == want, (rev, ref.stdout, ref.stderr)
    (repo.dir / "refs" / "remotes" / "origin" / "team" / "main").write_text(root + "\n\n")
    rc, report = js_checkout(repo.root, "origin/team/main", tmp_path / "x.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD801"
    ref = subprocess.run([sys.executable, "-m", "mdiff.cli.main", "checkout", "origin/team/main", "-o",
                          str(tmp_path / "x.safetensors"), "-C", str(repo.root), "--json", "-q"], capture_output=True, text=True)
    assert json.loads(ref.stdout)["error"]["code"] == "MD801"

# §13.4 / §13.5 (revision 2): values a low_rank update made are inexact; an exact update that reads
# its base (dense, sparse) on one is refused (MD805); a snapshot's `meta.inexact` seeds the set.

AUTHOR = "T <t@example.org>"


def _lora_chain(tmp_path, last: str = "dense"):
    """root: `w` replaced (and `v`); lora: `w` low_rank; next: `w` `last` against the reference's own
    low_rank bits (the bits other appliers need not compute). Returns (repo, {label: id})."""
    repo = mdiff.Repository.init(tmp_path / "r")
    rng = np.random.default_rng(805)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    v = np.arange(4, dtype=np.int32)
    lora = mdiff.low_rank(rng.standard_normal((6, 2)).astype(np.float32), rng.standard_normal((2, 5)).astype(np.float32),
                          (6, 5), DTYPES["float32"], 0.5)
    mine = apply_update(lora, w.copy(), "w")
    changed = mine.copy()
    changed[0, 0] += np.float32(1)
    update = mdiff.dense(mine, changed) if last == "dense" else mdiff.sparse(mine, changed)
    c = lambda message, parents, i: mdiff.Commit(message, author=mdiff.Author("T", "t@example.org"),
                                                 date=f"2026-01-01T00:00:0{i}Z", parents=tuple(parents))
    ids = {"root": repo.store(lambda wr: [wr.add("v", mdiff.replace(v)), wr.add("w", mdiff.replace(w))], c("root", [], 0))}
    ids["lora"] = repo.store(lambda wr: wr.add("w", lora), c("lora", [ids["root"]], 1))
    ids["next"] = repo.store(lambda wr: wr.add("w", update), c("next", [ids["lora"]], 2))
    repo.set_branch("main", ids["next"])
    return repo, ids


def _snapshot_meta(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        raw = f.attrs["commit"]
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)["meta"]


@pytest.mark.parametrize("last", ["dense", "sparse"])
def test_checkout_refuses_exact_update_after_low_rank(tmp_path, last):
    """MD805: the XOR was made against one applier's low_rank bits; it is refused whatever bits
    mdiff-js computed, with no output, as the reference does. The low_rank commit itself checks out."""
    repo, ids = _lora_chain(tmp_path, last)
    out = tmp_path / "main.safetensors"
    rc, report = js_checkout(repo.root, "main", out)
    assert rc == 1 and report["error"]["code"] == "MD805" and report["error"]["section"] == "13.4", report
    assert not out.exists()
    with pytest.raises(mdiff.RepositoryError) as exc:
        repo.state(ids["next"])
    assert exc.value.code == "MD805"
    rc, report = js_checkout(repo.root, "main~1", tmp_path / "lora.safetensors")
    assert rc == 0 and report["commit"] == ids["lora"], report


def test_checkout_refuses_md805_from_a_snapshot(tmp_path):
    """A snapshot of the low_rank commit lists `w` as inexact (§13.5); an inexact value is never taken
    from a snapshot, so the dense commit after it is still MD805, and mdiff-js computes the low_rank
    value itself (within §7.5's tolerance of the reference's, not necessarily its bits)."""
    repo, ids = _lora_chain(tmp_path)
    repo.snapshot(ids["lora"])
    snap = repo.snapshot_path(ids["lora"])
    assert _snapshot_meta(snap)["inexact"] == '["w"]'
    rc, report = js_checkout(repo.root, "main", tmp_path / "main.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD805", report
    assert not (tmp_path / "main.safetensors").exists()
    rc, report = js_checkout(repo.root, "main~1", tmp_path / "lora.safetensors")
    assert rc == 0 and report["commit"] == ids["lora"], report
    js, ref = load_safetensors(tmp_path / "lora.safetensors"), repo.state(ids["lora"])
    assert set(js) == {"v", "w"} and as_array(js["v"]).tobytes() == ref["v"].tobytes()
    np.testing.assert_allclose(as_array(js["w"]), ref["w"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("inexact", ['"w"', '["w", 1]', '{"w": 1}', '["w"', '["w", "u"]', "NaN"])
def test_checkout_walks_past_a_snapshot_with_bad_inexact(tmp_path, inexact):
    """`meta.inexact` not a JSON array of strings, or naming a parameter the snapshot does not hold:
    the snapshot is unusable and the walk goes on to the root (still MD805). Taken as "no inexact
    value", the dense update would apply to the snapshot's bits and the checkout succeed."""
    repo, ids = _lora_chain(tmp_path)
    state = repo.state(ids["lora"])
    meta = mdiff.Commit("snapshot", date="2026-01-01T00:00:01Z", meta={"snapshot_of": ids["lora"], "inexact": inexact})
    sid = repo.store(lambda wr: [wr.add(k, mdiff.replace(state[k])) for k in sorted(state)], meta, directory="snapshots")
    repo.snapshot_path(sid).rename(repo.snapshot_path(ids["lora"]))
    rc, report = js_checkout(repo.root, "main", tmp_path / "main.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD805", report
    # the same snapshot without the commits before it: nothing else leads to `lora`'s state
    repo.commit_path(ids["root"]).unlink()
    rc, report = js_checkout(repo.root, "main", tmp_path / "main.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD801", report


def test_checkout_exact_again_after_replace(tmp_path):
    """The reference's `commit` after a low_rank commit stores `w` with `replace` (§13.4): mdiff-js
    checks it out bit for bit; `replace` makes `w` exact, so a dense commit after it applies too."""
    repo = mdiff.Repository.init(tmp_path / "r")
    rng = np.random.default_rng(13)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    repo.commit({"w": w}, "root", author=AUTHOR, date="2026-01-01T00:00:00Z")
    lora = mdiff.low_rank(rng.standard_normal((6, 2)).astype(np.float32), rng.standard_normal((2, 5)).astype(np.float32),
                          (6, 5), DTYPES["float32"], 1.0)
    repo.commit({"w": w}, "lora", author=AUTHOR, date="2026-01-01T00:00:01Z", explicit={"w": lora})
    after = repo.state(repo.head()[1])["w"].copy()
    after[1, 2] += np.float32(2)
    tip = repo.commit({"w": after}, "after", author=AUTHOR, date="2026-01-01T00:00:02Z")
    with mdiff.open(repo.commit_path(tip)) as diff:
        assert diff["w"].type == "replace"
    again = after.copy()
    again[0, 0] -= np.float32(3)
    last = repo.commit({"w": again}, "again", author=AUTHOR, date="2026-01-01T00:00:03Z")
    with mdiff.open(repo.commit_path(last)) as diff:
        assert diff["w"].type != "replace"  # exact again: an ordinary diff
    for rev, want in [("main~1", after), ("main", again)]:
        out = tmp_path / "out.safetensors"
        rc, report = js_checkout(repo.root, rev, out)
        assert rc == 0, report
        assert as_array(load_safetensors(out)["w"]).tobytes() == want.tobytes()


# §13.1 (revision 3): a repository from a stranger. mdiff-js follows no link below .mdiff/, opens
# without blocking, uses only regular files, reads a bounded amount of a ref and shows none of it;
# it parses a commit from the bytes it hashed (§13.2), and a full commit id names that commit (§13.3).


def _small_repo(tmp_path):
    repo = mdiff.Repository.init(tmp_path / "r")
    ids = [repo.commit({"w": np.full(4, i, np.float32)}, f"step {i}", author=AUTHOR, date=f"2026-01-01T00:00:0{i}Z")
           for i in range(3)]
    return repo, ids


@pytest.mark.parametrize("which", ["HEAD", "ref", "format", "commit", "parent"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "secret"])
def test_checkout_refuses_what_is_not_a_regular_file_at_once_and_shows_nothing(tmp_path, which, kind):
    repo, ids = _small_repo(tmp_path)
    path = {"HEAD": repo.dir / "HEAD", "ref": repo.dir / "refs" / "heads" / "main", "format": repo.dir / "format",
            "commit": repo.commit_path(ids[2]), "parent": repo.commit_path(ids[1])}[which]
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-in-a-file-of-the-victim\n")
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "/dev/zero" else secret)
    p = subprocess.run([NODE, str(CLI), "checkout", "HEAD", "-o", str(tmp_path / "o.safetensors"), "-C", str(repo.root),
                        "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(p.stdout)
    assert p.returncode == 1 and report["error"]["code"] == "MD801", report
    assert "TOPSECRET" not in p.stdout + p.stderr and not (tmp_path / "o.safetensors").exists()


def test_checkout_a_full_id_whatever_a_ref_file_is_called_and_no_invalid_branch_name(tmp_path):
    repo, ids = _small_repo(tmp_path)
    heads = repo.dir / "refs" / "heads"
    (heads / ids[0]).write_text(ids[2] + "\n")
    for name in ("x..y", "v1.lock", "a b"):
        (heads / name).write_text(ids[1] + "\n")
    rc, report = js_checkout(repo.root, ids[0], tmp_path / "o.safetensors")
    assert rc == 0 and report["commit"] == ids[0]
    for name in ("x..y", "v1.lock", "a b"):
        rc, report = js_checkout(repo.root, name, tmp_path / "n.safetensors")
        assert rc == 1 and report["error"]["code"] == "MD801"


def test_checkout_refuses_a_link_on_the_way_and_a_ref_longer_than_needed(tmp_path):
    repo, ids = _small_repo(tmp_path)
    outside = tmp_path / "outside"
    shutil.move(repo.dir / "commits", outside)
    (repo.dir / "commits").symlink_to(outside, target_is_directory=True)
    rc, report = js_checkout(repo.root, "HEAD", tmp_path / "o.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD801" and "symbolic link" in report["error"]["message"]
    (repo.dir / "commits").unlink()
    shutil.move(outside, repo.dir / "commits")
    (repo.dir / "refs" / "heads" / "main").write_text(ids[2] + "\n" + " " * 100_000)
    rc, report = js_checkout(repo.root, "HEAD", tmp_path / "o.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD801" and "longer than" in report["error"]["message"]


@pytest.mark.parametrize("kind", ["fifo", "secret", "folder-link"])
def test_checkout_resolves_tags_and_reads_them_as_safely_as_branches(tmp_path, kind):
    repo, ids = _small_repo(tmp_path)
    repo.tag("v1", ids[0])
    rc, report = js_checkout(repo.root, "v1", tmp_path / "o.safetensors")
    assert rc == 0 and report["commit"] == ids[0]
    tags = repo.dir / "refs" / "tags"
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-in-a-file-of-the-victim\n")
    if kind == "fifo":
        os.mkfifo(tags / "bad")
        rev = "bad"
    elif kind == "secret":
        (tags / "bad").symlink_to(secret)
        rev = "bad"
    else:  # a folder on the way that is a link
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "x").write_text(ids[1] + "\n")
        (tags / "sub").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
        rev = "sub/x"
    p = subprocess.run([NODE, str(CLI), "checkout", rev, "-o", str(tmp_path / "n.safetensors"), "-C", str(repo.root),
                        "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(p.stdout)
    assert p.returncode == 1 and report["error"]["code"] == "MD801", report
    assert "TOPSECRET" not in p.stdout + p.stderr and not (tmp_path / "n.safetensors").exists()


def test_checkout_of_a_name_both_a_branch_and_a_tag_is_the_branch_with_a_warning(tmp_path):
    repo, ids = _small_repo(tmp_path)
    (repo.dir / "refs" / "tags" / "main").write_text(ids[0] + "\n")  # which no writer makes (§13.3)
    rc, report, p = run_js("checkout", "main", "-o", str(tmp_path / "o.safetensors"), "-C", str(repo.root), "--json")
    assert rc == 0 and report["commit"] == ids[2]
    assert 'mdiff-js: warning: "main" is a branch and a tag: the branch is meant (§13.3)' in p.stderr
# ---------------------------------------------------------------------------------------------
# SPEC.md Appendix A: mdiff-js's canonical JSON writes the reference's bytes


def test_canonical_json_numbers_and_names_match_the_reference():
    """Numbers that need an exponent (1e-07, not ECMAScript's 1e-7; 1e+16, not 10000000000000000),
    integral binary64 numbers (2.0), the edges of binary64, and 2000 random finite doubles; member names
    sorted by code point (U+1F600 after U+FFFF, unlike UTF-16 order); escapes of control characters."""
    from mdiff.format import canonical_json

    rng = np.random.default_rng(17)
    fixed = [1e-7, 1e16, 2.0, 0.0001, 0.00001, 1e15, 1234567890123456.0, 1.5e300, 5e-324, -0.0, 0.1, 123.456,
             1.7976931348623157e308, 2.2250738585072014e-308, 12345678901234567890.0, -1e-100, 1e21, 1e22]
    randoms = [float(x) for x in rng.integers(0, 2**64, 4000, dtype=np.uint64).view(np.float64) if math.isfinite(x)][:2000]
    values = fixed + randoms
    bits = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in values]
    names = {"\uffff": 1, "a\U0001F600": "x\x01\x1f\x7f\"\\\n", "a": [1, -2], "\u00e9": None, "": True}
    script = (
        f"import {{canonicalJSON, Binary64}} from {json.dumps((TOOL / 'src' / 'json.js').as_uri())};\n"
        f"const bits = {json.dumps([str(b) for b in bits])};\n"
        "const dv = new DataView(new ArrayBuffer(8));\n"
        "const values = bits.map((b) => { dv.setBigUint64(0, BigInt(b), true); return new Binary64(dv.getFloat64(0, true)); });\n"
        f"process.stdout.write(canonicalJSON(values) + '\\n' + canonicalJSON({json.dumps(names)}));\n"
    )
    p = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    numbers, objects = p.stdout.split("\n")
    assert numbers == canonical_json.dumps(values)
    assert objects == canonical_json.dumps(names)
    assert numbers.startswith('[1e-07,1e+16,2.0,0.0001,1e-05,1000000000000000.0,1234567890123456.0,1.5e+300,5e-324,-0.0,')
# ---------------------------------------------------------------------------------------------
# §7.8 check 1: ONNX protobuf decoded by mdiff-js's own reader (src/protobuf.js) as protobuf does


def _varint(n: int) -> bytes:
    n &= 2**64 - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    tag = _varint(number << 3 | wire)
    if wire == 0:
        return tag + _varint(int(payload))
    return tag + (_varint(len(payload)) + payload if wire == 2 else payload)  # type: ignore[arg-type,operator]


def _protobuf_variants() -> dict[str, tuple[bytes, str | None]]:
    """x-ia3's float32 function with protobuf-level edits, and the code SPEC.md §7.8 gives each."""
    import onnx
    from onnx import TensorProto, helper

    from tests import ia3

    good = ia3.function("float32")
    model = onnx.load_from_string(good)
    graph = model.graph

    def with_graph(graph_bytes: bytes) -> bytes:  # the model's other fields, then this graph
        other = onnx.ModelProto()
        other.CopyFrom(model)
        other.ClearField("graph")
        return other.SerializeToString() + _field(7, 2, graph_bytes)

    def graph_with_base_type(type_bytes: bytes) -> bytes:
        g = onnx.GraphProto()
        g.CopyFrom(graph)
        del g.input[:]
        base = _field(1, 2, b"base") + _field(2, 2, type_bytes)
        return g.SerializeToString() + _field(11, 2, base) + _field(11, 2, graph.input[1].SerializeToString())

    tensor_type = graph.input[0].type.SerializeToString()
    sequence = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None)).SerializeToString()
    nested = b""
    for _level in range(60):  # attribute -> graph -> node -> attribute ...: deeper than protobuf's 100
        nested = _field(1, 2, _field(5, 2, _field(1, 2, b"g") + _field(20, 0, 5) + _field(6, 2, nested)))
    graph_attribute = _field(1, 2, b"g") + _field(20, 0, 5) + _field(6, 2, nested)
    deep_node = _field(1, 2, b"base") + _field(2, 2, b"deep") + _field(4, 2, b"Identity") + _field(5, 2, graph_attribute)
    return {
        "graph-given-twice-merges": (good + _field(7, 2, _field(10, 2, b"a doc string")), None),
        "unknown-field-and-group-skipped": (good + _field(999, 2, b"x") + _field(1000, 3, b"") + _varint(1000 << 3 | 4), None),
        "ir-version-of-the-wrong-wire-type": (_field(1, 2, b"\x05") + good[2:] if good[0] == 0x08 else good, "MD422"),
        "ir-version-wrong-type-after-a-good-one": (good + _field(1, 2, b"\x05"), None),
        "tensor-then-sequence-type-oneof": (with_graph(graph_with_base_type(tensor_type + sequence)), "MD427"),
        "sequence-then-tensor-type-oneof": (with_graph(graph_with_base_type(sequence + tensor_type)), None),
        "elem-type-negative": (with_graph(graph_with_base_type(_field(1, 2, _field(1, 0, -1)))), "MD427"),
        "attribute-type-unknown-enum": (with_graph(graph.SerializeToString() + _field(1, 2, _field(1, 2, b"base")
                                         + _field(2, 2, b"x") + _field(4, 2, b"Identity") + _field(5, 2, _field(1, 2, b"k") + _field(20, 0, 99)))),
                                         None),  # a closed enum's unknown value leaves `type` unset: no subgraph
        "truncated": (good[:-3], "MD421"),
        "field-number-0": (good + _varint(0 << 3 | 0) + b"\x01", "MD421"),
        "wire-type-7": (good + _varint(5 << 3 | 7), "MD421"),
        "length-past-the-end": (good + _field(999, 2, b"")[:-1] + _varint(50), "MD421"),
        "end-group-without-start": (good + _varint(12 << 3 | 4), "MD421"),
        "invalid-utf8-node-name": (with_graph(graph.SerializeToString() + _field(1, 2, _field(1, 2, b"base")
                                   + _field(2, 2, b"y") + _field(3, 2, b"\xff\xfe") + _field(4, 2, b"Identity"))), None),
        "nested-too-deep": (with_graph(graph.SerializeToString() + _field(1, 2, deep_node)), "MD421"),
        # unknown groups: 100 levels below the model are allowed, 101 are not; field numbers inside
        # are not checked (found by differential fuzzing: a field 0 inside a group read as a name)
        "groups-nested-100": (good + _varint(100 << 3 | 3) * 100 + _varint(100 << 3 | 4) * 100, None),
        "groups-nested-101": (good + _varint(100 << 3 | 3) * 101 + _varint(100 << 3 | 4) * 101, "MD421"),
        "field-0-inside-a-group": (good + _varint(100 << 3 | 3) + b"\x01" + b"12345678" + _varint(100 << 3 | 4), None),
        "unterminated-group": (good + _varint(100 << 3 | 3) + b"\x08\x01", "MD421"),
        "wire-type-6-inside-a-group": (good + _varint(100 << 3 | 3) + b"\x0e" + _varint(100 << 3 | 4), "MD421"),
        "tag-beyond-32-bits": (good + _varint(1 << 32 | 5 << 3) + b"\x01", "MD421"),
    }


PROTOBUF_VARIANTS = _protobuf_variants()


def test_protobuf_edges_agree_with_the_reference(tmp_path):
    """Each edit gets the same verdict and codes from both; the codes are those SPEC.md §7.8 gives."""
    from tests import ia3

    paths = {}
    for name, (fn, _) in PROTOBUF_VARIANTS.items():
        paths[name] = ia3.write_with_function(tmp_path / f"{name}.mdiff", fn)
    js = _js_validate_many(list(paths.values()), {})
    failures = []
    for name, path in paths.items():
        ref = {f.code for f in mdiff.validate(path)}
        got = {f["code"] for f in js[str(path)]["findings"]}
        want = PROTOBUF_VARIANTS[name][1]
        expected = set() if want is None else {want} | ({"MD402"} if want != "MD428" else set())
        if ref != got or ref - {"MD303"} != expected:
            failures.append((name, sorted(ref), sorted(got), sorted(expected)))
    assert not failures, failures


def test_the_onnx_message_schema_agrees_with_the_installed_onnx_package():
    """src/onnx_proto.js (tools/gen_onnx_proto_js.py, from onnx's descriptors) says what the installed
    onnx says of every message and field both know (a newer onnx may add some: regenerate then)."""
    text = (TOOL / "src" / "onnx_proto.js").read_text()
    ours = json.loads(text[text.index("= ") + 2:].rstrip().rstrip(";"))
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_onnx_proto_js.py"), "--print"], capture_output=True, text=True)
    theirs = json.loads(p.stdout)
    assert ours.keys() <= theirs.keys()
    for message, fields in ours.items():
        for number, f in fields.items():
            assert theirs[message].get(number) == f, (message, number)


def test_a_second_datatype_message_is_not_read(tmp_path):
    """A dataset's header with a second datatype message (a null message retyped: a float with its reserved byte
    order bit set, §8.2's MD505 were it read): libhdf5 reads the first message of each type, and so do both
    implementations — the file is valid to each."""
    from tests import invalid_files
    from tests.fuzz import hdf5bytes

    path = tmp_path / "two-datatypes.mdiff"
    invalid_files._write(path)
    with h5py.File(path, "r") as f:
        address = h5py.h5o.get_info(f["parameters/w/xor"].id).addr
    data = bytearray(path.read_bytes())
    layout = hdf5bytes.scan(data)
    null = next(m for m in next(b for b in layout.blocks if b.start == address).messages if m.type == 0)
    data[null.offset] = 0x03  # a version 2 header's message: type, size, flags
    body = bytes([0x11, 0x60, 0x1F, 0, 4, 0, 0, 0, 0, 0, 32, 0, 23, 8, 0, 23, 127, 0, 0, 0])
    data[null.body:null.body + null.size] = body + bytes(null.size - len(body))
    hdf5bytes.fix_checksums(data, layout)
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f:
        assert f["parameters/w/xor"].dtype == np.uint32  # the first
    assert mdiff.validate(path) == []
    rc, report = js_validate(path)
    assert (rc, report["findings"]) == (0, [])


# ---------------------------------------------------------------------------------------------
# merges (SPEC.md §13.7): `mdiff-js merge-file`; the corpus's merge cases run in tests/test_conformance.py,
# this compares the two on random states


def _random_merge_states(rng, resolvable: bool) -> tuple[dict, dict, dict]:
    """Ours, base, theirs: parameters of each float dtype and int32, each unchanged, changed on one side or on
    both (differently or alike), added, deleted or retyped — finite numbers only. ``resolvable``: no conflict
    that average or task-arithmetic cannot resolve (an int32 one, one absent from base)."""
    ours, base, theirs = {}, {}, {}
    for i in range(40):
        dtype = ["float16", "bfloat16", "float32", "float64", "int32"][i % 5]
        shape = (int(rng.integers(1, 5)), 3)

        def value(scale=1.0):
            return (rng.standard_normal(shape) * scale * 100).astype(NP[dtype])

        name = f"p{i:02d}/{dtype}"
        b = value()
        o, t = b.copy(), b.copy()
        kind = i // 5 % 8
        if kind in (1, 3):
            o = value()
        if kind in (2, 3) and not (resolvable and kind == 3 and dtype == "int32"):
            t = value()
        if kind == 4:
            o = t = value()
        if kind == 5:
            o = None
        if kind == 6:
            b = None
            if i % 2 or resolvable:
                t = o.copy()
        if kind == 7:
            t = t.astype(np.float32 if dtype != "float32" else np.float64)
        for state, v in ((ours, o), (base, b), (theirs, t)):
            if v is not None:
                state[name] = v
    return ours, base, theirs


def test_merge_file_agrees_with_the_reference_on_random_states(tmp_path):
    """Each strategy, with and without --all: the same merged bits, or the same conflicts, as the reference's
    merge-file — weighted:0.3 and task-arithmetic:0.7 included, whose binary64 products are rounded: both
    evaluate the expression as written, one operation at a time, and round once to the dtype."""
    import collections
    import contextlib
    import io

    from mdiff.checkpoints import load_checkpoint, save_checkpoint
    from mdiff.cli.main import main

    rng = np.random.default_rng(27)
    outcomes = collections.Counter()
    for trial in range(3):
        paths = [tmp_path / f"{trial}-{label}.safetensors" for label in ("ours", "base", "theirs")]
        for path, state in zip(paths, _random_merge_states(rng, resolvable=trial > 0)):
            save_checkpoint(path, state)
        for strategy in (None, "ours", "theirs", "average", "weighted:0.3", "task-arithmetic", "task-arithmetic:0.7"):
            for everything in ((False, True) if strategy else (False,)):
                options = (["--strategy", strategy] if strategy else []) + (["--all"] if everything else [])
                js_out, ref_out = tmp_path / "js.safetensors", tmp_path / "ref.safetensors"
                for out in (js_out, ref_out):
                    out.unlink(missing_ok=True)
                rc, report, p = run_js("merge-file", *map(str, paths), "-o", str(js_out), *options, "--json")
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    ref_rc = main(["merge-file", *map(str, paths), "-o", str(ref_out), *options, "--json"])
                ref = json.loads(buf.getvalue())
                what = (trial, strategy, everything)
                outcomes[strategy, rc] += 1
                assert rc == ref_rc, (what, p.stderr)
                assert sorted(f["path"] for f in report["findings"]) == sorted(f["path"] for f in ref["findings"]), what
                if rc == 0:
                    got, want = load_checkpoint(js_out), load_checkpoint(ref_out)
                    assert set(got) == set(want), what
                    for name in want:
                        assert got[name].dtype == want[name].dtype and got[name].tobytes() == want[name].tobytes(), (what, name)
                else:
                    assert rc == 1 and not js_out.exists(), what
    for strategy in (None, "average", "weighted:0.3", "task-arithmetic", "task-arithmetic:0.7"):  # both outcomes met
        assert outcomes[strategy, 1] and outcomes[strategy, 0 if strategy else 1], outcomes


# Issue 28 item 3: what mdiff-js must not strip (a byte-order mark, a CR) and a lock link it need not read.


@pytest.mark.parametrize("which", ["HEAD", "detached HEAD", "ref", "tag", "format"])
@pytest.mark.parametrize("change", ["CR before LF", "byte-order mark"])
def test_checkout_refuses_a_cr_or_a_byte_order_mark_in_format_head_and_refs(tmp_path, which, change):
    """§13.1: LF alone, nothing else: mdiff-js's TextDecoder would strip a byte-order mark unless told not to, and
    the reference keeps it (MD801 in both; tests/test_repo_hostile.py has the reference's side)."""
    repo, ids = _small_repo(tmp_path)
    repo.create_tag("v1", ids[1])
    path, text = {"HEAD": (repo.dir / "HEAD", "ref: refs/heads/main\n"), "detached HEAD": (repo.dir / "HEAD", ids[2] + "\n"),
                  "ref": (repo.dir / "refs" / "heads" / "main", ids[2] + "\n"),
                  "tag": (repo.dir / "refs" / "tags" / "v1", ids[1] + "\n"),
                  "format": (repo.dir / "format", (repo.dir / "format").read_text())}[which]
    path.write_bytes((text[:-1] + "\r\n").encode() if change == "CR before LF" else b"\xef\xbb\xbf" + text.encode())
    rc, report = js_checkout(repo.root, "v1" if which == "tag" else "HEAD", tmp_path / "o.safetensors")
    assert rc == 1 and report["error"]["code"] == "MD801", report
    assert not (tmp_path / "o.safetensors").exists()


def test_checkout_takes_no_lock_so_a_dangling_lock_link_is_no_concern(tmp_path):
    """§13.6: a lock file that is a dangling link is MD801 for a writer and a checker (the reference's side in
    tests/test_repo_hostile.py); a checkout takes no lock, so mdiff-js reads the repository as before."""
    repo, ids = _small_repo(tmp_path)
    (repo.dir / "lock").unlink(missing_ok=True)
    (repo.dir / "lock").symlink_to(tmp_path / "nowhere")
    rc, report = js_checkout(repo.root, "HEAD~1", tmp_path / "o.safetensors")
    assert rc == 0 and report["commit"] == ids[1], report
    assert as_array(load_safetensors(tmp_path / "o.safetensors")["w"]).tobytes() == np.full(4, 1, np.float32).tobytes()
    assert not (tmp_path / "nowhere").exists()


def test_a_base_whose_header_starts_with_a_byte_order_mark_is_md701_in_both(tmp_path):
    """A safetensors header is JSON text: a byte-order mark before it is kept, and is no JSON (MD701), in mdiff-js
    (whose TextDecoder would strip it by default) as in the reference."""
    save_safetensors(tmp_path / "good.safetensors", {"w": np.zeros(4, np.float32)})
    data = (tmp_path / "good.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = b"\xef\xbb\xbf" + data[8:8 + n].rstrip(b" ")
    header += b" " * (-len(header) % 8)
    (tmp_path / "base.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + data[8 + n:])
    mdiff.write(tmp_path / "d.mdiff", {"w": mdiff.dense(np.zeros(4, np.float32), np.ones(4, np.float32))},
                mdiff.Commit("bom", date="2026-01-01T00:00:00Z"))
    rc, report, _ = run_js("apply", str(tmp_path / "base.safetensors"), str(tmp_path / "d.mdiff"), "-o",
                           str(tmp_path / "js.safetensors"), "--json")
    assert rc != 0 and report["error"]["code"] == "MD701", report
    p = subprocess.run([sys.executable, "-m", "mdiff", "apply", str(tmp_path / "base.safetensors"), str(tmp_path / "d.mdiff"),
                        "-o", str(tmp_path / "ref.safetensors"), "--json"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert p.returncode != 0 and json.loads(p.stdout)["error"]["code"] == "MD701", p.stdout + p.stderr
    assert not (tmp_path / "js.safetensors").exists() and not (tmp_path / "ref.safetensors").exists()


@pytest.mark.parametrize("doc, code", [
    ({"format": "torch", "files": [{"path": "pytorch_model-00001-of-00002.bin", "tensors": ["w"]},
                                   {"path": "pytorch_model-00002-of-00002.bin", "tensors": ["big"]}],
      "index": {"path": "pytorch_model.bin.index.json", "metadata": {"total_size": 8}}}, None),
    ({"format": "torch", "files": [{"path": "pytorch_model.bin", "tensors": ["w"], "metadata": {"format": "pt"}}]}, "MD307"),
    ({"format": "torch", "files": [{"path": "model.safetensors", "tensors": ["w"]}]}, "MD307"),
    ({"format": "torch", "files": [], "index": {"path": "model.safetensors.index.json", "metadata": {}}}, "MD307"),
], ids=["bin-shards", "metadata", "safetensors-path", "safetensors-index"])
def test_torch_layouts_read_alike(tmp_path, doc, code):
    """Revision 11: a layout of the format `torch` (`.bin` files, `.bin.index.json`, no metadata), by both readers."""
    from tests import invalid_files as inv

    path = tmp_path / "layout.mdiff"
    inv._write_files(path, {}, inv._layout(doc))
    ours = {f.code for f in mdiff.validate(path) if f.severity == "error"}
    theirs = {f["code"] for f in js_validate(path)[1]["findings"] if f["severity"] == "error"}
    assert ours == theirs == ({code} if code else set())


# ---------------------------------------------------------------------------------------------
# writer test vectors: SPEC.md §11's stats.rel_change (src/stats.js, written from the spec's text)


def test_rel_change_vectors_give_their_bits_in_mdiff_js():
    """`mdiff-js rel-change-vectors` runs conformance/writer/rel_change.json (tools/gen_conformance.py): every
    vector's rel_change bit for bit, or absent where the vector's is null — the same bits the reference gives
    (tests/test_relative_change.py runs these vectors against it)."""
    path = ROOT / "conformance" / "writer" / "rel_change.json"
    vectors = json.loads(path.read_text(encoding="utf-8"))["vectors"]
    p = subprocess.run([NODE, str(CLI), "rel-change-vectors", str(path)], capture_output=True, text=True, timeout=120)
    results = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["id"] for r in results] == [v["id"] for v in vectors], p.stderr
    for vector, result in zip(vectors, results):
        expected = vector["rel_change"]
        assert result["got"] == expected if expected is None else result["got"]["bits"] == expected["bits"], (vector["id"], result)
        assert result["ok"], result
    assert p.returncode == 0 and p.stderr.strip() == f"{len(vectors)} passed, 0 failed", p.stderr


def test_rel_change_vectors_fail_a_wrong_expectation(tmp_path):
    """The command compares bits, not numbers: an expected value one ulp off fails its vector and the exit status."""
    vectors = json.loads((ROOT / "conformance" / "writer" / "rel_change.json").read_text(encoding="utf-8"))
    first = vectors["vectors"][0]
    bits = int(first["rel_change"]["bits"], 16) + 1
    first["rel_change"] = {"bits": f"{bits:016x}", "decimal": repr(struct.unpack(">d", struct.pack(">Q", bits))[0])}
    (tmp_path / "v.json").write_text(json.dumps(vectors), encoding="utf-8")
    p = subprocess.run([NODE, str(CLI), "rel-change-vectors", str(tmp_path / "v.json")], capture_output=True, text=True,
                       timeout=120)
    oks = [json.loads(line)["ok"] for line in p.stdout.splitlines()]
    assert p.returncode == 1 and oks[0] is False and all(oks[1:]), p.stdout
