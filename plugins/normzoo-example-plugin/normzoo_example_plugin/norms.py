"""GroupNorm (Wu & He 2018) applied to each token's features.

The ``dim`` features of a token are split into ``groups`` contiguous groups; each group is
normalised by its own mean and variance, then a per-feature affine map is applied. ``groups=1`` is
LayerNorm; ``groups=dim`` normalises every feature on its own (instance-norm-like).
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn


class GroupNorm(nn.Module):
    """GroupNorm (Wu & He 2018) per token: normalise each of G feature groups separately."""

    # It normalises the whole stream like LayerNorm does, so Post-LN placement is fine.
    supports_stream_norm = True

    def __init__(
        self,
        dim: int,
        groups: Annotated[int, Field(gt=0)] = 8,
        eps: Annotated[float, Field(gt=0)] = 1e-5,
        affine: bool = True,
    ) -> None:
        super().__init__()
        if dim % groups:
            raise ValueError(f"groupnorm: dim {dim} is not divisible by groups={groups}")
        self.dim, self.groups, self.eps = dim, groups, eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Statistics in float32 whatever the input dtype, the result in the input's dtype.
        grouped = x.float().reshape(*x.shape[:-1], self.groups, self.dim // self.groups)
        y = F.layer_norm(grouped, grouped.shape[-1:], eps=self.eps).reshape(x.shape)
        if self.weight is not None:
            y = y * self.weight.float() + self.bias.float()
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, groups={self.groups}, eps={self.eps}"
