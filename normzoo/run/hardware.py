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


def describe(device_type: str | None = None) -> dict[str, Any]:
    """This process's machine as ``summary.json`` records it: CPU, cores it may use, torch's
    threads, bf16 in hardware, the GPU where it trains on one (``device_type`` "cuda"), and the
    versions that set the speed."""
    import torch

    from normzoo.run.precision import cpu_supports_bf16

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = (torch.cuda.get_device_name() if device_type == "cuda" and torch.cuda.is_available()
           else None)
    try:
        from importlib.metadata import version

        normzoo_version = version("normzoo")
    except Exception:  # a source tree that was never installed
        normzoo_version = "unknown"
    return {"cpu": cpu_name(), "cores": cores, "torch_threads": torch.get_num_threads(),
            "cpu_bf16": cpu_supports_bf16(), "gpu": gpu, "python": platform.python_version(),
            "torch": torch.__version__, "normzoo": normzoo_version}
