"""The key/value caches of incremental decoding: each layer's keys and values so far, reordered
with the surviving beams.

:class:`KVCache` grows: each step concatenates its keys to the earlier ones (what
``model.new_cache()`` gives). :class:`StaticKVCache` is preallocated for a number of positions
(``model.new_cache(capacity=n)``): the keys and values of every layer live in one tensor per
kind, written in place at the step's position, and a beam reorder is one ``index_select`` of the
filled positions into that same storage, whatever the depth. Its eager steps attend to the
positions filled so far, so they compute exactly what the growing cache's do. In fixed-shape
mode (``position`` set, a one-element tensor on the device) a one-token step writes at that
position and attends to the whole capacity under a mask of the filled positions: every shape and
address stays the same from step to step, which is what a CUDA graph needs to replay the step
(:mod:`normzoo.inference.step_graphs`).

Both expose, per layer, ``offset`` (the position of the step's first token: an int, or the
device tensor in fixed-shape mode), ``append(k, v)``
(the keys and values to attend to, and the mask of filled positions or None) and
``keep_cross(k, v)`` for cross-attention's keys, computed once from the encoder output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerCache:
    """Keys and values of one decoder layer, ``[batch, kv_heads, time, head_dim]``; with rotary
    embeddings the self-attention keys are stored rotated."""

    self_k: torch.Tensor | None = None
    self_v: torch.Tensor | None = None
    cross_k: torch.Tensor | None = None
    cross_v: torch.Tensor | None = None

    @property
    def offset(self) -> int:
        """The position of the next token: how many are cached."""
        return 0 if self.self_k is None else self.self_k.shape[2]

    def append(self, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The step's keys and values after the cached ones: all of them, to attend to."""
        if self.self_k is not None:
            k = torch.cat([self.self_k, k], dim=2)
            v = torch.cat([self.self_v, v], dim=2)
        self.self_k, self.self_v = k, v
        return k, v, None

    def keep_cross(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.cross_k, self.cross_v = k, v


class KVCache:
    """The cache of a whole decoder stack for incremental decoding.

    ``length`` is the number of target positions already processed; beam search reorders the
    batch dimension with :meth:`reorder`.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(num_layers)]

    @property
    def length(self) -> int:
        first = self.layers[0].self_k if self.layers else None
        return 0 if first is None else first.shape[2]

    @property
    def offset(self) -> int:
        """The position of the next token (as :attr:`StaticKVCache.offset`)."""
        return self.length

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        """Keep batch rows ``index`` (in that order), e.g. the surviving beams.

        ``cross=False`` leaves the cross-attention keys and values as they are: right when
        ``index`` only permutes rows that hold the same source (the beams of one sentence),
        and it saves copying them at every step.
        """
        names = ("self_k", "self_v", "cross_k", "cross_v") if cross else ("self_k", "self_v")
        for layer in self.layers:
            for name in names:
                value = getattr(layer, name)
                if value is not None:
                    setattr(layer, name, value.index_select(0, index))


class StaticLayerCache:
    """One layer's view of a :class:`StaticKVCache`: its slice of the shared storage, and its
    cross-attention keys and values (kept in the same tensors from one batch to the next)."""

    def __init__(self, cache: StaticKVCache, index: int) -> None:
        self.cache, self.index = cache, index
        self.filled = 0
        self.cross_k: torch.Tensor | None = None
        self.cross_v: torch.Tensor | None = None
        self._cross: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def offset(self) -> int | torch.Tensor:
        return self.filled if self.cache.position is None else self.cache.position

    @property
    def self_k(self) -> torch.Tensor | None:
        """The filled keys ``[rows, kv_heads, filled, head_dim]`` (a view), as in
        :class:`LayerCache`."""
        keys = self.cache.keys
        return None if keys is None or not self.filled else keys[self.index, :, :, :self.filled]

    @property
    def self_v(self) -> torch.Tensor | None:
        values = self.cache.values
        return (None if values is None or not self.filled
                else values[self.index, :, :, :self.filled])

    def append(self, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Write the step's keys and values in place; the keys and values to attend to, and in
        fixed-shape mode the ``[1, 1, 1, capacity]`` mask of the positions filled so far."""
        cache = self.cache
        keys, values = cache.storage_for(k, v)
        keys, values = keys[self.index], values[self.index]
        if cache.position is not None:
            if k.shape[2] != 1:
                raise ValueError("a fixed-shape step takes one token at a time")
            keys.index_copy_(2, cache.position, k.to(keys.dtype))
            values.index_copy_(2, cache.position, v.to(values.dtype))
            return keys, values, (cache.slots <= cache.position)[None, None, None, :]
        start, end = self.filled, self.filled + k.shape[2]
        if end > cache.capacity:
            raise ValueError(f"{end} positions exceed the cache's capacity of {cache.capacity}")
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        self.filled = end
        return keys[:, :, :end], values[:, :, :end], None

    def keep_cross(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep cross-attention's keys and values; in the tensors of an earlier batch when they
        fit, so that a captured step reads the new ones where it read the old."""
        kept = self._cross
        if kept is not None and all(a.shape == b.shape and a.dtype == b.dtype
                                    for a, b in zip(kept, (k, v), strict=True)):
            kept[0].copy_(k)
            kept[1].copy_(v)
        else:
            kept = self._cross = (k, v)
        self.cross_k, self.cross_v = kept


class StaticKVCache:
    """A decoder stack's keys and values preallocated for ``capacity`` positions.

    The storage (``keys`` and ``values``, ``[layers, rows, kv_heads, capacity, head_dim]``) is
    allocated at the first write, with the rows, dtype and device of its keys and values, and
    zeroed, so that positions not yet written hold finite numbers (a masked position's weight is
    0, and 0 times NaN would still be NaN). ``position`` set turns on fixed-shape mode (see the
    module docstring); its caller then keeps the host's count up to date with :meth:`seek`.
    """

    def __init__(self, num_layers: int, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a static cache needs at least one position, not {capacity}")
        self.capacity = capacity
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.slots: torch.Tensor | None = None  # 0 .. capacity-1, on the storage's device
        self.position: torch.Tensor | None = None
        self.layers = [StaticLayerCache(self, i) for i in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].filled if self.layers else 0

    @property
    def offset(self) -> int | torch.Tensor:
        """The position of the next token: an int, or the device tensor in fixed-shape mode."""
        return self.length if self.position is None else self.position

    def storage_for(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The storage, allocated for ``k`` and ``v``'s rows, heads, dtypes and device if it is
        not yet (a layer whose dtype differs is cast to the first one's)."""
        if self.keys is None or self.values is None:
            shape = (len(self.layers), k.shape[0], k.shape[1], self.capacity)
            self.keys = k.new_zeros(*shape, k.shape[3])
            self.values = v.new_zeros(*shape, v.shape[3])
            self.slots = torch.arange(self.capacity, device=k.device)
        if k.shape[0] != self.keys.shape[1]:
            raise ValueError(f"{k.shape[0]} rows, but the cache holds {self.keys.shape[1]}")
        return self.keys, self.values

    def seek(self, length: int) -> None:
        """Count ``length`` positions as filled in every layer (after fixed-shape steps, which
        write on the device without the host's knowing)."""
        for layer in self.layers:
            layer.filled = length

    def reset(self) -> None:
        """Empty, for a new batch of the same rows: the storage and cross-attention's tensors
        stay, to be written over."""
        self.seek(0)
        self.position = None
        for layer in self.layers:
            layer.cross_k = layer.cross_v = None

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        """Keep batch rows ``index`` (in that order), in place: one ``index_select`` of the
        filled positions of all layers at once. As :meth:`KVCache.reorder`; ``index`` of another
        length than the rows makes a new storage."""
        filled = self.length
        if self.keys is not None and self.values is not None:
            if index.numel() != self.keys.shape[1]:
                self.keys, self.values = (t.index_select(1, index)
                                          for t in (self.keys, self.values))
            elif filled:
                for t in (self.keys, self.values):
                    t[:, :, :, :filled] = t[:, :, :, :filled].index_select(1, index)
        if cross:
            for layer in self.layers:
                if layer.cross_k is not None and layer.cross_v is not None:
                    layer.keep_cross(layer.cross_k.index_select(0, index),
                                     layer.cross_v.index_select(0, index))
