"""The tasks a recipe can train, and what each one is judged by.

Importing this package is cheap; a task's module (and Lightning with it) is imported only when
:func:`task_class` asks for it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normzoo.recipe import Recipe
    from normzoo.tasks.base import NormzooTask


@dataclass(frozen=True)
class TaskSpec:
    """Where a task's LightningModule lives and which validation metric picks its best
    checkpoint (``mode``: whether higher or lower is better)."""

    module: str
    cls: str
    monitor: str
    mode: str


TASKS = {
    "translation": TaskSpec("normzoo.tasks.translation", "TranslationTask", "val/bleu", "max"),
    "mlm": TaskSpec("normzoo.tasks.lm", "MaskedLMTask", "val/loss", "min"),
    "causal_lm": TaskSpec("normzoo.tasks.lm", "CausalLMTask", "val/loss", "min"),
}


def task_class(task: str) -> type[NormzooTask]:
    """The LightningModule class that trains ``task``."""
    spec = TASKS[task]
    return getattr(importlib.import_module(spec.module), spec.cls)


def monitored_metric(recipe: Recipe) -> tuple[str, str]:
    """The validation metric that picks the best checkpoint, and whether higher is better."""
    if recipe.task == "translation" and not recipe.eval.valid_bleu:
        return "val/loss", "min"
    spec = TASKS[recipe.task]
    return spec.monitor, spec.mode
