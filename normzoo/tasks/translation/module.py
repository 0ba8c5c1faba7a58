"""Translation: label-smoothed cross-entropy, validation loss and validation BLEU."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from normzoo.data.tokenizer import PAD, Tokenizer
from normzoo.inference.scoring import score
from normzoo.inference.translate import translate_batch
from normzoo.nn.token_loss import LossTerms, token_terms
from normzoo.recipe import Recipe
from normzoo.tasks.base import TaskModule


class TranslationModule(TaskModule):
    """Trains a :class:`~normzoo.models.Seq2SeqModel`; ``references`` come from the data module."""

    smooths_labels = True
    loss_inputs: ClassVar[dict[str, int]] = {"src": PAD, "tgt_in": PAD, "tgt_out": PAD}

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        self.valid_references: list[str] = []
        self._hyps: dict[int, str] = {}
        self._tokenizer: Tokenizer | None = None

    def setup(self, stage: str) -> None:
        """The validation references its BLEU is scored against, from the run's data module
        (where there is one: a final test hands its loaders alone)."""
        datamodule = getattr(self._trainer, "datamodule", None)
        if datamodule is not None and not self.valid_references:
            self.valid_references = datamodule.references["valid"]

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_str(self.tokenizer_json)
        return self._tokenizer

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model(batch["src"], batch["tgt_in"])

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Summed (label-smoothed) cross-entropy over the target tokens, and their count."""
        return token_terms(self.logits(batch), batch["tgt_out"], ignore_index=PAD,
                           smoothing=smoothing)

    def on_validation_epoch_start(self) -> None:
        self._hyps = {}

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/loss", self.step_terms(batch).mean, prog_bar=True, sync_dist=True,
                 batch_size=batch["ntokens"])
        limit = self.recipe.eval.valid_bleu_limit
        if not self.recipe.eval.valid_bleu or not self.valid_references:
            return
        keep = batch["ids"] < (limit if limit is not None else len(self.valid_references))
        if not bool(keep.any()):
            return
        # Same decoding code as `normzoo evaluate`, greedy here to keep validation cheap.
        greedy = self.recipe.eval.model_copy(update={"beam": 1})
        hyps = translate_batch(self.model, batch["src"][keep], greedy)
        for i, ids in zip(batch["ids"][keep].tolist(), hyps, strict=True):
            self._hyps[i] = self.tokenizer.decode(ids)

    def on_validation_epoch_end(self) -> None:
        hyps = self._hyps
        if self.trainer.world_size > 1:
            # Each process decoded its share; the sampler may have repeated a sentence to keep
            # processes in step. Merging by sentence id scores every sentence exactly once.
            shares: list[dict[int, str]] = [{} for _ in range(self.trainer.world_size)]
            torch.distributed.all_gather_object(shares, hyps)
            hyps = {i: text for share in shares for i, text in share.items()}
        if not hyps:
            return
        self._hyps = hyps
        ids = sorted(self._hyps)
        result = score([self._hyps[i] for i in ids], [self.valid_references[i] for i in ids])
        self.log("val/bleu", result.bleu, prog_bar=True)
        self.log("val/chrf", result.chrf)
