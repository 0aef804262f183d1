"""The demo's knobs, with the defaults `mdiff demo` uses and a quick variant for tests."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DemoConfig:
    seed: int = 0
    # the model: a BERT-style encoder (transformers' BertForSequenceClassification) built from a config
    hidden: int = 96
    layers: int = 3
    heads: int = 4
    intermediate: int = 384
    shard_size: str = "400KB"  # the base is saved sharded (save_pretrained's max_shard_size), as published models are
    test_size: int = 360  # digits held out (of 1797)
    batch_size: int = 32
    warmup: float = 0.1  # every training: AdamW, lr warmed up linearly over this fraction of its steps, then decayed
    # 1. the base, trained from scratch on the digits
    base_steps: int = 450
    base_lr: float = 3e-3
    # 2. full fine-tuning on the shifted digits with transformers' Trainer; MdiffCallback commits every save
    finetune_steps: int = 150
    save_steps: int = 30
    finetune_lr: float = 2e-5  # BERT's own fine-tuning rate: each save moves a weight matrix by ~1e-4–1e-3 of its norm
    # 3. FISH-mask sparse fine-tuning (plain PyTorch loop, the state dict committed directly)
    fisher_samples: int = 256  # shifted training digits the empirical Fisher is averaged over
    fish_fraction: float = 0.02  # the top 2% of all entries by Fisher information are trained
    fish_steps: int = 150
    fish_lr: float = 1e-4
    # 4. LoRA with PEFT on the attention's query and value, imported as low_rank updates
    lora_rank: int = 4
    lora_alpha: int = 8  # scale = alpha / rank
    lora_steps: int = 200
    lora_lr: float = 5e-4
    # 5. main: fast-forwarded to the full fine-tune, then lora merged into it
    merge_strategy: str = "weighted:0.5"
    author: str = "mdiff demo <demo@mdiff.dev>"
    # the root's date; each later commit one minute later (fixed, so that every run makes the same commit ids)
    date: str = "2026-01-01T00:00:00Z"

    @classmethod
    def quick(cls, **changes) -> DemoConfig:
        """A reduced run for CI: the same model, steps and checks, far fewer training steps."""
        return replace(cls(base_steps=60, finetune_steps=20, save_steps=10, fisher_samples=32, fish_steps=10,
                           lora_steps=20), **changes)
