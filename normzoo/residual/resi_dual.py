"""ResiDual (Xie et al. 2023): a Post-LN stream and a Pre-LN-style stream side by side.

    x_p <- LN(x_p + f(x_p))        (the Post-LN stream; f sees only this one)
    x_d <- x_d + f(x_p)            (the dual stream accumulates every branch output unnormalised)
    output = x_p + LN(x_d)         (once, after the last layer)

Both streams start from the embeddings. The final LN of the dual stream belongs to the stack's
end, not to any layer: putting it inside the layer loop is a known bug this layout rules out.

Initialisation as the reference code (microsoft/ResiDual), which builds fairseq 0.12.2's layers
and adds no init of its own: attention as every scheme here (W_q, W_k, W_v variance 1/(2d), W_o
1/d, zero W_o bias) but with ``nn.Linear``'s default q/k/v biases, and the feed-forward matrices
with ``nn.Linear``'s default weights and biases (fairseq >= 0.10; docs/init-references.md, 4).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StreamEnds,
    Sublayer,
)
from normzoo.residual.init import linear_default_

# fairseq 0.12's feed-forward: plain nn.Linear, never re-initialised (docs/init-references.md, 1b).
LINEAR_DEFAULT_ROLES = frozenset({"ffn_in", "ffn_gate", "ffn_out"})
# Its attention re-initialises the q/k/v weights but leaves their biases at nn.Linear's default.
DEFAULT_BIAS_ROLES = frozenset({"q", "k", "v", "cross_q", "cross_k", "cross_v"})


class ResiDualResidual(Residual):
    def __init__(self, norm) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x, f: Sublayer):
        x_p, x_d = x
        branch = f(x_p)
        return self.norm(x_p + branch), x_d + branch

    def plain_form(self) -> PlainForm | str:
        return ("ResiDual carries a second, un-normalised stream that is added back at the "
                "end; no transformers architecture has two streams")



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

    @torch.no_grad()
    def init_parameters(
        self,
        site: Site,
        weights: Mapping[str, torch.Tensor],
        biases: Mapping[str, torch.Tensor],
    ) -> None:
        for role, weight in weights.items():
            if role in LINEAR_DEFAULT_ROLES:
                linear_default_(weight, biases.get(role))
            elif role in DEFAULT_BIAS_ROLES and role in biases:
                bound = weight.shape[1] ** -0.5
                nn.init.uniform_(biases[role], -bound, bound)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return ResiDualEnds(make_norm())

    def normalizes_stream(self) -> bool:
        return True
