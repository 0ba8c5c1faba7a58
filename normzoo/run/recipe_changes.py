"""What a recipe changes against the recipe a checkpoint was trained with: every differing
setting by its key, old and new value, as ``resume: KEY OLD -> NEW`` prints it.

Which of them a resume may change, and why, is :mod:`normzoo.run.resume`'s (its
``RESUMABLE``); this module only finds them, alike however each recipe was written: the
checkpoint's recipe gets the defaults of keys added to normzoo since it was saved and its paths
resolved as this run's are, and settings that build the same model are written one way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from normzoo.contract import task_of
from normzoo.models.config import ModelConfig
from normzoo.recipe import Recipe
from normzoo.run.inputs import local_path


@dataclass(frozen=True)
class Change:
    """A setting that differs between the checkpoint's recipe and the one resuming it."""

    key: str
    old: Any
    new: Any
    note: str = ""

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.key} {shown(self.old)} -> {shown(self.new)}{note}"


def shown(value: Any) -> str:
    """``value`` as a recipe would write it: ``null``, ``true``, ``[csv, tensorboard]``."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value) if value != "" else "''"


def recipe_changes(theirs: dict[str, Any], recipe: Recipe
                   ) -> tuple[dict[str, Any], list[Change]]:
    """The checkpoint's recipe ``theirs`` as this run reads it (defaults filled in, paths
    resolved), and every setting ``recipe`` changes against it, in the recipe's order."""
    defaults = Recipe().to_dict()
    defaults["model"] = ModelConfig().model_dump(mode="json")
    theirs = _their_paths(_filled(theirs, defaults))
    ours = _with_resolved_options(recipe.to_dict(), theirs)
    old, new = _leaves(_same_model(theirs)), _leaves(_same_model(ours))
    keys = sorted(set(old) | set(new), key=_order(ours))
    return theirs, [Change(key, old.get(key), new.get(key)) for key in keys
                    if old.get(key) != new.get(key)]


def resolved_options(task: str, ours: dict[str, Any], theirs: Any) -> dict[str, Any]:
    """``ours`` (a recipe's task options) with those it leaves to the data (a default of None,
    such as a classifier's label set) taken from ``theirs``, the checkpoint's run's, which
    resolved them: a resumed run keeps them (the head's classes stay its own, whatever the data
    says now), and they are no change."""
    if not isinstance(theirs, dict):
        return ours
    defaults = task_of(task).options
    options = dict(ours)
    for key, value in theirs.items():
        if key not in options and key in defaults and defaults[key] is None:
            options[key] = value
    return options


def _with_resolved_options(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """``ours`` with the checkpoint's resolved task options (:func:`resolved_options`)."""
    if ours.get("task") != theirs.get("task"):
        return ours
    return {**ours, "task_options": resolved_options(ours["task"], ours.get("task_options")
                                                     or {}, theirs.get("task_options"))}


def _filled(theirs: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``theirs`` with the keys it lacks taken from ``defaults``, section by section: a key
    added to normzoo since the checkpoint was written is not a difference when the
    checkpoint's run had its default."""
    filled = dict(theirs)
    for key, default in defaults.items():
        if key not in filled:
            filled[key] = default
        elif isinstance(default, dict) and isinstance(filled[key], dict):
            filled[key] = _filled(filled[key], default)
    return filled


def _leaves(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"data.tokenizer.vocab_size": 8000, ...}``: every value of a recipe by its key."""
    found: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            found.update(_leaves(value, f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return found


def _their_paths(theirs: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's recipe with its paths resolved as this run's are (a checkpoint written
    before normzoo resolved them holds them as typed, relative to where it ran)."""
    for section, key in (("data", "dir"), ("init", "from"), ("run", "dir")):
        part = theirs.get(section)
        if isinstance(part, dict) and isinstance(part.get(key), str) and part[key]:
            theirs = {**theirs, section: {**part, key: local_path(part[key])}}
    return theirs


def _same_model(recipe: dict[str, Any]) -> dict[str, Any]:
    """``recipe`` with model settings that build the same model written one way: ``kv_heads``
    equal to ``heads`` is unset (multi-head attention either way), and ``rope_base`` is left out
    where positions are not rotary (nothing reads it)."""
    model = dict(recipe.get("model") or {})
    if model.get("kv_heads") is not None and model.get("kv_heads") == model.get("heads"):
        model["kv_heads"] = None
    if model.get("positions") != "rope":
        model.pop("rope_base", None)
    return {**recipe, "model": model}


def _order(recipe: dict[str, Any]) -> Any:
    """Keys in the recipe's own order (task, model, ..., trainer), not alphabetical."""
    sections = {key: i for i, key in enumerate(recipe)}
    return lambda key: (sections.get(key.split(".")[0], len(sections)), key)
