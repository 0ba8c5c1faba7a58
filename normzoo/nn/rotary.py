"""Rotary position embeddings (RoPE, Su et al. 2021) for self-attention's queries and keys.

Channel ``i`` of the first half of a head is rotated together with channel ``i + head_dim/2``
by the angle ``position * base^(-2i/head_dim)``: the "rotate_half" (non-interleaved) layout of
GPT-NeoX and Hugging Face's Llama, not the original paper's interleaved pairs. It is the one
layout a Llama-shaped model can be exported to without permuting W_q and W_k, so the angles and
frequencies are computed exactly as ``transformers``' ``LlamaRotaryEmbedding`` computes them.

A query and a key rotated by their own absolute positions give a score that depends only on
their distance, so nothing is added to the token embeddings; in incremental decoding the keys
are cached already rotated and each new query is rotated at its absolute position (the cache's
length).
"""

from __future__ import annotations

import torch
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[-x2, x1]`` for ``x = [x1, x2]`` split in halves along the last dimension: the 90-degree
    turn of every (i, i + d/2) channel pair, which with cos and sin makes the rotation."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` in float32, cast back to ``x``'s dtype.

    float32 because in bf16 an angle's cos and sin keep about three significant digits, which
    at long distances is most of the signal the rotation carries.
    """
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotates ``[B, H, T, head_dim]`` queries and keys by their absolute positions.

    cos and sin are cached in float32 for the positions seen so far and recomputed, longer, when
    a longer sequence comes (or on another device). The cache is a plain attribute, not a buffer:
    it is not in the state dict (nothing to load or to be missing from old checkpoints), and
    casting the model to bf16 does not cast it.
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head dimension, not {head_dim}")
        if base <= 0:
            raise ValueError(f"rotary base must be positive, not {base}")
        self.head_dim, self.base = head_dim, float(base)
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    def inverse_frequencies(self, device: torch.device | None = None) -> torch.Tensor:
        """``base^(-2i/head_dim)`` for ``i < head_dim/2``, float32, as ``transformers`` computes
        them (a power of the float base, then its reciprocal)."""
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device)
        return 1.0 / (self.base ** (exponents / self.head_dim))

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """The rotation angles ``[len(positions), head_dim]`` (float32) of ``positions``."""
        freqs = positions.float()[:, None] * self.inverse_frequencies(positions.device)[None, :]
        return torch.cat((freqs, freqs), dim=-1)

    def cos_sin(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[length, head_dim]`` (float32) of positions ``0 .. length-1``."""
        cached = self._cos
        # A table made under inference_mode cannot be saved for a later backward pass.
        stale = (cached is not None and cached.is_inference()
                 and not torch.is_inference_mode_enabled())
        if cached is None or stale or cached.shape[0] < length or cached.device != device:
            size = max(length, 2 * cached.shape[0] if cached is not None and not stale else 0)
            angles = self.angles(torch.arange(size, dtype=torch.float32, device=device))
            self._cos, self._sin = angles.cos(), angles.sin()
        return self._cos[:length], self._sin[:length]

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, offset: int | torch.Tensor = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` and ``k`` (``[B, H, T, head_dim]``, the same T) rotated as positions
        ``offset .. offset+T-1``; ``offset`` is the number of positions already cached.

        A tensor ``offset`` is that number on the device (a fixed-shape step over a static
        cache, replayed as a CUDA graph, must not read it on the host): the step's angles are
        computed from it then, not looked up in the table, which a longer sequence replaces
        under a captured step's feet.
        """
        length = q.shape[-2]
        if isinstance(offset, torch.Tensor):
            angles = self.angles(offset + torch.arange(length, device=q.device))
            cos, sin = angles.cos(), angles.sin()
        else:
            cos, sin = self.cos_sin(offset + length, q.device)
            cos, sin = cos[offset:], sin[offset:]
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base:g}"
