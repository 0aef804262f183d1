"""The model and the ways the demo trains it: transformers' Trainer, a plain PyTorch loop, PEFT.

- The model: ``BertForSequenceClassification`` built from a ``BertConfig`` (no download), a small
  BERT reading the digits' row words (:mod:`mdiff.demo.data`) and predicting the digit.
- The base and the full fine-tune are trained by ``transformers.Trainer``; the fine-tune's saves
  are committed by :class:`mdiff.integrations.transformers.MdiffCallback`.
- FISH-mask sparse fine-tuning (Sung et al., 2021), in a plain PyTorch loop: the empirical Fisher
  information of each entry — the mean over samples of the squared gradient of log p(y | x) at
  the true label — ranks all entries of the model together; the top fraction is the mask, and
  AdamW trains only those entries (the other gradients are zeroed, so the others keep their bits).
- LoRA with PEFT on the attention's query and value projections; the classifier head is trained
  in full (PEFT's ``modules_to_save`` for sequence classification).

Everything runs on the CPU in one thread with deterministic kernels and fixed seeds, so every
run makes the same weights — and, with the fixed commit dates, the same commit ids.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import random
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import torch
import transformers
from torch.nn import functional as F
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
    get_linear_schedule_with_warmup,
)
from transformers.trainer_callback import PrinterCallback

from mdiff.demo.config import DemoConfig
from mdiff.demo.data import SEQUENCE_LENGTH, VOCABULARY
from mdiff.integrations.transformers import MdiffCallback

LORA_TARGETS = ("query", "value")
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@contextlib.contextmanager
def quiet_and_deterministic(seed: int) -> Iterator[None]:
    """One thread, deterministic kernels, fixed seeds; transformers' logging and progress bars and
    Python's warnings off (the library never prints). Every global setting is restored afterwards."""
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    rng_states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    verbosity = transformers.logging.get_verbosity()
    progress_bars = transformers.utils.logging.is_progress_bar_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_rng_state(rng_states[0])
        np.random.set_state(rng_states[1])
        random.setstate(rng_states[2])
        transformers.logging.set_verbosity(verbosity)
        if progress_bars:
            transformers.utils.logging.enable_progress_bar()


def fixed_dates(first: str) -> Iterator[str]:
    """``first``, then one minute later, and so on: the demo's commit dates."""
    moment = _dt.datetime.strptime(first, DATE_FORMAT)
    while True:
        yield moment.strftime(DATE_FORMAT)
        moment += _dt.timedelta(minutes=1)


class TimedCallback(MdiffCallback):
    """MdiffCallback as the demo runs it: each commit dated by the demo's fixed clock, and timed."""

    def __init__(self, repository: Path, dates: Iterator[str], **options):
        super().__init__(repository, date=lambda step: next(dates), **options)
        self.seconds: dict[str, float] = {}  # commit id → seconds its commit took

    def commit_checkpoint(self, folder, message, date, meta):
        # runs on the callback's worker thread, one commit at a time
        started = time.perf_counter()
        summary = super().commit_checkpoint(folder, message, date, meta)
        if summary is not None:
            self.seconds[summary.commit_id] = time.perf_counter() - started
        return summary


class Examples(torch.utils.data.Dataset):
    """Token ids and labels, as the Trainer takes them."""

    def __init__(self, input_ids: torch.Tensor, labels: np.ndarray):
        self.input_ids, self.labels = input_ids, torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


def model_config(config: DemoConfig) -> BertConfig:
    return BertConfig(
        vocab_size=len(VOCABULARY), hidden_size=config.hidden, num_hidden_layers=config.layers,
        num_attention_heads=config.heads, intermediate_size=config.intermediate,
        max_position_embeddings=SEQUENCE_LENGTH, pad_token_id=VOCABULARY.index("[PAD]"),
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        # BERT's 0.02 suits a width of 768; this width's weights start at 1/√hidden, as a real model's would
        initializer_range=config.hidden ** -0.5,
        id2label={i: str(i) for i in range(10)}, label2id={str(i): i for i in range(10)},  # ten classes
    )


def new_model(config: DemoConfig) -> BertForSequenceClassification:
    torch.manual_seed(config.seed)  # the initial weights
    return BertForSequenceClassification(model_config(config))


def load_model(folder: Path) -> BertForSequenceClassification:
    return BertForSequenceClassification.from_pretrained(folder, local_files_only=True).eval()


def model_from_state(config: DemoConfig, state: Mapping[str, torch.Tensor]) -> BertForSequenceClassification:
    """A model built from the config, with ``state`` loaded strictly (every parameter, nothing else)."""
    model = BertForSequenceClassification(model_config(config))
    model.load_state_dict(state, strict=True)
    return model.eval()


def logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=input_ids).logits


def describe_model(config: DemoConfig, model) -> str:
    parameters = sum(p.numel() for p in model.parameters())
    return (f"BERT ({config.layers} layers, hidden {config.hidden}, {config.heads} heads, vocabulary "
            f"{len(VOCABULARY)}, {parameters:,} parameters)")


def arguments(config: DemoConfig, output_dir: Path, steps: int, lr: float, **options) -> TrainingArguments:
    """AdamW (no weight decay), a linear warm-up then a linear decay, on the CPU, seeded; nothing reported."""
    return TrainingArguments(
        output_dir=str(output_dir), max_steps=steps, learning_rate=lr, weight_decay=0.0, lr_scheduler_type="linear",
        warmup_steps=config.warmup,
        per_device_train_batch_size=config.batch_size, seed=config.seed, data_seed=config.seed, use_cpu=True,
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, **options)


def train(model, args: TrainingArguments, dataset: Examples, tokenizer=None, callbacks=()) -> None:
    trainer = Trainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                      callbacks=list(callbacks))
    trainer.remove_callback(PrinterCallback)  # it prints every log; the library never prints
    trainer.train()
    model.eval()


def train_base(config: DemoConfig, model, dataset: Examples, output_dir: Path) -> None:
    """The base, from its initial weights, on the upright digits (nothing saved: the caller saves it sharded)."""
    train(model, arguments(config, output_dir, config.base_steps, config.base_lr, save_strategy="no",
                           logging_strategy="no"), dataset)


def full_finetune(config: DemoConfig, base: Path, dataset: Examples, output_dir: Path, tokenizer,
                  callback: MdiffCallback) -> None:
    """Every weight trained; the Trainer saves ``output_dir/checkpoint-<step>`` every ``save_steps`` (the
    model only: no optimizer state) and logs the loss at the same steps, which the callback commits."""
    train(load_model(base), arguments(config, output_dir, config.finetune_steps, config.finetune_lr,
                                      save_steps=config.save_steps, logging_steps=config.save_steps,
                                      save_only_model=True),
          dataset, tokenizer, [callback])


def empirical_fisher(model, input_ids: torch.Tensor, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per parameter, the mean over the samples of (∂ log p(y|x) / ∂θ)², y the true label (float64)."""
    model.eval()
    total = {name: np.zeros(tuple(p.shape)) for name, p in model.named_parameters()}
    for ids, label in zip(input_ids, labels, strict=True):
        model.zero_grad(set_to_none=True)
        F.log_softmax(model(input_ids=ids[None]).logits, dim=-1)[0, int(label)].backward()
        for name, p in model.named_parameters():
            total[name] += p.grad.double().numpy() ** 2
    model.zero_grad(set_to_none=True)
    return {name: value / len(labels) for name, value in total.items()}


def fish_masks(fisher: Mapping[str, np.ndarray], fraction: float) -> dict[str, np.ndarray]:
    """Boolean masks selecting the ⌈fraction · N⌉ entries of largest Fisher information among all N
    entries of the model (ties broken by position, in name order: deterministic)."""
    names = sorted(fisher)
    flat = np.concatenate([fisher[n].reshape(-1) for n in names])
    chosen = np.zeros(flat.size, dtype=bool)
    chosen[np.argsort(-flat, kind="stable")[: max(1, math.ceil(fraction * flat.size))]] = True
    masks, offset = {}, 0
    for n in names:
        masks[n] = chosen[offset:offset + fisher[n].size].reshape(fisher[n].shape)
        offset += fisher[n].size
    return masks


def masked_finetune(config: DemoConfig, model, masks: Mapping[str, np.ndarray], input_ids: torch.Tensor,
                    labels: np.ndarray) -> None:
    """AdamW (no weight decay; the Trainer's schedule: linear warm-up, then linear decay) on the masked
    entries only: every gradient is multiplied by its mask, so Adam's moments stay zero outside it and
    those entries keep their bits."""
    parameters = dict(model.named_parameters())
    hooks = [parameters[name].register_hook(_times(torch.from_numpy(mask))) for name, mask in masks.items()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.fish_lr, weight_decay=0.0)
    schedule = get_linear_schedule_with_warmup(optimizer, math.ceil(config.warmup * config.fish_steps),
                                               config.fish_steps)
    generator = torch.Generator().manual_seed(config.seed)
    targets = torch.from_numpy(labels)
    model.train()
    try:
        for _ in range(config.fish_steps):
            batch = torch.randint(len(targets), (config.batch_size,), generator=generator)
            optimizer.zero_grad(set_to_none=True)
            model(input_ids=input_ids[batch], labels=targets[batch]).loss.backward()
            optimizer.step()
            schedule.step()
    finally:
        for hook in hooks:
            hook.remove()
        model.eval()


def _times(mask: torch.Tensor):
    """A gradient hook multiplying the gradient by ``mask`` (0/1)."""
    return lambda grad: grad * mask


def lora_finetune(config: DemoConfig, base: Path, dataset: Examples, output_dir: Path):
    """PEFT LoRA on the attention's query and value, trained by the Trainer; the adapter is saved to
    ``output_dir/adapter``. Returns the PeftModel."""
    from peft import LoraConfig, TaskType, get_peft_model

    torch.manual_seed(config.seed)  # PEFT's initial lora_A
    model = get_peft_model(load_model(base), LoraConfig(
        task_type=TaskType.SEQ_CLS, r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0,
        target_modules=list(LORA_TARGETS)))
    train(model, arguments(config, output_dir, config.lora_steps, config.lora_lr, save_strategy="no",
                           logging_strategy="no"), dataset)
    model.save_pretrained(str(output_dir / "adapter"))
    return model

