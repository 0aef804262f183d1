"""What mdiff is raced against where more than one bench races it: the pipeline an apply replaces."""

from __future__ import annotations

import numpy as np


def baseline_apply(base_path, delta_path, out_path) -> None:
    """The pipeline mdiff replaces: load base and delta with safetensors, numpy add, save with safetensors."""
    from safetensors.numpy import load_file, save_file

    base = load_file(base_path)
    delta = load_file(delta_path)
    for k in base:
        np.add(base[k], delta[k], out=base[k])
    del delta
    save_file(base, out_path)
