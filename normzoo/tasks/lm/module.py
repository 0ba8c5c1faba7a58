"""Language modelling: masked LM (BERT-style, MLM accuracy) and causal LM (perplexity)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torchmetrics import MeanMetric

from normzoo.data.tokenizer import PAD
from normzoo.nn.token_loss import LossTerms, token_terms
from normzoo.recipe import Recipe
from normzoo.tasks.scored import ScoredInFloat32


class _TokenPrediction(ScoredInFloat32):
    """Cross-entropy on the positions whose label is not -100."""

    loss_inputs: ClassVar[dict[str, int]] = {"tokens": PAD, "labels": -100}

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model(batch["tokens"])

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Summed token loss, target count and correct predictions of ``batch``."""
        return token_terms(self.logits(batch), batch["labels"], ignore_index=-100,
                           smoothing=smoothing, count_correct=True)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        with self.scoring_precision():
            self.log_metrics(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """The final test logs under ``test/``: it must not overwrite the ``val/`` metrics."""
        with self.scoring_precision():
            self.log_metrics(batch, "test")

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:  # pragma: no cover
        raise NotImplementedError


class MaskedLMTask(_TokenPrediction):
    """BERT-style masked LM; validation reports loss and accuracy on the masked positions."""

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:
        terms = self.step_terms(batch)
        assert terms.correct is not None
        n = int(terms.tokens)
        self.log(f"{stage}/loss", terms.mean, prog_bar=True, sync_dist=True, batch_size=n)
        self.log(f"{stage}/mlm_acc", terms.correct.float() / terms.tokens.clamp(min=1),
                 prog_bar=True, sync_dist=True, batch_size=n)


class CausalLMTask(_TokenPrediction):
    """GPT-style causal LM; validation reports loss and perplexity (exp of the token mean)."""

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        self.val_nll = MeanMetric()  # token-weighted, synchronised across processes
        self.test_nll = MeanMetric()

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:
        nll = self.val_nll if stage == "val" else self.test_nll
        terms = self.step_terms(batch)
        nll.update(terms.mean.detach(), terms.tokens)
        self.log(f"{stage}/loss", nll, prog_bar=True)

    def on_validation_start(self) -> None:
        super().on_validation_start()
        # bf16-true's cast of the module reaches the metrics' states, and a mean summed in bf16
        # moved a test loss from 4.7794 to 4.7812: the sums stay float32.
        for metric in (self.val_nll, self.test_nll):
            metric.set_dtype(torch.float32)

    def on_validation_epoch_end(self) -> None:
        self.log("val/ppl", torch.exp(self.val_nll.compute().clamp(max=50.0)), prog_bar=True)

    def on_test_epoch_end(self) -> None:
        self.log("test/ppl", torch.exp(self.test_nll.compute().clamp(max=50.0)))
