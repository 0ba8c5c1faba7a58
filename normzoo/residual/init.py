"""Role-wise initialisations from the papers' reference code, for schemes to call from
``init_weights`` / ``init_parameters``: xavier_normal with a gain on the value path (DeepNet,
Magneto's pseudocode), ``nn.Linear``'s own init, and torchscale's scaled form of it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from normzoo.residual.base import FFN_ROLES


def xavier_normal_role(weight: torch.Tensor, gain: float) -> None:
    """Re-initialise one role's matrix (possibly a slice of a fused one) with xavier_normal.

    The fan is that of the role's own [out, in] matrix, so a fused qkv is treated as three
    separate projections, as the papers define them.
    """
    nn.init.xavier_normal_(weight, gain=gain)


# The matrices that DeepNet (Wang et al. 2022, Fig. 2a) and Magneto (Wang et al. 2022, Fig. 2,
# both papers' init pseudocode) scale at init: the value path of attention (W_v, W_o) and every
# feed-forward matrix, in self- and cross-attention alike. W_q and W_k keep gain 1: they act only
# through the softmax, which does not change the bound on the attention output's magnitude
# (DeepNet, Lemma 4.1), so scaling them would not bound the model update.
VALUE_PATH_ROLES = frozenset({"v", "out", "cross_v", "cross_out", *FFN_ROLES})
QUERY_KEY_ROLES = frozenset({"q", "k", "cross_q", "cross_k"})


def xavier_normal_scaled(
    weights: Mapping[str, torch.Tensor], gain: float, scaled: frozenset[str]
) -> None:
    """xavier_normal on ``weights`` by role: gain ``gain`` on the ``scaled`` roles, 1 on W_q, W_k.

    This is the init both DeepNet's and Magneto's pseudocode write out, so a scheme using it
    states only its own gain (beta, gamma) and role set. Roles in neither set keep the blocks'
    default init. Roles are initialised in the order ``weights`` gives them, so the random stream,
    and hence every weight, is the same for a given seed.
    """
    for role, weight in weights.items():
        if role in scaled:
            xavier_normal_role(weight, gain)
        elif role in QUERY_KEY_ROLES:
            xavier_normal_role(weight, 1.0)


@torch.no_grad()
def linear_default_(weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """``nn.Linear``'s own init on one role: weight and bias U(+-1/sqrt(fan_in)).

    ``fan_in`` is that of the role's own [out, in] matrix. torchscale never calls its attention's
    xavier reset, so every projection it builds keeps this, and fairseq >= 0.10 keeps it for the
    feed-forward matrices and the q/k/v biases (docs/init-references.md, sections 1b and 3).
    """
    bound = weight.shape[1] ** -0.5
    nn.init.uniform_(weight, -bound, bound)
    if bias is not None:
        nn.init.uniform_(bias, -bound, bound)


@torch.no_grad()
def torchscale_scaled(
    weights: Mapping[str, torch.Tensor],
    biases: Mapping[str, torch.Tensor],
    scale: float,
    scaled: frozenset[str],
) -> None:
    """torchscale's DeepNorm/Sub-LN init: ``nn.Linear``'s default on every role, then weight
    *and* bias of the ``scaled`` roles multiplied by ``scale`` (torchscale's
    ``p.data.div_(init_scale)`` / ``p.data.mul_(init_scale)`` over ``named_parameters()``)."""
    for role, weight in weights.items():
        bias = biases.get(role)
        linear_default_(weight, bias)
        if role in scaled:
            weight.mul_(scale)
            if bias is not None:
                bias.mul_(scale)
