"""A trained model read as a *plain* Post-LN or Pre-LN Transformer, with what folds folded in.

``transformers`` has architectures for the two classic placements only, so a scheme exports when
its model *is* one of them once its extra constants are moved into the weights. Each residual
connection says which form it has (:meth:`~normzoo.residual.base.Residual.plain_form`, a
:class:`~normzoo.residual.base.PlainForm` or the reason it has none), so this module names no
scheme. The built-ins that fold:

* **DeepNorm** ``LN(αx + f(x))``: LN is scale-invariant, so this is ``LN(x + f(x)/α)`` with
  LN's ε divided by α² (the two are equal to the last bit of arithmetic only when ε matches).
  Dividing the last matrix and bias of each branch by α gives a Post-LN model.
* **LayerScale** ``x + diag(l) f(LN(x))``: ``diag(l)`` multiplies the rows of each branch's last
  matrix and its bias, giving a Pre-LN model.
* **LayerNorm Scaling** ``x + f(LN(x)/√l)``: 1/√l multiplies the norm's gain and bias.

Everything else a scheme adds (Admin's per-channel ω, ResiDual's second stream, norms inside or
after the branch, no norms at all) has no counterpart there and is refused with the reason.

The result, :class:`PlainModel`, holds the weights under architecture-neutral names
(``encoder.3.self.q.weight``); :mod:`normzoo.export.hf.architectures` renames them for each target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from normzoo.errors import NormzooError
from normzoo.models.families import DecoderModel, EncoderModel, Seq2SeqModel, TransformerModel
from normzoo.nn.norms import LayerNorm
from normzoo.residual.base import PlainForm, StreamEnds


class NotMappable(NormzooError):
    """The model has no counterpart among ``transformers``' architectures (exit 2)."""


Placement = Literal["post", "pre"]
Linear = dict[str, torch.Tensor]  # a weight and its bias (zeros where the model has none)


@dataclass
class PlainModel:
    """A Post-LN or Pre-LN model's weights under neutral names, and how it was folded."""

    family: str  # model.family's value: config.family_info says what it is
    placement: Placement
    scheme: str
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    eps: float = 1e-5  # the LN ε the exported model should use on its stream
    folded: str = ""  # what was moved into the weights, for the model card
    embedding_norm: bool = False

    def depth(self, stack: str) -> int:
        return len({k.split(".")[1] for k in self.weights
                    if k.startswith(f"{stack}.") and k.split(".")[1].isdigit()})


def _norm(norm: nn.Module, where: str, scale: float = 1.0
          ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """A LayerNorm's gain, bias (times ``scale``: the norm's output scaled) and ε."""
    if not isinstance(norm, LayerNorm) or norm.weight is None:
        kind = "LayerNorm without a learned scale" if isinstance(norm, LayerNorm) else (
            type(norm).__name__)
        raise NotMappable(f"the {where} is {kind}; the transformers architectures normzoo maps "
                          "to use LayerNorm with a learned scale and bias (model.norm: layernorm)")
    bias = norm.bias if norm.bias is not None else torch.zeros_like(norm.weight)  # bias: false
    return norm.weight.detach() * scale, bias.detach() * scale, norm.eps


def plain_form(residual: nn.Module) -> PlainForm:
    """The connection's plain form, or :class:`NotMappable` with its reason."""
    form = residual.plain_form() if hasattr(residual, "plain_form") else (
        f"{type(residual).__name__} is not a residual connection normzoo knows")
    if isinstance(form, str):
        raise NotMappable(form)
    return form


def _linear(layer: nn.Linear, rows: slice = slice(None)) -> Linear:
    weight = layer.weight.detach()[rows]
    bias = (layer.bias.detach()[rows] if layer.bias is not None
            else torch.zeros(weight.shape[0], dtype=weight.dtype))
    return {"weight": weight, "bias": bias}


def _attention(attn: nn.Module) -> dict[str, Linear]:
    d = attn.dim
    if attn.cross:
        parts = {"q": _linear(attn.q_proj), "k": _linear(attn.kv_proj, slice(0, d)),
                 "v": _linear(attn.kv_proj, slice(d, 2 * d))}
    elif attn.fused:
        parts = {role: _linear(attn.qkv_proj, slice(i * d, (i + 1) * d))
                 for i, role in enumerate("qkv")}
    else:
        parts = {"q": _linear(attn.q_proj), "k": _linear(attn.k_proj), "v": _linear(attn.v_proj)}
    return {**parts, "o": _linear(attn.out_proj)}


def _scaled(linear: Linear, scale: torch.Tensor | float) -> Linear:
    """``diag(scale) W`` and ``scale ⊙ b``: the branch's output multiplied by ``scale``."""
    if isinstance(scale, float) and scale == 1.0:
        return linear
    column = scale[:, None] if torch.is_tensor(scale) else scale
    return {"weight": linear["weight"] * column, "bias": linear["bias"] * scale}


class _Reader:
    """Walks one model's stacks, folding each residual as it goes."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.placements: set[Placement] = set()
        self.eps: set[float] = set()
        self.eps_scales: set[float] = set()
        self.folded: dict[str, dict[str, str]] = {}  # what was folded -> {stack: constant}

    def put(self, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
        for name, tensor in tensors.items():
            self.weights[f"{prefix}.{name}"] = tensor.detach().float().clone()

    def norm(self, prefix: str, norm: nn.Module, where: str, stream: bool = True,
             scale: float = 1.0) -> None:
        weight, bias, eps = _norm(norm, where, scale)
        self.put(prefix, {"weight": weight, "bias": bias})
        if stream:
            self.eps.add(eps)

    def sublayer(self, prefix: str, residual: nn.Module, parts: dict[str, Linear], last: str,
                 where: str) -> None:
        form = plain_form(residual)
        self.placements.add(form.placement)
        self.eps_scales.add(form.eps_scale)
        if form.folded:
            self.folded.setdefault(form.folded, {}).setdefault(prefix.split(".")[0],
                                                               form.constant)
        for role, linear in parts.items():
            self.put(f"{prefix}.{role}",
                     _scaled(linear, form.branch_scale) if role == last else linear)
        self.norm(f"{prefix}_norm", residual.norm, where, scale=form.norm_scale)

    def stack(self, name: str, stack: nn.Module) -> None:
        if not isinstance(stack.embedding_norm, nn.Identity):
            self.norm(f"{name}.embedding_norm", stack.embedding_norm, f"{name} embedding norm")
        for i, layer in enumerate(stack.layers):
            where = f"norm of {name} layer {i}"
            self.sublayer(f"{name}.{i}.self", layer.self_attn_residual,
                          _attention(layer.self_attn), "o", where)
            if getattr(layer, "cross_attn", None) is not None:
                self.sublayer(f"{name}.{i}.cross", layer.cross_attn_residual,
                              _attention(layer.cross_attn), "o", where)
            ffn = {"in": _linear(layer.ffn.ffn_in), "out": _linear(layer.ffn.ffn_out)}
            self.sublayer(f"{name}.{i}.ffn", layer.ffn_residual, ffn, "out", where)
        if type(stack.ends) is not StreamEnds:
            raise NotMappable(f"the {name}'s stream ends in {type(stack.ends).__name__}, not a "
                              "single stream with an optional final norm")
        final = stack.ends.final_norm
        if final is not None:
            self.norm(f"{name}.final_norm", final, f"{name} final norm")


def scheme_inside(model: TransformerModel) -> str | None:
    """A residual scheme's module inside a sublayer, in words (its own queries-and-keys module,
    score scale or feed-forward scales: the contract's ``attention_qk``, ``attention_scale``,
    ``ffn_scales``), or None: no transformers architecture computes them, whatever form the
    scheme's connections fold into."""
    for name, module in model.named_modules():
        if getattr(module, "qk", None) is not None:
            return (f"{name} has a scheme's module on its queries and keys "
                    f"({type(module.qk).__name__})")
        if getattr(module, "scale", None) is not None and hasattr(module, "qk"):
            return f"{name} scales its attention scores by {module.scale:g}, not 1/sqrt(head_dim)"
        if getattr(module, "scales", None) is not None:
            return (f"{name} has a scheme's scales on its pre-activations "
                    f"({type(module.scales).__name__})")
    return None


def _check_layers(model: TransformerModel) -> None:
    inside = scheme_inside(model)
    if inside is not None:
        raise NotMappable(inside)
    config = model.config
    if config.positions == "rope":
        raise NotMappable("model.positions is rope; the transformers architectures normzoo maps "
                          "to add a position table to the embeddings")
    if config.kv_heads not in (None, config.heads):
        raise NotMappable(f"model.kv_heads={config.kv_heads} is grouped-query attention; the "
                          "transformers architectures normzoo maps to have as many key/value "
                          "heads as query heads")
    if config.activation not in ("relu", "gelu", "silu"):
        raise NotMappable(f"model.activation={config.activation} is a gated feed-forward; the "
                          "transformers architectures normzoo maps to have an ungated one")
    if config.qk_norm is not None:
        raise NotMappable(f"model.qk_norm={config.qk_norm} normalises queries and keys; the "
                          "BART/BERT/GPT-2 architectures normzoo maps to have no such norm")
    for module in model.modules():
        inner = getattr(module, "inner_norm", None)
        if inner is not None and not isinstance(inner, nn.Identity):
            raise NotMappable("the model has norms inside its branches (Sub-LN); no "
                              "transformers architecture of these families has them")


def _residuals(model: TransformerModel) -> list[nn.Module]:
    return [getattr(layer, f"{kind}_residual") for stack in ("encoder", "decoder")
            for layer in getattr(getattr(model, stack, None), "layers", [])
            for kind in ("self_attn", "cross_attn", "ffn")
            if getattr(layer, f"{kind}_residual", None) is not None]


def plain_model(model: TransformerModel, scheme: str) -> PlainModel:
    """``model`` as a plain Post-LN or Pre-LN model, or :class:`NotMappable` saying why not.

    ``scheme`` is the recipe's name for it, recorded for the model card."""
    for residual in _residuals(model):  # the scheme first: the likeliest reason
        plain_form(residual)
    _check_layers(model)
    reader = _Reader()
    if isinstance(model, Seq2SeqModel):
        if model.decoder_embeddings.tokens is not model.encoder_embeddings.tokens:
            raise NotMappable("model.share_embeddings is false; the transformers "
                              "encoder-decoders normzoo maps to share one embedding")
        embeddings = model.encoder_embeddings
        reader.stack("encoder", model.encoder)
        reader.stack("decoder", model.decoder)
        # Learned positions are a table per stack; sinusoids are the same table twice.
        reader.put("decoder", {"positions": model.decoder_embeddings.position_table()})
    elif isinstance(model, DecoderModel):
        embeddings = model.embeddings
        reader.stack("decoder", model.decoder)
    elif isinstance(model, EncoderModel):
        embeddings = model.embeddings
        reader.stack("encoder", model.encoder)
        reader.put("head.dense", _linear(model.head_dense))
        reader.norm("head.norm", model.head_norm, "masked-LM head norm", stream=False)
        bias = model.output_bias  # None with model.bias: false: zeros in the target
        reader.put("output", {"bias": bias if bias is not None
                              else torch.zeros(model.config.vocab_size)})
    else:
        raise NotMappable(f"{type(model).__name__} is not a normzoo model family")
    reader.put("embed", {"tokens": embeddings.tokens.weight})
    family = model.config.family_info
    reader.put(family.stacks[0], {"positions": embeddings.position_table()})
    reader.weights["embed.scale"] = torch.tensor(embeddings.scale)
    output = model.output
    reader.put("output", {"weight": output.tied.weight if output.tied is not None
                          else output.weight})
    if len(reader.placements) != 1:
        raise NotMappable("the model mixes Post-LN and Pre-LN residuals")
    return PlainModel(
        family=family.name,
        placement=reader.placements.pop(),
        scheme=scheme,
        weights=reader.weights,
        eps=_stream_eps(reader),
        folded=_folded(reader.folded),
        embedding_norm=any(k.endswith("embedding_norm.weight") for k in reader.weights),
    )


def _stream_eps(reader: _Reader) -> float:
    """The ε that makes the plain model equal the scheme's: DeepNorm's LN(αy) with ε is
    LN(y) with ε/α², exact only where every connection scales ε alike (one α: one stack)."""
    eps = max(reader.eps) if reader.eps else 1e-5
    if len(reader.eps_scales) == 1:
        (scale,) = reader.eps_scales
        return eps * scale
    return eps


def _folded(folded: dict[str, dict[str, str]]) -> str:
    """What was moved into the weights, with each stack's constant where there is one."""
    parts = []
    for text, stacks in folded.items():
        each = ", ".join(f"{stack} {constant}" for stack, constant in stacks.items() if constant)
        parts.append(f"{text} ({each})" if each else text)
    return "; ".join(parts)
