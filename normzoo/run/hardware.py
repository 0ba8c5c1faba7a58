"""What this machine is, as every run records it (``summary.json``'s ``machine``), so that its
timings can be compared with another's: the CPU with its family and model, the cores this
process may use, torch's threads, bf16 in hardware, the GPU, and the versions that set the speed.
"""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any

from normzoo import __version__
from normzoo.run.workers import usable_cores


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (empty off Linux)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_name() -> str:
    """The CPU's name with its family and model where the name alone hides the generation.

    Cloud CPUs often report only a brand ("AMD EPYC"), which covers generations whose bf16
    throughput differs twofold (Zen 4 and Zen 5), so timings need the family and model beside it.
    """
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']}, model {info['model']})"
    return name


# Dense bf16 tensor-core peaks (NVIDIA's datasheets, whose headline figures count 2:4 sparsity
# and are twice these), by a part of the name torch reports, the more specific first. A bf16
# run's MFU divides by them: Lightning's table (``get_available_flops``) misses the H200, which
# torch names "NVIDIA H200", and lists sparse figures for the H200 and the H100 NVL.
PEAK_BF16: list[tuple[str, float, str]] = [
    ("H200 NVL", 835e12, "H200 NVL"), ("H200", 989e12, "H200 SXM (the H100 SXM's tensor cores)"),
    ("H100 PCIe", 756e12, "H100 PCIe"), ("H100 NVL", 835e12, "H100 NVL"),
    ("H100", 989e12, "H100 SXM"), ("A100", 312e12, "A100")]


def peak_bf16_flops(device_name: str) -> tuple[float, str] | None:
    """A GPU's dense bf16 peak in FLOP/s from its name, and which entry matched (None for a
    GPU the table lacks)."""
    return next(((flops, label) for key, flops, label in PEAK_BF16 if key in device_name), None)


def describe(device_type: str | None = None) -> dict[str, Any]:
    """This process's machine as ``summary.json`` records it: CPU, cores it may use, torch's
    threads, bf16 in hardware, the device it trains on (with the GPU's name on "cuda"), and the
    versions that set the speed.

    ``cpu_bf16`` is what the CPU has; ``NORMZOO_CPU_BF16``, which overrides that for the
    precision fallback, is recorded beside it where it is set, so the record never claims
    hardware the CPU lacks."""
    # Here, not at the top: a sweep reads this module's core count without loading torch (nor
    # the recipe's schema, which precision reads and which loads torch).
    import torch

    from normzoo.run import allocator
    from normzoo.run.machine import CPU_BF16_OVERRIDE, cpu_supports_bf16

    gpu = (torch.cuda.get_device_name() if device_type == "cuda" and torch.cuda.is_available()
           else None)
    record: dict[str, Any] = {
        "cpu": cpu_name(), "cores": usable_cores(), "torch_threads": torch.get_num_threads(),
        "cpu_bf16": cpu_supports_bf16(honour_override=False), "device": device_type or "cpu",
        "gpu": gpu, "python": platform.python_version(), "torch": torch.__version__,
        "normzoo": __version__}
    if record["device"] == "cpu":
        record["cpu_malloc"] = allocator.mode()
    if (forced := os.environ.get(CPU_BF16_OVERRIDE)) is not None:
        record["cpu_bf16_override"] = forced
    return record
