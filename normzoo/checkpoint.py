"""Load a trained model from a Lightning checkpoint or an export directory, safely.

Checkpoints load with ``torch.load(weights_only=True)`` (:mod:`normzoo.checkpoint_files`, which
checks each part of the file) and exports are safetensors, so loading never runs code from a
file. Everything needed to rebuild the model (resolved recipe, tokenizer,
the plugins that built it) travels inside the checkpoint, so a checkpoint is usable on a machine
that never saw the run directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from normzoo import registry
from normzoo.checkpoint_files import (
    CheckpointError,
    check_finite,
    check_plugins,
    checkpoint_parts,
    checkpoint_tokenizer,
    damaged,
    load_state,
    read_checkpoint,
)
from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import ConfigError, NormzooError
from normzoo.models import assemble
from normzoo.models.families import Seq2SeqModel, TransformerModel
from normzoo.recipe import EvalConfig, Recipe, from_dict

EXPORT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "metadata.json")


@dataclass
class Loaded:
    """A model ready for inference, with its tokenizer and the recipe that trained it."""

    model: TransformerModel
    tokenizer: Tokenizer
    recipe: Recipe
    plugins: list[dict[str, str]] = field(default_factory=list)
    source: str = ""

    def translate(self, sentences: list[str], *, beam: int | None = None,
                  lenpen: float | None = None, max_tokens: int = 4096,
                  bf16: bool = False) -> list[str]:
        """Translations of raw ``sentences`` (detokenized), in order; with ``bf16``, under bf16
        autocast (the beam's log-probabilities are still summed in float32)."""
        from normzoo.data.examples import ParallelData
        from normzoo.evaluate import translate_dataset

        if not isinstance(self.model, Seq2SeqModel):
            raise NormzooError(f"{self.source} is a {self.recipe.task} model, not a translator")
        config = self.eval_config(beam, lenpen)
        ids = self.tokenizer.encode_batch(sentences)
        limit = self.model.config.max_positions
        data = ParallelData.build(ids, [[] for _ in ids], limit, drop_long=False)
        device = next(self.model.parameters()).device.type
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            return translate_dataset(self.model, self.tokenizer, data, config, max_tokens)

    def generate(self, prompts: list[str], *, max_new_tokens: int = 50,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None) -> list[str]:
        """Continuations of ``prompts`` sampled from a causal LM (temperature 0: greedy)."""
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        settings = {"max_new_tokens": max_new_tokens, "temperature": temperature,
                    "top_k": top_k, "top_p": top_p, "generator": generator}
        # One at a time, on one generator: prompts of different lengths need no padding.
        return [self.tokenizer.decode(list(self._sampled_ids(prompt, **settings)))
                for prompt in prompts]

    def stream(self, prompt: str, *, max_new_tokens: int = 50, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None) -> Iterator[str]:
        """The continuation of ``prompt`` as text, piece by piece as each token is sampled
        (``normzoo generate``). The pieces join to what :meth:`generate` returns for the same
        generator state: the tokenizer's decoder maps tokens to text one by one, so the text of
        a token prefix is a prefix of the whole text."""
        ids: list[int] = []
        shown = ""
        for token in self._sampled_ids(prompt, max_new_tokens=max_new_tokens,
                                       temperature=temperature, top_k=top_k, top_p=top_p,
                                       generator=generator):
            ids.append(token)
            text = self.tokenizer.decode(ids)
            if len(text) > len(shown) and text.startswith(shown):
                yield text[len(shown):]
                shown = text

    def _sampled_ids(self, prompt: str, **settings: Any) -> Iterator[int]:
        """Token ids sampled after ``prompt``, up to (not including) EOS."""
        from normzoo.data.examples import pad
        from normzoo.data.tokenizer import BOS, EOS
        from normzoo.decoding import sample_steps
        from normzoo.models.families import DecoderModel

        if not isinstance(self.model, DecoderModel):
            raise NormzooError(f"{self.source} is a {self.recipe.task} model, not a causal LM")
        ids = pad([[BOS, *self.tokenizer.encode(prompt)]])
        for step in sample_steps(self.model, ids, **settings):
            token = int(step[0])
            if token == EOS:
                return
            yield token

    def eval_config(self, beam: int | None = None, lenpen: float | None = None) -> EvalConfig:
        update: dict[str, Any] = {}
        if beam is not None:
            update["beam"] = beam
        if lenpen is not None:
            update["lenpen"] = lenpen
        return self.recipe.eval.model_copy(update=update)


def _recipe(data: Any, source: str, differences: list[str] | None = None) -> Recipe:
    """The saved recipe, its problems (if any) reported as the checkpoint's, not the user's,
    and blamed on the plugin ``differences`` (versions) where there are any."""
    try:
        return from_dict(data)
    except ConfigError as error:
        title = f"{source} holds an invalid recipe"
        if differences:
            title = (f"{source} holds a recipe that the installed plugin versions reject: "
                     + "; ".join(differences))
        raise ConfigError(error.problems, title) from None


def _rebuild(recipe_dict: Any, vocab_size: int, plugins: Any, source: str):
    differences = check_plugins(plugins, source)
    with registry.pinned(plugins):
        recipe = _recipe(recipe_dict, source, differences)
        return recipe, assemble(recipe.model, vocab_size=vocab_size)


def load_checkpoint(path: str | Path) -> Loaded:
    """A model from a Lightning checkpoint written by ``normzoo train``."""
    path = Path(path)
    meta, state = checkpoint_parts(read_checkpoint(path), str(path))
    check_finite(state, str(path))
    tokenizer = checkpoint_tokenizer(meta.get("tokenizer"), str(path))
    plugins = meta.get("plugins", [])
    recipe, model = _rebuild(meta["recipe"], tokenizer.vocab_size, plugins, str(path))
    load_state(model, state, str(path))
    model.eval()
    return Loaded(model, tokenizer, recipe, plugins, str(path))


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
    if not (isinstance(config, dict) and isinstance(config.get("recipe"), dict)):
        raise damaged(str(directory), "config.json has no recipe")
    if not isinstance(metadata, dict):
        raise damaged(str(directory), "metadata.json is not a mapping")
    tokenizer = Tokenizer.load(directory / "tokenizer.json")
    if config.get("vocab_size") != tokenizer.vocab_size:
        raise damaged(str(directory), f"config.json says vocab_size {config.get('vocab_size')!r}"
                       f" but tokenizer.json has {tokenizer.vocab_size} entries")
    plugins = metadata.get("plugins", [])
    recipe, model = _rebuild(config["recipe"], tokenizer.vocab_size, plugins, str(directory))
    try:
        load_model(model, directory / "model.safetensors", strict=True)
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{directory}/model.safetensors cannot be loaded: {error}"
                              ) from None
    check_finite(model.state_dict(), str(directory / "model.safetensors"))
    model.eval()
    return Loaded(model, tokenizer, recipe, plugins, str(directory))


def load(path: str | Path) -> Loaded:
    """Load a checkpoint file or an export directory (``normzoo.load``)."""
    path = Path(path)
    return load_export(path) if path.is_dir() else load_checkpoint(path)
