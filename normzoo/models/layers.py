"""Scheme-agnostic Transformer layers: which sublayers, in which order; the scheme does the rest.

A layer never looks at which scheme it holds: it asks the scheme for one residual connection per
sublayer, for inner norms, and for the initialisation of each sublayer's weights by role.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from normzoo.models.config import ModelConfig
from normzoo.nn.attention import MultiheadAttention
from normzoo.nn.dropout import Dropout
from normzoo.nn.feedforward import GATED, FeedForward
from normzoo.nn.kv_cache import LayerCache, StaticLayerCache
from normzoo.residual.base import (
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Stream,
    Sublayer,
    SublayerKind,
)

NormMaker = Callable[[int], nn.Module]  # width -> a fresh norm


def connect(residual: nn.Module, x: Stream, f: Sublayer, padding_mask: torch.Tensor | None
            ) -> Stream:
    """``residual(x, f)``, with ``padding_mask`` (the stream's, bool ``[batch, time]``, True =
    pad) passed to a connection that asks for it (``Residual.takes_padding_mask``): the others
    keep the two-argument ``forward`` every scheme written before it has."""
    if isinstance(residual, Residual) and residual.takes_padding_mask:
        return residual(x, f, padding_mask=padding_mask)
    return residual(x, f)


def _prefixed(roles: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {f"{prefix}{role}": weight for role, weight in roles.items()}


class SublayerBuilder:
    """Builds the sublayers of one stack from the model's config, norm and scheme.

    It holds the validated config whole and reads the sizes and choices it needs from it, so
    a new model setting reaches the layers without being copied through here.
    """

    def __init__(
        self,
        config: ModelConfig,
        scheme: ResidualScheme,
        stack: StackInfo,
        make_norm: NormMaker,
        qk_norm: NormMaker | None = None,
    ) -> None:
        self.config, self.scheme, self.stack, self.make_norm = config, scheme, stack, make_norm
        self.qk_norm = qk_norm
        self.dropout = config.dropout

    def _inner(self, site: Site, width: int) -> nn.Module | None:
        return self.make_norm(width) if self.scheme.inner_norm(site) else None

    def residual(self, site: Site) -> nn.Module:
        dim = self.stack.dim
        return self.scheme.residual(site, lambda: self.make_norm(dim))

    def attention(self, site: Site) -> MultiheadAttention:
        c, cross = self.config, site.kind is SublayerKind.CROSS_ATTN
        attn = MultiheadAttention(
            self.stack.dim,
            c.heads,
            dropout=c.attention_dropout,
            bias=c.bias,
            cross=cross,
            fused=c.fused_qkv,
            inner_norm=self._inner(site, self.stack.dim),
            impl=c.attention_impl,
            backend=c.attention_backend,
            kv_heads=c.kv_heads,
            # self-attention only: the module ignores it when cross
            rope_base=c.rope_base if c.positions == "rope" else None,
            qk_norm=self.qk_norm,
            qk=self.scheme.attention_qk(site),
            scale=self.scheme.attention_scale(site),
        )
        prefix = "cross_" if cross else ""
        self.scheme.init_parameters(
            site, _prefixed(attn.role_weights(), prefix), _prefixed(attn.role_biases(), prefix)
        )
        return attn

    def feedforward(self, site: Site) -> FeedForward:
        c = self.config
        ffn = FeedForward(
            self.stack.dim,
            c.ffn_dim,
            activation=c.activation,
            dropout=c.activation_dropout,
            bias=c.bias,
            inner_norm=self._inner(site, c.ffn_dim),
            scales=self.scheme.ffn_scales(site, c.ffn_dim, c.activation in GATED),
        )
        self.scheme.init_parameters(site, ffn.role_weights(), ffn.role_biases())
        return ffn


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each inside its scheme's residual connection."""

    def __init__(self, build: SublayerBuilder, index: int) -> None:
        super().__init__()
        attn_site = Site(build.stack, index, SublayerKind.SELF_ATTN)
        ffn_site = Site(build.stack, index, SublayerKind.FFN)
        self.self_attn = build.attention(attn_site)
        self.self_attn_residual = build.residual(attn_site)
        self.ffn = build.feedforward(ffn_site)
        self.ffn_residual = build.residual(ffn_site)
        self.dropout = Dropout(build.dropout)

    def forward(self, x: Stream, padding_mask: torch.Tensor | None = None) -> Stream:
        x = connect(self.self_attn_residual, x,
                    lambda h: self.dropout(self.self_attn(h, key_padding_mask=padding_mask)),
                    padding_mask)
        return connect(self.ffn_residual, x, lambda h: self.dropout(self.ffn(h)), padding_mask)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention (encoder-decoder only), then feed-forward."""

    def __init__(self, build: SublayerBuilder, index: int) -> None:
        super().__init__()
        stack = build.stack
        attn_site = Site(stack, index, SublayerKind.SELF_ATTN)
        ffn_site = Site(stack, index, SublayerKind.FFN)
        self.self_attn = build.attention(attn_site)
        self.self_attn_residual = build.residual(attn_site)
        if stack.has_cross_attention:
            cross_site = Site(stack, index, SublayerKind.CROSS_ATTN)
            self.cross_attn = build.attention(cross_site)
            self.cross_attn_residual = build.residual(cross_site)
        else:
            self.cross_attn = self.cross_attn_residual = None
        self.ffn = build.feedforward(ffn_site)
        self.ffn_residual = build.residual(ffn_site)
        self.dropout = Dropout(build.dropout)

    def forward(
        self,
        x: Stream,
        memory: torch.Tensor | None = None,
        *,
        padding_mask: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
        cache: LayerCache | StaticLayerCache | None = None,
        stream_padding_mask: torch.Tensor | None = None,
    ) -> Stream:
        """``padding_mask`` is the keys' (``[B, cache + T]``, left padding only),
        ``stream_padding_mask`` the padding of ``x``'s own ``T`` positions, for a residual
        connection that asks for it (:func:`connect`)."""
        pads = stream_padding_mask
        x = connect(
            self.self_attn_residual, x,
            lambda h: self.dropout(
                self.self_attn(h, key_padding_mask=padding_mask, causal=True, cache=cache)
            ),
            pads,
        )
        if self.cross_attn is not None:
            x = connect(
                self.cross_attn_residual, x,
                lambda h: self.dropout(
                    self.cross_attn(h, memory, key_padding_mask=memory_padding_mask, cache=cache)
                ),
                pads,
            )
        return connect(self.ffn_residual, x, lambda h: self.dropout(self.ffn(h)), pads)
