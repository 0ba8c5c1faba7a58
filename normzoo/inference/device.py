"""The device a user names for inference (``--device``, ``normzoo.load(..., device=)``),
checked against this machine before anything is read, so a GPU it lacks is a clear error; and
the memory of a device (:func:`device_memory`), against which a beam's decoding state and a
run's training state (:mod:`normzoo.run.machine`) are checked before anything is allocated."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch

from normzoo.inference.arguments import ArgumentTypeError, ArgumentValueError


def inference_device(device: str | torch.device = "cpu") -> torch.device:
    """``cpu``, ``cuda``, ``cuda:1``, ``mps`` or ``auto`` (the first CUDA GPU, else Apple's
    GPU, else the CPU) as a device this machine has; anything else is a user error: a
    TypeError for a type that is no device, a ValueError for a name that is none or a device
    this machine lacks (``cuda`` without a GPU), both :class:`~normzoo.errors.NormzooError`
    (exit 2 at the command line)."""
    if not isinstance(device, str | torch.device):
        raise ArgumentTypeError("device must be a str (cpu, cuda, cuda:N, mps or auto) or a "
                                f"torch.device, got {type(device).__name__} {device!r}")
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
        raise ArgumentValueError(f"unknown device '{device}': use cpu, cuda, cuda:N, mps or "
                                 "auto")
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ArgumentValueError(f"device '{device}': this machine has no CUDA GPU "
                                     "(use cpu or auto)")
        if chosen.index is not None and chosen.index >= count:
            raise ArgumentValueError(f"device '{device}': this machine has {count} CUDA "
                                     f"GPU(s), cuda:0 to cuda:{count - 1}")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ArgumentValueError(f"device '{device}': Apple's GPU (MPS) is not available here")
    return chosen


def _ram() -> int | None:
    """Physical memory, or the container's limit where one is set and lower (cgroup v2)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    with contextlib.suppress(OSError, ValueError):
        total = min(total, int(Path("/sys/fs/cgroup/memory.max").read_text().strip()))
    return total


def device_memory(device: Any) -> tuple[int | None, str]:
    """The memory of ``device`` (a torch device, its name, or a CUDA device's properties) and
    where it is, in words: a CUDA device's own, else this machine's RAM (the CPU's, and Apple's
    GPU's, which shares it); None where it cannot be read."""
    if getattr(device, "type", device) == "cuda":
        device = torch.cuda.get_device_properties(device)
    if not hasattr(device, "total_memory"):
        return _ram(), "memory (RAM) of this machine"
    return device.total_memory, f"GPU memory of one {device.name}"
