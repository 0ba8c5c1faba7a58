"""Scaled dot-product attention written out, and the boolean masks every attention path takes.

:mod:`normzoo.nn.attention` runs either torch's fused SDPA or :func:`explicit_attention`; both
take the mask :func:`attention_mask` builds: causal (offset past a cache's positions), the keys'
padding, or, for a fixed-shape step over a preallocated cache, the positions filled so far.
"""

from __future__ import annotations

import torch

from normzoo.nn.dropout import dropout as drop


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(scale q k^T masked) v, as ``scaled_dot_product_attention`` computes it (``scale``
    None: 1/sqrt(d)).

    ``mask`` is boolean (True = may attend) and broadcasts to ``[B, H, T, S]``. The softmax runs
    in float32 whatever the inputs' dtype, as SDPA's fused kernels accumulate, and its result is
    cast back so that the second matmul runs in the inputs' dtype (bf16 under autocast).
    """
    scores = (q * (q.shape[-1] ** -0.5 if scale is None else scale)) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype)
    if dropout > 0.0:
        weights = drop(weights, dropout)
    return weights @ v


def attention_mask(
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    query_len: int,
    key_len: int,
    device: torch.device,
    filled: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """A boolean SDPA mask (True = may attend), or None when nothing is masked.

    With a cache, queries sit at the last ``query_len`` of ``key_len`` positions, so the causal
    mask is offset accordingly. ``filled`` (``[1, 1, T, S]``, from a fixed-shape cache whose keys
    span its whole capacity) replaces that causal mask: a query may attend to the positions
    filled up to its own, whose count lives on the device, so the step's shapes never change.
    """
    mask = filled
    if filled is None and causal and query_len > 1:
        offset = key_len - query_len
        q = torch.arange(query_len, device=device)[:, None] + offset
        k = torch.arange(key_len, device=device)[None, :]
        mask = (k <= q)[None, None]  # [1, 1, T, S]
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]  # [B, 1, 1, S]
        mask = keep if mask is None else mask & keep
    return mask
