"""The key/value cache of incremental decoding: each layer's keys and values so far, reordered
with the surviving beams."""

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
