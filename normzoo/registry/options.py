"""Validate a plugin's options against its own signature.

A norm factory ``(dim, **options)`` or a residual scheme ``__init__(stack, **options)`` declares
its options as ordinary typed keyword parameters; normzoo builds a pydantic model from that
signature, so plugin authors get type checks, range checks (``Annotated[float, Field(gt=0)]``)
and "unknown option" errors with a close-match suggestion without writing validation code.
"""

from __future__ import annotations

import difflib
import inspect
import types
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin

import pydantic

from normzoo.errors import ConfigError, Problem


def close_match(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix, or ``""`` when nothing is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def key_name(key: object) -> str:
    """``key`` as one part of a key path: quoted when it would print as nothing (``''``)."""
    text = str(key)
    return text if text.strip() else repr(key)


def _fields_at(model: type[pydantic.BaseModel] | None, loc: list[str]) -> list[str]:
    """The field names of the (nested) model that holds the key at ``loc``."""
    for part in loc[:-1]:
        field = model.model_fields.get(part) if model is not None else None
        annotation = getattr(field, "annotation", None)
        model = annotation if isinstance(annotation, type) and issubclass(
            annotation, pydantic.BaseModel) else None
    return list(model.model_fields) if model is not None else []


def pydantic_problems(
    error: pydantic.ValidationError | list[Any],
    prefix: str = "",
    model: type[pydantic.BaseModel] | None = None,
) -> list[Problem]:
    """Turn a pydantic error into located problems, with suggestions for unknown keys.

    ``error`` may also be a list of its ``errors()`` items. ``model`` (the validated class)
    lets an unknown key get a close-match suggestion.
    """
    problems = []
    items = error if isinstance(error, list) else error.errors()
    for item in items:
        loc = [key_name(part) for part in item["loc"]]
        path = ".".join([prefix, *loc] if prefix else loc)
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key" + (close_match(loc[-1], _fields_at(model, loc)) if loc else "")
        elif item["type"] == "missing":
            message = "required, but missing"
        elif item["type"] in ("value_error", "assertion_error"):  # a normzoo validator's words
            message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        problems.append(Problem(path, message))
    return problems


def rule_error(*problems: Problem) -> ValueError:
    """What a cross-field rule raises inside a pydantic validator.

    pydantic wraps a validator's ``ValueError`` in its own error item; carrying a
    :class:`ConfigError` inside keeps each problem's own key path, which
    :func:`rule_problems` takes back out.
    """
    return ValueError(ConfigError(problems))


def rule_problems(item: Any, prefix: str = "") -> list[Problem] | None:
    """The problems a :func:`rule_error` carried in a pydantic error ``item``, located under
    ``prefix`` and the item's own path; None for an error of pydantic's own."""
    inner = item.get("ctx", {}).get("error")
    inner = inner.args[0] if isinstance(inner, ValueError) and inner.args else inner
    if not isinstance(inner, ConfigError):
        return None
    where = ".".join([prefix, *map(str, item["loc"])] if prefix else map(str, item["loc"]))
    return inner.prefixed(where).problems if where else inner.problems


def _takes_numbers(annotation: Any) -> bool:
    """Whether a field of this type takes numbers but not booleans."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = get_args(annotation)
        return bool not in args and any(_takes_numbers(arg) for arg in args)
    return False


def _nested_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    return None


def boolean_numbers(
    model: type[pydantic.BaseModel], data: Mapping[Any, Any], prefix: str = ""
) -> list[Problem]:
    """A problem for each boolean given where ``model`` (or a section in it) takes a number.

    pydantic's lax mode reads ``true`` as 1, and YAML reads ``yes``, ``no``, ``on`` and ``off``
    as booleans, so ``heads: on`` would silently become one head.
    """
    problems = []
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            continue
        path = f"{prefix}.{key}" if prefix else key
        nested = _nested_model(field.annotation)
        if isinstance(value, bool) and _takes_numbers(field.annotation):
            problems.append(Problem(path, f"expected a number, got the boolean {value!r} (YAML "
                                    "also reads yes/no/on/off as booleans)"))
        elif nested is not None and isinstance(value, Mapping):
            problems += boolean_numbers(nested, value, path)
    return problems


@cache
def _options_model(fn: Callable[..., Any], skip: int) -> tuple[type[pydantic.BaseModel], bool]:
    signature = inspect.signature(fn, eval_str=True)  # plugins may use postponed annotations
    params = list(signature.parameters.values())[skip:]
    fields: dict[str, Any] = {}
    open_ended = False
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            open_ended = True
            continue
        if p.kind is p.VAR_POSITIONAL:
            continue
        annotation = Any if p.annotation is p.empty else p.annotation
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (annotation, default)
    # No option is meaningful as nan or infinity (an eps, a fraction, an initial scale).
    config = pydantic.ConfigDict(
        extra="allow" if open_ended else "forbid", arbitrary_types_allowed=True,
        allow_inf_nan=False,
    )
    model = pydantic.create_model(f"{getattr(fn, '__qualname__', 'plugin')}Options",
                                  __config__=config, **fields)
    return model, open_ended


def validate_options(
    fn: Callable[..., Any], options: Mapping[str, Any], *, skip: int, where: str
) -> dict[str, Any]:
    """Check ``options`` against ``fn``'s keyword parameters after the first ``skip`` ones.

    Returns the validated (coerced) options. Raises :class:`ConfigError` naming every bad option
    under the key path ``where`` (e.g. ``model.residual``).
    """
    model, open_ended = _options_model(fn, skip)
    known = list(model.model_fields)
    problems = []
    if not open_ended:
        for key in options:
            if key not in model.model_fields:
                hint = close_match(key, known)
                accepted = ", ".join(known) if known else "no options"
                problems.append(
                    Problem(f"{where}.{key}", f"unknown option{hint}; accepted: {accepted}")
                )
    booleans = boolean_numbers(model, options, where)
    problems += booleans
    # Check the known options' values too, so every problem is reported in one go.
    flagged = {p.path.rpartition(".")[2] for p in booleans}
    known_options = {k: v for k, v in options.items()
                     if (open_ended or k in model.model_fields) and k not in flagged}
    validated = None
    try:
        validated = model(**known_options)
    except pydantic.ValidationError as error:
        problems += pydantic_problems(error, where)
    if problems:
        raise ConfigError(problems)
    assert validated is not None
    return {**validated.model_dump(), **(validated.model_extra or {})}
