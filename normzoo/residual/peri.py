"""Peri-LN (Kim et al. 2025): x <- x + LN(f(LN(x))), plus an LN on the embeddings and a final LN.

The sublayer formula is Sandwich-LN's; what Peri-LN adds is the embedding norm, which bounds the
stream's starting scale.
"""

from __future__ import annotations

from normzoo.residual.base import (
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StreamEnds,
    final_norm_ends,
)
from normzoo.residual.sandwich import SandwichResidual


class PeriLN(ResidualScheme):
    """Peri-LN: x <- x + LN(f(LN(x))), embedding LN, final LN."""

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return SandwichResidual(make_norm(), make_norm())

    def embedding_norm(self) -> bool:
        return True

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
