"""AdamW and the learning-rate schedules of the recipes, as plain ``LambdaLR`` factors."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from normzoo.recipe import OptimConfig


def lr_factor(config: OptimConfig, max_steps: int) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based).

    * ``inverse_sqrt`` (Vaswani et al., fairseq): linear warm-up to the peak, then
      ``sqrt(warmup / step)``; with no warm-up the rate stays at the peak.
    * ``cosine``: linear warm-up, then cosine decay to ``min_lr`` at ``max_steps``.
    * ``constant``: linear warm-up, then the peak.
    """
    warmup = config.warmup_steps
    floor = config.min_lr / config.lr

    def factor(step: int) -> float:
        step = step + 1  # the first update already uses a non-zero rate
        if warmup and step < warmup:
            return step / warmup
        if config.schedule == "inverse_sqrt":
            return math.sqrt(warmup / step) if warmup else 1.0
        if config.schedule == "cosine":
            span = max(max_steps - warmup, 1)
            progress = min((step - warmup) / span, 1.0)
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return factor


# The two parameter groups' names. Lightning's LearningRateMonitor logs each group's rate as
# ``<scheduler name>/<group name>``; the tasks name their scheduler ``train``, so the rates are
# logged as ``train/lr`` (weights) and ``train/lr_no_decay`` (biases, norms, scalars): the
# same rate, as one schedule scales both groups.
GROUP_NAMES = ("lr", "lr_no_decay")


def build_optimizer(model: torch.nn.Module, config: OptimConfig, max_steps: int):
    """AdamW without weight decay on biases, norms and scalars; the schedule steps per update.

    The groups are named :data:`GROUP_NAMES`, in that order."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay, "name": GROUP_NAMES[0]},
        {"params": no_decay, "weight_decay": 0.0, "name": GROUP_NAMES[1]},
    ]
    # The multi-tensor implementation (torch uses it by default only on CUDA): one pass over all
    # parameters instead of a Python loop per tensor. Not the fused kernel, which unscales
    # gradients itself, and so Lightning refuses gradient clipping with it under mixed precision.
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps,
                                  foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config, max_steps))
    return optimizer, scheduler
