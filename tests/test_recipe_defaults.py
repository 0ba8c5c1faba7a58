"""Each recipe default is written once, in the schema: the rules that tie one section to another
read a key the recipe leaves out as the schema's default, on a valid recipe and on what is left
of an invalid one alike (the loader reports every problem at once). A default restated beside
the rules would drift from the schema unseen; here each is changed in a copy of the schema, and
the rules must follow it.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from normzoo.errors import ConfigError, Problem
from normzoo.models.component import Component
from normzoo.recipe import from_dict, loading
from normzoo.recipe.schema import Recipe

# (section, or None for the recipe's own field; field; a default other than the schema's; a
# recipe that leaves the field out; the problem the rules find under that default, by its key
# path and a part of its message that the schema's own default does not give).
DEFAULTS: dict[str, tuple[str | None, str, Any, dict[str, Any], str, str]] = {
    "task": (None, "task", "causal_lm", {}, "model.family",
             "task 'causal_lm' needs family 'decoder'"),
    "model.residual": ("model", "residual", Component(name="admin", init="profiled"),
                       {"trainer": {"strategy": "fsdp"}}, "model.residual",
                       "not supported with trainer.strategy=fsdp"),
    "trainer.strategy": ("trainer", "strategy", "fsdp",
                         {"model": {"residual": {"name": "admin", "init": "profiled"}}},
                         "model.residual", "not supported with trainer.strategy=fsdp"),
    "data.streaming": ("data", "streaming", True, {"data": {}}, "data.streaming",
                       "translation corpora are prepared once"),
    "eval.average_last": ("eval", "average_last", 9, {"eval": {}}, "eval.average_last",
                          "averages the newest 9"),
    "trainer.keep_checkpoints": ("trainer", "keep_checkpoints", 2, {"eval": {"average_last": 3}},
                                 "eval.average_last", "trainer.keep_checkpoints=2 keeps fewer"),
    "optim.schedule": ("optim", "schedule", "cosine", {"optim": {}}, "trainer.max_steps",
                       "optim.schedule=cosine decays"),
    "optim.warmup_steps": ("optim", "warmup_steps", 90,
                           {"optim": {"schedule": "wsd"}, "trainer": {"max_steps": 100}},
                           "optim.decay_fraction", "after the 90 warm-up steps"),
    "optim.decay_fraction": ("optim", "decay_fraction", 0.5,
                             {"optim": {"schedule": "wsd", "warmup_steps": 60},
                              "trainer": {"max_steps": 100}},
                             "optim.decay_fraction", "decay_fraction=0.5 of"),
    "trainer.max_steps": ("trainer", "max_steps", 12345, {"optim": {"schedule": "wsd"}},
                          "trainer.max_steps", "its default, 12345, is only a cap"),
}

# What else is wrong with the recipe, and the key path of its problem: nothing; or a section's
# own rule, which keeps pydantic from checking the rules between sections, so that the loader
# checks them on what is left (the model section typed whole, the trainer field by field).
BROKEN: dict[str, tuple[dict[str, Any], str | None]] = {
    "valid otherwise": ({}, None),
    "a model rule": ({"model": {"attention_backend": "flash", "attention_impl": "explicit"}},
                     "model.attention_backend"),
    "a trainer rule": ({"trainer": {"loggers": ["tensorboard"]}}, "trainer.loggers"),
}


def _with_default(section: str | None, name: str, value: Any) -> type[Recipe]:
    """A copy of the schema with one default changed (subclasses: the schema is left alone)."""
    if section is None:
        changed: dict[str, Any] = {name: (Recipe.model_fields[name].annotation, value)}
    else:
        cls = Recipe.model_fields[section].annotation
        assert isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)
        field = cls.model_fields[name]
        copied = pydantic.create_model(cls.__name__, __base__=cls,
                                       **{name: (field.annotation, value)})
        changed = {section: (copied, copied.model_construct())}
    return pydantic.create_model("Recipe", __base__=Recipe, **changed)


def _problems(recipe: dict[str, Any]) -> list[Problem]:
    try:
        from_dict(recipe, check_registry=False)
    except ConfigError as error:
        return error.problems
    return []


def _merged(*recipes: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for recipe in recipes:
        for key, value in recipe.items():
            both = isinstance(value, dict) and isinstance(merged.get(key), dict)
            merged[key] = {**merged[key], **value} if both else value
    return merged


@pytest.mark.parametrize("broken", list(BROKEN))
@pytest.mark.parametrize("default", list(DEFAULTS))
def test_the_rules_read_each_default_from_the_schema(default: str, broken: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    section, name, value, recipe, path, message = DEFAULTS[default]
    extra, extra_path = BROKEN[broken]
    recipe = _merged(recipe, extra)

    def found() -> bool:
        return any(p.path == path and message in p.message for p in _problems(recipe))

    assert not found(), "the schema's own default already gives the problem: no test"
    monkeypatch.setattr(loading, "Recipe", _with_default(section, name, value))
    assert found(), f"the rules did not follow {default}'s default in the schema"
    if extra_path is not None:  # the other problem is reported beside it
        assert extra_path in [p.path for p in _problems(recipe)]
