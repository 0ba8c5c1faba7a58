"""ResiDual (Xie et al. 2023): a Post-LN stream and a Pre-LN-style stream side by side.

    x_p <- LN(x_p + f(x_p))        (the Post-LN stream; f sees only this one)
    x_d <- x_d + f(x_p)            (the dual stream accumulates every branch output unnormalised)
    output = x_p + LN(x_d)         (once, after the last layer)

Both streams start from the embeddings. The final LN of the dual stream belongs to the stack's
end, not to any layer: putting it inside the layer loop is a known bug this layout rules out.
"""

from __future__ import annotations

import torch

from normzoo.residual.base import (
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StreamEnds,
    Sublayer,
)


class ResiDualResidual(Residual):
    def __init__(self, norm) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x, f: Sublayer):
        x_p, x_d = x
        branch = f(x_p)
        return self.norm(x_p + branch), x_d + branch


class ResiDualEnds(StreamEnds):
    def __init__(self, dual_norm) -> None:
        super().__init__(None)
        self.dual_norm = dual_norm

    def begin(self, x: torch.Tensor):
        return x, x

    def forward(self, state) -> torch.Tensor:
        x_p, x_d = state
        return x_p + self.dual_norm(x_d)


class ResiDual(ResidualScheme):
    """ResiDual: Post-LN stream plus dual stream; output x_p + LN(x_d)."""

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return ResiDualResidual(make_norm())

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return ResiDualEnds(make_norm())

    def normalizes_stream(self) -> bool:
        return True
