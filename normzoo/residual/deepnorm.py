"""DeepNorm (Wang et al. 2022, DeepNet): x <- LN(alpha * x + f(x)), Post-LN placement, both stacks.

The constants depend on the family (the paper's Fig. 2b):

==================== ============================== ===============================
stack                alpha                          beta
==================== ============================== ===============================
encoder-only         (2N)^(1/4)                     (8N)^(-1/4)
decoder-only         (2M)^(1/4)                     (8M)^(-1/4)
enc-dec, encoder     0.81 (N^4 M)^(1/16)            0.87 (N^4 M)^(-1/16)
enc-dec, decoder     (3M)^(1/4)                     (12M)^(-1/4)
==================== ============================== ===============================

Initialisation, ``init: torchscale`` (the default; the reference code, microsoft/torchscale):
every projection keeps ``nn.Linear``'s default U(+-1/sqrt(fan_in)), biases included, then the
weights and biases of W_v, W_o and the feed-forward matrices (cross-attention's too) are divided
by torchscale's ``init_scale``. That is 1/beta everywhere but in the encoder-decoder's encoder,
where torchscale divides by (N^4 M)^(1/16) / 1.15, i.e. multiplies by 1.15 (N^4 M)^(-1/16)
instead of the paper's 0.87 (docs/init-references.md, section 3e).
``init: paper``: the paper's pseudocode, xavier_normal with gain beta on those matrices and gain 1
on W_q and W_k, zero biases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch

from normzoo.residual.base import (
    Family,
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Sublayer,
)
from normzoo.residual.init import VALUE_PATH_ROLES, torchscale_scaled, xavier_normal_scaled

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

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.alpha * x, branch

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:.4f}"

    def plain_form(self) -> PlainForm | str:
        if type(self) is not DeepNormResidual:
            return super().plain_form()
        return PlainForm("post", 1.0 / self.alpha, eps_scale=self.alpha**-2,
                         folded="DeepNorm's LN(αx + f(x)) = LN(x + f(x)/α): each branch's output "
                         "matrix and bias divided by α", constant=f"α = {self.alpha:.4g}")



def torchscale_scale(stack: StackInfo) -> float:
    """What torchscale multiplies the default init of the beta roles by (1 / its ``init_scale``):
    the paper's beta, except 1.15 (N^4 M)^(-1/16) in the encoder-decoder's encoder."""
    if stack.family is Family.ENCODER_DECODER and stack.stack == "encoder":
        n, m = stack.encoder_layers, stack.decoder_layers
        return 1.15 * (n**4 * m) ** (-1 / 16)
    return deepnorm_constants(stack)[1]


class DeepNorm(ResidualScheme):
    """DeepNorm (DeepNet): x <- LN(alpha*x + f(x)) with depth-scaled alpha and init gain beta."""

    def __init__(
        self, stack: StackInfo, init: Literal["torchscale", "paper"] = "torchscale"
    ) -> None:
        super().__init__(stack)
        self.alpha, self.beta = deepnorm_constants(stack)
        self.init = init

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return DeepNormResidual(make_norm(), self.alpha)

    def init_parameters(
        self,
        site: Site,
        weights: Mapping[str, torch.Tensor],
        biases: Mapping[str, torch.Tensor],
    ) -> None:
        if self.init == "torchscale":
            torchscale_scaled(weights, biases, torchscale_scale(self.stack), BETA_ROLES)
        else:
            xavier_normal_scaled(weights, self.beta, BETA_ROLES)

    def normalizes_stream(self) -> bool:
        return True
