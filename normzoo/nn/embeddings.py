"""Token embeddings scaled by sqrt(dim) plus sinusoidal or learned positions (fairseq style).

With ``positions="rope"`` no position is added here: rotary embeddings act inside
self-attention (:mod:`normzoo.nn.rotary`). ``scale=False`` leaves the token embeddings unscaled,
as Llama and GPT-2 do, where fairseq (and normzoo by default) multiply them by sqrt(dim).
"""

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

    ``offset`` is the position of the first token (non-zero in incremental decoding). With
    rotary positions there is no ``P``, but ``max_positions`` still bounds the sequence, so
    that every family refuses the same lengths whatever its positions.
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
        scale: bool = True,
    ) -> None:
        super().__init__()
        if positions not in ("sinusoidal", "learned", "rope"):
            raise ValueError("positions must be 'sinusoidal', 'learned' or 'rope', not "
                             f"{positions!r}")
        self.dim, self.pad_id, self.max_positions = dim, pad_id, max_positions
        self.scale = math.sqrt(dim) if scale else 1.0
        if token_embedding is None:
            token_embedding = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
            nn.init.normal_(token_embedding.weight, mean=0.0, std=dim**-0.5)
            with torch.no_grad():
                token_embedding.weight[pad_id].zero_()
        self.tokens = token_embedding
        if positions == "learned":
            self.learned_positions = nn.Embedding(max_positions, dim)
            nn.init.normal_(self.learned_positions.weight, mean=0.0, std=dim**-0.5)
        elif positions == "sinusoidal":
            self.learned_positions = None
            self.register_buffer(
                "sinusoids", sinusoidal_table(max_positions, dim), persistent=False
            )
        else:
            self.learned_positions = self.sinusoids = None
        self.dropout = Dropout(dropout)

    def position_table(self) -> torch.Tensor | None:
        """The ``[max_positions, dim]`` table added to the tokens; None with rotary positions."""
        if self.learned_positions is not None:
            return self.learned_positions.weight
        return self.sinusoids

    def forward(self, tokens: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """``offset`` may be a one-element tensor on the device: a fixed-shape decoding step's
        position (:class:`~normzoo.nn.kv_cache.StaticKVCache`), which is not read on the host,
        so the caller has checked it against ``max_positions``."""
        length = tokens.shape[1]
        if not isinstance(offset, torch.Tensor) and offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions exceeds max_positions="
                f"{self.max_positions}"
            )
        x = self.tokens(tokens)
        if self.scale != 1.0:
            x = x * self.scale
        table = self.position_table()
        if table is not None:
            rows = (table.index_select(0, offset + torch.arange(length, device=offset.device))
                    if isinstance(offset, torch.Tensor) else table[offset : offset + length])
            x = x + rows.to(self.tokens.weight.dtype)
        return self.dropout(x)


def to_float32(module: nn.Module) -> None:
    """``module`` in float32 with its sinusoid tables computed again: a ``bf16-true`` run's cast
    rounded them to bf16, and casting back up does not undo that, so a final test scored with
    them differed from the same checkpoint loaded in float32 (a test loss of 4.7793 against
    ``normzoo evaluate``'s 4.7794)."""
    module.float()
    for part in module.modules():
        if isinstance(part, Embeddings) and getattr(part, "sinusoids", None) is not None:
            part.sinusoids = sinusoidal_table(part.max_positions, part.dim).to(
                part.sinusoids.device)
