"""LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"):
Pre-LN with each norm's output scaled by the inverse square root of its layer's depth,

    x <- x + f(LN(x) / sqrt(l)),   l = 1, 2, ... the layer's position in its stack,

for every sublayer of layer l, and one unscaled final LN after the stack. Pre-LN's stream grows
with depth, so its deep layers' outputs barely change it and their Jacobians approach the
identity (the "curse of depth"); damping what each deeper norm feeds its sublayer keeps the
output variance from growing exponentially with depth. As the reference code does
(``modeling_llama.py``, ``NORM_TYPE=LNS``: ``1 / math.sqrt(self.layer_index + 1)`` on the output
of both the attention's and the MLP's norm, layer indices from 0), and with no other change to
the initialisation.
"""

from __future__ import annotations

import math

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


class LNSResidual(Residual):
    def __init__(self, norm, scale: float) -> None:
        super().__init__()
        self.norm, self.scale = norm, scale

    def forward(self, x, f: Sublayer):
        return x + f(self.norm(x) * self.scale)

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"

    def plain_form(self) -> PlainForm | str:
        if type(self) is not LNSResidual:
            return super().plain_form()
        return PlainForm("pre", norm_scale=self.scale, folded="LayerNorm Scaling's 1/√l "
                         "multiplied into each layer's norm gains (and biases)")



class LNS(ResidualScheme):
    """LayerNorm Scaling (Sun 2025): x <- x + f(LN(x)/sqrt(l)), final LN after the stack."""

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return LNSResidual(make_norm(), 1.0 / math.sqrt(site.layer + 1))

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return final_norm_ends(make_norm)
