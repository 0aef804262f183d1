"""`mdiff demo`: a reduced run (DemoConfig.quick, `mdiff demo --quick`) and what it must have made.

The demo needs its extra (torch, transformers, peft, accelerate, scikit-learn, matplotlib:
`pip install -e '.[demo]'`); without it these tests skip, except the one that checks the command's
own message about it.
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import mdiff
from mdiff.cli.main import main
from mdiff.demo import DemoConfig, missing_packages
from mdiff.repo import Repository

MISSING = missing_packages()
needs_demo = pytest.mark.skipif(
    bool(MISSING), reason=f"mdiff demo needs {', '.join(MISSING)}: pip install -e '.[demo]'")

LABELS = ["base", "step 10", "step 20", "fish", "lora", "merge"]  # DemoConfig.quick: saves at steps 10 and 20
LAYERS = DemoConfig.quick().layers
PARAMETERS = 5 + 16 * LAYERS + 4  # embeddings (3 tables, LayerNorm), 16 per layer, pooler, classifier
FOLDER_FILES = {"config.json", "tokenizer.json", "tokenizer_config.json"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from mdiff.demo import run_demo

    messages: list[str] = []
    result = run_demo(tmp_path_factory.mktemp("demo") / "repo", DemoConfig.quick(), report=messages.append)
    assert messages, "progress goes to the report callback"
    return result


def repo_of(result) -> Repository:
    return Repository.find(result.directory)


def ids(result) -> dict[str, str]:
    return {row.label: row.commit_id for row in result.rows}


def test_quick_is_the_same_model_with_fewer_steps():
    full, quick = DemoConfig(), DemoConfig.quick()
    assert (quick.hidden, quick.layers, quick.intermediate) == (full.hidden, full.layers, full.intermediate)
    assert quick.finetune_steps // quick.save_steps == 2
    assert quick.base_steps < full.base_steps and quick.finetune_steps < full.finetune_steps


# ---------------------------------------------------------------- the command without its extra


def test_without_the_extra_the_command_names_the_packages_and_exits_2(tmp_path, monkeypatch, capsys):
    import mdiff.demo

    monkeypatch.setattr(mdiff.demo, "missing_packages", lambda: ["transformers==5.18.0", "peft==0.21.0"])
    assert main(["demo", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "transformers==5.18.0" in err and "peft" in err and "pip install -e '.[demo]'" in err
    assert not (tmp_path / "d").exists()  # nothing was started


@needs_demo
def test_an_existing_repository_is_refused_before_any_training(tmp_path, capsys):
    Repository.init(tmp_path / "r")
    assert main(["demo", str(tmp_path / "r")]) == 1
    assert "MD801" in capsys.readouterr().err
    assert Repository.find(tmp_path / "r").commit_ids() == []
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [".mdiff"]  # nothing trained, nothing written


# ---------------------------------------------------------------- the repository it makes


@needs_demo
def test_branches_and_commits(demo):
    repo, made = repo_of(demo), ids(demo)
    assert [row.label for row in demo.rows] == LABELS
    assert sorted(repo.commit_ids()) == sorted(made.values())
    assert repo.branches() == {"main": made["merge"], "finetune": made["step 20"], "fish": made["fish"],
                               "lora": made["lora"]}
    assert repo.head() == ("main", made["merge"])
    assert repo.parents(made["base"]) == ()
    assert repo.parents(made["step 10"]) == (made["base"],)
    assert repo.parents(made["step 20"]) == (made["step 10"],)
    assert repo.parents(made["fish"]) == repo.parents(made["lora"]) == (made["base"],)
    assert repo.parents(made["merge"]) == (made["step 20"], made["lora"])
    assert repo.metadata(made["merge"]).meta["merge_strategy"] == "weighted:0.5"
    dates = [repo.metadata(made[label]).date for label in LABELS]
    assert dates == [f"2026-01-01T00:0{i}:00Z" for i in range(len(LABELS))]  # fixed: the same ids every run


@needs_demo
def test_the_root_is_the_sharded_save_pretrained_folder(demo):
    base = demo.directory / "base"
    shards = sorted(p.name for p in base.glob("model-*.safetensors"))
    assert len(shards) >= 2 and (base / "model.safetensors.index.json").is_file()
    row = demo.row("base")
    assert row.update_types == {"replace": PARAMETERS}
    assert row.files == {name: "replace" for name in FOLDER_FILES}
    assert set(row.proof.identical_files) == {p.name for p in base.iterdir()}  # shards, index, config, tokenizer
    assert repo_of(demo).metadata(row.commit_id).author.name == "mdiff demo"


@needs_demo
def test_every_trainer_save_is_a_commit_of_its_checkpoint_folder(demo):
    repo = repo_of(demo)
    for step in (10, 20):
        row = demo.row(f"step {step}")
        meta = repo.metadata(row.commit_id).meta
        assert meta["step"] == str(step) and float(meta["loss"]) > 0
        assert {"epoch", "grad_norm", "learning_rate"} <= set(meta)
        assert row.message == f"fine-tune on shifted digits, step {step}"
        assert sum(row.update_types.values()) == PARAMETERS and set(row.update_types) <= {"dense", "sparse"}
        assert row.files == {"trainer_state.json": "replace"}  # config and tokenizer unchanged: not stored again
        saved = demo.directory / "runs" / "finetune" / f"checkpoint-{step}"
        assert set(row.proof.identical_files) == {p.name for p in saved.iterdir()} - {"training_args.bin"}
        assert row.proof.source == f"runs/finetune/checkpoint-{step}/"


@needs_demo
def test_fine_tuning_changes_are_realistic_and_stored_smaller(demo):
    for label in ("step 10", "step 20"):
        row = demo.row(label)
        changes = row.relative_change
        assert len(changes) == PARAMETERS and all(0 < v < 0.1 for v in changes.values()), label
        assert 1e-5 < float(np.median(list(changes.values()))) < 1e-2, label  # not the 20–170 % of a toy
        layer_norms = [v for name, v in changes.items() if name.endswith("LayerNorm.weight")]
        assert max(layer_norms) < 1e-3, label
        assert row.diff_bytes < 0.8 * row.full_bytes, label
    assert demo.row("fish").diff_bytes < 0.1 * demo.row("fish").full_bytes
    assert demo.row("lora").diff_bytes < 0.05 * demo.row("lora").full_bytes
    assert len({row.full_bytes for row in demo.rows}) <= 2  # sharded or not, the same weights each time
    assert demo.repository_bytes < sum(row.full_bytes for row in demo.rows)


@needs_demo
def test_the_sparse_commit_stores_exactly_the_fish_mask(demo):
    masks = demo.fish_masks
    total = sum(m.size for m in masks.values())
    assert len(masks) == PARAMETERS
    assert sum(int(m.sum()) for m in masks.values()) == math.ceil(demo.config.fish_fraction * total)
    with mdiff.open(repo_of(demo).commit_path(demo.row("fish").commit_id)) as diff:
        assert sorted(diff) == sorted(name for name, m in masks.items() if m.any())
        for name in diff:
            update = diff[name]
            assert update.type == "sparse" and not update.meta.get("lossy")
            np.testing.assert_array_equal(update.array("indices"), np.flatnonzero(masks[name]))
    assert demo.row("fish").proof.source == "model.state_dict()"


@needs_demo
def test_the_lora_commit_holds_low_rank_updates_and_the_replaced_classifier(demo):
    config = demo.config
    targets = [f"bert.encoder.layer.{i}.attention.self.{m}.weight" for i in range(LAYERS) for m in ("query", "value")]
    with mdiff.open(repo_of(demo).commit_path(demo.row("lora").commit_id)) as diff:
        assert sorted(diff) == sorted(targets + ["classifier.bias", "classifier.weight"])
        for name in targets:
            update = diff[name]
            out, inp = update.shape
            assert update.type == "low_rank"
            assert update.meta["scale"] == config.lora_alpha / config.lora_rank == demo.lora_scale
            assert update.data["A"].shape == (out, config.lora_rank)  # PEFT's lora_B
            assert update.data["B"].shape == (config.lora_rank, inp)  # PEFT's lora_A
        assert diff["classifier.weight"].type == diff["classifier.bias"].type == "replace"
        assert diff.commit.meta["peft_adapter"] == "adapter"
    proof = demo.row("lora").proof
    assert sorted(proof.within_tolerance) == sorted(targets)
    assert len(proof.exact) == PARAMETERS - len(targets)


@needs_demo
def test_every_checkout_is_what_was_trained(demo):
    repo = repo_of(demo)
    for row in demo.rows:
        proof = row.proof
        assert len(proof.exact) + len(proof.within_tolerance) == PARAMETERS, row.label
        if row.label != "lora":  # exact updates: the reloaded model's logits, bit for bit
            assert proof.logits_equal and proof.max_logit_difference == 0.0 and not proof.within_tolerance, row.label
        assert row.diff_bytes == repo.commit_path(row.commit_id).stat().st_size
        folder = demo.directory / "checkouts" / row.label.replace(" ", "-")
        assert row.full_bytes == sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        assert row.commit_seconds > 0 and row.checkout_seconds > 0
    assert demo.row("base").relative_change == {}
    # fine-tuning on shifted digits helps on shifted digits
    assert demo.row("step 20").shifted_accuracy > demo.row("base").shifted_accuracy


@needs_demo
def test_a_checkout_loads_with_the_auto_classes_and_scores_as_the_table_says(demo):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from mdiff.demo import data

    folder = demo.directory / "checkouts" / "merge"
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True).eval()
    digits = data.load(demo.config)
    with torch.no_grad():
        for texts, accuracy in ((digits.test_text, demo.row("merge").accuracy),
                                (digits.test_shifted_text, demo.row("merge").shifted_accuracy)):
            logits = model(**tokenizer(texts, return_tensors="pt")).logits
            assert float(np.mean(logits.argmax(-1).numpy() == digits.test_labels)) == accuracy


@needs_demo
def test_the_merge_is_the_weighted_average_bit_for_bit(demo):
    from mdiff.demo.pipeline import expected_merge

    repo, made = repo_of(demo), ids(demo)
    ours, theirs, base = (repo.checkout(made[label]) for label in ("step 20", "lora", "base"))
    merged = repo.checkout(made["merge"])
    assert set(merged) == set(ours)
    for name, value in merged.items():
        assert value.tobytes() == expected_merge("weighted:0.5", ours[name], theirs[name], base[name]).tobytes(), name


@needs_demo
def test_a_state_dict_checkout_loads_strictly(demo):
    import torch
    from transformers import BertForSequenceClassification

    folder = demo.directory / "checkouts" / "fish"
    reference = BertForSequenceClassification.from_pretrained(folder, local_files_only=True)
    model = BertForSequenceClassification(reference.config)
    model.load_state_dict(repo_of(demo).checkout(demo.row("fish").commit_id, framework="pt"), strict=True)
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name


@needs_demo
def test_the_plot_is_a_valid_png_on_a_log_scale(demo):
    from mdiff.demo.plot import relative_change_figure

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
    parameters = list(demo.row("step 10").relative_change)
    figure = relative_change_figure(parameters, {r.label: r.relative_change for r in demo.rows[1:]}, "t")
    (axes,) = figure.axes
    assert axes.get_yscale() == "log"
    assert len(axes.get_xticklabels()) == PARAMETERS


@needs_demo
def test_every_commit_validates(demo):
    assert [Path(p) for p in demo.commit_files] == [repo_of(demo).commit_path(r.commit_id) for r in demo.rows]
    for path in demo.commit_files:
        assert not [f for f in mdiff.validate(path) if f.is_error], path
    assert set(demo.findings) == set(ids(demo).values())


# ---------------------------------------------------------------- the command


@needs_demo
def test_the_command_prints_the_story_and_makes_the_same_commits(demo, tmp_path, capsys):
    assert main(["demo", "--quick", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    for row in demo.rows:  # seeded, with fixed dates: the same commit ids as the library run
        assert row.commit_id[:12] in out
    assert Repository.find(tmp_path / "again").branches() == repo_of(demo).branches()
    for text in (".mdiff MB", "git-lfs MB", "rel. change", "Trainer step 20", "FISH mask (state dict)",
                 "LoRA (import-peft)", "files identical, logits equal", "within §7.5", "$ mdiff log --all",
                 "$ mdiff dump", "meta     step=20", "6 valid, 0 errors", "relative-change.png"):
        assert text in out, text
    assert "INVALID" not in out
    assert out.endswith(f"\nsee it in your browser (the history graph, each commit's parameters and heat map):\n  mdiff view {tmp_path / 'again'}\n")
