"""The classifier's LightningModule: cross-entropy over the sentences' labels; validation and
test report the loss, accuracy and macro-F1 (torchmetrics, synchronised across processes). The
final test keeps each sentence's prediction, label and loss (:mod:`normzoo.tasks.testing`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from normzoo.classification.metrics import ClassificationMetrics
from normzoo.plugin import PAD, KeptExamples, LossTerms, Recipe, ScoredModule, token_terms


def sentence_terms(logits: torch.Tensor, labels: torch.Tensor,
                   smoothing: float = 0.0) -> LossTerms:
    """The token loss's terms (:func:`~normzoo.nn.token_loss.token_terms`) of one prediction
    per sentence: ``logits`` ``[B, labels]`` as a one-token sequence each."""
    return token_terms(logits.unsqueeze(1), labels.unsqueeze(1), ignore_index=-100,
                       smoothing=smoothing, count_correct=True)


class ClassificationModule(ScoredModule):
    """Trains the encoder and its ``classifier`` head (built by the task: :mod:`.task`)."""

    loss_inputs: ClassVar[dict[str, int]] = {"tokens": PAD, "labels": -100}

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        classes = len(self.model.classifier.out.weight)
        self.val_scores = ClassificationMetrics(classes)
        self.test_scores = ClassificationMetrics(classes)
        self.kept_examples = KeptExamples()  # the final test's, per sentence

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
        if stage == "test" and "items" in batch:  # the final test: each sentence kept
            losses = F.cross_entropy(logits.float(), batch["labels"], reduction="none")
            self.kept_examples.add(batch["items"], zip(
                logits.argmax(dim=-1).tolist(), batch["labels"].tolist(), losses.tolist(),
                strict=True))

    def on_validation_epoch_end(self) -> None:
        self._log_scores("val", self.val_scores)

    def on_test_epoch_end(self) -> None:
        self._log_scores("test", self.test_scores)

    def _log_scores(self, stage: str, scores: ClassificationMetrics) -> None:
        for name, value in scores.compute().items():
            self.log(f"{stage}/{name}", value, prog_bar=name == "accuracy")
        scores.reset()

    def example_rows(self, dataset: Any, kept: Sequence[tuple[int, Any]]
                     ) -> tuple[list[str], list[tuple[str, str, float]]] | None:
        """The final test's rows, one per sentence of the split in its order: the predicted
        and the gold label's names (the run's label set) and the sentence's cross-entropy in
        nats; None where some sentence went unscored."""
        if [item for item, _ in kept] != list(range(len(dataset))):
            return None
        names = self.recipe.task_options["labels"]
        return (["prediction", "label", "loss"],
                [(names[predicted], names[label], float(loss))
                 for _, (predicted, label, loss) in kept])
