"""A training run's identity: its seed, a SHA-256 of the weights it started from, and one of
the settings it trained with.

Two runs are two pieces of work only if they trained from different starts or under different
settings. Outputs of one training (its checkpoint re-tested, its checkpoint average, a run
copied to another folder) share all three, so ``summary.json`` records them (``identity``) and
``normzoo compare`` refuses to count two runs with the same identity as two runs. The settings
count because one seed's initial weights are the same under two learning rates, two
precisions, or Pre-LN and Post-LN (the same parameters, placed otherwise): those are two
trainings, which a paired comparison pairs seed with seed.

The hash is taken once, when a new run has built its model from the seed (``init.from``'s
weights loaded): before the strategy moves, casts or shards anything, so it is the same on any
machine and precision (a scheme's data-dependent init, which follows from these weights and the
first batch, comes after it). The checkpoints carry it (``checkpoint["normzoo"]["identity"]``, by
:class:`~normzoo.tasks.base.TaskModule`), so a resumed run reports its first start's.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch


def weights_sha256(module: torch.nn.Module) -> str:
    """SHA-256 of ``module``'s state dict: in sorted key order, each tensor's name and shape,
    then its values on the CPU, floats as little-endian float32 and everything else as
    little-endian int64, contiguous (so neither the device, the training precision nor a
    tensor's memory layout changes it)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        values = tensor.detach().cpu()
        floating = values.is_floating_point()
        values = values.to(torch.float32 if floating else torch.int64)
        digest.update(f"{name}\0{tuple(values.shape)}\0".encode())
        digest.update(np.ascontiguousarray(values.numpy(), dtype="<f4" if floating else "<i8"))
    return digest.hexdigest()


# Where and how a run ran, not what it trained: left out of the settings' hash.
WHERE = {"run": None, "data": ("dir", "num_workers"),
         "trainer": ("accelerator", "devices", "num_nodes", "strategy", "progress_bar")}


def settings_sha256(recipe: dict[str, Any]) -> str:
    """SHA-256 of the resolved recipe (as plain data) without the keys that say where it ran
    (:data:`WHERE`)."""
    import json

    kept = {section: ({k: v for k, v in value.items() if k not in WHERE[section]}
                      if isinstance(value, dict) and WHERE.get(section) else value)
            for section, value in recipe.items()
            if not (section in WHERE and WHERE[section] is None)}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def run_identity(seed: int, model: torch.nn.Module, recipe: dict[str, Any]) -> dict[str, Any]:
    """What ``summary.json`` records as ``identity``: the recipe's seed, the initial weights'
    hash (:func:`weights_sha256`) and the settings' (:func:`settings_sha256`)."""
    return {"seed": seed, "init_sha256": weights_sha256(model),
            "settings_sha256": settings_sha256(recipe)}


def identity_key(identity: Any) -> str | None:
    """One string two runs of one training share, from a summary's ``identity``; None where it
    is missing (runs from before it was recorded match nothing)."""
    if not isinstance(identity, dict) or not identity.get("init_sha256"):
        return None
    return f"{identity['init_sha256']}/{identity.get('settings_sha256', '')}"
