"""`mdiff demo`: digits → rotated digits, three kinds of fine-tuning, one repository.

A library, like the rest of mdiff: it returns data and never prints or exits;
progress goes to an optional ``report(message)`` callback, and a failed check
raises :class:`DemoCheckFailed`. ``mdiff demo`` (``mdiff/cli/demo_command.py``)
renders the result.

What it does, with seeds fixed (same inputs, same commit ids):

1. trains a small MLP (64 → 128 → 10, ReLU) on scikit-learn's bundled 8×8
   digits and commits it as the root of a new repository;
2. fine-tunes it on the digits rotated by 90° three ways, each on its own
   branch — full fine-tuning (``full-ft``), FISH-mask sparse fine-tuning
   (``fish``) and LoRA (``lora``) — then fast-forwards ``main`` to
   ``full-ft`` and merges ``lora`` into it with ``weighted:0.5``;
3. checks out every commit, proves it reproduces the trained weights and
   accuracy, exports ONNX models, applies diffs to an ONNX model's
   initializers and runs them on onnxruntime, validates every commit file and
   plots the relative change per parameter.

Needs the ``demo`` extra: ``pip install -e '.[demo]'`` (torch, scikit-learn,
matplotlib). Everything it uses ships with those packages: no download.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Callable

from mdiff.demo.config import DemoConfig

if TYPE_CHECKING:
    from mdiff.demo.pipeline import DemoResult

# import name → what to install (the versions the `demo` extra pins)
REQUIREMENTS = {"torch": "torch==2.13.0", "sklearn": "scikit-learn==1.9.1", "matplotlib": "matplotlib==3.11.2"}


class DemoCheckFailed(RuntimeError):
    """A check of the demo failed: a checkout, a mask, an accuracy or a validation did not hold."""


def missing_packages() -> list[str]:
    """The requirements (pip specifiers) of the demo that are not importable here."""
    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None in sys.modules
            return False

    return [spec for module, spec in REQUIREMENTS.items() if not present(module)]


def run_demo(directory="mdiff-demo", config: DemoConfig | None = None,
             report: Callable[[str], None] | None = None) -> "DemoResult":
    """Run the whole demo into ``directory`` (a new repository; an existing one is refused, MD801)."""
    from mdiff.demo.pipeline import run

    return run(directory, config or DemoConfig(), report)


__all__ = ["DemoCheckFailed", "DemoConfig", "REQUIREMENTS", "missing_packages", "run_demo"]
