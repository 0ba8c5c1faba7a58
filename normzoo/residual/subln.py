"""Sub-LN / Magneto (Wang et al. 2022, Foundation Transformers).

Pre-LN, plus one more norm inside each sublayer: before W_o in attention and before the second
matrix of the feed-forward. The init gain gamma:

* encoder-only, N layers: gamma = sqrt(ln 2N); decoder-only, M layers: gamma = sqrt(ln 2M)
* encoder-decoder: decoder gamma = sqrt(ln 3M); encoder gamma = sqrt(ln(3M) * ln(2N) / 3)

``init: torchscale`` (the default; the reference code): every projection keeps ``nn.Linear``'s
default U(+-1/sqrt(fan_in)), biases included, and gamma *multiplies* the weights and biases of
W_v, W_o, W_1, W_2. ``init: paper``: xavier_normal with gain gamma on those matrices, gain 1 on
W_q, W_k, zero biases, as the paper's pseudocode writes it.

Cross-attention (encoder-decoder decoders) follows torchscale by default
(``cross_attention: reference``): no inner norm (its ``MultiheadAttention`` builds
``inner_attn_ln`` only for self-attention) and no gamma (its ``Decoder`` skips ``encoder_attn``
parameters when it scales by gamma), so it keeps torchscale's default init (``init: torchscale``)
or the blocks' default (``init: paper``). ``cross_attention: subln`` treats it like the other
sublayers instead: inner norm before W_o, gamma on W_v and W_o.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import torch

from normzoo.residual.base import (
    Family,
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
    SublayerKind,
    final_norm_ends,
)
from normzoo.residual.init import VALUE_PATH_ROLES, torchscale_scaled, xavier_normal_scaled
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
        self,
        stack: StackInfo,
        cross_attention: Literal["reference", "subln"] = "reference",
        init: Literal["torchscale", "paper"] = "torchscale",
    ) -> None:
        super().__init__(stack)
        self.gamma = subln_gamma(stack)
        self.cross_attention = cross_attention
        self.init = init

    def _plain(self, site: Site) -> bool:
        """Whether ``site`` is left as a plain Pre-LN sublayer (torchscale's cross-attention)."""
        return site.kind is SublayerKind.CROSS_ATTN and self.cross_attention == "reference"

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PreLNResidual(make_norm())

    def inner_norm(self, site: Site) -> bool:
        return not self._plain(site)

    def init_parameters(
        self,
        site: Site,
        weights: Mapping[str, torch.Tensor],
        biases: Mapping[str, torch.Tensor],
    ) -> None:
        plain = self._plain(site)
        if self.init == "torchscale":
            scale = 1.0 if plain else self.gamma
            torchscale_scaled(weights, biases, scale, frozenset() if plain else GAMMA_ROLES)
        elif not plain:
            xavier_normal_scaled(weights, self.gamma, GAMMA_ROLES)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
