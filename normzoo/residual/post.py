"""Post-LN (Vaswani et al. 2017): x <- LN(x + f(x)); no final norm; needs learning-rate warm-up."""

from __future__ import annotations

from normzoo.residual.base import NormFactory, Residual, ResidualScheme, Site, Sublayer


class PostLNResidual(Residual):
    def __init__(self, norm) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x, f: Sublayer):
        return self.norm(x + f(x))


class PostLN(ResidualScheme):
    """Post-LN (Vaswani 2017): x <- LN(x + f(x)), no final norm; needs warm-up."""

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PostLNResidual(make_norm())

    def normalizes_stream(self) -> bool:
        return True
