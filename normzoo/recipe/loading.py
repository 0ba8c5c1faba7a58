"""Turning plain data into a validated :class:`~normzoo.recipe.schema.Recipe`, with every
problem reported at once under its key path (and a close-match suggestion for an unknown key).

The flow: a YAML file (:mod:`~normzoo.recipe.reading`) with its bases merged in
(:mod:`~normzoo.recipe.bases`) -> overrides
(:mod:`~normzoo.recipe.overrides`) -> :func:`from_dict` -> the schema -> the registry check of
the model section (:meth:`~normzoo.models.config.ModelConfig.resolved`), which returns a new
recipe whose model carries its options as the plugins read them. pydantic stops checking a
section's cross-field rules once one of its fields is invalid; :func:`from_dict` therefore
drops the invalid keys and validates what is left again (their defaults stand in), and checks
the registry on what is left, so that one error lists every problem.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pydantic

from normzoo.errors import ConfigError, Problem
from normzoo.models.config import ModelConfig, registry_problems
from normzoo.recipe.bases import BASE_KEY, read_recipe_with_bases
from normzoo.recipe.overrides import apply_overrides
from normzoo.recipe.reading import check_shape
from normzoo.recipe.rules import FAMILY_OF_TASK, task_of_family
from normzoo.recipe.schema import Recipe
from normzoo.registry.options import (
    boolean_numbers,
    close_match,
    key_name,
    pydantic_problems,
    rule_problems,
)

# Upper bounds of model sizes, far above any real model. Validation builds a norm of width
# d_model, so without them a typo (d_model=5120000000) allocates gigabytes or overflows inside
# torch instead of being reported; layers and positions are built one by one at assembly.
MODEL_LIMITS = {"d_model": 2**20, "ffn_dim": 2**20, "max_positions": 2**20,
                "encoder_layers": 2**14, "decoder_layers": 2**14}
_INTEGER = pydantic.TypeAdapter(int)
# What the model section's own validator skips its rules for (the registry check does too).
_FIELDS_ONLY = {"fields_only": True}
_Model = TypeVar("_Model", bound=pydantic.BaseModel)


def _data_loc(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` cut where it leaves ``data``: pydantic adds the branch of a union
    (``trainer.devices.int``), which is no key of the recipe."""
    node = data
    for i, part in enumerate(loc):
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list | tuple) and isinstance(part, int) and part < len(node)
        if in_dict or in_list:
            node = node[part]
        else:
            return loc[: i + 1] if isinstance(node, dict) else loc[:i]
    return loc


def _problems(error: pydantic.ValidationError, data: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for item in error.errors():
        found = rule_problems(item)
        if found is not None:
            problems += found
            continue
        loc = _data_loc(data, item["loc"])
        (problem,) = pydantic_problems([{**item, "loc": loc}], "", Recipe)
        union = [i for i, p in enumerate(problems) if p.path == problem.path]
        if loc != item["loc"] and union:  # another branch of the same union: one problem
            old = problems[union[0]]
            problems[union[0]] = Problem(old.path, f"{old.message}; or {problem.message}")
        else:
            problems.append(problem)
    return problems


def _fill_family(data: dict[str, Any]) -> None:
    """``model.family`` follows from ``task`` when the recipe does not name it (in place)."""
    task = data.get("task")
    if not isinstance(task, str):
        return
    model = data.get("model")
    family = FAMILY_OF_TASK.get(task, ModelConfig.model_fields["family"].default)
    if isinstance(model, dict) and "family" not in model:
        data["model"] = {**model, "family": family}
    elif model is None:
        data["model"] = {"family": family}


def _drop(data: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    """Delete the deepest key of ``data`` on ``loc``; its dotted path, or None if none is."""
    node: Any = data
    parent: dict[str, Any] | None = None
    key: Any = None
    path: list[str] = []
    for part in loc:
        if not (isinstance(node, dict) and part in node):
            break
        parent, key, node = node, part, node[part]
        path.append(str(part))
    if parent is None:
        return None
    del parent[key]
    return ".".join(path)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root + ".") for root in roots)


def _validate(data: dict[str, Any]) -> tuple[Recipe | None, list[Problem], dict[str, Any]]:
    """Validate ``data``; on failure, keep validating what is left once the bad keys are
    dropped. Returns the recipe (None if invalid), every problem and what was left of ``data``.
    """
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    dropped: list[str] = []
    for _ in range(100):  # each round drops at least one key
        try:
            recipe = Recipe.model_validate(data)
            return (None if problems else recipe), problems, data
        except pydantic.ValidationError as error:
            for problem in _problems(error, data):
                if problem not in problems and not _under(problem.path, dropped):
                    problems.append(problem)
            removed = [
                path for item in error.errors() if rule_problems(item) is None
                for path in [_drop(data, item["loc"])] if path is not None
            ]
            if not removed:  # only cross-field problems are left: they are all reported
                break
            dropped += removed
            if "task" in removed:
                # A task of the model's family stands in, so that the family is not reported
                # against a default task; the options of the task that is not there go
                # unchecked (they were another task's).
                model = data.get("model")
                family = model.get("family") if isinstance(model, dict) else None
                stand_in = task_of_family(family)
                if stand_in is not None:
                    data["task"] = stand_in
                data.pop("task_options", None)
            _fill_family(data)  # a dropped model.family follows the task again
    return None, problems, data


def _limit_problems(data: dict[str, Any]) -> list[Problem]:
    """Model sizes above :data:`MODEL_LIMITS`, read as pydantic reads them (2e6 too)."""
    model = data.get("model")
    problems = []
    for key, limit in MODEL_LIMITS.items() if isinstance(model, dict) else ():
        try:
            value = _INTEGER.validate_python(model.get(key))
        except pydantic.ValidationError:
            continue  # absent or not a number: validation reports the latter
        if value > limit:
            problems.append(Problem(f"model.{key}", f"{value} is above the limit of {limit} "
                                    "(a typo?)"))
    return problems


def _prechecked(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """``data`` without the keys pydantic alone would let through: booleans given as numbers,
    model sizes above the limits; and their problems. Without those keys (their defaults
    stand in) validation still reports everything else."""
    problems = boolean_numbers(Recipe, data) + _limit_problems(data)
    if problems:
        data = copy.deepcopy(data)
        for problem in problems:
            _drop(data, tuple(problem.path.split(".")))
    return data, problems


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    section = data.get(name)
    return section if isinstance(section, dict) else {}


def _left_typed(cls: type[_Model], values: dict[str, Any]) -> _Model:
    """What is left of an invalid recipe (or of one of its sections) as ``cls``, typed as a
    valid recipe's is and with the schema's own defaults for what is missing, so that the
    recipe-wide rules read it as they read a valid recipe (and no default is written twice).

    Validated whole where only the rules of other sections refuse it; where its own rules
    do (they are reported already), built field by field: a section as a section, any other
    field validated on its own, and one that fails even so left at its default.
    """
    try:
        return cls.model_validate(values, context=_FIELDS_ONLY)
    except pydantic.ValidationError:
        pass
    typed: dict[str, Any] = {}
    for name, value in values.items():
        field = cls.model_fields.get(name)
        if field is None:
            continue
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel):
            if isinstance(value, dict):
                typed[name] = _left_typed(kind, value)
            continue
        try:
            typed[name] = pydantic.TypeAdapter(Annotated[kind, field]).validate_python(
                value, context=_FIELDS_ONLY)
        except pydantic.ValidationError:
            continue
    return cls.model_construct(**typed)


def _left_section_problems(left: dict[str, Any]) -> list[Problem]:
    """The recipe-wide rules (:meth:`~normzoo.recipe.schema.Recipe.cross_section_problems`)
    on what is left of an invalid recipe, read as a recipe (:func:`_left_typed`)."""
    return _left_typed(Recipe, left).cross_section_problems()


def from_dict(data: dict[str, Any], check_registry: bool = True) -> Recipe:
    """Validate plain data as a recipe; raise :class:`ConfigError` with every problem.

    ``check_registry=False`` skips looking the model's norm and residual up (to read a recipe
    whose plugins are not installed here); such a recipe cannot build a model.
    """
    if not isinstance(data, dict):
        raise ConfigError([Problem("", "the top level must be a mapping of sections, not "
                                   f"{type(data).__name__}")], "invalid recipe")
    check_shape(data, "invalid recipe")
    problems: list[Problem] = []
    for key in data:
        if key == BASE_KEY:  # plain data (an override, a checkpoint's recipe) has no folder
            problems.append(Problem(BASE_KEY, "names the recipe file a recipe file builds on; "
                                    "it is read with the file (normzoo.recipe.load), not set "
                                    "by an override or in plain data"))
        elif key not in Recipe.model_fields:
            problems.append(Problem(key_name(key), "unknown section"
                                    + close_match(str(key), list(Recipe.model_fields))))
    known, found = _prechecked({k: v for k, v in data.items() if k in Recipe.model_fields})
    problems += found
    _fill_family(known)
    recipe, found, left = _validate(known)
    problems += [p for p in found if p not in problems]
    if recipe is None:
        # The recipe-wide rules are skipped by pydantic while a section has problems.
        problems += [p for p in _left_section_problems(left) if p not in problems]
        if check_registry:
            found = registry_problems(_section(left, "model"), problems)
            problems += [p for p in found if p not in problems]
    elif check_registry:
        try:
            recipe = recipe.model_copy(update={"model": recipe.model.resolved()})
        except ConfigError as error:
            problems += error.problems
    if problems:
        raise ConfigError(problems, "invalid recipe")
    assert recipe is not None
    return recipe


def load(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read (its bases merged in: :mod:`~normzoo.recipe.bases`), override and validate a
    recipe file. Whether this machine can run it is the run's
    question, not the recipe's: ``train``, ``sweep`` and ``recipe validate`` ask it next
    (:func:`normzoo.run.machine.check_machine`)."""
    data, bases = read_recipe_with_bases(path)
    try:
        return from_dict(apply_overrides(data, overrides or []))
    except ConfigError as error:
        if not bases:
            raise
        # A key with a problem may come from a base: say which files were merged.
        built_on = ", ".join(str(base) for base in bases)
        raise ConfigError(error.problems, f"{error.title} (built on {built_on})") from None
