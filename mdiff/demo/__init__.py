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

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

from mdiff.demo.config import DemoConfig

if TYPE_CHECKING:
    from mdiff.demo.pipeline import DemoResult

# import name → what to install (the versions the `demo` extra pins)
REQUIREMENTS = {"torch": "torch==2.13.0", "transformers": "transformers==5.18.0", "peft": "peft==0.21.0",
                "accelerate": "accelerate==1.16.0", "sklearn": "scikit-learn==1.9.1",
                "matplotlib": "matplotlib==3.11.2"}


class DemoCheckFailed(RuntimeError):
    """A check of the demo failed: a checkout, a mask, a reloaded model's logits or a validation did not hold."""


def missing_packages() -> list[str]:
    """The requirements (pip specifiers) of the demo that are not importable here."""
    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None in sys.modules
            return False

    return [spec for module, spec in REQUIREMENTS.items() if not present(module)]


def run_demo(directory="mdiff-demo", config: DemoConfig | None = None,
             report: Callable[[str], None] | None = None) -> DemoResult:
    """Run the whole demo into ``directory`` (a new repository; an existing one is refused, MD801, before
    anything is trained)."""
    from mdiff.demo.pipeline import run
    from mdiff.repo import Repository

    return run(Repository.init(directory), config or DemoConfig(), report)


__all__ = ["REQUIREMENTS", "DemoCheckFailed", "DemoConfig", "missing_packages", "run_demo"]
