"""Residual schemes inside assembled models: weight init by role, and known ways to wire them wrong.

The formula tests on stubs (``test_schemes.py``) cannot see how the model code wires a scheme in.
These tests build real models with :func:`normzoo.models.assemble` and check:

* with ``init: paper``, DeepNorm's beta (and Sub-LN's gamma) lands on exactly W_v, W_o, the feed-
  forward matrices and the cross-attention v/out, with xavier_normal gain 1 on W_q and W_k, also
  when q/k/v are one fused matrix (the default, torchscale's init, is pinned role by role in
  ``test_init_references.py``). With d_model = 256 each role's matrix has >= 65k entries, so its
  empirical std pins the gain to well under 1 %. The two known ways to get fused qkv wrong both
  move some std by > 18 %: beta applied to the whole fused matrix changes q and k (gain beta
  instead of 1) and every fan (3d + d instead of 2d); per-role gains with the fan of the fused
  [3d, d] shape give std g * sqrt(2 / 4d) instead of g * sqrt(2 / 2d).
* a DeepNorm decoder is really DeepNorm (decoder alpha, Post-LN placement), not Pre-LN: DeepNet
  (Wang et al. 2022) normalises every encoder and decoder sublayer with DeepNorm (Theorem 4.3),
  the decoder with its own alpha = (3M)^(1/4) (Fig. 2b);
* pre has exactly one final norm per stack and post none, in all three families (Pre-LN's final
  LN: Xiong et al. 2020; Post-LN: Vaswani et al. 2017);
* the ResiDual final LN sits at the end of the stack, not inside any layer: the output
  x_p + LN(x_d) is taken once, after the last layer (Xie et al. 2023, arXiv:2304.14802).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normzoo.models import assemble
from normzoo.nn.attention import QKV_GAIN
from normzoo.nn.norms import LayerNorm
from normzoo.residual.admin import AdminResidual, profile
from normzoo.residual.deepnorm import DeepNormResidual
from normzoo.residual.resi_dual import ResiDualEnds, ResiDualResidual

FAMILIES = ["encoder", "decoder", "encoder_decoder"]
VOCAB = 40

# Wide enough that empirical std tells gains apart; few layers, so building stays fast.
WIDE = {"d_model": 256, "heads": 4, "ffn_dim": 512, "vocab_size": VOCAB, "dropout": 0.0}
SMALL = {"d_model": 16, "heads": 2, "ffn_dim": 24, "vocab_size": VOCAB, "dropout": 0.0}


def build(family: str, residual, sizes: dict, n: int = 2, m: int = 3, **extra) -> nn.Module:
    torch.manual_seed(0)
    model = assemble(
        {
            "family": family,
            "encoder_layers": n,
            "decoder_layers": m,
            "residual": residual,
            **sizes,
            **extra,
        }
    )
    return model.eval()


def stacks(model: nn.Module) -> dict[str, nn.Module]:
    """The model's encoder/decoder stacks by name."""
    return {name: getattr(model, name) for name in ("encoder", "decoder") if hasattr(model, name)}


def sublayers(layer: nn.Module) -> dict[str, nn.Module]:
    """A layer's attention/feed-forward modules, found by what they expose (role_weights)."""
    return {
        name: module
        for name, module in layer.named_children()
        if module is not None and hasattr(module, "role_weights")
    }


# -- gains by role ------------------------------------------------------------------------------

# Literal gains, by hand. DeepNorm beta: encoder-only N=2: (8*2)^(-1/4) = 0.5; decoder-only M=3:
# (8*3)^(-1/4); enc-dec (N=2, M=3) encoder: 0.87 (2^4 * 3)^(-1/16), decoder: (12*3)^(-1/4).
# Sub-LN gamma: sqrt(ln 4); sqrt(ln 6); sqrt(ln 9 * ln 4 / 3); sqrt(ln 9).
GAINS = {
    "deepnorm": {
        "encoder": {"encoder": 0.5},
        "decoder": {"decoder": 0.45180100180492242},
        "encoder_decoder": {"encoder": 0.68303298211236216, "decoder": 0.40824829046386302},
    },
    "subln": {
        "encoder": {"encoder": 1.1774100225154747},
        "decoder": {"decoder": 1.3385661990458503},
        "encoder_decoder": {"encoder": 1.0076375078494640, "decoder": 1.4823038073675111},
    },
}
UNIT_ROLES = {"q", "k", "cross_q", "cross_k"}  # of self- and cross-attention alike


def xavier_std(gain: float, weight: torch.Tensor) -> float:
    """Std of xavier_normal(gain) on this role's own [out, in] matrix."""
    fan_out, fan_in = weight.shape
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def kurtosis(w: torch.Tensor) -> float:
    z = (w - w.mean()) / w.std()
    return (z**4).mean().item()


def check_role_gains(model: nn.Module, scheme: str, family: str) -> int:
    """Every role's matrix of every sublayer has the std of xavier_normal with its gain.

    Sub-LN leaves cross-attention at the blocks' default init (xavier_uniform, gain 1/sqrt(2) on
    q/k/v and 1 on out), as torchscale's decoder skips ``encoder_attn`` when it scales by gamma.
    """
    checked = 0
    for stack_name, stack in stacks(model).items():
        gain = GAINS[scheme][family][stack_name]
        for i, layer in enumerate(stack.layers):
            for sub_name, sub in sublayers(layer).items():
                default_init = scheme == "subln" and sub_name == "cross_attn"
                for role, weight in sub.role_weights().items():
                    unit = role in UNIT_ROLES or default_init
                    expected = xavier_std(1.0 if unit else gain, weight)
                    if default_init and role != "out":
                        expected *= QKV_GAIN
                    where = f"{stack_name}.layers[{i}].{sub_name} role {role}"
                    assert weight.std().item() == pytest.approx(expected, rel=0.04), where
                    if default_init:  # the blocks' default xavier_uniform (kurtosis 1.8)
                        assert 1.7 < kurtosis(weight) < 1.9, where
                    else:  # xavier_normal, not the blocks' default
                        assert 2.8 < kurtosis(weight) < 3.2, where
                    checked += 1
    return checked


@pytest.mark.parametrize("fused", [True, False], ids=["fused_qkv", "separate_qkv"])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", ["deepnorm", "subln"])  # the schemes with per-role init gains
def test_gains_land_on_roles(scheme: str, family: str, fused: bool) -> None:
    model = build(family, {"name": scheme, "init": "paper"}, WIDE, fused_qkv=fused)
    d = WIDE["d_model"]
    fused_shapes = [
        p.shape for s in stacks(model).values() for p in s.parameters() if p.shape == (3 * d, d)
    ]
    assert bool(fused_shapes) is fused, "fused_qkv must decide how q/k/v are stored"
    # (self-attn 4 roles + ffn 2) per layer; enc-dec decoder layers add cross-attn's 4
    expected_count = {"encoder": 2 * 6, "decoder": 3 * 6, "encoder_decoder": 2 * 6 + 3 * 10}
    assert check_role_gains(model, scheme, family) == expected_count[family]


@pytest.mark.parametrize("scheme", ["deepnorm", "subln"])  # the schemes with per-role init gains
def test_gains_land_on_gated_ffn(scheme: str) -> None:
    """SwiGLU has a third FFN matrix (the gate); it is a feed-forward matrix like the others."""
    model = build("decoder", {"name": scheme, "init": "paper"}, WIDE, activation="swiglu")
    ffn_roles = set(sublayers(model.decoder.layers[0])["ffn"].role_weights())
    assert ffn_roles == {"ffn_in", "ffn_gate", "ffn_out"}
    check_role_gains(model, scheme, "decoder")


@pytest.mark.parametrize("fused", [True, False], ids=["fused_qkv", "separate_qkv"])
def test_subln_cross_attention_follows_torchscale(fused: bool) -> None:
    """torchscale's encoder-decoder ``DecoderLayer`` with ``subln=True``: an inner LN in
    self-attention and in the feed-forward, none in the encoder-decoder attention
    (``MultiheadAttention`` builds ``inner_attn_ln`` only for self-attention), and the decoder's
    gamma = sqrt(ln 3M) scales fc1, fc2, out_proj, v_proj except in ``encoder_attn``, which keeps
    nn.Linear's default U(+-1/sqrt(d))."""
    model = build("encoder_decoder", "subln", WIDE, fused_qkv=fused)
    gamma = GAINS["subln"]["encoder_decoder"]["decoder"]
    for layer in model.decoder.layers:
        assert isinstance(layer.self_attn.inner_norm, LayerNorm)
        assert isinstance(layer.ffn.inner_norm, LayerNorm)
        assert isinstance(layer.cross_attn.inner_norm, nn.Identity), "no inner LN in cross-attn"
        for role, weight in layer.cross_attn.role_weights().items():
            linear_default_std = (3 * weight.shape[1]) ** -0.5
            assert weight.std().item() == pytest.approx(linear_default_std, rel=0.04), role
            assert 1.7 < kurtosis(weight) < 1.9, f"cross {role}: nn.Linear's uniform default"
        v = layer.self_attn.role_weights()["v"]
        assert v.std().item() == pytest.approx(gamma * (3 * v.shape[1]) ** -0.5, rel=0.04)


def test_subln_cross_attention_option_keeps_inner_norm_and_gamma() -> None:
    """``cross_attention: subln``: cross-attention gets an inner LN and gamma like the others."""
    model = build("encoder_decoder",
                  {"name": "subln", "cross_attention": "subln", "init": "paper"}, WIDE)
    gamma = GAINS["subln"]["encoder_decoder"]["decoder"]
    for layer in model.decoder.layers:
        assert isinstance(layer.cross_attn.inner_norm, LayerNorm)
        for role, weight in layer.cross_attn.role_weights().items():
            gain = 1.0 if role in UNIT_ROLES else gamma
            assert weight.std().item() == pytest.approx(xavier_std(gain, weight), rel=0.04), role
            assert 2.8 < kurtosis(weight) < 3.2, role


def test_gain_test_tells_the_fused_qkv_bugs_apart() -> None:
    """The std check above fails for both known ways to initialise fused qkv wrongly."""
    torch.manual_seed(0)
    d, beta = 256, 0.5
    qkv = torch.empty(3 * d, d)
    # beta on the whole fused matrix
    nn.init.xavier_normal_(qkv, gain=beta)
    q, v = qkv[:d], qkv[2 * d :]
    assert q.std().item() != pytest.approx(xavier_std(1.0, q), rel=0.04)
    assert v.std().item() != pytest.approx(xavier_std(beta, v), rel=0.04)
    # per-role gains, fan taken from the fused [3d, d] shape
    std = math.sqrt(2.0 / (3 * d + d))
    qkv[:d].normal_(0, std)
    qkv[2 * d :].normal_(0, beta * std)
    assert q.std().item() != pytest.approx(xavier_std(1.0, q), rel=0.04)
    assert v.std().item() != pytest.approx(xavier_std(beta, v), rel=0.04)


# -- known failure: a DeepNorm decoder silently built as Pre-LN -------------------------------

# alpha by hand: encoder-only N=2: (2*2)^(1/4) = sqrt(2); decoder-only M=3: (2*3)^(1/4);
# enc-dec (N=2, M=3): encoder 0.81 (2^4 * 3)^(1/16), decoder (3*3)^(1/4) = sqrt(3).
DEEPNORM_ALPHA = {
    "encoder": {"encoder": 1.4142135623730950},
    "decoder": {"decoder": 1.5650845800732873},
    "encoder_decoder": {"encoder": 1.0317217739919820, "decoder": 1.7320508075688773},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_deepnorm_every_residual_is_deepnorm_with_its_stack_alpha(family: str) -> None:
    model = build(family, "deepnorm", SMALL)
    for stack_name, stack in stacks(model).items():
        per_layer = 3 if stack_name == "decoder" and family == "encoder_decoder" else 2
        residuals = [m for m in stack.modules() if isinstance(m, DeepNormResidual)]
        assert len(residuals) == per_layer * len(stack.layers), stack_name
        alpha = DEEPNORM_ALPHA[family][stack_name]
        assert all(r.alpha == pytest.approx(alpha, rel=1e-12) for r in residuals), stack_name
        assert stack.ends.final_norm is None, "DeepNorm is Post-LN: no final norm"


def _layer_norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:])


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_deepnorm_decoder_layer_is_post_ln_numerically(family: str) -> None:
    """A decoder layer computes LN(alpha*x + f(x)) three (or two) times; its output is LN'd."""
    model = build(family, "deepnorm", SMALL)
    alpha = DEEPNORM_ALPHA[family]["decoder"]
    gen = torch.Generator().manual_seed(1)
    x = 3 * torch.randn(2, 5, SMALL["d_model"], generator=gen)
    memory = torch.randn(2, 4, SMALL["d_model"], generator=gen) if family != "decoder" else None
    layer = model.decoder.layers[0]
    with torch.no_grad():
        out = layer(x, memory)
        h = _layer_norm(alpha * x + layer.self_attn(x, causal=True))
        if memory is not None:
            h = _layer_norm(alpha * h + layer.cross_attn(h, memory))
        h = _layer_norm(alpha * h + layer.ffn(h))
    torch.testing.assert_close(out, h)
    # fresh LN: zero mean, unit variance per position (Pre-LN's x + f(LN(x)) is not)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)


# -- known failure: a "pre-norm" flag that adds or drops the final norm -------------------------


def _randomise_norms(model: nn.Module) -> None:
    """Random affine params, so an extra or missing LN changes the output visibly."""
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LayerNorm):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=gen))
                module.bias.copy_(torch.randn(module.bias.shape, generator=gen))


def _norms(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, LayerNorm)]


def _run_stack(stack: nn.Module, x: torch.Tensor, memory: torch.Tensor | None):
    """The stack's output and the state after its last layer, run layer by layer."""
    state = stack.ends.begin(stack.embedding_norm(x))
    for layer in stack.layers:
        state = layer(state) if memory is None else layer(state, memory)
    out = stack(x) if memory is None else stack(x, memory)
    return out, state


def _inputs(model: nn.Module, family: str):
    gen = torch.Generator().manual_seed(3)
    d = model.config.d_model
    x = torch.randn(2, 5, d, generator=gen)
    memory = torch.randn(2, 4, d, generator=gen)
    return {
        name: (x, memory if name == "decoder" and family == "encoder_decoder" else None)
        for name in stacks(model)
    }


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", ["pre", "post"])
def test_final_norm_exactly_once_for_pre_never_for_post(scheme: str, family: str) -> None:
    model = build(family, scheme, SMALL)
    _randomise_norms(model)
    for name, (x, memory) in _inputs(model, family).items():
        stack = getattr(model, name)
        per_layer = 3 if name == "decoder" and family == "encoder_decoder" else 2
        residual_norms = per_layer * len(stack.layers)
        in_layers = sum(len(_norms(layer)) for layer in stack.layers)
        assert in_layers == residual_norms, "one norm per residual connection inside the layers"
        final = stack.ends.final_norm
        assert isinstance(stack.embedding_norm, nn.Identity)
        with torch.no_grad():
            out, state = _run_stack(stack, x, memory)
        if scheme == "pre":
            assert isinstance(final, LayerNorm)
            assert len(_norms(stack)) == residual_norms + 1, "pre: exactly one final norm"
            torch.testing.assert_close(out, final(state))
        else:
            assert final is None
            assert len(_norms(stack)) == residual_norms, "post: no final norm"
            torch.testing.assert_close(out, state)


# Norms per residual connection, whether the stack ends with a final norm, embedding norm: each
# single-stream scheme's table row (Hyper-Connections, mHC and nGPT: test_hyper.py, test_ngpt.py).
NORMS_PER_SUBLAYER = {
    "post": 1,
    "pre": 1,
    "sandwich": 2,
    "deepnorm": 1,
    "subln": 2,
    "rezero": 0,
    "layerscale": 1,
    "peri": 2,
    "mixln": 1,
    "resi_dual": 1,
    "admin": 1,
    "lns": 1,
}
FINAL = {"pre", "sandwich", "subln", "layerscale", "peri", "mixln", "resi_dual", "lns"}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", list(NORMS_PER_SUBLAYER))
def test_norm_count_per_stack(scheme: str, family: str) -> None:
    """Every stack holds exactly the norms its scheme's table row asks for, no more, no fewer.

    subln's second norm per sublayer is the inner one (before W_o / W_2; cross-attention has
    none, as in torchscale); resi_dual's "final" one
    is the dual stream's LN; mixln (L = 3 and 2 here, floor(L/4) = 0) is all Pre-LN.
    """
    model = build(family, scheme, SMALL)
    for name, stack in stacks(model).items():
        per_layer = 3 if name == "decoder" and family == "encoder_decoder" else 2
        expected = NORMS_PER_SUBLAYER[scheme] * per_layer * len(stack.layers)
        if scheme == "subln" and per_layer == 3:  # no inner norm in cross-attention
            expected -= len(stack.layers)
        expected += (scheme in FINAL) + (scheme == "peri")
        assert len(_norms(stack)) == expected, name
        assert isinstance(stack.embedding_norm, LayerNorm) is (scheme == "peri"), name


# -- known failure: the ResiDual final LN inside the layer loop ---------------------------------


def _residual_steps(layer: nn.Module, causal: bool, memory: torch.Tensor | None) -> list:
    """(residual module, sublayer f) of ``layer`` in forward order, f without dropout (eval)."""
    steps = [(layer.self_attn_residual, lambda h: layer.self_attn(h, causal=causal))]
    if getattr(layer, "cross_attn", None) is not None:
        steps.append((layer.cross_attn_residual, lambda h: layer.cross_attn(h, memory)))
    steps.append((layer.ffn_residual, layer.ffn))
    return steps


@pytest.mark.parametrize("family", FAMILIES)
def test_resi_dual_final_norm_only_at_stack_end(family: str) -> None:
    model = build(family, "resi_dual", SMALL)
    _randomise_norms(model)
    for name, (x, memory) in _inputs(model, family).items():
        stack = getattr(model, name)
        assert isinstance(stack.ends, ResiDualEnds)
        dual_norm = stack.ends.dual_norm
        for layer in stack.layers:
            assert all(m is not dual_norm for m in layer.modules())
            residuals = [m for m in layer.modules() if isinstance(m, ResiDualResidual)]
            assert len(_norms(layer)) == len(residuals), "one LN per residual, on x_p only"

        # Both streams from the embeddings; x_p <- LN(x_p + f(x_p)), x_d <- x_d + f(x_p);
        # output x_p + LN(x_d), all by hand from the layers' own sublayers and norms.
        with torch.no_grad():
            x_p, x_d = x, x
            for layer in stack.layers:
                for residual, f in _residual_steps(layer, name == "decoder", memory):
                    branch = f(x_p)
                    x_p, x_d = residual.norm(x_p + branch), x_d + branch
            expected = x_p + dual_norm(x_d)
            out = stack(x) if memory is None else stack(x, memory)
        torch.testing.assert_close(out, expected)


# -- Admin profiling on a real model -----------------------------------------------------------


def _real_variance(t: torch.Tensor, pad: torch.Tensor) -> float:
    """Population variance over the real (non-pad) tokens' values, in float64."""
    flat = t[~pad].double().flatten()
    return ((flat - flat.mean()) ** 2).mean().item()


def _profile_by_hand(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> dict:
    """Transformer-Clinic's profiling, layer by layer from the model's own modules (dropout 0):
    per stack a ratio starts at 1; each residual connection in forward order takes w = ratio
    and updates ratio = sqrt(Var[w x] + Var[f(x)]) over the real tokens; then x = LN(w x + f(x)).
    The decoder's cross-attention counts as a branch; it reads the profiled encoder's output."""
    src_pad, tgt_pad = src.eq(model.pad_id), tgt.eq(model.pad_id)
    ws: dict[str, list[float]] = {}

    def run(name, x, pad, steps_of):
        ratio, ws[name] = 1.0, []
        for layer in getattr(model, name).layers:
            for residual, f in steps_of(layer):
                w = ratio
                ws[name].append(w)
                branch = f(x)
                ratio = math.sqrt(_real_variance(w * x, pad) + _real_variance(branch, pad))
                x = residual.norm(w * x + branch)
        return x

    with torch.no_grad():
        memory = run("encoder", model.encoder_embeddings(src), src_pad, lambda layer: [
            (layer.self_attn_residual, lambda h: layer.self_attn(h, key_padding_mask=src_pad)),
            (layer.ffn_residual, layer.ffn)])
        run("decoder", model.decoder_embeddings(tgt), tgt_pad, lambda layer: [
            (layer.self_attn_residual, lambda h: layer.self_attn(h, causal=True)),
            (layer.cross_attn_residual,
             lambda h: layer.cross_attn(h, memory, key_padding_mask=src_pad)),
            (layer.ffn_residual, layer.ffn)])
    return ws


def test_admin_profile_on_assembled_model() -> None:
    """profile() on a padded batch equals the reference procedure computed by hand."""
    model = build("encoder_decoder", {"name": "admin", "init": "profiled"}, SMALL)
    model.train()
    gen = torch.Generator().manual_seed(4)
    src = torch.randint(1, VOCAB, (3, 7), generator=gen)
    tgt = torch.randint(1, VOCAB, (3, 6), generator=gen)
    src[1, 4:], src[2, 2:], tgt[2, 3:] = 0, 0, 0  # right padding, kept out of the variances

    result = profile(model, lambda: model(src, tgt))
    assert model.training
    for name, stack in stacks(model).items():
        residuals = sorted(
            (m for m in stack.modules() if isinstance(m, AdminResidual)), key=lambda m: m.site.index
        )
        set_to = [m.omega.detach().unique().tolist() for m in residuals]
        assert set_to == [[pytest.approx(w)] for w in result[name]], "w written into the model"
        recorded = [m.profiled_omega.item() for m in residuals]
        assert recorded == pytest.approx(result[name]), "the profiled w kept in a buffer"

    expected = _profile_by_hand(model, src, tgt)
    assert set(result) == {"encoder", "decoder"}
    assert len(result["encoder"]) == 2 * 2 and len(result["decoder"]) == 3 * 3
    for name in ("encoder", "decoder"):
        assert result[name][0] == 1.0 and min(result[name][1:]) > 1.0
        assert result[name] == pytest.approx(expected[name], rel=1e-5), name
