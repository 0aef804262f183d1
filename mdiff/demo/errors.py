"""The demo's one error: a check that did not hold."""

from __future__ import annotations


class DemoCheckFailed(RuntimeError):
    """A check of the demo failed: a checkout, a mask, a reloaded model's logits or a validation did not hold."""
