"""Admin (Liu et al. 2020): x <- LN(w * x + f(x)), w a per-channel vector set from the depth.

``init: closed_form`` (default) uses the closed form of the reference implementation
(admin-torch), with L the number of residual connections in the stack (2 per encoder layer,
3 per decoder layer with cross-attention):

* ``output_change: logn`` (default): w = sqrt((L + 1) / ln(L + 1) - 1)
* ``output_change: one``: w = sqrt(L)

``init: profiled`` sets w from the variances of one forward pass on the first training batch
(:func:`profile`, through the contract's data-dependent init, which the task calls when
training starts; a resumed run keeps the w of its checkpoint), as the paper's reference
implementation, Transformer-Clinic's
``--init-type adaptive-profiling`` (``fairseq/modules/transformer_layer.py``), does: each stack
keeps a running ratio that starts at 1; every residual connection, in forward order, takes
w_i = ratio, runs with it, and updates

    ratio = sqrt(Var[w_i * x_{i-1}] + Var[f_i(x_{i-1})])

so that w_1 = 1 and, for i >= 2, w_i^2 is about Var[x_0] + sum_{j<i} Var[f_j] (the later x are
LN outputs of variance about 1), each branch measured as it runs under the earlier, already
profiled w. The decoder's cross-attention counts as a branch. Var is the population variance
over every value of the tensor (the reference's ``np.var``), here over the real tokens only:
padding depends on how a batch happens to be padded. The pass runs in training mode, dropout
included, as the reference profiles during its first training step. Each w is also kept in the
buffer ``profiled_omega`` (0 until profiled), so checkpoints and exports record it after
training has moved w.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    PlainForm,
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


class _StackProfile:
    """One stack's running ratio while profiling (the reference's ``encoder_ratio`` and
    ``decoder_ratio``), and the residual connections in the order they ran."""

    def __init__(self) -> None:
        self.ratio = 1.0
        self.visited: list[AdminResidual] = []

    def visit(self, module: AdminResidual, x: torch.Tensor, branch: torch.Tensor,
              padding_mask: torch.Tensor | None = None) -> float:
        """Set ``module``'s w to the ratio and advance the ratio past this connection, measuring
        over the real tokens of ``padding_mask`` (the stream's, True = pad; None: every token)."""
        omega = self.ratio
        module.set_omega(omega)
        self.visited.append(module)
        keep = (None if padding_mask is None or padding_mask.shape != x.shape[:-1]
                else ~padding_mask)
        self.ratio = math.sqrt(omega**2 * _variance(x, keep) + _variance(branch, keep))
        return omega


def _variance(t: torch.Tensor, keep: torch.Tensor | None) -> float:
    """Population variance of every value of ``t`` (of the tokens in ``keep``), in float64."""
    values = (t if keep is None else t[keep]).detach().double()
    return values.var(unbiased=False).item() if values.numel() else 0.0


class AdminResidual(Residual):
    # Profiling measures variances over real tokens: the layer hands over the padding mask.
    takes_padding_mask = True

    def __init__(self, norm, dim: int, omega: float, site: Site, profiled: bool = False) -> None:
        super().__init__()
        self.norm = norm
        self.omega = nn.Parameter(torch.full((dim,), float(omega)))
        self.site = site
        if profiled:
            self.register_buffer("profiled_omega", torch.zeros(()))
        self.profiling: _StackProfile | None = None  # set while profile() runs

    @torch.no_grad()
    def set_omega(self, value: float) -> None:
        self.omega.fill_(value)
        if hasattr(self, "profiled_omega"):
            self.profiled_omega.fill_(value)

    def forward(self, x, f: Sublayer, padding_mask: torch.Tensor | None = None):
        branch = f(x)
        if self.profiling is not None and self not in self.profiling.visited:
            self.profiling.visit(self, x, branch, padding_mask)
        return self.norm(self.omega * x + branch)

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.omega * x, branch

    def plain_form(self) -> PlainForm | str:
        return ("Admin scales the stream per channel before its LN, LN(ω ⊙ x + f(x)); with a "
                "different ω per channel that is not LN of any rescaled Post-LN sum")



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
        return AdminResidual(make_norm(), self.stack.dim, self.omega, site,
                             profiled=self.init == "profiled")

    def normalizes_stream(self) -> bool:
        return True

    # -- init: profiled, through the contract's data-dependent init ---------------------------
    @classmethod
    def needs_data_init(cls, model: nn.Module) -> bool:
        return any(getattr(m, "profiled_omega", None) is not None and m.profiled_omega.item() <= 0
                   for m in model.modules() if isinstance(m, AdminResidual))

    @classmethod
    def data_init(cls, model: nn.Module, run_forward: Callable[[], Any]) -> dict[str, Any]:
        return profile(model, run_forward)

    @classmethod
    def load_data_init(cls, model: nn.Module, state: Mapping[str, Any]) -> None:
        set_profiled(model, dict(state))

    @classmethod
    def data_init_state(cls, model: nn.Module) -> dict[str, Any] | None:
        return profiled_omegas(model)

    @classmethod
    def describe_data_init(cls, state: Mapping[str, Any]) -> str:
        return "Admin profiled w: " + "; ".join(
            f"{name} " + ", ".join(f"{w:.4g}" for w in ws) for name, ws in state.items())

    @classmethod
    def recipe_problem(cls, options: Mapping[str, Any], strategy: str) -> str | None:
        if strategy == "fsdp" and options.get("init") == "profiled":
            # Profiling writes w inside the sharded layers; not supported (nor tested) there.
            return ("init 'profiled' is not supported with trainer.strategy=fsdp; use "
                    "closed_form, or strategy ddp")
        return None


def _by_stack(model: nn.Module) -> dict[str, list[AdminResidual]]:
    """The model's Admin residual connections per stack, in site (forward) order."""
    stacks: dict[str, list[AdminResidual]] = {}
    for module in model.modules():
        if isinstance(module, AdminResidual):
            stacks.setdefault(module.site.stack.stack, []).append(module)
    return {name: sorted(modules, key=lambda m: m.site.index) for name, modules in stacks.items()}


@torch.no_grad()
def profile(model: nn.Module, run_forward: Callable[[], Any]) -> dict[str, list[float]]:
    """Set every Admin w of ``model`` by the reference's profiling of one forward pass
    (``run_forward()``, run in the model's current mode); return the w per stack, in forward
    order. See the module docstring for the procedure."""
    stacks = _by_stack(model)
    if not stacks:
        return {}
    profiles = {name: _StackProfile() for name in stacks}
    for name, modules in stacks.items():
        for module in modules:
            module.profiling = profiles[name]
    try:
        run_forward()
    finally:
        for modules in stacks.values():
            for module in modules:
                module.profiling = None
    for name, modules in stacks.items():
        ran = profiles[name].visited
        if ran != modules:
            raise RuntimeError(f"Admin profiling: the forward pass ran {len(ran)} of the {name} "
                               f"stack's {len(modules)} residual connections, or not in order")
    return {name: [m.omega[0].item() for m in modules] for name, modules in stacks.items()}


@torch.no_grad()
def set_profiled(model: nn.Module, values: dict[str, list[float]]) -> None:
    """Write profiled w (as :func:`profile` returns them) into ``model``, e.g. rank 0's
    into every process."""
    for name, modules in _by_stack(model).items():
        for module, value in zip(modules, values[name], strict=True):
            module.set_omega(value)


def profiled_omegas(model: nn.Module) -> dict[str, list[float]] | None:
    """The recorded profiled w per stack, or None when the model has none (not ``profiled``,
    or not profiled yet)."""
    stacks = {name: [m.profiled_omega.item() for m in modules if hasattr(m, "profiled_omega")]
              for name, modules in _by_stack(model).items()}
    if not any(stacks.values()) or any(v <= 0 for vs in stacks.values() for v in vs):
        return None
    return stacks
