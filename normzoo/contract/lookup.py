"""Which task a recipe names: the registry's instance of it (normzoo's four and every
installed plugin's, in the ``normzoo.tasks`` entry-point group). A task whose class cannot be
imported, is not a :class:`~normzoo.contract.task.Task` or cannot be built is BROKEN in
``normzoo list`` (the registry makes each task once) and an error only where a recipe names it.
"""

from __future__ import annotations

import importlib
from typing import Any

from normzoo import registry


def task_of(which: Any) -> Any:
    """The task named ``which`` (a name, a recipe, or a recipe as plain data): the registry's
    :class:`~normzoo.contract.task.Task`. An unknown or broken name is a
    :class:`~normzoo.errors.RegistryError` that says so."""
    if isinstance(which, dict):
        name = str(which.get("task"))
    else:
        name = which if isinstance(which, str) else which.task
    return registry.tasks.get(name)


def working_tasks() -> list[Any]:
    """Every registered task that imports and builds, by name (a broken plugin is left out: it
    is an error only where a recipe names it)."""
    return [entry.obj for entry in registry.tasks.working()]


def module_class(which: Any) -> type:
    """The LightningModule class that trains the task ``which`` names (or is): its
    :attr:`~normzoo.contract.task.Task.module`, imported."""
    named = isinstance(which, str | dict) or hasattr(which, "task_options")  # a recipe
    task = task_of(which) if named else which
    module, _, cls = task.module.partition(":")
    return getattr(importlib.import_module(module), cls)
