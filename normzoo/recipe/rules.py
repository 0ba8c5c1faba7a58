"""The rules that tie one recipe section to another: a task's model family, the residual
scheme's word on the training strategy, streaming (not for translation), checkpoint averaging
against the checkpoints kept, and the schedule against the run's length.
:class:`~normzoo.recipe.schema.Recipe` checks them on a whole recipe, and the loader
(:mod:`~normzoo.recipe.loading`) on what is left of a recipe whose sections have problems of
their own, so both report them alike. Both hand over the typed sections, so a key the recipe
leaves out reads as the schema's own default: no default is written twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from normzoo import registry
from normzoo.contract.lookup import task_of, working_tasks
from normzoo.errors import Problem
from normzoo.models.family_info import FAMILY_NAMES
from normzoo.recipe.optim import schedule_problems

if TYPE_CHECKING:  # the schema imports this module
    from normzoo.models.config import ModelConfig
    from normzoo.recipe.data import DataConfig
    from normzoo.recipe.optim import OptimConfig


class TrainerSection(Protocol):
    """What the rules read of ``trainer`` (:class:`~normzoo.recipe.schema.TrainerConfig`, which
    imports this module: the rules name only what they read)."""

    strategy: Any
    keep_checkpoints: Any
    max_steps: Any
    model_fields_set: set[str]


class EvalSection(Protocol):
    """What the rules read of ``eval`` (:class:`~normzoo.recipe.schema.EvalConfig`)."""

    average_last: Any


def task_of_family(family: Any) -> str | None:
    """A task that trains ``family`` (normzoo's own first), to stand in for a task that is not
    valid; None when none does."""
    tasks = sorted(working_tasks(), key=lambda task: (not _builtin_task(task), task.name))
    return next((task.name for task in tasks if task.family == family), None)


def _builtin_task(task: Any) -> bool:
    return registry.is_builtin(registry.tasks.info(task.name))


class _Families(Mapping[str, str]):
    """Each registered task's model family, read from the tasks themselves (a task a plugin
    adds is in it as soon as it is installed)."""

    def __getitem__(self, name: str) -> str:
        if name not in registry.tasks:
            raise KeyError(name)
        return task_of(name).family

    def __iter__(self) -> Iterator[str]:
        return iter(registry.tasks.names())

    def __len__(self) -> int:
        return len(registry.tasks.names())


FAMILY_OF_TASK: Mapping[str, str] = _Families()


def family_problem(task: Any, family: Any) -> Problem | None:
    """The problem with ``model.family`` if it does not fit ``task`` (both already valid)."""
    expected = FAMILY_OF_TASK.get(task) if isinstance(task, str) else None
    if expected is None or family not in FAMILY_NAMES or family == expected:
        return None
    return Problem("model.family", f"task '{task}' needs family '{expected}', not '{family}'")


def task_problems(task: Any, options: Any) -> list[Problem]:
    """The task's word on ``task_options`` (:meth:`~normzoo.contract.task.Task.option_problems`)
    for a registered task."""
    if not (isinstance(task, str) and task in FAMILY_OF_TASK and isinstance(options, dict)):
        return []
    return task_of(task).option_problems(options)


def section_problems(task: Any, model: ModelConfig, data: DataConfig, optim: OptimConfig,
                     trainer: TrainerSection, evaluation: EvalSection) -> list[Problem]:
    """The rules that tie one section to another, on the typed sections (the loader also checks
    them on what is left of a recipe whose sections have problems of their own)."""
    streaming, average_last, keep = (data.streaming, evaluation.average_last,
                                     trainer.keep_checkpoints)
    problems = [family_problem(task, model.family),
                strategy_problem(model.residual.name, model.residual.options, trainer.strategy)]
    known = isinstance(task, str) and task in FAMILY_OF_TASK
    if streaming is True and known and not task_of(task).streams:
        streamed = " and ".join(t.name for t in working_tasks() if t.streams)
        problems.append(Problem("data.streaming", f"streams {streamed} corpora; {task} "
                                "corpora are prepared once with `normzoo prepare` and "
                                "memory-mapped"))
    if isinstance(average_last, int) and isinstance(keep, int) and average_last > max(keep, 1):
        problems.append(Problem("eval.average_last", f"averages the newest {average_last} "
                                f"periodic checkpoints, but trainer.keep_checkpoints={keep} "
                                "keeps fewer; raise trainer.keep_checkpoints"))
    problems += schedule_problems(optim.schedule, optim.warmup_steps, optim.decay_steps,
                                  optim.decay_fraction, trainer.max_steps,
                                  "max_steps" in trainer.model_fields_set)
    return [problem for problem in problems if problem is not None]


def strategy_problem(residual: Any, options: Any, strategy: Any) -> Problem | None:
    """What the residual scheme says against training under ``strategy`` with ``options``
    (:meth:`~normzoo.residual.base.ResidualScheme.recipe_problem`); None for a scheme the
    registry does not know (the model section reports that)."""
    if not isinstance(residual, str) or not isinstance(strategy, str):
        return None
    from normzoo.errors import NormzooError
    from normzoo.models.resolve import scheme_class

    try:
        scheme = scheme_class(residual)
    except NormzooError:
        return None
    message = scheme.recipe_problem(options if isinstance(options, dict) else {}, strategy)
    return None if message is None else Problem("model.residual", message)
