"""The two attention kernels (``sdpa`` and ``explicit``) compute the same function.

Both paths get the same module (same weights), the same inputs and the same masks: key padding,
causal, both, none, a query with every key padded, and a key/value cache. They must agree
within float32 tolerance in float32 and within bf16 tolerance under CPU bf16 autocast, in the
output and in the gradients of the inputs and of every weight. Dropout is checked by its
statistics (each path draws its own mask) and by being off in eval mode.
"""

from __future__ import annotations

import copy

import pytest
import torch

from normzoo.models import assemble
from normzoo.nn.attention import MultiheadAttention, explicit_wanted
from normzoo.nn.kv_cache import KVCache

B, T, S, DIM, HEADS = 3, 7, 9, 32, 4

# Tolerances: float32 is the same arithmetic in another order; under bf16 autocast both paths
# round q, k, v and the matmuls to bf16 (8 bits of mantissa), in different places.
FP32 = {"atol": 2e-5, "rtol": 1e-4}
BF16 = {"atol": 3e-2, "rtol": 3e-2}


def _pair(cross: bool = False, fused: bool = True) -> tuple[MultiheadAttention, ...]:
    torch.manual_seed(0)
    sdpa = MultiheadAttention(DIM, HEADS, cross=cross, fused=fused, impl="sdpa")
    explicit = copy.deepcopy(sdpa)
    explicit.impl = "explicit"
    return sdpa, explicit


def _padding(batch: int, length: int, *, empty_row: bool = False) -> torch.Tensor:
    mask = torch.zeros(batch, length, dtype=torch.bool)
    mask[1, -3:] = True  # the second sentence is 3 shorter
    mask[2, -1:] = True
    if empty_row:
        mask[0, :] = True  # every key padded: the output there must be 0 on both paths
    return mask


def _run(module, x, memory, mask, causal, bf16):
    x = x.clone().requires_grad_(True)
    mem = None if memory is None else memory.clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = module(x, mem, key_padding_mask=mask, causal=causal)
    # A fixed projection of the output, so every output element has its own gradient weight.
    weight = torch.linspace(-1, 1, out.numel()).view_as(out)
    (out.float() * weight).sum().backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    grads["x"] = x.grad.clone()
    if mem is not None:
        grads["memory"] = mem.grad.clone()
    return out.float().detach(), grads


def _assert_close(a, b, tol, what):
    scale = max(b.abs().max().item(), 1e-6)
    # bf16 tolerances are relative to the tensor's scale: gradients of different roles differ
    # by orders of magnitude, and each is compared against its own.
    atol = tol["atol"] * (scale if tol is BF16 else 1.0)
    torch.testing.assert_close(a, b, atol=atol, rtol=tol["rtol"], msg=lambda m: f"{what}: {m}")


CASES = [
    pytest.param(False, False, None, id="self-no-mask"),
    pytest.param(False, False, "pad", id="self-padding"),
    pytest.param(False, False, "empty", id="self-padding-empty-row"),
    pytest.param(False, True, None, id="causal"),
    pytest.param(False, True, "pad", id="causal-padding"),
    pytest.param(True, False, None, id="cross-no-mask"),
    pytest.param(True, False, "pad", id="cross-padding"),
    pytest.param(True, False, "empty", id="cross-padding-empty-row"),
]


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize(("cross", "causal", "masking"), CASES)
def test_paths_agree_forward_and_backward(cross, causal, masking, bf16):
    torch.manual_seed(1)
    x = torch.randn(B, T, DIM)
    memory = torch.randn(B, S, DIM) if cross else None
    keys = S if cross else T
    mask = None if masking is None else _padding(B, keys, empty_row=masking == "empty")
    sdpa, explicit = _pair(cross=cross)
    out_s, grads_s = _run(sdpa, x, memory, mask, causal, bf16)
    out_e, grads_e = _run(explicit, x, memory, mask, causal, bf16)
    tol = BF16 if bf16 else FP32
    assert torch.isfinite(out_e).all() and torch.isfinite(out_s).all()
    _assert_close(out_e, out_s, tol, "output")
    assert grads_e.keys() == grads_s.keys()
    for name in grads_s:
        assert torch.isfinite(grads_e[name]).all(), name
        _assert_close(grads_e[name], grads_s[name], tol, f"grad {name}")
    if masking == "empty":  # a query with no key gets exactly 0 (before out_proj: its bias)
        bias = sdpa.out_proj.bias.detach().float()
        _assert_close(out_e[0], bias.expand_as(out_e[0]), tol, "empty row")


def test_bf16_paths_are_closer_to_float32_than_the_tolerance():
    """The explicit path under bf16 is as near the float32 result as SDPA under bf16 (its
    softmax runs in float32), so switching kernels does not cost precision."""
    torch.manual_seed(2)
    x, mask = torch.randn(B, T, DIM), _padding(B, T)
    sdpa, explicit = _pair()
    reference, _ = _run(sdpa, x, None, mask, True, False)
    err_sdpa = (_run(sdpa, x, None, mask, True, True)[0] - reference).abs().max().item()
    err_explicit = (_run(explicit, x, None, mask, True, True)[0] - reference).abs().max().item()
    assert err_explicit <= 1.5 * err_sdpa + 1e-3, (err_explicit, err_sdpa)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
def test_paths_agree_with_a_cache(bf16):
    """Incremental decoding: one step at a time through the cache gives, on both paths, what
    the full causal forward gives."""
    torch.manual_seed(3)
    config = {"family": "decoder", "vocab_size": 50, "d_model": DIM, "heads": HEADS,
              "ffn_dim": 64, "decoder_layers": 2, "dropout": 0.0}
    models = {impl: assemble({**config, "attention_impl": impl}) for impl in ("sdpa", "explicit")}
    models["explicit"].load_state_dict(models["sdpa"].state_dict())
    tokens = torch.randint(1, 50, (2, 6))
    tol = BF16 if bf16 else FP32
    steps = {}
    for impl, model in models.items():
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            full = model(tokens).float()
            cache = KVCache(len(model.decoder.layers))
            steps[impl] = torch.cat([model(tokens[:, i : i + 1], cache=cache).float()
                                     for i in range(tokens.shape[1])], dim=1)
        _assert_close(steps[impl], full, tol, f"{impl}: cached steps vs full")
    _assert_close(steps["explicit"], steps["sdpa"], tol, "explicit vs sdpa, cached")


def test_dropout_is_applied_in_training_and_off_in_eval():
    torch.manual_seed(4)
    module = MultiheadAttention(DIM, HEADS, dropout=0.5, impl="explicit")
    x = torch.randn(B, T, DIM)
    module.train()
    a, b = module(x), module(x)
    assert not torch.allclose(a, b)  # two dropout masks
    module.eval()
    torch.testing.assert_close(module(x), module(x))
    reference = copy.deepcopy(module)
    reference.impl = "sdpa"
    torch.testing.assert_close(module(x), reference(x), **FP32)


def test_dropout_keeps_the_expectation():
    """Averaged over many masks, attention with dropout p equals attention without it: the
    kept weights are scaled by 1/(1-p), as SDPA's dropout does."""
    torch.manual_seed(5)
    module = MultiheadAttention(DIM, HEADS, dropout=0.3, impl="explicit")
    x = torch.randn(1, T, DIM)
    module.eval()
    plain = module(x)
    module.train()
    with torch.no_grad():
        mean = torch.stack([module(x) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(mean, plain, atol=0.03, rtol=0.05)


def test_auto_takes_the_explicit_path_only_on_a_cpu_in_low_precision():
    def q(dtype, device="cpu"):
        return torch.empty(1, 1, 1, 8, dtype=dtype, device="meta" if device != "cpu" else "cpu")

    assert explicit_wanted("auto", q(torch.bfloat16))
    assert explicit_wanted("auto", q(torch.float16))
    assert not explicit_wanted("auto", q(torch.float32))
    assert not explicit_wanted("auto", q(torch.bfloat16, device="cuda"))  # a GPU keeps SDPA
    assert explicit_wanted("explicit", q(torch.float32))
    assert not explicit_wanted("sdpa", q(torch.bfloat16))


def test_a_recipe_forces_either_path_and_refuses_others(tmp_path):
    from normzoo.errors import ConfigError
    from normzoo.models.config import ModelConfig

    for impl in ("auto", "sdpa", "explicit"):
        model = assemble({"family": "decoder", "vocab_size": 20, "d_model": 16, "heads": 2,
                          "ffn_dim": 32, "decoder_layers": 1, "attention_impl": impl})
        assert {m.impl for m in model.modules() if isinstance(m, MultiheadAttention)} == {impl}
    with pytest.raises(ConfigError, match="attention_impl"):
        ModelConfig.parse({"attention_impl": "flash"})
