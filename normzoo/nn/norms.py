"""Normalization layers: each maps ``(..., dim)`` to ``(..., dim)``.

Statistics are computed in float32 whatever the input dtype, because bf16/fp16 sums of squares
over a few thousand channels lose enough precision to destabilise deep models; the result is
cast back to the input dtype.

A norm class may set ``supports_stream_norm = False`` when it cannot stand on the residual stream
itself (Post-LN placement); residual schemes that put a norm there then refuse it at assembly.
A norm class sets ``mixes_positions = True`` when its output at one token depends on other tokens
(batch statistics); models with a causal decoder refuse it at assembly.

Which norms have a bias (an additive shift after normalising): LayerNorm, BatchNorm and DyT,
each with a ``bias`` option that removes it (``model.bias: false`` passes ``bias=False`` to any
norm whose factory takes that option, so a bias-free model is bias-free in its norms too).
RMSNorm and ScaleNorm never had one.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from normzoo.nn.padding import current_padding_mask

PositiveFloat = Annotated[float, Field(gt=0)]


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): subtract the mean, divide by the standard deviation."""

    supports_stream_norm = True

    def __init__(
        self, dim: int, eps: PositiveFloat = 1e-5, affine: bool = True, bias: bool = True
    ) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine and bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return F.layer_norm(x.float(), (self.dim,), weight, bias, self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"{self.dim}, eps={self.eps}, affine={self.weight is not None}, "
                f"bias={self.bias is not None}")


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): divide by the root mean square, no centring."""

    supports_stream_norm = True

    def __init__(self, dim: int, eps: PositiveFloat = 1e-6, affine: bool = True) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Written out rather than F.rms_norm, which needs torch>=2.4 (normzoo supports 2.2).
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight.float()
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, affine={self.weight is not None}"


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019): g * x / ||x||, learned scalar g = sqrt(dim) at init."""

    supports_stream_norm = True

    def __init__(self, dim: int, eps: PositiveFloat = 1e-5) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(dim)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        norm = xf.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return (self.scale.float() * xf / norm).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025): weight * tanh(alpha * x) + bias, no statistics at all.

    Shown as a drop-in for norms in pre-norm placements; squashing the stream itself (Post-LN)
    is not what it was designed or validated for, so it refuses stream placement.
    """

    supports_stream_norm = False

    def __init__(self, dim: int, alpha: PositiveFloat = 0.5, bias: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.tensor(float(alpha)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 like the other norms, and the result in the input's dtype (float32 parameters
        # would otherwise promote a bf16 input to a float32 output).
        y = self.weight.float() * torch.tanh(self.alpha.float() * x.float())
        return (y if self.bias is None else y + self.bias.float()).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, alpha_init={self.alpha.item():.3g}"


class MaskedBatchNorm(nn.Module):
    """BatchNorm over (batch, time) for padded sequences: padding never enters the statistics.

    Plain ``nn.BatchNorm1d`` on a padded batch averages pad embeddings into the mean and variance,
    so a batch's statistics depend on how much padding it has. Here the mask published by the
    enclosing stack (:mod:`normzoo.nn.padding`) selects the real tokens. Running statistics are
    kept in float32 and used in eval mode, as in ``nn.BatchNorm1d``.

    In training the statistics mix every position of the batch, so a position's output depends
    on later tokens: ``mixes_positions`` makes normzoo refuse it where a decoder is causal
    (decoder-only and encoder-decoder models), where it would leak the future.
    """

    supports_stream_norm = True
    mixes_positions = True

    def __init__(
        self,
        dim: int,
        eps: PositiveFloat = 1e-5,
        momentum: Annotated[float, Field(gt=0, le=1)] = 0.1,
        affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.dim, self.eps, self.momentum = dim, eps, momentum
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine and bias else None
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def _apply(self, fn, recurse=True):
        # Keep the running statistics in float32 when the module is cast to half precision
        # (Lightning's "bf16-true"): bf16 stats lose precision, and updating them would fail.
        before = {name: getattr(self, name) for name in ("running_mean", "running_var")}
        super()._apply(fn, recurse)
        for name, stat in before.items():
            after = getattr(self, name)
            if after.dtype in (torch.float16, torch.bfloat16):
                setattr(self, name, stat.to(device=after.device, dtype=torch.float32))
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Autocast would run the statistics' matrix-vector products in bf16/fp16.
        with torch.autocast(x.device.type, enabled=False):
            return self._normalize(x)

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        mask = current_padding_mask()
        if mask is not None and mask.shape != x.shape[:-1]:
            mask = None
        fused = mask is None and self.running_mean.dtype == xf.dtype  # not a float64 model
        if self.training and fused and xf.numel() >= 2 * self.dim:
            # Nothing to leave out: PyTorch's fused kernel, as in nn.BatchNorm1d.
            y = F.batch_norm(xf.reshape(-1, self.dim), self.running_mean, self.running_var,
                             weight, bias, True, self.momentum, self.eps)
            return y.reshape(x.shape).to(x.dtype)
        mean, var = self.running_mean, self.running_var
        keep = self._real_tokens(xf, mask) if self.training else None
        count = 0 if keep is None else int(keep.sum())
        if count >= 2:  # else too few real tokens for a variance: the running statistics
            mean = (keep @ xf.reshape(-1, self.dim))[0] / count
        centered = xf - mean
        if count >= 2:
            var = (keep @ centered.reshape(-1, self.dim).square())[0] / count
            self._update_running_statistics(mean, var, count)
        scale = torch.rsqrt(var + self.eps)  # weight folded in: one full-size product fewer
        if weight is not None:
            scale = scale * weight
        y = centered * scale if bias is None else torch.addcmul(bias, centered, scale)
        return y.to(x.dtype)

    @staticmethod
    def _real_tokens(xf: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """A 0/1 row vector over the tokens: 1 for a real one.

        Statistics become matrix-vector products with it, instead of gathering the real tokens
        (whose backward is a slow scatter-add on the CPU).
        """
        if mask is None:
            return xf.new_ones(1, xf.numel() // xf.shape[-1])
        return (~mask).reshape(1, -1).to(xf.dtype)

    @torch.no_grad()
    def _update_running_statistics(self, mean: torch.Tensor, var: torch.Tensor,
                                   count: int) -> None:
        unbiased = var * count / (count - 1)
        for running, batch in ((self.running_mean, mean), (self.running_var, unbiased)):
            running.lerp_(batch.to(running.dtype), self.momentum)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, momentum={self.momentum}"
