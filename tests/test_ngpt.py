"""nGPT (``model.residual: ngpt``) against its references.

* lucidrains' ``nGPT-pytorch`` (the ``reference`` test extra), with the same weights and
  scalings, computes the same logits. Its layout differs from normzoo's in ways that leave the
  forward pass unchanged, and the test maps them: interleaved rotary pairs (q and k rows
  permuted per head), s_qk on the queries only (theirs = ours squared), the hidden scale
  without sqrt(d) (theirs = ours times sqrt(d)).
* The paper's code (NVIDIA/ngpt ``model.py``, not installable: it needs flash-attn) is pinned
  by its constants: the values each scaling is used at and stored at, |alpha|, sqrt(head_dim)
  as the softmax scale, and matrices normalised along d_model.
"""

from __future__ import annotations

import math

import pytest
import torch

from normzoo.errors import ConfigError
from normzoo.models import assemble
from normzoo.residual.ngpt import NGPTEnds, NGPTResidual, UnitQueryKey
from normzoo.tasks.optim import declared_options

D, HEADS, LAYERS, VOCAB, FFN = 64, 4, 2, 97, 128
LLAMA = {"family": "decoder", "vocab_size": VOCAB, "d_model": D, "heads": HEADS, "ffn_dim": FFN,
         "decoder_layers": LAYERS, "dropout": 0.0, "positions": "rope", "activation": "swiglu",
         "bias": False, "tie_output": False, "fused_qkv": False, "norm": "rmsnorm",
         "embed_scale": False, "residual": "ngpt", "max_positions": 64}


def ngpt_model(**changes):
    torch.manual_seed(0)
    return assemble({**LLAMA, **changes}).eval()


def _rows_are_unit(weight: torch.Tensor, dim: int) -> bool:
    norms = weight.norm(dim=dim)
    return torch.allclose(norms[norms > 0], torch.ones(()), atol=1e-5)


def _randomise_scalings(model) -> None:
    """Every learned scaling away from its init, so a mapping error cannot hide behind ones."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".scale"):
                parameter.mul_(torch.empty_like(parameter).uniform_(0.5, 1.5))


def _interleave(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of q or k (``[heads * head_dim, ...]``) from rotate-half pairs (i, i + hd/2) to
    interleaved pairs (2i, 2i + 1), head by head."""
    head_dim = rows.shape[0] // heads
    half = head_dim // 2
    order = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    index = (torch.arange(heads)[:, None] * head_dim + order[None]).flatten()
    return rows[index]


def test_equals_lucidrains_ngpt_with_the_same_weights_and_scalings():
    ngpt = pytest.importorskip("nGPT_pytorch")
    ours = ngpt_model()
    _randomise_scalings(ours)
    torch.manual_seed(1)
    theirs = ngpt.nGPT(num_tokens=VOCAB, dim=D, depth=LAYERS, dim_head=D // HEADS, heads=HEADS,
                       ff_expand_factor=FFN * 3 / (2 * D), manual_norm_weights=True,
                       tied_embedding=False, add_value_residual=False, alpha_init=0.05)
    # no .eval(): its modules define __eq__ without __hash__, so module walks fail; nothing in
    # it depends on the mode (no dropout)
    root = math.sqrt(D)
    with torch.no_grad():
        theirs.token_embed.weight.copy_(ours.embeddings.tokens.weight)
        theirs.to_logits.weight.copy_(ours.output.weight)
        theirs.logit_scale.scale.copy_(ours.decoder.ends.s_z.scale)
        for layer, (attn, ff) in zip(ours.decoder.layers, theirs.layers, strict=True):
            mine = layer.self_attn
            attn.fn.to_q.weight.copy_(_interleave(mine.q_proj.weight, HEADS))
            attn.fn.to_k.weight.copy_(_interleave(mine.k_proj.weight, HEADS))
            attn.fn.to_v.weight.copy_(mine.v_proj.weight)
            attn.fn.to_out.weight.copy_(mine.out_proj.weight)
            s_qk = _interleave(mine.qk.s_qk(), HEADS)
            attn.fn.qk_scale.scale.copy_(s_qk**2 / attn.fn.qk_scale.forward_scale)
            attn.branch_scale.scale.copy_(layer.self_attn_residual.alpha.scale)
            ffn = layer.ffn
            ff.fn.to_gate.weight.copy_(ffn.ffn_in.weight)
            ff.fn.to_hidden.weight.copy_(ffn.ffn_gate.weight)
            ff.fn.to_out.weight.copy_(ffn.ffn_out.weight)
            ff.fn.gate_scale.scale.copy_(ffn.scales.s_v())
            ff.fn.hidden_scale.scale.copy_(ffn.scales.s_u() * root)
            ff.branch_scale.scale.copy_(layer.ffn_residual.alpha.scale)
    tokens = torch.randint(2, VOCAB, (3, 11))  # no pad id: the reference has none
    torch.testing.assert_close(ours(tokens), theirs(tokens), rtol=0, atol=1e-5)


def test_the_scalings_are_used_and_stored_at_the_papers_code_values():
    """NVIDIA/ngpt model.py: alpha_A, alpha_M used at 0.05 and stored at 1/sqrt(d); s_qk used
    at 1, stored at 1/sqrt(d); s_uv used at 1 (times sqrt(d)), stored at 1; s_z used at 1,
    stored at 1/sqrt(d); softmax scale sqrt(head_dim)."""
    model = ngpt_model()
    layer = model.decoder.layers[0]
    base = D**-0.5
    for scaling, used, stored in [(layer.self_attn_residual.alpha, 0.05, base),
                                  (layer.ffn_residual.alpha, 0.05, base),
                                  (layer.self_attn.qk.s_qk, 1.0, base),
                                  (layer.ffn.scales.s_u, 1.0, 1.0),
                                  (layer.ffn.scales.s_v, 1.0, 1.0),
                                  (model.decoder.ends.s_z, 1.0, base)]:
        torch.testing.assert_close(scaling.scale, torch.full_like(scaling.scale, stored))
        torch.testing.assert_close(scaling(), torch.full_like(scaling.scale, used))
    assert layer.self_attn.qk.s_qk.scale.numel() == D
    assert model.decoder.ends.s_z.scale.numel() == VOCAB
    assert layer.self_attn.scale == pytest.approx(math.sqrt(D // HEADS))


def test_the_update_interpolates_on_the_sphere_with_the_absolute_alpha():
    residual = NGPTResidual(D, 0.05)
    with torch.no_grad():
        residual.alpha.scale.neg_()  # a negative alpha acts as its absolute value
    h = torch.nn.functional.normalize(torch.randn(5, D), dim=-1)
    branch = torch.randn(5, D)
    b = branch / branch.norm(dim=-1, keepdim=True)
    expected = h + 0.05 * (b - h)
    expected = expected / expected.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(residual(h, lambda x: branch), expected)


def test_every_matrix_is_unit_along_d_model_when_built_and_after_every_update():
    model = ngpt_model(tie_output=False).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)
    for _ in range(2):
        tokens = torch.randint(2, VOCAB, (2, 9))
        model(tokens).logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        assert not _rows_are_unit(model.output.weight, 1)  # the step moved it off the sphere
        model.scheme.after_step(model)
        assert _rows_are_unit(model.embeddings.tokens.weight, 1)
        assert _rows_are_unit(model.output.weight, 1)
        for layer in model.decoder.layers:
            for module in (layer.self_attn, layer.ffn):
                for role, weight in module.role_weights().items():
                    axis = 0 if role in ("out", "ffn_out") else 1
                    assert weight.shape[axis] == D and _rows_are_unit(weight, axis), role


def test_the_pad_embedding_stays_zero_and_no_state_is_nan():
    model = ngpt_model()
    pad = model.config.pad_id
    assert model.embeddings.tokens.weight[pad].abs().sum() == 0
    tokens = torch.full((2, 6), pad)
    tokens[0, :3] = torch.tensor([5, 6, 7])
    assert torch.isfinite(model(tokens)).all()


def test_the_scalings_are_declared_free_of_weight_decay():
    model = ngpt_model()
    declared = declared_options(model)
    scalings = [name for name, _ in model.named_parameters() if name.endswith(".scale")]
    assert len(scalings) == 4 * LAYERS + LAYERS + 1  # alpha x2, s_u, s_v a layer; s_qk; s_z
    assert all(declared[name] == {"weight_decay": 0.0} for name in scalings)


def test_grouped_query_attention_scales_each_key_head_and_its_query_heads_alike():
    qk = UnitQueryKey(heads=4, kv_heads=2, head_dim=8, dim=32)
    with torch.no_grad():
        qk.s_qk.scale.uniform_(0.5, 1.5)
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
    q2, k2 = qk(q, k)
    s = qk.s_qk().view(2, 1, 8)
    torch.testing.assert_close(k2, torch.nn.functional.normalize(k, dim=-1) * s)
    torch.testing.assert_close(q2[:, 2:4], torch.nn.functional.normalize(q[:, 2:4], dim=-1)
                               * s[1:2])


def test_an_encoder_stack_has_no_logit_scale():
    model = assemble({**LLAMA, "family": "encoder_decoder", "encoder_layers": 1})
    assert isinstance(model.encoder.ends, NGPTEnds) and model.encoder.ends.s_z is None
    assert model.decoder.ends.s_z is not None


def test_fsdp_is_refused_in_the_recipe():
    from normzoo.recipe.loading import load

    with pytest.raises(ConfigError, match="nGPT normalises whole matrix rows"):
        load("recipes/gpt_llama.yaml",
                    ["model.residual=ngpt", "trainer.strategy=fsdp", "trainer.devices=2"])


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_every_hidden_state_is_a_unit_vector(family):
    """The paper's invariant: the state entering and leaving every layer lies on the sphere."""
    model = ngpt_model(family=family, encoder_layers=2, positions="learned", embed_scale=True)
    states = []
    for module in model.modules():
        if type(module).__name__ in ("EncoderLayer", "DecoderLayer"):
            module.register_forward_hook(lambda _m, args, out: states.extend([args[0], out]))
    tokens = torch.randint(2, VOCAB, (2, 7))
    model(tokens) if family == "decoder" else model(tokens, tokens)
    assert len(states) == 4 * (1 if family == "decoder" else 2)
    for state in states:
        torch.testing.assert_close(state.norm(dim=-1), torch.ones(state.shape[:-1]))
