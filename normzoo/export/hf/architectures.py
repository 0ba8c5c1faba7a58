"""The ``transformers`` architecture each plain model maps onto, layer for layer.

Chosen because their layers compute exactly what normzoo's do (read in ``transformers``' own
modelling code), not because they are the most famous:

====================  =========  ==========================  ===============================
family                placement  architecture                why this one
====================  =========  ==========================  ===============================
encoder-decoder       Post-LN    ``MarianMTModel``           Post-LN, √d-scaled embeddings, no
                                                             embedding LN, no final LN
encoder-decoder       Pre-LN     ``BlenderbotForConditio-    Pre-LN with a final LN per stack,
                                 nalGeneration``             √d-scaled embeddings, no embedding
                                                             LN, a position table from 0
decoder               Pre-LN     ``GPT2LMHeadModel``         Pre-LN, final LN, any FFN width
decoder               Post-LN    ``OpenAIGPTLMHeadModel``    Post-LN (GPT-1); FFN 4·d only,
                                                             ReLU or SiLU only
encoder               Post-LN    ``BertForMaskedLM``         Post-LN with an embedding LN and
                                                             BERT's masked-LM head
encoder               Pre-LN     ``MegatronBertForMaskedLM`` Pre-LN, final LN, no embedding LN
====================  =========  ==========================  ===============================

Each family names its two (:class:`~normzoo.models.family_info.HFMapping`); this module
writes each one's config and weights. Every target gets normzoo's position table (sinusoidal
or learned) as its own weights, so positions match whatever they were. Where a target does not
scale its embeddings by √d, the factor is folded into the input embedding and the output
projection is stored untied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.export.hf.plain import NotMappable, PlainModel
from normzoo.models.config import ModelConfig
from normzoo.models.family_info import family_info

Weights = dict[str, torch.Tensor]

@dataclass(frozen=True)
class Target:
    """One ``transformers`` architecture: its class, the Auto class that loads it, and the
    function that writes its config and weights from a plain model."""

    architecture: str
    auto_class: str
    build: Callable[[PlainModel, ModelConfig], tuple[Any, Weights]]

def _linear(w: Weights, source: str, target: str) -> Weights:
    return {f"{target}.weight": w[f"{source}.weight"], f"{target}.bias": w[f"{source}.bias"]}

def _conv1d(w: Weights, sources: list[str], target: str) -> Weights:
    """GPT's ``Conv1D`` keeps ``[in, out]`` matrices: normzoo's ``[out, in]`` transposed."""
    weight = torch.cat([w[f"{s}.weight"] for s in sources]).t().contiguous()
    return {f"{target}.weight": weight,
            f"{target}.bias": torch.cat([w[f"{s}.bias"] for s in sources])}

def _scaled_embeddings(plain: PlainModel) -> tuple[torch.Tensor, torch.Tensor]:
    """(input embedding with √d folded in, output projection) for targets that do not scale."""
    w = plain.weights
    return w["embed.tokens"] * w["embed.scale"], w["output.weight"]

def _shape(config: ModelConfig) -> dict[str, Any]:
    return {"vocab_size": config.vocab_size, "pad_token_id": PAD, "bos_token_id": BOS,
            "eos_token_id": EOS}

# -- encoder-decoder -------------------------------------------------------------------------
def _bart_layers(plain: PlainModel, final_norms: bool) -> Weights:
    """The layer weights of the BART family (Marian, Blenderbot), which name them alike."""
    w, out = plain.weights, {}
    for stack in ("encoder", "decoder"):
        base = f"model.{stack}"
        out[f"{base}.embed_positions.weight"] = w[f"{stack}.positions"]
        for i in range(plain.depth(stack)):
            src, dst = f"{stack}.{i}", f"{base}.layers.{i}"
            sublayers = [("self", "self_attn")]
            if stack == "decoder":
                sublayers.append(("cross", "encoder_attn"))
            for ours, theirs in sublayers:
                for role, name in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"),
                                   ("o", "out_proj")):
                    out |= _linear(w, f"{src}.{ours}.{role}", f"{dst}.{theirs}.{name}")
                out |= _linear(w, f"{src}.{ours}_norm", f"{dst}.{theirs}_layer_norm")
            out |= _linear(w, f"{src}.ffn.in", f"{dst}.fc1")
            out |= _linear(w, f"{src}.ffn.out", f"{dst}.fc2")
            out |= _linear(w, f"{src}.ffn_norm", f"{dst}.final_layer_norm")
        if final_norms:
            out |= _linear(w, f"{stack}.final_norm", f"{base}.layer_norm")
    tokens = w["embed.tokens"]
    out |= {"model.shared.weight": tokens, "model.encoder.embed_tokens.weight": tokens,
            "model.decoder.embed_tokens.weight": tokens, "lm_head.weight": w["output.weight"],
            "final_logits_bias": torch.zeros(1, tokens.shape[0])}
    return out

def _seq2seq_config(cls_name: str, plain: PlainModel, config: ModelConfig, **extra: Any) -> Any:
    import transformers

    tied = bool(torch.equal(plain.weights["output.weight"], plain.weights["embed.tokens"]))
    return getattr(transformers, cls_name)(
        **_shape(config), d_model=config.d_model,
        encoder_layers=config.encoder_layers, decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.heads, decoder_attention_heads=config.heads,
        encoder_ffn_dim=config.ffn_dim, decoder_ffn_dim=config.ffn_dim,
        activation_function=config.activation, max_position_embeddings=config.max_positions,
        scale_embedding=config.embed_scale, decoder_start_token_id=BOS, forced_eos_token_id=None,
        tie_word_embeddings=tied, dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout, **extra)

def marian(plain: PlainModel, config: ModelConfig) -> tuple[Any, Weights]:
    return (_seq2seq_config("MarianConfig", plain, config, share_encoder_decoder_embeddings=True,
                            decoder_vocab_size=config.vocab_size),
            _bart_layers(plain, final_norms=False))

def blenderbot(plain: PlainModel, config: ModelConfig) -> tuple[Any, Weights]:
    return (_seq2seq_config("BlenderbotConfig", plain, config),
            _bart_layers(plain, final_norms=True))

# -- decoder-only ----------------------------------------------------------------------------
def _gpt_layers(plain: PlainModel, prefix: str, norms: tuple[str, str]) -> Weights:
    w, out = plain.weights, {}
    for i in range(plain.depth("decoder")):
        src, dst = f"decoder.{i}", f"{prefix}.{i}"
        out |= _conv1d(w, [f"{src}.self.{r}" for r in "qkv"], f"{dst}.attn.c_attn")
        out |= _conv1d(w, [f"{src}.self.o"], f"{dst}.attn.c_proj")
        out |= _conv1d(w, [f"{src}.ffn.in"], f"{dst}.mlp.c_fc")
        out |= _conv1d(w, [f"{src}.ffn.out"], f"{dst}.mlp.c_proj")
        out |= _linear(w, f"{src}.self_norm", f"{dst}.{norms[0]}")
        out |= _linear(w, f"{src}.ffn_norm", f"{dst}.{norms[1]}")
    return out

def gpt2(plain: PlainModel, config: ModelConfig) -> tuple[Any, Weights]:
    import transformers

    tokens, output = _scaled_embeddings(plain)
    hf = transformers.GPT2Config(
        **_shape(config), n_embd=config.d_model, n_layer=config.decoder_layers,
        n_head=config.heads, n_inner=config.ffn_dim, n_positions=config.max_positions,
        activation_function=config.activation, layer_norm_epsilon=plain.eps,
        tie_word_embeddings=False, resid_pdrop=config.dropout, embd_pdrop=config.dropout,
        attn_pdrop=config.attention_dropout)
    weights = _gpt_layers(plain, "transformer.h", ("ln_1", "ln_2"))
    weights |= _linear(plain.weights, "decoder.final_norm", "transformer.ln_f")
    weights |= {"transformer.wte.weight": tokens, "lm_head.weight": output,
                "transformer.wpe.weight": plain.weights["decoder.positions"]}
    return hf, weights

def openai_gpt(plain: PlainModel, config: ModelConfig) -> tuple[Any, Weights]:
    import transformers

    if config.ffn_dim != 4 * config.d_model:
        raise NotMappable(f"the Post-LN decoder-only architecture (OpenAI GPT) has a "
                          f"feed-forward of 4·d_model = {4 * config.d_model}, not "
                          f"model.ffn_dim={config.ffn_dim}")
    if config.activation not in ("relu", "silu"):
        raise NotMappable("the Post-LN decoder-only architecture (OpenAI GPT) computes 'gelu' "
                          "with the tanh approximation; model.activation must be relu or silu")
    tokens, output = _scaled_embeddings(plain)
    hf = transformers.OpenAIGPTConfig(
        **_shape(config), n_embd=config.d_model, n_layer=config.decoder_layers,
        n_head=config.heads, n_positions=config.max_positions, afn=config.activation,
        layer_norm_epsilon=plain.eps, tie_word_embeddings=False, resid_pdrop=config.dropout,
        embd_pdrop=config.dropout, attn_pdrop=config.attention_dropout)
    weights = _gpt_layers(plain, "transformer.h", ("ln_1", "ln_2"))
    weights |= {"transformer.tokens_embed.weight": tokens, "lm_head.weight": output,
                "transformer.positions_embed.weight": plain.weights["decoder.positions"]}
    return hf, weights

# -- encoder-only ----------------------------------------------------------------------------
def _bert_common(plain: PlainModel, config: ModelConfig, attention_norm: str,
                 ffn_norm: str) -> Weights:
    w = plain.weights
    if config.activation != "gelu":
        raise NotMappable("BERT's masked-LM head uses the model's activation, normzoo's head "
                          "uses GELU: model.activation must be gelu")
    tokens, output = _scaled_embeddings(plain)
    out = {"bert.embeddings.word_embeddings.weight": tokens,
           "bert.embeddings.position_embeddings.weight": w["encoder.positions"],
           "bert.embeddings.token_type_embeddings.weight": torch.zeros(1, config.d_model),
           "cls.predictions.decoder.weight": output,
           "cls.predictions.decoder.bias": w["output.bias"],
           "cls.predictions.bias": w["output.bias"]}
    out |= _linear(w, "head.dense", "cls.predictions.transform.dense")
    out |= _linear(w, "head.norm", "cls.predictions.transform.LayerNorm")
    for i in range(plain.depth("encoder")):
        src, dst = f"encoder.{i}", f"bert.encoder.layer.{i}"
        for role, name in (("q", "query"), ("k", "key"), ("v", "value")):
            out |= _linear(w, f"{src}.self.{role}", f"{dst}.attention.self.{name}")
        out |= _linear(w, f"{src}.self.o", f"{dst}.attention.output.dense")
        out |= _linear(w, f"{src}.ffn.in", f"{dst}.intermediate.dense")
        out |= _linear(w, f"{src}.ffn.out", f"{dst}.output.dense")
        out |= _linear(w, f"{src}.self_norm", f"{dst}.{attention_norm}")
        out |= _linear(w, f"{src}.ffn_norm", f"{dst}.{ffn_norm}")
    return out

def _bert_config(cls_name: str, plain: PlainModel, config: ModelConfig) -> Any:
    import transformers

    return getattr(transformers, cls_name)(
        **_shape(config), hidden_size=config.d_model, num_hidden_layers=config.encoder_layers,
        num_attention_heads=config.heads, intermediate_size=config.ffn_dim, hidden_act="gelu",
        max_position_embeddings=config.max_positions, type_vocab_size=1,
        layer_norm_eps=plain.eps, tie_word_embeddings=False,
        hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.attention_dropout)

def bert(plain: PlainModel, config: ModelConfig) -> tuple[Any, Weights]:
    if not plain.embedding_norm:
        raise NotMappable("BERT normalises the embeddings before the first layer and this model "
                          "does not; train with model.residual: {name: post, embedding_norm: "
                          "true} for a BERT-exportable Post-LN encoder")
    weights = _bert_common(plain, config, "attention.output.LayerNorm", "output.LayerNorm")
    weights |= _linear(plain.weights, "encoder.embedding_norm", "bert.embeddings.LayerNorm")
    return _bert_config("BertConfig", plain, config), weights

def megatron_bert(plain: PlainModel, config: ModelConfig) -> tuple[Any, Weights]:
    weights = _bert_common(plain, config, "attention.ln", "ln")
    weights |= _linear(plain.weights, "encoder.final_norm", "bert.encoder.ln")
    return _bert_config("MegatronBertConfig", plain, config), weights

# How each architecture's config and weights are written; which architecture a model goes to
# is its family's answer (FamilyInfo.hf, normzoo/models/family_info.py), by placement.
WRITERS: dict[str, Callable[[PlainModel, ModelConfig], tuple[Any, Weights]]] = {
    "MarianMTModel": marian, "BlenderbotForConditionalGeneration": blenderbot,
    "GPT2LMHeadModel": gpt2, "OpenAIGPTLMHeadModel": openai_gpt,
    "BertForMaskedLM": bert, "MegatronBertForMaskedLM": megatron_bert,
}

def target_for(plain: PlainModel) -> Target:
    """The architecture for ``plain``; an embedding LN only BERT has is refused elsewhere."""
    hf = family_info(plain.family).hf
    architecture = hf.architectures[plain.placement]
    target = Target(architecture, hf.auto_class, WRITERS[architecture])
    if plain.embedding_norm and target.build is not bert:
        raise NotMappable(f"{target.architecture} has no LN on the embeddings, which this "
                          "model has")
    return target
