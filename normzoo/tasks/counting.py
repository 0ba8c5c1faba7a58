"""What a training batch counts, for the throughput a run logs: its examples, its tokens, and
the FLOPs a training step on it costs per token (Lightning's ``ThroughputMonitor`` reads them
through :attr:`TaskModule.flops_per_batch <normzoo.tasks.base.TaskModule.flops_per_batch>`)."""

from __future__ import annotations

from typing import Any

import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.utilities import rank_zero_info

from normzoo.checkpoints import rng_state as rng


def sentences(batch: dict[str, Any]) -> int:
    """The number of examples (sentence pairs, sentences or blocks) in ``batch``."""
    return next(v for v in batch.values() if torch.is_tensor(v)).shape[0]


def tokens(batch: dict[str, Any]) -> int:
    """The tokens ``batch`` is trained on, counted on the host by the collation: target tokens
    (translation), maskable tokens (masked LM) or predicted tokens (causal LM)."""
    return int(batch["ntokens"])


def flops_per_token(task: Any, batch: dict[str, Any]) -> float | None:
    """FLOPs of a training step of ``task`` (a :class:`~normzoo.tasks.base.TaskModule`) on
    ``batch`` (the loss, forward and backward, as counted by torch's ``FlopCounterMode``
    through Lightning's ``measure_flops``) per token of it.

    Counted on a copy of the task on the meta device, with ``batch``'s shapes: it allocates
    no memory, computes nothing and leaves the training model, its gradients and the
    generators as they were. A model that reads tensor values while it runs (BatchNorm's
    padding mask, some plugins) cannot run there: then None, and the throughput is logged
    without FLOPs.
    """
    eager = task.recipe.trainer.model_copy(update={"compile": False})
    recipe = task.recipe.model_copy(update={"trainer": eager})
    smoothing = task.recipe.optim.label_smoothing if task.smooths_labels else 0.0
    state = rng.capture()
    try:
        with torch.device("meta"):
            twin = type(task)(recipe, task.hparams["vocab_size"])
        shapes = {k: v.to("meta") if torch.is_tensor(v) else v for k, v in batch.items()}
        flops = measure_flops(twin, lambda: twin.loss_terms(shapes, smoothing).loss_sum,
                              lambda loss: loss)
    except Exception as error:  # a figure to log must never stop the run
        reason = str(error).splitlines()[0] if str(error) else ""
        rank_zero_info(f"Training FLOPs not measured ({type(error).__name__}: {reason}): "
                       "throughput is logged without FLOPs and MFU")
        return None
    finally:
        rng.restore(state)
    return flops / max(tokens(batch), 1)
