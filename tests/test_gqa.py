"""Grouped-query and multi-query attention (``model.kv_heads``): the same function as multi-head
attention whose key/value heads are repeated, each role's own matrix for the schemes' init,
and nothing changed when ``kv_heads`` is unset or equals ``heads``."""

from __future__ import annotations

import pytest
import torch
from registered import BUILTIN_SCHEMES

from normzoo.models import assemble
from normzoo.nn.attention import MultiheadAttention

DIM, HEADS, HEAD_DIM = 32, 4, 8
SCHEMES = BUILTIN_SCHEMES


def config(**changes):
    return {"family": "encoder_decoder", "vocab_size": 40, "d_model": DIM, "heads": HEADS,
            "ffn_dim": 64, "encoder_layers": 2, "decoder_layers": 2, "max_positions": 32,
            **changes}


def shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


@pytest.mark.parametrize("fused", [True, False])
def test_unset_or_equal_kv_heads_is_todays_model(fused):
    """Same names, shapes and (for one seed) values: checkpoints from before load as they are."""
    models = []
    for kv_heads in ({}, {"kv_heads": HEADS}):
        torch.manual_seed(0)
        models.append(assemble(config(fused_qkv=fused, **kv_heads)))
    today, explicit = models
    assert shapes(today) == shapes(explicit)
    for (name, a), b in zip(today.state_dict().items(), explicit.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    attn = today.decoder.layers[0].self_attn
    assert attn.kv_heads == HEADS
    if fused:
        assert tuple(attn.qkv_proj.weight.shape) == (3 * DIM, DIM)


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("fused", [True, False])
def test_roles_are_views_of_the_right_size(kv_heads, fused):
    kv_dim = kv_heads * HEAD_DIM
    for cross in (False, True):
        attn = MultiheadAttention(DIM, HEADS, kv_heads=kv_heads, fused=fused, cross=cross)
        weights, biases = attn.role_weights(), attn.role_biases()
        assert {r: tuple(w.shape) for r, w in weights.items()} == {
            "q": (DIM, DIM), "k": (kv_dim, DIM), "v": (kv_dim, DIM), "out": (DIM, DIM)}
        assert {r: tuple(b.shape) for r, b in biases.items()} == {
            "q": (DIM,), "k": (kv_dim,), "v": (kv_dim,), "out": (DIM,)}
        params = sum(p.numel() for p in attn.parameters())
        assert params == sum(w.numel() for w in weights.values()) + sum(
            b.numel() for b in biases.values())
        with torch.no_grad():  # a role is a view: writing it writes the projection's weight
            weights["v"].fill_(7.0)
        assert sum(int((p == 7.0).sum()) for p in attn.parameters()) == kv_dim * DIM


def expanded(gqa: MultiheadAttention) -> MultiheadAttention:
    """The multi-head attention that repeats each of ``gqa``'s key/value heads for its group."""
    mha = MultiheadAttention(DIM, HEADS, fused=gqa.fused, cross=gqa.cross, impl=gqa.impl)
    groups = HEADS // gqa.kv_heads
    with torch.no_grad():
        for role, weight in gqa.role_weights().items():
            if role in ("k", "v"):
                weight = weight.view(gqa.kv_heads, HEAD_DIM, DIM).repeat_interleave(
                    groups, dim=0).reshape(DIM, DIM)
            mha.role_weights()[role].copy_(weight)
        for role, bias in gqa.role_biases().items():
            if role in ("k", "v"):
                bias = bias.view(gqa.kv_heads, HEAD_DIM).repeat_interleave(groups, 0).flatten()
            mha.role_biases()[role].copy_(bias)
    return mha


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("cross", [False, True])
def test_gqa_is_multi_head_attention_with_repeated_key_value_heads(kv_heads, cross, impl):
    torch.manual_seed(kv_heads)
    gqa = MultiheadAttention(DIM, HEADS, kv_heads=kv_heads, cross=cross, impl=impl)
    with torch.no_grad():
        for p in gqa.parameters():
            p.add_(0.1 * torch.randn_like(p))
    mha = expanded(gqa)
    x, memory = torch.randn(2, 5, DIM), torch.randn(2, 6, DIM)
    padding = torch.zeros(2, 6 if cross else 5, dtype=torch.bool)
    padding[1, -2:] = True
    with torch.no_grad():
        for kwargs in ({"causal": not cross}, {"key_padding_mask": padding}):
            expected = mha(x, memory if cross else None, **kwargs)
            actual = gqa(x, memory if cross else None, **kwargs)
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_the_cache_holds_the_key_value_heads_only():
    torch.manual_seed(0)
    model = assemble(config(kv_heads=1, positions="rope")).eval()
    src, tgt = torch.randint(1, 40, (2, 6)), torch.randint(1, 40, (2, 4))
    cache = model.new_cache()
    with torch.no_grad():
        memory, mask = model.encode(src)
        model.decode(tgt, memory, mask, cache)
    for layer in cache.layers:
        assert layer.self_k.shape == layer.self_v.shape == (2, 1, 4, HEAD_DIM)
        assert layer.cross_k.shape == layer.cross_v.shape == (2, 1, 6, HEAD_DIM)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_initialises_gqa_roles(scheme):
    residual = {"name": "mixln", "post_fraction": 0.5} if scheme == "mixln" else scheme
    for fused in (True, False):
        torch.manual_seed(0)
        model = assemble(config(kv_heads=2, residual=residual, fused_qkv=fused))
        for p in model.parameters():
            assert torch.isfinite(p).all()
        # every projection was initialised: no role left at zero or uninitialised
        attn = model.decoder.layers[1].cross_attn
        for role, weight in attn.role_weights().items():
            assert weight.std() > 0, (scheme, role)
        src, tgt = torch.randint(1, 40, (2, 5)), torch.randint(1, 40, (2, 4))
        assert torch.isfinite(model(src, tgt)).all()


def test_fused_gqa_projection_is_heads_plus_two_kv_heads_wide():
    attn = MultiheadAttention(DIM, HEADS, kv_heads=2)
    assert tuple(attn.qkv_proj.weight.shape) == ((HEADS + 2 * 2) * HEAD_DIM, DIM)
    # fairseq's init on each role's own matrix: xavier with gain 1/sqrt(2), its own fans
    k = attn.role_weights()["k"]
    bound = 2**-0.5 * (6 / (k.shape[0] + k.shape[1])) ** 0.5
    assert k.abs().max() <= bound and k.abs().max() > 0.8 * bound


def test_kv_heads_that_do_not_divide_heads_are_refused():
    with pytest.raises(ValueError, match="does not divide"):
        MultiheadAttention(DIM, HEADS, kv_heads=3)
    with pytest.raises(ValueError, match="does not divide"):
        MultiheadAttention(DIM, HEADS, kv_heads=0)


@pytest.mark.parametrize("changes", [{"kv_heads": 2}, {"positions": "rope"}])
def test_export_refuses_what_its_targets_do_not_compute(changes):
    from normzoo.export.hf.plain import NotMappable, plain_model

    model = assemble(config(family="decoder", **changes))
    with pytest.raises(NotMappable, match=r"kv_heads|rope"):
        plain_model(model, "pre")
    assert plain_model(assemble(config(family="decoder", kv_heads=HEADS)), "pre") is not None
