"""The classifier's LightningModule: cross-entropy over the sentences' labels; validation and
test report the loss, accuracy and macro-F1 (torchmetrics, synchronised across processes)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from normzoo.data.tokenizer import PAD
from normzoo.nn.token_loss import LossTerms, token_terms
from normzoo.recipe import Recipe
from normzoo.tasks.classification.metrics import ClassificationMetrics
from normzoo.tasks.scored import ScoredInFloat32


def sentence_terms(logits: torch.Tensor, labels: torch.Tensor,
                   smoothing: float = 0.0) -> LossTerms:
    """The token loss's terms (:func:`~normzoo.nn.token_loss.token_terms`) of one prediction
    per sentence: ``logits`` ``[B, labels]`` as a one-token sequence each."""
    return token_terms(logits.unsqueeze(1), labels.unsqueeze(1), ignore_index=-100,
                       smoothing=smoothing, count_correct=True)


class ClassificationTask(ScoredInFloat32):
    """Trains the encoder and its ``classifier`` head (built by the task: :mod:`.task`)."""

    loss_inputs: ClassVar[dict[str, int]] = {"tokens": PAD, "labels": -100}

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        classes = len(self.model.classifier.out.weight)
        self.val_scores = ClassificationMetrics(classes)
        self.test_scores = ClassificationMetrics(classes)

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        """``[B, labels]``: the head on the encoder's states of each sentence."""
        tokens = batch["tokens"]
        return self.model.classifier(self.model.encode(tokens), self.model.padding_mask(tokens))

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Summed cross-entropy over the sentences, their number, and how many are right."""
        return sentence_terms(self.logits(batch), batch["labels"], smoothing)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        with self.scoring_precision():
            self._score(batch, "val", self.val_scores)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """The final test logs under ``test/``: it must not overwrite the ``val/`` metrics."""
        with self.scoring_precision():
            self._score(batch, "test", self.test_scores)

    def _score(self, batch: dict[str, Any], stage: str, scores: ClassificationMetrics) -> None:
        logits = self.logits(batch)
        terms = sentence_terms(logits, batch["labels"])
        self.log(f"{stage}/loss", terms.mean, prog_bar=True, sync_dist=True,
                 batch_size=int(terms.tokens))
        scores.update(logits.float(), batch["labels"])

    def on_validation_epoch_end(self) -> None:
        self._log_scores("val", self.val_scores)

    def on_test_epoch_end(self) -> None:
        self._log_scores("test", self.test_scores)

    def _log_scores(self, stage: str, scores: ClassificationMetrics) -> None:
        for name, value in scores.compute().items():
            self.log(f"{stage}/{name}", value, prog_bar=name == "accuracy")
        scores.reset()
