"""Manifold-constrained Hyper-Connections (mHC; Xie et al., DeepSeek-AI, 2025): Hyper-Connections
(``hyper``) whose mixing is kept on a manifold that cannot amplify the stream,

    H <- h_post^T f(LN(h_pre^T H)) + H_res^T H,
    h_pre = sigmoid(a_pre),  h_post = 2 sigmoid(b),  H_res = SinkhornKnopp(A_res),

where ``a_pre`` (n), ``A_res`` (n x n) and ``b`` (n) are, per token, a static parameter plus a
scaled linear map of the normalised copies. Sinkhorn-Knopp (``sinkhorn_iters`` alternate
normalisations of the columns and the rows of exp(A_res)) projects the residual mixing onto the
doubly stochastic matrices, so it only averages the copies: composed over many layers it stays
a mean-preserving mixture, where unconstrained Hyper-Connections' products can grow.

As the reference implementation (lucidrains' ``hyper-connections``,
``ManifoldConstrainedHyperConnections``, one dynamic proposal) computes it: the static part
starts as Hyper-Connections' (``[e_(k mod n) | I]``, ``b = 1``), the dynamic maps are zero with
scales 0.01 (one for ``a_pre``, one for ``A_res``, one for ``b``), no tanh, the connections in
float32 whatever the model's precision; equal to it with ``mixing_norm: reference`` (the norm
of H the dynamic maps read, as ``hyper`` has it). The stack's ends are Hyper-Connections': n
copies of the embeddings in, their sum then one final norm out.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
    Sublayer,
)
from normzoo.residual.hyper import HyperEnds, MixingNorm, initial_alpha, mixing_norm


def sinkhorn_knopp(logits: torch.Tensor, iterations: int) -> torch.Tensor:
    """exp(logits) made doubly stochastic over its last two dimensions: columns then rows
    normalised to sum 1, ``iterations`` times (in float32; the largest logit of each column is
    subtracted first, which the normalisation undoes, so exp cannot overflow)."""
    alpha = (logits.float() - logits.float().amax(dim=-2, keepdim=True).detach()).exp()
    for _ in range(iterations):
        alpha = alpha / alpha.sum(dim=-2, keepdim=True).clamp(min=1e-12)
        alpha = alpha / alpha.sum(dim=-1, keepdim=True).clamp(min=1e-12)
    return alpha


class MHCResidual(Residual):
    """H <- h_post^T f(LN(h_pre^T H)) + H_res^T H on ``H`` of shape ``[..., n, d]``."""

    def __init__(self, norm: nn.Module, mix_norm: nn.Module, streams: int, dim: int, index: int,
                 sinkhorn_iters: int) -> None:
        super().__init__()
        self.norm, self.mix_norm = norm, mix_norm
        self.streams, self.sinkhorn_iters = streams, sinkhorn_iters
        self.static_alpha = nn.Parameter(initial_alpha(streams, index))
        self.dynamic_alpha = nn.Parameter(torch.zeros(dim, 1 + streams))
        self.pre_scale = nn.Parameter(torch.full((1,), 0.01))
        self.residual_scale = nn.Parameter(torch.full((1,), 0.01))
        self.static_beta = nn.Parameter(torch.ones(streams))
        self.dynamic_beta = nn.Parameter(torch.zeros(dim))
        self.post_scale = nn.Parameter(torch.tensor(0.01))

    def connections(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[h_pre | H_res]`` ``[..., n, 1 + n]`` and h_post ``[..., n]``, in float32."""
        normed = self.mix_norm(h).float()
        scale = torch.cat([self.pre_scale, self.residual_scale.expand(self.streams)]).float()
        alpha = normed @ self.dynamic_alpha.float() * scale + self.static_alpha.float()
        pre = alpha[..., :1].sigmoid()
        mix = sinkhorn_knopp(alpha[..., 1:], self.sinkhorn_iters)
        beta = (normed @ self.dynamic_beta.float() * self.post_scale.float()
                + self.static_beta.float()).sigmoid() * 2
        return torch.cat([pre, mix], dim=-1), beta

    def forward(self, h, f: Sublayer):
        alpha, beta = self.connections(h)
        mixed = torch.einsum("...st,...sd->...td", alpha, h.float()).to(h.dtype)
        branch = f(self.norm(mixed[..., 0, :]))
        added = beta.unsqueeze(-1) * branch.float().unsqueeze(-2)
        return added.to(h.dtype) + mixed[..., 1:, :]

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mixed copies and the output written into them, every copy counted."""
        alpha, beta = self.connections(x)
        mixed = torch.einsum("...st,...sd->...td", alpha, x.float())
        return mixed[..., 1:, :], beta.unsqueeze(-1) * branch.float().unsqueeze(-2)

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        return {name: {"weight_decay": 0.0} for name, _ in self.named_parameters(recurse=False)}

    def extra_repr(self) -> str:
        return f"streams={self.streams}, sinkhorn_iters={self.sinkhorn_iters}"


class MHC(ResidualScheme):
    """mHC (DeepSeek 2025): Hyper-Connections with a doubly stochastic residual mixing."""

    def __init__(
        self,
        stack: StackInfo,
        streams: Annotated[int, Field(ge=1)] = 4,
        sinkhorn_iters: Annotated[int, Field(ge=1)] = 20,
        mixing_norm: MixingNorm = "model",
    ) -> None:
        super().__init__(stack)
        self.streams, self.sinkhorn_iters = streams, sinkhorn_iters
        self.mixing_norm = mixing_norm

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        mix = mixing_norm(self.mixing_norm, self.stack.dim, make_norm)
        return MHCResidual(make_norm(), mix, self.streams, self.stack.dim, site.index,
                           self.sinkhorn_iters)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return HyperEnds(self.streams, make_norm())
