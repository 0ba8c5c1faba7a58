"""Random-number-generator state as plain data, so a resumed run draws what an unbroken one would.

Dropout masks (and MLM masking) come from the global generators; Lightning's checkpoints do not
carry their state. These helpers capture and restore it as tensors, ints and tuples only, so the
checkpoint still loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture() -> dict[str, Any]:
    """This process's generator states: torch (CPU and its current CUDA device), Python, NumPy."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        # This process's own device only: a resume on a machine with fewer GPUs per process
        # must still find the state it needs.
        "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
    }


def restore(state: dict[str, Any]) -> None:
    """Put back the generator states :func:`capture` returned."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"][0])
    random.setstate(state["python"])  # pickling keeps its tuples as tuples
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))

