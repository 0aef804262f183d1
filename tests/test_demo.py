"""`mdiff demo`: a reduced run (DemoConfig.quick, `mdiff demo --quick`) and what it must have made.

The demo needs its extra (torch, scikit-learn, matplotlib: `pip install -e '.[demo]'`); without it
these tests skip, except the one that checks the command's own message about it.
"""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np
import pytest

import mdiff
from mdiff.cli.main import main
from mdiff.demo import DemoConfig, missing_packages
from mdiff.repo import Repository

MISSING = missing_packages()
needs_demo = pytest.mark.skipif(
    bool(MISSING), reason=f"mdiff demo needs {', '.join(MISSING)}: pip install -e '.[demo]'")

PARAMETERS = ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from mdiff.demo import run_demo

    messages: list[str] = []
    result = run_demo(tmp_path_factory.mktemp("demo") / "repo", DemoConfig.quick(), report=messages.append)
    assert messages, "progress goes to the report callback"
    return result


def commit_ids(result) -> dict[str, str]:
    return {row.label: row.commit_id for row in result.rows}


# ---------------------------------------------------------------- the command without its extra


def test_without_the_extra_the_command_names_the_packages_and_exits_2(tmp_path, monkeypatch, capsys):
    import mdiff.demo

    monkeypatch.setattr(mdiff.demo, "missing_packages", lambda: ["scikit-learn==1.9.1", "matplotlib==3.11.2"])
    assert main(["demo", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "scikit-learn" in err and "matplotlib" in err and "pip install -e '.[demo]'" in err
    assert not (tmp_path / "d").exists()  # nothing was started


@needs_demo
def test_an_existing_repository_is_refused_before_any_training(tmp_path, capsys):
    Repository.init(tmp_path / "r")
    assert main(["demo", str(tmp_path / "r")]) == 1
    assert "MD801" in capsys.readouterr().err
    assert Repository.find(tmp_path / "r").commit_ids() == []


# ---------------------------------------------------------------- the repository it makes


@needs_demo
def test_branches_and_commits(demo):
    repo = Repository.find(demo.directory)
    ids = commit_ids(demo)
    assert sorted(repo.commit_ids()) == sorted(ids.values())  # root, three fine-tunes, merge
    assert repo.branches() == {"main": ids["merge"], "full-ft": ids["full-ft"], "fish": ids["fish"], "lora": ids["lora"]}
    assert repo.head() == ("main", ids["merge"])
    assert repo.parents(ids["root"]) == ()
    for label in ("full-ft", "fish", "lora"):
        assert repo.parents(ids[label]) == (ids["root"],)
    assert repo.parents(ids["merge"]) == (ids["full-ft"], ids["lora"])
    assert repo.metadata(ids["merge"]).meta["merge_strategy"] == "weighted:0.5"


@needs_demo
def test_full_fine_tuning_is_stored_exactly(demo):
    with mdiff.open(Repository.find(demo.directory).commit_path(demo.row("full-ft").commit_id)) as diff:
        assert sorted(diff) == PARAMETERS
        assert {diff[name].type for name in diff} <= {"dense", "sparse"}


@needs_demo
def test_the_sparse_commit_stores_exactly_the_fish_mask(demo):
    masks = demo.fish_masks
    total = sum(m.size for m in masks.values())
    assert sorted(masks) == PARAMETERS
    assert sum(int(m.sum()) for m in masks.values()) == math.ceil(demo.config.fish_fraction * total)
    with mdiff.open(Repository.find(demo.directory).commit_path(demo.row("fish").commit_id)) as diff:
        assert sorted(diff) == sorted(name for name, m in masks.items() if m.any())
        for name in diff:
            update = diff[name]
            assert update.type == "sparse" and not update.meta.get("lossy")
            np.testing.assert_array_equal(update.array("indices"), np.flatnonzero(masks[name].reshape(-1)))


@needs_demo
def test_the_lora_commit_holds_low_rank_updates_of_the_linear_layers(demo):
    config = demo.config
    with mdiff.open(Repository.find(demo.directory).commit_path(demo.row("lora").commit_id)) as diff:
        assert sorted(diff) == ["fc1.weight", "fc2.weight"]
        for name in diff:
            update = diff[name]
            out, inp = update.shape
            assert update.type == "low_rank"
            assert update.meta["scale"] == config.lora_alpha / config.lora_rank
            assert update.data["A"].shape == (out, config.lora_rank)  # lora_B
            assert update.data["B"].shape == (config.lora_rank, inp)  # lora_A
    row = demo.row("lora")
    assert row.within_tolerance == ["fc1.weight", "fc2.weight"] and row.exact == ["fc1.bias", "fc2.bias"]


@needs_demo
def test_every_checkout_is_verified(demo):
    assert [row.label for row in demo.rows] == ["root", "full-ft", "fish", "lora", "merge"]
    for row in demo.rows:
        assert row.verified, row.label
        assert row.same_predictions, row.label
        assert (row.checkout_accuracy, row.checkout_rotated_accuracy) == (row.accuracy, row.rotated_accuracy)
        if row.label != "lora":
            assert len(row.exact) == 4 and row.max_abs_difference == 0.0, row.label
        assert row.diff_bytes == Repository.find(demo.directory).commit_path(row.commit_id).stat().st_size
    assert demo.rows[0].update_types == {"replace": 4}
    # fine-tuning on rotated digits helps on rotated digits
    assert demo.row("full-ft").rotated_accuracy > demo.row("root").rotated_accuracy


@needs_demo
def test_onnx_models_predict_what_pytorch_predicts(demo):
    from mdiff.demo import data, onnx_model

    digits = data.load(demo.config)
    assert [c.file.name for c in demo.onnx] == ["main.onnx", "fish.onnx", "main-from-diffs.onnx"]
    assert demo.onnx_initializers_equal
    for check in demo.onnx:
        assert check.same_predictions  # identical predictions, not just the same accuracy
        assert (check.accuracy, check.rotated_accuracy) == (check.torch_accuracy, check.torch_rotated_accuracy)
        assert check.max_logit_difference < 1e-4
        row = demo.row(check.label)
        assert (check.accuracy, check.rotated_accuracy) == (row.accuracy, row.rotated_accuracy)
    # and once more here, from the file: onnxruntime on the diff-applied fish model
    logits = onnx_model.run(demo.directory / "onnx" / "fish.onnx", digits.test_x)
    assert float(np.mean(logits.argmax(1) == digits.test_y)) == demo.row("fish").accuracy


@needs_demo
def test_the_plot_is_a_valid_png(demo):
    data = demo.plot_path.read_bytes()
    assert demo.plot_path == demo.directory / "relative-change.png"
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks = 8, []
    while position < len(data):  # every chunk's CRC holds, IHDR first, IEND last
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length:position + 12 + length])
        assert zlib.crc32(kind + body) == crc
        chunks.append((kind, body))
        position += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height = struct.unpack(">II", chunks[0][1][:8])
    assert width > 100 and height > 100
    for label in ("full-ft", "fish", "lora", "merge"):
        assert sorted(demo.row(label).relative_change) == PARAMETERS


@needs_demo
def test_every_commit_validates(demo):
    assert len(demo.commit_files) == 5
    for path in demo.commit_files:
        assert not [f for f in mdiff.validate(path) if f.is_error], path


# ---------------------------------------------------------------- the command


@needs_demo
def test_the_command_prints_the_story_and_makes_the_same_commits(demo, tmp_path, capsys):
    assert main(["demo", "--quick", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    for row in demo.rows:  # seeded: the same commit ids as the library run
        assert row.commit_id[:12] in out
    assert Repository.find(tmp_path / "again").branches() == Repository.find(demo.directory).branches()
    for text in ("diff .mdiff", "full .safetensors", "sha256 4/4 equal", "within §7.5 tolerance",
                 "identical predictions", "$ mdiff log --all", "$ mdiff dump", "$ mdiff validate",
                 "valid (0 errors", "relative-change.png"):
        assert text in out, text
    assert "INVALID" not in out
