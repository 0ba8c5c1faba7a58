"""Built-in norms: values, float32 statistics, dtypes, masked BatchNorm, option validation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from registered import BUILTIN_NORMS

from normzoo.errors import ConfigError
from normzoo.models import assemble
from normzoo.nn.padding import current_padding_mask, padding_mask_context
from normzoo.registry import norms
from normzoo.registry.options import validate_options

NAMES = BUILTIN_NORMS  # a new one needs its reference below (REFERENCES) and a typo
DIM = 16



def make(name: str, dim: int = DIM, **options) -> torch.nn.Module:
    factory = norms.get(name)
    return factory(dim, **validate_options(factory, options, skip=1, where="model.norm"))


def randomise(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Non-trivial affine parameters, so a test notices if they are ignored."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p + 0.5 * torch.randn(p.shape, generator=gen))
    return module


# Independent references, in float64.
def ref_layernorm(m, x):
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + m.eps) * m.weight.double() + m.bias.double()


def ref_rmsnorm(m, x):
    x = x.double()
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + m.eps) * m.weight.double()


def ref_scalenorm(m, x):
    x = x.double()
    return m.scale.double() * x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def ref_dyt(m, x):
    x = x.double()
    return m.weight.double() * torch.tanh(m.alpha.double() * x) + m.bias.double()


def ref_batchnorm(m, x):
    flat = x.double().reshape(-1, x.shape[-1])
    mean, var = flat.mean(0), flat.var(0, unbiased=False)
    return (x.double() - mean) / torch.sqrt(var + m.eps) * m.weight.double() + m.bias.double()


REFERENCES = {"layernorm": ref_layernorm, "rmsnorm": ref_rmsnorm, "scalenorm": ref_scalenorm,
              "dyt": ref_dyt, "batchnorm": ref_batchnorm}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(DIM,), (3, DIM), (2, 5, DIM), (2, 3, 4, DIM)])
def test_shape_and_values_match_the_formula(name, shape):
    torch.manual_seed(1)
    m = randomise(make(name)).train()
    x = 3 * torch.randn(*shape) + 0.7
    if name == "batchnorm" and len(shape) == 1:
        x = x.unsqueeze(0).expand(4, DIM) + torch.randn(4, DIM)  # a batch of one has no variance
    y = m(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    torch.testing.assert_close(y.double(), REFERENCES[name](m, x), rtol=1e-5, atol=1e-5)


# The norms whose eps is added to a variance (ScaleNorm's bounds the norm, DyT has none).
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "batchnorm"])
def test_eps_is_added_to_the_variance(name):
    """With a large eps and small inputs the eps term dominates, so misplacing it shows."""
    torch.manual_seed(9)
    m = randomise(make(name, eps=0.5)).train()
    x = 0.3 * torch.randn(4, 6, DIM)
    torch.testing.assert_close(m(x).double(), REFERENCES[name](m, x), rtol=1e-5, atol=1e-5)


def test_scalenorm_eps_bounds_the_norm_from_below():
    m = make("scalenorm", eps=2.0)
    x = torch.full((3, DIM), 0.01)  # ||x|| = 0.04 < eps
    torch.testing.assert_close(m(x), m.scale * x / 2.0)


def test_layernorm_matches_torch():
    torch.manual_seed(2)
    m = randomise(make("layernorm", eps=1e-3))
    x = torch.randn(4, 7, DIM)
    torch.testing.assert_close(m(x), F.layer_norm(x, (DIM,), m.weight, m.bias, 1e-3))
    bare = make("layernorm", affine=False)
    assert not list(bare.parameters())
    torch.testing.assert_close(bare(x), F.layer_norm(x, (DIM,), eps=1e-5))


def test_initial_parameters():
    assert make("scalenorm", dim=37).scale.item() == torch.tensor(math.sqrt(37)).item()
    assert make("scalenorm", dim=64).scale.item() == 8.0
    dyt = make("dyt")
    assert dyt.alpha.item() == 0.5
    assert torch.equal(dyt.weight, torch.ones(DIM)) and torch.equal(dyt.bias, torch.zeros(DIM))
    assert make("dyt", alpha=2.0).alpha.item() == 2.0
    for name in ("layernorm", "rmsnorm", "batchnorm"):
        assert torch.equal(make(name).weight, torch.ones(DIM)), name
    # Fresh norms (DyT aside) normalise: zero mean / unit RMS at init.
    x = 5 * torch.randn(8, DIM) + 2
    assert make("layernorm")(x).mean(-1).abs().max() < 1e-5
    rms = make("rmsnorm")(x).pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones(8), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(make("scalenorm")(x).pow(2).mean(-1).sqrt(), torch.ones(8))


def bf16_input(name: str) -> torch.Tensor:
    """Values whose statistics bf16 cannot hold: a large common offset plus small noise.

    Bf16 keeps 8 significant bits, so the mean of values near 1000 is rounded to a multiple of 4
    and a sum of squares near 1e6 to a multiple of 4096; float32 statistics are exact enough.
    """
    gen = torch.Generator().manual_seed(3)
    noise = torch.randn(6, 9, 64, generator=gen)
    if name == "dyt":  # no statistics, but tanh on bf16 arguments still loses bits
        return (0.9 * noise).to(torch.bfloat16)
    return (1000 + 8 * noise).to(torch.bfloat16)


@pytest.mark.parametrize("name", NAMES)
def test_statistics_in_float32_under_bf16(name):
    m = randomise(make(name, dim=64), seed=4)
    x = bf16_input(name)
    y = m(x)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    expected = REFERENCES[name](m, x).float().to(torch.bfloat16)  # exact maths, one rounding
    mismatched = (y != expected).float().mean().item()
    # float32 internals round like the exact result except at rare ties; bf16 internals don't.
    assert mismatched < 0.02, f"{mismatched:.1%} of outputs differ from the float32 computation"
    ulp = expected.float().abs().clamp_min(1e-2) * 2**-7
    assert ((y.float() - expected.float()).abs() <= ulp).all()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_output_dtype_is_input_dtype(name, dtype):
    m = make(name)
    x = torch.randn(3, 4, DIM, dtype=dtype)
    assert m(x).dtype == dtype
    m.to(dtype)  # a model cast to half precision ("bf16-true") works too
    assert m(x).dtype == dtype
    m.train()(x).sum().backward()


def test_half_precision_batchnorm_keeps_float32_running_stats():
    m = make("batchnorm", momentum=1.0).to(torch.bfloat16).train()
    assert m.running_mean.dtype == m.running_var.dtype == torch.float32
    assert m.weight.dtype == torch.bfloat16
    x = (1000 + torch.randn(64, DIM)).to(torch.bfloat16)
    m(x)  # momentum 1: the running mean is this batch's mean, ~1000 (bf16 steps of 4 there)
    torch.testing.assert_close(m.running_mean, x.float().mean(0), rtol=0, atol=1e-3)


# -- masked BatchNorm -------------------------------------------------------------------------
def padded_batch(extra: int, pad_value: float, seed: int = 5):
    """Real tokens (lengths 5, 3, 1) followed by ``extra`` padding columns filled with junk."""
    lengths = [5, 3, 1]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, DIM, generator=gen) * 2 + 1
    mask = torch.arange(5)[None, :] >= torch.tensor(lengths)[:, None]
    x = torch.cat([x, torch.zeros(3, extra, DIM)], dim=1)
    mask = torch.cat([mask, torch.ones(3, extra, dtype=torch.bool)], dim=1)
    x = torch.where(mask[..., None], torch.full_like(x, pad_value), x)
    return x, mask


@pytest.mark.parametrize(("extra", "pad_value"), [(0, 0.0), (4, 0.0), (4, 1e4), (20, -7.0)])
def test_masked_batchnorm_ignores_padding(extra, pad_value):
    base_x, base_mask = padded_batch(0, 0.0)
    x, mask = padded_batch(extra, pad_value)
    outputs, stats = [], []
    for inp, msk in ((base_x, base_mask), (x, mask)):
        m = randomise(make("batchnorm"), seed=6).train()
        with padding_mask_context(msk):
            assert current_padding_mask() is msk
            outputs.append(m(inp)[:, :5][~base_mask])
        stats.append((m.running_mean.clone(), m.running_var.clone()))
    assert current_padding_mask() is None
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=1e-6)
    for a, b in zip(stats[0], stats[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_masked_batchnorm_equals_batchnorm1d_over_real_tokens():
    x, mask = padded_batch(3, 123.0)
    m = randomise(make("batchnorm", momentum=0.3), seed=7).train()
    bn = torch.nn.BatchNorm1d(DIM, eps=m.eps, momentum=0.3)
    with torch.no_grad():
        bn.weight.copy_(m.weight)
        bn.bias.copy_(m.bias)
    real = x[~mask]  # [tokens, dim]
    for _ in range(3):
        with padding_mask_context(mask):
            y = m(x)
        torch.testing.assert_close(y[~mask], bn(real), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m.running_mean, bn.running_mean)
    torch.testing.assert_close(m.running_var, bn.running_var)
    # Eval mode: the running statistics, whatever the batch (padding included).
    m.eval()
    bn.eval()
    with padding_mask_context(mask):
        y = m(x)
    torch.testing.assert_close(y.reshape(-1, DIM), bn(x.reshape(-1, DIM)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m(x[:1, :2]), bn(x[0, :2]).unsqueeze(0), rtol=1e-5, atol=1e-5)
    before = m.running_mean.clone()
    m(torch.randn(4, 5, DIM) + 10)
    assert torch.equal(m.running_mean, before)  # eval never updates


def test_masked_batchnorm_without_a_mask_is_plain_batchnorm():
    x = torch.randn(4, 6, DIM)
    m = make("batchnorm").train()
    bn = torch.nn.BatchNorm1d(DIM)
    torch.testing.assert_close(m(x).reshape(-1, DIM), bn(x.reshape(-1, DIM)), rtol=1e-5,
                               atol=1e-5)


BN_MODEL = {"family": "encoder", "vocab_size": 50, "d_model": 16, "heads": 2, "ffn_dim": 32,
            "encoder_layers": 2, "norm": "batchnorm", "residual": "pre", "dropout": 0}


def _pad_invariance(family: str, run) -> float:
    torch.manual_seed(8)
    model = assemble({**BN_MODEL, "family": family, "decoder_layers": 2}).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0], [13, 0, 0, 0, 0]])
    longer = torch.cat([tokens, torch.zeros(3, 6, dtype=torch.long)], dim=1)
    real = tokens.ne(0)
    short_out = run(model, tokens)
    model.load_state_dict(state)  # the same running statistics before each pass
    long_out = run(model, longer)[:, : tokens.shape[1]]
    return (short_out - long_out)[real].abs().max().item()


@pytest.mark.parametrize(
    ("family", "run"),
    [
        ("encoder", lambda m, t: m.encode(t)),
        ("encoder", lambda m, t: m(t)),  # the MLM head has a norm too
    ],
    ids=["encoder-stack", "encoder-logits"],
)
def test_extra_padding_does_not_change_a_batchnorm_model(family, run):
    """Train mode, so every BatchNorm uses (and updates) batch statistics. (Only encoders:
    BatchNorm is refused where a decoder is causal, below.)"""
    assert _pad_invariance(family, run) < 1e-5


# -- BatchNorm where a decoder is causal ---------------------------------------------------------


def _future_leak(model: torch.nn.Module) -> float:
    """How much the training-mode logits at positions 0..T-2 move when only token T-1 changes."""
    tokens = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15, 16, 17, 18, 19]])
    changed = tokens.clone()
    changed[:, -1] = torch.tensor([30, 31, 32])
    model.train()
    with torch.no_grad():
        return (model(tokens)[:, :-1] - model(changed)[:, :-1]).abs().max().item()


def _with_batchnorm(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every LayerNorm replaced by a masked BatchNorm, as ``model.norm:
    batchnorm`` would have built it before normzoo refused that for causal decoders."""
    from normzoo.nn.norms import LayerNorm, MaskedBatchNorm

    for module in list(model.modules()):
        for name, child in module.named_children():
            if isinstance(child, LayerNorm):
                setattr(module, name, MaskedBatchNorm(child.dim))
    return model


def test_batchnorm_in_a_causal_decoder_sees_the_future():
    """Why it is refused: in training, BatchNorm's statistics mix every position of the batch,
    so changing the last token changes the logits of the positions before it, which a causal
    language model must never see; LayerNorm's per-token statistics do not."""
    torch.manual_seed(8)
    model = assemble({**BN_MODEL, "family": "decoder", "decoder_layers": 2, "norm": "layernorm"})
    assert _future_leak(model) < 1e-6
    leak = _future_leak(_with_batchnorm(model))
    assert leak > 1e-2, leak


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_batchnorm_is_refused_where_a_decoder_is_causal(family):
    with pytest.raises(ConfigError) as caught:
        assemble({**BN_MODEL, "family": family, "decoder_layers": 2})
    [problem] = caught.value.problems
    assert problem.path == "model.norm"
    assert "'batchnorm'" in problem.message
    assert "causal" in problem.message and "later tokens" in problem.message
    assert "layernorm" in problem.message  # what to use instead


@pytest.mark.parametrize("recipe", ["gpt_prenorm.yaml", "quickstart.yaml"])
def test_recipe_validate_refuses_batchnorm_with_a_causal_decoder(recipe):
    from pathlib import Path

    from typer.testing import CliRunner

    from normzoo.cli import app

    path = Path(__file__).parent.parent / "recipes" / recipe
    result = CliRunner().invoke(app, ["recipe", "validate", str(path), "model.norm=batchnorm"])
    assert result.exit_code == 2, result.output
    assert "model.norm: 'batchnorm'" in result.output
    assert "causal" in result.output and "Traceback" not in result.output
    ok = CliRunner().invoke(app, ["recipe", "validate", str(path.with_name("bert_prenorm.yaml")),
                                  "model.norm=batchnorm"])
    assert ok.exit_code == 0, ok.output  # an encoder (masked LM) is not causal


def test_plain_batchnorm_would_see_the_padding():
    """Control: without the mask, padding moves the statistics (so the tests above can fail)."""
    x, mask = padded_batch(4, 0.0)
    m = make("batchnorm").train()
    with padding_mask_context(mask):
        masked = m(x)[~mask]
    unmasked = make("batchnorm").train()(x)[~mask]
    assert (masked - unmasked).abs().max() > 0.1


# -- options ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_is_rejected_with_a_suggestion(name):
    factory = norms.get(name)
    typo = {"layernorm": "esp", "rmsnorm": "afine", "scalenorm": "epsilon",
            "dyt": "alpah", "batchnorm": "momentom"}[name]
    expected = {"esp": "eps", "afine": "affine", "epsilon": "eps", "alpah": "alpha",
                "momentom": "momentum"}[typo]
    with pytest.raises(ConfigError) as caught:
        validate_options(factory, {typo: 1}, skip=1, where="model.norm")
    [problem] = caught.value.problems
    assert problem.path == f"model.norm.{typo}"
    assert f"unknown option (did you mean '{expected}'?)" in problem.message


@pytest.mark.parametrize(
    ("name", "options", "path", "words"),
    [
        ("layernorm", {"eps": 0}, "model.norm.eps", "greater than 0"),
        ("rmsnorm", {"eps": -1e-6}, "model.norm.eps", "greater than 0"),
        ("scalenorm", {"eps": "tiny"}, "model.norm.eps", "valid number"),
        ("dyt", {"alpha": 0.0}, "model.norm.alpha", "greater than 0"),
        ("batchnorm", {"momentum": 1.5}, "model.norm.momentum", "less than or equal to 1"),
        ("batchnorm", {"affine": "maybe"}, "model.norm.affine", "valid boolean"),
    ],
)
def test_bad_option_values_are_rejected_with_the_key_path(name, options, path, words):
    with pytest.raises(ConfigError) as caught:
        validate_options(norms.get(name), options, skip=1, where="model.norm")
    [problem] = caught.value.problems
    assert problem.path == path
    assert words in problem.message
    assert path in str(caught.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as caught:
        validate_options(norms.get("batchnorm"), {"eps": 0, "momentum": 0}, skip=1,
                         where="model.norm")
    assert {p.path for p in caught.value.problems} == {"model.norm.eps", "model.norm.momentum"}


def test_good_options_are_coerced():
    options = validate_options(norms.get("layernorm"), {"eps": "1e-3", "affine": "false"},
                               skip=1, where="model.norm")
    assert options == {"eps": 1e-3, "affine": False, "bias": True}
    assert make("layernorm", eps=1e-3).eps == 1e-3


def test_a_model_reports_bad_norm_options():
    with pytest.raises(ConfigError, match=r"model\.norm\.eps"):
        assemble({**BN_MODEL, "norm": {"name": "layernorm", "eps": -1}})
    with pytest.raises(ConfigError, match=r"model\.norm\.epss: unknown option \(did you mean"):
        assemble({**BN_MODEL, "norm": {"name": "layernorm", "epss": 1e-5}})


def test_masked_batchnorm_keeps_float32_statistics_under_autocast():
    from normzoo.nn.norms import MaskedBatchNorm
    from normzoo.nn.padding import padding_mask_context

    torch.manual_seed(0)
    x = 20 + 0.5 * torch.randn(4, 10, 64)  # a large mean: bf16 statistics would be far off
    mask = torch.zeros(4, 10, dtype=torch.bool)
    mask[:, 8:] = True
    with padding_mask_context(mask):
        expected = MaskedBatchNorm(64)(x)
        with torch.autocast("cpu", torch.bfloat16):
            got = MaskedBatchNorm(64)(x)
    assert (got - expected)[~mask].abs().max() < 1e-4
