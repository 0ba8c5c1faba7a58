"""What this machine can run: a model's training state against its memory, and CPU processes
against its cores, found from the recipe without allocating anything.

``train``, ``sweep`` and ``recipe validate`` (:func:`check_machine` after ``recipe.load``) and
``diagnose`` ask, so that a size the machine cannot hold is refused before anything is written.
Kept out of the schema: whether a recipe is valid does not depend on where it is read.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from normzoo.errors import ConfigError, Problem
from normzoo.recipe import Recipe, TrainerConfig

# Bytes of training state per parameter: fp32 weights and gradients and AdamW's two fp32 moments
# (mixed precision keeps fp32 weights too); bf16-true keeps all four in bf16.
TRAINING_BYTES = {"bf16-true": 8}
FP32_TRAINING_BYTES = 16
# Diagnostics run one forward and backward on the CPU: fp32 weights and gradients.
DIAGNOSE_BYTES = 8


def _vocabulary(recipe: Recipe) -> int:
    """The tokenizer's size: a tokenizer file's own (its vocab_size setting is not used), or
    the setting where the file cannot be read (``recipe validate`` says why)."""
    tokenizer = recipe.data.tokenizer
    if tokenizer.type == "file" and tokenizer.path:
        from tokenizers import Tokenizer

        with contextlib.suppress(Exception):  # the library raises bare Exceptions
            return Tokenizer.from_file(os.path.expanduser(tokenizer.path)).get_vocab_size()
    return tokenizer.vocab_size


def parameter_count(recipe: Recipe) -> int:
    """The model's parameters, counted from the recipe without building it: its matrices and
    embeddings (biases, norms and scheme gains, well under 1% of a model, are left out), so a
    lower bound of what :func:`normzoo.models.assemble` builds."""
    m = recipe.model
    d, vocab = m.d_model, m.vocab_size or _vocabulary(recipe)
    cross = m.family == "encoder_decoder"
    ffn = (3 if m.activation in ("swiglu", "geglu") else 2) * d * m.ffn_dim
    kv = d // m.heads * (m.kv_heads or m.heads)  # k and v's width: narrower with GQA
    attention = 2 * d * d + 2 * d * kv  # W_q, W_o; W_k, W_v
    layers = m.encoder_depth * (attention + ffn) + m.decoder_depth * (
        (2 if cross else 1) * attention + ffn)
    tokens = vocab * d * (2 if cross and not m.share_embeddings else 1)
    positions = (2 if cross else 1) * m.max_positions * d if m.positions == "learned" else 0
    head = d * d if m.family == "encoder" else 0  # the masked-LM head's dense layer
    output = 0 if m.tie_output else vocab * d
    return layers + tokens + positions + head + output


def _size(count: int) -> str:
    return f"{count / 2**40:,.1f} TiB" if count >= 2**40 else f"{count / 2**30:,.1f} GiB"


def _ram() -> int | None:
    """Physical memory, or the container's limit where one is set and lower (cgroup v2)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    with contextlib.suppress(OSError, ValueError):
        total = min(total, int(Path("/sys/fs/cgroup/memory.max").read_text().strip()))
    return total


def training_device(trainer: TrainerConfig) -> Any:
    """Where the trainer runs: ``"cpu"``, ``"mps"`` (memory shared with the CPU), the properties
    of the first CUDA device, or None for a GPU asked for and missing (the Trainer says so).
    torch is imported only when the recipe may use an accelerator."""
    if trainer.accelerator == "cpu":
        return "cpu"
    import torch

    if trainer.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0)
    if trainer.accelerator in ("auto", "mps") and torch.backends.mps.is_available():
        return "mps"
    return "cpu" if trainer.accelerator == "auto" else None


def _processes_per_machine(trainer: TrainerConfig) -> int:
    devices = trainer.devices
    if devices == -1:
        return os.cpu_count() or 1
    return devices if isinstance(devices, int) else 1


def machine_problems(recipe: Recipe, *, training: bool = True) -> list[Problem]:
    """What of ``recipe`` this machine cannot run, found without allocating anything: a model
    whose training state (weights, gradients and AdamW's moments; with ``training=False`` the
    weights and gradients of one forward and backward on the CPU) is larger than the memory of
    a device, and more training processes on the CPU (``trainer.devices``) than cores.

    The size is a lower bound (activations come on top), so a refused recipe never fits.
    """
    trainer = recipe.trainer
    device = training_device(trainer) if training else "cpu"
    if device is None:
        return []
    problems = []
    cores = os.cpu_count() or 1
    if training and device == "cpu" and isinstance(trainer.devices, int) and (
            trainer.devices > cores):
        problems.append(Problem("trainer.devices", (
            f"{trainer.devices} devices on the CPU are {trainer.devices} training processes, "
            f"but this machine has {cores} CPU cores: more processes than cores only slows "
            f"training down; use trainer.devices={cores} or fewer, or a GPU "
            "(trainer.accelerator=gpu)")))
    count = parameter_count(recipe)
    per_parameter = (TRAINING_BYTES.get(trainer.precision, FP32_TRAINING_BYTES) if training
                     else DIAGNOSE_BYTES)
    need, copies = count * per_parameter, ""
    processes = _processes_per_machine(trainer) if training else 1
    if isinstance(device, str):
        limit, where = _ram(), "memory (RAM) of this machine"
        if processes > 1 and trainer.strategy != "fsdp":  # one replica per process
            need, copies = need * processes, f", once in each of {processes} processes"
    else:
        limit, where = device.total_memory, f"GPU memory of one {device.name}"
        if trainer.strategy == "fsdp":  # sharded over every device
            shards = processes * trainer.num_nodes
            need, copies = need // shards, f", sharded over {shards} devices"
    if limit is not None and need > limit:
        what = ("weights, gradients and AdamW's two moments" if training else
                "weights and gradients")
        problems.append(Problem("model", (
            f"{'training' if training else 'measuring'} this model needs at least "
            f"{_size(need)} ({count:,} parameters x {per_parameter} bytes for {what}{copies}), "
            f"more than the {_size(limit)} of {where}; make it smaller (model.d_model, "
            "model.ffn_dim, model.encoder_layers, model.decoder_layers, "
            "data.tokenizer.vocab_size)")))
    return problems


def check_machine(recipe: Recipe, *, training: bool = True) -> Recipe:
    """``recipe``, or :class:`ConfigError` with its :func:`machine_problems`."""
    problems = machine_problems(recipe, training=training)
    if problems:
        raise ConfigError(problems, "this machine cannot run the recipe")
    return recipe
