"""Classification scores: accuracy and macro-F1, from torchmetrics.

Both, because they answer different questions: accuracy (micro-averaged) is the share of
sentences labelled right and is dominated by the frequent classes; macro-F1 averages the
per-class F1 scores, so a model that ignores a rare class is marked down. torchmetrics rather
than hand-written counts, so that the numbers match what other projects report and, as module
state, are summed across processes before they are computed.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score


def classification_scores(preds: Tensor, target: Tensor, labels: int) -> dict[str, float]:
    """``accuracy`` and ``macro_f1`` of predicted class indices (or [N, labels] logits) against
    target indices; for one-off scoring (``normzoo evaluate``), where nothing is distributed.
    Same definitions as :class:`ClassificationMetrics`, so ``normzoo evaluate`` reproduces the
    run's own test scores.

    A class absent from both predictions and targets has an undefined F1 and is left out of the
    macro average (torchmetrics' rule), so a small test set is not penalised for lacking a
    class; a class that is predicted but never true (or the reverse) counts as 0."""
    if labels < 1:
        raise ValueError(f"labels must be >= 1, got {labels}")
    if preds.ndim == target.ndim + 1:
        preds = preds.argmax(dim=-1)
    preds, target = preds.long().flatten(), target.long().flatten()
    if preds.numel() != target.numel():
        raise ValueError(f"{preds.numel()} predictions for {target.numel()} targets")
    if target.numel() == 0:
        return {"accuracy": float("nan"), "macro_f1": float("nan")}
    if labels == 1:  # torchmetrics needs >= 2 classes; with one, every prediction is right
        return {"accuracy": 1.0, "macro_f1": 1.0}
    accuracy = multiclass_accuracy(preds, target, num_classes=labels, average="micro")
    macro = multiclass_f1_score(preds, target, num_classes=labels, average="macro")
    return {"accuracy": float(accuracy), "macro_f1": float(macro)}


class ClassificationMetrics(torch.nn.Module):
    """Accumulated accuracy and macro-F1 over an epoch, as torchmetrics modules: a child of the
    LightningModule, so the states move to its device and synchronise across processes.

    Macro-F1 leaves out classes absent from both predictions and targets, as
    :func:`classification_scores` does."""

    def __init__(self, labels: int) -> None:
        super().__init__()
        if labels < 2:
            raise ValueError(f"a classifier needs at least two labels, got {labels}")
        self.accuracy = MulticlassAccuracy(num_classes=labels, average="micro")
        self.macro_f1 = MulticlassF1Score(num_classes=labels, average="macro")

    def update(self, logits: Tensor, target: Tensor) -> None:
        """Add a batch: [B, labels] logits (or [B] predicted indices) and [B] target indices."""
        preds = logits.argmax(dim=-1) if logits.ndim == target.ndim + 1 else logits
        self.accuracy.update(preds, target)
        self.macro_f1.update(preds, target)

    def compute(self) -> dict[str, Tensor]:
        """``{"accuracy", "macro_f1"}`` over everything since the last :meth:`reset`."""
        return {"accuracy": self.accuracy.compute(), "macro_f1": self.macro_f1.compute()}

    def reset(self) -> None:
        """Forget the accumulated counts (at the start of each validation epoch)."""
        self.accuracy.reset()
        self.macro_f1.reset()
