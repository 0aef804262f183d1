"""A ``transformers`` ``TrainerCallback`` that commits each checkpoint the Trainer saves.

    from mdiff.integrations.transformers import MdiffCallback

    trainer = Trainer(model, args, train_dataset=data, callbacks=[MdiffCallback("runs/my-model")])
    trainer.train()   # every save (save_steps, save_strategy) becomes a commit: `mdiff log -C runs/my-model`

Each commit is the checkpoint folder the Trainer just wrote (``output_dir/checkpoint-<step>``) — the
weights, shard by shard, with the config, generation config and tokenizer files beside them; the
optimizer, scheduler, RNG and training-arguments files are training state and are left out — with
the global step, the epoch and the metrics logged at that step in the commit's ``meta``. Only
the main process commits. An unchanged model makes no commit.

Commits run in the background (``background=True``, the default): ``on_save`` returns right after the
Trainer's own save, and the commit reads the checkpoint folder on a worker thread while training goes on.
One commit at a time: before the Trainer starts its next save — which may delete older checkpoint folders
(``save_total_limit``) — the callback waits for the commit in flight (at the step or epoch end that will
save, at an evaluation that may save the best model, at the last log before the Trainer removes checkpoints,
and at the end of training). A commit's error is raised there, at the next save or at ``on_train_end``,
and no commit is made until it has been. A killed run keeps every commit that finished, and nothing
half-written; a normal interpreter exit lets the commit in flight finish (``close()`` waits too).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SaveStrategy

from mdiff.integrations.background import BackgroundCommits
from mdiff.repo.repository import CommitSummary, Repository

log = logging.getLogger(__name__)


class MdiffCallback(TrainerCallback):
    """Commit every checkpoint a Trainer saves to the mdiff repository at ``repository`` (created when
    missing), on ``branch`` (created at HEAD when missing; default: the current branch).

    ``message`` is formatted with the step and epoch (``"step {step}"``); ``author`` as for
    ``Repository.commit`` (default: the environment's, as git finds it); ``date`` is the commit date, or a
    function of the step giving it (default: now, or ``$SOURCE_DATE_EPOCH``: for reproducible commit ids);
    ``exclude`` names more files of the checkpoint folder to leave out (globs). What each finished commit
    recorded is in ``summaries`` (CommitSummary, in the order of the saves), its id in ``commits``.
    ``background=False`` commits on the training thread, in ``on_save`` (for debugging); ``wait()`` blocks
    until the commit in flight is done and raises its error; ``close()`` also stops the worker thread.
    """

    def __init__(self, repository: str | os.PathLike[str] = ".", *, branch: str | None = None,
                 message: str = "step {step}", author: str | None = None,
                 date: str | Callable[[int], str] | None = None, exclude: Iterable[str] = (),
                 background: bool = True):
        self.path = Path(repository)
        self.branch = branch
        self.message = message
        self.author = author
        self.date = date
        self.exclude = tuple(exclude)
        self.summaries: list[CommitSummary] = []
        self._repo: Repository | None = None
        self._background = BackgroundCommits(background)

    @property
    def commits(self) -> list[str]:
        return [summary.commit_id for summary in self.summaries]

    def _repository(self) -> Repository:
        if self._repo is None:
            exists = (self.path / ".mdiff" / "format").is_file()
            self._repo = Repository(self.path) if exists else Repository.init(self.path, self.branch or "main")
            if exists:
                self._repo.check_format()
            if self.branch is not None:
                with self._repo.lock():
                    current, head = self._repo.head()
                    if current != self.branch:
                        if self.branch not in self._repo.branches() and head is not None:
                            self._repo.set_branch(self.branch, head)
                        self._repo.set_head(self.branch)
        return self._repo

    def commit_checkpoint(self, folder: Path, message: str, date: str | None,
                          meta: Mapping[str, str]) -> CommitSummary | None:
        """Commit one checkpoint folder (on the worker thread, unless ``background=False``); None when it
        holds the last commit's state. A subclass may wrap it (to time each commit, say)."""
        return self._repository().make_commit(folder, message, self.author, date, meta=meta, exclude=self.exclude)

    def wait(self) -> None:
        """Block until the commit in flight is done; raise its error if it failed."""
        self._background.wait()

    def close(self) -> None:
        """Wait for the commit in flight (raising its error) and stop the worker thread."""
        self._background.close()

    def _record(self, folder: Path, summary: CommitSummary | None) -> None:
        if summary is None:
            log.info("%s holds the last commit's state; nothing committed", folder)
        else:
            self.summaries.append(summary)
            log.info("committed %s as %s: %s", folder, summary.commit_id[:12], summary.line())

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        # Everything read from the Trainer is read now, on its thread: it moves on once this returns.
        meta = {"step": str(state.global_step), **({"epoch": _number(state.epoch)} if state.epoch is not None else {}),
                **logged_metrics(state.log_history or [], state.global_step)}
        text = self.message.format(step=state.global_step, epoch=state.epoch)
        date = self.date(state.global_step) if callable(self.date) else self.date
        self._background.submit(lambda: self.commit_checkpoint(folder, text, date, meta),
                                lambda summary: self._record(folder, summary), what=f"the commit of {folder}")

    # The Trainer's next save writes a new folder and then may delete older ones (save_total_limit), all
    # inside _save_checkpoint, before on_save: the commit in flight must be done before that save starts.
    # DefaultFlowCallback runs first, so control.should_save already says whether this step saves.

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:
            self.wait()

    def on_epoch_end(self, args, state, control, **kwargs):
        if control.should_save:
            self.wait()

    def on_evaluate(self, args, state, control, **kwargs):
        if args.save_strategy == SaveStrategy.BEST:  # the save is decided by this evaluation, after it
            self.wait()

    def on_log(self, args, state, control, logs=None, **kwargs):
        # At the end the Trainer logs the run's metrics, then may load the best checkpoint and delete the
        # others (save_total_limit=1) before on_train_end.
        if control.should_training_stop:
            self.wait()

    def on_train_end(self, args, state, control, **kwargs):
        self.wait()


# Logged numbers that measure the machine, not the model: they would make every run's commit ids differ.
_TIMINGS = ("_runtime", "_per_second", "total_flos")


def logged_metrics(history: Iterable[Mapping[str, Any]], step: int) -> dict[str, str]:
    """The numbers logged at ``step`` (later entries win), as strings for a commit's ``meta`` — the
    model's (loss, learning rate, eval metrics), not timings."""
    metrics: dict[str, str] = {}
    for entry in history:
        if entry.get("step") == step:
            metrics.update({key: _number(value) for key, value in entry.items()
                            if key not in ("step", "epoch") and not key.endswith(_TIMINGS)
                            and isinstance(value, (int, float)) and not isinstance(value, bool)})
    return metrics


def _number(value: float) -> str:
    return repr(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))
