"""Admin (Liu et al. 2020): x <- LN(w * x + f(x)), w a per-channel vector set from the depth.

``init: closed_form`` (default) uses the closed form of the reference implementation
(admin-torch), with L the number of residual connections in the stack (2 per encoder layer,
3 per decoder layer with cross-attention):

* ``output_change: logn`` (default): w = sqrt((L + 1) / ln(L + 1) - 1)
* ``output_change: one``: w = sqrt(L)

``init: profiled`` starts from w = 1 and sets w_i = sqrt(Var[x_0] + sum_{j<i} Var[f_j]) from one
forward pass on real data (:func:`profile`), the paper's Algorithm 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Sublayer,
)


def admin_omega(num_sublayers: int, output_change: str = "logn") -> float:
    """The closed-form initial w for a stack with ``num_sublayers`` residual connections."""
    if output_change == "logn":
        return math.sqrt((num_sublayers + 1) / math.log(num_sublayers + 1) - 1)
    return math.sqrt(num_sublayers)


class AdminResidual(Residual):
    def __init__(self, norm, dim: int, omega: float, site: Site) -> None:
        super().__init__()
        self.norm = norm
        self.omega = nn.Parameter(torch.full((dim,), float(omega)))
        self.site = site
        self.recorded: dict[str, float] | None = None  # set while profiling

    def forward(self, x, f: Sublayer):
        branch = f(x)
        if self.recorded is not None:
            self.recorded["input"] = x.float().var().item()
            self.recorded["branch"] = branch.float().var().item()
        return self.norm(self.omega * x + branch)


class Admin(ResidualScheme):
    """Admin: x <- LN(w*x + f(x)), w from the depth (closed form) or profiled."""

    def __init__(
        self,
        stack: StackInfo,
        init: Literal["closed_form", "profiled"] = "closed_form",
        output_change: Literal["logn", "one"] = "logn",
    ) -> None:
        super().__init__(stack)
        self.init = init
        self.omega = 1.0 if init == "profiled" else admin_omega(stack.num_sublayers, output_change)

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return AdminResidual(make_norm(), self.stack.dim, self.omega, site)

    def normalizes_stream(self) -> bool:
        return True


@torch.no_grad()
def profile(model: nn.Module, run_forward: Callable[[], Any]) -> dict[str, list[float]]:
    """Set every Admin w from the branch variances of one forward pass (``run_forward()``).

    Each stack is profiled separately: w_i = sqrt(Var[x_0] + sum_{j<i} Var[f_j(x_{j-1})]).
    Returns the w values per stack, in forward order.
    """
    residuals = [m for m in model.modules() if isinstance(m, AdminResidual)]
    if not residuals:
        return {}
    for module in residuals:
        module.omega.fill_(1.0)
        module.recorded = {}
    was_training = model.training
    model.eval()
    try:
        run_forward()
    finally:
        model.train(was_training)
    by_stack: dict[str, list[AdminResidual]] = {}
    for module in residuals:
        by_stack.setdefault(module.site.stack.stack, []).append(module)
    result = {}
    for stack, modules in by_stack.items():
        modules.sort(key=lambda m: m.site.index)
        total = modules[0].recorded["input"]
        values = []
        for module in modules:
            omega = math.sqrt(total)
            module.omega.fill_(omega)
            values.append(omega)
            total += module.recorded["branch"]
        result[stack] = values
    for module in residuals:
        module.recorded = None
    return result
