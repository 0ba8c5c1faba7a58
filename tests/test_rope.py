"""Rotary position embeddings (``model.positions: rope``) compute what Hugging Face's Llama
computes, rotate at the right absolute positions, and replace the position table."""

from __future__ import annotations

import pytest
import torch

from normzoo.models import assemble
from normzoo.nn.attention import MultiheadAttention
from normzoo.nn.rotary import RotaryEmbedding, apply_rotary, rotate_half

HEAD_DIM, BASE = 16, 5000.0


def llama_rotary(head_dim: int, base: float, heads: int = 2):
    """transformers' own ``LlamaRotaryEmbedding`` and ``apply_rotary_pos_emb`` (5.x: the base is
    ``rope_parameters["rope_theta"]``; 4.x took ``rope_theta`` itself)."""
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_llama

    config = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads,
                         head_dim=head_dim, max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    assert rotary.inv_freq.shape == (head_dim // 2,)
    return rotary, modeling_llama.apply_rotary_pos_emb


@pytest.mark.parametrize("offset", [0, 7, 1000])
def test_rotary_equals_transformers_llama(offset):
    llama, apply_rotary_pos_emb = llama_rotary(HEAD_DIM, BASE)
    generator = torch.Generator().manual_seed(offset)
    q = torch.randn(2, 3, 5, HEAD_DIM, generator=generator)  # [B, H, T, head_dim]
    k = torch.randn(2, 3, 5, HEAD_DIM, generator=generator)
    positions = torch.arange(offset, offset + 5)[None].expand(2, -1)
    cos, sin = llama(q, positions)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    ours = RotaryEmbedding(HEAD_DIM, BASE)
    assert torch.equal(ours.inverse_frequencies(), llama.inv_freq)
    actual_q, actual_k = ours(q, k, offset)
    diff = max((actual_q - expected_q).abs().max().item(),
               (actual_k - expected_k).abs().max().item())
    print(f"max abs diff vs transformers' Llama rotary, offset {offset}: {diff:.3g}")
    assert diff <= 1e-6


def test_rotate_half_is_llamas_non_interleaved_layout():
    x = torch.arange(1.0, 7.0)
    assert rotate_half(x).tolist() == [-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]
    # channel i turns with channel i + d/2 by angle theta: a plain 2-D rotation of that pair
    theta = torch.tensor(0.3)
    cos, sin = theta.cos().expand(6), theta.sin().expand(6)
    y = apply_rotary(x, cos, sin)
    assert torch.allclose(y[0], x[0] * theta.cos() - x[3] * theta.sin())
    assert torch.allclose(y[3], x[3] * theta.cos() + x[0] * theta.sin())


def test_scores_depend_only_on_the_distance():
    rotary = RotaryEmbedding(HEAD_DIM)
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, HEAD_DIM, generator=generator).unbind(0)

    def score(i: int, j: int) -> float:
        qi = rotary(q, q, i)[0]
        kj = rotary(k, k, j)[1]
        return float((qi * kj).sum())

    assert score(3, 1) == pytest.approx(score(40, 38), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_cos_sin_cache_grows_on_demand_and_stays_float32():
    rotary = RotaryEmbedding(8)
    q = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16)
    rotary.to(torch.bfloat16)
    out, _ = rotary(q, q, 0)
    assert out.dtype == torch.bfloat16
    assert rotary._cos.dtype == torch.float32 and rotary._cos.shape[0] >= 4
    rotary(q, q, 100)
    assert rotary._cos.shape[0] >= 104
    cos, sin = rotary.cos_sin(104, torch.device("cpu"))
    fresh = RotaryEmbedding(8).cos_sin(104, torch.device("cpu"))
    assert torch.equal(cos, fresh[0]) and torch.equal(sin, fresh[1])


def test_rotary_refuses_odd_head_dims_and_bad_bases():
    with pytest.raises(ValueError, match="even head dimension"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="positive"):
        RotaryEmbedding(8, base=0.0)


def test_self_attention_rotates_and_cross_attention_does_not():
    self_attn = MultiheadAttention(16, 2, rope_base=10000.0)
    cross = MultiheadAttention(16, 2, cross=True, rope_base=10000.0)
    assert isinstance(self_attn.rotary, RotaryEmbedding) and self_attn.rotary.head_dim == 8
    assert cross.rotary is None
    assert MultiheadAttention(16, 2).rotary is None
    assert list(self_attn.state_dict()) == list(MultiheadAttention(16, 2).state_dict())


@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder_decoder"])
def test_rope_models_have_no_position_table_and_the_same_state_keys(family):
    base = {"family": family, "vocab_size": 40, "d_model": 16, "heads": 2, "ffn_dim": 32,
            "encoder_layers": 1, "decoder_layers": 1, "max_positions": 32}
    rope = assemble({**base, "positions": "rope", "rope_base": 500.0})
    sinusoidal = assemble(base)
    assert not any("position" in name or "sinusoid" in name for name in rope.state_dict())
    assert set(rope.state_dict()) == set(sinusoidal.state_dict())  # sinusoids: not saved
    rotaries = [m for m in rope.modules() if isinstance(m, RotaryEmbedding)]
    self_attention = 1 if family != "encoder_decoder" else 2
    assert len(rotaries) == self_attention and all(r.base == 500.0 for r in rotaries)
    embeddings = [m for name, m in rope.named_modules() if name.endswith("embeddings")]
    assert all(e.position_table() is None for e in embeddings)


def test_a_rope_encoder_tells_positions_apart():
    torch.manual_seed(0)
    model = assemble({"family": "encoder", "vocab_size": 40, "d_model": 16, "heads": 2,
                      "ffn_dim": 32, "encoder_layers": 1, "positions": "rope",
                      "dropout": 0.0}).eval()
    tokens = torch.tensor([[5, 6, 5, 7]])
    with torch.no_grad():
        hidden = model.encode(tokens)
    # Without positions, bidirectional attention is blind to order: token 5 at positions 0 and
    # 2 would get one state. Rotations make its distances to 6 and 7 differ, and the states too.
    assert not torch.allclose(hidden[0, 0], hidden[0, 2], atol=1e-4)


def test_a_table_made_under_inference_mode_does_not_break_training():
    """Generating under ``torch.inference_mode`` and then training the same module (a library
    user's loop) rebuilds cos/sin outside inference mode rather than failing in backward."""
    rotary = RotaryEmbedding(8)
    q = torch.randn(1, 2, 5, 8)
    with torch.inference_mode():
        rotary(q, q)
    q = q.clone().requires_grad_()
    rq, rk = rotary(q, q)
    (rq * rk).sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
