"""``trainer.compile``'s step: the model and its loss as one compiled region, and
TorchDynamo's compiles counted.

Token-budget batches padded to their longest come in every length (Multi30k: 35 shapes an
epoch at 2,048 tokens). On a ladder of lengths (``data.buckets``, 12 rungs by default on a CUDA
device: :mod:`normzoo.data.shapes`) an epoch has about a dozen shapes, and the step compiles
with static shapes, once per shape and mode (CUDA graphs under ``reduce-overhead`` need them);
without one (``data.buckets: null``, the default on a CPU) it compiles with dynamic shapes, so
that one graph takes every length. On a CPU the dynamic graph pays better: on the ladder a
400-step run of the depth study's model compiled 15 static graphs, 2,023 s from a cold
inductor cache against 488 s and 2 compiles dynamic, for no faster a step
(``benchmarks/batch_shapes.py --compile``).

Two things once compiled it again for every batch: the blocked cross-entropy's loop, whose
trip count is the batch's token count (under compile the loss is ``F.cross_entropy``,
:func:`normzoo.nn.token_loss.token_terms`), and a guard on whether the padding mask's
thread-local had been set yet
(:mod:`normzoo.nn.padding`).

Padding is invisible: the models mask padded keys (``PAD`` tokens) in attention and in masked
norms, every other layer works token by token, and the loss skips the padded labels, so a
padded batch has the loss and the gradients of the unpadded one
(``tests/test_compile_buckets.py``).

Plain torch, no Lightning: the task calls it, and logs what :class:`CompileCount` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch


def compiled_inputs(batch: Mapping[str, Any], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The tensors of ``batch`` that the loss reads (``names``), and nothing else: the
    host-side counts of a batch (``ntokens``, an ``int``) would make TorchDynamo specialise on
    their value and compile again for every batch."""
    return {name: batch[name] for name in names}


# What turns the traced graphs into code. The tests trace with "eager": TorchDynamo's guards,
# graphs and compiles are the same, without inductor's minute of C++ generation on a CPU.
BACKEND = "inductor"


def compile_step(fn: Callable[..., Any], mode: bool | str,
                 shapes: int | None = None) -> Callable[..., Any]:
    """``fn`` (the task's loss on a batch) through ``torch.compile`` in ``mode``.

    With ``shapes`` (the batches come padded to a ladder of lengths, :mod:`normzoo.data.shapes`:
    about that many shapes an epoch), static shapes: one graph per shape, each specialised
    and free of the symbolic-shape guards and arithmetic of a dynamic graph (and what
    ``reduce-overhead``'s CUDA graphs need), compiled once per shape for training and once
    for validation; TorchDynamo's recompile limit (8 a function) is raised to hold them all,
    so none falls back to eager. Without, dynamic shapes: the batch dimension and lengths
    change with every token-budget batch, and one graph that takes them all compiles once."""
    dynamic = shapes is None
    if not dynamic:
        import torch._dynamo.config as dynamo

        # recompile_limit since torch 2.7; cache_size_limit before (an alias of it since)
        name = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
        setattr(dynamo, name, max(getattr(dynamo, name), recompiles_expected(shapes) + 8))
    if BACKEND != "inductor":  # the modes are inductor's
        return torch.compile(fn, backend=BACKEND, dynamic=dynamic)
    return torch.compile(fn, mode="default" if mode is True else mode, dynamic=dynamic)


def recompiles_expected(shapes: int | None) -> int:
    """Compiles a run makes without a word on stderr: with static ``shapes``, each shape's
    training and validation graph plus an epoch's last batch of each split; with dynamic
    shapes, training's graph, validation's, and a batch of one sentence (TorchDynamo
    specialises a dimension of size 1)."""
    return 4 if shapes is None else 2 * (shapes + 2)


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
