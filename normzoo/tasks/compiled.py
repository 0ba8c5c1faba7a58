"""``trainer.compile``'s step: the model and its loss as one compiled region, or each
Transformer layer and the model's ends as regions (``trainer.compile_scope``), and
TorchDynamo's compiles counted.

Compiled whole, a model is traced layer by layer, 12 layers of the depth study's model as
12 copies in one graph; compiled as regions (``layers``, :class:`RegionalStep`, as torchtune
and LitGPT compile), every layer of a stack reuses one graph. On the CPU the first compile of
the depth study's model took 59 s against 170 s whole, for a steady step within a few percent
(``benchmarks/compile_regions.py``); on an H200 the whole Transformer-base took 34 s a shape.

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
from torch import nn

from normzoo.models.stacks import DecoderStack, EncoderStack
from normzoo.nn.embeddings import Embeddings


def compiled_inputs(batch: Mapping[str, Any], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The tensors of ``batch`` that the loss reads (``names``), and nothing else: the
    host-side counts of a batch (``ntokens``, an ``int``) would make TorchDynamo specialise on
    their value and compile again for every batch."""
    return {name: batch[name] for name in names}


# What turns the traced graphs into code. The tests trace with "eager": TorchDynamo's guards,
# graphs and compiles are the same, without inductor's minute of C++ generation on a CPU.
BACKEND = "inductor"


def compile_step(fn: Callable[..., Any], mode: bool | str, shapes: int | None = None,
                 scope: str | None = None) -> Callable[..., Any]:
    """``fn`` (the task's loss on a batch) compiled in ``mode``: whole (``scope`` ``model``),
    or its model's layers and ends as regions (``layers``, :class:`RegionalStep`); ``auto``
    picks by the device the run trains on (:func:`scope_for`). ``scope`` None: the recipe's
    ``trainer.compile_scope``, where ``fn`` is a task's bound method (what the task passes).

    With ``shapes`` (the batches come padded to a ladder of lengths, :mod:`normzoo.data.shapes`:
    about that many shapes an epoch), static shapes: one graph per shape, each specialised
    and free of the symbolic-shape guards and arithmetic of a dynamic graph (and what
    ``reduce-overhead``'s CUDA graphs need), compiled once per shape for training and once
    for validation; TorchDynamo's recompile limit (8 a function) is raised to hold them all,
    so none falls back to eager. Without, dynamic shapes: the batch dimension and lengths
    change with every token-budget batch, and one graph that takes them all compiles once."""
    task = getattr(fn, "__self__", None)
    recipe = getattr(task, "recipe", None)
    if scope is None:
        scope = recipe.trainer.compile_scope if recipe is not None else "model"
    if scope == "auto":
        scope = scope_for(scope, run_device(recipe.trainer.accelerator if recipe else "auto"))
    model = getattr(task, "model", None)
    regional = scope == "layers" and model is not None and bool(regions(model)[0])
    if shapes is not None:  # a region's graphs (two embeddings of one class: twice as many)
        import torch._dynamo.config as dynamo

        # recompile_limit since torch 2.7; cache_size_limit before (an alias of it since)
        name = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
        limit = recompiles_expected(shapes) * (2 if regional else 1) + 8
        setattr(dynamo, name, max(getattr(dynamo, name), limit))
    if regional:
        return RegionalStep(fn, model, mode, shapes)
    whole = torch.compile(fn, **_options(mode, shapes))
    watched = list(model.modules()) if model is not None else []

    def step(*args: Any, **kwargs: Any) -> Any:
        if hooked(watched):
            return fn(*args, **kwargs)
        with _no_duck_shapes():
            return whole(*args, **kwargs)

    return step


def hooked(modules: Iterable[nn.Module]) -> bool:
    """Whether a forward hook watches any of ``modules`` (the diagnostics' probes, every
    ``diagnostics.every_steps``): such a step runs eager. Compiled, TorchDynamo ignores hooks
    added after a graph was made (it keeps no guard on them), and the probes read nothing;
    a hook a region calls is compiled itself, a graph break at each ``.item()``."""
    from torch.nn.modules import module

    return bool(module._global_forward_hooks or module._global_forward_pre_hooks) or any(
        m._forward_hooks or m._forward_pre_hooks for m in modules)


def _options(mode: bool | str, shapes: int | None) -> dict[str, Any]:
    """``torch.compile``'s arguments: static shapes on a ladder of ``shapes``, dynamic
    without; ``mode`` under inductor (the modes are inductor's), :data:`BACKEND` otherwise."""
    if BACKEND != "inductor":
        return {"backend": BACKEND, "dynamic": shapes is None}
    return {"mode": "default" if mode is True else mode, "dynamic": shapes is None}


def recompiles_expected(shapes: int | None, step: object = None) -> int:
    """Compiles a run makes without a word on stderr: with static ``shapes``, each shape's
    training and validation graph plus an epoch's last batch of each split; with dynamic
    shapes, training's graph, validation's, and a batch of one sentence (TorchDynamo
    specialises a dimension of size 1). Each of that many for every region of a
    :class:`RegionalStep` ``step`` (:attr:`RegionalStep.regions`), one otherwise."""
    return (4 if shapes is None else 2 * (shapes + 2)) * getattr(step, "regions", 1)


# trainer.compile_scope "auto": the scope a run gets by the type of device it trains on. The
# CPU's is measured (benchmarks/compile_regions.py, docs/benchmarks.md: the depth study's model,
# fp32, one thread: 59 s to the first compiled step's graphs against 170 s whole, steady steps
# 1.03x eager both, the layers' 0.96-0.99x the whole model's). CUDA's is not yet measured:
# there the whole model took 34 s per new batch shape for 1.09x eager on an H200
# (docs/benchmarks.md), and its ladder of a dozen static shapes pays that per shape, so CUDA
# gets layers until a GPU measures both. Another type of device (mps) keeps the whole model.
AUTO_SCOPE: dict[str, str] = {"cpu": "layers", "cuda": "layers"}


def scope_for(scope: str, device: str) -> str:
    """``trainer.compile_scope`` as it applies on a ``device`` type (``cpu``, ``cuda``, ...):
    ``auto`` is :data:`AUTO_SCOPE`'s pick for it, another scope itself."""
    return AUTO_SCOPE.get(device, "model") if scope == "auto" else scope


def run_device(accelerator: str) -> str:
    """The type of device ``trainer.accelerator`` trains on, as Lightning picks it: ``auto``
    a CUDA device where there is one, else Apple's ``mps`` where there is one, else the CPU."""
    if accelerator in ("gpu", "cuda"):
        return "cuda"
    if accelerator != "auto":
        return accelerator
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def regions(model: nn.Module) -> tuple[list[nn.Module], list[nn.Module]]:
    """What ``layers`` compiles, each module a region: every layer of the model's stacks
    (its ``EncoderStack`` and ``DecoderStack``), and its ends: the embeddings and each stack's
    stream ends (the final norm; a multi-stream scheme's streams merged). The output
    projection is one matrix product, which compiles to the same kernel; the loss, a function
    of the task's, stays eager. No layer (a task plugin's own model): the step compiles whole."""
    stacks = [m for m in model.modules() if isinstance(m, (EncoderStack, DecoderStack))]
    ends = [m for m in model.modules() if isinstance(m, Embeddings)]
    return [layer for stack in stacks for layer in stack.layers], ends + [
        stack.ends for stack in stacks]


def _no_duck_shapes() -> Any:
    """TorchDynamo's shape symbols without "duck sizing" while a step compiles: it gives sizes
    of one value one symbol, so a first batch whose source and target had one length compiled
    a graph for equal lengths, and the whole model compiled again at the first batch whose
    lengths differed (4 minutes on a CPU); and a batch of 128 sentences into layers of width
    128 was taken for the width, which specialised a layer's graph to 128 sentences."""
    from torch.fx.experimental import _config

    return _config.patch(use_duck_shape=False)


class RegionalStep:
    """``fn`` with its model's regions compiled (:func:`regions`), each module as
    ``nn.Module.compile`` compiles it (its call compiled in place, so parameter names keep no
    ``_orig_mod.`` prefix), but only while ``fn`` runs: decoding, diagnostics and whatever
    else calls the model outside the training and validation step stay eager, and so does a
    step whose modules a forward hook watches (:func:`hooked`).

    TorchDynamo compiles a module's ``forward`` once per shape and mode, and every instance
    of a class shares the graph (their parameters are its inputs): a 6-layer encoder compiles
    its layer once, not six times. :attr:`regions`, the graphs a shape costs: one per layer
    class, one per end module (a translation model's two embeddings see two lengths)."""

    def __init__(self, fn: Callable[..., Any], model: nn.Module, mode: bool | str,
                 shapes: int | None) -> None:
        self.fn = fn
        layers, ends = regions(model)
        self.modules = layers + ends
        self.compiled = [torch.compile(m._call_impl, **_options(mode, shapes))
                         for m in self.modules]
        self.regions = len({type(m) for m in layers}) + len(ends)
        self.watched = [sub for m in self.modules for sub in m.modules()]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if hooked(self.watched):  # the diagnostics probe this step: eager
            return self.fn(*args, **kwargs)
        before = [m._compiled_call_impl for m in self.modules]
        for module, compiled in zip(self.modules, self.compiled, strict=True):
            module._compiled_call_impl = compiled
        try:
            with _no_duck_shapes():
                return self.fn(*args, **kwargs)
        finally:
            for module, previous in zip(self.modules, before, strict=True):
                module._compiled_call_impl = previous


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
