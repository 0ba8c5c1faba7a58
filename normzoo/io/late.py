"""Device values read on the host late, so that a training step never waits for the device.

On a GPU, reading a tensor's value on the host (``.item()``, ``float(t)``, ``bool(t)``) waits
for every kernel queued so far: the host stops queueing the next step's work until the device
has caught up, and the device then idles while the host catches up. A value that is only to be
*written* (a logged loss) or *checked* (the divergence guard's verdict) need not be read at the
step that made it: :class:`LateValues` copies it into page-locked host memory without waiting
(``non_blocking``), records a CUDA event after the copy, and hands the value over once that
event has completed (:meth:`LateValues.landed`, which never waits), or when the caller may wait
(:meth:`LateValues.drain`: before validation, a checkpoint, the end of training).
This is GradScaler's pattern for its ``found_inf`` and torchtune's for its logged scalars.

On a CPU the values are already on the host: a copy lands at once, and the order in which
values are handed over is the order in which they were posted either way.

Plain torch, no Lightning: the run's loggers (:mod:`normzoo.run.callbacks.late`) and the
divergence guard (:mod:`normzoo.diagnostics.callbacks`) use it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

#: Set on every host copy this module makes: reading one never waits for a device
#: (``tests/test_host_syncs.py`` tells these reads from reads of the device's tensors).
HOST_COPY = "_normzoo_host_copy"


def host_copy(values: Sequence[torch.Tensor | float]) -> tuple[torch.Tensor, Any]:
    """``values`` (scalars: device tensors or host numbers) as one float64 host tensor, and the
    CUDA event after whose completion it holds them (None on a CPU: it holds them now)."""
    device = next((v.device for v in values if torch.is_tensor(v)), torch.device("cpu"))
    # Host numbers join the device's values on the device as kernel arguments (a fill, then an
    # add of a Python scalar: nothing is copied to the device, which would wait), so that one
    # copy carries them all.
    stacked = torch.stack([v.detach().reshape(()).to(torch.float64) if torch.is_tensor(v)
                           else torch.zeros((), dtype=torch.float64, device=device).add_(v)
                           for v in values])
    event = None
    if device.type == "cuda":
        host = torch.empty(stacked.shape, dtype=torch.float64, pin_memory=True)
        host.copy_(stacked, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    else:
        host = stacked.clone()
    setattr(host, HOST_COPY, True)
    return host, event


class LateValues:
    """A queue of posted values, each handed over (as floats, with its tag) once its copy has
    reached the host, oldest first."""

    def __init__(self) -> None:
        self._pending: deque[tuple[Any, torch.Tensor, Any]] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def post(self, tag: Any, values: Sequence[torch.Tensor | float]) -> None:
        """Start copying ``values`` to the host; ``tag`` comes back with them."""
        host, event = host_copy(values)
        self._pending.append((tag, host, event))

    def landed(self) -> list[tuple[Any, list[float]]]:
        """The posted values whose copies have reached the host, oldest first, without waiting:
        a copy not yet there holds back the ones posted after it, so the order is kept."""
        out = []
        while self._pending and (self._pending[0][2] is None or self._pending[0][2].query()):
            tag, host, _ = self._pending.popleft()
            out.append((tag, host.tolist()))
        return out

    def drain(self) -> list[tuple[Any, list[float]]]:
        """Every posted value, waiting for the copies still under way: only where the caller
        waits anyway (validation, a checkpoint, the end)."""
        for _, _, event in self._pending:
            if event is not None:
                event.synchronize()
        return self.landed()

    def clear(self) -> None:
        """Forget what is posted (a run that is failing reads nothing more)."""
        self._pending.clear()
