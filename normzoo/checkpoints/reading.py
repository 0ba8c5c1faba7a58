"""Step one of loading a model: read a checkpoint file or an export folder safely and check
each part of it (metadata, recipe, weights, tokenizer) before anything is built from it, so that
a damaged, crafted or mismatched file fails with a message that says what is wrong, not deep
inside torch.

Checkpoints load with ``torch.load(weights_only=True)`` and exports are safetensors: reading
never runs code from a file. What comes out is a :class:`SavedModel`, plain checked data.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import NormzooError

EXPORT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "metadata.json")


class CheckpointError(NormzooError):
    """A checkpoint or export cannot be used (missing, damaged, or needs a missing plugin)."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """No checkpoint file or export folder at the path given: a :class:`CheckpointError` (the
    CLI's exit 2 and message) that ``except FileNotFoundError`` also catches, as it catches a
    missing file everywhere else in Python; ``filename`` is the path, ``errno`` ``ENOENT``."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(f"checkpoint not found: {path}")
        self.errno, self.strerror = errno.ENOENT, os.strerror(errno.ENOENT)
        self.filename = str(path)

    def __str__(self) -> str:  # OSError's own would be "[Errno 2] No such file ...: 'path'"
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (a sweep's job) as the path, not the text
        return type(self), (self.filename,)


@dataclass
class SavedModel:
    """What a checkpoint or an export holds, each part checked: the recipe as saved (validated
    later, once its plugins are known to be here), the tokenizer, the plugins that built the
    model, and its finite weights. An export stores a tied weight once, under one of its names
    (safetensors refuses shared tensors: ``tied_once``); :mod:`~normzoo.checkpoints.rebuild`
    fills the other names. A checkpoint stores every name, and each must be there."""

    recipe: dict[str, Any]
    tokenizer: Tokenizer
    plugins: list[Any]
    weights: dict[str, torch.Tensor]
    source: str
    tied_once: bool = False


def read_checkpoint_file(path: Path) -> SavedModel:
    """A Lightning checkpoint written by ``normzoo train``, read and checked."""
    source = str(path)
    meta, weights = checkpoint_parts(read_checkpoint(path), source)
    check_finite(weights, source)
    tokenizer = checkpoint_tokenizer(meta.get("tokenizer"), source)
    return SavedModel(meta["recipe"], tokenizer, meta.get("plugins", []), weights, source)


def read_export_folder(directory: Path) -> SavedModel:
    """A folder written by ``normzoo export`` (``--format normzoo``), read and checked."""
    from safetensors.torch import load_file

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
    weights_file = directory / "model.safetensors"
    try:
        weights = load_file(weights_file)
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{weights_file} cannot be loaded: {error}") from None
    check_finite(weights, str(weights_file))
    return SavedModel(config["recipe"], tokenizer, metadata.get("plugins", []), weights,
                      str(directory), tied_once=True)


def error_line(error: BaseException, limit: int = 200) -> str:
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
        raise CheckpointNotFound(path)
    try:
        # torch warns about a file it then refuses (a raw pickle's protocol): the refusal below
        # says what matters, in one line, without torch's lines before it.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.")
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
        f"copy it again from the run directory): {_unreadable_reason(error)}"
    )


def _unreadable_reason(error: BaseException) -> str:
    """torch's own words on what it could not read, without the advice around them: the
    weights-only unpickler's advice to load with ``weights_only=False`` is about trusting a file,
    which a file that is no pickle does not need, and the zip reader's "internal miniz error"
    note is for torch's developers."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:  # its detail is on this line or the next
            detail = line.split("WeightsUnpickler error:", 1)[1].strip()
            if not detail and i + 1 < len(lines):
                detail = lines[i + 1]
            return f"{type(error).__name__}: {detail}" if detail else type(error).__name__
    first = lines[0].split(". ")[0] if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


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
        raise damaged(source, f"its tokenizer cannot be read ({error_line(error)})") from None


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


def examples(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def check_finite(state: dict[str, torch.Tensor], source: str) -> None:
    """Refuse weights holding NaN or infinity, naming them: a model with them translates every
    sentence to an empty line and scores 0 without a word (a diverged run, or a damaged file)."""
    bad = [name for name, tensor in state.items()
           if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if bad:
        raise CheckpointError(
            f"{source} holds weights that are not finite (NaN or infinity): {examples(bad)}. "
            "The run that wrote them diverged, or the file was damaged; use an earlier "
            "checkpoint of the run (trainer.keep_checkpoints keeps several)")


