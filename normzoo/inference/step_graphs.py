"""The decoder's one-token step for greedy and beam search: eager, or replayed as a CUDA graph.

On a GPU a decoding step is hundreds of small kernels, and launching them one by one from
Python costs more than running them: the step is what holds decoding back (issue 50: greedy
1.34x and beam 5 1.10x Hugging Face ``generate`` on an H200). So on CUDA the step is captured
once as a CUDA graph and replayed: over a :class:`~normzoo.nn.kv_cache.StaticKVCache` in
fixed-shape mode (one token, its position a device tensor, attention over the whole capacity
under the mask of the filled positions), so that every replay reads and writes the same tensors.
The first step runs eagerly: it computes cross-attention's keys and values, which stay in the
cache's tensors. A captured step is kept per model and shape (rows, the capacity and source
length rounded up to :data:`ROUND`, the autocast and inference-mode state, the weights'
addresses) and reused by later batches of that shape; the source is padded to the rounded length
and the padding masked. A model FSDP shards is never captured (its weights come and go).

Capturing can fail (an operation a graph cannot hold, a custom module that reads the device);
then the model decodes eagerly from then on, with a warning, once. ``graphs=False`` (an argument of
:func:`~normzoo.inference.decoding.greedy` and ``beam_search``) or ``NORMZOO_DECODE_GRAPHS=0``
turns capturing off. On a CPU the step is eager over the growing cache: there the static one
was slower (a beam search's in-place reorder of the filled slice, and attention over its strided
views, cost more than concatenating). The fixed-shape step itself runs on a CPU too, which is
how the tests check that it computes what the eager step does.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections import OrderedDict
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from normzoo.models.families import Seq2SeqModel

GRAPHS_ENV = "NORMZOO_DECODE_GRAPHS"
ROUND = 16  # capacity and source length are rounded up to this, so that shapes repeat
KEEP = 4  # captured steps kept per model, the least recently used dropped first


def graphs_wanted(device: torch.device, graphs: bool | None) -> bool:
    """Whether to capture the step: only on CUDA; ``graphs`` None follows ``NORMZOO_DECODE_GRAPHS``
    (on unless it is ``0``)."""
    if device.type != "cuda":
        return False
    return os.environ.get(GRAPHS_ENV, "1") != "0" if graphs is None else graphs


class EagerStep:
    """``model.decode`` of one token over a growing cache, or over a static one of
    ``capacity`` positions."""

    def __init__(self, model: Seq2SeqModel, memory: torch.Tensor, memory_mask: torch.Tensor,
                 capacity: int | None = None) -> None:
        self.model, self.memory, self.memory_mask = model, memory, memory_mask
        self.cache = model.new_cache() if capacity is None else model.new_cache(capacity)

    def __call__(self, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """The logits ``[rows, vocab]`` after ``tokens`` ``[rows, 1]``, the step's inputs."""
        return self.model.decode(tokens, self.memory, self.memory_mask, self.cache)[:, -1]

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder(index, cross=False)  # a sentence's beams share its encoder keys


class Captured:
    """A captured step and the tensors it reads and writes, kept from batch to batch."""

    def __init__(self, model: Seq2SeqModel, rows: int, capacity: int, source: int,
                 device: torch.device) -> None:
        self.cache = model.new_cache(capacity)
        self.tokens = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.memory_mask = torch.ones((rows, source), dtype=torch.bool, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None
        self.failed = False


_CAPTURED: weakref.WeakKeyDictionary[nn.Module, OrderedDict[tuple, Captured]] = (
    weakref.WeakKeyDictionary())
_REFUSED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # capturing failed: eager from now on


def _round_up(n: int) -> int:
    return -(-n // ROUND) * ROUND


def _autocast(device: torch.device) -> tuple[Any, ...]:
    """The autocast state a step runs under, part of what a captured step is kept by."""
    enabled = torch.is_autocast_enabled(device.type)
    return (enabled, torch.get_autocast_dtype(device.type) if enabled else None)


def _sharded(model: nn.Module) -> bool:
    """Whether FSDP shards the model (``trainer.strategy=fsdp``'s validation decodes): its
    weights are gathered for each forward and freed after, so a graph would read freed memory."""
    return any(type(m).__name__.startswith(("FullyShardedDataParallel", "FSDP"))
               for m in model.modules())


def _weights(model: nn.Module) -> tuple[Any, ...]:
    """Where the weights are: a graph reads them at the addresses it was captured with."""
    return tuple((t.data_ptr(), t.dtype) for t in (*model.parameters(), *model.buffers()))


class GraphedStep:
    """The step as a CUDA graph over a static cache (see the module docstring); the same calls
    as :class:`EagerStep`."""

    def __init__(self, model: Seq2SeqModel, memory: torch.Tensor, memory_mask: torch.Tensor,
                 capacity: int) -> None:
        rows, source = memory_mask.shape
        device = memory.device
        self.model, self.device = model, device
        # Tensors made under inference mode cannot be written outside it: that is in the key.
        key = (rows, _round_up(capacity), _round_up(source), _autocast(device),
               torch.is_inference_mode_enabled(), _weights(model))
        kept = _CAPTURED.setdefault(model, OrderedDict())
        if key not in kept:
            kept[key] = Captured(model, rows, key[1], key[2], device)
            while len(kept) > KEEP:
                kept.popitem(last=False)
        kept.move_to_end(key)
        self.captured = captured = kept[key]
        captured.cache.reset()
        captured.memory_mask.fill_(True)
        captured.memory_mask[:, :source] = memory_mask
        self.memory = memory.new_zeros(rows, key[2], memory.shape[-1])
        self.memory[:, :source] = memory

    def __call__(self, tokens: torch.Tensor, step: int) -> torch.Tensor:
        captured = self.captured
        if step > 0 and not captured.failed:
            captured.tokens.copy_(tokens)
            captured.position.fill_(step)
            if captured.graph is None:
                self._capture()
            if captured.graph is not None:
                captured.graph.replay()
                captured.cache.seek(step + 1)
                return captured.logits
        captured.cache.position = None  # the first step, or capturing failed: eager
        return self.model.decode(tokens, self.memory, captured.memory_mask,
                                 captured.cache)[:, -1]

    def reorder(self, index: torch.Tensor) -> None:
        self.captured.cache.reorder(index, cross=False)

    def _fixed_step(self) -> torch.Tensor:
        captured = self.captured
        return self.model.decode(captured.tokens, None, captured.memory_mask,
                                 captured.cache)[:, -1]

    def _capture(self) -> None:
        """Capture the fixed-shape step: run once on a side stream (the replay that follows
        writes the same position again), then capture. Under autocast the casts are captured
        too (``cache_enabled=False``): a cast kept by the caller's autocast would be freed when
        it exits, under the graph's feet."""
        captured, device = self.captured, self.device
        enabled, dtype = _autocast(device)

        def casts() -> Any:
            return (torch.autocast(device.type, dtype=dtype, cache_enabled=False) if enabled
                    else nullcontext())

        captured.cache.position = captured.position
        try:
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream), casts():
                self._fixed_step()
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # thread_local: another thread's CUDA call (a data loader pinning memory during
            # validation) neither breaks the capture nor is refused.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"), casts():
                logits = self._fixed_step()
        except Exception as error:  # any failure to capture falls back to eager
            captured.failed = True
            _REFUSED.add(self.model)
            captured.cache.position = None
            warnings.warn(f"decoding runs eagerly: its step could not be captured as a CUDA "
                          f"graph ({type(error).__name__}: {error})", stacklevel=4)
            return
        captured.graph, captured.logits = graph, logits


def decoder_step(model: Seq2SeqModel, memory: torch.Tensor, memory_mask: torch.Tensor,
                 capacity: int, graphs: bool | None = None) -> EagerStep | GraphedStep:
    """The step for ``capacity`` tokens over ``memory``: a CUDA graph where
    :func:`graphs_wanted` says so, else eager over a growing cache."""
    if graphs_wanted(memory.device, graphs) and model not in _REFUSED and not _sharded(model):
        return GraphedStep(model, memory, memory_mask, capacity)
    return EagerStep(model, memory, memory_mask)
