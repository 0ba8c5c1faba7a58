"""Load a trained model from a Lightning checkpoint or an export directory, safely.

Checkpoints load with ``torch.load(weights_only=True)`` and exports are safetensors, so loading
never runs code from a file. Everything needed to rebuild the model (resolved recipe, tokenizer,
the plugins that built it) travels inside the checkpoint, so a checkpoint is usable on a machine
that never saw the run directory.
"""

from __future__ import annotations

import json
import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from normzoo import registry
from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import ConfigError, NormzooError
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


def check_plugins(plugins: list[dict[str, str]], source: str) -> list[str]:
    """Check that the plugins that built the model are installed here and import.

    Fails naming the distribution to install when one is missing (or the name now comes from
    another distribution), or naming the import error when it fails to import. Returns each
    version difference (a plugin's, not normzoo's own, is also warned about).
    """
    if not (isinstance(plugins, list) and all(
            isinstance(p, dict) and isinstance(p.get("name"), str) for p in plugins)):
        raise _damaged(source, "its plugin list is not a list of {kind, name, distribution, "
                       "version} entries")
    differences = []
    with registry.pinned(plugins):  # a name several distributions provide: the recorded one
        for plugin in plugins:
            reg = registry.of_kind(plugin.get("kind"))
            name = plugin["name"]
            dist, version = str(plugin.get("distribution", "?")), str(plugin.get("version", "?"))
            entry = reg.entry(name) if name in reg else None
            if entry is None or registry.normalize_distribution(
                    entry.info.distribution) != registry.normalize_distribution(dist):
                here = "" if entry is None else (
                    f" ('{name}' here comes from {entry.info.distribution} {entry.info.version})")
                raise CheckpointError(
                    f"{source} was built with {reg.kind} '{name}' from the distribution '{dist}' "
                    f"(version {version}), which is not installed here{here}; install it first, "
                    f"e.g. pip install '{dist}=={version}'"
                )
            if reg.load(entry).error is not None:
                raise CheckpointError(
                    f"{source} was built with {reg.kind} '{name}' from {dist} {version}, and that "
                    f"plugin failed to import here: {entry.error}; fix or reinstall {dist}, "
                    f"e.g. pip install --force-reinstall '{dist}=={version}'"
                )
            if entry.info.version == version:
                continue
            differences.append(
                f"{reg.kind} '{name}' was built with {dist} {version} and {dist} "
                f"{entry.info.version} is installed here (pip install '{dist}=={version}' to "
                "match)")
            if registry.normalize_distribution(dist) != registry.BUILTIN:
                warnings.warn(registry.PluginVersionWarning(
                    f"{source}: {differences[-1]}; the model may load or behave differently"),
                    stacklevel=2)
    return differences


def _first_line(error: BaseException, limit: int = 200) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _refused_global(error: pickle.UnpicklingError) -> str | None:
    """What the weights-only unpickler refused (a global: code), or None if the file is just
    damaged (its other UnpicklingErrors, e.g. "Unsupported operand", mean unreadable bytes)."""
    for line in str(error).splitlines():
        detail = line.strip().removeprefix("WeightsUnpickler error: ")
        if "GLOBAL" in detail or "allowlisted" in detail:
            return detail.split(". ")[0]
    return None


def read_checkpoint(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        refused = _refused_global(error)
        if refused is None:
            raise _unreadable(path, error) from None
        raise CheckpointError(
            f"{path} holds objects that are not plain data, so it is refused (loading it could "
            f"run code): {refused}"
        ) from None
    except Exception as error:  # on bytes that are no checkpoint, torch.load raises anything:
        raise _unreadable(path, error) from None  # KeyError, IndexError, RuntimeError, OSError


def _unreadable(path: Path, error: BaseException) -> CheckpointError:
    return CheckpointError(
        f"{path} is not a readable checkpoint (truncated, damaged, or not a checkpoint at all; "
        f"copy it again from the run directory): {_first_line(error)}"
    )


def _damaged(source: str, what: str) -> CheckpointError:
    return CheckpointError(f"{source} is damaged: {what}. It is not as normzoo wrote it "
                           "(edited, or cut short?)")


def checkpoint_tokenizer(text: Any, source: str) -> Tokenizer:
    """The tokenizer saved (as JSON text) in a checkpoint; a clean error if it is damaged."""
    if not isinstance(text, str):
        raise _damaged(source, "its tokenizer is missing or not text")
    try:
        return Tokenizer.from_str(text)
    except Exception as error:  # the tokenizers library raises bare Exceptions on bad JSON
        raise _damaged(source, f"its tokenizer cannot be read ({_first_line(error)})") from None


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


def checkpoint_parts(ckpt: Any, source: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The normzoo metadata and the model's weights, checked to be what ``normzoo train``
    writes, so that a crafted or damaged file fails here rather than deep inside torch."""
    meta = ckpt.get("normzoo") if isinstance(ckpt, dict) else None
    if not meta or "state_dict" not in ckpt:
        raise CheckpointError(f"{source} is not a normzoo checkpoint (no normzoo metadata)")
    if not isinstance(meta, dict):
        raise _damaged(source, "its normzoo metadata is not a mapping")
    if not isinstance(meta.get("recipe"), dict):
        raise _damaged(source, "its recipe is missing or not a mapping")
    weights = ckpt["state_dict"]
    if not (isinstance(weights, dict) and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items())):
        raise _damaged(source, "its state_dict is not a mapping of names to tensors")
    return meta, {k.removeprefix("model."): v for k, v in weights.items()}


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


def _examples(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def check_finite(state: dict[str, torch.Tensor], source: str) -> None:
    """Refuse weights holding NaN or infinity, naming them: a model with them translates every
    sentence to an empty line and scores 0 without a word (a diverged run, or a damaged file)."""
    bad = [name for name, tensor in state.items()
           if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if bad:
        raise CheckpointError(
            f"{source} holds weights that are not finite (NaN or infinity): {_examples(bad)}. "
            "The run that wrote them diverged, or the file was damaged; use an earlier "
            "checkpoint of the run (trainer.keep_checkpoints keeps several)")


def _misfit(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> str:
    """How ``state`` differs from ``model``'s own weights: names missing, extra, mis-shaped."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    shapes = [f"{k} is {list(state[k].shape)} in the file, {list(v.shape)} in the model"
              for k, v in expected.items() if k in state and state[k].shape != v.shape]
    parts = [f"{len(missing)} weight(s) missing ({_examples(missing)})" if missing else "",
             f"{len(extra)} unexpected ({_examples(extra)})" if extra else "",
             f"{len(shapes)} of another shape ({_examples(shapes)})" if shapes else ""]
    return "; ".join(part for part in parts if part)


def load_state(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load ``state`` into ``model`` strictly; a misfit names the missing/unexpected weights."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        detail = _misfit(model, state) or _first_line(error)
        raise CheckpointError(
            f"{source} does not fit the model its recipe describes: {detail}. Its weights and "
            "its saved recipe disagree (was one of them edited?); use the file as normzoo "
            "train wrote it"
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
    if not (isinstance(config, dict) and isinstance(config.get("recipe"), dict)):
        raise _damaged(str(directory), "config.json has no recipe")
    if not isinstance(metadata, dict):
        raise _damaged(str(directory), "metadata.json is not a mapping")
    tokenizer = Tokenizer.load(directory / "tokenizer.json")
    if config.get("vocab_size") != tokenizer.vocab_size:
        raise _damaged(str(directory), f"config.json says vocab_size {config.get('vocab_size')!r}"
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
