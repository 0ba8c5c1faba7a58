"""Measure a model's residual streams, branches, norms and gradients on one batch.

Pure torch (no Lightning), so the training callback and ad-hoc analysis share it. Every value
is averaged over the real (non-padding) tokens of the batch, using the padding mask the stacks
publish (:mod:`normzoo.nn.padding`). Names follow the module tree: ``encoder.layers.3`` for a
layer, ``encoder.layers.3.self_attn`` for a sublayer, the module path for a norm.

* ``stream_norm``: mean L2 norm of a layer's output stream (ResiDual: its Post-LN stream).
* ``layer_cosine``: mean cosine similarity between a layer's input and output streams, i.e.
  between consecutive layers' outputs (layer 0: against the embeddings).
* ``branch_ratio``: mean ||branch term|| / mean ||stream term|| of each residual connection, the
  two terms as its scheme sums them (:meth:`~normzoo.residual.base.Residual.terms`): ||f(x)|| /
  ||x|| for Pre-LN and Post-LN, ||a f(x)|| / ||x|| for ReZero (0 at init), ||f(x)|| / ||alpha
  x|| for DeepNorm; shows how much each sublayer still changes the stream.
* ``branch_norm``: mean ||branch term|| of each residual connection, the numerator of
  ``branch_ratio``: whether a deep branch shrinks or the stream beside it grows, which the ratio
  alone cannot tell.
* ``norm_input``: root mean square of what enters each norm.
* ``grad_norm``: L2 norm of the gradients of a layer's and of a sublayer's parameters (its
  residual connection's norms and scales included).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from normzoo.models.layers import DecoderLayer, EncoderLayer
from normzoo.nn.norms import DyT, LayerNorm, MaskedBatchNorm, RMSNorm, ScaleNorm
from normzoo.nn.padding import current_padding_mask

SUBLAYERS = ("self_attn", "cross_attn", "ffn")
NORM_TYPES: tuple[type[nn.Module], ...] = (LayerNorm, RMSNorm, ScaleNorm, DyT, MaskedBatchNorm)


@dataclass
class Measurements:
    """One batch's measurements, each a ``name -> value`` mapping in forward order."""

    stream_norm: dict[str, float] = field(default_factory=dict)
    layer_cosine: dict[str, float] = field(default_factory=dict)
    branch_ratio: dict[str, float] = field(default_factory=dict)
    branch_norm: dict[str, float] = field(default_factory=dict)
    norm_input: dict[str, float] = field(default_factory=dict)
    grad_norm: dict[str, float] = field(default_factory=dict)

    def flat(self) -> dict[str, float]:
        """``metric/name -> value``, for loggers."""
        return {f"{metric}/{name}": value for metric, values in vars(self).items()
                for name, value in values.items()}


def _stream(x):
    """The tensor of a stream state (ResiDual carries two; its layers read the first)."""
    return x[0] if isinstance(x, tuple) else x


def _real(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[tokens, dim]``, padding positions dropped. A stream of several copies
    (``[batch, time, copies, dim]``, Hyper-Connections) counts every copy of every real token."""
    mask = current_padding_mask()
    x = x.detach().float()
    if mask is not None and mask.shape == x.shape[:mask.dim()] and x.dim() > mask.dim():
        x = x[~mask]
    return x.reshape(-1, x.shape[-1])


def mean_norm(x: torch.Tensor) -> float:
    return _real(x).norm(dim=-1).mean().item()


def rms(x: torch.Tensor) -> float:
    return _real(x).pow(2).mean().sqrt().item()


def mean_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(_real(a), _real(b), dim=-1).mean().item()


def layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's Transformer layers, in forward order, with their names."""
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, (EncoderLayer, DecoderLayer))]


def sublayers(layer: nn.Module) -> Iterator[tuple[str, nn.Module, nn.Module]]:
    """(kind, sublayer module, its residual connection) for each sublayer the layer has."""
    for kind in SUBLAYERS:
        module = getattr(layer, kind, None)
        if module is not None:
            yield kind, module, getattr(layer, f"{kind}_residual")


@contextmanager
def probe(model: nn.Module) -> Iterator[Measurements]:
    """Record forward measurements of everything run inside the block."""
    found = Measurements()
    branch: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    entering: dict[str, torch.Tensor] = {}  # the stream entering each residual connection
    outputs: dict[str, torch.Tensor] = {}  # each sublayer's output
    handles = []

    def on_layer(name):
        def hook(module, args, output):
            x_in, x_out = _stream(args[0]), _stream(output)
            found.stream_norm[name] = mean_norm(x_out)
            found.layer_cosine[name] = mean_cosine(x_in, x_out)
        return hook

    def on_residual_input(name):
        def hook(module, args):
            entering[name] = _stream(args[0])
        return hook

    def on_sublayer_output(name):
        def hook(module, args, output):
            outputs[name] = output
        return hook

    def on_residual_output(name):
        def hook(module, args, output):
            x, out = entering.pop(name, None), outputs.pop(name, None)
            if x is not None and out is not None:
                with torch.no_grad():
                    stream_term, branch_term = module.terms(x, out)
                branch[name] = [mean_norm(branch_term), mean_norm(stream_term)]
        return hook

    def on_norm(name):
        def hook(module, args):
            found.norm_input[name] = rms(args[0])
        return hook

    for name, layer in layers(model):
        handles.append(layer.register_forward_hook(on_layer(name)))
        for kind, module, residual in sublayers(layer):
            key = f"{name}.{kind}"
            handles.append(residual.register_forward_pre_hook(on_residual_input(key)))
            handles.append(module.register_forward_hook(on_sublayer_output(key)))
            handles.append(residual.register_forward_hook(on_residual_output(key)))
    for name, module in model.named_modules():
        if isinstance(module, NORM_TYPES):
            handles.append(module.register_forward_pre_hook(on_norm(name)))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()
        for key, (branch_norm, stream_norm) in branch.items():
            found.branch_ratio[key] = branch_norm / stream_norm if stream_norm else math.inf
            found.branch_norm[key] = branch_norm


def gradient_norms(model: nn.Module) -> dict[str, float]:
    """Gradient L2 norm of each layer and each sublayer (after ``backward``)."""
    result: dict[str, float] = {}

    def norm(modules: list[nn.Module]) -> float:
        grads = [p.grad.detach().float().pow(2).sum() for m in modules for p in m.parameters()
                 if p.grad is not None]
        return torch.stack(grads).sum().sqrt().item() if grads else 0.0

    for name, layer in layers(model):
        result[name] = norm([layer])
        for kind, module, residual in sublayers(layer):
            result[f"{name}.{kind}"] = norm([module, residual])
    return result


def first_non_finite(model: nn.Module, run_forward) -> str | None:
    """The first module, in execution order, whose output is not finite (or None).

    Used after a divergence, on the batch that diverged: where the NaN/inf first appears in the
    forward pass names the layer that produced it.
    """
    seen: list[str] = []
    handles = []

    def watch(name):
        def hook(module, args, output):
            out = _stream(output)
            if not seen and torch.is_tensor(out) and not torch.isfinite(out).all():
                seen.append(name)
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(watch(name)))
    try:
        with torch.no_grad():
            run_forward()
    finally:
        for handle in handles:
            handle.remove()
    return seen[0] if seen else None


def first_non_finite_gradient(model: nn.Module) -> str | None:
    """The first parameter (in model order) whose gradient is not finite."""
    for name, param in model.named_parameters():
        if param.grad is not None and not torch.isfinite(param.grad).all():
            return name
    return None
