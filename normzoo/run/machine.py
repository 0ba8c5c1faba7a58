"""What this machine can run: a model's training state against its memory, and CPU processes
against its cores, found from the recipe without allocating anything.

``train``, ``sweep`` and ``recipe validate`` (:func:`check_machine` after ``recipe.load``) and
``diagnose`` ask, so that a size the machine cannot hold is refused before anything is written.
Kept out of the schema: whether a recipe is valid does not depend on where it is read.

The precision a run trains in is the recipe's, except bf16 on a CPU without bf16 instructions.
A CPU with bf16 instructions (x86 ``avx512_bf16`` or AMX, Arm's BF16 extension) multiplies bf16
matrices two to four times faster than float32, which is what ``trainer.precision: bf16-mixed``
is for on a CPU (``benchmarks/precision.py``). Without them torch emulates bf16 and the run is
slower than in float32 for the same rounding, so normzoo says so once and trains in float32
(:func:`training_precision`): the run's ``recipe.yaml`` and logs then record ``32-true``, the
precision that actually ran. ``NORMZOO_CPU_BF16=1`` (or ``0``) overrides the detection.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import typer

from normzoo.errors import ConfigError, NormzooError, Problem
from normzoo.recipe import Recipe, TrainerConfig
from normzoo.run.workers import loader_workers_problem, processes_per_machine, usable_cores

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
    """The model's parameters: the model built on torch's meta device (shapes, no memory), so
    that a scheme's or norm's own weights count too (``hyper`` with a million streams holds
    5e12 parameters, which the formula below misses); the formula where that build fails,
    which the real build will then report."""
    formula = matrix_count(recipe)
    try:
        import torch

        from normzoo.models import assemble

        with torch.device("meta"):
            model = assemble(recipe.model, recipe.model.vocab_size or _vocabulary(recipe))
        return max(formula, sum(p.numel() for p in model.parameters()))
    except Exception:  # any plugin's failure is the build's to report
        return formula


def matrix_count(recipe: Recipe) -> int:
    """The model's parameters, counted from the recipe without building it: its matrices and
    embeddings (biases, norms and scheme gains, well under 1% of a model, are left out), so a
    lower bound of what :func:`normzoo.models.assemble` builds."""
    m = recipe.model
    d, vocab = m.d_model, m.vocab_size or _vocabulary(recipe)
    cross = m.family_info.cross_attention  # two embeddings, two position tables, cross-attn
    ffn = (3 if m.activation in ("swiglu", "geglu") else 2) * d * m.ffn_dim
    kv = d // m.heads * (m.kv_heads or m.heads)  # k and v's width: narrower with GQA
    attention = 2 * d * d + 2 * d * kv  # W_q, W_o; W_k, W_v
    layers = m.encoder_depth * (attention + ffn) + m.decoder_depth * (
        (2 if cross else 1) * attention + ffn)
    tokens = vocab * d * (2 if cross and not m.share_embeddings else 1)
    positions = (2 if cross else 1) * m.max_positions * d if m.positions == "learned" else 0
    head = d * d if m.family_info.masked_lm_head else 0  # the masked-LM head's dense layer
    output = 0 if m.tie_output else vocab * d
    return layers + tokens + positions + head + output


def _size(count: int) -> str:
    return f"{count / 2**40:,.1f} TiB" if count >= 2**40 else f"{count / 2**30:,.1f} GiB"


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


def machine_problems(recipe: Recipe, *, training: bool = True) -> list[Problem]:
    """What of ``recipe`` this machine cannot run, found without allocating anything: a model
    whose training state (weights, gradients and AdamW's moments; with ``training=False`` the
    weights and gradients of one forward and backward on the CPU) is larger than the memory of
    a device, more training processes on the CPU (``trainer.devices``) than cores, more loader
    processes (``data.num_workers``) than the CPUs can run
    (:func:`~normzoo.run.workers.loader_workers_problem`),
    and an ``eval.beam`` the final test's beam search cannot hold (:func:`_final_test_beam`).

    The size is a lower bound (activations come on top), so a refused recipe never fits.
    """
    trainer = recipe.trainer
    workers = loader_workers_problem(recipe) if training else None
    device = training_device(trainer) if training else "cpu"
    if device is None:
        return [workers] if workers else []
    problems = [workers] if workers else []
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
    processes = processes_per_machine(trainer) if training else 1
    from normzoo.inference.device import device_memory

    limit, where = device_memory(device)
    if isinstance(device, str):
        if processes > 1 and trainer.strategy != "fsdp":  # one replica per process
            need, copies = need * processes, f", once in each of {processes} processes"
    elif trainer.strategy == "fsdp":  # sharded over every device
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
    if training and recipe.model.family_info.cross_attention and recipe.eval.beam > 1:
        problems += _final_test_beam(recipe, limit, where)
    return problems


def _final_test_beam(recipe: Recipe, limit: int | None, where: str) -> list[Problem]:
    """``eval.beam`` where the final test's beam search could not hold one two-token sentence
    (:func:`~normzoo.inference.beams.beam_state_bytes`, float32, as that test decodes)."""
    from normzoo.inference.beams import beam_problem, beam_state_bytes

    m, evaluation = recipe.model, recipe.eval
    config = m.model_copy(update={"vocab_size": m.vocab_size or _vocabulary(recipe)})
    steps = min(max(int(2 * evaluation.max_len_a + evaluation.max_len_b), 1),
                m.max_positions - 1)
    need = beam_state_bytes(config, evaluation.beam, 1, 2, steps)
    problem = beam_problem(evaluation.beam, need, "one sentence of 2 tokens", limit, where,
                           "eval.beam")
    return [Problem("eval.beam", f"{evaluation.beam} {problem}")] if problem else []


def check_machine(recipe: Recipe, *, training: bool = True) -> Recipe:
    """``recipe``, or :class:`ConfigError` with its :func:`machine_problems`."""
    problems = machine_problems(recipe, training=training)
    if problems:
        raise ConfigError(problems, "this machine cannot run the recipe")
    return recipe

BF16 = ("bf16-mixed", "bf16-true")


def _cpu_flags() -> set[str]:
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                return set(value.split())
    return set()


CPU_BF16_OVERRIDE = "NORMZOO_CPU_BF16"  # "0" or "1": take this answer instead of the CPU's


def cpu_bf16_override() -> bool | None:
    """What ``NORMZOO_CPU_BF16`` asks for (None: unset); a mistyped value is refused (exit 2).
    A run checks it before it starts, whatever its precision: under fp32 the value is never
    used, but it is recorded, and ``yes`` once went into a run's record unread."""
    forced = os.environ.get(CPU_BF16_OVERRIDE)
    if forced is not None and forced not in ("0", "1"):
        raise NormzooError(f"{CPU_BF16_OVERRIDE}={forced!r}: set it to 1 (train in bf16 as if "
                           "the CPU had it) or 0 (fall back to 32-true), or unset it")
    return None if forced is None else forced == "1"


def cpu_supports_bf16(*, honour_override: bool = True) -> bool:
    """Whether this CPU has bf16 arithmetic in hardware (not torch's emulation).

    ``NORMZOO_CPU_BF16=0|1`` overrides the answer (to test the fallback, or to train in bf16 on
    purpose) unless ``honour_override`` is false, as for the machine's record."""
    forced = cpu_bf16_override() if honour_override else None
    if forced is not None:
        return forced
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        import torch

        checks = [getattr(torch.cpu, name, None) for name in
                  ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        if all(check is not None for check in checks):
            return any(check() for check in checks)
        return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())
    if machine in ("aarch64", "arm64"):
        if platform.system() == "Darwin":
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                found = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"],
                                       capture_output=True, text=True, timeout=5)
                return found.stdout.strip() == "1"
            return False
        return "bf16" in _cpu_flags()
    return False


def training_precision(recipe: Recipe, *, announce: bool = True) -> Recipe:
    """``recipe``, with ``trainer.precision`` set to ``32-true`` where it asks for bf16 on a CPU
    that has no bf16 instructions (saying so on stderr when ``announce``)."""
    trainer = recipe.trainer
    if trainer.precision not in BF16 or training_device(trainer) != "cpu" or cpu_supports_bf16():
        return recipe
    if announce:
        typer.echo(f"warning: this CPU has no bf16 instructions (avx512_bf16, AMX or Arm BF16), "
                   f"so trainer.precision={trainer.precision} would run emulated and slower "
                   "than float32; training in 32-true instead", err=True)
    return recipe.model_copy(update={"trainer": trainer.model_copy(
        update={"precision": "32-true"})})


def batch_ladder(recipe: Recipe) -> Recipe:
    """``recipe`` with ``data.buckets: auto`` resolved: a ladder of
    :data:`~normzoo.data.shapes.DEFAULT_RUNGS` lengths on a CUDA device, where every new
    batch shape costs (cuDNN's per-shape plans, the caching allocator, a compiled step's graph
    per shape); none on a CPU, where a shape costs nothing in eager mode and padding only adds
    work, and where ``trainer.compile`` pays best with one dynamic graph: on the ladder a
    400-step run of the depth study's model compiled 15 static graphs, 2,023 s from a cold
    inductor cache against 488 s dynamic, for no faster a step
    (``benchmarks/batch_shapes.py --compile``). The run's ``recipe.yaml`` records the
    resolved value, so a resume batches alike."""
    data = recipe.data
    if data.buckets != "auto":
        return recipe
    from normzoo.data.shapes import DEFAULT_RUNGS

    costly = training_device(recipe.trainer) not in ("cpu", "mps", None)
    return recipe.model_copy(update={"data": data.model_copy(
        update={"buckets": DEFAULT_RUNGS if costly else None})})


LOADER_WORKERS = 4  # data.num_workers: auto on a CUDA device, where CPUs allow


def loader_workers(recipe: Recipe) -> Recipe:
    """``recipe`` with ``data.num_workers: auto`` resolved: :data:`LOADER_WORKERS` processes
    on a CUDA device (one CPU per training process kept for the loop itself), none on a CPU,
    whose cores the step uses. On an H200 (Transformer-base, 25,000 tokens a batch, bf16),
    ``normzoo train`` collating in the training process fed the card 200,000 target tokens/s
    and with 4 workers 324,000 (2: 321,000; 8: 275,000), against 351,000 for the bare step
    (``benchmarks/results/gpu-train-nvidia-h200.md``). ``recipe.yaml`` records the resolved
    value."""
    data = recipe.data
    if data.num_workers != "auto":
        return recipe
    workers = 0
    if training_device(recipe.trainer) not in ("cpu", "mps", None):
        per_process = usable_cores() // max(1, processes_per_machine(recipe.trainer))
        workers = max(0, min(LOADER_WORKERS, per_process - 1))
    return recipe.model_copy(update={"data": data.model_copy(update={"num_workers": workers})})


def resolve_auto(recipe: Recipe) -> Recipe:
    """``recipe`` with its data keys' ``auto`` resolved for this machine, as a run records
    them (:func:`batch_ladder`, :func:`loader_workers`)."""
    return loader_workers(batch_ladder(recipe))


def for_this_machine(recipe: Recipe, *, announce: bool = True) -> Recipe:
    """``recipe`` as this machine trains it (:func:`training_precision`, :func:`resolve_auto`),
    or :class:`ConfigError` with what the machine cannot hold or run (:func:`check_machine`)."""
    return check_machine(resolve_auto(training_precision(recipe, announce=announce)))
