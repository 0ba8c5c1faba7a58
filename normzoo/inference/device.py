"""The device a user names for inference (``--device``, ``normzoo.load(..., device=)``),
checked against this machine before anything is read, so a GPU it lacks is a clear error."""

from __future__ import annotations

import torch

from normzoo.errors import NormzooError
from normzoo.inference.arguments import ArgumentTypeError, ArgumentValueError


def inference_device(device: str | torch.device = "cpu") -> torch.device:
    """``cpu``, ``cuda``, ``cuda:1``, ``mps`` or ``auto`` (the first CUDA GPU, else Apple's
    GPU, else the CPU) as a device this machine has; anything else is a user error (a
    ValueError or TypeError for a name or type that is no device at all)."""
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
            raise NormzooError(f"device '{device}': this machine has no CUDA GPU "
                               "(use cpu or auto)")
        if chosen.index is not None and chosen.index >= count:
            raise NormzooError(f"device '{device}': this machine has {count} CUDA GPU(s), "
                               f"cuda:0 to cuda:{count - 1}")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise NormzooError(f"device '{device}': Apple's GPU (MPS) is not available here")
    return chosen
