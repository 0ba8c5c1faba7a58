"""Encoder and decoder stacks: embedding norm, layers, and the scheme's stream ends.

The stream's shape is the scheme's business (one tensor, or ResiDual's pair): a stack only asks
``ends.begin`` for the initial state and ``ends(state)`` for its output, so a final norm can't
end up inside the layer loop.
"""

from __future__ import annotations

import torch
from torch import nn

from normzoo.models.layers import DecoderLayer, EncoderLayer, SublayerBuilder
from normzoo.nn.kv_cache import KVCache, StaticKVCache
from normzoo.nn.padding import padding_mask_context


class _Stack(nn.Module):
    def __init__(self, build: SublayerBuilder, layer_cls: type[nn.Module]) -> None:
        super().__init__()
        scheme, dim = build.scheme, build.stack.dim
        self.stack_info = build.stack
        self.embedding_norm = build.make_norm(dim) if scheme.embedding_norm() else nn.Identity()
        self.layers = nn.ModuleList(layer_cls(build, i) for i in range(build.stack.depth))
        self.ends = scheme.ends(lambda: build.make_norm(dim))


class EncoderStack(_Stack):
    def __init__(self, build: SublayerBuilder) -> None:
        super().__init__(build, EncoderLayer)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: embedded tokens ``[B, T, dim]``; ``padding_mask``: bool ``[B, T]``, True = pad."""
        with padding_mask_context(padding_mask):
            state = self.ends.begin(self.embedding_norm(x))
            for layer in self.layers:
                state = layer(state, padding_mask)
            return self.ends(state)


class DecoderStack(_Stack):
    def __init__(self, build: SublayerBuilder) -> None:
        super().__init__(build, DecoderLayer)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        memory_padding_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        norm_padding_mask: torch.Tensor | None = None,
        cache: KVCache | StaticKVCache | None = None,
    ) -> torch.Tensor:
        """Causal decoding of ``x`` ``[B, T, dim]``, optionally attending to ``memory``.

        ``key_padding_mask`` (``[B, cache + T]``) is only needed for left-padded inputs: with
        right padding the causal mask already keeps real tokens from seeing pads.
        ``norm_padding_mask`` (``[B, T]``) keeps pads out of batch statistics.
        """
        with padding_mask_context(norm_padding_mask):
            state = self.ends.begin(self.embedding_norm(x))
            for i, layer in enumerate(self.layers):
                state = layer(
                    state,
                    memory,
                    padding_mask=key_padding_mask,
                    memory_padding_mask=memory_padding_mask,
                    cache=None if cache is None else cache.layers[i],
                    stream_padding_mask=norm_padding_mask,
                )
            return self.ends(state)

    def new_cache(self, capacity: int | None = None) -> KVCache | StaticKVCache:
        """A growing cache, or with ``capacity`` one preallocated for that many positions
        (:mod:`normzoo.nn.kv_cache`)."""
        if capacity is None:
            return KVCache(len(self.layers))
        return StaticKVCache(len(self.layers), capacity)
