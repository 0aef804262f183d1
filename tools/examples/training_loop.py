#!/usr/bin/env python3
"""A plain PyTorch training loop that versions its weights with mdiff — no checkpoint files in between.

    python tools/examples/training_loop.py [REPO_DIR] [--steps N]

It commits ``model.state_dict()`` every 10 steps with the step and the loss in the commit's meta —
in the background (``BackgroundCommits``): training goes on while a commit runs, one commit at a time,
and a commit's error is raised at the next one or at the end — then checks out an earlier commit as a
state dict and loads it with ``load_state_dict(strict=True)``, and writes the commit with the lowest
loss to ``REPO_DIR/best.safetensors``. Needs torch (``pip install 'mdiff[torch]'``); runs in seconds on a CPU.
"""

from __future__ import annotations

import argparse
from functools import partial

import torch

import mdiff
from mdiff.integrations.background import BackgroundCommits, frozen_state
from mdiff.repo.history import first_parent_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", nargs="?", default="mdiff-training-loop", help="the repository (created if missing)")
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(256, 16), torch.randint(0, 4, (256,))

    try:
        repo = mdiff.Repository.find(args.repo)
    except mdiff.RepositoryError:
        repo = mdiff.Repository.init(args.repo)
    losses = {}

    def committed(step: int, loss: float, commit_id: str | None) -> None:  # on the commit's thread, in order
        if commit_id is not None:
            losses[commit_id] = loss
            print(f"step {step}: loss {loss:.4f}, committed {commit_id[:12]}")

    with BackgroundCommits() as commits:  # on leaving: the last commit finishes, a failed one is raised
        # a copy of the weights: the optimizer changes them in place while the commit reads them
        commits.submit(partial(repo.commit, frozen_state(model.state_dict()), "initial weights", meta={"step": "0"}))
        for step in range(1, args.steps + 1):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                state, meta = frozen_state(model.state_dict()), {"step": str(step), "loss": f"{loss.item():.6g}"}
                commits.submit(partial(repo.commit, state, f"step {step}", meta=meta),
                               done=partial(committed, step, loss.item()))

    history = first_parent_line(repo, repo.head()[1])
    earlier = history[1] if len(history) > 1 else history[0]
    restored = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    restored.load_state_dict(repo.checkout(earlier, framework="pt"), strict=True)
    print(f"reloaded {repo.metadata(earlier).message} with load_state_dict(strict=True)")
    best = min(losses, key=losses.get)
    repo.checkout(best, repo.root / "best.safetensors")
    print(f"wrote {repo.root / 'best.safetensors'}: {repo.metadata(best).message}, loss {losses[best]:.4f}")


if __name__ == "__main__":
    main()
