"""The dataset and the LightningModule: tokens in, a tag per token out; the default steps of
``ScoredModule`` log the loss and the accuracy over the tagged tokens."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from normzoo.plugin import BOS, EOS, Indexed, ScoredModule, TokenTable, pad, token_terms
from nz_tagger.task import UNTAGGED


class Tagged(Indexed):
    """``[BOS, *tokens, EOS]`` cut to ``max_len``, and their tags (-100: no loss)."""

    def __init__(self, text: TokenTable, tags: TokenTable, max_len: int) -> None:
        self.text, self.tags, self.cap = text, tags, max_len - 2
        self._lengths = np.minimum(text.lengths(), self.cap) + 2

    def __len__(self) -> int:
        return len(self._lengths)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def sides(self) -> list[np.ndarray]:
        return [self._lengths]

    def collate(self, items: Any) -> dict[str, Any]:
        rows = [[BOS, *self.text.row(i)[: self.cap], EOS] for i in items]
        tags = [[UNTAGGED, *self.tags.row(i)[: self.cap], UNTAGGED] for i in items]
        length = getattr(items, "length", 0)
        labels = pad(tags, value=UNTAGGED, length=length)
        labels[labels == UNTAGGED] = -100
        return {"tokens": pad(rows, length=length), "tags": labels,
                "ntokens": int((labels != -100).sum())}


class TaggerModule(ScoredModule):
    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model.tagger(self.model.encode(batch["tokens"]))

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> Any:
        return token_terms(self.logits(batch), batch["tags"], ignore_index=-100,
                           smoothing=smoothing, count_correct=True)
