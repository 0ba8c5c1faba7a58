"""Model FLOPs of an encoder-decoder's training step, counted by hand from its sizes and a
batch's lengths: what the GPU check (``gpu_check.sh``) and ``peers.py`` divide by the GPU's
peak for MFU. The definition, in words, is :data:`MFU_DEFINITION`; it is one place, and the
reports print it beside their figures.

A matrix product of ``[m, k] @ [k, n]`` is ``2 m k n`` FLOPs (a multiply and an add). Per
layer, with ``d`` = d_model and ``f`` = the FFN's width:

* per source token, in the encoder: Q, K, V and output projections ``8 d²`` and the FFN
  ``4 d f``;
* per target token, in the decoder: self-attention's projections ``8 d²``, cross-attention's
  query and output projections ``4 d²`` and the FFN ``4 d f``; and once, the output projection
  onto the vocabulary ``2 d V``;
* per source token and decoder layer: cross-attention's key and value projections ``4 d²``;
* per sentence: attention's ``Q Kᵀ`` and ``A V``, ``4 · len_q · len_k · d`` (all heads
  together): source × source in the encoder, target × target in the decoder's self-attention
  (counted whole, though causal: a masked dense kernel does all of it, a causal flash kernel
  about half) and target × source in cross-attention.

The backward pass is twice the forward (a gradient for the input and one for the weight of
every product), so a training step is 3 × forward. Not counted: embeddings (a lookup), norms,
softmax, activations, dropout, the loss and the optimizer, which are memory-bound and small
in FLOPs. Lengths are each sentence's real ones (its tokens that are not padding), so MFU
charges padding to the implementation; :func:`batch_lengths` with ``padded=True`` gives the
FLOPs the GPU does on the padded batch instead (torch's ``FlopCounterMode`` counts those, which
the tests check against).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MFU_DEFINITION = (
    "MFU: model FLOPs per second over the GPU's dense bf16 peak. Model FLOPs of a training "
    "step = 3 x forward (backward = 2 x forward); forward = 2 FLOPs per multiply-add of every "
    "matrix product: each real (non-padding) source token through the encoder (attention "
    "projections 8d^2, FFN 4df per layer), each real target token through the decoder "
    "(self-attention projections 8d^2, cross-attention query and output 4d^2, FFN 4df per "
    "layer) and the output projection (2dV), cross-attention's keys and values of each source "
    "token (4d^2 per decoder layer), and attention's QK^T and AV over each sentence's real "
    "lengths (4 len_q len_k d per layer: source x source, target x target counted whole though "
    "causal, target x source). Padding, embeddings, norms, softmax, the loss and the "
    "optimizer are not counted. *_6nd: 6 x parameters x target tokens per second over the "
    "same peak (encoder tokens and attention left out). *_padded: the same count over the "
    "padded lengths, the work the GPU does.")


@dataclass(frozen=True)
class EncoderDecoder:
    """The sizes that set an encoder-decoder's FLOPs (heads do not: they split ``d_model``)."""

    d_model: int
    ffn_dim: int
    encoder_layers: int
    decoder_layers: int
    vocab_size: int

    @classmethod
    def of(cls, size: Any, vocab_size: int) -> EncoderDecoder:
        """From ``frameworks.Size`` (``layers`` a side) and the tokenizer's vocabulary."""
        return cls(size.d_model, size.ffn_dim, size.layers, size.layers, vocab_size)


def forward_flops(model: EncoderDecoder, src_lengths: Sequence[int],
                  tgt_lengths: Sequence[int]) -> int:
    """Forward FLOPs of a batch of sentence pairs with these source and target lengths (target:
    the decoder's positions, one per predicted token)."""
    d, f = model.d_model, model.ffn_dim
    source, target = sum(src_lengths), sum(tgt_lengths)
    encoder = model.encoder_layers * (source * (8 * d * d + 4 * d * f)
                                      + sum(4 * s * s * d for s in src_lengths))
    decoder = model.decoder_layers * (
        target * (8 * d * d + 4 * d * d + 4 * d * f) + source * 4 * d * d
        + sum(4 * t * t * d + 4 * t * s * d for s, t in zip(src_lengths, tgt_lengths, strict=True)))
    return encoder + decoder + target * 2 * d * model.vocab_size


def step_flops(model: EncoderDecoder, src_lengths: Sequence[int],
               tgt_lengths: Sequence[int]) -> int:
    """A training step's FLOPs: forward and backward, 3 × forward."""
    return 3 * forward_flops(model, src_lengths, tgt_lengths)


def batch_lengths(batch: Mapping[str, Any], pad: int, padded: bool = False,
                  ) -> tuple[list[int], list[int]]:
    """Each row's source and target length in a collated translation batch (``src`` and
    ``tgt_out``, ``[batch, time]``): its tokens other than ``pad``, or with ``padded`` the
    padded width of every row."""
    src, tgt = batch["src"], batch["tgt_out"]
    if padded:
        return [src.shape[1]] * src.shape[0], [tgt.shape[1]] * tgt.shape[0]
    return src.ne(pad).sum(1).tolist(), tgt.ne(pad).sum(1).tolist()


def six_nd(parameters: int, target_tokens: int) -> int:
    """The common shorthand: 6 × parameters × tokens (decoder-only models' training FLOPs,
    attention left out)."""
    return 6 * parameters * target_tokens


def utilisation(flops_per_s: float | None, peak: float | None) -> float | None:
    """FLOP/s over the peak, or None where either is unknown (a CPU, an unknown GPU)."""
    return None if flops_per_s is None or not peak else flops_per_s / peak
