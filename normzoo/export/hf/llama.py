"""A decoder that *is* a Llama, exported as ``LlamaForCausalLM``.

``transformers``' Llama (and what serves its directories, vLLM and TGI) computes, per layer,

    h = x + W_o attn(RoPE(W_q n), RoPE(W_k n), W_v n),  n = RMSNorm(x)
    y = h + W_down(silu(W_gate m) * (W_up m)),          m = RMSNorm(h)

with rotary positions in the rotate-half convention, grouped-query attention, no biases, a final
RMSNorm and unscaled embeddings. A normzoo decoder computes exactly that when its recipe says
Pre-LN, RMSNorm, ``positions: rope``, SwiGLU and ``bias: false`` (``recipes/gpt_llama.yaml``);
the weights then copy over one for one (normzoo's ``ffn_in`` is Llama's ``gate_proj``, the one
the activation is applied to, ``ffn_gate`` its ``up_proj``). A model that scales its embeddings
by √d (``embed_scale: true``) exports with the factor folded into the input embedding and the
output projection stored untied. Anything else returns ``None`` from :func:`llama_target`, and
the model goes to the plain Post-LN/Pre-LN targets (:mod:`normzoo.export.hf.architectures`),
which say why they cannot take it if they cannot.

QK-norm (``model.qk_norm: rmsnorm``, a learned per-head scale shared across heads, before the
rotation) is Qwen3's attention: such a decoder exports as ``Qwen3ForCausalLM``, which is the
Llama above plus ``q_norm`` and ``k_norm`` on every head's queries and keys.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.export.hf.architectures import Target
from normzoo.export.hf.plain import PlainModel, scheme_inside
from normzoo.models.config import ModelConfig
from normzoo.models.families import DecoderModel, TransformerModel
from normzoo.nn.norms import RMSNorm
from normzoo.residual.base import PlainForm, StreamEnds

ARCHITECTURE = "LlamaForCausalLM"
QK_NORM_ARCHITECTURE = "Qwen3ForCausalLM"  # Llama with a per-head RMSNorm on q and k


def _rms(norm: nn.Module | None) -> RMSNorm | None:
    return norm if type(norm) is RMSNorm and norm.weight is not None else None


def _pre_form(residual: nn.Module) -> PlainForm | str:
    """The connection's plain form where it is Pre-LN's ``x + f(s * norm(x))`` (Llama's, once
    a scale ``s`` is multiplied into the norm's gain), else why not."""
    form = residual.plain_form() if hasattr(residual, "plain_form") else "not a residual"
    if isinstance(form, str):
        return form
    return form.pre_norm_problem() or form


def why_not_llama(model: TransformerModel) -> str | None:
    """The first piece of ``model`` that computes something other than Llama's counterpart,
    in words, or ``None`` where it is a Llama."""
    config = model.config
    if not isinstance(model, DecoderModel):
        return f"it is a {config.family} model, not a decoder"
    if config.positions != "rope":
        return f"model.positions is {config.positions}, not rope"
    if config.activation != "swiglu":
        return f"model.activation is {config.activation}, not swiglu"
    qk_norms = [norm for layer in model.decoder.layers
                for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm) if norm is not None]
    if qk_norms and any(_rms(norm) is None for norm in qk_norms):
        return (f"model.qk_norm is {config.qk_norm}, not an RMSNorm with a learned scale "
                "(Qwen3's q_norm and k_norm)")
    biases = [n for n, _ in model.named_parameters() if n.rpartition(".")[2] == "bias"]
    if biases:
        return f"it has biases ({biases[0]}, ...): model.bias must be false"
    stack = model.decoder
    norms = []
    for i, layer in enumerate(stack.layers):  # the scheme first: the likeliest difference
        for residual in (layer.self_attn_residual, layer.ffn_residual):
            form = _pre_form(residual)
            if isinstance(form, str):
                return (f"layer {i}'s residual is {type(residual).__name__} (model.residual: "
                        f"{config.residual.name}), not Pre-LN's x + f(norm(x)): {form}")
            if _rms(residual.norm) is None:
                return (f"layer {i}'s norm is {type(residual.norm).__name__}, not RMSNorm "
                        "with a learned scale")
            norms.append(residual.norm)
        if not all(isinstance(m.inner_norm, nn.Identity) for m in (layer.self_attn, layer.ffn)):
            return f"layer {i} has norms inside its branches"
    inside = scheme_inside(model)
    if inside is not None:
        return inside
    if not isinstance(stack.embedding_norm, nn.Identity):
        return "it normalises its embeddings"
    if type(stack.ends) is not StreamEnds or _rms(stack.ends.final_norm) is None:
        return "its stack does not end in one RMSNorm with a learned scale"
    norms.append(stack.ends.final_norm)
    norms += qk_norms
    if len({n.eps for n in norms}) != 1:
        return "its RMSNorms do not share one epsilon"
    return None


def llama_target(model: TransformerModel, scheme: str) -> tuple[PlainModel, Target] | None:
    """``model`` mapped onto ``LlamaForCausalLM``, or ``None`` where it is not a Llama.

    The :class:`PlainModel`'s weights already carry the target's names, so the target's
    builder (:func:`llama`) only adds the config."""
    if why_not_llama(model) is not None:
        return None
    weights: dict[str, torch.Tensor] = {}
    notes: set[str] = set()  # what the scheme folded into the weights

    def put(name: str, tensor: torch.Tensor) -> None:
        weights[name] = tensor.detach().float().clone()

    stack = model.decoder
    for i, layer in enumerate(stack.layers):
        base = f"model.layers.{i}"
        roles = layer.self_attn.role_weights()
        for role, name in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("out", "o_proj")):
            put(f"{base}.self_attn.{name}.weight", roles[role])
        for name in ("q_norm", "k_norm"):
            if (norm := getattr(layer.self_attn, name)) is not None:
                put(f"{base}.self_attn.{name}.weight", norm.weight)
        ffn = layer.ffn
        put(f"{base}.mlp.gate_proj.weight", ffn.ffn_in.weight)
        put(f"{base}.mlp.up_proj.weight", ffn.ffn_gate.weight)
        put(f"{base}.mlp.down_proj.weight", ffn.ffn_out.weight)
        for residual, name in ((layer.self_attn_residual, "input_layernorm"),
                               (layer.ffn_residual, "post_attention_layernorm")):
            form = _pre_form(residual)
            assert isinstance(form, PlainForm)  # why_not_llama checked it
            put(f"{base}.{name}.weight", residual.norm.weight * form.norm_scale)
            if form.folded:
                notes.add(form.folded)
    put("model.norm.weight", stack.ends.final_norm.weight)
    embeddings = model.embeddings
    tokens = embeddings.tokens.weight
    output = model.output
    tied = output.tied is not None and embeddings.scale == 1.0
    put("model.embed_tokens.weight", tokens * embeddings.scale)
    if not tied:
        put("lm_head.weight", output.tied.weight if output.tied is not None else output.weight)
    folded = "; ".join(sorted(notes) + ([] if embeddings.scale == 1.0 else [
        f"the embeddings' √d scale ({embeddings.scale:.4g}) multiplied into the input "
        "embedding, with the output projection stored untied"]))
    config = model.config
    plain = PlainModel(family=config.family, placement="pre", scheme=scheme, weights=weights,
                       eps=stack.ends.final_norm.eps, folded=folded)
    architecture = ARCHITECTURE if config.qk_norm is None else QK_NORM_ARCHITECTURE
    return plain, Target(architecture, config.family_info.hf.auto_class, llama)


def llama(plain: PlainModel, config: ModelConfig) -> tuple[Any, dict[str, torch.Tensor]]:
    """``LlamaConfig`` (``Qwen3Config`` with QK-norm) and weights for a :func:`llama_target`
    mapping."""
    import transformers
    from transformers import LlamaConfig, Qwen3Config

    qk_norm = any(name.endswith("q_norm.weight") for name in plain.weights)
    config_class, architecture = ((Qwen3Config, QK_NORM_ARCHITECTURE) if qk_norm
                                  else (LlamaConfig, ARCHITECTURE))

    heads = config.heads
    # transformers 5 keeps the base in rope_parameters; 4.x took rope_theta.
    rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base}}
            if int(transformers.__version__.split(".")[0]) >= 5
            else {"rope_theta": config.rope_base})
    hf_config = config_class(
        vocab_size=config.vocab_size, hidden_size=config.d_model,
        intermediate_size=config.ffn_dim, num_hidden_layers=config.decoder_layers,
        num_attention_heads=heads, num_key_value_heads=config.kv_heads or heads,
        head_dim=config.d_model // heads, hidden_act="silu",
        max_position_embeddings=config.max_positions, rms_norm_eps=plain.eps,
        attention_bias=False, mlp_bias=False,
        tie_word_embeddings="lm_head.weight" not in plain.weights,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
        architectures=[architecture], **rope)
    # Also at the top level, where readers written for transformers 4 (vLLM, llama.cpp's
    # converter) look for it and would otherwise assume 10,000.
    hf_config.rope_theta = config.rope_base
    weights = dict(plain.weights)
    if hf_config.tie_word_embeddings:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    return hf_config, weights
