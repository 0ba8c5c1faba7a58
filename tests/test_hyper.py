"""Hyper-Connections (``hyper``): equal to the reference implementation (lucidrains'
``hyper-connections``, a test extra) with the same parameters, static and dynamic; the paper's
initialisation; n copies in every family, with the KV cache; the connections are not
weight-decayed; the exports refuse it with the reason."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normzoo.models import assemble
from normzoo.residual import Family, StackInfo
from normzoo.residual import hyper as hc
from normzoo.residual.hyper import Hyper, HyperResidual

SMALL = {"vocab_size": 61, "d_model": 32, "heads": 4, "ffn_dim": 64, "encoder_layers": 2,
         "decoder_layers": 2, "dropout": 0.0}


def incremental_equals_full(model: nn.Module, family: str) -> torch.Tensor:
    """Decode six target tokens one at a time through the KV cache and check the logits equal
    the full forward's; returns the targets."""
    tgt = torch.randint(4, 61, (2, 6))
    with torch.no_grad():
        if family == "decoder":
            full = model(tgt)
            cache = model.new_cache()
            steps = [model(tgt[:, i:i + 1], cache=cache) for i in range(6)]
        else:
            src = torch.randint(4, 61, (2, 5))
            full = model(src, tgt)
            memory, pad = model.encode(src)
            cache = model.new_cache()
            steps = [model.decode(tgt[:, i:i + 1], memory, pad, cache=cache) for i in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    return tgt


class ReferenceRMSNorm(nn.Module):
    """The reference's norm of H for the dynamic weights: normalize * sqrt(d) * (gamma + 1)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * math.sqrt(x.shape[-1]) * (self.gamma + 1)


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("index", [0, 5])
def test_a_hyper_connection_equals_the_reference(dynamic: bool, index: int):
    reference = pytest.importorskip("hyper_connections")
    torch.manual_seed(0)
    streams, dim = 3, 16
    pre_norm, branch = nn.LayerNorm(dim), nn.Linear(dim, dim)
    ours = HyperResidual(pre_norm, ReferenceRMSNorm(dim) if dynamic else None, streams, dim,
                         index)
    theirs = reference.HyperConnections(streams, dim=dim, branch=nn.Sequential(pre_norm, branch),
                                        layer_index=index)
    # The paper's init, as the reference draws it: alpha_m = e_(k mod n), A_r = I, beta = 1.
    torch.testing.assert_close(ours.static_alpha, theirs.static_alpha)
    torch.testing.assert_close(ours.static_beta, theirs.static_beta)
    with torch.no_grad():  # trained-looking values, the same on both sides
        for p in ours.parameters():
            if p is not pre_norm.weight and p is not pre_norm.bias:
                p.add_(0.3 * torch.randn_like(p))
        theirs.static_alpha.copy_(ours.static_alpha)
        theirs.static_beta.copy_(ours.static_beta)
        if dynamic:
            theirs.norm.gamma.copy_(ours.mix_norm.gamma)
            theirs.dynamic_alpha_fn.copy_(ours.dynamic_alpha)
            theirs.dynamic_alpha_scale.copy_(ours.dynamic_alpha_scale)
            theirs.dynamic_beta_fn.copy_(ours.dynamic_beta)
            theirs.dynamic_beta_scale.copy_(ours.dynamic_beta_scale)
        else:  # static: the reference's dynamic parts at zero
            theirs.dynamic_alpha_fn.zero_()
            theirs.dynamic_beta_fn.zero_()
    h = torch.randn(2, 5, streams, dim)  # ours: [batch, time, copies, d]
    expected = theirs(h.permute(0, 2, 1, 3).reshape(2 * streams, 5, dim))  # theirs: (b s) t d
    expected = expected.reshape(2, streams, 5, dim).permute(0, 2, 1, 3)
    torch.testing.assert_close(ours(h, branch), expected, rtol=1e-5, atol=1e-5)


def test_the_stack_starts_from_n_copies_and_ends_with_their_sum():
    stack = StackInfo(Family.DECODER, "decoder", 0, 3, 8)
    scheme = Hyper(stack, streams=4)
    ends = scheme.ends(lambda: nn.Identity())
    x = torch.randn(2, 5, 8)
    state = ends.begin(x)
    assert state.shape == (2, 5, 4, 8) and torch.equal(state[:, :, 2], x)
    torch.testing.assert_close(ends(state), 4 * x)
    # At init each connection reads copy (k mod n) and writes its output into all of them.
    residual = scheme.residual(_site(stack, 1), lambda: nn.Identity())
    out = residual(state + torch.arange(4.0)[:, None], lambda h: 10 * h)
    # Layer 1's self-attention is the stack's connection k = 2: it reads copy 2 (x + 2).
    torch.testing.assert_close(out, state + torch.arange(4.0)[:, None]
                               + 10 * (x + 2.0).unsqueeze(-2))


def _site(stack: StackInfo, layer: int):
    from normzoo.residual import Site, SublayerKind

    return Site(stack, layer, SublayerKind.SELF_ATTN)  # index 2 * layer


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("dynamic", [True, False])
def test_incremental_decoding_with_n_copies_equals_the_full_forward(family: str, dynamic: bool):
    torch.manual_seed(1)
    model = assemble({**SMALL, "family": family, "positions": "rope",
                      "residual": {"name": "hyper", "streams": 3, "dynamic": dynamic}}).eval()
    with torch.no_grad():  # away from the init, where dynamic parts are zero
        for name, p in model.named_parameters():
            if "dynamic" in name:
                p.normal_(0, 0.3)
    incremental_equals_full(model, family)


def test_the_connections_are_not_weight_decayed_and_the_exports_refuse_hyper():
    from normzoo.export.hf.plain import NotMappable, plain_model
    from normzoo.recipe import OptimConfig
    from normzoo.tasks.optim import build_optimizer

    model = assemble({**SMALL, "family": "encoder", "residual": "hyper"})
    optimizer, _ = build_optimizer(model, OptimConfig(weight_decay=0.1), 10)
    decayed = {id(p) for p in optimizer.param_groups[0]["params"]}
    mixing = [p for n, p in model.named_parameters()
              if n.endswith(("static_alpha", "dynamic_alpha"))]
    assert mixing and all(p.dim() == 2 and id(p) not in decayed for p in mixing)
    with pytest.raises(NotMappable, match="HyperResidual"):
        plain_model(model, "hyper")


def test_hyper_trains_a_step_in_every_family():
    for family in ("encoder", "decoder", "encoder_decoder"):
        torch.manual_seed(2)
        model = assemble({**SMALL, "family": family, "residual": {"name": "hyper", "streams": 2}})
        tokens = torch.randint(4, 61, (2, 6))
        logits = model(tokens, tokens) if family == "encoder_decoder" else model(tokens)
        logits.float().logsumexp(-1).mean().backward()
        grads = [p.grad for n, p in model.named_parameters() if "static_beta" in n]
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_the_diagnostics_read_every_copy_of_the_stream_without_the_padding():
    from normzoo.diagnostics.probes import probe

    torch.manual_seed(3)
    model = assemble({**SMALL, "family": "encoder",
                      "residual": {"name": "hyper", "streams": 2}}).eval()
    tokens = torch.randint(4, 61, (2, 6))
    tokens[1, 4:] = 0  # padding
    seen = {}
    model.encoder.layers[0].register_forward_hook(
        lambda m, args, out: seen.__setitem__("out", out))
    with probe(model) as found:
        model(tokens)
    out = seen["out"]
    real = out[tokens.ne(0)]  # [real tokens, copies, d]
    assert real.shape[1:] == (2, 32)
    expected = real.reshape(-1, 32).norm(dim=-1).mean().item()
    assert found.stream_norm["encoder.layers.0"] == pytest.approx(expected, rel=1e-5)
    assert found.branch_ratio["encoder.layers.0.ffn"] > 0


# -- mHC: the same streams, the residual mixing made doubly stochastic ---------------------------
@pytest.mark.parametrize("index", [0, 3])
def test_an_mhc_connection_equals_the_reference(index: int):
    reference = pytest.importorskip("hyper_connections.manifold_constrained_hyper_connections")
    from normzoo.residual.mhc import MHCResidual

    torch.manual_seed(4)
    streams, dim = 3, 16
    pre_norm, branch = nn.LayerNorm(dim), nn.Linear(dim, dim)
    ours = MHCResidual(pre_norm, ReferenceRMSNorm(dim), streams, dim, index, sinkhorn_iters=20)
    theirs = reference.ManifoldConstrainedHyperConnections(
        streams, dim=dim, branch=nn.Sequential(pre_norm, branch), layer_index=index)
    torch.testing.assert_close(ours.static_alpha, theirs.static_alpha)
    with torch.no_grad():
        for p in ours.parameters():
            if p is not pre_norm.weight and p is not pre_norm.bias:
                p.add_(0.3 * torch.randn_like(p))
        theirs.static_alpha.copy_(ours.static_alpha)
        theirs.dynamic_alpha_fn.copy_(ours.dynamic_alpha[None])
        theirs.pre_branch_scale.copy_(ours.pre_scale)
        theirs.residual_scale.copy_(ours.residual_scale)
        theirs.static_beta.copy_(ours.static_beta)
        theirs.dynamic_beta_fn.copy_(ours.dynamic_beta)
        theirs.h_post_scale.copy_(ours.post_scale)
        theirs.norm.gamma.copy_(ours.mix_norm.gamma)
    h = torch.randn(2, 5, streams, dim)
    expected = theirs(h.permute(0, 2, 1, 3).reshape(2 * streams, 5, dim))
    expected = expected.reshape(2, streams, 5, dim).permute(0, 2, 1, 3)
    torch.testing.assert_close(ours(h, branch), expected, rtol=1e-5, atol=1e-5)


def test_the_residual_mixing_of_mhc_is_doubly_stochastic():
    from normzoo.residual.mhc import sinkhorn_knopp

    torch.manual_seed(5)
    ones = torch.ones(7, 4)
    for spread, iterations, columns in ((1.0, 20, 1e-3), (3.0, 500, 1e-4)):
        # Rows sum to 1 exactly (normalised last); columns approach it as iterations grow, more
        # slowly the more the logits spread.
        mix = sinkhorn_knopp(spread * torch.randn(7, 4, 4), iterations)
        torch.testing.assert_close(mix.sum(-1), ones, rtol=0, atol=1e-5)
        torch.testing.assert_close(mix.sum(-2), ones, rtol=0, atol=columns)
        assert (mix >= 0).all()
    model = assemble({**SMALL, "family": "decoder", "residual": {"name": "mhc", "streams": 3}})
    residual = model.decoder.layers[1].ffn_residual
    alpha, beta = residual.connections(torch.randn(2, 5, 3, 32))
    torch.testing.assert_close(alpha[..., 1:].sum(-1), torch.ones(2, 5, 3), rtol=0, atol=1e-5)
    assert ((beta > 0) & (beta < 2)).all() and ((alpha[..., 0] > 0) & (alpha[..., 0] < 1)).all()


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_mhc_decodes_incrementally_as_its_full_forward_and_trains(family: str):
    torch.manual_seed(6)
    model = assemble({**SMALL, "family": family, "residual": {"name": "mhc", "streams": 2,
                                                             "sinkhorn_iters": 5}}).eval()
    tgt = incremental_equals_full(model, family)
    model.train()
    logits = model(tgt) if family == "decoder" else model(tgt, tgt)
    logits.float().logsumexp(-1).mean().backward()
    assert model.decoder.layers[0].ffn_residual.dynamic_alpha.grad.abs().sum() > 0


# -- the condition of equality: the norm the dynamic connections read H through ------------------
def _scheme_connection(name: str, mixing: str, streams: int = 3, dim: int = 16):
    """Layer 1's self-attention connection (k = 2) as the scheme builds it, every norm the
    model's a LayerNorm (``model.norm``'s default), its parameters moved off their init."""
    from normzoo.residual.mhc import MHC

    stack = StackInfo(Family.DECODER, "decoder", 0, 3, dim)
    scheme = (Hyper(stack, streams=streams, mixing_norm=mixing) if name == "hyper"
              else MHC(stack, streams=streams, mixing_norm=mixing))
    ours = scheme.residual(_site(stack, 1), lambda: nn.LayerNorm(dim))
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return ours


def _the_reference(name: str, ours, branch: nn.Module):
    """The reference connection around ``ours``'s pre-norm and ``branch``, with its parameters."""
    module = pytest.importorskip("hyper_connections.manifold_constrained_hyper_connections")
    streams, dim = ours.static_alpha.shape[0], ours.dynamic_alpha.shape[0]
    cls = (pytest.importorskip("hyper_connections").HyperConnections if name == "hyper"
           else module.ManifoldConstrainedHyperConnections)
    theirs = cls(streams, dim=dim, branch=nn.Sequential(ours.norm, branch), layer_index=2)
    if name == "hyper":
        mapping = {"static_alpha": "static_alpha", "static_beta": "static_beta",
                   "dynamic_alpha_fn": "dynamic_alpha", "dynamic_beta_fn": "dynamic_beta",
                   "dynamic_alpha_scale": "dynamic_alpha_scale",
                   "dynamic_beta_scale": "dynamic_beta_scale"}
    else:
        mapping = {"static_alpha": "static_alpha", "static_beta": "static_beta",
                   "dynamic_alpha_fn": "dynamic_alpha", "dynamic_beta_fn": "dynamic_beta",
                   "pre_branch_scale": "pre_scale", "residual_scale": "residual_scale",
                   "h_post_scale": "post_scale"}
    with torch.no_grad():
        for their_name, our_name in mapping.items():
            their = getattr(theirs, their_name)
            their.copy_(getattr(ours, our_name).reshape(their.shape))
        theirs.norm.gamma.copy_(ours.mix_norm.gamma)
    return theirs


@pytest.mark.parametrize("name", ["hyper", "mhc"])
def test_the_schemes_equal_the_reference_with_mixing_norm_reference(name: str):
    """docs/schemes.md's condition: ``mixing_norm: reference``, whatever ``model.norm`` (here
    LayerNorm, the default, before each sublayer as the reference's branch has it)."""
    torch.manual_seed(7)
    ours = _scheme_connection(name, "reference")
    assert isinstance(ours.mix_norm, hc.ReferenceRMSNorm)
    h = torch.randn(2, 5, 3, 16)
    formula = ReferenceRMSNorm(16)  # the test's own transcription of the reference's norm
    with torch.no_grad():
        formula.gamma.copy_(ours.mix_norm.gamma)
    torch.testing.assert_close(ours.mix_norm(h), formula(h))
    branch = nn.Linear(16, 16)
    theirs = _the_reference(name, ours, branch)
    expected = theirs(h.permute(0, 2, 1, 3).reshape(6, 5, 16))
    expected = expected.reshape(2, 3, 5, 16).permute(0, 2, 1, 3)
    torch.testing.assert_close(ours(h, branch), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["hyper", "mhc"])
def test_with_the_models_layernorm_the_dynamic_connections_are_not_the_references(name: str):
    """The default, ``mixing_norm: model``, keeps normzoo's connections (a LayerNorm's
    parameters, so its checkpoints load) and is not the reference: LayerNorm centres H."""
    torch.manual_seed(7)
    default = _scheme_connection(name, "model")
    assert isinstance(default.mix_norm, nn.LayerNorm)
    torch.manual_seed(7)
    reference = _scheme_connection(name, "reference")
    h = torch.randn(2, 5, 3, 16) + 1.0  # a mean over the channels, which LayerNorm removes
    with torch.no_grad():  # the same connections; the norms as alike as LayerNorm can be
        for their_name, their in reference.named_parameters():
            if not their_name.startswith("mix_norm."):
                default.get_parameter(their_name).copy_(their)
        default.mix_norm.weight.copy_(reference.mix_norm.gamma + 1)
        default.mix_norm.bias.zero_()
    for ours, theirs in zip(default.connections(h), reference.connections(h), strict=True):
        assert (ours - theirs).abs().max() > 1e-2


def test_mixing_norm_reaches_the_scheme_from_the_recipe_and_its_gamma_is_not_decayed():
    from normzoo.recipe import OptimConfig
    from normzoo.tasks.optim import build_optimizer

    model = assemble({**SMALL, "family": "decoder",
                      "residual": {"name": "mhc", "streams": 2, "mixing_norm": "reference"}})
    residual = model.decoder.layers[0].ffn_residual
    assert isinstance(residual.mix_norm, hc.ReferenceRMSNorm)
    optimizer, _ = build_optimizer(model, OptimConfig(weight_decay=0.1), 10)
    decayed = {id(p) for p in optimizer.param_groups[0]["params"]}
    assert id(residual.mix_norm.gamma) not in decayed
    default = assemble({**SMALL, "family": "decoder", "residual": "hyper"})
    assert "decoder.layers.0.ffn_residual.mix_norm.bias" in default.state_dict()
