"""``trainer.compile``'s step: the model and its loss as one compiled region, each batch's
lengths padded up to a few shapes, and TorchDynamo's compiles counted.

Token-budget batches come in every length (Multi30k: 8 to 59 tokens a side, 33 distinct
source/target pairs in 200 batches). The step compiles with dynamic shapes, so that one graph
takes them all. Two things compiled it again: the blocked cross-entropy's loop, whose trip count
is the batch's token count (a new graph per batch; under compile the loss is
``F.cross_entropy``, :func:`normzoo.nn.token_loss.token_terms`), and a guard on whether the
padding mask's thread-local had been set yet (:mod:`normzoo.nn.padding`).

Padding the time dimension up to a multiple of ``trainer.compile_pad_multiple`` leaves a
handful of shapes (4 at 16 on Multi30k), for modes where each shape costs a graph of its own.
With dynamic shapes it only adds work (a third more time a step at 16 on Multi30k), so it is
off by default. Padding is invisible: the models mask padded keys (``PAD`` tokens) in attention
and in masked norms, every other layer works token by token, and the loss skips the padded
labels, so a padded batch has the loss and the gradients of the unpadded one
(``tests/test_compile_buckets.py``).

Plain torch, no Lightning: the task calls it, and logs what :class:`CompileCount` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F


def padded_length(length: int, multiple: int, cap: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``, but never past ``cap`` (the model's
    ``max_positions``: a learned or sinusoidal table has no row beyond it), nor below
    ``length``."""
    return max(length, min(-(-length // multiple) * multiple, cap))


def pad_lengths(batch: Mapping[str, Any], fill: Mapping[str, int], multiple: int,
                cap: int) -> dict[str, torch.Tensor]:
    """The ``[batch, time]`` tensors named in ``fill`` (name -> the value padding takes there:
    ``PAD`` for tokens, the ignored label for labels), right-padded along time up to
    :func:`padded_length`. Only these go into the compiled region: the host-side counts of a
    batch (``ntokens``, an ``int``) would make TorchDynamo specialise on their value and compile
    again for every batch."""
    out = {}
    for name, value in fill.items():
        tensor = batch[name]
        extra = padded_length(tensor.shape[1], multiple, cap) - tensor.shape[1]
        out[name] = F.pad(tensor, (0, extra), value=value) if extra else tensor
    return out


# What turns the traced graphs into code. The tests trace with "eager": TorchDynamo's guards,
# graphs and compiles are the same, without inductor's minute of C++ generation on a CPU.
BACKEND = "inductor"


def compile_step(fn: Callable[..., Any], mode: bool | str) -> Callable[..., Any]:
    """``fn`` (the task's loss on a batch) through ``torch.compile`` in ``mode``, with dynamic
    shapes: the batch dimension changes with every token-budget batch and the padded lengths
    with the bucket, and one graph that takes them all compiles once, where static shapes
    compile once per shape and fall back to eager past TorchDynamo's recompile limit (8 per
    function; a run with validation counts each training shape twice)."""
    if BACKEND != "inductor":  # the modes are inductor's
        return torch.compile(fn, backend=BACKEND, dynamic=True)
    return torch.compile(fn, mode="default" if mode is True else mode, dynamic=True)


class CompileCount:
    """TorchDynamo's compiles in this process since it was made: ``compiles`` counts every
    frame compiled (a new shape, a graph break's continuation, training against validation
    mode), and :meth:`new_since` tells a caller what compiled since it last asked and why,
    where TorchDynamo kept a reason (the failed guard of a recompile)."""

    def __init__(self) -> None:
        self._start = self._total()
        self._seen = 0

    @staticmethod
    def _total() -> int:
        from torch._dynamo.utils import counters

        return int(counters["frames"]["ok"])

    @property
    def compiles(self) -> int:
        return self._total() - self._start

    def new_since(self) -> tuple[int, list[str]]:
        """The compiles since the last call, and the recompile reasons TorchDynamo recorded for
        them (its recent compilations' records; empty where it kept none)."""
        now = self.compiles
        fresh, self._seen = now - self._seen, now
        if fresh <= 0:
            return 0, []
        try:
            from torch._dynamo.utils import get_compilation_metrics

            records = get_compilation_metrics()[-fresh:]
        except Exception:  # a private record of torch's: a count must not stop the run
            return fresh, []
        return fresh, [r.recompile_reason for r in records if r.recompile_reason]
