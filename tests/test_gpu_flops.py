"""``benchmarks/gpu_flops.py``, the FLOPs the GPU check's MFU divides by: against a count by hand,
matrix product by matrix product, of a one-layer model, and against torch's own FLOP counter
on normzoo's encoder-decoder (which counts the padded batch it runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from gpu_flops import (
    EncoderDecoder,
    batch_lengths,
    forward_flops,
    six_nd,
    step_flops,
    utilisation,
)

from normzoo.data.tokenizer import PAD

TINY = EncoderDecoder(d_model=4, ffn_dim=8, encoder_layers=1, decoder_layers=1, vocab_size=10)


def mm(m: int, k: int, n: int) -> int:
    """FLOPs of [m, k] @ [k, n]."""
    return 2 * m * k * n


def test_one_pair_through_a_one_layer_model_matches_the_hand_count():
    s, t, d, f, v = 3, 2, 4, 8, 10  # source 3 tokens, target 2 positions
    encoder = (mm(s, d, 3 * d) + mm(s, d, d)  # QKV, output projection
               + mm(s, d, s) + mm(s, s, d)  # QK^T, AV
               + mm(s, d, f) + mm(s, f, d))  # FFN
    decoder = (mm(t, d, 3 * d) + mm(t, d, d) + mm(t, d, t) + mm(t, t, d)  # self-attention
               + mm(t, d, d) + mm(s, d, 2 * d) + mm(t, d, s) + mm(t, s, d) + mm(t, d, d)  # cross
               + mm(t, d, f) + mm(t, f, d))
    output = mm(t, d, v)
    assert encoder + decoder + output == 2064  # the sum, worked out once by hand
    assert forward_flops(TINY, [s], [t]) == 2064
    assert step_flops(TINY, [s], [t]) == 3 * 2064


def test_sentences_add_and_attention_grows_with_the_square_of_the_length():
    one = forward_flops(TINY, [3], [2])
    assert forward_flops(TINY, [3, 3], [2, 2]) == 2 * one
    # Two sentences of 3 cost less than one of 6: attention is per sentence.
    assert forward_flops(TINY, [3, 3], [2, 2]) < forward_flops(TINY, [6], [4])
    more = forward_flops(TINY, [4], [2]) - forward_flops(TINY, [3], [2])
    linear = 8 * 16 + 4 * 4 * 8 + 4 * 16  # encoder projections and FFN, cross K and V
    attention = 4 * (16 - 9) * 4 + 4 * 2 * (4 - 3) * 4  # encoder (4² - 3²), cross (2 × 1)
    assert more == linear + attention


def test_real_lengths_leave_padding_out_and_padded_lengths_count_it():
    batch = {"src": torch.tensor([[5, 6, 7], [5, 6, PAD]]),
             "tgt_out": torch.tensor([[8, 9], [8, PAD]])}
    assert batch_lengths(batch, PAD) == ([3, 2], [2, 1])
    assert batch_lengths(batch, PAD, padded=True) == ([3, 3], [2, 2])
    real = forward_flops(TINY, *batch_lengths(batch, PAD))
    padded = forward_flops(TINY, *batch_lengths(batch, PAD, padded=True))
    assert real < padded == 2 * forward_flops(TINY, [3], [2])


def test_six_nd_and_utilisation():
    assert six_nd(1000, 7) == 42_000
    assert utilisation(5e14, 1e15) == 0.5
    assert utilisation(5e14, None) is None and utilisation(None, 1e15) is None


@pytest.mark.parametrize("layers", [1, 2])
def test_the_count_is_what_torch_counts_in_normzoo_s_model(layers: int):
    """torch's FlopCounterMode counts every matrix product normzoo's encoder-decoder runs on a
    padded batch; the formula over the padded lengths must give the same number. SDPA's math
    backend, since the counter has no formula for the CPU's fused attention kernel (it would
    count attention as nothing)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from normzoo.models import assemble

    config = {"d_model": 16, "heads": 2, "ffn_dim": 24, "encoder_layers": layers,
              "decoder_layers": layers, "dropout": 0.0, "activation": "relu",
              "norm": "layernorm", "residual": "pre", "max_positions": 64}
    model = assemble(config, vocab_size=50).eval()
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, 50, (3, 7), generator=gen)
    tgt = torch.randint(4, 50, (3, 5), generator=gen)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(src, tgt)
    sizes = EncoderDecoder(16, 24, layers, layers, 50)
    expected = forward_flops(sizes, *batch_lengths({"src": src, "tgt_out": tgt}, PAD,
                                                    padded=True))
    assert counter.get_total_flops() == expected
