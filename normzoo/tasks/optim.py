"""AdamW and the learning-rate schedules of the recipes, as plain ``LambdaLR`` factors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch

from normzoo.recipe import OptimConfig
from normzoo.recipe.optim import decay_length
from normzoo.residual.base import Residual

# The decays' shapes, from 1 at progress 0 to 0 at progress 1 (transformers' get_wsd_schedule
# has the same three).
DECAY_SHAPES: dict[str, Callable[[float], float]] = {
    "linear": lambda progress: 1.0 - progress,
    "cosine": lambda progress: 0.5 * (1.0 + math.cos(math.pi * progress)),
    "1-sqrt": lambda progress: 1.0 - math.sqrt(progress),  # Hägele et al. (2024)
}


def lr_factor(config: OptimConfig, max_steps: int) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based).

    Every schedule warms up linearly from 0 over ``warmup_steps``; then:

    * ``inverse_sqrt`` (Vaswani et al., fairseq): ``sqrt(warmup / step)``; with no warm-up the
      rate stays at the peak.
    * ``cosine``: cosine decay to ``min_lr`` at ``max_steps``.
    * ``linear``: linear decay to ``min_lr`` at ``max_steps`` (transformers'
      ``get_linear_schedule_with_warmup`` when ``min_lr`` is 0).
    * ``wsd`` (warm-up, stable, decay; Hu et al. 2024, Hägele et al. 2024): the peak until the
      last :func:`~normzoo.recipe.optim.decay_length` steps, which decay to ``min_lr`` at
      ``max_steps`` in ``decay_shape`` (transformers' ``get_wsd_schedule``, whose warm-up
      starts at ``min_lr`` rather than 0).
    * ``constant``: the peak.

    Step ``s`` here is step ``s + 1`` of transformers' schedules: the first update already
    learns (a non-zero rate), and the last of ``max_steps`` updates is at ``min_lr``.
    """
    warmup = config.warmup_steps
    floor = config.min_lr / config.lr
    decay = decay_length(config.decay_steps, config.decay_fraction, max_steps)

    def ends_at_floor(progress: float, shape: str) -> float:
        return floor + (1 - floor) * DECAY_SHAPES[shape](min(progress, 1.0))

    def factor(step: int) -> float:
        step = step + 1  # the first update already uses a non-zero rate
        if warmup and step < warmup:
            return step / warmup
        if config.schedule == "inverse_sqrt":
            return math.sqrt(warmup / step) if warmup else 1.0
        span = max(max_steps - warmup, 1)
        if config.schedule == "cosine":
            return ends_at_floor((step - warmup) / span, "cosine")
        if config.schedule == "linear":
            # As transformers' has it: at the floor at max_steps even when the warm-up
            # leaves no step to decay over (where cosine, as transformers', is at the peak).
            return ends_at_floor(1 - (max_steps - step) / span, "linear")
        if config.schedule == "wsd":
            start = max_steps - decay  # validation keeps it at or after the warm-up
            return 1.0 if step < start else ends_at_floor((step - start) / decay,
                                                          config.decay_shape)
        return 1.0

    return factor


# The two parameter groups' names. Lightning's LearningRateMonitor logs each group's rate as
# ``<scheduler name>/<group name>``; the tasks name their scheduler ``train``, so the rates are
# logged as ``train/lr`` (weights) and ``train/lr_no_decay`` (biases, norms, scalars): the
# same rate, as one schedule scales both groups.
GROUP_NAMES = ("lr", "lr_no_decay")


def declared_options(model: torch.nn.Module) -> dict[str, dict[str, float]]:
    """What modules declare their own parameters need from the optimizer, by full parameter
    name: ``optimizer_options()`` returning ``{local parameter name: {"weight_decay": 0.0,
    "lr_scale": s}}`` (either key optional). A mixing matrix of Hyper-Connections is 2-D, yet
    decaying it toward 0 would cut the streams apart: the module that owns it says so, rather
    than the optimizer guessing from a tensor's rank.

    A scheme's residual connection has the hook from its contract
    (:meth:`Residual.optimizer_options <normzoo.residual.base.Residual.optimizer_options>`,
    none by default); any other module (a plugin's norm, a plain ``nn.Module``) may define it."""
    found: dict[str, dict[str, float]] = {}
    for prefix, module in model.named_modules():
        if isinstance(module, Residual):
            declare = module.optimizer_options
        else:  # not part of a contract: optional
            declare = getattr(module, "optimizer_options", None)
        if callable(declare):
            for name, options in declare().items():
                unknown = set(options) - {"weight_decay", "lr_scale"}
                if unknown:
                    raise ValueError(f"{type(module).__name__}.optimizer_options: unknown "
                                     f"{sorted(unknown)} for {name!r} (weight_decay, lr_scale)")
                found[f"{prefix}.{name}" if prefix else name] = dict(options)
    return found


AdamWImpl = Literal["fused", "foreach"]


def adamw_impl(device_type: str, precision: str) -> AdamWImpl:
    """Which AdamW kernel a run steps: ``fused`` (one kernel for every parameter's update),
    except under ``16-mixed``, where ``foreach`` (torch's multi-tensor loop) stays.

    Fused is the cheaper on both: AdamW was 12% of a Transformer-base step's GPU time on an
    H200 under foreach (issue 50), and on a CPU (1 thread, 11M parameters) a fused step took
    29 ms against foreach's 200 ms (issue 61), its weights within float32 rounding of
    foreach's. It also skips an update on the device where its ``found_inf`` says so, which
    lets the divergence guard withhold a diverged update without the host waiting for the
    verdict (:class:`~normzoo.diagnostics.callbacks.DivergenceGuard`). Under ``16-mixed`` it
    would unscale the gradients inside its own step, so Lightning's GradScaler skips its
    unscaling pass and every hook between the backward and the step (gradient clipping, which
    Lightning then refuses; the divergence guard's and the diagnostics' gradient norms) would
    see scaled gradients: foreach stays there. Under ``bf16-mixed`` nothing is scaled, yet
    Lightning's mixed-precision plugin refuses to clip for any optimizer that unscales itself;
    the task clips there itself (:meth:`TaskModule.configure_gradient_clipping
    <normzoo.tasks.base.TaskModule.configure_gradient_clipping>`), so gradient clipping never
    decides the kernel. A device torch has no fused kernel for gets foreach too."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    fused = device_type in _get_fused_kernels_supported_devices()
    return "fused" if fused and precision != "16-mixed" else "foreach"


def build_optimizer(model: torch.nn.Module, config: OptimConfig, max_steps: int,
                    impl: AdamWImpl = "foreach"):
    """AdamW without weight decay on biases, norms and scalars, and as modules declare for
    their own parameters (:func:`declared_options`); the schedule steps per update. ``impl``
    is the kernel (:func:`adamw_impl`): a training run chooses it; the benchmarks that compare
    frameworks keep every framework on foreach.

    The first two groups are named :data:`GROUP_NAMES`, in that order; parameters declared
    with other options get a group each, named ``lr_<weight decay>_<lr scale>``."""
    declared = declared_options(model)
    decay, no_decay = [], []
    extra: dict[tuple[float, float], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        options = declared.get(name)
        if options is None:
            (decay if param.dim() >= 2 else no_decay).append(param)
            continue
        wd = options.get("weight_decay", config.weight_decay if param.dim() >= 2 else 0.0)
        scale = options.get("lr_scale", 1.0)
        if scale == 1.0 and wd in (0.0, config.weight_decay):
            (no_decay if wd == 0.0 else decay).append(param)
        else:
            extra.setdefault((wd, scale), []).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay, "name": GROUP_NAMES[0]},
        {"params": no_decay, "weight_decay": 0.0, "name": GROUP_NAMES[1]},
        *({"params": params, "weight_decay": wd, "lr": config.lr * scale,
           "name": f"lr_{wd:g}_{scale:g}"} for (wd, scale), params in extra.items()),
    ]
    # foreach: one pass over all parameters instead of a Python loop per tensor (torch's default
    # only on CUDA); fused: a single kernel, on a GPU (adamw_impl).
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps,
                                  **{impl: True})
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config, max_steps))
    return optimizer, scheduler
