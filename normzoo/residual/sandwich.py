"""Sandwich-LN (Ding et al. 2021, CogView): x <- x + LN(f(LN(x))), final LN."""

from __future__ import annotations

import torch

from normzoo.residual.base import (
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StreamEnds,
    Sublayer,
    final_norm_ends,
)


class SandwichResidual(Residual):
    def __init__(self, norm_in, norm_out) -> None:
        super().__init__()
        self.norm_in, self.norm_out = norm_in, norm_out

    def forward(self, x, f: Sublayer):
        return x + self.norm_out(f(self.norm_in(x)))

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.norm_out(branch)

    def plain_form(self) -> PlainForm | str:
        return ("the branch's output is normalised as well, x + LN(f(LN(x))) (Sandwich-LN, "
                "Peri-LN); no transformers architecture has that second norm")



class SandwichLN(ResidualScheme):
    """Sandwich-LN (CogView): x <- x + LN(f(LN(x))), final LN."""

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return SandwichResidual(make_norm(), make_norm())

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
