"""Load a trained model from a Lightning checkpoint or an export directory, safely.

Checkpoints load with ``torch.load(weights_only=True)`` and exports are safetensors, so loading
never runs code from a file. Everything needed to rebuild the model (resolved recipe, tokenizer,
the plugins that built it) travels inside the checkpoint, so a checkpoint is usable on a machine
that never saw the run directory.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from normzoo import registry
from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import NormzooError
from normzoo.models import assemble
from normzoo.models.families import Seq2SeqModel, TransformerModel
from normzoo.recipe import EvalConfig, Recipe, from_dict

EXPORT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "metadata.json")


class CheckpointError(NormzooError):
    """A checkpoint or export cannot be used (missing, damaged, or needs a missing plugin)."""


@dataclass
class Loaded:
    """A model ready for inference, with its tokenizer and the recipe that trained it."""

    model: TransformerModel
    tokenizer: Tokenizer
    recipe: Recipe
    plugins: list[dict[str, str]] = field(default_factory=list)
    source: str = ""

    def translate(self, sentences: list[str], *, beam: int | None = None,
                  lenpen: float | None = None, max_tokens: int = 4096) -> list[str]:
        """Translations of raw ``sentences`` (detokenized), in order."""
        from normzoo.data.examples import ParallelData
        from normzoo.evaluate import translate_dataset

        if not isinstance(self.model, Seq2SeqModel):
            raise NormzooError(f"{self.source} is a {self.recipe.task} model, not a translator")
        config = self.eval_config(beam, lenpen)
        ids = self.tokenizer.encode_batch(sentences)
        limit = self.model.config.max_positions
        data = ParallelData.build(ids, [[] for _ in ids], limit, drop_long=False)
        return translate_dataset(self.model, self.tokenizer, data, config, max_tokens)

    def generate(self, prompts: list[str], *, max_new_tokens: int = 50,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None) -> list[str]:
        """Continuations of ``prompts`` sampled from a causal LM (temperature 0: greedy)."""
        from normzoo.data.examples import pad
        from normzoo.data.tokenizer import BOS
        from normzoo.decoding import sample
        from normzoo.models.families import DecoderModel

        if not isinstance(self.model, DecoderModel):
            raise NormzooError(f"{self.source} is a {self.recipe.task} model, not a causal LM")
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        results = []
        for prompt in prompts:  # one at a time: prompts of different lengths need no padding
            ids = pad([[BOS, *self.tokenizer.encode(prompt)]])
            new = sample(self.model, ids, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_k=top_k, top_p=top_p,
                         generator=generator)
            results.append(self.tokenizer.decode(new[0]))
        return results

    def eval_config(self, beam: int | None = None, lenpen: float | None = None) -> EvalConfig:
        update: dict[str, Any] = {}
        if beam is not None:
            update["beam"] = beam
        if lenpen is not None:
            update["lenpen"] = lenpen
        return self.recipe.eval.model_copy(update=update)


def check_plugins(plugins: list[dict[str, str]], source: str) -> None:
    """Fail with the distribution to install when a plugin that built the model is missing."""
    for plugin in plugins:
        reg = registry.norms if plugin.get("kind") == "norm" else registry.residuals
        name = plugin["name"]
        if name not in reg:
            dist, version = plugin.get("distribution", "?"), plugin.get("version", "?")
            raise CheckpointError(
                f"{source} was built with {reg.kind} '{name}' from the distribution '{dist}' "
                f"(version {version}), which is not installed here; install it first, e.g. "
                f"pip install '{dist}=={version}'"
            )


def _read_checkpoint(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path} holds objects that are not plain data, so it is refused (loading it could "
            f"run code): {str(error).splitlines()[0]}"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated or damaged?): "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
        ) from None


def _rebuild(recipe_dict: dict[str, Any], vocab_size: int, plugins, source: str):
    check_plugins(plugins, source)
    recipe = from_dict(recipe_dict)
    return recipe, assemble(recipe.model, vocab_size=vocab_size)


def load_checkpoint(path: str | Path) -> Loaded:
    """A model from a Lightning checkpoint written by ``normzoo train``."""
    path = Path(path)
    ckpt = _read_checkpoint(path)
    meta = ckpt.get("normzoo") if isinstance(ckpt, dict) else None
    if not meta or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is not a normzoo checkpoint (no normzoo metadata)")
    tokenizer = Tokenizer.from_str(meta["tokenizer"])
    recipe, model = _rebuild(meta["recipe"], tokenizer.vocab_size, meta.get("plugins", []),
                             str(path))
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    _load_state(model, state, str(path))
    model.eval()
    return Loaded(model, tokenizer, recipe, meta.get("plugins", []), str(path))


def _load_state(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        first = str(error).splitlines()[0]
        raise CheckpointError(f"{source} does not fit the model its recipe describes: {first}"
                              ) from None


def load_export(directory: str | Path) -> Loaded:
    """A model from a directory written by ``normzoo export``."""
    from safetensors.torch import load_model

    directory = Path(directory)
    missing = [name for name in EXPORT_FILES if not (directory / name).is_file()]
    if missing:
        raise CheckpointError(f"{directory} is not a normzoo export: missing {', '.join(missing)}")
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        metadata = json.loads((directory / "metadata.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{directory}: damaged export metadata ({error})") from None
    tokenizer = Tokenizer.load(directory / "tokenizer.json")
    recipe, model = _rebuild(config["recipe"], config["vocab_size"],
                             metadata.get("plugins", []), str(directory))
    try:
        load_model(model, directory / "model.safetensors", strict=True)
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{directory}/model.safetensors cannot be loaded: {error}"
                              ) from None
    model.eval()
    return Loaded(model, tokenizer, recipe, metadata.get("plugins", []), str(directory))


def load(path: str | Path) -> Loaded:
    """Load a checkpoint file or an export directory (``normzoo.load``)."""
    path = Path(path)
    return load_export(path) if path.is_dir() else load_checkpoint(path)
