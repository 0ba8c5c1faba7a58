"""normzoo's own norms, residual schemes and tasks, enumerated from the registry: what tests
parametrise over, so that a new built-in is covered by every parametrised test without editing
a test file (``tests/test_registry_coverage.py`` checks that these lists hold every name
pyproject.toml's entry points declare).

Only normzoo's own entries count (:func:`normzoo.registry.entry.is_builtin`: the entry's
distribution is normzoo): a plugin installed beside normzoo, a name a test registers in-process
(``registry.norms.register``) or a fake distribution (conftest's ``fake_dists``) never joins a
parametrisation. Each list is read once, the first time a test module asks for it (pytest's
collection, before any test has changed the registries), and kept.

``BUILTIN_NORMS``, ``BUILTIN_SCHEMES`` and ``BUILTIN_TASKS`` are the sorted names; a test that
wants only those with some property asks :func:`norms_where`, :func:`schemes_where` or
:func:`tasks_where` with a predicate on the registered object (a norm's
``supports_stream_norm``, a task's ``family``...), so that a subset follows what each entry
declares, not a name. :func:`declared` is what pyproject.toml ships, for tests of the registry
itself. Importing this module imports nothing heavy; a list's entries are imported when it is
first read (the tasks' contract classes import neither torch nor Lightning).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import tomllib

from normzoo import registry
from normzoo.registry.entry import is_builtin

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

#: The registry of each kind, as this module names them.
KINDS: dict[str, registry.Registry] = {
    "norm": registry.norms,
    "residual": registry.residuals,
    "task": registry.tasks,
}


@cache
def _builtin(kind: str) -> tuple[tuple[str, Any], ...]:
    reg = KINDS[kind]
    return tuple((entry.info.name, entry.obj) for entry in reg.working()
                 if is_builtin(entry.info))


def builtin(kind: str) -> dict[str, Any]:
    """``{name: registered object}`` of normzoo's own entries of ``kind`` (``norm``,
    ``residual`` or ``task``) that import, sorted by name: the norm's factory, the scheme's
    class, the task (a :class:`~normzoo.contract.Task`)."""
    return dict(_builtin(kind))


def _where(kind: str, predicate: Callable[[Any], bool]) -> list[str]:
    return [name for name, obj in _builtin(kind) if predicate(obj)]


def norms_where(predicate: Callable[[Any], bool]) -> list[str]:
    """The built-in norms whose factory (a class) satisfies ``predicate``, sorted."""
    return _where("norm", predicate)


def schemes_where(predicate: Callable[[Any], bool]) -> list[str]:
    """The built-in residual schemes whose class satisfies ``predicate``, sorted."""
    return _where("residual", predicate)


def tasks_where(predicate: Callable[[Any], bool]) -> list[str]:
    """The built-in tasks that satisfy ``predicate``, sorted (``lambda task: task.family ==
    "encoder"``: it is given the registered task, whose declarations are class attributes)."""
    return _where("task", predicate)


def declared(kind: str) -> set[str]:
    """The names pyproject.toml declares in ``kind``'s entry-point group: what normzoo ships."""
    with open(PYPROJECT, "rb") as f:
        project = tomllib.load(f)["project"]
    return set(project.get("entry-points", {}).get(KINDS[kind].group, {}))


_LISTS = {"BUILTIN_NORMS": "norm", "BUILTIN_SCHEMES": "residual", "BUILTIN_TASKS": "task"}


def __getattr__(name: str) -> list[str]:
    """``BUILTIN_NORMS``, ``BUILTIN_SCHEMES`` and ``BUILTIN_TASKS``, read on first use."""
    if name in _LISTS:
        return [entry for entry, _ in _builtin(_LISTS[name])]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
