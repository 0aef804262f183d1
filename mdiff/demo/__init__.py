"""`mdiff demo`: a small transformers model, trained, fine-tuned three ways and versioned with mdiff.

A library, like the rest of mdiff: it returns data and never prints or exits;
progress goes to an optional ``report(message)`` callback, and a failed check
raises :class:`DemoCheckFailed`. ``mdiff demo`` (``mdiff/cli/demo_command.py``)
renders the result.

What it does, offline, on the CPU, with seeds and commit dates fixed (every run
makes the same commit ids):

1. writes scikit-learn's bundled 8×8 digits as text — a word per pixel row —
   builds a BERT-style classifier (``BertForSequenceClassification``) from a
   config, trains it with transformers' ``Trainer``, saves it sharded with
   ``save_pretrained`` (with its tokenizer) and commits the folder as the root;
2. fine-tunes it on the same digits one pixel lower, three ways, each on its own
   branch: full fine-tuning with the Trainer at a realistic learning rate, every
   save committed by ``MdiffCallback`` (``finetune``); FISH-mask sparse
   fine-tuning in a plain PyTorch loop, the state dict committed with its mask
   (``fish``); LoRA with PEFT, the adapter imported with ``import_peft``
   (``lora``) — then fast-forwards ``main`` to ``finetune`` and merges ``lora``
   into it;
3. checks out every commit to a folder, reloads it with ``from_pretrained`` and
   proves it is what was trained (files byte for byte, parameters bit for bit or,
   for LoRA, within SPEC §7.5's tolerance; logits and predictions), validates
   every commit file and plots the relative change per parameter.

Needs the ``demo`` extra: ``pip install -e '.[demo]'`` (torch, transformers,
peft, accelerate, scikit-learn, matplotlib). Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mdiff.demo.config import DemoConfig
from mdiff.demo.errors import DemoCheckFailed
from mdiff.demo.requirements import REQUIREMENTS, missing_packages

if TYPE_CHECKING:
    from mdiff.demo.pipeline import DemoResult


def run_demo(directory="mdiff-demo", config: DemoConfig | None = None,
             report: Callable[[str], None] | None = None) -> DemoResult:
    """Run the whole demo into ``directory`` (a new repository; an existing one is refused, MD801, before
    anything is trained)."""
    from mdiff.demo.pipeline import run
    from mdiff.repo import Repository

    return run(Repository.init(directory), config or DemoConfig(), report)


__all__ = ["REQUIREMENTS", "DemoCheckFailed", "DemoConfig", "missing_packages", "run_demo"]
