"""The recipe's ``optim`` section: AdamW's settings and the learning-rate schedule, with the
rules that tie the schedule to ``trainer.max_steps``.

Kept apart from :mod:`normzoo.recipe.schema` because the schedules' arithmetic
(:func:`decay_length`) is shared by validation and by :func:`normzoo.tasks.optim.lr_factor`:
the step a recipe is validated against is the step the run decays at.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from normzoo.errors import Problem
from normzoo.recipe.section import Section
from normzoo.registry.options import rule_error

Beta = Annotated[float, Field(ge=0, lt=1)]  # what torch.optim.AdamW accepts

Schedule = Literal["inverse_sqrt", "cosine", "linear", "wsd", "constant"]
# The schedules whose rate depends on where training ends: each reaches optim.min_lr at
# trainer.max_steps, so that step has to be the recipe's own, not the 100,000 default cap.
ENDS_AT_MAX_STEPS = ("cosine", "linear", "wsd")


class OptimConfig(Section):
    """AdamW with a linear warm-up, then one of the schedules ``inverse_sqrt``, ``cosine``,
    ``linear``, ``wsd`` (warm-up, stable, decay) or ``constant``; their formulas are
    :func:`normzoo.tasks.optim.lr_factor`'s."""

    lr: float = Field(default=5e-4, gt=0)
    betas: tuple[Beta, Beta] = (0.9, 0.98)
    eps: float = Field(default=1e-8, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    schedule: Schedule = "inverse_sqrt"
    warmup_steps: int = Field(default=4000, ge=0)
    min_lr: float = Field(default=0.0, ge=0, description="where cosine, linear and wsd end")
    decay_fraction: float = Field(
        default=0.2, gt=0, le=1,
        description="wsd: the share of trainer.max_steps spent decaying (the last ones)")
    decay_steps: int | None = Field(
        default=None, gt=0, description="wsd: decay over this many last steps instead of "
        "decay_fraction of trainer.max_steps")
    decay_shape: Literal["linear", "cosine", "1-sqrt"] = Field(
        default="1-sqrt", description="wsd: the decay's shape; 1-sqrt is Hägele et al. "
        "(2024)'s cooldown, 1 - sqrt(progress)")
    clip_norm: float = Field(default=0.0, ge=0, description="0 disables gradient clipping")
    label_smoothing: float = Field(default=0.1, ge=0, lt=1)

    @model_validator(mode="after")
    def _floor_below_peak(self) -> OptimConfig:
        if self.min_lr > self.lr:
            raise rule_error(Problem("min_lr", f"{self.min_lr} is above the peak learning "
                                     f"rate lr={self.lr}"))
        return self


def decay_length(decay_steps: int | None, decay_fraction: float, max_steps: int) -> int:
    """The wsd decay's steps: ``decay_steps``, else ``decay_fraction`` of ``max_steps``
    rounded to the nearest step, halves up (at least one)."""
    if decay_steps is not None:
        return decay_steps
    return max(1, math.floor(decay_fraction * max_steps + 0.5))


def schedule_problems(schedule: Any, warmup: Any, decay_steps: Any, decay_fraction: Any,
                      max_steps: Any, max_steps_given: bool) -> list[Problem]:
    """What is wrong with the schedule for the run's length, on plain values (the loader
    also checks them on what is left of an invalid recipe, so any value may be of any type).

    A schedule that ends at ``trainer.max_steps`` needs it set in the recipe: left at its
    default (a cap of 100,000 steps) under ``max_epochs`` or ``max_time``, the decay would be
    stretched over steps the run never takes. A wsd decay must fit after the warm-up."""
    if schedule not in ENDS_AT_MAX_STEPS:
        return []
    if not max_steps_given:
        return [Problem("trainer.max_steps", f"optim.schedule={schedule} decays to "
                        "optim.min_lr at trainer.max_steps: set it to the run's length (its "
                        f"default, {max_steps}, is only a cap)")]
    numbers = [warmup, max_steps, decay_fraction] + ([] if decay_steps is None else [decay_steps])
    if schedule != "wsd" or not all(
            isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        return []
    decay = decay_length(decay_steps, decay_fraction, max_steps)
    if warmup + decay <= max_steps:
        return []
    key, given = (("optim.decay_steps", f"decay_steps={decay_steps}") if decay_steps is not None
                  else ("optim.decay_fraction", f"decay_fraction={decay_fraction} of "
                        f"trainer.max_steps={max_steps}"))
    return [Problem(key, f"the wsd decay ({given}: {decay} steps) does not fit after the "
                    f"{warmup} warm-up steps: together they need trainer.max_steps >= "
                    f"{warmup + decay}, not {max_steps}; shorten the decay or the warm-up")]
