"""nGPT (``model.residual: ngpt``) against its references.

* lucidrains' ``nGPT-pytorch`` (the ``reference`` test extra), with the same weights and
  scalings, computes the same logits. Its layout differs from normzoo's in ways that leave the
  forward pass unchanged, and the test maps them: interleaved rotary pairs (q and k rows
  permuted per head), s_qk on the queries only (theirs = ours squared), the hidden scale
  without sqrt(d) (theirs = ours times sqrt(d)).
* Trained with AdamW from the same weights and batches, both keep the embedding rows unit by
  renormalising them after each step, and agree on the losses and every weight over three
  steps; for that the test stores the reference's hidden scale as normzoo does and gives it
  the paper's s_qk (q and k each by s_qk, not q by its square), which Adam steps differently.
* The paper's code (NVIDIA/ngpt ``model.py``, not installable: it needs flash-attn) is pinned
  by its constants: the values each scaling is used at and stored at, |alpha|, sqrt(head_dim)
  as the softmax scale, and matrices normalised along d_model.
"""

from __future__ import annotations

import importlib
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


class _PaperQK(torch.nn.Module):
    """s_qk as the paper's code stores and uses it, in the reference's place: the reference
    scales q alone by its own s_qk (ours squared), the paper q and k by one s_qk; the same
    forward pass, but Adam steps a parameter and its square differently, so a comparison over
    training gives the reference the paper's parameter here (its one part not the package's)."""

    def __init__(self, stored: torch.Tensor) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(stored.clone())

    def forward(self) -> torch.Tensor:
        return (self.scale * D**0.5) ** 2  # used on q alone: ours on q and on k


def _lucidrains(ngpt, ours, *, training: bool = False):
    """The reference with ``ours``'s weights and scalings, and the (ours, theirs, map) pairs of
    its parameters, ``map`` the layout change (None: the same tensor). ``training`` stores the
    hidden scale as ours does (sqrt(d) in the forward pass, so the same parameter, not one
    sqrt(d) times larger) and s_qk with :class:`_PaperQK`: Adam's steps then agree too."""
    hidden = {"s_ff_hidden_init": math.sqrt(D), "s_ff_hidden_scale": 1.0} if training else {}
    theirs = ngpt.nGPT(num_tokens=VOCAB, dim=D, depth=LAYERS, dim_head=D // HEADS, heads=HEADS,
                       ff_expand_factor=FFN * 3 / (2 * D), manual_norm_weights=True,
                       tied_embedding=False, add_value_residual=False, alpha_init=0.05,
                       **hidden).to(ours.output.weight.dtype)
    root = math.sqrt(D)

    def interleave(rows):
        return _interleave(rows, HEADS)

    pairs = [(ours.embeddings.tokens.weight, theirs.token_embed.weight, None),
             (ours.output.weight, theirs.to_logits.weight, None),
             (ours.decoder.ends.s_z.scale, theirs.logit_scale.scale, None)]
    with torch.no_grad():
        for layer, (attn, ff) in zip(ours.decoder.layers, theirs.layers, strict=True):
            mine, ffn = layer.self_attn, layer.ffn
            pairs += [(mine.q_proj.weight, attn.fn.to_q.weight, interleave),
                      (mine.k_proj.weight, attn.fn.to_k.weight, interleave),
                      (mine.v_proj.weight, attn.fn.to_v.weight, None),
                      (mine.out_proj.weight, attn.fn.to_out.weight, None),
                      (layer.self_attn_residual.alpha.scale, attn.branch_scale.scale, None),
                      (ffn.ffn_in.weight, ff.fn.to_gate.weight, None),
                      (ffn.ffn_gate.weight, ff.fn.to_hidden.weight, None),
                      (ffn.ffn_out.weight, ff.fn.to_out.weight, None),
                      (ffn.scales.s_v.scale, ff.fn.gate_scale.scale, None),
                      (layer.ffn_residual.alpha.scale, ff.branch_scale.scale, None)]
            if training:
                attn.fn.qk_scale = _PaperQK(interleave(mine.qk.s_qk.scale))
                pairs += [(mine.qk.s_qk.scale, attn.fn.qk_scale.scale, interleave),
                          (ffn.scales.s_u.scale, ff.fn.hidden_scale.scale, None)]
            else:
                s_qk = interleave(mine.qk.s_qk())
                attn.fn.qk_scale.scale.copy_(s_qk**2 / attn.fn.qk_scale.forward_scale)
                ff.fn.hidden_scale.scale.copy_(ffn.scales.s_u() * root)
        for mine, their, change in pairs:
            their.copy_(mine if change is None else change(mine))
    return theirs, pairs


@pytest.fixture
def ngpt(monkeypatch):
    """nGPT-pytorch with identity hashing back on the classes whose ``__eq__`` removed it, so
    that module walks (``.to``, ``.parameters()``, its own ``norm_weights_``) work."""
    package = pytest.importorskip("nGPT_pytorch")
    reference = importlib.import_module("nGPT_pytorch.nGPT")
    for name in ("Scale", "NormLinear", "Attention", "FeedForward", "nGPT"):
        monkeypatch.setattr(getattr(reference, name), "__hash__", object.__hash__)
    return package


def test_equals_lucidrains_ngpt_with_the_same_weights_and_scalings(ngpt):
    ours = ngpt_model()
    _randomise_scalings(ours)
    torch.manual_seed(1)
    theirs, _ = _lucidrains(ngpt, ours)
    # no .eval(): nothing in it depends on the mode (no dropout)
    tokens = torch.randint(2, VOCAB, (3, 11))  # no pad id: the reference has none
    torch.testing.assert_close(ours(tokens), theirs(tokens), rtol=0, atol=1e-5)


def test_trains_as_lucidrains_ngpt_over_three_adamw_steps(ngpt):
    """The same weights, batches and AdamW (weight decay on the matrices, none on the
    scalings), each model renormalising after every step as it does (``after_step``; the
    reference's ``norm_weights_``): the losses and every weight agree at each step.

    In float64, so that only normzoo's float32 rotary rounding (1e-6 after a step at this
    rate, where Adam's first step divides a gradient near eps) is left. Under the old rule, the
    embedding normalised in the forward pass, its gradient was projected onto each row's tangent
    space and the weights were 4e-3 apart after one step."""
    ours = ngpt_model().double().train()
    _randomise_scalings(ours)
    torch.manual_seed(1)
    theirs, pairs = _lucidrains(ngpt, ours, training=True)
    trained = [p for p in theirs.parameters() if p.requires_grad]  # not the fixed rotary freqs
    assert {id(p) for p in trained} == {id(their) for _, their, _ in pairs}

    def adamw(parameters):
        parameters = list(parameters)
        return torch.optim.AdamW([{"params": [p for p in parameters if p.dim() == 2]},
                                  {"params": [p for p in parameters if p.dim() < 2],
                                   "weight_decay": 0.0}], lr=2e-3, weight_decay=0.1)

    mine_opt, their_opt = adamw(m for m, _, _ in pairs), adamw(t for _, t, _ in pairs)
    torch.manual_seed(2)
    for _ in range(3):
        tokens = torch.randint(2, VOCAB, (4, 12))
        inputs, targets = tokens[:, :-1], tokens[:, 1:].flatten()
        losses = []
        for model, optimizer in ((ours, mine_opt), (theirs, their_opt)):
            loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach())
        ours.scheme.after_step(ours)
        theirs.norm_weights_()
        torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=1e-8)
        for mine, their, change in pairs:
            torch.testing.assert_close(mine if change is None else change(mine), their,
                                       rtol=0, atol=1e-5)


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
