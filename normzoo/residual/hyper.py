"""Hyper-Connections (Zhu et al., ICLR 2025): the residual stream widened to n copies, mixed by
learned connections around every sublayer,

    H <- beta^T f(LN(alpha_m^T H)) + A_r^T H,      H in R^(n x d) per token,

where alpha_m (n) weighs the copies into the sublayer's input, A_r (n x n) mixes the copies
among themselves, and beta (n) writes the sublayer's output back into each copy. *Static*
connections are parameters; *dynamic* ones (``dynamic: true``, the paper's DHC and its default)
add a per-token part computed from the normalised copies,
``alpha = alpha_static + s_a tanh(norm(H) W_a)``, ``beta = beta_static + s_b tanh(norm(H) W_b)``,
with W zero at init and the scales s at 0.01. norm(H) (``mixing_norm``) is by default another
norm of the model's kind (``model.norm``; the paper used LayerNorm); ``reference`` takes the
reference's RMSNorm, x / |x| sqrt(d) (1 + gamma), under which the connections equal it. At
initialisation ``alpha_m = e_(k mod n)`` for the k-th connection of the stack (sublayers counted
in forward order), ``A_r = I`` and ``beta = 1``:
with the dynamic parts at zero, each sublayer reads one copy and adds its output to all of them.
The stack starts from n copies of the embeddings and ends with their sum, then one final norm
(Pre-LN inside each connection, as the paper's Pre-Norm variant).

As the reference implementation (lucidrains' ``hyper-connections``, ``HyperConnections``) lays
out its parameters: ``static_alpha = [alpha_m | A_r]`` (n x (1 + n)), ``static_beta`` (n),
``dynamic_alpha`` (d x (1 + n)), ``dynamic_beta`` (d); the connections' parameters are not
weight-decayed (a mixing matrix decayed toward 0 would cut the copies apart).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
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


def initial_alpha(streams: int, index: int) -> torch.Tensor:
    """The static connections ``[alpha_m | A_r]`` at initialisation, the paper's (and mHC's):
    connection k reads copy k mod n, and the copies pass through unmixed."""
    static = torch.zeros(streams, 1 + streams)
    static[index % streams, 0] = 1.0
    static[:, 1:] = torch.eye(streams)
    return static


class ReferenceRMSNorm(nn.Module):
    """The norm of H that lucidrains' ``hyper-connections`` (0.4.11) computes the dynamic
    connections from: x / |x| sqrt(d) (1 + gamma), gamma zero at init, no eps (a zero vector
    stays zero). Its own class, not ``model.norm: rmsnorm``, whose eps and weight (1, not
    1 + 0) make another function and another parameter. Computed in float32, as normzoo's
    norms are, and cast back."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.root = math.sqrt(dim)
        self.gamma = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.normalize(x.float(), dim=-1) * self.root * (self.gamma.float() + 1)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.gamma.numel()}"


MixingNorm = Literal["model", "reference"]


def mixing_norm(kind: str, dim: int, make_norm: NormFactory) -> nn.Module:
    """The norm of H for the dynamic connections: ``model``, one of the model's kind (normzoo's
    choice since the start, so its runs and checkpoints stand); ``reference``, the reference's
    (:class:`ReferenceRMSNorm`), under which the connections equal the reference."""
    return ReferenceRMSNorm(dim) if kind == "reference" else make_norm()


class HyperResidual(Residual):
    """H <- beta^T f(LN(alpha_m^T H)) + A_r^T H on a stream ``H`` of shape ``[..., n, d]``."""

    def __init__(self, norm: nn.Module, mix_norm: nn.Module | None, streams: int, dim: int,
                 index: int) -> None:
        super().__init__()
        self.norm, self.mix_norm, self.streams = norm, mix_norm, streams
        self.static_alpha = nn.Parameter(initial_alpha(streams, index))
        self.static_beta = nn.Parameter(torch.ones(streams))
        if mix_norm is not None:
            self.dynamic_alpha = nn.Parameter(torch.zeros(dim, 1 + streams))
            self.dynamic_alpha_scale = nn.Parameter(torch.tensor(0.01))
            self.dynamic_beta = nn.Parameter(torch.zeros(dim))
            self.dynamic_beta_scale = nn.Parameter(torch.tensor(0.01))

    def connections(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha ``[..., n, 1 + n]`` (its first column alpha_m, the rest A_r) and beta
        ``[..., n]``, static plus, if dynamic, the per-token part."""
        alpha, beta = self.static_alpha, self.static_beta
        if self.mix_norm is not None:
            normed = self.mix_norm(h)
            alpha = alpha + torch.tanh(normed @ self.dynamic_alpha) * self.dynamic_alpha_scale
            beta = beta + torch.tanh(normed @ self.dynamic_beta) * self.dynamic_beta_scale
        return alpha, beta

    def forward(self, h, f: Sublayer):
        alpha, beta = self.connections(h)
        mixed = torch.einsum("...st,...sd->...td", alpha.to(h.dtype), h)  # [..., 1 + n, d]
        branch = f(self.norm(mixed[..., 0, :]))
        return beta.to(branch.dtype).unsqueeze(-1) * branch.unsqueeze(-2) + mixed[..., 1:, :]

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mixed copies and the output written into them, every copy counted."""
        alpha, beta = self.connections(x)
        mixed = torch.einsum("...st,...sd->...td", alpha.to(x.dtype), x)
        return mixed[..., 1:, :], beta.to(branch.dtype).unsqueeze(-1) * branch.unsqueeze(-2)

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        return {name: {"weight_decay": 0.0} for name, _ in self.named_parameters(recurse=False)}

    def extra_repr(self) -> str:
        return f"streams={self.streams}, dynamic={self.mix_norm is not None}"


class HyperEnds(StreamEnds):
    """n copies of the embeddings in; their sum, then the final norm, out."""

    def __init__(self, streams: int, final_norm: nn.Module) -> None:
        super().__init__(final_norm)
        self.streams = streams

    def begin(self, x: torch.Tensor):
        return x.unsqueeze(-2).expand(*x.shape[:-1], self.streams, x.shape[-1])

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.final_norm(state.sum(dim=-2))


class Hyper(ResidualScheme):
    """Hyper-Connections (Zhu 2025): n copies of the stream, mixed around every sublayer."""

    def __init__(
        self,
        stack: StackInfo,
        streams: Annotated[int, Field(ge=1)] = 4,
        dynamic: bool = True,
        mixing_norm: MixingNorm = "model",
    ) -> None:
        super().__init__(stack)
        self.streams, self.dynamic, self.mixing_norm = streams, dynamic, mixing_norm

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        mix = mixing_norm(self.mixing_norm, self.stack.dim, make_norm) if self.dynamic else None
        return HyperResidual(make_norm(), mix, self.streams, self.stack.dim, site.index)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return HyperEnds(self.streams, make_norm())
