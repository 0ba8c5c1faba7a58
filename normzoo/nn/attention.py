"""Multi-head attention, with a key/value cache, on one of two kernels.

``sdpa`` is torch's fused ``scaled_dot_product_attention``; ``explicit`` writes it out as matmul,
masked softmax in float32, dropout and matmul. On a CPU under bf16/fp16, SDPA's backward is
several times slower than its fp32 one (7x at the depth study's shapes on an AVX-512 EPYC,
``benchmarks/precision.py``) and throws away what bf16 matrix products gain, while the explicit
path runs its two matmuls in bf16 and is faster than fp32 SDPA. ``auto`` (the default) takes
the explicit path exactly there, on a CPU tensor in bf16 or fp16, and SDPA everywhere else (GPU,
float32), where SDPA's fused kernels are the fastest. On a GPU, which of SDPA's kernels may run
each call, in which order, is chosen by :mod:`normzoo.nn.sdpa_choice` (``backend``, the recipe's
``model.attention_backend``): flash or memory-efficient, never cuDNN unless asked (it plans
every new batch shape, seconds each on an H200); a CPU's SDPA is left as it is.

Self-attention keeps q, k, v in one fused ``[(heads + 2*kv_heads) * head_dim, dim]`` matrix by
default (one matmul; ``[3*dim, dim]`` without GQA), or three separate ones; cross-attention keeps
q separate and k, v fused, since k and v are computed once from the encoder output. Either way
:meth:`MultiheadAttention.role_weights` exposes each role's own matrix (a view into the fused
one), so residual schemes initialise W_v alone even when it is a slice.

Grouped-query attention (``kv_heads`` < ``heads``; 1 is multi-query): k and v have ``kv_heads``
heads, each shared by ``heads // kv_heads`` consecutive query heads, which shrinks the KV cache
(it stores the ``kv_heads`` heads) and the k/v projections by that factor. With ``rope_base``
set, self-attention rotates q and k by their absolute positions (:mod:`normzoo.nn.rotary`);
cross-attention never does (encoder and decoder positions are not on one axis).

QK-norm (``qk_norm``, a factory ``width -> norm``): one norm of a head's width on the queries and
one on the keys, each applied to every head (its weights shared across heads, as Qwen3 and
Gemma 3 do), after the projection and before the rotation; so the KV cache holds normalised
(and rotated) keys, and cross-attention normalises the encoder's keys once, before caching them.

A residual scheme may act on queries and keys too (``qk``, a module ``forward(q, k) -> (q, k)``
after the rotation, before the cache: nGPT's unit-norm, scaled q and k) and choose the scale of
their scores (``scale``, default 1/sqrt(head_dim); nGPT's sqrt(head_dim)).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import sdpa_kernel

from normzoo.nn.kv_cache import LayerCache, StaticLayerCache
from normzoo.nn.rotary import RotaryEmbedding
from normzoo.nn.scaled_dot_product import attention_mask, explicit_attention
from normzoo.nn.sdpa_choice import (
    BACKEND_NAMES,
    AttentionBackend,
    AttentionCase,
    attention_case,
    sdpa_backends,
)

AttentionImpl = Literal["auto", "sdpa", "explicit"]
LOW_PRECISION = (torch.bfloat16, torch.float16)
# fairseq's gain on each of W_q, W_k, W_v: variance 1/(2d), the fused [3d, d] xavier fan.
QKV_GAIN = 2**-0.5


def explicit_for(impl: AttentionImpl, device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``impl`` runs the explicit path for queries of ``dtype`` on ``device_type``
    (``auto``: on a CPU in bf16/fp16, where SDPA's backward is slow; see the module docstring)."""
    if impl == "auto":
        return device_type == "cpu" and dtype in LOW_PRECISION
    return impl == "explicit"


def explicit_wanted(impl: AttentionImpl, q: torch.Tensor) -> bool:
    """:func:`explicit_for` the queries ``q``."""
    return explicit_for(impl, q.device.type, q.dtype)


class MultiheadAttention(nn.Module):
    """Self- or cross-attention with optional inner norm before the output projection (Sub-LN).

    ``kv_heads`` (default ``heads``) gives grouped-query attention; ``rope_base`` (default
    None: no rotation) rotary position embeddings in self-attention; ``qk_norm`` (default None)
    a norm of one head's width on queries and keys (QK-norm); ``qk`` (default None) a scheme's
    module on queries and keys after the rotation; ``scale`` (default None: 1/sqrt(head_dim))
    the scores' scale; ``backend`` (default ``auto``) the SDPA kernels a GPU may use
    (:func:`~normzoo.nn.sdpa_choice.sdpa_backends`).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        cross: bool = False,
        fused: bool = True,
        inner_norm: nn.Module | None = None,
        impl: AttentionImpl = "auto",
        kv_heads: int | None = None,
        rope_base: float | None = None,
        qk_norm: Callable[[int], nn.Module] | None = None,
        qk: nn.Module | None = None,
        scale: float | None = None,
        backend: AttentionBackend = "auto",
    ) -> None:
        super().__init__()
        kv_heads = heads if kv_heads is None else kv_heads
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        if kv_heads < 1 or heads % kv_heads:
            raise ValueError(f"kv_heads {kv_heads} does not divide heads {heads}")
        if impl not in ("auto", "sdpa", "explicit"):
            raise ValueError(f"impl {impl!r}: expected 'auto', 'sdpa' or 'explicit'")
        if backend not in BACKEND_NAMES:
            raise ValueError(f"backend {backend!r}: expected one of {', '.join(BACKEND_NAMES)}")
        self.dim, self.heads, self.head_dim, self.backend = dim, heads, dim // heads, backend
        self.kv_heads, self.kv_dim = kv_heads, kv_heads * (dim // heads)
        self.dropout, self.cross, self.fused, self.impl = dropout, cross, fused, impl
        kv_dim = self.kv_dim
        if cross:
            self.q_proj = nn.Linear(dim, dim, bias=bias)
            self.kv_proj = nn.Linear(dim, 2 * kv_dim, bias=bias)
        elif fused:
            self.qkv_proj = nn.Linear(dim, dim + 2 * kv_dim, bias=bias)
        else:
            self.q_proj = nn.Linear(dim, dim, bias=bias)
            self.k_proj = nn.Linear(dim, kv_dim, bias=bias)
            self.v_proj = nn.Linear(dim, kv_dim, bias=bias)
        self.inner_norm = inner_norm if inner_norm is not None else nn.Identity()
        self.out_proj = nn.Linear(dim, dim, bias=bias)
        self.q_norm = qk_norm(self.head_dim) if qk_norm is not None else None
        self.k_norm = qk_norm(self.head_dim) if qk_norm is not None else None
        self.qk, self.scale = qk, scale
        # No parameters and no buffers: the state dict is the same with or without it.
        self.rotary = (RotaryEmbedding(self.head_dim, rope_base)
                       if rope_base is not None and not cross else None)
        self.reset_parameters()

    def _roles(self, attribute: str) -> dict[str, torch.Tensor]:
        """Each role's ``weight`` or ``bias``, slices of fused ones as views."""
        d, kv = self.dim, self.kv_dim
        out = getattr(self.out_proj, attribute)
        if self.cross:
            fused = getattr(self.kv_proj, attribute)
            return {"q": getattr(self.q_proj, attribute), "k": fused[:kv], "v": fused[kv:],
                    "out": out}
        if self.fused:
            fused = getattr(self.qkv_proj, attribute)
            return {"q": fused[:d], "k": fused[d : d + kv], "v": fused[d + kv :], "out": out}
        return {"q": getattr(self.q_proj, attribute), "k": getattr(self.k_proj, attribute),
                "v": getattr(self.v_proj, attribute), "out": out}

    def role_weights(self) -> dict[str, torch.Tensor]:
        """Each role's ``[out, in]`` matrix (``[kv_heads * head_dim, dim]`` for k and v);
        slices of a fused matrix are views into it."""
        return self._roles("weight")

    def role_biases(self) -> dict[str, torch.Tensor]:
        """Each role's bias vector (views into fused ones, like :meth:`role_weights`); empty
        when the projections have no bias."""
        return {} if self.out_proj.bias is None else self._roles("bias")

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """fairseq's ``MultiheadAttention`` init: W_q, W_k, W_v xavier_uniform with gain 1/sqrt(2)
        on each role's own [d, d] matrix (variance 1/(2d), which is also what xavier_uniform
        gives each third of a fused [3d, d] in-projection, as in fairseq <= 0.8 and PyTorch's
        ``nn.MultiheadAttention``), W_o xavier_uniform gain 1 (variance 1/d), zero biases.
        This is the init of Transformer-Clinic, the code behind the Post-LN, Pre-LN and Admin
        results normzoo's studies compare with (docs/init-references.md). With grouped-query
        attention W_k and W_v are ``[kv_heads * head_dim, d]`` and xavier takes that matrix's
        own fans, as it would for a separate, narrower projection."""
        for role, weight in self.role_weights().items():
            nn.init.xavier_uniform_(weight, gain=1.0 if role == "out" else QKV_GAIN)
        for module in self.modules():
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)

    def _project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, kv = self.heads, self.kv_heads
        if self.fused:
            q, k, v = self.qkv_proj(x).split([self.dim, self.kv_dim, self.kv_dim], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self._split(q, h), self._split(k, kv), self._split(v, kv)

    @staticmethod
    def _normed(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, heads, T, head_dim]`` through a QK-norm of one head's width, if any."""
        return x if norm is None else norm(x)

    def _expand(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, kv_heads, S, hd]`` -> ``[B, heads, S, hd]``: each k/v head repeated for the
        ``heads // kv_heads`` consecutive query heads of its group (Llama's ``repeat_kv``).
        Written out rather than SDPA's ``enable_gqa`` (torch >= 2.5) so that the explicit path
        and older torch compute the same thing."""
        groups = self.heads // self.kv_heads
        return x if groups == 1 else x.repeat_interleave(groups, dim=1)

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              dropout: float, case: AttentionCase, is_causal: bool = False) -> torch.Tensor:
        """torch's SDPA; on a GPU within the kernels chosen for ``case``, tried in their order
        (:func:`~normzoo.nn.sdpa_choice.sdpa_backends`); elsewhere as torch dispatches it."""
        backends = sdpa_backends(case, q.device.type, q.dtype, self.head_dim, self.backend)
        if backends is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                  is_causal=is_causal, scale=self.scale)
        with sdpa_kernel(backends, set_priority=True):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                  is_causal=is_causal, scale=self.scale)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: LayerCache | StaticLayerCache | None = None,
    ) -> torch.Tensor:
        """Attend from ``x`` ``[B, T, dim]`` to itself, or to ``memory`` for cross-attention.

        ``key_padding_mask`` is bool ``[B, S]`` with True at padded keys (for self-attention
        with a cache, S covers the cached positions too). With a cache
        (:mod:`~normzoo.nn.kv_cache`) the step's keys and values join the cached ones; a static
        cache in fixed-shape mode hands back its whole capacity with the mask of the positions
        filled so far, which stands in for the causal mask.
        """
        filled = None
        if self.cross:
            q = self._normed(self.q_norm, self._split(self.q_proj(x), self.heads))
            if cache is not None and cache.cross_k is not None:
                k, v = cache.cross_k, cache.cross_v
                if self.qk is not None:
                    q, _ = self.qk(q, None)
            else:
                k, v = (self._split(p, self.kv_heads)
                        for p in self.kv_proj(memory).chunk(2, dim=-1))
                k = self._normed(self.k_norm, k)
                if self.qk is not None:
                    q, k = self.qk(q, k)
                if cache is not None:
                    cache.keep_cross(k, v)
        else:
            q, k, v = self._project_self(x)
            q, k = self._normed(self.q_norm, q), self._normed(self.k_norm, k)
            if self.rotary is not None:  # new queries and keys sit after the cached ones
                q, k = self.rotary(q, k, 0 if cache is None else cache.offset)
            if self.qk is not None:
                q, k = self.qk(q, k)
            if cache is not None:  # filled: a fixed-shape cache's mask, its causal one too
                k, v, filled = cache.append(k, v)
        k, v = self._expand(k), self._expand(v)
        is_causal = causal and not self.cross and filled is None
        query_len, key_len = q.shape[2], k.shape[2]
        dropout = self.dropout if self.training else 0.0
        explicit = explicit_wanted(self.impl, q)
        if is_causal and key_padding_mask is None and query_len == key_len and not explicit:
            out = self._sdpa(q, k, v, None, dropout, AttentionCase.CAUSAL, is_causal=True)
        else:
            mask = attention_mask(key_padding_mask, is_causal, query_len, key_len, q.device,
                                  filled)
            # A query with no key to attend to (every key padded: an empty source sentence, or
            # a left pad of a prompt) gets 0, as torch>=2.5 gives; older torch returns NaN
            # there, and NaN at a pad reaches real tokens in the next layer (0 * NaN).
            empty = None if key_padding_mask is None else ~mask.any(dim=-1, keepdim=True)
            if empty is not None:
                mask = mask | empty
            if explicit:
                out = explicit_attention(q, k, v, mask, dropout, self.scale)
            else:
                case = attention_case(cross=self.cross, causal=is_causal,
                                      masked=mask is not None, query_len=query_len)
                out = self._sdpa(q, k, v, mask, dropout, case)
            if empty is not None:
                out = out.masked_fill(empty, 0.0)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.dim)
        return self.out_proj(self.inner_norm(out))
