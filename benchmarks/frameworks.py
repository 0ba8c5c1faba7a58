"""The same encoder-decoder in four libraries, and the two decoders, for ``peers.py``.

Every model is Pre-LN (a norm before each sublayer, a final norm after each stack), ReLU FFN,
sinusoidal or learned absolute positions, shared source/target embeddings tied to the output
projection where the library allows, and the same dropout. Each is trained by the same
label-smoothed token loss and AdamW settings; normzoo's loss is its own TranslationModule's.
Libraries are imported inside their builders, so a worker process loads only its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from normzoo.data.tokenizer import BOS, EOS, PAD

Batch = dict[str, torch.Tensor]
LossTerms = Callable[[Batch], tuple[torch.Tensor, torch.Tensor]]

LABEL_SMOOTHING = 0.1
LR, BETAS, EPS = 5e-4, (0.9, 0.98), 1e-8  # normzoo's OptimConfig defaults, for every framework
LENPEN = 0.6


@dataclass(frozen=True)
class Size:
    """One model size and the work measured on it."""

    d_model: int
    heads: int
    ffn_dim: int
    layers: int  # encoder layers = decoder layers
    vocab_size: int
    max_tokens: int  # token budget of a training batch (padding included)
    max_positions: int
    decode_sentences: int
    decode_batch: int  # sentences per decoding batch
    decode_len: int  # tokens generated per sentence, forced on both sides
    pair_limit: int | None  # sentence pairs read (None: the whole training split)
    dropout: float = 0.1


SIZES = {
    "base": Size(d_model=512, heads=8, ffn_dim=2048, layers=6, vocab_size=8000, max_tokens=4096,
                 max_positions=256, decode_sentences=128, decode_batch=32, decode_len=24,
                 pair_limit=None),
    # Multi30k recipe-like: a quick look on a small machine.
    "small": Size(d_model=256, heads=4, ffn_dim=1024, layers=3, vocab_size=6000, max_tokens=2048,
                  max_positions=256, decode_sentences=64, decode_batch=32, decode_len=20,
                  pair_limit=None),
    "tiny": Size(d_model=64, heads=4, ffn_dim=256, layers=2, vocab_size=500, max_tokens=512,
                 max_positions=256, decode_sentences=8, decode_batch=4, decode_len=6,
                 pair_limit=2000),
}


@dataclass
class TrainSetup:
    """A model, the loss of one batch as (summed token loss, token count), and its optimizer."""

    model: nn.Module
    loss_terms: LossTerms
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None


def token_loss_terms(logits: torch.Tensor,
                     target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """normzoo's training loss (:func:`normzoo.nn.token_loss.token_terms`), on a peer's logits."""
    from normzoo.nn.token_loss import token_terms

    terms = token_terms(logits, target, ignore_index=PAD, smoothing=LABEL_SMOOTHING)
    return terms.loss_sum, terms.tokens


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    # The multi-tensor AdamW, as normzoo.tasks.optim uses: the comparison is of models, not of
    # optimizer implementations.
    return torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0,
                             foreach=True)


def _peer_setup(model: nn.Module, logits: Callable[[nn.Module, Batch], torch.Tensor],
                compiled: bool = False) -> TrainSetup:
    """A peer's model with normzoo's loss; ``compiled``: the model and the loss compiled as one
    region with dynamic shapes, as ``trainer.compile`` compiles normzoo's (the closure reads
    only the batch's tensors, so a batch's host-side counts cause no recompiles)."""
    def loss_terms(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        return token_loss_terms(logits(model, batch), batch["tgt_out"])

    step = torch.compile(loss_terms, dynamic=True) if compiled else loss_terms
    return TrainSetup(model, step, adamw(model))


# -- normzoo ---------------------------------------------------------------------------------


def normzoo_config(size: Size) -> dict:
    return {"d_model": size.d_model, "heads": size.heads, "ffn_dim": size.ffn_dim,
            "encoder_layers": size.layers, "decoder_layers": size.layers,
            "dropout": size.dropout, "activation": "relu", "norm": "layernorm",
            "residual": "pre", "max_positions": size.max_positions}


def normzoo_train(size: Size, vocab_size: int, compiled: bool = False) -> TrainSetup:
    """normzoo's TranslationModule loss and its optimizer (AdamW + schedule), without a Trainer;
    ``compiled``: through ``trainer.compile``'s own compiled step."""
    from normzoo.recipe import from_dict
    from normzoo.run.machine import batch_ladder
    from normzoo.tasks.optim import build_optimizer
    from normzoo.tasks.translation.module import TranslationModule

    recipe = from_dict({"task": "translation", "model": normzoo_config(size),
                        "optim": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                  "label_smoothing": LABEL_SMOOTHING},
                        # the whole model and loss one region, as the peers compile theirs
                        "trainer": {"compile": compiled, "compile_scope": "model"}})
    recipe = batch_ladder(recipe)  # as peers_data pads the batches: static shapes on a GPU
    task = TranslationModule(recipe, vocab_size)
    optimizer, scheduler = build_optimizer(task.model, recipe.optim, recipe.trainer.max_steps)

    def loss_terms(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        terms = task.step_terms(batch, recipe.optim.label_smoothing)  # as training_step
        return terms.loss_sum, terms.tokens

    return TrainSetup(task.model, loss_terms, optimizer, scheduler)


def normzoo_model(size: Size, vocab_size: int) -> nn.Module:
    from normzoo.models import assemble

    return assemble(normzoo_config(size), vocab_size=vocab_size)


# -- x-transformers --------------------------------------------------------------------------


def xtransformers_train(size: Size, vocab_size: int, compiled: bool = False) -> TrainSetup:
    """``XTransformer`` with SDPA attention, ReLU FFN, sublayer dropout like the others.

    XTransformer does not pass ``tie_embedding`` to its decoder, so the output projection is
    tied by hand to the shared token embedding.
    """
    from x_transformers import XTransformer

    side = {"num_tokens": vocab_size, "depth": size.layers, "heads": size.heads,
            "max_seq_len": size.max_positions, "emb_dropout": size.dropout,
            "attn_dim_head": size.d_model // size.heads, "attn_flash": True,
            "attn_sublayer_dropout": size.dropout, "ff_mult": size.ffn_dim / size.d_model,
            "ff_custom_activation": nn.ReLU(), "ff_sublayer_dropout": size.dropout}
    model = XTransformer(dim=size.d_model, tie_token_emb=True, pad_value=PAD,
                         **{f"enc_{k}": v for k, v in side.items()},
                         **{f"dec_{k}": v for k, v in side.items()})
    decoder = model.decoder.net
    decoder.to_logits.weight = decoder.token_emb.emb.weight

    def logits(m: nn.Module, batch: Batch) -> torch.Tensor:
        keep = batch["src"].ne(PAD)
        memory = m.encoder(batch["src"], mask=keep, return_embeddings=True)
        return m.decoder.net(batch["tgt_in"], context=memory, context_mask=keep)

    return _peer_setup(model, logits, compiled)


# -- Hugging Face transformers ---------------------------------------------------------------


def mbart_model(size: Size, vocab_size: int) -> nn.Module:
    """mBART: the Pre-LN BART variant (plus an embedding LayerNorm), SDPA attention."""
    from transformers import MBartConfig, MBartForConditionalGeneration

    config = MBartConfig(
        vocab_size=vocab_size, d_model=size.d_model,
        encoder_layers=size.layers, decoder_layers=size.layers,
        encoder_attention_heads=size.heads, decoder_attention_heads=size.heads,
        encoder_ffn_dim=size.ffn_dim, decoder_ffn_dim=size.ffn_dim,
        dropout=size.dropout, attention_dropout=0.0, activation_dropout=0.0,
        activation_function="relu", max_position_embeddings=size.max_positions,
        scale_embedding=True, tie_word_embeddings=True,
        pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
        forced_eos_token_id=None,  # would fight min_new_tokens at the last step
    )
    config._attn_implementation = "sdpa"
    return MBartForConditionalGeneration(config)


def mbart_train(size: Size, vocab_size: int, compiled: bool = False) -> TrainSetup:
    def logits(m: nn.Module, batch: Batch) -> torch.Tensor:
        return m(input_ids=batch["src"], attention_mask=batch["src"].ne(PAD),
                 decoder_input_ids=batch["tgt_in"], use_cache=False).logits

    return _peer_setup(mbart_model(size, vocab_size), logits, compiled)


# -- plain torch.nn.Transformer --------------------------------------------------------------


class TorchSeq2Seq(nn.Module):
    """``nn.Transformer(norm_first=True)`` with scaled shared embeddings, learned positions
    and an output projection tied to the embedding: the least a user would write."""

    def __init__(self, size: Size, vocab_size: int) -> None:
        super().__init__()
        d = size.d_model
        self.embedding = nn.Embedding(vocab_size, d, padding_idx=PAD)
        self.positions = nn.Embedding(size.max_positions, d)
        self.dropout = nn.Dropout(size.dropout)
        self.scale = math.sqrt(d)
        self.transformer = nn.Transformer(
            d, size.heads, size.layers, size.layers, size.ffn_dim, size.dropout,
            batch_first=True, norm_first=True)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = self.positions.weight[: tokens.shape[1]]
        return self.dropout(self.embedding(tokens) * self.scale + positions)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        pad = src.eq(PAD)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        h = self.transformer(self.embed(src), self.embed(tgt), tgt_mask=causal,
                             src_key_padding_mask=pad, memory_key_padding_mask=pad,
                             tgt_is_causal=True)
        return F.linear(h, self.embedding.weight)


def torch_train(size: Size, vocab_size: int, compiled: bool = False) -> TrainSetup:
    return _peer_setup(TorchSeq2Seq(size, vocab_size),
                       lambda m, batch: m(batch["src"], batch["tgt_in"]), compiled)


class Entry(NamedTuple):
    """A row of the report: its label, the module to import before the memory baseline (so
    that importing a library does not count as the model's memory), and the builder."""

    label: str
    library: str
    build: Callable


MBART = "transformers.models.mbart.modeling_mbart"
TRAINERS: dict[str, Entry] = {
    "normzoo": Entry("normzoo (pre + layernorm)", "normzoo.tasks.translation.module",
                     normzoo_train),
    "x-transformers": Entry("x-transformers XTransformer", "x_transformers", xtransformers_train),
    "transformers": Entry("Hugging Face mBART", MBART, mbart_train),
    "torch": Entry("torch.nn.Transformer(norm_first=True)", "torch.nn", torch_train),
}


# -- decoding --------------------------------------------------------------------------------


Decode = Callable[[torch.Tensor], int]  # padded source batch -> tokens generated


def normzoo_decoder(size: Size, vocab_size: int, beam: int) -> tuple[nn.Module, Decode]:
    """normzoo.inference.decoding with exactly ``size.decode_len`` tokens per sentence."""
    from normzoo.inference.decoding import beam_search, greedy

    model = normzoo_model(size, vocab_size).eval()
    limits = {"max_len_a": 0.0, "max_len_b": size.decode_len, "min_len": size.decode_len}

    def decode(src: torch.Tensor) -> int:
        if beam == 1:
            hyps = greedy(model, src, **limits)
        else:
            hyps = beam_search(model, src, beam=beam, lenpen=LENPEN, **limits)
        return sum(len(h) for h in hyps)

    return model, decode


def mbart_decoder(size: Size, vocab_size: int, beam: int) -> tuple[nn.Module, Decode]:
    """``generate`` with min_new_tokens = max_new_tokens, so every sentence has the same length."""
    model = mbart_model(size, vocab_size).eval()

    def decode(src: torch.Tensor) -> int:
        out = model.generate(input_ids=src, attention_mask=src.ne(PAD), num_beams=beam,
                             do_sample=False, length_penalty=LENPEN,
                             suppress_tokens=[PAD, BOS],  # as normzoo.inference.decoding does
                             max_new_tokens=size.decode_len, min_new_tokens=size.decode_len)
        return out[:, 1:].numel()  # without the decoder's start token

    return model, decode


DECODERS: dict[str, Entry] = {
    "normzoo": Entry("normzoo.inference.decoding", "normzoo.inference.decoding", normzoo_decoder),
    "transformers": Entry("Hugging Face generate (mBART)", MBART, mbart_decoder),
}

SEARCHES = {"greedy": 1, "beam5": 5}  # decoding jobs: their beam sizes
FRAMEWORKS = tuple(dict.fromkeys([*TRAINERS, *DECODERS]))
JOB_KINDS = ("train", *SEARCHES)


def bf16(precision: str, device: torch.device) -> bool:
    """Whether ``--precision`` means bf16 autocast here (``auto``: on a GPU, not on a CPU)."""
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def size_of(args) -> Size:
    """The ``--size`` with ``--max-tokens`` in place of its token budget, where given (a GPU's
    Transformer-base step takes about 25k tokens, the CPU default 4,096)."""
    size = SIZES[args.size]
    budget = getattr(args, "max_tokens", None)
    return size if budget is None else replace(size, max_tokens=budget)
