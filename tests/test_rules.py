"""Every rule of SPEC.md §12, one or more hostile files each (tests/invalid_files.py).

For each case: the validator reports the intended code first (with the severity and section
of mdiff/rules.py); the reader refuses the file with that code (or, for rules that
depend on data, opens it and the applier refuses it); warnings leave the file valid; nothing
ever raises anything but an MdiffError; and every builder writes the same bytes every time.
Also: SPEC.md's table equals rules.py, every rule has a case, and the apply-time rules
MD600–MD602 are checked through ``mdiff.apply``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.hdf5walk.attributes import write_string
from mdiff.format.dtypes import dtype_named
from mdiff.format.findings import Finding
from mdiff.rules import RULES
from mdiff.updates.base import Update, sha256_hex

try:
    from tests import invalid_files as inv
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    import invalid_files as inv

SPEC = Path(__file__).resolve().parent.parent / "SPEC.md"

APPLY_CODES = {"MD600", "MD601", "MD602", "MD603"}  # tested below through mdiff.apply
CHECKPOINT_CODES = {"MD700", "MD701", "MD702", "MD703", "MD704", "MD705", "MD706"}  # tests/test_checkpoints*.py, test_folders.py,
# test_outputs.py
REPOSITORY_CODES = {"MD800", "MD801", "MD802", "MD803", "MD804", "MD805", "MD806", "MD807",
                    "MD808", "MD809"}  # tests/test_repo.py, test_folders.py, test_snapshots.py, test_state_digest.py, test_discovery.py
ISOLATION_CODES = {"MD515"}  # a crash of the reader's own process: tests/test_isolation.py
LIMIT_CODES = {"MD507", "MD508", "MD510", "MD511", "MD512"}  # refused with LimitError

def _cases(test: str, only=lambda code, case_id: True):
    params = []
    for code, case_id, builder in inv.CASES:
        if not only(code, case_id):
            continue
        params.append(pytest.param(code, case_id, builder, id=f"{code}-{case_id}"))
    return params


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """case_id -> path of its file, each built once per module."""
    directory = tmp_path_factory.mktemp("cases")
    paths: dict[str, Path] = {}

    def get(case_id: str, builder) -> Path:
        if case_id not in paths:
            path = directory / f"{case_id}.mdiff"
            try:
                builder(path)
            except inv.CannotBuildHere as exc:
                pytest.skip(str(exc))
            paths[case_id] = path
        return paths[case_id]

    return get


# ---------------------------------------------------------------- every case


@pytest.mark.parametrize("code, case_id, builder", _cases("validate"))
def test_validate_reports_the_code_first(code, case_id, builder, built):
    path = built(case_id, builder)
    rule = RULES[code]
    findings = mdiff.validate(path, limits=inv.limits_for(case_id))
    assert all(isinstance(x, Finding) and x.code in RULES for x in findings)
    errors = [x for x in findings if x.is_error]
    if rule.severity == "error":
        assert errors, f"no error reported; expected {code}"
        first = errors[0]
    else:
        assert not errors, f"a warning-only file has errors: {errors}"
        assert findings, f"nothing reported; expected the warning {code}"
        first = findings[0]
    assert first.code == code, f"first finding {first.code} ({first.message}); expected {code}"
    assert (first.severity, first.section) == (rule.severity, rule.section)
    assert first.path and first.message
    if case_id not in inv.DATA_LEVEL:  # metadata alone shows it
        findings = mdiff.validate(path, limits=inv.limits_for(case_id), check_data=False)
        first_again = ([x for x in findings if x.is_error] or findings)[0]
        assert (first_again.code, first_again.path) == (first.code, first.path)


@pytest.mark.parametrize("code, case_id, builder", _cases("exact"))
def test_validate_reports_exactly_the_codes_of_the_case(code, case_id, builder, built):
    """SPEC.md §12.1: the set of codes is a function of the file — the case's own, and those
    ALSO_REPORTED lists (what the conformance manifest's `codes` and `warnings` hold)."""
    findings = mdiff.validate(built(case_id, builder), limits=inv.limits_for(case_id))
    assert {x.code for x in findings} == inv.expected_codes(code, case_id), [(x.code, x.path) for x in findings]


@pytest.mark.parametrize("code, case_id, builder", _cases("open"))
def test_open_refuses_with_the_code(code, case_id, builder, built):
    path = built(case_id, builder)
    limits = inv.limits_for(case_id)
    if case_id in inv.DATA_LEVEL:
        assert not [x for x in mdiff.validate(path, limits=limits, check_data=False) if x.is_error]
        with mdiff.open(path, limits) as diff:
            assert len(diff) >= 1
    elif RULES[code].severity == "warning":
        with mdiff.open(path, limits, lazy=False) as diff:
            assert code in [x.code for x in diff.warnings]
            assert diff.commit.date == inv.DATE
        with mdiff.open(path, limits) as diff:  # lazy: the warnings of what was checked
            diff.check()
            assert code in [x.code for x in diff.warnings]
    else:
        with pytest.raises(mdiff.InvalidFileError) as excinfo:
            mdiff.open(path, limits, lazy=False).close()
        assert excinfo.value.code == code
        assert isinstance(excinfo.value, mdiff.LimitError) == (code in LIMIT_CODES)
        # a lazy reader refuses it too: on opening, or when it uses the parameter that breaks the rule
        with pytest.raises(mdiff.InvalidFileError) as excinfo:
            with mdiff.open(path, limits) as diff:
                diff.check()
        assert excinfo.value.code == code


@pytest.mark.parametrize("code, case_id, builder", _cases("apply", lambda code, case_id: case_id in inv.DATA_LEVEL))
def test_data_level_cases_are_refused_by_apply(code, case_id, builder, built):
    path = built(case_id, builder)
    base = inv.base_state()
    with mdiff.open(path, inv.limits_for(case_id)) as diff:
        with pytest.raises(mdiff.MdiffError) as excinfo:
            mdiff.apply(base, diff)
    assert excinfo.value.code in {code, "MD602"}
    for name, array in inv.base_state().items():  # the base is left alone
        assert np.array_equal(base[name], array)


@pytest.mark.parametrize("code, case_id, builder", _cases("never_raises"))
def test_validate_never_raises(code, case_id, builder, built):
    path = built(case_id, builder)
    for limits in {inv.limits_for(case_id), mdiff.Limits()}:
        for check_data in (True, False):
            findings = mdiff.validate(path, limits=limits, check_data=check_data)
            assert isinstance(findings, list) and all(isinstance(x, Finding) for x in findings)


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """Every case (and valid case) built twice, more than a second apart, so that a timestamp
    HDF5 records in an object header would show up as a difference."""
    builders = [(case_id, builder) for _, case_id, builder in inv.CASES] + inv.VALID_CASES
    directories = [tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")]
    for i, directory in enumerate(directories):
        if i:
            time.sleep(1.1)
        for case_id, builder in builders:
            builder(directory / f"{case_id}.mdiff")
    return lambda case_id: [(d / f"{case_id}.mdiff").read_bytes() for d in directories]


@pytest.mark.parametrize("code, case_id, builder", _cases("deterministic"))
def test_builder_is_deterministic(code, case_id, builder, two_builds):
    first, second = two_builds(case_id)
    assert first == second


@pytest.mark.parametrize("case_id, builder", [pytest.param(c, b, id=c) for c, b in inv.VALID_CASES])
def test_valid_edge_cases_have_no_findings(case_id, builder, tmp_path):
    path = tmp_path / "valid.mdiff"
    builder(path)
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        assert diff.warnings == []


@pytest.mark.parametrize("case_id", [c for c, _ in inv.VALID_CASES])
def test_valid_builder_is_deterministic(case_id, two_builds):
    first, second = two_builds(case_id)
    assert first == second


# ---------------------------------------------------------------- coverage and the spec's table


def test_every_rule_has_a_case():
    covered = {code for code, _, _ in inv.CASES}
    assert covered <= set(RULES), f"cases for unknown codes: {sorted(covered - set(RULES))}"
    # a new apply-time or checkpoint rule must come with its own test, here or in test_checkpoints.py
    assert {c for c in RULES if c.startswith("MD6")} == APPLY_CODES
    assert {c for c in RULES if c.startswith("MD7")} == CHECKPOINT_CODES
    assert {c for c in RULES if c.startswith("MD8")} == REPOSITORY_CODES
    missing = set(RULES) - APPLY_CODES - CHECKPOINT_CODES - REPOSITORY_CODES - ISOLATION_CODES - covered
    assert not missing, f"rules without a case in tests/invalid_files.py: {sorted(missing)}"


def test_cases_registry_is_consistent():
    assert len({case_id for _, case_id, _ in inv.CASES}) == len(inv.CASES)
    for code, case_id, builder in inv.CASES:
        assert builder.__name__ == f"build_{code}_{case_id}"
    assert set(inv.LIMITS) <= set(inv.case_ids())
    assert {code for code, case_id, _ in inv.CASES if case_id in inv.DATA_LEVEL} <= {"MD307", "MD408", "MD409", "MD410", "MD513"}
    assert {"MD408", "MD409", "MD410"} <= {code for code, case_id, _ in inv.CASES if case_id in inv.DATA_LEVEL}
    for case_id, fields in inv.LIMITS.items():
        mdiff.Limits(**fields)  # known field names


def _spec_table() -> list[tuple[str, str, str, str]]:
    text = SPEC.read_text(encoding="utf-8")
    section = text[text.index("## 12 Validation table"):]
    section = section[: section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        if line.startswith("| MD"):
            m = re.fullmatch(r"\| (MD\d{3}) \| (error|warning) \| §([0-9.]+) \| (.+) \|", line)
            assert m, f"malformed row in SPEC.md §12: {line!r}"
            rows.append(m.groups())
    return rows


def test_spec_table_lists_exactly_the_rules():
    rows = _spec_table()
    assert len({r[0] for r in rows}) == len(rows), "a code appears twice in SPEC.md §12"
    assert [r[0] for r in rows] == list(RULES)
    for code, severity, section, title in rows:
        rule = RULES[code]
        assert (severity, section, title) == (rule.severity, rule.section, rule.title), code


def test_spec_cites_each_code_in_its_section():
    """Each code is defined (in bold) in the prose of the section the table gives it, and the
    prose cites no code the table lacks."""
    text = SPEC.read_text(encoding="utf-8")
    table = text.index("## 12 Validation table")
    text = text[:table] + text[text.index("\n## ", table + 1):]  # the prose, without the table itself
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"#{2,3} (\d+(?:\.\d+)?) ", line)
        if m:
            current = m.group(1)
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    for rule in RULES.values():
        assert f"**{rule.code}**" in sections.get(rule.section, ""), f"{rule.code} is not cited in §{rule.section}"
    assert set(re.findall(r"\*\*(MD\d{3})\*\*", text)) == set(RULES)


# ---------------------------------------------------------------- limits: the boundary is allowed


def test_a_file_exactly_at_every_limit_is_valid(tmp_path):
    path = tmp_path / "at_limits.mdiff"
    # the root group and its 3 attributes; /parameters; /parameters/w (1 attribute); xor: float32 [2, 4] — 8 objects
    # and attributes in one total, the root counted (§8.3, §12.1)
    inv._write(path)
    with h5py.File(path, "r") as f:
        longest = max(obj.attrs.get_id(n).get_type().get_size() for obj in (f, f["parameters/w"]) for n in obj.attrs)
    at = mdiff.Limits(max_rank=2, max_elements=8, max_dataset_bytes=32, max_total_bytes=32, max_objects=8,
                      max_attribute_bytes=longest)
    assert mdiff.validate(path, limits=at) == []
    for field, code in [("max_rank", "MD507"), ("max_elements", "MD508"), ("max_dataset_bytes", "MD508"),
                        ("max_total_bytes", "MD512"), ("max_objects", "MD511"), ("max_attribute_bytes", "MD510")]:
        fields = {k: getattr(at, k) for k in at.__dataclass_fields__}
        fields[field] -= 1
        findings = mdiff.validate(path, limits=mdiff.Limits(**fields))
        assert findings and findings[0].code == code, (field, findings)
        with pytest.raises(mdiff.LimitError) as excinfo:
            mdiff.open(path, mdiff.Limits(**fields), lazy=False).close()
        assert excinfo.value.code == code
        with pytest.raises(mdiff.LimitError) as excinfo:
            with mdiff.open(path, mdiff.Limits(**fields)) as diff:
                diff.check()
        assert excinfo.value.code == code


# ---------------------------------------------------------------- apply-time rules (§9)


def _diff_file(tmp_path, updates) -> Path:
    path = tmp_path / "apply.mdiff"
    mdiff.write(path, updates, inv.COMMIT)
    assert mdiff.validate(path) == []
    return path


def _refused(path, base, code) -> None:
    snapshot = {k: v.copy() for k, v in base.items()}
    with mdiff.open(path) as diff:
        with pytest.raises(mdiff.ApplyError) as excinfo:
            mdiff.apply(base, diff)
    assert excinfo.value.code == code, excinfo.value
    assert excinfo.value.rule == RULES[code]
    assert set(base) == set(snapshot) and all(np.array_equal(base[k], snapshot[k]) for k in base)


W, W_NEW = inv.W, inv.W_NEW


@pytest.mark.parametrize("update", [
    pytest.param(lambda: mdiff.dense(W, W_NEW), id="dense"),
    pytest.param(lambda: mdiff.sparse(W, W_NEW), id="sparse"),
    pytest.param(lambda: inv._low_rank_update(), id="low_rank"),
    pytest.param(lambda: mdiff.delete(W), id="delete"),
])
def test_MD600_base_lacks_the_parameter(update, tmp_path):
    path = _diff_file(tmp_path, {"w": update()})
    _refused(path, {"other": W.copy()}, "MD600")


def test_MD600_replace_needs_no_base(tmp_path):
    path = _diff_file(tmp_path, {"w": mdiff.replace(W_NEW)})
    with mdiff.open(path) as diff:
        result = mdiff.apply({}, diff)
    assert result["w"].tobytes() == W_NEW.tobytes()


@pytest.mark.parametrize("update", [
    pytest.param(lambda: mdiff.dense(W, W_NEW), id="dense"),
    pytest.param(lambda: mdiff.sparse(W, W_NEW), id="sparse"),
    pytest.param(lambda: inv._low_rank_update(), id="low_rank"),
    pytest.param(lambda: mdiff.delete(W), id="delete"),
])
@pytest.mark.parametrize("base", [
    pytest.param(lambda: W.reshape(4, 2).copy(), id="shape"),
    pytest.param(lambda: W.reshape(-1).copy(), id="rank"),
    pytest.param(lambda: W.astype(np.float64), id="dtype"),
    pytest.param(lambda: W.view(np.int32).copy(), id="same-width-dtype"),
])
def test_MD601_base_shape_or_dtype_differs(update, base, tmp_path):
    path = _diff_file(tmp_path, {"w": update()})
    _refused(path, {"w": base()}, "MD601")


def test_MD601_bool_base_for_uint8_update(tmp_path):
    old = np.array([0, 1, 1, 0], dtype=np.uint8)
    path = _diff_file(tmp_path, {"m": mdiff.dense(old, old ^ 1)})
    _refused(path, {"m": old.astype(bool)}, "MD601")


def test_MD601_is_checked_before_any_result(tmp_path):
    """§9.2: a bad base for one parameter refuses the whole file, even if another one is fine."""
    path = _diff_file(tmp_path, {"a": mdiff.dense(W, W_NEW), "z": mdiff.dense(W, W_NEW)})
    _refused(path, {"a": W.copy(), "z": W.astype(np.float64)}, "MD601")


def _unfingerprinted(update: Update) -> Update:
    """The update as a writer of format 1.0/1.1 made it: without `base_sha256` (§7.1)."""
    return Update({k: v for k, v in update.meta.items() if k != "base_sha256"}, update.data)


@pytest.mark.parametrize("update", [
    pytest.param(lambda: _unfingerprinted(mdiff.dense(W, W_NEW)), id="dense"),
    pytest.param(lambda: _unfingerprinted(mdiff.sparse(W, W_NEW)), id="sparse"),
])
def test_MD602_result_differs_from_sha256(update, tmp_path):
    path = _diff_file(tmp_path, {"w": update()})
    other = W.copy()
    other[1, 1] = 100.0  # same shape and dtype, another base
    _refused(path, {"w": other}, "MD602")


def test_MD602_one_bit_of_another_base(tmp_path):
    path = _diff_file(tmp_path, {"w": _unfingerprinted(mdiff.dense(W, W_NEW))})
    other = W.copy()
    other.view(np.uint32)[0, 0] ^= 1  # 0.0 -> the smallest subnormal
    _refused(path, {"w": other}, "MD602")


@pytest.mark.parametrize("update", [
    pytest.param(lambda: mdiff.dense(W, W_NEW), id="dense"),
    pytest.param(lambda: mdiff.sparse(W, W_NEW), id="sparse"),
    pytest.param(lambda: mdiff.low_rank(np.ones((2, 1)), np.ones((1, 4)), (2, 4), dtype_named("float32"),
                                        base_sha256=sha256_hex(W)), id="low_rank"),
])
def test_MD603_another_base_is_named_before_anything_is_computed(update, tmp_path):
    """§9.2: with `base_sha256` the applier says the base is not the diff's — not that a result differs."""
    path = _diff_file(tmp_path, {"w": update()})
    with h5py.File(path, "r") as f:
        assert bytes(f.attrs["format_version"]) == b"1.2"
    other = W.copy()
    other.view(np.uint32)[0, 0] ^= 1
    _refused(path, {"w": other}, "MD603")
    with mdiff.open(path) as diff:  # the right base still applies
        assert set(mdiff.apply({"w": W.copy()}, diff)) == {"w"}


def test_MD603_names_the_parameter_and_both_fingerprints(tmp_path):
    path = _diff_file(tmp_path, {"a": mdiff.dense(W, W_NEW), "b": mdiff.dense(W, W_NEW)})
    other = W.copy()
    other[0, 0] = 7.0
    with mdiff.open(path) as diff, pytest.raises(mdiff.ApplyError) as excinfo:
        mdiff.apply({"a": W.copy(), "b": other}, diff)
    assert excinfo.value.code == "MD603" and excinfo.value.path == "b"
    assert str(excinfo.value).count(sha256_hex(other)[:12]) == 1 and sha256_hex(W)[:12] in str(excinfo.value)


def test_MD603_is_checked_before_the_output_is_named(tmp_path):
    """mdiff apply to files: a wrong base leaves no output behind."""
    from mdiff.checkpoints import save_checkpoint

    diff_path = _diff_file(tmp_path, {"w": mdiff.dense(W, W_NEW)})
    other = W.copy()
    other[1, 1] = 100.0
    save_checkpoint(tmp_path / "other.safetensors", {"w": other})
    with pytest.raises(mdiff.ApplyError) as excinfo:
        mdiff.apply_files(tmp_path / "other.safetensors", diff_path, tmp_path / "out.safetensors")
    assert excinfo.value.code == "MD603"
    assert not (tmp_path / "out.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["apply.mdiff", "other.safetensors"]


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("version", [1, 2])
def test_MD603_of_an_invertible_update_is_decided_from_its_result(kind, version, tmp_path, monkeypatch):
    """§9.2: a `dense` or `sparse` result determines its base, so the applier hashes the base only when the
    result does not verify — and still says MD603 for another base, MD602 for a wrong result of the right one."""
    from mdiff.checkpoints import save_checkpoint
    from mdiff.updates import base as update_base
    from mdiff.updates import dense, sparse

    encode = {"dense": dense.encode, "sparse": sparse.encode}[kind]
    update = encode(W, W_NEW, version=version)
    assert update.type == kind and update.meta["version"] == version and update.base_sha256 == sha256_hex(W)
    diff_path = _diff_file(tmp_path, {"w": update})
    hashed = []
    real = update_base.check_base_fingerprint
    monkeypatch.setattr(update_base, "check_base_fingerprint", lambda u, b, n: hashed.append(n) or real(u, b, n))
    save_checkpoint(tmp_path / "base.safetensors", {"w": W})
    mdiff.apply_files(tmp_path / "base.safetensors", diff_path, tmp_path / "out.safetensors")
    assert hashed == []  # the result verified: the base was never hashed
    other = W.copy()
    other.view(np.uint32)[1, 3] ^= 1 << 20
    save_checkpoint(tmp_path / "other.safetensors", {"w": other})
    with pytest.raises(mdiff.ApplyError) as excinfo:
        mdiff.apply_files(tmp_path / "other.safetensors", diff_path, tmp_path / "out2.safetensors")
    assert (excinfo.value.code, excinfo.value.path, hashed) == ("MD603", "w", ["w"])
    assert sha256_hex(other)[:12] in str(excinfo.value) and not (tmp_path / "out2.safetensors").exists()
    _refused(diff_path, {"w": other}, "MD603")  # in memory too
    wrong_result = tmp_path / "wrong"
    wrong_result.mkdir()
    wrong = Update({**update.meta, "sha256": sha256_hex(W)}, dict(update.data))  # made from W, but names another result
    _refused(_diff_file(wrong_result, {"w": wrong}), {"w": W.copy()}, "MD602")


def test_MD603_of_a_low_rank_update_is_checked_before_its_result(tmp_path, monkeypatch):
    """low_rank's float result does not determine its base: the base is hashed before anything is computed."""
    from mdiff.updates import base as update_base

    hashed = []
    real = update_base.check_base_fingerprint
    monkeypatch.setattr(update_base, "check_base_fingerprint", lambda u, b, n: hashed.append(n) or real(u, b, n))
    path = _diff_file(tmp_path, {"w": mdiff.low_rank(np.ones((2, 1)), np.ones((1, 4)), (2, 4), dtype_named("float32"),
                                                     base_sha256=sha256_hex(np.zeros((2, 4), np.float32)))})
    with mdiff.open(path) as diff:
        assert set(mdiff.apply({"w": np.zeros((2, 4), np.float32)}, diff)) == {"w"}
    assert hashed == ["w"]


def test_base_sha256_in_a_file_older_than_1_2_is_MD404(tmp_path):
    path = _diff_file(tmp_path, {"w": mdiff.dense(W, W_NEW)})
    with h5py.File(path, "r+") as f:
        write_string(f, "format_version", "1.1")
    assert [x.code for x in mdiff.validate(path)] == ["MD404"]


def test_MD602_replace_value_corrupted(tmp_path):
    _, _, builder = next(c for c in inv.CASES if c[1] == "replace_value_changed")
    builder(tmp_path / "apply.mdiff")
    _refused(tmp_path / "apply.mdiff", inv.base_state(), "MD602")


# ---------------------------------------------------------------- reader and writer edges


def test_low_rank_with_integral_float_shape_applies(tmp_path):
    """A shape written [2.0, 4] is a JSON Schema integer array (SPEC.md §7.1): it must apply."""
    path = tmp_path / "float_shape.mdiff"
    inv._write(path, {"w": inv._low_rank_update()})
    with h5py.File(path, "r+") as f:
        group = f["parameters/w"]
        meta = json.loads(bytes(group.attrs["update"]).decode("utf-8"))
        meta["shape"] = [2.0, 4]
        write_string(group, "update", json.dumps(meta))
    assert mdiff.validate(path) == []
    with mdiff.open(path) as diff:
        result = mdiff.apply(inv.base_state(), diff)
    assert result["w"].shape == (2, 4)


def test_writer_refuses_low_rank_on_an_integer_parameter(tmp_path):
    update = mdiff.low_rank(np.ones((4, 1)), np.ones((1, 1)), (4,), dtype_named("int32"))
    path = tmp_path / "out.mdiff"
    with pytest.raises(ValueError, match="MD411"):
        mdiff.write(path, {"counts": update}, inv.COMMIT)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_case_files_are_small(tmp_path):
    """Conformance fixtures stay small: nothing over 64 KiB."""
    sizes = {}
    for _, case_id, builder in inv.CASES:
        path = tmp_path / f"{case_id}.mdiff"
        try:
            builder(path)
        except inv.CannotBuildHere:
            continue
        sizes[case_id] = path.stat().st_size
    assert max(sizes.values()) < 64 * 1024, max(sizes.items(), key=lambda kv: kv[1])
