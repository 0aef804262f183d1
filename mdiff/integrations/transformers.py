"""A ``transformers`` ``TrainerCallback`` that commits each checkpoint the Trainer saves.

    from mdiff.integrations.transformers import MdiffCallback

    trainer = Trainer(model, args, train_dataset=data, callbacks=[MdiffCallback("runs/my-model")])
    trainer.train()   # every save (save_steps, save_strategy) becomes a commit: `mdiff log -C runs/my-model`

Each commit is the checkpoint folder the Trainer just wrote (``output_dir/checkpoint-<step>``) — the
weights, shard by shard, with the config, generation config and tokenizer files beside them; the
optimizer, scheduler, RNG and training-arguments files are training state and are left out — with
the global step, the epoch and the metrics logged at that step in the commit's ``meta``. Only
the main process commits. An unchanged model makes no commit.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from mdiff.repo.repository import CommitSummary, Repository

log = logging.getLogger(__name__)


class MdiffCallback(TrainerCallback):
    """Commit every checkpoint a Trainer saves to the mdiff repository at ``repository`` (created when
    missing), on ``branch`` (created at HEAD when missing; default: the current branch).

    ``message`` is formatted with the step and epoch (``"step {step}"``); ``author`` as for
    ``Repository.commit`` (default: the environment's, as git finds it); ``date`` is the commit date, or a
    function of the step giving it (default: now, or ``$SOURCE_DATE_EPOCH``: for reproducible commit ids);
    ``exclude`` names more files of the checkpoint folder to leave out (globs). What each commit recorded is
    in ``summaries`` (CommitSummary), its id in ``commits``.
    """

    def __init__(self, repository: str | os.PathLike[str] = ".", *, branch: str | None = None,
                 message: str = "step {step}", author: str | None = None,
                 date: str | Callable[[int], str] | None = None, exclude: Iterable[str] = ()):
        self.path = Path(repository)
        self.branch = branch
        self.message = message
        self.author = author
        self.date = date
        self.exclude = tuple(exclude)
        self.summaries: list[CommitSummary] = []
        self._repo: Repository | None = None

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

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        meta = {"step": str(state.global_step), **({"epoch": _number(state.epoch)} if state.epoch is not None else {}),
                **logged_metrics(state.log_history or [], state.global_step)}
        text = self.message.format(step=state.global_step, epoch=state.epoch)
        date = self.date(state.global_step) if callable(self.date) else self.date
        summary = self._repository().make_commit(folder, text, self.author, date, meta=meta, exclude=self.exclude)
        if summary is None:
            log.info("%s holds the last commit's state; nothing committed", folder)
        else:
            self.summaries.append(summary)
            log.info("committed %s as %s: %s", folder, summary.commit_id[:12], summary.line())


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
