"""Token embeddings scaled by sqrt(dim) plus sinusoidal or learned positions (fairseq style)."""

from __future__ import annotations

import math

import torch
from torch import nn

from normzoo.nn.dropout import Dropout


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    """``[num_positions, dim]``: sin in the first half of the channels, cos in the second."""
    half = dim // 2
    step = math.log(10000.0) / max(half - 1, 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -step)
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * freqs[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    return table


class Embeddings(nn.Module):
    """``dropout(sqrt(dim) * E[token] + P[position])`` for a batch ``[B, T]`` of token ids.

    ``offset`` is the position of the first token (non-zero in incremental decoding).
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        pad_id: int,
        positions: str = "sinusoidal",
        max_positions: int = 1024,
        dropout: float = 0.0,
        token_embedding: nn.Embedding | None = None,
    ) -> None:
        super().__init__()
        if positions not in ("sinusoidal", "learned"):
            raise ValueError(f"positions must be 'sinusoidal' or 'learned', not {positions!r}")
        self.dim, self.pad_id, self.max_positions = dim, pad_id, max_positions
        self.scale = math.sqrt(dim)
        if token_embedding is None:
            token_embedding = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
            nn.init.normal_(token_embedding.weight, mean=0.0, std=dim**-0.5)
            with torch.no_grad():
                token_embedding.weight[pad_id].zero_()
        self.tokens = token_embedding
        if positions == "learned":
            self.learned_positions = nn.Embedding(max_positions, dim)
            nn.init.normal_(self.learned_positions.weight, mean=0.0, std=dim**-0.5)
        else:
            self.learned_positions = None
            self.register_buffer(
                "sinusoids", sinusoidal_table(max_positions, dim), persistent=False
            )
        self.dropout = Dropout(dropout)

    def position_table(self) -> torch.Tensor:
        return self.sinusoids if self.learned_positions is None else self.learned_positions.weight

    def forward(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        length = tokens.shape[1]
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions exceeds max_positions="
                f"{self.max_positions}"
            )
        positions = self.position_table()[offset : offset + length]
        x = self.tokens(tokens) * self.scale + positions.to(self.tokens.weight.dtype)
        return self.dropout(x)
