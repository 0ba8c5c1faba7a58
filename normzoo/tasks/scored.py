"""The LightningModule of a task scored by Lightning's own loops (the language models, the
classifier, a plugin's tagger): its validation and test steps log the loss (and the accuracy,
where ``loss_terms`` counts correct predictions) unless it defines its own, and score in
float32 whatever the run trained in, so that its final test
(:func:`~normzoo.tasks.testing.test_in_loops`) equals a re-scoring of the checkpoint by
``normzoo evaluate``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from normzoo.nn.embeddings import to_float32
from normzoo.nn.token_loss import LossTerms
from normzoo.tasks.base import TaskModule


class ScoredModule(TaskModule):
    """A task whose validation and test steps run under :meth:`scoring_precision`; a subclass
    gives ``logits`` and ``loss_terms``, and its own steps only where it scores more."""

    # Set by the final test (normzoo.tasks.testing): score in float32 whatever the run's
    # trainer.precision, as the translation test decodes and as normzoo evaluate scores.
    float32_scores = False

    def step_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Eager for the final test's float32 scores, as ``normzoo evaluate`` computes them:
        ``trainer.compile``'s region was compiled for the training precision."""
        if self.float32_scores:
            return self.loss_terms(batch, smoothing)
        return super().step_terms(batch, smoothing)

    def on_validation_start(self) -> None:
        if self.float32_scores:  # after the strategy cast a bf16-true run's weights to bf16
            to_float32(self)

    def on_test_start(self) -> None:
        self.on_validation_start()

    @contextmanager
    def scoring_precision(self) -> Iterator[None]:
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

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        with self.scoring_precision():
            self.log_terms(self.step_terms(batch), "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """The final test logs under ``test/``: it must not overwrite the ``val/`` metrics."""
        with self.scoring_precision():
            self.log_terms(self.step_terms(batch), "test")

    def log_terms(self, terms: LossTerms, stage: str) -> None:
        """``STAGE/loss`` (and ``STAGE/accuracy`` where correct predictions are counted), each
        the mean over the units the loss averages over, summed across batches and processes."""
        count = int(terms.tokens)
        self.log(f"{stage}/loss", terms.mean, prog_bar=True, sync_dist=True, batch_size=count)
        if terms.correct is not None:
            self.log(f"{stage}/accuracy", terms.correct / max(count, 1), prog_bar=True,
                     sync_dist=True, batch_size=count)
