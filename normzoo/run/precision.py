"""The precision a run trains in: the recipe's, except bf16 on a CPU without bf16 instructions.

A CPU with bf16 instructions (x86 ``avx512_bf16`` or AMX, Arm's BF16 extension) multiplies bf16
matrices two to four times faster than float32, which is what ``trainer.precision: bf16-mixed``
is for on a CPU (``benchmarks/precision.py``). Without them torch emulates bf16 and the run is
slower than in float32 for the same rounding, so normzoo says so once and trains in float32:
the run's ``recipe.yaml`` and logs then record ``32-true``, the precision that actually ran.
``NORMZOO_CPU_BF16=1`` (or ``0``) overrides the detection.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from pathlib import Path

import typer

from normzoo.recipe import Recipe
from normzoo.run.machine import training_device

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


def cpu_supports_bf16(*, honour_override: bool = True) -> bool:
    """Whether this CPU has bf16 arithmetic in hardware (not torch's emulation).

    ``NORMZOO_CPU_BF16=0|1`` overrides the answer (to test the fallback, or to train in bf16 on
    purpose) unless ``honour_override`` is false, as for the machine's record."""
    forced = os.environ.get(CPU_BF16_OVERRIDE)
    if honour_override and forced in ("0", "1"):
        return forced == "1"
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
