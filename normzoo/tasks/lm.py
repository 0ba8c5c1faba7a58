"""Language modelling: masked LM (BERT-style, MLM accuracy) and causal LM (perplexity)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from normzoo.tasks.base import NormzooTask


class _TokenPrediction(NormzooTask):
    """Cross-entropy on the positions whose label is not -100."""

    def forward_batch(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model(batch["tokens"])

    def step_terms(
        self, batch: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Summed token loss, correct predictions and target count of ``batch``."""
        logits = self.forward_batch(batch).float()
        labels = batch["labels"]
        total = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100,
                                reduction="sum")
        targets = labels.ne(-100)
        correct = (logits.argmax(dim=-1).eq(labels) & targets).sum()
        return total, correct, targets.sum()

    def step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean token loss, correct predictions and target count of ``batch``."""
        total, correct, count = self.step_terms(batch)
        return total / count.clamp(min=1), correct, count

    def training_terms(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        total, _, count = self.step_terms(batch)
        return total, count

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log_metrics(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """The final test logs under ``test/``: it must not overwrite the ``val/`` metrics."""
        self.log_metrics(batch, "test")

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:  # pragma: no cover
        raise NotImplementedError


class MaskedLMTask(_TokenPrediction):
    """BERT-style masked LM; validation reports loss and accuracy on the masked positions."""

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:
        loss, correct, total = self.step(batch)
        n = int(total)
        self.log(f"{stage}/loss", loss, prog_bar=True, sync_dist=True, batch_size=n)
        self.log(f"{stage}/mlm_acc", correct.float() / total.clamp(min=1), prog_bar=True,
                 sync_dist=True, batch_size=n)


class CausalLMTask(_TokenPrediction):
    """GPT-style causal LM; validation reports loss and perplexity (exp of the token mean)."""

    def __init__(self, recipe: dict[str, Any], vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        self.val_nll = MeanMetric()  # token-weighted, synchronised across processes
        self.test_nll = MeanMetric()

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:
        nll = self.val_nll if stage == "val" else self.test_nll
        loss, _, total = self.step(batch)
        nll.update(loss.detach(), total)
        self.log(f"{stage}/loss", nll, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        self.log("val/ppl", torch.exp(self.val_nll.compute().clamp(max=50.0)), prog_bar=True)

    def on_test_epoch_end(self) -> None:
        self.log("test/ppl", torch.exp(self.test_nll.compute().clamp(max=50.0)))
