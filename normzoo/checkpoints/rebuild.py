"""Step three of loading a model: the saved recipe validated (with the recorded plugins
pinned), the model assembled from it, and the saved weights loaded into it strictly.
"""

from __future__ import annotations

from typing import Any

import torch

from normzoo import registry
from normzoo.checkpoints.reading import CheckpointError, SavedModel, error_line, examples
from normzoo.contract import task_of
from normzoo.errors import ConfigError
from normzoo.models.families import TransformerModel
from normzoo.recipe import Recipe, from_dict


def rebuild(saved: SavedModel, differences: list[str]) -> tuple[Recipe, TransformerModel]:
    """The recipe and the model ``saved`` describes, holding its weights; the recipe's problems,
    if any, are blamed on the plugin version ``differences`` where there are any."""
    with registry.pinned(saved.plugins):
        recipe = _recipe(saved.recipe, saved.source, differences)
        model = task_of(recipe).build_model(recipe, saved.tokenizer.vocab_size)
    weights = with_tied_names(model, saved.weights) if saved.tied_once else saved.weights
    load_state(model, weights, saved.source)
    return recipe, model


def _recipe(data: Any, source: str, differences: list[str]) -> Recipe:
    """The saved recipe, its problems (if any) reported as the checkpoint's, not the user's."""
    try:
        return from_dict(data)
    except ConfigError as error:
        title = f"{source} holds an invalid recipe"
        if differences:
            title = (f"{source} holds a recipe that the installed plugin versions reject: "
                     + "; ".join(differences))
        raise ConfigError(error.problems, title) from None


def with_tied_names(model: torch.nn.Module,
                    state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every name of a tensor ``model`` shares (tied embeddings) filled from the
    one stored: an export stores a shared tensor once, as safetensors' ``save_model`` does."""
    names: dict[int, list[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False),
                         *model.named_buffers(remove_duplicate=False)]:
        names.setdefault(id(tensor), []).append(name)
    filled = dict(state)
    for group in names.values():
        stored = [name for name in group if name in state]
        for name in group:
            if name not in filled and stored:
                filled[name] = state[stored[0]]
    return filled


def _misfit(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> str:
    """How ``state`` differs from ``model``'s own weights: names missing, extra, mis-shaped."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    shapes = [f"{k} is {list(state[k].shape)} in the file, {list(v.shape)} in the model"
              for k, v in expected.items() if k in state and state[k].shape != v.shape]
    parts = [f"{len(missing)} weight(s) missing ({examples(missing)})" if missing else "",
             f"{len(extra)} unexpected ({examples(extra)})" if extra else "",
             f"{len(shapes)} of another shape ({examples(shapes)})" if shapes else ""]
    return "; ".join(part for part in parts if part)


def load_state(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load ``state`` into ``model`` strictly; a misfit names the missing/unexpected weights."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        detail = _misfit(model, state) or error_line(error)
        raise CheckpointError(
            f"{source} does not fit the model its recipe describes: {detail}. Its weights and "
            "its saved recipe disagree (was one of them edited?); use the file as normzoo "
            "train wrote it"
        ) from None
