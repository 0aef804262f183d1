"""The demo's knobs, with the defaults `mdiff demo` uses and a quick variant for tests."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DemoConfig:
    seed: int = 0
    hidden: int = 128  # the MLP is 64 → hidden → 10
    test_size: int = 360  # digits held out (of 1797), the same for plain and rotated
    train_limit: int | None = None  # use only this many training digits (None: all 1437)
    rotation: int = 1  # quarter turns (np.rot90): 1 = 90° counter-clockwise
    batch_size: int = 32
    lr: float = 1e-2  # Adam, training the base
    finetune_lr: float = 1e-2  # Adam, each fine-tuning
    base_epochs: int = 30
    finetune_epochs: int = 30
    fisher_samples: int | None = None  # rotated training digits the Fisher is averaged over (None: all)
    fish_fraction: float = 0.02  # FISH keeps the top 2% of all parameters by empirical Fisher information
    lora_rank: int = 4
    lora_alpha: float = 8.0  # scale = alpha / rank
    merge_strategy: str = "weighted:0.5"  # main (= full-ft) merged with lora
    author: str = "mdiff demo <demo@mdiff.dev>"
    # the root's date; each later commit one minute later (fixed, so that every run makes the same commit ids)
    date: str = "2026-01-01T00:00:00Z"

    @classmethod
    def quick(cls, **changes) -> "DemoConfig":
        """A reduced run for CI: fewer samples and epochs, same steps and checks."""
        return replace(cls(train_limit=400, base_epochs=4, finetune_epochs=4, fisher_samples=128), **changes)
