"""QK-norm (``model.qk_norm``): a norm of one head's width on every head's queries and keys,
before the rotation. Equal to transformers' Qwen3 attention with the same weights; the KV
cache holds the normalised keys, so incremental decoding equals the full forward; any scheme
takes it; an export that has no counterpart refuses it by name (a Llama-style decoder with
``qk_norm: rmsnorm`` exports as Qwen3: tests/test_llama_export.py)."""

from __future__ import annotations

import pytest
import torch
from registered import BUILTIN_SCHEMES

from normzoo.errors import ConfigError
from normzoo.models import assemble
from normzoo.nn.attention import MultiheadAttention
from normzoo.nn.norms import RMSNorm

SMALL = {"vocab_size": 61, "d_model": 32, "heads": 4, "ffn_dim": 64, "encoder_layers": 2,
         "decoder_layers": 2, "dropout": 0.0, "qk_norm": "rmsnorm"}


def test_qk_norm_attention_equals_qwen3_attention():
    """The same weights in transformers' Qwen3Attention (per-head RMSNorm on q and k, then
    RoPE, grouped-query) give the same output within 1e-5."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3 import modeling_qwen3 as qwen3

    torch.manual_seed(0)
    dim, heads, kv_heads, base, eps = 64, 4, 2, 10000.0, 1e-6
    ours = MultiheadAttention(dim, heads, bias=False, fused=False, kv_heads=kv_heads,
                              rope_base=base, impl="explicit",
                              qk_norm=lambda width: RMSNorm(width, eps=eps)).eval()
    with torch.no_grad():
        for norm in (ours.q_norm, ours.k_norm):
            norm.weight.uniform_(0.5, 1.5)
    rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": base}}
            if int(transformers.__version__.split(".")[0]) >= 5 else {"rope_theta": base})
    config = transformers.Qwen3Config(hidden_size=dim, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, head_dim=dim // heads,
                                      rms_norm_eps=eps, attention_bias=False,
                                      attn_implementation="eager", **rope)
    theirs = qwen3.Qwen3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for name in ("q", "k", "v"):
            getattr(theirs, f"{name}_proj").weight.copy_(getattr(ours, f"{name}_proj").weight)
        theirs.o_proj.weight.copy_(ours.out_proj.weight)
        theirs.q_norm.weight.copy_(ours.q_norm.weight)
        theirs.k_norm.weight.copy_(ours.k_norm.weight)
    x = torch.randn(2, 7, dim)
    positions = torch.arange(7)[None].expand(2, -1)
    cos, sin = qwen3.Qwen3RotaryEmbedding(config)(x, positions)
    causal = torch.full((7, 7), float("-inf")).triu(1)[None, None].expand(2, 1, 7, 7)
    expected = theirs(x, (cos, sin), causal)[0]
    torch.testing.assert_close(ours(x, causal=True), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_the_kv_cache_holds_normalised_keys_so_incremental_decoding_equals_the_full_forward(
        family):
    torch.manual_seed(1)
    model = assemble({**SMALL, "family": family, "positions": "rope", "kv_heads": 2}).eval()
    tgt = torch.randint(4, 61, (2, 6))
    if family == "decoder":
        full = model(tgt)
        cache = model.new_cache()
        steps = [model(tgt[:, i:i + 1], cache=cache) for i in range(tgt.shape[1])]
    else:
        src = torch.randint(4, 61, (2, 5))
        full = model(src, tgt)
        memory, memory_pad = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, i:i + 1], memory, memory_pad, cache=cache)
                 for i in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    keys = cache.layers[0].self_k  # normalised, then rotated: each head's rms is that of the
    assert keys is not None  # rotation of a unit-rms vector times the norm's weight (ones)
    torch.testing.assert_close(keys.pow(2).mean(-1), torch.ones(keys.shape[:-1]),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("residual", BUILTIN_SCHEMES)
def test_every_scheme_takes_qk_norm_and_trains_a_step(residual):
    torch.manual_seed(2)
    model = assemble({**SMALL, "family": "encoder_decoder", "residual": residual})
    names = [n for n, _ in model.named_parameters() if n.endswith(("q_norm.weight",
                                                                     "k_norm.weight"))]
    assert len(names) == 2 * (2 + 2 * 2)  # every self- and cross-attention, q and k
    src, tgt = torch.randint(4, 61, (2, 5)), torch.randint(4, 61, (2, 6))
    loss = model(src, tgt).float().logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if n in names)


def test_qk_norm_is_validated_as_a_norm_of_one_heads_width():
    with pytest.raises(ConfigError) as caught:
        assemble({**SMALL, "family": "encoder", "qk_norm": "batchnorm"})
    assert [p.path for p in caught.value.problems] == ["model.qk_norm"]
    assert "per-token norm" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        assemble({**SMALL, "qk_norm": {"name": "rmsnorm", "eps": -1}})
    assert caught.value.problems[0].path.startswith("model.qk_norm")
    with pytest.raises(ConfigError, match=r"model\.qk_norm"):
        assemble({**SMALL, "qk_norm": "nosuchnorm"})
    model = assemble({**SMALL, "family": "decoder", "qk_norm": {"name": "layernorm",
                                                               "eps": 1e-5}})
    assert model.decoder.layers[0].self_attn.q_norm.weight.shape == (32 // 4,)


def test_exports_without_a_counterpart_refuse_qk_norm_by_name():
    from normzoo.export.hf.llama import why_not_llama
    from normzoo.export.hf.plain import NotMappable, plain_model

    llama = assemble({**SMALL, "family": "decoder", "positions": "rope", "activation": "swiglu",
                      "bias": False, "norm": "rmsnorm", "embed_scale": False,
                      "qk_norm": "scalenorm"})  # rmsnorm maps to Qwen3 (test_llama_export)
    assert "model.qk_norm" in why_not_llama(llama)
    with pytest.raises(NotMappable, match=r"model\.qk_norm"):
        plain_model(assemble({**SMALL, "family": "encoder"}), "pre")
