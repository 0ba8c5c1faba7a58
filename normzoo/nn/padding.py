"""The padding mask of the batch being processed, for the few layers that need it.

Norm layers keep the plain ``(..., dim) -> (..., dim)`` contract, so a norm whose statistics
must skip padding (masked BatchNorm) cannot take the mask as an argument. The stacks publish the
mask here for the duration of their forward pass instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_padding_mask: ContextVar[torch.Tensor | None] = ContextVar("normzoo_padding_mask", default=None)


@contextmanager
def padding_mask_context(mask: torch.Tensor | None) -> Iterator[None]:
    """Publish ``mask`` (bool ``[batch, time]``, True = padding) while the block runs."""
    token = _padding_mask.set(mask)
    try:
        yield
    finally:
        _padding_mask.reset(token)


def current_padding_mask() -> torch.Tensor | None:
    """The mask published by the enclosing stack, or None outside one."""
    return _padding_mask.get()
