"""DeepNorm (Wang et al. 2022, DeepNet): x <- LN(alpha * x + f(x)), Post-LN placement, both stacks.

Initialisation: xavier_normal with gain beta on W_v, W_o and the feed-forward matrices, gain 1
on W_q and W_k (self- and cross-attention alike). The constants depend on the family:

==================== ============================== ===============================
stack                alpha                          beta
==================== ============================== ===============================
encoder-only         (2N)^(1/4)                     (8N)^(-1/4)
decoder-only         (2M)^(1/4)                     (8M)^(-1/4)
enc-dec, encoder     0.81 (N^4 M)^(1/16)            0.87 (N^4 M)^(-1/16)
enc-dec, decoder     (3M)^(1/4)                     (12M)^(-1/4)
==================== ============================== ===============================
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from normzoo.residual.base import (
    VALUE_PATH_ROLES,
    Family,
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Sublayer,
    xavier_normal_scaled,
)

# beta scales W_v, W_o and the feed-forward matrices (the paper's Fig. 2a); W_q, W_k gain 1.
BETA_ROLES = VALUE_PATH_ROLES


def deepnorm_constants(stack: StackInfo) -> tuple[float, float]:
    """(alpha, beta) for ``stack``, from Fig. 2b of the DeepNet paper (derived in its Sec. 4.3)."""
    n, m = stack.encoder_layers, stack.decoder_layers
    if stack.family is Family.ENCODER:
        return (2 * n) ** 0.25, (8 * n) ** -0.25
    if stack.family is Family.DECODER:
        return (2 * m) ** 0.25, (8 * m) ** -0.25
    if stack.stack == "encoder":
        return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
    return (3 * m) ** 0.25, (12 * m) ** -0.25


class DeepNormResidual(Residual):
    def __init__(self, norm, alpha: float) -> None:
        super().__init__()
        self.norm = norm
        self.alpha = alpha

    def forward(self, x, f: Sublayer):
        return self.norm(self.alpha * x + f(x))

    def terms(self, x, branch):
        return self.alpha * x, branch

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4f}"


class DeepNorm(ResidualScheme):
    """DeepNorm (DeepNet): x <- LN(alpha*x + f(x)) with depth-scaled alpha and init gain beta."""

    def __init__(self, stack: StackInfo) -> None:
        super().__init__(stack)
        self.alpha, self.beta = deepnorm_constants(stack)

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return DeepNormResidual(make_norm(), self.alpha)

    def init_weights(self, site: Site, weights: Mapping[str, torch.Tensor]) -> None:
        xavier_normal_scaled(weights, self.beta, BETA_ROLES)

    def normalizes_stream(self) -> bool:
        return True
