"""The model and the three ways of fine-tuning it, in PyTorch on the CPU.

- ``MLP``: 64 → hidden → 10 with ReLU; parameters ``fc1.weight``, ``fc1.bias``,
  ``fc2.weight``, ``fc2.bias`` (the names every checkpoint and ONNX model use).
- Full fine-tuning: Adam on every parameter.
- FISH-mask sparse fine-tuning (Sung et al., 2021): the empirical Fisher
  information of each parameter — the mean over samples of the squared
  gradient of log p(y | x) at the true label — ranks all parameters of the
  model together; the top fraction is the mask, and Adam trains only those
  entries (every other gradient is zeroed, and the result is checked to leave
  the others bit for bit).
- LoRA: each linear layer keeps its W and bias frozen and learns A (r × in)
  and B (out × r); its output is x·Wᵀ + b + (alpha/r)·x·Aᵀ·Bᵀ. The model that
  is evaluated and committed is the merged one, W + (alpha/r)·(B @ A) in float32.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Iterator, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mdiff.checkpoints.torch_pt import numpy_to_tensor, tensor_to_numpy

LINEAR_LAYERS = ("fc1", "fc2")


@contextlib.contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """One thread, deterministic kernels, a fixed seed; torch's global settings restored afterwards."""
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    rng_state = torch.get_rng_state()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_rng_state(rng_state)


class MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank change (A: r × in, B: out × r, B starts at zero)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as LoRA and PEFT initialise A

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    def merged_weight(self) -> torch.Tensor:
        """W + scale · (B @ A), in float32."""
        with torch.no_grad():
            return self.base.weight + (self.lora_B @ self.lora_A) * self.scale


def numpy_state(model: nn.Module) -> dict[str, np.ndarray]:
    return {name: tensor_to_numpy(t) for name, t in model.state_dict().items()}


def model_from_state(state: Mapping[str, np.ndarray], hidden: int) -> MLP:
    model = MLP(hidden)
    model.load_state_dict({name: numpy_to_tensor(np.array(a)) for name, a in state.items()})
    return model


def logits(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def train(model: nn.Module, params, x: np.ndarray, y: np.ndarray, epochs: int, lr: float, batch_size: int,
          seed: int, grad_masks: Mapping[str, torch.Tensor] | None = None) -> None:
    """Adam on ``params``, cross-entropy, mini-batches in an order drawn from ``seed``.

    With ``grad_masks`` (name → 0/1 tensor), every gradient is multiplied by its mask before the step.
    """
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    named = dict(model.named_parameters())
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(targets), generator=generator)
        for start in range(0, len(targets), batch_size):
            batch = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(inputs[batch]), targets[batch]).backward()
            if grad_masks:
                for name, mask in grad_masks.items():
                    named[name].grad.mul_(mask)
            optimizer.step()
    model.eval()


def train_base(x, y, hidden: int, epochs: int, lr: float, batch_size: int, seed: int) -> MLP:
    torch.manual_seed(seed)  # the initial weights
    model = MLP(hidden)
    train(model, model.parameters(), x, y, epochs, lr, batch_size, seed + 1)
    return model


def full_finetune(base: MLP, x, y, epochs: int, lr: float, batch_size: int, seed: int) -> MLP:
    model = copy.deepcopy(base)
    train(model, model.parameters(), x, y, epochs, lr, batch_size, seed)
    return model


def empirical_fisher(model: MLP, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per parameter, the mean over the samples of (∂ log p(y|x) / ∂θ)², y the true label (float64)."""
    from torch.func import functional_call, grad, vmap

    params = {name: p.detach() for name, p in model.named_parameters()}

    def log_likelihood(p, sample, one_hot):
        out = functional_call(model, p, (sample[None],))
        return (F.log_softmax(out, dim=-1)[0] * one_hot).sum()

    targets = F.one_hot(torch.from_numpy(y), 10).to(torch.float32)
    per_sample = vmap(grad(log_likelihood), in_dims=(None, 0, 0))(params, torch.from_numpy(x), targets)
    return {name: (g.double() ** 2).mean(dim=0).numpy() for name, g in per_sample.items()}


def fish_masks(fisher: Mapping[str, np.ndarray], fraction: float) -> dict[str, np.ndarray]:
    """Boolean masks selecting the ⌈fraction · N⌉ entries of largest Fisher information among all N
    parameters of the model (ties broken by position, in name order: deterministic)."""
    names = sorted(fisher)
    flat = np.concatenate([fisher[n].reshape(-1) for n in names])
    keep = max(1, math.ceil(fraction * flat.size))
    chosen = np.zeros(flat.size, dtype=bool)
    chosen[np.argsort(-flat, kind="stable")[:keep]] = True
    masks, offset = {}, 0
    for n in names:
        size = fisher[n].size
        masks[n] = chosen[offset:offset + size].reshape(fisher[n].shape)
        offset += size
    return masks


def fish_finetune(base: MLP, masks: Mapping[str, np.ndarray], x, y, epochs: int, lr: float, batch_size: int,
                  seed: int) -> MLP:
    model = copy.deepcopy(base)
    grad_masks = {name: torch.from_numpy(m.astype(np.float32)) for name, m in masks.items()}
    train(model, model.parameters(), x, y, epochs, lr, batch_size, seed, grad_masks)
    return model


def lora_finetune(base: MLP, x, y, rank: int, alpha: float, epochs: int, lr: float, batch_size: int,
                  seed: int) -> tuple[dict[str, LoRALinear], MLP]:
    """The trained LoRA layers by name, and the MLP with their merged weights (what gets committed)."""
    torch.manual_seed(seed)  # the initial A
    wrapped = copy.deepcopy(base)
    for p in wrapped.parameters():
        p.requires_grad_(False)
    layers = {name: LoRALinear(getattr(wrapped, name), rank, alpha) for name in LINEAR_LAYERS}
    for name, layer in layers.items():
        setattr(wrapped, name, layer)
    trainable = [p for layer in layers.values() for p in (layer.lora_A, layer.lora_B)]
    train(wrapped, trainable, x, y, epochs, lr, batch_size, seed + 1)
    merged = copy.deepcopy(base)
    with torch.no_grad():
        for name, layer in layers.items():
            getattr(merged, name).weight.copy_(layer.merged_weight())
    return layers, merged
