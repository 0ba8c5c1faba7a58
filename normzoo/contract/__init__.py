"""The task contract and the task lookup: what a task is (:class:`Task`), what it answers
(:class:`Card`, :class:`ExampleOutputs`) and which task a recipe names (:func:`task_of`).

It sits on a floor below ``data/`` and ``recipe/`` (docs/architecture.md): everything that asks
a task (preparing data, validating a recipe, rebuilding a checkpoint, the run, ``evaluate``,
``export``, ``compare``) looks it up here and never imports a task's own package. The contract
and this package import neither torch nor Lightning: ``normzoo list tasks`` and recipe checks
read them.

Plugin authors import these names from :mod:`normzoo.plugin`.
"""

from normzoo.contract.lookup import module_class, task_of, working_tasks
from normzoo.contract.outputs import ExampleOutputs
from normzoo.contract.task import Card, EvaluateRequest, FinalTest, Parts, Task

__all__ = [
    "Card",
    "EvaluateRequest",
    "ExampleOutputs",
    "FinalTest",
    "Parts",
    "Task",
    "module_class",
    "task_of",
    "working_tasks",
]
