"""The tasks a recipe can train: each one a :class:`~normzoo.tasks.contract.Task` registered in
the ``normzoo.tasks`` entry-point group, as residual schemes and norms are (normzoo's own four:
``translation``, ``mlm``, ``causal_lm``, ``classification``; a third party adds one the same
way, docs/plugins.md). Nothing outside this package names a task: it asks :func:`task_of`.

Importing this package is cheap; a task's LightningModule (and Lightning with it) is imported
only when :func:`task_class` asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from normzoo.tasks.contract import Card, EvaluateRequest, Task

if TYPE_CHECKING:
    from normzoo.recipe import Recipe

__all__ = [
    "Card",
    "EvaluateRequest",
    "Task",
    "monitored_metric",
    "task_class",
    "task_of",
    "working_tasks",
]

_made: dict[tuple[str, int], Task] = {}


def task_of(which: str | Recipe | dict[str, Any]) -> Task:
    """The task named ``which`` (a name, a recipe, or a recipe as plain data). An unknown name
    is a :class:`~normzoo.errors.RegistryError` that lists the registered ones."""
    from normzoo import registry

    if isinstance(which, dict):
        name = str(which.get("task"))
    else:
        name = which if isinstance(which, str) else which.task
    cls = registry.tasks.get(name)
    key = (name, id(cls))
    if key not in _made:
        _made[key] = cls()
    return _made[key]


def working_tasks() -> list[Task]:
    """Every registered task that imports, by name (a broken plugin is left out: it is an error
    only where a recipe names it)."""
    from normzoo import registry

    return [task_of(entry.info.name) for entry in registry.tasks.working()]


def task_class(task: str) -> type:
    """The LightningModule class that trains ``task``."""
    return task_of(task).module()


def monitored_metric(recipe: Recipe) -> tuple[str, str]:
    """The validation metric that picks the best checkpoint, and whether higher is better."""
    return task_of(recipe).monitored(recipe)
