"""Recipes: one YAML file describes a whole run; ``key=value`` overrides change it from the CLI.

A recipe is read (:mod:`~normzoo.recipe.reading`) with the recipes it builds on
(:mod:`~normzoo.recipe.bases`), overridden
(:mod:`~normzoo.recipe.overrides`) and validated once (:mod:`~normzoo.recipe.loading`) into a
typed :class:`Recipe` (:mod:`~normzoo.recipe.schema`) that every layer receives as it is.
"""

from normzoo.recipe.bases import merge, read_recipe
from normzoo.recipe.data import DataConfig, TokenizerConfig
from normzoo.recipe.loading import MODEL_LIMITS, from_dict, load
from normzoo.recipe.overrides import apply_overrides, parse_override
from normzoo.recipe.reading import read_yaml
from normzoo.recipe.rules import FAMILY_OF_TASK
from normzoo.recipe.schema import (
    DiagnosticsConfig,
    EvalConfig,
    InitConfig,
    OptimConfig,
    Recipe,
    RunConfig,
    TrainerConfig,
)

__all__ = [
    "FAMILY_OF_TASK",
    "MODEL_LIMITS",
    "DataConfig",
    "DiagnosticsConfig",
    "EvalConfig",
    "InitConfig",
    "OptimConfig",
    "Recipe",
    "RunConfig",
    "TokenizerConfig",
    "TrainerConfig",
    "apply_overrides",
    "from_dict",
    "load",
    "merge",
    "parse_override",
    "read_recipe",
    "read_yaml",
]
