"""The parse of `update` attributes seen before (format/parameters.py ``_MetaMemo``): a text that differs from
one that passed every check only in its 64-hex hashes is taken from the first one's outcome. These hold it to
the full parse, finding for finding and member for member, on texts that nearly have the common shape."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

import mdiff
from mdiff.format import parameters
from mdiff.format.header import parse_header
from mdiff.format.parameters import Datasets, parse_parameters
from mdiff.hdf5walk.limits import DEFAULT_LIMITS
from mdiff.hdf5walk.walk import inspect_structure
from mdiff.updates import REGISTRY
from tests.invalid_files import COMMIT, _set_raw

N = 6  # valid parameters of each kind before the near-misses: the first makes the template, the rest use it


def _values(i: int) -> tuple[np.ndarray, np.ndarray]:
    old = np.arange(4, dtype=np.float32) + i
    return old, old + np.float32(0.5)


def _write(path, near_misses: dict[str, str] | None = None, count: int = N) -> None:
    updates: dict[str, mdiff.Update] = {}
    for i in range(count):
        old, new = _values(i)
        updates[f"d{i:03d}"] = mdiff.dense(old, new)
        updates[f"r{i:03d}"] = mdiff.replace(new)
    for name in near_misses or {}:
        old, new = _values(len(updates))
        updates[name] = mdiff.dense(old, new) if name.startswith("d") else mdiff.replace(new)
    mdiff.write(path, updates, COMMIT, "gzip", check_updates=False)
    with h5py.File(path, "r+") as f:
        for name, text in (near_misses or {}).items():
            _set_raw(f[f"parameters/{name}"], "update", text.encode("utf-8"))


def _text(path, name: str) -> str:
    with h5py.File(path, "r") as f:
        return bytes(f[f"parameters/{name}"].attrs["update"]).rstrip(b"\0").decode("utf-8")


def _parse(path):
    """parse_parameters (the memo) and each member parsed alone (no memo), side by side."""
    with h5py.File(path, "r") as f:
        inventory, _ = inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS, None)
        header, _ = parse_header(inventory)
        assert header is not None
        minor = header.version[1]
        datasets = Datasets.of_file(f)
        entries, findings = parse_parameters(inventory, datasets, REGISTRY, minor, DEFAULT_LIMITS)
        alone: dict = {}
        alone_findings: list = []
        container = inventory.objects.get(parameters.PARAMETERS_PATH)
        for link, info in container.children.items():
            entry = parameters._parse_one(link, f"/parameters/{link}", info, datasets, alone_findings, REGISTRY, minor,
                                          DEFAULT_LIMITS, False, None)
            if entry is not None:
                alone[link] = entry
        return entries, findings, alone, alone_findings


def _same(entries, alone) -> None:
    assert list(entries) == list(alone)
    for name, entry in entries.items():
        other = alone[name]
        assert (entry.name, entry.path, entry.sound) == (other.name, other.path, other.sound)
        assert [(k, repr(v)) for k, v in entry.update.meta.items()] == [(k, repr(v)) for k, v in other.update.meta.items()]
        assert entry.update.kind is other.update.kind
        assert sorted(entry.update.data) == sorted(other.update.data)


def _near_misses(dense: str, replace: str) -> dict[str, str]:
    """Texts one step from the common shapes ``dense`` and ``replace`` (canonical texts mdiff wrote)."""
    h = dense.split('"sha256":"')[1][:64]
    b = dense.split('"base_sha256":"')[1][:64]
    return {
        "d_extra_key": dense.replace('"type"', '"extra":1,"type"'),
        "d_key_out_of_order": dense.replace(f'"base_sha256":"{b}","dtype":"float32"', f'"dtype":"float32","base_sha256":"{b}"'),
        "d_version_float": dense.replace('"version":1', '"version":1.0'),
        "d_shape_float": dense.replace('"shape":[4]', '"shape":[4.0]'),
        "d_shape_exponent": dense.replace('"shape":[4]', '"shape":[4e0]'),
        "d_short_hash": dense.replace(h, h[:63]),
        "d_long_hash": dense.replace(h, h + "0"),
        "d_upper_hex": dense.replace(h, h.upper()),
        "d_escaped_hex": dense.replace(f'"sha256":"{h}"', f'"sha256":"\\u00{ord(h[0]):02x}{h[1:]}"'),
        "d_version_bool": dense.replace('"version":1', '"version":true'),
        "d_shape_bool": dense.replace('"shape":[4]', '"shape":[true]'),
        "d_shape_negative": dense.replace('"shape":[4]', '"shape":[-4]'),
        "d_shape_wrong": dense.replace('"shape":[4]', '"shape":[5]'),
        "d_shape_2d": dense.replace('"shape":[4]', '"shape":[2,2]'),
        "d_dtype_wrong": dense.replace('"float32"', '"float64"'),
        "d_dtype_bool": dense.replace('"float32"', '"bool"'),
        "d_duplicate_hash": dense.replace('"type"', f'"sha256":"{h}","type"'),
        "d_same_hashes": dense.replace(b, h),
        "d_nested_hash": dense.replace('"type"', f'"stats":{{"sha256":"{h}"}},"type"'),
        "d_stats": dense.replace('"type"', '"stats":{"changed":4},"type"'),
        "d_stats_2": dense.replace('"type"', '"stats":{"changed":3},"type"'),
        "d_whitespace": dense.replace(",", ", "),
        "d_trailing_newline": dense + "\n",
        "d_version_2": dense.replace('"version":1', '"version":2'),
        "d_version_3": dense.replace('"version":1', '"version":3'),
        "d_not_json": dense[:-1],
        "d_type_replace": dense.replace('"dense"', '"replace"'),
        "d_no_hashes": dense.replace(f'"base_sha256":"{b}",', "").replace(f'"sha256":"{h}",', ""),
        "d_quote_in_key": dense.replace('"base_sha256"', '"a\\"base_sha256"'),
        "r_base_hash": replace.replace('"dtype"', f'"base_sha256":"{b}","dtype"'),
        "r_lossy": replace.replace('"type"', '"lossy":false,"type"'),
        "r_lossy_int": replace.replace('"type"', '"lossy":0,"type"'),
        "r_dense_type": replace.replace('"replace"', '"dense"'),
    }


def test_near_misses_give_the_full_parse_findings(tmp_path):
    plain = tmp_path / "plain.mdiff"
    _write(plain)
    misses = _near_misses(_text(plain, "d000"), _text(plain, "r000"))
    path = tmp_path / "near.mdiff"
    _write(path, misses)
    for name, text in misses.items():
        assert _text(path, name) == text, name
    entries, findings, alone, alone_findings = _parse(path)
    assert findings == alone_findings
    _same(entries, alone)
    # each near-miss is reported as today: a valid one is a parameter, an invalid one its finding
    codes: dict[str, str] = {}
    for x in findings:
        codes.setdefault(x.path.split("/")[2], x.code)
    assert codes == {
        "d_extra_key": "MD404", "d_short_hash": "MD404", "d_long_hash": "MD404", "d_upper_hex": "MD404",
        "d_version_bool": "MD404", "d_shape_bool": "MD404", "d_shape_negative": "MD404", "d_shape_wrong": "MD407",
        "d_shape_2d": "MD407", "d_dtype_wrong": "MD406", "d_dtype_bool": "MD406", "d_duplicate_hash": "MD401",
        "d_nested_hash": "MD404", "d_version_2": "MD403", "d_version_3": "MD403", "d_not_json": "MD401",
        "d_type_replace": "MD404", "d_no_hashes": "MD404", "d_quote_in_key": "MD404", "r_base_hash": "MD404",
        "r_lossy_int": "MD404", "r_dense_type": "MD405",
    }
    for name in ("d_key_out_of_order", "d_version_float", "d_shape_float", "d_shape_exponent", "d_escaped_hex",
                 "d_same_hashes", "d_stats", "d_stats_2", "d_whitespace", "d_trailing_newline", "r_lossy"):
        assert entries[name].sound, name


def test_a_second_file_of_near_misses_first(tmp_path):
    """The near-misses first, then the common shape: a template made from a text that sorts early."""
    plain = tmp_path / "plain.mdiff"
    _write(plain)
    misses = {"a" + k: v for k, v in _near_misses(_text(plain, "d000"), _text(plain, "r000")).items()}
    path = tmp_path / "first.mdiff"
    _write(path, {k: v for k, v in misses.items()})
    entries, findings, alone, alone_findings = _parse(path)
    assert findings == alone_findings
    _same(entries, alone)


@pytest.mark.parametrize("count", [1, 2, 40])
def test_one_full_parse_per_shape(tmp_path, monkeypatch, count):
    """Counted work: 40 dense and 40 replace parameters of one shape each cost two full parses of their
    `update` per shape (the first text, and the same text with other hashes), not 80."""
    path = tmp_path / "many.mdiff"
    _write(path, count=count)
    calls = []
    full = parameters._parse_meta

    def counting(*args, **kwargs):
        calls.append(args[0])
        return full(*args, **kwargs)

    monkeypatch.setattr(parameters, "_parse_meta", counting)
    with h5py.File(path, "r") as f:
        inventory, _ = inspect_structure(f, os.path.getsize(path), DEFAULT_LIMITS, None)
        entries, findings = parse_parameters(inventory, Datasets.of_file(f), REGISTRY, 2, DEFAULT_LIMITS)
    assert findings == [] and len(entries) == 2 * count
    assert len(calls) == 4  # d000 and r000, each twice
    assert all(entry.sound for entry in entries.values())


def test_members_that_nearly_have_the_usual_shape_give_the_full_parse_findings(tmp_path):
    """An `update` text seen before, and a group that is not quite the usual one (its one dataset, without
    attributes, of the shape and dtype its layout wants): the usual group's shorter path (session 6) must see each,
    and give the full parse's findings and members."""
    path = tmp_path / "members.mdiff"
    _write(path, count=N + 6)
    with h5py.File(path, "r+") as f:
        def key(name: str) -> str:
            return "value" if name.startswith("r") else next(iter(f[f"parameters/{name}"].keys()))

        note = np.array("x".encode(), dtype=h5py.string_dtype("utf-8", 1))  # fixed-length UTF-8: an attribute §8.2 reads
        f[f"parameters/d{N:03d}/{key(f'd{N:03d}')}"].attrs.create("note", note)  # an attribute on the dataset
        f[f"parameters/r{N:03d}/value"].attrs.create("note", note)
        f[f"parameters/d{N + 1:03d}"].create_dataset("extra", data=np.zeros(4, np.uint32))  # a second member
        f[f"parameters/r{N + 1:03d}"].create_dataset("extra", data=np.zeros(4, np.float32))
        for name, dtype in ((f"d{N + 2:03d}", np.uint64), (f"r{N + 2:03d}", np.float64)):  # another dtype
            member = key(name)
            del f[f"parameters/{name}/{member}"]
            f[f"parameters/{name}"].create_dataset(member, data=np.zeros(4, dtype))
        for name in (f"d{N + 3:03d}", f"r{N + 3:03d}"):  # another shape
            member = key(name)
            del f[f"parameters/{name}/{member}"]
            f[f"parameters/{name}"].create_dataset(member, data=np.zeros(5, np.uint32 if name[0] == "d" else np.float32))
        for name in (f"d{N + 4:03d}", f"r{N + 4:03d}"):  # the member a group
            member = key(name)
            del f[f"parameters/{name}/{member}"]
            f[f"parameters/{name}"].create_group(member)
        for name in (f"d{N + 5:03d}", f"r{N + 5:03d}"):  # no member
            del f[f"parameters/{name}/{key(name)}"]
    entries, findings, alone, alone_findings = _parse(path)
    assert findings == alone_findings
    _same(entries, alone)
    bad = {x.path.split("/")[2] for x in findings}
    assert bad == {f"{kind}{N + i:03d}" for kind in "dr" for i in range(6)}
    assert all(entry.sound for name, entry in entries.items() if name not in bad)


def test_the_last_templates_literals_cut_a_text_as_split_does():
    """_MetaMemo.template_of cuts a text of the last template's shape by its literals, not the pattern: the same
    template and hashes as split() and a look-up give, on texts that nearly have that shape (a digit made an
    upper-case or non-hex letter, a quote, a name's letter; a hash one digit short or long; a hole's neighbours)."""
    memo = parameters._MetaMemo()
    kind = REGISTRY["dense"]
    base_hash, hash_ = "ab" * 32, "0123456789abcdef" * 4
    text = ('{"base_sha256":"' + base_hash + '","dtype":"float32","shape":[4],"sha256":"' + hash_
            + '","type":"dense","version":1}')
    key, hashes = parameters._MetaMemo.split(text)
    assert key is not None and hashes == [base_hash, hash_]
    template = memo.record(key, hashes, json.loads(text), kind, "/parameters/x", REGISTRY, parameters.FORMAT_MINOR,
                           DEFAULT_LIMITS, False)
    assert template is not None
    near = [text, text.replace(hash_, "f" * 64), text.replace(base_hash, "0" * 64)]
    for i in range(0, len(text), 3):
        for c in '0aAfg"_sh:}\\':
            near.append(text[:i] + c + text[i + 1:])  # one character changed
        near.append(text[:i] + text[i + 1:])  # one removed
        near.append(text[:i] + "a" + text[i:])  # one added
    near += [text.replace('"sha256"', '"xsha256"'), text.replace('"base_sha256"', '"sha256"'), "", None, 3]
    taken = 0
    for other in near:
        found, found_hashes = memo.template_of(other)
        key, split_hashes = parameters._MetaMemo.split(other)
        expected = None if key is None else memo.templates.get(key)
        assert found is expected, other
        assert found_hashes == (split_hashes if expected is not None else None), other
        taken += found is not None
    assert taken == 141  # the first three, and those with a digit of a hash changed to a digit or a-f

