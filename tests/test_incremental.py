"""Incremental (KV-cached) decoding gives the logits of a full forward pass.

For every residual scheme, with learned and sinusoidal positions, fused and unfused q/k/v:
one token at a time, a multi-token prefix then single steps, and a beam-search style
``KVCache.reorder`` mid-way. Every parameter is perturbed away from its init first, so that
ReZero's a = 0 (which makes the layers vanish) and zero biases cannot hide a cache bug.
"""

from __future__ import annotations

import pytest
import torch
from registered import BUILTIN_SCHEMES, norms_where

from normzoo.models import assemble

SCHEMES = BUILTIN_SCHEMES
# The norms a causal decoder takes: one that mixes positions (batch statistics) is refused.
CAUSAL_NORMS = norms_where(lambda factory: not getattr(factory, "mixes_positions", False))
VOCAB, PAD = 31, 0



def assert_logits_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """float32 tolerance, relative to the logits' scale (a few units to a few tens)."""
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def residual(scheme: str):
    # Two layers with the default post_fraction would make every Mix-LN layer Pre-LN.
    return {"name": "mixln", "post_fraction": 0.5} if scheme == "mixln" else scheme


def build(family: str, scheme: str, *, positions: str = "learned", fused: bool = True,
          norm: str = "layernorm", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = assemble({
        "family": family,
        "vocab_size": VOCAB,
        "d_model": 32,
        "heads": 4,
        "ffn_dim": 64,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "dropout": 0.1,  # eval mode must switch it off
        "attention_dropout": 0.1,
        "activation_dropout": 0.1,
        "residual": residual(scheme),
        "norm": norm,
        "positions": positions,
        "fused_qkv": fused,
        "max_positions": 64,
        "pad_id": PAD,
        **overrides,
    })
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
        for name, buffer in model.named_buffers():
            if name.endswith("running_var"):  # batchnorm: non-trivial running statistics
                buffer.uniform_(1.0, 3.0)
            elif name.endswith("running_mean"):
                buffer.normal_(0.0, 0.1)
    return model.eval()


def tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=generator)


def source(seed: int = 1) -> torch.Tensor:
    src = tokens(3, 9, seed)
    src[1, 6:] = PAD
    src[2, 3:] = PAD
    return src


# -- encoder-decoder ---------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_seq2seq_step_by_step_matches_full(scheme, positions, fused):
    model = build("encoder_decoder", scheme, positions=positions, fused=fused)
    src, tgt = source(), tokens(3, 7, seed=2)
    with torch.no_grad():
        memory, mask = model.encode(src)
        full = model.decode(tgt, memory, mask)
        assert torch.equal(full, model(src, tgt))
        cache = model.new_cache()
        steps = []
        for t in range(tgt.shape[1]):
            assert cache.length == t
            steps.append(model.decode(tgt[:, t : t + 1], memory, mask, cache))
    assert cache.length == tgt.shape[1]
    assert_logits_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("prefix", [2, 5])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_seq2seq_prefix_then_steps_matches_full(scheme, prefix):
    model = build("encoder_decoder", scheme, positions="sinusoidal", fused=False, seed=3)
    src, tgt = source(seed=4), tokens(3, 7, seed=5)
    with torch.no_grad():
        memory, mask = model.encode(src)
        full = model.decode(tgt, memory, mask)
        cache = model.new_cache()
        parts = [model.decode(tgt[:, :prefix], memory, mask, cache)]
        assert cache.length == prefix
        for t in range(prefix, tgt.shape[1]):
            parts.append(model.decode(tgt[:, t : t + 1], memory, mask, cache))
    assert_logits_close(torch.cat(parts, dim=1), full)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seq2seq_two_chunks_matches_full(scheme):
    """A second multi-token chunk after a cached prefix needs the offset causal mask."""
    model = build("encoder_decoder", scheme, seed=6)
    src, tgt = source(seed=7), tokens(3, 8, seed=8)
    with torch.no_grad():
        memory, mask = model.encode(src)
        full = model.decode(tgt, memory, mask)
        cache = model.new_cache()
        first = model.decode(tgt[:, :3], memory, mask, cache)
        second = model.decode(tgt[:, 3:], memory, mask, cache)
    assert_logits_close(torch.cat([first, second], dim=1), full)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seq2seq_reorder_matches_full_on_reordered_batch(scheme):
    model = build("encoder_decoder", scheme, positions="learned", fused=True, seed=9)
    src, tgt = source(seed=10), tokens(3, 7, seed=11)
    index = torch.tensor([1, 1, 0])
    split = 3
    with torch.no_grad():
        memory, mask = model.encode(src)
        expected = model.decode(tgt[index], memory[index], mask[index])
        cache = model.new_cache()
        for t in range(split):
            model.decode(tgt[:, t : t + 1], memory, mask, cache)
        cache.reorder(index)
        assert cache.length == split
        memory, mask, tgt = memory[index], mask[index], tgt[index]
        steps = [model.decode(tgt[:, t : t + 1], memory, mask, cache)
                 for t in range(split, tgt.shape[1])]
    assert_logits_close(torch.cat(steps, dim=1), expected[:, split:])


def test_seq2seq_cross_attention_cache_is_reordered():
    """After reorder the cached encoder keys follow their beams even if memory is not passed."""
    model = build("encoder_decoder", "pre", seed=12)
    src, tgt = source(seed=13), tokens(3, 5, seed=14)
    index = torch.tensor([2, 0, 0])
    with torch.no_grad():
        memory, mask = model.encode(src)
        expected = model.decode(tgt[index], memory[index], mask[index])
        cache = model.new_cache()
        model.decode(tgt[:, :2], memory, mask, cache)
        cache.reorder(index)
        # The cross-attention keys/values come from the cache from now on.
        rest = model.decode(tgt[index][:, 2:], None, mask[index], cache)
    assert_logits_close(rest, expected[:, 2:])


@pytest.mark.parametrize("norm", CAUSAL_NORMS)
def test_seq2seq_incremental_with_other_norms(norm):
    model = build("encoder_decoder", "pre", norm=norm, seed=15)
    src, tgt = source(seed=16), tokens(3, 6, seed=17)
    with torch.no_grad():
        memory, mask = model.encode(src)
        full = model.decode(tgt, memory, mask)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, mask, cache) for t in range(6)]
    assert_logits_close(torch.cat(steps, dim=1), full)


# -- decoder-only -----------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_decoder_step_by_step_matches_full(scheme, positions, fused):
    model = build("decoder", scheme, positions=positions, fused=fused, seed=20)
    seq = tokens(3, 8, seed=21)
    with torch.no_grad():
        full = model(seq)
        cache = model.new_cache()
        steps = []
        for t in range(seq.shape[1]):
            assert cache.length == t
            steps.append(model(seq[:, t : t + 1], cache=cache))
    assert_logits_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("prefix", [3, 6])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_decoder_prefix_then_steps_matches_full(scheme, prefix):
    model = build("decoder", scheme, positions="learned", fused=False, seed=22)
    seq = tokens(2, 8, seed=23)
    with torch.no_grad():
        full = model(seq)
        cache = model.new_cache()
        parts = [model(seq[:, :prefix], cache=cache)]
        assert cache.length == prefix
        parts += [model(seq[:, t : t + 1], cache=cache) for t in range(prefix, seq.shape[1])]
    assert_logits_close(torch.cat(parts, dim=1), full)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_decoder_reorder_matches_full_on_reordered_batch(scheme):
    model = build("decoder", scheme, positions="sinusoidal", fused=True, seed=24)
    seq = tokens(3, 8, seed=25)
    index = torch.tensor([1, 1, 0])
    split = 4
    with torch.no_grad():
        expected = model(seq[index])
        cache = model.new_cache()
        model(seq[:, :split], cache=cache)
        cache.reorder(index)
        reordered = seq[index]
        steps = [model(reordered[:, t : t + 1], cache=cache) for t in range(split, seq.shape[1])]
    assert_logits_close(torch.cat(steps, dim=1), expected[:, split:])


@pytest.mark.parametrize("norm", CAUSAL_NORMS)
def test_decoder_incremental_with_other_norms(norm):
    model = build("decoder", "pre", norm=norm, seed=26)
    seq = tokens(2, 6, seed=27)
    with torch.no_grad():
        full = model(seq)
        cache = model.new_cache()
        steps = [model(seq[:, t : t + 1], cache=cache) for t in range(6)]
    assert_logits_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("activation", ["swiglu", "geglu"])
@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_incremental_with_gated_ffn_and_no_bias(family, activation):
    model = build(family, "subln", activation=activation, bias=False, seed=31)
    src, seq = source(seed=32), tokens(3, 6, seed=33)
    with torch.no_grad():
        if family == "decoder":
            full = model(seq)
            cache = model.new_cache()
            steps = [model(seq[:, t : t + 1], cache=cache) for t in range(6)]
        else:
            memory, mask = model.encode(src)
            full = model.decode(seq, memory, mask)
            cache = model.new_cache()
            steps = [model.decode(seq[:, t : t + 1], memory, mask, cache) for t in range(6)]
    assert_logits_close(torch.cat(steps, dim=1), full)


def test_decoder_cache_is_per_layer_and_grows():
    model = build("decoder", "pre", seed=28)
    seq = tokens(2, 5, seed=29)
    cache = model.new_cache()
    assert len(cache.layers) == len(model.decoder.layers)
    assert cache.length == 0
    with torch.no_grad():
        model(seq[:, :3], cache=cache)
        model(seq[:, 3:4], cache=cache)
    heads, head_dim = 4, 8
    for layer in cache.layers:
        assert layer.self_k.shape == (2, heads, 4, head_dim)
        assert layer.self_v.shape == (2, heads, 4, head_dim)
        assert layer.cross_k is None  # decoder-only: no cross-attention
    keys = [layer.self_k for layer in cache.layers]
    assert not torch.equal(keys[0], keys[1])


def test_decoding_past_max_positions_raises():
    torch.manual_seed(0)
    model = assemble({
        "family": "decoder", "vocab_size": VOCAB, "d_model": 16, "heads": 2, "ffn_dim": 32,
        "decoder_layers": 1, "max_positions": 4, "positions": "learned",
    }).eval()
    seq = tokens(1, 5, seed=30)
    cache = model.new_cache()
    with torch.no_grad():
        model(seq[:, :4], cache=cache)
        with pytest.raises(ValueError, match="max_positions"):
            model(seq[:, 4:5], cache=cache)
