"""Pre-LN with GPT-2's depth-scaled initialisation of the residual projections.

GPT-2 (Radford et al. 2019, §2.3): "a modified initialization which accounts for the accumulation
on the residual path with model depth is used. We scale the weights of residual layers at
initialization by a factor of 1/sqrt(N) where N is the number of residual layers."

Each sublayer f adds ``f(LN(x))`` to the stream; the matrices that write into the stream (the
attention output projection W_o and the second feed-forward matrix) are scaled by 1/sqrt(N), N the
number of residual connections in the stack, so the stream's variance at init does not grow with
depth. A final LN follows the stack, as in GPT-2.

With ``init_std`` set, every matrix is first re-drawn from N(0, init_std^2) as in GPT-2 (0.02)
and the residual projections from N(0, (init_std / sqrt(N))^2), nanoGPT's recipe; by default the
model's own initialisation is kept and only the residual projections are scaled.

Only normzoo's public API is used: ``normzoo.residual``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated

import torch
from pydantic import Field
from torch import nn

from normzoo.residual import NormFactory, Residual, ResidualScheme, Site, StackInfo, StreamEnds

# The roles whose matrices write into the residual stream.
RESIDUAL_PROJECTIONS = ("out", "cross_out", "ffn_out")


class PreNormResidual(Residual):
    """x <- x + f(LN(x))."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x, f):
        return x + f(self.norm(x))


class GPT2Scaled(ResidualScheme):
    """GPT-2 init: Pre-LN, residual projections (W_o, W_2) scaled by 1/sqrt(N) at init, final LN."""

    def __init__(
        self,
        stack: StackInfo,
        init_std: Annotated[float, Field(gt=0)] | None = None,
    ) -> None:
        super().__init__(stack)
        self.init_std = init_std
        # N: the residual connections of this stack (2 per layer, 3 with cross-attention).
        self.scale = 1.0 / math.sqrt(stack.num_sublayers)

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PreNormResidual(make_norm())

    @torch.no_grad()
    def init_weights(self, site: Site, weights: Mapping[str, torch.Tensor]) -> None:
        for role, weight in weights.items():
            projection = role in RESIDUAL_PROJECTIONS
            if self.init_std is not None:
                std = self.init_std * (self.scale if projection else 1.0)
                nn.init.normal_(weight, mean=0.0, std=std)
            elif projection:
                weight.mul_(self.scale)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return StreamEnds(make_norm())
