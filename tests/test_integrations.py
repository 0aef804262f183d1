"""The training loop: transformers' Trainer with MdiffCallback, and a plain PyTorch loop (tools/examples)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mdiff.checkpoints import load_checkpoint  # noqa: E402
from mdiff.integrations.transformers import MdiffCallback, logged_metrics  # noqa: E402
from mdiff.repo import Repository  # noqa: E402
from mdiff.repo.history import first_parent_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int):
        generator = torch.Generator().manual_seed(3)
        self.items = torch.randint(0, 64, (count, 8), generator=generator)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return {"input_ids": self.items[i], "labels": self.items[i]}


def test_the_trainer_callback_commits_every_save(tmp_path):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=6, save_steps=2, logging_steps=2, per_device_train_batch_size=4,
        learning_rate=1e-3, report_to=[], use_cpu=True, save_total_limit=1, seed=0, disable_tqdm=True)
    callback = MdiffCallback(tmp_path / "history", branch="run-1", message="trainer step {step}",
                             date=lambda step: f"2026-05-01T00:00:{step:02d}Z")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(32), callbacks=[callback])
    trainer.train()
    repo = Repository.find(tmp_path / "history")
    assert len(callback.commits) == 3 and repo.head() == ("run-1", callback.commits[-1])
    assert first_parent_line(repo, callback.commits[-1]) == callback.commits[::-1]
    for step, commit_id in zip((2, 4, 6), callback.commits):
        commit = repo.metadata(commit_id)
        assert commit.message == f"trainer step {step}" and commit.date == f"2026-05-01T00:00:{step:02d}Z"
        assert commit.meta["step"] == str(step) and float(commit.meta["loss"]) > 0
        assert "learning_rate" in commit.meta and "epoch" in commit.meta
    with repo.open_state(callback.commits[-1]) as state:
        assert "config.json" in state.files and "trainer_state.json" in state.files
        assert not {"optimizer.pt", "scheduler.pt", "training_args.bin", "rng_state.pth"} & set(state.files)
    out = tmp_path / "out"
    repo.checkout(callback.commits[-1], out)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], value.cpu()), name
    # the last checkpoint folder the Trainer kept is the last commit, byte for byte
    kept = tmp_path / "run" / "checkpoint-6" / "model.safetensors"
    assert (out / "model.safetensors").read_bytes() == kept.read_bytes()


def test_logged_metrics_take_the_numbers_of_the_step():
    history = [{"loss": 2.5, "step": 2, "epoch": 0.5}, {"loss": 2.0, "grad_norm": 1.25, "step": 4},
               {"eval_loss": 2.25, "step": 4, "note": "x", "flag": True, "eval_runtime": 0.25,
                "eval_samples_per_second": 100.0, "total_flos": 1e9}]
    assert logged_metrics(history, 4) == {"loss": "2", "grad_norm": "1.25", "eval_loss": "2.25"}
    assert logged_metrics(history, 3) == {}


def test_the_plain_pytorch_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["training_loop.py", str(tmp_path / "history"), "--steps", "30"])
    runpy.run_path(str(ROOT / "tools" / "examples" / "training_loop.py"), run_name="__main__")
    out = capsys.readouterr().out
    repo = Repository.find(tmp_path / "history")
    commits = first_parent_line(repo, repo.head()[1])
    assert len(commits) == 4  # the initial weights and steps 10, 20, 30
    assert "reloaded step 20 with load_state_dict(strict=True)" in out
    assert set(load_checkpoint(tmp_path / "history" / "best.safetensors")) == set(repo.state(commits[0]))
