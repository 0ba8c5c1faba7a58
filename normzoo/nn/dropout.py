"""Dropout whose mask costs less than half of torch's on a CPU.

torch's CPU dropout draws one Bernoulli sample per element (about 6 ns an element on the
2-core EPYC these benchmarks run on), so a Transformer with residual dropout spent a tenth of a
bf16 training step drawing masks (``benchmarks/precision.py``). Here one 64-bit draw of the
global generator (``torch.randint``) gives four 16-bit uniforms, and an element is kept where
its uniform is at or above ``p`` rounded to a multiple of 1/65536 (0.1 becomes 0.1000061; a
float32 uniform has steps of 2^-24, so both are rounding of the same kind). Kept elements are
scaled by 1/(1-p), as ``F.dropout`` scales them.

The masks come from the same generator as every other draw, so ``seed`` fixes them and a
resumed run (:mod:`normzoo.checkpoints.rng_state`) draws what an unbroken one would. On other
devices, and for p = 1, this is ``F.dropout``: GPU kernels draw their masks fast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16
_INT16_MIN = -(1 << 15)


def keep_threshold(p: float) -> int:
    """The int16 value at and above which an element is kept: P(keep) = 1 - round(p * 2^16)/2^16."""
    return _INT16_MIN + round(p * _LEVELS)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with the mask drawn 16 bits an element on a CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 - 1.0 / (2 * _LEVELS):  # threshold past int16
        return F.dropout(x, p, training)
    n = x.numel()
    words = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64)
    draws = words.view(torch.int16)[:n].view(x.shape)
    keep: torch.Tensor
    if torch.compiler.is_compiling():
        # The same mask as 0/1 numbers (the sign bit of draw - threshold, plus one): inductor's
        # CPU kernels write a boolean tensor over 20x slower than eager does (torch 2.13,
        # benchmarks/compile_masks.py), and a boolean mask here is what the compiled graph
        # saves for the backward.
        keep = ((draws.to(torch.int32) - keep_threshold(p)) >> 31) + 1
        keep = keep if x.dtype == torch.float32 else keep.to(x.dtype)
    else:
        # A boolean mask, promoted inside each product rather than cast to x's dtype first:
        # the cast was one more pass over a tensor of x's size (and a mask saved at twice the
        # bytes).
        keep = draws >= keep_threshold(p)
    scale = 1.0 / (1.0 - p)
    if x.dtype == torch.float32:
        return x * (keep * scale)  # one product with a float32 mask: the fastest form
    # In bf16/fp16 a mask holding the scale would round it (1/0.9 to 1.109 in bf16), so
    # every element is scaled by the exact float instead.
    return (x * keep).mul_(scale)


class Dropout(nn.Module):
    """``nn.Dropout`` on :func:`dropout` (no parameters or buffers: checkpoints are unchanged)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
