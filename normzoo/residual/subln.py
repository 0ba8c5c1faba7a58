"""Sub-LN / Magneto (Wang et al. 2022, Foundation Transformers).

Pre-LN, plus one more norm inside each sublayer: before W_o in attention and before the second
matrix of the feed-forward. W_v, W_o, W_1, W_2 are initialised with xavier_normal gain gamma
(W_q, W_k with gain 1):

* encoder-only, N layers: gamma = sqrt(ln 2N); decoder-only, M layers: gamma = sqrt(ln 2M)
* encoder-decoder: decoder gamma = sqrt(ln 3M); encoder gamma = sqrt(ln(3M) * ln(2N) / 3)

Cross-attention (encoder-decoder decoders) follows the reference implementation, torchscale, by
default (``cross_attention: reference``): no inner norm (its ``MultiheadAttention`` builds
``inner_attn_ln`` only for self-attention) and no gamma (its ``Decoder`` skips ``encoder_attn``
parameters when it scales by gamma), so the cross-attention keeps the blocks' default init.
``cross_attention: subln`` treats it like the other sublayers instead: inner norm before W_o,
gamma on W_v and W_o.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import torch

from normzoo.residual.base import (
    VALUE_PATH_ROLES,
    Family,
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
    SublayerKind,
    final_norm_ends,
    xavier_normal_scaled,
)
from normzoo.residual.pre import PreLNResidual

# gamma scales the same matrices as DeepNet's beta: W_v, W_o, W_1, W_2 (W_q, W_k gain 1), as in
# the paper's Sub-LN pseudocode (Fig. 2).
GAMMA_ROLES = VALUE_PATH_ROLES


def subln_gamma(stack: StackInfo) -> float:
    """Magneto's init gain for ``stack``."""
    n, m = stack.encoder_layers, stack.decoder_layers
    if stack.family is Family.ENCODER:
        return math.sqrt(math.log(2 * n))
    if stack.family is Family.DECODER:
        return math.sqrt(math.log(2 * m))
    if stack.stack == "decoder":
        return math.sqrt(math.log(3 * m))
    return math.sqrt(math.log(3 * m) * math.log(2 * n) / 3)


class SubLN(ResidualScheme):
    """Sub-LN (Magneto): Pre-LN plus LNs before W_o and W_2, init gain sqrt(ln 2N)."""

    def __init__(
        self, stack: StackInfo, cross_attention: Literal["reference", "subln"] = "reference"
    ) -> None:
        super().__init__(stack)
        self.gamma = subln_gamma(stack)
        self.cross_attention = cross_attention

    def _plain(self, site: Site) -> bool:
        """Whether ``site`` is left as a plain Pre-LN sublayer (torchscale's cross-attention)."""
        return site.kind is SublayerKind.CROSS_ATTN and self.cross_attention == "reference"

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PreLNResidual(make_norm())

    def inner_norm(self, site: Site) -> bool:
        return not self._plain(site)

    def init_weights(self, site: Site, weights: Mapping[str, torch.Tensor]) -> None:
        if not self._plain(site):
            xavier_normal_scaled(weights, self.gamma, GAMMA_ROLES)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
