"""Files with very many parameters, and deep nesting: work that grows linearly, memory that stays bounded
(issues 14.9, 14.10). Timings live in tools/bench/scale.py; these tests count operations and bytes instead.
"""

from __future__ import annotations

import cProfile
import gc
import io
import json
import os
import pstats
import subprocess
import sys
import tracemalloc
from pathlib import Path

import h5py
import jsonschema
import numpy as np
import pytest

import mdiff
from mdiff.describe import describe
from mdiff.format import reader as reader_module
from mdiff.hdf5walk.attributes import write_string
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.format.reader import DiffFile, Vetted, open_diff
from mdiff.format.schemas import _Unsure, compiled_check, ecma_validator, first_errors
from mdiff.hdf5walk.walk import MAX_REPORTED_PATH, WALK_CACHE_BYTES, Inventory, LazyWalk, _Walk, inspect_structure
from mdiff.isolation import Isolation, isolation_supported
from mdiff.updates import REGISTRY
from tests import invalid_files as inv

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
COMMIT = mdiff.Commit("many", date=inv.DATE)


def _many(path: Path, n: int, warning: bool = False) -> None:
    """A dense diff of ``n`` parameters of 4 float32 values; with ``warning``, each parameter group also
    carries an unknown attribute (MD303)."""
    with mdiff.DiffWriter(path, COMMIT) as writer:
        for i in range(n):
            old = np.full(4, i, np.float32)
            writer.add(f"layer.{i:06d}.w", mdiff.dense(old, old + 1))
    if warning:
        with h5py.File(path, "r+") as f:
            for name in f["parameters"]:
                write_string(f["parameters"][name], "note", "x")


def _calls(fn) -> int:
    """Function calls (Python and C) made by ``fn()``: a count of operations, the same on any machine (the
    garbage collector is held off: finalizers it would run at times of its own choosing are not counted)."""
    gc.collect()
    gc.disable()
    try:
        profile = cProfile.Profile()
        profile.runcall(fn)
    finally:
        gc.enable()
    return sum(entry[1] for entry in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]


def _peak_bytes(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


OPERATIONS = {
    "open": lambda p: DiffFile(p).close(),
    "validate": lambda p: mdiff.validate(p),
    "dump": lambda p: json.dumps(describe(p)),
}


@pytest.mark.parametrize("warning", [False, True], ids=["plain", "a warning per parameter"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_the_work_of_reading_grows_linearly_with_the_parameter_count(tmp_path, operation, warning):
    small, large = tmp_path / "small.mdiff", tmp_path / "large.mdiff"
    _many(small, 300, warning)
    _many(large, 1200, warning)
    run = OPERATIONS[operation]
    run(small)  # imports and caches, not counted
    findings = mdiff.validate(large)
    assert [f.code for f in findings] == (["MD303"] * 1200 if warning else [])
    calls = _calls(lambda: run(large)) / _calls(lambda: run(small))
    memory = _peak_bytes(lambda: run(large)) / _peak_bytes(lambda: run(small))
    # 4× the parameters: 4× the work and memory, plus what does not depend on the count
    assert calls <= 4.2, f"{operation}: {calls:.2f}× the calls for 4× the parameters"
    assert memory <= 4.4, f"{operation}: {memory:.2f}× the peak memory for 4× the parameters"


def test_an_open_diff_holds_no_libhdf5_object_per_parameter(tmp_path):
    """libhdf5 keeps ~17 KB per open dataset: 16k parameters held 280 MB and slowed every later call."""
    path = tmp_path / "d.mdiff"
    _many(path, 500)
    with DiffFile(path) as diff:
        fid = diff._file.id
        assert h5py.h5f.get_obj_count(fid, h5py.h5f.OBJ_ALL) == 1  # the file alone
        for name in diff:
            diff[name].array("xor")  # read through the walk's chunk map
        assert h5py.h5f.get_obj_count(fid, h5py.h5f.OBJ_ALL) == 1
        assert diff["layer.000001.w"].data["xor"].shape == (4,)  # known without opening the dataset
        assert h5py.h5f.get_obj_count(fid, h5py.h5f.OBJ_ALL) == 1


def test_a_diff_is_read_with_a_small_metadata_cache(tmp_path):
    """libhdf5's default cache grows to 32 MB of headers (~100 MB decoded) for 10^5 parameters."""
    path = tmp_path / "d.mdiff"
    _many(path, 3)
    with DiffFile(path) as diff:
        assert diff._file.id.get_mdc_config().max_size == WALK_CACHE_BYTES == 2 << 20


def test_applying_many_parameters_grows_linearly(tmp_path):
    counts = {}
    for n in (300, 1200):
        path, base, out = tmp_path / f"{n}.mdiff", tmp_path / f"{n}.safetensors", tmp_path / f"{n}.out.safetensors"
        _many(path, n)
        from safetensors.numpy import save_file

        save_file({f"layer.{i:06d}.w": np.full(4, i, np.float32) for i in range(n)}, str(base))
        mdiff.apply_files(base, path, out)  # warm
        counts[n] = _calls(lambda base=base, path=path, out=out: mdiff.apply_files(base, path, out))
        from safetensors.numpy import load_file

        got = load_file(str(out))
        assert len(got) == n and np.array_equal(got["layer.000007.w"], np.full(4, 8, np.float32))
    assert counts[1200] / counts[300] <= 4.2


def test_an_isolated_open_reads_by_the_childs_walk(tmp_path, monkeypatch):
    if not isolation_supported():
        pytest.skip("isolation needs fork()")
    path = tmp_path / "d.mdiff"
    _many(path, 20)
    walks = []
    real = reader_module.inspect_structure
    monkeypatch.setattr(reader_module, "inspect_structure", lambda *a: walks.append(1) or real(*a))
    with open_diff(path, isolation=Isolation(timeout_s=60)) as diff:
        assert len(diff) == 20
        assert diff["layer.000003.w"].array("xor").tolist() == np.full(4, 3, np.float32).view(np.uint32).__xor__(
            np.full(4, 4, np.float32).view(np.uint32)).tolist()
    assert walks == []  # the walk ran in the child only
    with open_diff(path) as diff:
        assert len(diff) == 20
    assert walks == [1]


def test_a_childs_walk_of_another_file_is_not_used(tmp_path):
    a, b = tmp_path / "a.mdiff", tmp_path / "b.mdiff"
    _many(a, 3)
    _many(b, 5)
    with DiffFile(a, keep_structure=True) as diff:
        vetted = diff.structure
    assert isinstance(vetted, Vetted)
    with pytest.raises(mdiff.InvalidFileError) as info:  # b is not the file the walk was made of: never read by it
        DiffFile(b, vetted=vetted)
    assert info.value.code == "MD515" and "changed" in info.value.message


def test_the_walk_crosses_as_json_flat_and_whole(tmp_path):
    path = tmp_path / "d.mdiff"
    inv.build_MD303_dataset_attribute(path)
    with h5py.File(path, "r") as f:
        inventory, findings = inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS)
    again = Inventory.from_records(json.loads(json.dumps(inventory.to_records())))
    for p in ("/", "/parameters", "/parameters/w", "/parameters/w/xor"):
        one, two = inventory.objects[p], again.objects[p]
        assert (one.path, one.kind, dict(one.attrs), set(one.refused_attrs), one.members, one.dataset) == \
               (two.path, two.kind, dict(two.attrs), set(two.refused_attrs), two.members, two.dataset)
    assert again.total_bytes == inventory.total_bytes


ROOT_RECORD = [-1, "", "group", None, None, None]
DATASET = [[4], "<f4", 16, 16, [0, None, [], []], None]


@pytest.mark.parametrize("records", [
    None, [], [0, []], [0, [[0, "", "group", None, None, None]]],  # no root; a root that is its own parent
    [0, [ROOT_RECORD, [5, "x", "group", None, None, None]]],  # a parent that does not exist (yet)
    [0, [ROOT_RECORD, [0, "x", "dataset", None, None, DATASET], [1, "y", "group", None, None, None]]],  # in a dataset
    [0, [ROOT_RECORD, [0, "x", "dataset", None, None, [[4], "|O8", 32, 32, None, None]]]],  # Python objects
    [0, [ROOT_RECORD, [0, "x", "dataset", None, None, [[4.5], "<f4", 16, 16, None, None]]]],
    [0, [ROOT_RECORD, [0, "x", "group", {"a": 1}, None, None]]],
    [0, [ROOT_RECORD, [0, "x", "link", None, None, None]]],
    [0, [ROOT_RECORD, [0, "x", "dataset", None, None, [[4], "<f4", 16, 16, None, "not base64!"]]]],
])
def test_a_walk_that_is_not_one_is_refused_whole(records):
    """What an isolated child sends is data from a process that read a stranger's file: checked, never trusted."""
    with pytest.raises(ValueError):
        Inventory.from_records(records)


def test_dump_reports_the_bytes_libhdf5_stores(tmp_path):
    path = tmp_path / "d.mdiff"
    big = np.arange(300_000, dtype=np.float32)  # chunked and deflated
    with mdiff.DiffWriter(path, COMMIT) as writer:
        writer.add("big", mdiff.replace(big))
        writer.add("small", mdiff.dense(inv.W, inv.W_NEW))  # contiguous
        writer.add("empty", mdiff.replace(np.zeros((0, 3), np.float32)))
        writer.add("rank0", mdiff.replace(np.float32(2.5)))
    info = {p["name"]: p["stored_bytes"] for p in describe(path)["parameters"]}
    with h5py.File(path, "r") as f:
        expected = {name: sum(ds.id.get_storage_size() for ds in f["parameters"][name].values())
                    for name in f["parameters"]}
    assert info == expected and info["big"] > 0 and info["empty"] == 0


def _deep(path: Path, depth: int = 1500, name_length: int = 2000) -> None:
    """Issue 14.9: unknown groups nested ``depth`` deep under names of ``name_length`` characters."""
    inv._write(path)
    with h5py.File(path, "r+") as f:
        group = f
        for i in range(depth):
            group = group.create_group(f"{i:04d}".ljust(name_length, "x"))


def _child_peak(code: str) -> tuple[dict, int]:
    """Run ``code`` (which prints one JSON line) in a fresh interpreter: its output and its peak RSS."""
    proc = subprocess.run([sys.executable, "-c", code + "\nprint(open('/proc/self/status').read().split('VmHWM:')[1]"
                           ".split()[0], file=__import__('sys').stderr)"], capture_output=True, text=True, env=ENV,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), int(proc.stderr.strip().splitlines()[-1]) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_deep_nesting_with_long_names_stays_small(tmp_path):
    path = tmp_path / "deep.mdiff"
    _deep(path)
    assert 4_500_000 < path.stat().st_size < 5_000_000
    found, peak = _child_peak(
        "import json, mdiff\n"
        f"print(json.dumps([[f.code, f.path, f.message] for f in mdiff.validate({str(path)!r})]))")
    assert [(code, len(where), message) for code, where, message in found] == [
        ("MD511", MAX_REPORTED_PATH + 1, "objects nested more than 32 links below the root")]
    assert found[0][1].startswith("/0000xxx") and "…" in found[0][1]
    assert peak < 250 * 2**20, f"validate peaked at {peak / 2**20:.0f} MiB"  # 2.5 GB before (issue 14.9)
    base = tmp_path / "base.safetensors"
    from safetensors.numpy import save_file

    save_file(inv.base_state(), str(base))
    code = ("import json, mdiff\n"
            "try:\n"
            f"    mdiff.apply_files({str(base)!r}, {str(path)!r}, {str(tmp_path / 'out.safetensors')!r})\n"
            "    print(json.dumps('applied'))\n"
            "except mdiff.MdiffError as e:\n"
            "    print(json.dumps(e.code))")
    refused, peak = _child_peak(code)
    assert refused == "MD511" and not (tmp_path / "out.safetensors").exists()
    assert peak < 250 * 2**20, f"apply peaked at {peak / 2**20:.0f} MiB"


def test_nesting_at_the_depth_limit_is_valid_and_one_deeper_is_MD511(tmp_path):
    at, over = tmp_path / "at.mdiff", tmp_path / "over.mdiff"
    _deep(at, depth=32, name_length=4)
    _deep(over, depth=33, name_length=4)
    assert {f.code for f in mdiff.validate(at)} == {"MD303"}  # the unknown root member, a warning
    assert [f.code for f in mdiff.validate(over)] == ["MD511"]
    assert [f.code for f in mdiff.validate(over, limits=mdiff.Limits(max_depth=33))] == ["MD303"]
    with pytest.raises(mdiff.LimitError) as info:
        mdiff.open(over)  # the nest is outside /parameters: checked on opening, lazy or not
    assert info.value.code == "MD511"


# ---------------------------------------------------------------- the compiled schema check

def _schema_suite_cases():
    by_id = {}
    for p in sorted((ROOT / "schemas").rglob("*.schema.json")):
        schema = json.loads(p.read_text(encoding="utf-8"))
        by_id[schema["$id"]] = schema
    for suite in sorted((ROOT / "conformance" / "schema-tests").glob("*.json")):
        for group in json.loads(suite.read_text(encoding="utf-8")):
            schema = group["schema"]
            if isinstance(schema, dict) and set(schema) == {"$ref"}:
                schema = by_id[schema["$ref"]]
            for test in group["tests"]:
                yield schema, test["data"], test["valid"]


def test_the_compiled_check_agrees_with_jsonschema_on_every_schema_suite_case():
    cases = list(_schema_suite_cases())
    assert len(cases) > 300
    for schema, data, valid in cases:
        check = compiled_check(schema)
        assert check is not None, schema.get("$id")
        try:
            assert check(data) is valid, (schema.get("$id"), data)
        except _Unsure:
            pass
        assert (first_errors(schema, data) == []) is valid


def _variants(meta: dict):
    """``meta`` broken in the ways JSON Schema's semantics make subtle."""
    yield meta
    for key in list(meta):
        yield {k: v for k, v in meta.items() if k != key}
        for value in (None, True, False, 0, 1, 1.0, 2.5, -1, "", "x", [], {}, [1], ["1"], 2**70, float("1e308")):
            yield {**meta, key: value}
    yield {**meta, "extra": 1}
    yield {**meta, "shape": [2.0, 4]}
    yield {**meta, "shape": [True, 4]}
    yield {**meta, "shape": [0] * 33}
    yield {**meta, "stats": {"changed": 1, "rel_change": 0.5}}
    yield {**meta, "stats": {"changed": 1.0}}
    yield {**meta, "stats": {"changed": True}}
    yield {**meta, "stats": {"other": 1}}
    yield {**meta, "sha256": "a" * 64 + "\n"}
    yield {**meta, "version": True}
    yield {**meta, "version": 1.0}


def test_the_compiled_check_agrees_with_jsonschema_on_broken_updates():
    metas = {
        "dense": {"type": "dense", "version": 1, "shape": [2, 4], "dtype": "float32", "sha256": "0" * 64},
        "sparse": {"type": "sparse", "version": 1, "shape": [2, 4], "dtype": "float32", "sha256": "0" * 64},
        "low_rank": {"type": "low_rank", "version": 1, "shape": [2, 4], "dtype": "float32", "scale": 0.5,
                     "A_sha256": "0" * 64, "B_sha256": "0" * 64},
        "replace": {"type": "replace", "version": 1, "shape": [2, 4], "dtype": "float32", "sha256": "0" * 64},
        "delete": {"type": "delete", "version": 1, "shape": [2, 4], "dtype": "float32"},
    }
    checked = 0
    for name, meta in metas.items():
        schema = REGISTRY[name].schema
        check, validator = compiled_check(schema), ecma_validator(schema)
        assert check is not None and validator.is_valid(meta), name
        for variant in _variants(meta):
            try:
                got = check(variant)
            except _Unsure:
                continue
            assert got == validator.is_valid(variant), (name, variant)
            checked += 1
    assert checked > 400


def test_a_schema_with_other_keywords_is_left_to_jsonschema():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}}
    assert compiled_check(schema) is None
    assert first_errors(schema, {"a": 1}) and first_errors(schema, {"a": "s"}) == []
    assert jsonschema.Draft202012Validator(schema).is_valid({"a": "s"})


# ---------------------------------------------------------------- lazy reading (issue 16.4)

def test_a_lazy_reader_refuses_a_broken_parameter_when_it_is_used(tmp_path):
    path = tmp_path / "d.mdiff"
    _many(path, 3)
    with h5py.File(path, "r+") as f:
        group = f["parameters/layer.000001.w"]
        meta = json.loads(bytes(group.attrs["update"]).rstrip(b"\0"))
        write_string(group, "update", json.dumps(dict(meta, shape=[5])))  # the dataset holds 4 (MD407)
        f["parameters/layer.000002.w"]["extra"] = h5py.SoftLink("/parameters")  # a soft link (MD500)
    assert sorted(f.code for f in mdiff.validate(path) if f.is_error) == ["MD407", "MD500"]
    with pytest.raises(mdiff.InvalidFileError) as info:
        mdiff.open(path, lazy=False)
    assert info.value.code == "MD500"  # the walk's finding comes first
    with mdiff.open(path) as diff:
        assert list(diff) == ["layer.000000.w", "layer.000001.w", "layer.000002.w"] and len(diff) == 3
        assert "layer.000001.w" in diff and "nothing" not in diff
        assert diff["layer.000000.w"].array("xor").shape == (4,)
        for _ in range(2):  # refused each time it is used
            with pytest.raises(mdiff.InvalidFileError) as info:
                diff["layer.000001.w"]
            assert info.value.code == "MD407" and info.value.path == "/parameters/layer.000001.w/xor"
        with pytest.raises(mdiff.InvalidFileError) as info:
            diff["layer.000002.w"]
        assert info.value.code == "MD500"
        with pytest.raises(mdiff.InvalidFileError) as info:
            diff.check()
        assert info.value.code == "MD407"
        with pytest.raises(KeyError):
            diff["nothing"]
        with pytest.raises(mdiff.InvalidFileError):  # an applier checks every parameter before any result
            mdiff.apply({f"layer.{i:06d}.w": np.full(4, i, np.float32) for i in range(3)}, diff)


def test_a_lazy_reader_walks_only_the_parameter_it_reads(tmp_path):
    small, large = tmp_path / "small.mdiff", tmp_path / "large.mdiff"
    _many(small, 300)
    _many(large, 1200)

    def read_one(path):
        with mdiff.open(path) as diff:
            diff["layer.000150.w"].array("xor")

    read_one(small)
    lazy = {p: _calls(lambda p=p: read_one(p)) for p in (small, large)}
    whole = {p: _calls(lambda p=p: DiffFile(p).close()) for p in (small, large)}
    # each further parameter costs a lazy reader its link alone: a tenth of what checking it costs, at most
    assert (lazy[large] - lazy[small]) * 10 <= whole[large] - whole[small], (lazy, whole)


class _CountingFile(io.RawIOBase):
    """A file read through h5py's fileobj driver that counts the bytes libhdf5 reads."""

    def __init__(self, path: Path):
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 — closed by close()
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def readinto(self, buffer) -> int:  # type: ignore[override]
        got = self._file.readinto(buffer)
        self.bytes_read += got
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


def test_a_lazy_reader_lists_a_large_group_reading_its_bytes_once(tmp_path):
    """The links of /parameters are listed with libhdf5's metadata cache as large as it takes (128 MB), so that
    the group's name index and heap fit (issue 31): at 16 MB, 24,000 names of 1 KB (a 27 MB heap) read 149 MB —
    5.6× the file, and more the larger the group — and listing 10^6 parameters took 9.8 s of CPU (0.8 s at
    64 MB). Counted: the bytes libhdf5 reads while a lazy reader walks the file."""
    path = tmp_path / "links.h5"
    with h5py.File(path, "w", libver="latest") as f:
        group = f.create_group("parameters", track_order=False)
        for i in range(24_000):
            group[f"{i:08d}" + "x" * 1000] = h5py.SoftLink("/nowhere")  # a link: listed, never opened
    size = path.stat().st_size
    counting = _CountingFile(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        f = h5py.File(counting, "r")
        try:
            walk = LazyWalk(f, size, DEFAULT_LIMITS, frozenset({"/parameters"}), lambda n, at: os.pread(fd, n, at))
        finally:
            f.close()
    finally:
        os.close(fd)
        counting.close()
    assert [x.code for x in walk.findings] == ["MD500"] * 24_000
    assert size > 24 << 20 and counting.bytes_read <= 1.1 * size, (counting.bytes_read, size)


# ---------------------------------------------------------------- the work of a large file, counted (issue 31.3)

def test_libhdf5_is_asked_about_each_attribute_once_and_about_each_kind_of_storage_once(tmp_path, monkeypatch):
    """The walk still opens every object through libhdf5 (which verifies its header), but asks it what is the same for
    objects stored alike — a dataset's properties, an attribute's type and value, how an object's attributes are
    stored, a group's links stored in its header — once for each way of storing them (hdf5walk/walk.py): a file of
    10^5 alike parameters made 40 calls of libhdf5 each, and the walk cost 2.5 times what it does."""
    import h5py

    path = tmp_path / "d.mdiff"
    _many(path, 1200)
    calls: dict[str, int] = {}

    def counted(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            key = f"{module.__name__.rsplit('.', 1)[-1]}.{name}"
            calls[key] = calls.get(key, 0) + 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, call)

    for module, name in ((h5py.h5a, "open"), (h5py.h5a, "get_num_attrs"), (h5py.h5o, "open"), (h5py.h5i, "get_type"),
                         (h5py.h5g, "open"), (h5py.h5d, "open")):
        counted(module, name)
    with h5py.File(path, "r") as f:
        inventory, findings = inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS)
    assert findings == [] and len(inventory.objects["/parameters"].members) == 1200
    # each parameter's dataset, the root and /parameters opened once — as its header says it is a group or dataset;
    # a parameter's group is opened only until libhdf5 has listed the links and read the attributes of one stored
    # alike (here the first three): of the others, only the dataset, through it, by its path (issue 31.3)
    assert (calls.get("h5o.open", 0), calls["h5g.open"], calls["h5d.open"]) == (0, 2 + 3, 1200)
    assert calls.get("h5i.get_type", 0) == 0  # h5py's class of an object says its kind
    assert calls["h5a.get_num_attrs"] <= 4  # the root, /parameters, a parameter's group, its dataset
    # an attribute is opened by name (3 at the root, the first `update` of each kind) and by index only where
    # libhdf5 is asked to list them (the first of each kind); the others are read from their messages, as libhdf5
    # read the first of their kind
    opened = {}
    monkeypatch.undo()
    real_open = h5py.h5a.open

    def by_kind(*args, **kwargs):
        key = "index" if "index" in kwargs else "name"
        opened[key] = opened.get(key, 0) + 1
        return real_open(*args, **kwargs)

    monkeypatch.setattr(h5py.h5a, "open", by_kind)
    with h5py.File(path, "r") as f:
        inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS)
    assert opened["name"] < 3 + 20 and opened.get("index", 0) < 20, opened
    # and the walk is the one libhdf5 alone makes: each attribute read by it, each group's links listed by it
    monkeypatch.undo()
    with h5py.File(path, "r") as f:
        alone = _Walk(f, os.path.getsize(path), DEFAULT_LIMITS)
        alone.attributes_in_header, alone.links_in_header = _NeverKept(), _NeverKept()
        alone.run()
        usual = _Walk(f, os.path.getsize(path), DEFAULT_LIMITS)
        usual.run()
    assert alone.findings == [] and alone.inventory.to_records() == inventory.to_records()
    assert usual.links_in_header and usual.attributes_in_header  # the others were read from their headers


class _NeverKept(set):
    """A set of the walk's that keeps nothing: every attribute and link is then read by libhdf5."""

    def add(self, item) -> None:
        pass


def _alike_but_for(path: Path, patch, n: int = 3) -> None:
    """``n`` (3) parameters alike (dense, 4 float32 values: a group, its attribute, a contiguous dataset); ``patch(data,
    first_offset, last_offset)`` then changes bytes of the last one's objects (given the object header addresses
    of the first and last parameter's dataset), and every checksum is made right again: libhdf5 reads the result."""
    from tests.fuzz.hdf5bytes import fix_checksums, scan

    _many(path, n)
    with h5py.File(path, "r") as f:
        names = sorted(f["parameters"])
        addresses = [h5py.h5o.get_info(f["parameters"][n]["xor"].id).addr for n in (names[0], names[-1])]
    data = bytearray(path.read_bytes())
    layout = scan(data)
    patch(data, *addresses)
    fix_checksums(data, layout)
    path.write_bytes(bytes(data))


def _layout_message(data: bytearray, header: int) -> int:
    """Where the body of the contiguous data layout message (version 3, 18 bytes) of the object header at ``header``
    starts."""
    at = data.index(b"\x08\x12\x00", header)  # type 8, size 18, then its flags
    assert at < header + 200 and data[at + 4:at + 6] == b"\x03\x01"
    return at + 4


def _both_walks(path: Path) -> tuple[_Walk, _Walk]:
    """The walk, and the walk that asks libhdf5 where each contiguous dataset's data lies (none from its header)."""
    with h5py.File(path, "r") as f:
        usual = _Walk(f, os.path.getsize(path), DEFAULT_LIMITS)
        usual.run()
        alone = _Walk(f, os.path.getsize(path), DEFAULT_LIMITS)
        alone.storage_in_header = _NeverKept()
        alone.run()
    return usual, alone


def test_where_a_dataset_s_data_lies_is_libhdf5_s_word_for_datasets_stored_alike(tmp_path):
    """libhdf5 is asked where a contiguous dataset's data lies (H5Dget_offset, H5Dget_storage_size) for the first of
    each kind of dataset; of another stored alike, its layout message says it, as libhdf5 read the first's: the
    same walk, two calls fewer a dataset (issue 31.3)."""
    path = tmp_path / "d.mdiff"
    _many(path, 300)
    usual, alone = _both_walks(path)
    assert usual.findings == alone.findings == []
    assert usual.inventory.to_records() == alone.inventory.to_records()
    assert len(usual.storage_in_header) == 1  # h5py's DatasetID cannot be wrapped to count its calls: the kinds kept
    with h5py.File(path, "r") as f:  # and each is where libhdf5 says
        for name, node in usual.inventory.objects["/parameters"].children.items():
            dataset = f["parameters"][name]["xor"].id
            info = node.children["xor"].dataset
            assert (info.plan.contiguous_offset, info.stored) == (dataset.get_offset(), dataset.get_storage_size())


@pytest.mark.parametrize("change, expected", [
    # the last dataset's data moved (its address one byte back): read where its header says, as libhdf5 says
    ("address", []),
    # its size one byte short of its 16 bytes: MD509 from either walk
    ("size", [("MD509", "/parameters/layer.000002.w/xor", "declares 16 bytes; 15 are stored")]),
    # its address past the end of the file
    ("outside", [("MD513", "/parameters/layer.000002.w/xor", "the object cannot be opened")]),
])
def test_datasets_alike_but_for_one_byte_of_where_their_data_lies(tmp_path, change, expected):
    path = tmp_path / "d.mdiff"

    def patch(data: bytearray, first: int, last: int) -> None:
        body = _layout_message(data, last)
        if change == "address":
            data[body + 2:body + 10] = (int.from_bytes(data[body + 2:body + 10], "little") - 1).to_bytes(8, "little")
        elif change == "size":
            data[body + 10:body + 18] = (15).to_bytes(8, "little")
        else:
            data[body + 2:body + 10] = (len(data) + 4096).to_bytes(8, "little")

    _alike_but_for(path, patch)
    usual, alone = _both_walks(path)
    found = [(x.code, x.path, x.message.split(":")[0]) for x in usual.findings]
    assert found == expected
    assert usual.findings == alone.findings and usual.inventory.to_records() == alone.inventory.to_records()


def _walks_with_and_without_unopened_groups(path: Path) -> tuple[_Walk, _Walk, int]:
    """The walk, the walk that opens every group by H5Gopen (none left unopened), and how many groups the first
    left unopened."""
    with h5py.File(path, "r") as f:
        usual = _Walk(f, os.path.getsize(path), DEFAULT_LIMITS)
        unopened = []
        found = usual._unopened_group

        def counted(*args):
            group = found(*args)
            if group is not None:
                unopened.append(group.path)
            return group
        usual._unopened_group = counted  # type: ignore[method-assign]
        usual.run()
        alone = _Walk(f, os.path.getsize(path), DEFAULT_LIMITS)
        alone._unopened_group = lambda *args: None  # type: ignore[method-assign]
        alone.run()
    return usual, alone, len(unopened)


@pytest.mark.parametrize("change, expected, unopened", [
    (None, [], 30 - 1),  # every parameter's group but the first (whose links and attributes libhdf5 read)
    # the last parameter's dataset cannot be opened (its data past the end of the file): neither through its
    # group nor from it; the group is opened as before, and the dataset refused as before
    ("outside", [("MD513", "/parameters/layer.000029.w/xor", "the object cannot be opened")], 30 - 2),
    # the last group's member named "x/r" (a path, not a name): the group is opened, the member looked up in it
    ("slash", [("MD513", "/parameters/layer.000029.w/x/r", "the object cannot be opened")], 30 - 2),
])
def test_a_parameter_s_group_is_left_unopened_only_where_that_changes_nothing(tmp_path, change, expected, unopened):
    """A group whose header is alike one libhdf5 listed is not opened: its dataset is opened through it by path, one
    libhdf5 open a parameter (issue 31.3). Where that open fails, or a name is not one component of a path, the
    group is opened as before: the same findings and the same walk as a walk that opens every group."""
    path = tmp_path / "d.mdiff"

    def patch(data: bytearray, first: int, last: int) -> None:
        if change == "outside":
            body = _layout_message(data, last)
            data[body + 2:body + 10] = (len(data) + 4096).to_bytes(8, "little")
        elif change == "slash":
            link = b"\x01\x00\x03xor" + last.to_bytes(8, "little")  # version, flags, name's length, name, address
            at = data.index(link)
            data[at + 3:at + 6] = b"x/r"

    if change is None:
        _many(path, 30)
    else:
        _alike_but_for(path, patch, n=30)
    usual, alone, left = _walks_with_and_without_unopened_groups(path)
    assert [(x.code, x.path, x.message.split(":")[0]) for x in usual.findings] == expected
    assert usual.findings == alone.findings and usual.inventory.to_records() == alone.inventory.to_records()
    assert left == unopened


def test_a_link_info_message_alike_but_for_one_byte_is_read_again(tmp_path):
    """The walk keeps link info and attribute info messages found to name no dense storage (most groups of a file hold
    the same bytes); one that differs by a byte — here the address of a fractal heap of links — is read as its own."""
    path = tmp_path / "d.mdiff"
    _many(path, 3)
    with h5py.File(path, "r") as f:
        names = sorted(f["parameters"])
        group = h5py.h5o.get_info(f["parameters"][names[-1]].id).addr
    from tests.fuzz.hdf5bytes import fix_checksums, scan

    data = bytearray(path.read_bytes())
    layout = scan(data)
    at = data.index(b"\x02\x12\x00", group) + 4  # the link info message (type 2, 18 bytes): version, flags, heap
    assert data[at + 2:at + 10] == b"\xff" * 8
    data[at + 2:at + 10] = (48).to_bytes(8, "little")  # a "fractal heap" where the superblock lies
    fix_checksums(data, layout)
    path.write_bytes(bytes(data))
    usual, _ = _both_walks(path)
    assert [(x.code, x.path, x.message.split(":")[0]) for x in usual.findings] == [
        ("MD513", "/parameters/layer.000002.w", "the group's links cannot be read")]


def test_fsck_reads_each_commit_in_one_isolated_child_request(tmp_path, monkeypatch):
    """A commit is validated and its metadata summarized by one child's reading of it (it was a validation, a
    second child's walk, a parse here, and a third walk and parse for the state digests)."""
    if not isolation_supported():
        pytest.skip("isolation needs fork()")
    from mdiff.isolation import Worker

    repo = mdiff.Repository.init(tmp_path / "repo")
    state = {f"layer.{i}": np.full(4, i, np.float32) for i in range(50)}
    repo.commit(state, "first", date=inv.DATE)
    repo.commit({k: v + 1 for k, v in state.items()}, "second", date=inv.DATE)
    requests: list[str] = []
    real = Worker.call
    monkeypatch.setattr(Worker, "call", lambda self, name, *a: requests.append(name) or real(self, name, *a))
    fresh = mdiff.Repository(tmp_path / "repo")
    assert fresh.fsck() == []
    assert requests == ["validate-and-summarize"] * 2


def test_an_isolated_open_is_one_request_and_the_child_does_not_parse(tmp_path, monkeypatch):
    """The child walks (§8) and answers the walk; the rules of §3–§7 are checked once, here, on reading by it."""
    if not isolation_supported():
        pytest.skip("isolation needs fork()")
    from mdiff.format import parameters
    from mdiff.isolation import Worker

    path = tmp_path / "d.mdiff"
    _many(path, 30)
    requests: list[str] = []
    real = Worker.call
    monkeypatch.setattr(Worker, "call", lambda self, name, *a: requests.append(name) or real(self, name, *a))
    here = os.getpid()
    parsed = []

    def parse(*args, **kwargs):
        if os.getpid() != here:  # the child (forked after this patch: an Isolation no other test uses) parses
            os._exit(3)
        parsed.append(here)
        return parameters.parse_parameters(*args, **kwargs)

    monkeypatch.setattr(reader_module, "parse_parameters", parse)
    with open_diff(path, isolation=Isolation(timeout_s=61.25)) as diff:
        assert len(diff) == 30 and diff.isolated
    assert requests == ["vet"] and parsed == [here]


def test_a_root_commit_is_read_back_once_and_not_opened_again_for_a_snapshot(tmp_path, monkeypatch):
    """A commit is read back as its readers will read it (§13.6), and then its state opened to see whether a
    snapshot is due (§13.5) — which a root commit never is (its updates are its values, read once): that second
    walk of the whole file was a quarter of `mdiff commit`'s time for a root of 10^5 parameters (issue 31)."""
    walks: list[int] = []
    real = reader_module.inspect_structure
    monkeypatch.setattr(reader_module, "inspect_structure", lambda f, *a, **k: walks.append(1) or real(f, *a, **k))
    repo = mdiff.Repository.init(tmp_path / "repo", isolation=None)
    state = {f"layer.{i}": np.full(4, i, np.float32) for i in range(20)}
    repo.commit(state, "root", date=inv.DATE)
    assert len(walks) == 1  # the read-back
    repo.commit({k: v + 1 for k, v in state.items()}, "second", date=inv.DATE)
    # the parent's file (its state_sha256 vouches for the claims its commit kept in the cache, §13.2) and the
    # read-back; the snapshot's rule takes the replay cost kept with those claims, not the new state walked again
    assert len(walks) == 1 + 2
    assert repo.fsck() == [] and not list((repo.dir / "snapshots").iterdir())


def test_validate_reads_no_value_that_has_nothing_to_decode_and_no_rule(tmp_path, monkeypatch):
    """A dense delta of a dtype other than bool has no value rule (§7.3), and stored contiguous (no filters, its whole
    extent within the file: §8.3) nothing to decode: validate does not read it (10^5 of them: ~0.5 s). It reads a
    chunked one (each chunk must inflate, MD513) and a bool one (MD409), as before."""
    from mdiff.format import chunk_reader
    from mdiff.validation import validate

    path = tmp_path / "d.mdiff"
    with mdiff.DiffWriter(path, COMMIT) as writer:
        writer.add("small", mdiff.dense(np.zeros(4, np.float32), np.ones(4, np.float32)))
        writer.add("flags", mdiff.dense(np.zeros(4, bool), np.ones(4, bool)))
        writer.add("large", mdiff.dense(np.zeros(1 << 16, np.float32), np.ones(1 << 16, np.float32)))
    read: list[str] = []
    real, real_many = chunk_reader.read_planned, chunk_reader.read_many
    monkeypatch.setattr(chunk_reader, "read_planned", lambda fd, plan, shape, out, name: read.append(name) or real(
        fd, plan, shape, out, name))
    # small ones are read together (read_small_together): the same count, by name
    monkeypatch.setattr(chunk_reader, "read_many", lambda datasets: read.extend(d.name for d in datasets) or real_many(
        datasets))
    assert validate(path) == []
    with h5py.File(path, "r") as f:
        kinds = {name: f["parameters"][name][member].id.get_create_plist().get_layout()
                 for name in f["parameters"] for member in f["parameters"][name]}
    assert kinds == {"small": h5py.h5d.CONTIGUOUS, "flags": h5py.h5d.CONTIGUOUS, "large": h5py.h5d.CHUNKED}
    assert sorted(read) == ["/parameters/flags/xor", "/parameters/large/xor"]
