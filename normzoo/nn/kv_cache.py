"""The key/value cache of incremental decoding: each layer's keys and values so far, reordered
with the surviving beams.

The self-attention keys and values live in preallocated buffers ``[batch, kv_heads, capacity,
head_dim]`` that each step writes in place at the current length (a static cache): growing
them with ``torch.cat`` instead copies the whole prefix at every step and layer, and allocates
anew each time. The capacity doubles when a step needs more (a copy of the prefix, a handful of
times per search), so callers need not know the length in advance. Attention reads a view of
the used prefix, which SDPA and the explicit path take as they are (same results, bit for bit,
as on a contiguous copy: tests/test_static_cache.py). ``static=False`` keeps the growing cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

FIRST_CAPACITY = 32  # positions a static buffer starts with, unless the first step has more


@dataclass
class LayerCache:
    """Keys and values of one decoder layer, ``[batch, kv_heads, time, head_dim]``; with rotary
    embeddings the self-attention keys are stored rotated.

    ``self_k``/``self_v`` are the used prefix (views into the buffers of a static cache).
    ``cross_mask``/``cross_empty`` are the cross-attention mask and its rows without any key,
    built from the source padding once per search rather than at every step
    (:meth:`~normzoo.nn.attention.MultiheadAttention.forward`).
    """

    self_k: torch.Tensor | None = None
    self_v: torch.Tensor | None = None
    cross_k: torch.Tensor | None = None
    cross_v: torch.Tensor | None = None
    cross_mask: torch.Tensor | None = None
    cross_empty: torch.Tensor | None = None
    static: bool = True
    # The static buffers and their spares (beam reorders gather into the spares, then swap).
    _buffers: list[torch.Tensor] | None = field(default=None, repr=False)
    _spares: list[torch.Tensor] | None = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return 0 if self.self_k is None else self.self_k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new positions' keys and values ``[B, kv_heads, T, head_dim]``; returns all
        of them so far (the cached ones first)."""
        if not self.static:
            if self.self_k is not None:
                k = torch.cat([self.self_k, k], dim=2)
                v = torch.cat([self.self_v, v], dim=2)
            self.self_k, self.self_v = k, v
            return k, v
        start, end = self.length, self.length + k.shape[2]
        if self._buffers is None or end > self._buffers[0].shape[2]:
            self._grow(k, v, end)
        for buffer, new in zip(self._buffers, (k, v), strict=True):
            buffer[:, :, start:end] = new
        self.self_k, self.self_v = (buffer[:, :, :end] for buffer in self._buffers)
        return self.self_k, self.self_v

    def _grow(self, k: torch.Tensor, v: torch.Tensor, needed: int) -> None:
        """New buffers of at least ``needed`` positions (double the old), the prefix copied."""
        old = 0 if self._buffers is None else self._buffers[0].shape[2]
        capacity = max(needed, 2 * old, FIRST_CAPACITY)
        buffers = [x.new_empty(x.shape[0], x.shape[1], capacity, x.shape[3]) for x in (k, v)]
        if self.self_k is not None:
            for buffer, past in zip(buffers, (self.self_k, self.self_v), strict=True):
                buffer[:, :, : past.shape[2]] = past
        self._buffers, self._spares = buffers, None

    def reorder(self, index: torch.Tensor, cross: bool) -> None:
        """Keep batch rows ``index``; see :meth:`KVCache.reorder`."""
        if self.self_k is not None:
            buffers = self._buffers
            if self.static and buffers is not None and index.shape[0] == buffers[0].shape[0]:
                self._reorder_in_place(index)
            else:  # growing, or another batch size: the next append builds new buffers
                self.self_k, self.self_v = (x.index_select(0, index)
                                            for x in (self.self_k, self.self_v))
                self._buffers = self._spares = None
        if cross:
            for name in ("cross_k", "cross_v", "cross_mask", "cross_empty"):
                value = getattr(self, name)
                if value is not None:
                    setattr(self, name, value.index_select(0, index))

    def _reorder_in_place(self, index: torch.Tensor) -> None:
        """Gather the used prefix into the spare buffers and swap: one copy of the prefix, no
        allocation after the first reorder, the unused tail never touched."""
        if self._spares is None:
            self._spares = [torch.empty_like(b) for b in self._buffers]
        end = self.length
        for buffer, spare in zip(self._buffers, self._spares, strict=True):
            torch.index_select(buffer[:, :, :end], 0, index, out=spare[:, :, :end])
        self._buffers, self._spares = self._spares, self._buffers
        self.self_k, self.self_v = (b[:, :, :end] for b in self._buffers)


class KVCache:
    """The cache of a whole decoder stack for incremental decoding.

    ``length`` is the number of target positions already processed; beam search reorders the
    batch dimension with :meth:`reorder`. ``static`` (default True) writes keys and values in
    place into preallocated buffers; False grows them with ``torch.cat`` at every step.
    """

    def __init__(self, num_layers: int, *, static: bool = True) -> None:
        self.layers = [LayerCache(static=static) for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        """Keep batch rows ``index`` (in that order), e.g. the surviving beams.

        ``cross=False`` leaves the cross-attention keys and values as they are: right when
        ``index`` only permutes rows that hold the same source (the beams of one sentence),
        and it saves copying them at every step.
        """
        for layer in self.layers:
            layer.reorder(index, cross)
