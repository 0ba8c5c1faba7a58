"""Language modelling: masked LM (BERT-style, MLM accuracy) and causal LM (perplexity). The
final test keeps each sentence's summed token loss and its token count
(:mod:`normzoo.tasks.testing`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torchmetrics import MeanMetric

from normzoo.data.tokenizer import PAD
from normzoo.nn.token_loss import LossTerms, token_terms
from normzoo.recipe import Recipe
from normzoo.tasks.scored import ScoredModule
from normzoo.tasks.testing import KeptExamples, token_losses


class _TokenPrediction(ScoredModule):
    """Cross-entropy on the positions whose label is not -100."""

    loss_inputs: ClassVar[dict[str, int]] = {"tokens": PAD, "labels": -100}

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        self.kept_examples = KeptExamples()  # the final test's, per row of a batch

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

    def scored_terms(self, batch: dict[str, Any]) -> LossTerms:
        """:meth:`step_terms`; in the final test, whose batches carry their ``items``, from
        the same logits each row's token losses are kept too (:meth:`keep_rows`)."""
        if "items" not in batch:
            return self.step_terms(batch)
        logits = self.logits(batch)
        self.keep_rows(batch["items"], token_losses(logits, batch["labels"]), batch["labels"])
        return token_terms(logits, batch["labels"], ignore_index=-100, count_correct=True)

    def keep_rows(self, items: torch.Tensor, losses: torch.Tensor,
                  labels: torch.Tensor) -> None:  # pragma: no cover
        raise NotImplementedError

    def example_rows(self, dataset: Any, kept: Sequence[tuple[int, Any]]
                     ) -> tuple[list[str], list[tuple[float, int]]] | None:
        """The final test's rows, one per line of the split in its order: its summed token
        loss (nats) and the tokens it counts, as the test loss counts them; None where some
        example went unscored."""
        if [item for item, _ in kept] != list(range(len(dataset))):
            return None
        totals = self.line_totals(dataset, kept)
        if totals is None:
            return None
        return ["loss_sum", "tokens"], list(zip(*(t.tolist() for t in totals), strict=True))

    def line_totals(self, dataset: Any, kept: Sequence[tuple[int, Any]]
                    ) -> tuple[np.ndarray, np.ndarray] | None:  # pragma: no cover
        raise NotImplementedError


class MaskedLMModule(_TokenPrediction):
    """BERT-style masked LM; validation reports loss and accuracy on the masked positions."""

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:
        terms = self.scored_terms(batch)
        assert terms.correct is not None
        n = int(terms.tokens)
        self.log(f"{stage}/loss", terms.mean, prog_bar=True, sync_dist=True, batch_size=n)
        self.log(f"{stage}/mlm_acc", terms.correct.float() / terms.tokens.clamp(min=1),
                 prog_bar=True, sync_dist=True, batch_size=n)

    def keep_rows(self, items: torch.Tensor, losses: torch.Tensor, labels: torch.Tensor) -> None:
        """Each sentence's summed loss over its masked tokens, and their number."""
        counted = labels.ne(-100).sum(dim=-1).tolist()
        self.kept_examples.add(items, zip(losses.double().sum(dim=-1).tolist(), counted,
                                          strict=True))

    def line_totals(self, dataset: Any, kept: Sequence[tuple[int, Any]]
                    ) -> tuple[np.ndarray, np.ndarray]:
        """By line of the split: a line empty after tokenization (not an example) scores 0 of
        0 tokens, so the rows stay the split's lines whatever the tokenizer."""
        sums, counts = np.zeros(len(dataset.lines)), np.zeros(len(dataset.lines), np.int64)
        lines = dataset.keep[[item for item, _ in kept]]
        sums[lines] = [loss for _, (loss, _) in kept]
        counts[lines] = [tokens for _, (_, tokens) in kept]
        return sums, counts


class CausalLMModule(_TokenPrediction):
    """GPT-style causal LM; validation reports loss and perplexity (exp of the token mean)."""

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        self.val_nll = MeanMetric()  # token-weighted, synchronised across processes
        self.test_nll = MeanMetric()

    def log_metrics(self, batch: dict[str, Any], stage: str) -> None:
        nll = self.val_nll if stage == "val" else self.test_nll
        terms = self.scored_terms(batch)
        nll.update(terms.mean.detach(), terms.tokens)
        self.log(f"{stage}/loss", nll, prog_bar=True)

    def keep_rows(self, items: torch.Tensor, losses: torch.Tensor, labels: torch.Tensor) -> None:
        """Each block's token losses: its tokens belong to lines (:meth:`line_totals`)."""
        counted = labels.ne(-100).sum(dim=-1).tolist()
        self.kept_examples.add(items, [row[:n].numpy().copy()
                                       for row, n in zip(losses, counted, strict=True)])

    def line_totals(self, dataset: Any, kept: Sequence[tuple[int, Any]]
                    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Each block's token losses added to the lines they predict (a block cuts lines, and
        a line is the example: its rows do not change with ``data.max_len``); None for blocks
        that do not know their lines."""
        if getattr(dataset, "offsets", None) is None:
            return None
        lines = len(dataset.offsets) - 1
        where = np.concatenate([dataset.label_lines(item, len(losses)) for item, losses in kept])
        losses = np.concatenate([losses for _, losses in kept]).astype(np.float64)
        return (np.bincount(where, weights=losses, minlength=lines),
                np.bincount(where, minlength=lines))

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
