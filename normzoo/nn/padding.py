"""The padding mask of the batch being processed, for the few layers that need it.

Norm layers keep the plain ``(..., dim) -> (..., dim)`` contract, so a norm whose statistics
must skip padding (masked BatchNorm) cannot take the mask as an argument. The stacks publish the
mask here for the duration of their forward pass instead; the diagnostics' probes read it too.
A residual connection does not: one that needs the mask takes it as an argument
(``Residual.takes_padding_mask``, :func:`normzoo.models.layers.connect`).

The mask is held per thread (``threading.local``), not in a ``ContextVar``: TorchDynamo traces
an attribute of a thread-local object, but breaks the graph at every ``ContextVar.set`` (one
break per stack and per layer under ``trainer.compile``, which made the compiled step slower
than the eager one).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class _Published(threading.local):
    """This thread's published mask, None from the thread's first use (threading.local runs
    ``__init__`` once per thread): TorchDynamo guards on whether the attribute exists, and
    compiled the model a second time once the first forward had set it."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None


_published = _Published()


@contextmanager
def padding_mask_context(mask: torch.Tensor | None) -> Iterator[None]:
    """Publish ``mask`` (bool ``[batch, time]``, True = padding) while the block runs."""
    outer = _published.mask  # a stack inside a stack restores the outer one
    _published.mask = mask
    try:
        yield
    finally:
        _published.mask = outer


def current_padding_mask() -> torch.Tensor | None:
    """The mask published by the enclosing stack, or None outside one."""
    return _published.mask
