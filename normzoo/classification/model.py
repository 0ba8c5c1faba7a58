"""The classifier head that turns an encoder's hidden states into class logits.

It follows BERT's sentence classifier (Devlin et al. 2019): pool the sequence to one vector,
then BERT's pooler (dense + tanh), dropout, and a linear layer to the classes. Keeping BERT's
shape and initialisation means a normalization study compares encoders, not heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

POOLINGS = ("first", "mean")


class ClassifierHead(nn.Module):
    """Pooled encoder states -> ``labels`` logits.

    ``pooling="first"`` reads position 0: normzoo's encoder inputs start with BOS
    (:class:`normzoo.data.examples.SentenceData`), which plays BERT's ``[CLS]`` role; attention
    lets it gather the whole sentence, and fine-tuning teaches it to. ``pooling="mean"``
    averages the non-padding positions exactly (padding contributes nothing, whatever its
    values), which often trains faster when the encoder was never pre-trained to fill BOS.
    """

    def __init__(self, width: int, labels: int, pooling: str = "first",
                 dropout: float = 0.1) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling '{pooling}'; choose one of: {', '.join(POOLINGS)}")
        if labels < 1:
            raise ValueError(f"a classifier needs at least one label, got {labels}")
        self.pooling = pooling
        self.dense = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(width, labels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT's initialisation: weights N(0, 0.02), biases zero; small logits at the start
        give a loss near log(labels), so the first steps do not fight a random head."""
        for layer in (self.dense, self.out):
            nn.init.normal_(layer.weight, mean=0.0, std=0.02)
            nn.init.zeros_(layer.bias)

    def pool(self, hidden: Tensor, padding: Tensor) -> Tensor:
        """[B, T, D] states, [B, T] bool padding (True at padding) -> [B, D] sentence vectors.

        Mean pooling fills padding with zeros (not multiplying by a mask, so even inf or NaN
        at padded positions cannot leak in) and divides by the count of real tokens, at least
        one, so an all-padding row gives zeros rather than NaN."""
        if self.pooling == "first":
            return hidden[:, 0]
        real = (~padding).unsqueeze(-1)
        total = hidden.masked_fill(~real, 0.0).sum(dim=1)
        count = real.sum(dim=1).clamp(min=1).to(hidden.dtype)
        return total / count

    def forward(self, hidden: Tensor, padding: Tensor) -> Tensor:
        """[B, T, D] encoder states and [B, T] padding mask -> [B, labels] logits."""
        pooled = torch.tanh(self.dense(self.pool(hidden, padding)))
        return self.out(self.dropout(pooled))

    def extra_repr(self) -> str:
        return f"pooling={self.pooling}"
