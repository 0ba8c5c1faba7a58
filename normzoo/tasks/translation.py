"""Translation: label-smoothed cross-entropy, validation loss and validation BLEU."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from normzoo.data.tokenizer import PAD, Tokenizer
from normzoo.evaluate import translate_batch
from normzoo.scoring import score
from normzoo.tasks.base import NormzooTask


class TranslationTask(NormzooTask):
    """Trains a :class:`~normzoo.models.Seq2SeqModel`; ``references`` come from the data module."""

    def __init__(self, recipe: dict[str, Any], vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__(recipe, vocab_size, tokenizer_json)
        self.valid_references: list[str] = []
        self._hyps: dict[int, str] = {}
        self._tokenizer: Tokenizer | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_str(self.tokenizer_json)
        return self._tokenizer

    def loss(self, batch: dict[str, torch.Tensor], smoothing: float) -> torch.Tensor:
        logits = self.model(batch["src"], batch["tgt_in"])
        return F.cross_entropy(
            logits.float().flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=PAD,
            label_smoothing=smoothing,
        )

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch, self.recipe.optim.label_smoothing)
        size = batch["src"].shape[0]
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=size)
        self.log_throughput(batch["ntokens"], size)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._hyps = {}

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss = self.loss(batch, 0.0)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True, batch_size=batch["ntokens"])
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
        if not self._hyps:
            return
        ids = sorted(self._hyps)
        result = score([self._hyps[i] for i in ids], [self.valid_references[i] for i in ids])
        self.log("val/bleu", result.bleu, prog_bar=True)
        self.log("val/chrf", result.chrf)
