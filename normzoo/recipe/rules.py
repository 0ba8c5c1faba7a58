"""The rules that tie one recipe section to another, on plain values: a task's model family, the
residual scheme's word on the training strategy, streaming (not for translation) and checkpoint
averaging against the checkpoints kept. :class:`~normzoo.recipe.schema.Recipe` checks them on a
whole recipe, and the loader (:mod:`~normzoo.recipe.loading`) on what is left of a recipe whose
sections have problems of their own, so both report them alike.
"""

from __future__ import annotations

from typing import Any

from normzoo.errors import Problem

FAMILY_OF_TASK = {"translation": "encoder_decoder", "mlm": "encoder", "causal_lm": "decoder"}


def family_problem(task: Any, family: Any) -> Problem | None:
    """The problem with ``model.family`` if it does not fit ``task`` (both already valid)."""
    expected = FAMILY_OF_TASK.get(task)
    if expected is None or family not in FAMILY_OF_TASK.values() or family == expected:
        return None
    return Problem("model.family", f"task '{task}' needs family '{expected}', not '{family}'")


def section_problems(task: Any, family: Any, strategy: Any, residual: Any, residual_options: Any,
                     streaming: Any, average_last: Any = 1, keep: Any = 5) -> list[Problem]:
    """The rules that tie one section to another, on plain values (the loader also checks them
    on what is left of a recipe whose sections have problems of their own)."""
    problems = [family_problem(task, family), strategy_problem(residual, residual_options,
                                                               strategy)]
    if streaming is True and task == "translation":
        problems.append(Problem("data.streaming", "streams causal_lm and mlm corpora; "
                                "translation corpora are prepared once with `normzoo prepare` "
                                "and memory-mapped"))
    if isinstance(average_last, int) and isinstance(keep, int) and average_last > max(keep, 1):
        problems.append(Problem("eval.average_last", f"averages the newest {average_last} "
                                f"periodic checkpoints, but trainer.keep_checkpoints={keep} "
                                "keeps fewer; raise trainer.keep_checkpoints"))
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
