"""Language modelling: masked LM (BERT-style, MLM accuracy) and causal LM (perplexity)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
from torchmetrics import MeanMetric

from normzoo.data.tokenizer import PAD
from normzoo.nn.embeddings import to_float32
from normzoo.nn.token_loss import LossTerms, token_terms
from normzoo.recipe import Recipe
from normzoo.tasks.base import NormzooTask


class _TokenPrediction(NormzooTask):
    """Cross-entropy on the positions whose label is not -100."""

    loss_inputs: ClassVar[dict[str, int]] = {"tokens": PAD, "labels": -100}
    # Set by the final test (normzoo.run.final_test): score in float32 whatever the run's
    # trainer.precision, as the translation test decodes and as normzoo evaluate scores.
    float32_scores = False

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model(batch["tokens"])

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Summed token loss, target count and correct predictions of ``batch``."""
        return token_terms(self.logits(batch), batch["labels"], ignore_index=-100,
                           smoothing=smoothing, count_correct=True)

    def step_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Eager for the final test's float32 scores, as ``normzoo evaluate`` computes them:
        ``trainer.compile``'s region was compiled for the training precision."""
        if self.float32_scores:
            return self.loss_terms(batch, smoothing)
        return super().step_terms(batch, smoothing)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        with self._scoring_precision():
            self.log_metrics(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """The final test logs under ``test/``: it must not overwrite the ``val/`` metrics."""
        with self._scoring_precision():
            self.log_metrics(batch, "test")

    def on_validation_start(self) -> None:
        if self.float32_scores:  # after the strategy cast a bf16-true run's weights to bf16
            to_float32(self)

    def on_test_start(self) -> None:
        self.on_validation_start()

    @contextmanager
    def _scoring_precision(self) -> Iterator[None]:
        """With :attr:`float32_scores`, the step in float32: the precision plugin's autocast
        (``bf16-mixed``, ``16-mixed``) turned off and its default dtype (``bf16-true``) back to
        float32. A bf16 forward moved a causal LM's test perplexity by 0.016% (477.811 against
        the 477.735 that ``normzoo evaluate`` scores in float32), so the run's summary and a
        re-scoring of its checkpoint disagreed."""
        if not self.float32_scores:
            yield
            return
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        try:
            with torch.autocast(self.device.type, enabled=False):
                yield
        finally:
            torch.set_default_dtype(default)

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
