"""Reading a checkpoint file safely and checking each part of it (metadata, weights,
tokenizer, the plugins that built it) before anything is built from it, so that a damaged,
crafted or mismatched file fails with a message that says what is wrong, not deep inside torch.

Checkpoints load with ``torch.load(weights_only=True)``: loading never runs code from a file.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

from normzoo import registry
from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import NormzooError


class CheckpointError(NormzooError):
    """A checkpoint or export cannot be used (missing, damaged, or needs a missing plugin)."""


def check_plugins(plugins: list[dict[str, str]], source: str) -> list[str]:
    """Check that the plugins that built the model are installed here and import.

    Fails naming the distribution to install when one is missing (or the name now comes from
    another distribution), or naming the import error when it fails to import. Returns each
    version difference (a plugin's, not normzoo's own, is also warned about).
    """
    if not (isinstance(plugins, list) and all(
            isinstance(p, dict) and isinstance(p.get("name"), str) for p in plugins)):
        raise damaged(source, "its plugin list is not a list of {kind, name, distribution, "
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


def damaged(source: str, what: str) -> CheckpointError:
    return CheckpointError(f"{source} is damaged: {what}. It is not as normzoo wrote it "
                           "(edited, or cut short?)")


def checkpoint_tokenizer(text: Any, source: str) -> Tokenizer:
    """The tokenizer saved (as JSON text) in a checkpoint; a clean error if it is damaged."""
    if not isinstance(text, str):
        raise damaged(source, "its tokenizer is missing or not text")
    try:
        return Tokenizer.from_str(text)
    except Exception as error:  # the tokenizers library raises bare Exceptions on bad JSON
        raise damaged(source, f"its tokenizer cannot be read ({_first_line(error)})") from None


def checkpoint_parts(ckpt: Any, source: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The normzoo metadata and the model's weights, checked to be what ``normzoo train``
    writes, so that a crafted or damaged file fails here rather than deep inside torch."""
    meta = ckpt.get("normzoo") if isinstance(ckpt, dict) else None
    if not meta or "state_dict" not in ckpt:
        raise CheckpointError(f"{source} is not a normzoo checkpoint (no normzoo metadata)")
    if not isinstance(meta, dict):
        raise damaged(source, "its normzoo metadata is not a mapping")
    if not isinstance(meta.get("recipe"), dict):
        raise damaged(source, "its recipe is missing or not a mapping")
    weights = ckpt["state_dict"]
    if not (isinstance(weights, dict) and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items())):
        raise damaged(source, "its state_dict is not a mapping of names to tensors")
    return meta, {k.removeprefix("model."): v for k, v in weights.items()}


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
