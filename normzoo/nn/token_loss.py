"""The one quantity every task reports for a batch: its summed token loss and token count.

Summed, not averaged, so that batches, gradient accumulation and processes combine exactly
(:meth:`normzoo.tasks.base.TaskModule.global_token_mean`). Plain torch: the evaluation code
and the benchmarks use it without Lightning.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from normzoo.nn.cross_entropy import smoothed_cross_entropy_sum


class LossTerms(NamedTuple):
    """A batch's summed token loss, its number of target tokens and, where asked for, how
    many of them the model's argmax predicts."""

    loss_sum: torch.Tensor
    tokens: torch.Tensor
    correct: torch.Tensor | None = None

    @property
    def mean(self) -> torch.Tensor:
        """The mean token loss (0 for a batch without targets)."""
        return self.loss_sum / self.tokens.clamp(min=1)


def token_terms(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int,
                smoothing: float = 0.0, count_correct: bool = False) -> LossTerms:
    """Cross-entropy of ``logits`` (computed in fp32, a block of rows at a time: bf16 logits
    are never copied whole to fp32) against ``labels``, skipping ``ignore_index`` (padding, or
    the positions an MLM does not predict)."""
    # Under torch.compile (trainer.compile) the fused kernels too: the blocked loop's trip count
    # is the batch's token count, a new graph for every batch, and inductor fuses
    # F.cross_entropy's passes over the logits itself.
    if logits.device.type == "cpu" and not torch.compiler.is_compiling():
        loss_sum = smoothed_cross_entropy_sum(logits.flatten(0, 1), labels.flatten(),
                                              ignore_index=ignore_index, smoothing=smoothing)
    else:  # a GPU's fused kernels; the blocked loop would launch kernels per block there
        loss_sum = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                                   ignore_index=ignore_index, label_smoothing=smoothing,
                                   reduction="sum")
    targets = labels.ne(ignore_index)
    # argmax of bf16 logits is that of their float32 copy: the cast changes no value.
    correct = (logits.argmax(dim=-1).eq(labels) & targets).sum() if count_correct else None
    return LossTerms(loss_sum, targets.sum(), correct)
