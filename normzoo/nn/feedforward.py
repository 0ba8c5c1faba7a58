"""The position-wise feed-forward sublayer: W_2 act(W_1 x), or the gated SwiGLU/GEGLU form."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normzoo.nn.dropout import Dropout


class _ReLUFromItsOutput(torch.autograd.Function):
    """ReLU whose backward multiplies by the sign of its output (1 where it passed, 0 where it
    did not): the gradient ``F.relu``'s has, from a tensor of the input's dtype rather than
    from the boolean mask inductor's decomposition saves (see :func:`relu`)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        out = x.clamp_min(0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad * out.sign()


def relu(x: torch.Tensor) -> torch.Tensor:
    """``F.relu``; compiled on a CPU, a ReLU that saves no boolean tensor for its backward.

    Inductor's CPU kernels write a boolean tensor over 20x slower than eager does (torch
    2.13, one thread on a Zen 4: 10.4 ms for 2^20 comparisons against 0.45 ms eager, and
    0.19 ms compiled when written as floats: ``benchmarks/compile_masks.py``), and
    ``F.relu``'s compiled backward keeps ``out <= 0`` as one: with dropout's masks, that made
    ``trainer.compile`` slower than eager. The values and the gradients are ``F.relu``'s (a
    NaN gradient where the output is 0 stays NaN here)."""
    if torch.compiler.is_compiling() and x.device.type == "cpu":
        return _ReLUFromItsOutput.apply(x)
    return F.relu(x)


ACTIVATIONS = {"relu": relu, "gelu": F.gelu, "silu": F.silu}
GATED = {"swiglu": F.silu, "geglu": F.gelu}


class FeedForward(nn.Module):
    """``ffn_out(inner_norm(dropout(act(ffn_in(x)))))``; gated variants multiply by ``ffn_gate(x)``.

    ``inner_norm`` (Sub-LN) sits before the second matrix, on the ``hidden``-wide activations,
    after the activation dropout (as in torchscale's Magneto). ``scales`` (a residual scheme's
    module ``forward(hidden, gate) -> (hidden, gate)``) acts on the pre-activations
    ``ffn_in(x)`` and ``ffn_gate(x)`` (None without a gate): nGPT's s_v and s_u.
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        *,
        activation: str = "relu",
        dropout: float = 0.0,
        bias: bool = True,
        inner_norm: nn.Module | None = None,
        scales: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS and activation not in GATED:
            known = ", ".join([*ACTIVATIONS, *GATED])
            raise ValueError(f"unknown activation {activation!r}; known: {known}")
        self.gated = activation in GATED
        self.act = GATED[activation] if self.gated else ACTIVATIONS[activation]
        self.ffn_in = nn.Linear(dim, hidden, bias=bias)
        self.ffn_gate = nn.Linear(dim, hidden, bias=bias) if self.gated else None
        self.ffn_out = nn.Linear(hidden, dim, bias=bias)
        self.dropout = Dropout(dropout)
        self.inner_norm = inner_norm if inner_norm is not None else nn.Identity()
        self.scales = scales
        self.reset_parameters()

    def role_weights(self) -> dict[str, torch.Tensor]:
        roles = {"ffn_in": self.ffn_in.weight, "ffn_out": self.ffn_out.weight}
        if self.ffn_gate is not None:
            roles["ffn_gate"] = self.ffn_gate.weight
        return roles

    def role_biases(self) -> dict[str, torch.Tensor]:
        """Each role's bias vector; empty when the matrices have no bias."""
        linears = {"ffn_in": self.ffn_in, "ffn_gate": self.ffn_gate, "ffn_out": self.ffn_out}
        return {role: lin.bias for role, lin in linears.items()
                if lin is not None and lin.bias is not None}

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """xavier_uniform, zero biases: fairseq <= 0.9's ``Linear`` helper, which
        Transformer-Clinic (Post-LN, Pre-LN, Admin) uses for fc1 and fc2."""
        for linear in (self.ffn_in, self.ffn_gate, self.ffn_out):
            if linear is not None:
                nn.init.xavier_uniform_(linear.weight)
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, gate = self.ffn_in(x), None if self.ffn_gate is None else self.ffn_gate(x)
        if self.scales is not None:
            hidden, gate = self.scales(hidden, gate)
        h = self.act(hidden)
        if gate is not None:
            h = h * gate
        return self.ffn_out(self.inner_norm(self.dropout(h)))
