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

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (``load(..., device=...)``)."""
        return next(self.model.parameters()).device

    def generator(self, seed: int) -> torch.Generator:
        """A random generator on the model's device, seeded (for :meth:`stream`)."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def translate(self, sentences: list[str], *, beam: int | None = None,
                  lenpen: float | None = None, max_tokens: int = 4096,
                  bf16: bool = False, first_line: int = 1) -> list[str]:
        """Translations of raw ``sentences`` (detokenized), in order, in batches of about
        ``max_tokens`` source tokens; with ``bf16``, under bf16 autocast (the beam's
        log-probabilities are still summed in float32).

        An empty (or blank) sentence gets an empty translation. One longer than the model's
        positions is cut to fit, with an :class:`~normzoo.evaluate.InputCut` warning that
        names its line (``first_line`` for the first sentence)."""
        from normzoo.data.examples import ParallelData
        from normzoo.evaluate import translate_dataset

        if not isinstance(self.model, Seq2SeqModel):
            raise NormzooError(f"{self.source} is a {self.recipe.task} model, not a translator")
        config = self.eval_config(beam, lenpen)
        # A blank line is an empty one: no tokens, so no made-up translation.
        ids = self.tokenizer.encode_batch([s if s.strip() else "" for s in sentences])
        limit = self.model.config.max_positions
        data = ParallelData.build(ids, [[] for _ in ids], limit, drop_long=False)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
            return translate_dataset(self.model, self.tokenizer, data, config, max_tokens,
                                     warn_cut_lines=True, first_line=first_line)

    def generate(self, prompts: list[str], *, max_new_tokens: int = 50,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, batch_size: int = 32,
                 first_line: int = 1) -> list[str]:
        """Continuations of ``prompts`` sampled from a causal LM (temperature 0: greedy),
        ``batch_size`` prompts at a time.

        With ``seed``, prompt ``i`` (counted from 0) is sampled from its own generator, seeded
        ``seed + i``: its continuation does not depend on the other prompts or the batch size,
        and equals :meth:`stream` on ``generator(seed + i)`` (up to the rounding of batched
        arithmetic). An empty (or blank) prompt gets an empty continuation; a prompt longer
        than the model's positions is cut to its last tokens, with an
        :class:`~normzoo.evaluate.InputCut` warning that names its line (``first_line`` for
        the first prompt)."""
        from normzoo.decoding import ragged_sample_steps

        self._causal_lm()
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        settings = {"max_new_tokens": max_new_tokens, "temperature": temperature,
                    "top_k": top_k, "top_p": top_p}
        encoded = {}
        for i, prompt in enumerate(prompts):  # a loop: the warning's stack level is counted
            encoded[i] = self._prompt_ids(prompt, first_line + i)
        todo = [i for i, ids in encoded.items() if ids is not None]
        made: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
        for start in range(0, len(todo), batch_size):
            rows = todo[start : start + batch_size]
            generators = (None if seed is None else
                          [self.generator(seed + i) for i in rows])
            for step in ragged_sample_steps(self.model, [encoded[i] for i in rows],
                                            generators=generators, **settings):
                for i, token in zip(rows, step, strict=True):
                    if token is not None:
                        made[i].append(token)
        return [self.tokenizer.decode(_until_eos(made[i])) for i in range(len(prompts))]

    def stream(self, prompt: str, *, max_new_tokens: int = 50, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None, line: int = 1) -> Iterator[str]:
        """The continuation of ``prompt`` as text, piece by piece as each token is sampled
        (``normzoo generate`` at a terminal). The pieces join to what :meth:`generate` returns
        for the same generator state: the tokenizer's decoder maps tokens to text one by one,
        so the text of a token prefix is a prefix of the whole text. ``generator`` must be on
        the model's device (:meth:`generator`); ``line`` names the prompt in a warning."""
        from normzoo.data.tokenizer import EOS
        from normzoo.decoding import ragged_sample_steps

        self._causal_lm()
        ids = self._prompt_ids(prompt, line)
        if ids is None:
            return
        made: list[int] = []
        shown = ""
        for (token,) in ragged_sample_steps(
                self.model, [ids], max_new_tokens=max_new_tokens, temperature=temperature,
                top_k=top_k, top_p=top_p, generators=[generator]):
            if token is None:
                continue
            if token == EOS:
                return
            made.append(token)
            text = self.tokenizer.decode(made)
            if len(text) > len(shown) and text.startswith(shown):
                yield text[len(shown):]
                shown = text

    def _causal_lm(self) -> None:
        from normzoo.models.families import DecoderModel

        if not isinstance(self.model, DecoderModel):
            raise NormzooError(f"{self.source} is a {self.recipe.task} model, not a causal LM")

    def _prompt_ids(self, prompt: str, line: int) -> list[int] | None:
        """BOS and ``prompt``'s tokens, cut to fit the model (with a warning naming ``line``);
        None for an empty prompt, which gets an empty continuation."""
        from normzoo.data.tokenizer import BOS
        from normzoo.decoding import fit_prompt
        from normzoo.evaluate import warn_cut

        tokens = self.tokenizer.encode(prompt) if prompt.strip() else []
        if not tokens:  # an empty or blank prompt: nothing to continue
            return None
        positions = self.model.config.max_positions
        ids, cut = fit_prompt([BOS, *tokens], positions)
        if cut:
            warn_cut(line, len(tokens), len(ids) - 1, positions, part="last")
        return ids

    def eval_config(self, beam: int | None = None, lenpen: float | None = None) -> EvalConfig:
        update: dict[str, Any] = {}
        if beam is not None:
            update["beam"] = beam
        if lenpen is not None:
            update["lenpen"] = lenpen
        return self.recipe.eval.model_copy(update=update)


def _until_eos(ids: list[int]) -> list[int]:
    from normzoo.data.tokenizer import EOS

    return ids[: ids.index(EOS)] if EOS in ids else ids


def inference_device(device: str | torch.device = "cpu") -> torch.device:
    """``cpu``, ``cuda``, ``cuda:1``, ``mps`` or ``auto`` (the first CUDA GPU, else Apple's
    GPU, else the CPU) as a device this machine has; anything else is a user error."""
    spec = str(device).strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        chosen = torch.device(spec)
    except (RuntimeError, ValueError):
        chosen = None
    if chosen is None or chosen.type not in ("cpu", "cuda", "mps"):
        raise NormzooError(f"unknown device '{device}': use cpu, cuda, cuda:N, mps or auto")
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise NormzooError(f"device '{device}': this machine has no CUDA GPU "
                               "(use cpu or auto)")
        if chosen.index is not None and chosen.index >= count:
            raise NormzooError(f"device '{device}': this machine has {count} CUDA GPU(s), "
                               f"cuda:0 to cuda:{count - 1}")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise NormzooError(f"device '{device}': Apple's GPU (MPS) is not available here")
    return chosen


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


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """A model from a Lightning checkpoint written by ``normzoo train``, on ``device``
    (:func:`inference_device`)."""
    path = Path(path)
    where = inference_device(device)  # before reading: a device this machine lacks is refused
    meta, state = checkpoint_parts(read_checkpoint(path), str(path))
    check_finite(state, str(path))
    tokenizer = checkpoint_tokenizer(meta.get("tokenizer"), str(path))
    plugins = meta.get("plugins", [])
    recipe, model = _rebuild(meta["recipe"], tokenizer.vocab_size, plugins, str(path))
    load_state(model, state, str(path))
    model.eval().to(where)
    return Loaded(model, tokenizer, recipe, plugins, str(path))


def load_export(directory: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """A model from a directory written by ``normzoo export``, on ``device``
    (:func:`inference_device`)."""
    from safetensors.torch import load_model

    directory = Path(directory)
    where = inference_device(device)
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
    model.eval().to(where)
    return Loaded(model, tokenizer, recipe, plugins, str(directory))


def load(path: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """Load a checkpoint file or an export directory (``normzoo.load``) onto ``device``:
    ``cpu`` (the default), ``cuda``, ``cuda:1``, ``mps`` or ``auto`` (a GPU if there is one)."""
    path = Path(path)
    return load_export(path, device) if path.is_dir() else load_checkpoint(path, device)
