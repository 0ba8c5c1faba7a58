"""``key=value`` overrides from the command line, applied to a recipe's plain data.

Overrides do not depend on their order: a section is set before the keys inside it
(``model.residual=mixln model.residual.post_fraction=0.5`` in either order gives mixln with
that option). A key given twice takes its last value, as a repeated shell flag does.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, get_args

from pydantic import BaseModel

from normzoo.errors import ConfigError, Problem
from normzoo.recipe.reading import Unreadable, check_shape, parse_yaml
from normzoo.recipe.schema import Recipe

# Sections that a bare name may stand for (``residual: deepnorm``); a key inside one turns the
# name into a mapping (``{name: deepnorm, alpha: ...}``).
NAMED_SECTIONS = (["model", "norm"], ["model", "residual"])


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr=3e-4"`` -> ``("optim.lr", 0.0003)``; the value is read as a YAML scalar."""
    if "=" not in text:
        # ``normzoo recipe validate recipes/*.yaml``: the shell hands over the other files too
        extra = (" (a second recipe file? a command takes one recipe: run it once for each)"
                 if text.strip().lower().endswith((".yaml", ".yml")) else "")
        raise ConfigError([Problem(text, f"an override must look like key=value{extra}")],
                          "invalid override")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError([Problem(text, "empty key")], "invalid override")
    try:
        value = parse_yaml(raw) if raw.strip() else None
    except Unreadable as error:
        raise ConfigError([Problem(key, f"value is not valid YAML ({error})")],
                          "invalid override") from None
    if value is None and _is_section(_annotation(key)):
        # An empty section in a file means its defaults; on the command line ``model=`` or
        # ``model=null`` would silently put back every default of the recipe's model.
        raise ConfigError([Problem(key, f"is a section: an empty value would reset each of "
                                   f"its keys to the default; set the keys inside it "
                                   f"({key}.KEY=VALUE)")], "invalid override")
    if not is_text_field(key) or value is None:
        # YAML reads "1e-4" as a string (YAML 1.1); users mean a number.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value) if any(c in value.lower() for c in ".e") else value
    elif not isinstance(value, str):
        # YAML would read data.tgt_lang=no (Norwegian) as false, and data.valid_split=2013 as
        # a number: a text field takes the text as written.
        value = raw.strip()
    return key, value


def _annotation(key: str) -> Any:
    """The type the recipe schema gives the field at ``key`` (dotted), or None if the schema
    has no such field."""
    model: type[BaseModel] = Recipe
    parts = key.split(".")
    for part in parts[:-1]:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not _is_section(annotation):
            return None
        model = annotation
    field = model.model_fields.get(parts[-1])
    return field.annotation if field is not None else None


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def is_text_field(key: str) -> bool:
    """Whether the recipe field at ``key`` holds text (``data.tgt_lang``, ``run.dir``...)."""
    annotation = _annotation(key)
    return annotation is str or set(get_args(annotation)) == {str, type(None)}


def _set(data: dict[str, Any], key: str, value: Any) -> Problem | None:
    """Set ``key`` (dotted) in ``data``, creating sections; the problem if a value is in the way.

    A new scheme or norm name replaces the mapping of the old one, with its options: they
    belonged to the old one.
    """
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif isinstance(child, str) and parts[: i + 1] in NAMED_SECTIONS:
            child = node[part] = {"name": child}
        elif not isinstance(child, dict):
            return Problem(".".join(parts[: i + 1]), "is a value, not a section")
        node = child
    node[parts[-1]] = value
    return None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``key=value`` set, sections before the keys inside them."""
    check_shape(data, "invalid recipe")
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    parsed: list[tuple[str, Any]] = []
    for text in overrides:
        try:
            parsed.append(parse_override(text))
        except ConfigError as error:
            problems += error.problems
    # Stable: keys of one depth keep their order, so a repeated key's last value wins.
    for key, value in sorted(parsed, key=lambda item: item[0].count(".")):
        problem = _set(data, key, value)
        if problem is not None:
            problems.append(problem)
    if problems:
        raise ConfigError(problems, "invalid override")
    return data
