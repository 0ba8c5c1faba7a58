"""ReZero (Bachlechner et al. 2020): x <- x + a * f(x), no norm at all, scalar a = 0 at init."""

from __future__ import annotations

import torch
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Sublayer,
)


class ReZeroResidual(Residual):
    def __init__(self, init: float) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(float(init)))

    def forward(self, x, f: Sublayer):
        return x + self.a * f(x)

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.a * branch

    def plain_form(self) -> PlainForm | str:
        return ("ReZero has no norms (x + α f(x)); every transformers architecture of these "
                "families normalises its stream")



class ReZero(ResidualScheme):
    """ReZero: x <- x + a*f(x), no norm, a initialised to 0."""

    def __init__(self, stack: StackInfo, init: float = 0.0) -> None:
        super().__init__(stack)
        self.init = init

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return ReZeroResidual(self.init)
