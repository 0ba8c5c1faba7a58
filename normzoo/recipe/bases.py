"""Recipes that build on others: a top-level ``base: other.yaml`` (or a list of paths).

Why: an ablation or a fine-tuning recipe differs from another in a few keys; written whole, the
copies drift apart. With ``base`` the recipe states only what differs, and the rest comes from
the base, which may itself have a base.

How a recipe file is read (:func:`read_recipe`): each base path is relative to the folder of
the file that names it (``~`` expanded), or, where no such file is, a recipe shipped with
normzoo (``base: quickstart``: :mod:`~normzoo.recipe.shipped`); bases are read first, in the
order listed, each merged under the next, and the recipe's own keys are merged on top
(:func:`merge`). The command-line overrides then apply to the result, and the recipe is
validated once. The ``base`` key itself is gone after reading, so a run's stored
``recipe.yaml`` and its checkpoints hold the whole recipe and reproduce the run without the
base files.

The merging is this module's ~20 lines rather than a library's (``deepmerge``, OmegaConf):
the only rule beyond "mappings merge key by key, lists and scalars replace" is the one the
overrides already follow for a scheme or norm given by name (see :func:`merge`), which no
library knows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from normzoo.errors import ConfigError, Problem
from normzoo.recipe import shipped
from normzoo.recipe.overrides import NAMED_SECTIONS
from normzoo.recipe.reading import read_yaml

BASE_KEY = "base"
_TITLE = "cannot read recipe"


def merge(base: dict[str, Any], top: dict[str, Any],
          path: tuple[str, ...] = ()) -> dict[str, Any]:
    """``top`` merged over ``base`` (neither is changed): mappings merge key by key, at any
    depth; a list or a scalar in ``top`` replaces what ``base`` has.

    A scheme or norm (``model.residual``, ``model.norm``) follows the overrides' rule: options
    without a name add to the base's scheme (``residual: deepnorm`` under ``{alpha: 2}`` is
    deepnorm with that alpha), while another name replaces the base's scheme with its options,
    which belonged to the old one."""
    merged = dict(base)
    for key, value in top.items():
        old, where = merged.get(key), (*path, key)
        if list(where) in NAMED_SECTIONS and isinstance(value, dict):
            if isinstance(old, str):
                old = {"name": old}
            if isinstance(old, dict) and "name" in value and value["name"] != old.get("name"):
                old = {}
        merged[key] = (merge(old, value, where) if isinstance(old, dict)
                       and isinstance(value, dict) else value)
    return merged


def _base_names(data: dict[str, Any], path: Path) -> list[str]:
    names = data[BASE_KEY]
    names = [names] if isinstance(names, str) else names
    if not (isinstance(names, list) and names
            and all(isinstance(name, str) and name.strip() for name in names)):
        raise ConfigError([Problem(BASE_KEY, f"{path}: base must be a recipe file's path, or a "
                                   f"list of them, not {data[BASE_KEY]!r}")], _TITLE)
    return names


def _identity(path: Path) -> Path:
    """The file ``path`` names, through links (a link loop names itself: reading it then
    fails as a missing file, rather than here)."""
    return Path(os.path.realpath(path))


def _read(path: Path, chain: tuple[Path, ...], shown: tuple[str, ...],
          files: list[Path]) -> dict[str, Any]:
    """The recipe at ``path`` with its bases merged; ``chain`` are the files (resolved) that
    led here, ``shown`` the same as the user would recognise them, for a cycle's message."""
    data = read_yaml(path)
    if BASE_KEY not in data:
        return data
    merged: dict[str, Any] = {}
    for name in _base_names(data, path):
        file = shipped.beside(path.parent, name)
        identity = _identity(file)
        seen = [i for i, link in enumerate(chain) if link == identity]
        if seen:
            cycle = " -> ".join([*shown[seen[0]:], str(file)])
            raise ConfigError([Problem(BASE_KEY, f"recipes that build on each other in a "
                                       f"cycle: {cycle}")], _TITLE)
        if not file.is_file():
            raise ConfigError([Problem(BASE_KEY, f"{path} builds on {name}, but there is no "
                                       f"recipe file {file}, nor a recipe shipped with normzoo "
                                       f"of that name{shipped.close_names(name)}")], _TITLE)
        files.append(file)
        merged = merge(merged, _read(file, (*chain, identity), (*shown, str(file)), files))
    return merge(merged, {key: value for key, value in data.items() if key != BASE_KEY})


def read_recipe_with_bases(path: str | Path) -> tuple[dict[str, Any], list[Path]]:
    """:func:`read_recipe`, and the base files it read, in the order they were read."""
    path, files = shipped.resolve(path).path, []
    data = _read(path, (_identity(path),), (str(path),), files)
    return data, files


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The recipe file at ``path`` (or the shipped recipe it names, where no such file is:
    :func:`~normzoo.recipe.shipped.resolve`) as plain data, its bases merged in (module
    docstring); :class:`ConfigError` (exit 2) for a missing or unreadable file, a base that is
    not there, or bases that build on each other in a cycle."""
    return read_recipe_with_bases(path)[0]
