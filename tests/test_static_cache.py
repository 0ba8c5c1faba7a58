"""The static key/value cache (buffers written in place, reordered into spares) gives exactly the
logits of the growing one (``torch.cat`` at every step), bit for bit, and those of a full
forward pass: with GQA and RoPE, across beam reorders, when its buffers must grow, when a reorder
changes the batch size, and with an empty source sentence (the cross-attention mask built once).
"""

from __future__ import annotations

import pytest
import torch

from normzoo.models import assemble
from normzoo.nn import kv_cache
from normzoo.nn.kv_cache import KVCache

VOCAB, PAD = 31, 0
VARIANTS = {"plain": {}, "gqa_rope": {"kv_heads": 2, "positions": "rope"}}


def build(family: str, scheme: str = "pre", **overrides):
    torch.manual_seed(0)
    model = assemble({"family": family, "vocab_size": VOCAB, "d_model": 32, "heads": 4,
                      "ffn_dim": 64, "encoder_layers": 2, "decoder_layers": 2,
                      "residual": scheme, "max_positions": 64, "pad_id": PAD, **overrides})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def run_steps(model, tgt, memory, mask, cache, reorders):
    """Logits of ``tgt`` fed one token at a time, the cache reordered by ``reorders[t]`` (an
    index, applied to the later tokens and the encoder output too) before step ``t``."""
    out = []
    with torch.no_grad():
        for t in range(tgt.shape[1]):
            if t in reorders:
                index = reorders[t]
                cache.reorder(index)
                tgt, out = tgt[index], [o[index] for o in out]
                if memory is not None:
                    memory, mask = memory[index], mask[index]
            step = tgt[:, t : t + 1]
            out.append(model(step, cache=cache) if memory is None
                       else model.decode(step, memory, mask, cache))
    return torch.cat(out, dim=1)


@pytest.fixture
def tiny_capacity(monkeypatch):
    """Buffers of 2 positions at first, so that a search of 9 steps grows them thrice."""
    monkeypatch.setattr(kv_cache, "FIRST_CAPACITY", 2)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("scheme", ["pre", "hyper", "ngpt"])
def test_static_equals_growing_and_full(variant, scheme, tiny_capacity):
    model = build("encoder_decoder", scheme, **VARIANTS[variant])
    src = torch.randint(3, VOCAB, (3, 6))
    src[2, 3:] = PAD
    src[1, :] = PAD  # an empty sentence: its cross-attention gets 0, from the cached mask
    tgt = torch.randint(3, VOCAB, (3, 9))
    reorders = {3: torch.tensor([1, 1, 0]), 6: torch.tensor([2, 0, 1])}
    with torch.no_grad():
        memory, mask = model.encode(src)
        static = run_steps(model, tgt, memory, mask, model.new_cache(), reorders)
        growing = run_steps(model, tgt, memory, mask,
                            KVCache(len(model.decoder.layers), static=False), reorders)
        index = reorders[3][reorders[6]]
        full = model.decode(tgt[index], memory[index], mask[index])
    assert torch.equal(static, growing)
    torch.testing.assert_close(static[:, 6:], full[:, 6:], rtol=1e-5, atol=1e-4)


def test_causal_lm_static_equals_growing_after_a_prompt(tiny_capacity):
    model = build("decoder", kv_heads=1, positions="rope")
    prompt, rest = torch.randint(3, VOCAB, (2, 5)), torch.randint(3, VOCAB, (2, 4))
    results = []
    for cache in (model.new_cache(), KVCache(len(model.decoder.layers), static=False)):
        with torch.no_grad():
            first = model(prompt, cache=cache)
            results.append(torch.cat([first, run_steps(model, rest, None, None, cache, {})], 1))
        assert cache.length == 9
    assert torch.equal(*results)
    with torch.no_grad():
        full = model(torch.cat([prompt, rest], dim=1))
    torch.testing.assert_close(results[0], full, rtol=1e-5, atol=1e-4)


def test_a_reorder_to_another_batch_size_starts_new_buffers():
    model = build("encoder_decoder")
    src, tgt = torch.randint(3, VOCAB, (3, 5)), torch.randint(3, VOCAB, (3, 6))
    reorders = {2: torch.tensor([0, 2]), 4: torch.tensor([1, 0, 1, 1])}  # 3 -> 2 -> 4 rows
    with torch.no_grad():
        memory, mask = model.encode(src)
        static = run_steps(model, tgt, memory, mask, model.new_cache(), reorders)
        growing = run_steps(model, tgt, memory, mask,
                            KVCache(len(model.decoder.layers), static=False), reorders)
    assert torch.equal(static, growing)


def test_decoding_steps_write_in_place():
    """After the first steps no step allocates new buffers: the views share storage."""
    model = build("encoder_decoder")
    src, tgt = torch.randint(3, VOCAB, (2, 5)), torch.randint(3, VOCAB, (2, 4))
    cache = model.new_cache()
    with torch.no_grad():
        memory, mask = model.encode(src)
        model.decode(tgt[:, :1], memory, mask, cache)
        storage = cache.layers[0].self_k.untyped_storage().data_ptr()
        for t in range(1, 4):
            model.decode(tgt[:, t : t + 1], memory, mask, cache)
    assert cache.layers[0].self_k.untyped_storage().data_ptr() == storage
    assert cache.layers[0].self_k.shape[2] == cache.length == 4
