"""Pre-LN with GPT-2's depth-scaled initialisation of the residual projections.

GPT-2 (Radford et al. 2019, §2.3): "a modified initialization which accounts for the accumulation
on the residual path with model depth is used. We scale the weights of residual layers at
initialization by a factor of 1/sqrt(N) where N is the number of residual layers."

Each sublayer f adds ``f(LN(x))`` to the stream; the matrices that write into the stream (the
attention output projection W_o and the second feed-forward matrix) are scaled by 1/sqrt(N), N the
number of residual connections in the stack, so the stream's variance at init does not grow with
depth. A final LN follows the stack, as in GPT-2.

With ``init_std`` set, every matrix is first re-drawn from N(0, init_std^2) as in GPT-2 (0.02)
and the residual projections from N(0, (init_std / sqrt(N))^2), nanoGPT's recipe; by default the
model's own initialisation is kept and only the residual projections are scaled.

With ``data_init: true`` the scheme measures what GPT-2 assumes: each branch gets a gain g,
``x <- x + g f(LN(x))``, set on the first training batch (the contract's data-dependent init) so
that the branch's output is 1/sqrt(N) of the stream it joins, in root mean square:
``g = rms(x) / (sqrt(N) rms(f(LN(x))))``, connection by connection in forward order. The gains
are learnable at a tenth of the learning rate and without weight decay (the contract's optimizer
options); under FSDP the measurement is refused (``recipe_problem``). Exports fold a gain into the
branch's last matrix (``plain_form``), so the model still exports as a plain Pre-LN one.

Only normzoo's public API is used: ``normzoo.residual``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import torch
from pydantic import Field
from torch import nn

from normzoo.plugin import (
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
)

# The roles whose matrices write into the residual stream.
RESIDUAL_PROJECTIONS = ("out", "cross_out", "ffn_out")


class PreNormResidual(Residual):
    """x <- x + f(LN(x)), or x <- x + g f(LN(x)) with a gain g set from data."""

    def __init__(self, norm: nn.Module, branch_share: float | None = None) -> None:
        super().__init__()
        self.norm = norm
        # With data_init: the share of the stream a branch should add (1/sqrt(N)), and its gain,
        # 0 until the first training batch sets it (a checkpoint carries it: a parameter).
        self.branch_share = branch_share
        self.gain = nn.Parameter(torch.zeros(())) if branch_share is not None else None
        self.measuring = False

    def forward(self, x, f):
        branch = f(self.norm(x))
        if self.gain is None:
            return x + branch
        if self.measuring:
            with torch.no_grad():
                self.gain.fill_(_rms(x) * self.branch_share / max(_rms(branch), 1e-12))
            self.measuring = False
        return x + self.gain * branch

    def terms(self, x, branch):
        return x, branch if self.gain is None else self.gain * branch

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        # A scalar is not decayed anyway; the gain learns slowly: it was measured, not guessed.
        return {} if self.gain is None else {"gain": {"weight_decay": 0.0, "lr_scale": 0.1}}

    def plain_form(self) -> PlainForm | str:
        if type(self) is not PreNormResidual:
            return super().plain_form()
        if self.gain is None:
            return PlainForm("pre")
        return PlainForm("pre", float(self.gain.detach()), folded="the measured branch gains "
                         "multiplied into each branch's output matrix and bias")


def _rms(t: torch.Tensor) -> float:
    return t.detach().float().pow(2).mean().sqrt().item()


def _gained(model: nn.Module) -> list[PreNormResidual]:
    """The model's connections with a gain, in the order the model holds them."""
    return [m for m in model.modules() if isinstance(m, PreNormResidual) and m.gain is not None]


class GPT2Scaled(ResidualScheme):
    """GPT-2 init: Pre-LN, residual projections (W_o, W_2) scaled by 1/sqrt(N) at init, final LN."""

    def __init__(
        self,
        stack: StackInfo,
        init_std: Annotated[float, Field(gt=0)] | None = None,
        data_init: bool = False,
    ) -> None:
        super().__init__(stack)
        self.init_std, self.data_init_gains = init_std, data_init
        # N: the residual connections of this stack (2 per layer, 3 with cross-attention).
        self.scale = 1.0 / math.sqrt(stack.num_sublayers)

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PreNormResidual(make_norm(), self.scale if self.data_init_gains else None)

    @torch.no_grad()
    def init_weights(self, site: Site, weights: Mapping[str, torch.Tensor]) -> None:
        for role, weight in weights.items():
            projection = role in RESIDUAL_PROJECTIONS
            if self.init_std is not None:
                std = self.init_std * (self.scale if projection else 1.0)
                nn.init.normal_(weight, mean=0.0, std=std)
            elif projection:
                weight.mul_(self.scale)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        return StreamEnds(make_norm())

    # -- data_init: true, through the contract's data-dependent init ---------------------------
    @classmethod
    def needs_data_init(cls, model: nn.Module) -> bool:
        return any(m.gain.item() == 0 for m in _gained(model))

    @classmethod
    def data_init(cls, model: nn.Module, run_forward: Callable[[], Any]) -> dict[str, Any]:
        modules = _gained(model)
        for module in modules:
            module.measuring = True
        try:
            run_forward()
        finally:
            for module in modules:
                module.measuring = False
        return {"gains": [m.gain.item() for m in modules]}

    @classmethod
    @torch.no_grad()
    def load_data_init(cls, model: nn.Module, state: Mapping[str, Any]) -> None:
        for module, gain in zip(_gained(model), state["gains"], strict=True):
            module.gain.fill_(gain)

    @classmethod
    def data_init_state(cls, model: nn.Module) -> dict[str, Any] | None:
        gains = [m.gain.item() for m in _gained(model)]
        return {"gains": gains} if gains and all(g != 0 for g in gains) else None

    @classmethod
    def describe_data_init(cls, state: Mapping[str, Any]) -> str:
        gains = state["gains"]
        return (f"gpt2_scaled measured {len(gains)} branch gains, "
                f"{min(gains):.3g} to {max(gains):.3g}")

    @classmethod
    def recipe_problem(cls, options: Mapping[str, Any], strategy: str) -> str | None:
        if strategy == "fsdp" and options.get("data_init"):
            return "data_init is not supported with trainer.strategy=fsdp (sharded gains)"
        return None
