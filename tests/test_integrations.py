"""The training loop: transformers' Trainer with MdiffCallback, and a plain PyTorch loop (tools/examples)."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mdiff.checkpoints import load_checkpoint  # noqa: E402
from mdiff.errors import RepositoryError  # noqa: E402
from mdiff.integrations.background import BackgroundCommits, frozen_state  # noqa: E402
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


# --- commits in the background (issue 32): the Trainer never waits on a commit -----------------------

_TRAINING_STATE = {"optimizer.pt", "scheduler.pt", "training_args.bin", "rng_state.pth", "scaler.pt"}


def _trainer(tmp_path, callbacks, trainer_class=None, eval_dataset=None, **options):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    arguments = {"output_dir": str(tmp_path / "run"), "max_steps": 6, "save_steps": 2, "logging_steps": 2,
                 "per_device_train_batch_size": 4, "learning_rate": 1e-3, "report_to": [], "use_cpu": True,
                 "seed": 0, "disable_tqdm": True, **options}
    return (trainer_class or transformers.Trainer)(
        model=transformers.LlamaForCausalLM(config), args=transformers.TrainingArguments(**arguments),
        train_dataset=_Tokens(32), eval_dataset=eval_dataset, callbacks=callbacks)


def _dated(tmp_path, **options):
    return MdiffCallback(tmp_path / "history", date=lambda step: f"2026-05-01T00:00:{step:02d}Z", **options)


def test_on_save_returns_while_the_commit_is_still_running(tmp_path, monkeypatch):
    # Each commit blocks until the probe, which runs after MdiffCallback.on_save, lets it go: had on_save
    # waited for its commit, the commit would never have been let go (and fails after 60 s).
    started, release = threading.Semaphore(0), threading.Semaphore(0)
    make_commit = Repository.make_commit

    def held_commit(self, *args, **kwargs):
        started.release()
        if not release.acquire(timeout=60):
            raise AssertionError("on_save waited for its commit")
        return make_commit(self, *args, **kwargs)

    monkeypatch.setattr(Repository, "make_commit", held_commit)
    callback = _dated(tmp_path)
    finished_at_save: list[int] = []

    class Probe(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            assert started.acquire(timeout=60)  # this save's commit is running, held
            finished_at_save.append(len(callback.summaries))
            release.release()

    _trainer(tmp_path, [callback, Probe()]).train()
    assert finished_at_save == [0, 1, 2]  # at each on_save, only the earlier saves' commits had finished
    assert [Repository.find(tmp_path / "history").metadata(c).meta["step"] for c in callback.commits] == ["2", "4", "6"]


def test_a_save_costs_the_training_thread_no_more_than_1_2x_the_save_itself(tmp_path):
    # CPU time of the training thread (not wall time): the Trainer's save_model against MdiffCallback.on_save.
    cpu = {"save": 0.0, "on_save": 0.0}

    class Timed(transformers.Trainer):
        def save_model(self, *args, **kwargs):
            started = time.thread_time()
            super().save_model(*args, **kwargs)
            cpu["save"] += time.thread_time() - started

    class TimedCallback(MdiffCallback):
        def on_save(self, *args, **kwargs):
            started = time.thread_time()
            super().on_save(*args, **kwargs)
            cpu["on_save"] += time.thread_time() - started

    callback = TimedCallback(tmp_path / "history")
    _trainer(tmp_path, [callback], Timed, save_only_model=True).train()
    assert len(callback.commits) == 3
    assert cpu["save"] + cpu["on_save"] <= 1.2 * cpu["save"], cpu


def test_every_save_is_committed_in_order_bit_for_bit(tmp_path):
    callback = _dated(tmp_path, branch="run")
    _trainer(tmp_path, [callback]).train()
    repo = Repository.find(tmp_path / "history")
    assert len(callback.commits) == 3 and repo.head() == ("run", callback.commits[-1])
    assert first_parent_line(repo, callback.commits[-1]) == callback.commits[::-1]
    for step, commit_id in zip((2, 4, 6), callback.commits):
        folder, out = tmp_path / "run" / f"checkpoint-{step}", tmp_path / f"out-{step}"
        repo.checkout(commit_id, out)
        kept = {p.name for p in folder.iterdir()} - _TRAINING_STATE
        assert {p.name for p in out.iterdir()} == kept and "model.safetensors" in kept
        for name in kept:
            assert (out / name).read_bytes() == (folder / name).read_bytes(), (step, name)


def _late_commits(tmp_path, monkeypatch, **options):
    """A run whose every commit starts reading only once the Trainer has reached its next save (or the end
    of training), and checks that no save started meanwhile and that its folder is still there."""
    reached, saves = threading.Condition(), {"reached": 0, "started": 0}
    reached_at_save: dict[str, int] = {}  # checkpoint folder → arrivals counted when it was saved
    make_commit = Repository.make_commit

    def late_commit(self, folder, *args, **kwargs):
        with reached:
            assert reached.wait_for(lambda: saves["reached"] > reached_at_save[folder.name], timeout=60)
        started = saves["started"]
        summary = make_commit(self, folder, *args, **kwargs)
        assert saves["started"] == started and folder.is_dir(), f"a save started while {folder} was committed"
        return summary

    class Saving(transformers.Trainer):
        def _save_checkpoint(self, *args, **kwargs):
            saves["started"] += 1
            super()._save_checkpoint(*args, **kwargs)

    class Probe(transformers.TrainerCallback):  # runs before MdiffCallback's hooks
        def arrive(self):
            with reached:
                saves["reached"] += 1
                reached.notify_all()

        def on_step_end(self, args, state, control, **kwargs):
            if control.should_save:
                self.arrive()

        def on_log(self, args, state, control, **kwargs):
            if control.should_training_stop:
                self.arrive()

        def on_save(self, args, state, control, **kwargs):
            with reached:
                reached_at_save[f"checkpoint-{state.global_step}"] = saves["reached"]

    monkeypatch.setattr(Repository, "make_commit", late_commit)
    callback = _dated(tmp_path)
    _trainer(tmp_path, [Probe(), callback], Saving, **options).train()
    return callback, saves["started"]


def test_no_commit_reads_a_folder_while_the_trainer_saves_and_rotates(tmp_path, monkeypatch):
    # save_total_limit=1: each save deletes the folder before it
    callback, saves = _late_commits(tmp_path, monkeypatch, save_total_limit=1)
    assert saves == 3 and len(callback.commits) == 3
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoint-6"]
    repo = Repository.find(tmp_path / "history")
    out = tmp_path / "out"
    repo.checkout(callback.commits[-1], out)
    assert (out / "model.safetensors").read_bytes() == (tmp_path / "run" / "checkpoint-6" / "model.safetensors").read_bytes()


def test_the_last_commit_is_done_before_the_trainer_deletes_all_but_the_best_checkpoint(tmp_path, monkeypatch):
    # load_best_model_at_end with save_total_limit=1: after the run's last log the Trainer deletes every
    # checkpoint but the best (here the first: the highest loss is "best"), the one just saved included.
    callback, saves = _late_commits(
        tmp_path, monkeypatch, save_total_limit=1, eval_strategy="steps", eval_steps=2, load_best_model_at_end=True,
        metric_for_best_model="loss", greater_is_better=True, eval_dataset=_Tokens(8))
    assert saves == 3 and len(callback.commits) == 3
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoint-2"]


def _failing_first_commit(monkeypatch):
    calls = []
    make_commit = Repository.make_commit

    def failing(self, folder, *args, **kwargs):
        calls.append(folder.name)
        if len(calls) == 1:
            raise RepositoryError("MD803", "another mdiff process is writing to this repository; try again")
        return make_commit(self, folder, *args, **kwargs)

    monkeypatch.setattr(Repository, "make_commit", failing)
    return calls


def test_a_failed_commit_is_raised_at_the_next_save(tmp_path, monkeypatch):
    calls = _failing_first_commit(monkeypatch)
    callback = _dated(tmp_path)
    with pytest.raises(RepositoryError) as raised:
        _trainer(tmp_path, [callback]).train()
    assert raised.value.code == "MD803" and raised.value.message.startswith("another mdiff process is writing")
    assert calls == ["checkpoint-2"] and callback.commits == []
    assert not (tmp_path / "run" / "checkpoint-4").exists()  # raised before the next save began
    callback.wait()  # raised once


def test_a_failed_last_commit_is_raised_at_the_end_of_training(tmp_path, monkeypatch):
    calls = _failing_first_commit(monkeypatch)
    callback = _dated(tmp_path)
    with pytest.raises(RepositoryError) as raised:
        _trainer(tmp_path, [callback], max_steps=2).train()
    assert raised.value.code == "MD803" and calls == ["checkpoint-2"] and callback.commits == []


def test_without_background_the_commit_is_made_in_on_save(tmp_path, monkeypatch):
    callback = _dated(tmp_path, background=False)
    made_at_save: list[int] = []

    class Probe(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            made_at_save.append(len(callback.summaries))

    _trainer(tmp_path, [callback, Probe()]).train()
    assert made_at_save == [1, 2, 3]


def test_background_commits_run_in_order_and_raise_an_error_once():
    ran: list[int] = []
    done: list[tuple[int, int]] = []
    with BackgroundCommits() as commits:
        for i in range(3):
            commits.submit(lambda i=i: ran.append(i) or i * 10, done=lambda result, i=i: done.append((i, result)))
    assert ran == [0, 1, 2] and done == [(0, 0), (1, 10), (2, 20)]

    def fail():
        raise RepositoryError("MD803", "busy")

    commits = BackgroundCommits()
    commits.submit(fail, what="commit one")
    with pytest.raises(RepositoryError) as raised:
        commits.submit(lambda: ran.append(99))
    assert raised.value.code == "MD803" and raised.value.message == "busy" and 99 not in ran
    if sys.version_info >= (3, 11):
        assert raised.value.__notes__ == ["raised by commit one, which ran on a background thread"]
    commits.submit(lambda: ran.append(3))  # the error was raised: commits go on
    commits.close()
    assert ran == [0, 1, 2, 3]

    inline = BackgroundCommits(background=False)
    inline.submit(lambda: ran.append(4))
    assert ran[-1] == 4 and not inline.busy
    with pytest.raises(RepositoryError):
        inline.submit(fail)


def test_frozen_state_copies_the_tensors():
    weights = {"w": torch.arange(4, dtype=torch.bfloat16), "b": np.arange(3, dtype=np.float32)}
    frozen = frozen_state(weights)
    weights["w"].add_(1)
    weights["b"] += 1
    assert frozen["w"].view(np.uint16).tolist() == torch.arange(4, dtype=torch.bfloat16).view(torch.int16).tolist()
    assert frozen["b"].tolist() == [0.0, 1.0, 2.0]


def test_a_commit_in_flight_finishes_when_the_interpreter_exits(tmp_path):
    script = f"""
import concurrent.futures.thread, time
import numpy as np
from mdiff.integrations.background import BackgroundCommits
from mdiff.repo import Repository

repo = Repository.init({str(tmp_path / "history")!r})

def after_the_main_thread():
    # the script has ended and the interpreter is exiting: concurrent.futures' exit hook has run (its flag),
    # which refuses new work to every pool and waits for this thread
    while not concurrent.futures.thread._shutdown:
        time.sleep(0.01)
    return repo.commit({{"w": np.arange(1 << 20, dtype=np.float32)}}, "made at exit")

BackgroundCommits().submit(after_the_main_thread)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    repo = Repository.find(tmp_path / "history")
    assert repo.metadata(repo.head()[1]).message == "made at exit"
    assert np.array_equal(repo.state(repo.head()[1])["w"], np.arange(1 << 20, dtype=np.float32))
