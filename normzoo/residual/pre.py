"""Pre-LN (Xiong et al. 2020): x <- x + f(LN(x)), and one final LN after the stack."""

from __future__ import annotations

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


class PreLNResidual(Residual):
    def __init__(self, norm) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x, f: Sublayer):
        return x + f(self.norm(x))

    def plain_form(self) -> PlainForm | str:
        return PlainForm("pre") if type(self) is PreLNResidual else super().plain_form()



class PreLN(ResidualScheme):
    """Pre-LN (Xiong 2020): x <- x + f(LN(x)), final LN after the stack."""

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PreLNResidual(make_norm())

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
