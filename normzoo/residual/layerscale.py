"""LayerScale (Touvron et al. 2021, CaiT): x <- x + diag(l) f(LN(x)), final LN.

l is a per-channel vector initialised small. CaiT's schedule: 0.1 up to depth 18, 1e-5 at
depth 24, 1e-6 deeper.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
    Sublayer,
    final_norm_ends,
)


def cait_init(depth: int) -> float:
    """CaiT's initial value of l for a stack of ``depth`` layers."""
    if depth <= 18:
        return 0.1
    if depth <= 24:
        return 1e-5
    return 1e-6


class LayerScaleResidual(Residual):
    def __init__(self, norm, dim: int, init: float) -> None:
        super().__init__()
        self.norm = norm
        self.scale = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x, f: Sublayer):
        return x + self.scale * f(self.norm(x))

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.scale * branch

    def plain_form(self) -> PlainForm | str:
        if type(self) is not LayerScaleResidual:
            return super().plain_form()
        return PlainForm("pre", self.scale.detach(), folded="LayerScale's diag(l) multiplied "
                         "into each branch's output matrix and bias")



class LayerScale(ResidualScheme):
    """LayerScale (CaiT): x <- x + diag(l) f(LN(x)), l small at init, final LN."""

    def __init__(
        self, stack: StackInfo, init: Annotated[float, Field(gt=0)] | None = None
    ) -> None:
        super().__init__(stack)
        self.init = cait_init(stack.depth) if init is None else init

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return LayerScaleResidual(make_norm(), self.stack.dim, self.init)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
