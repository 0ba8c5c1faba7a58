"""Every role's initial weights and biases against the reference code of the paper it serves.

docs/init-references.md surveys the references; this pins normzoo to them, one formula per role
(d = d_model, d_ffn = the feed-forward width):

* Post-LN, Pre-LN, Admin and every scheme without its own init: Transformer-Clinic (fairseq 0.8).
  W_q, W_k, W_v xavier_uniform on the fused [3d, d] in-projection, so Var 1/(2d) each (fairseq
  >= 0.9 writes the same as gain 1/sqrt(2) per role); W_o Var 1/d; fc1, fc2 Var 2/(d + d_ffn);
  biases 0.
* DeepNorm and Sub-LN: torchscale. ``nn.Linear``'s default everywhere (Var 1/(3 fan_in), biases
  too), then weight and bias of W_v, W_o, fc1, fc2 times s: DeepNorm s = 1/init_scale (beta, but
  1.15 (N^4 M)^(-1/16) in the enc-dec encoder), Sub-LN s = gamma, with cross-attention unscaled.
* ResiDual: fairseq 0.12.2 (its code subclasses fairseq's layers): attention as Clinic but q/k/v
  biases at ``nn.Linear``'s default; fc1, fc2 ``nn.Linear``'s default, biases too.

d = 256 gives each matrix >= 65k entries, so its empirical variance pins the formula to ~1 %.
The uniform/normal shape is checked too (kurtosis 1.8 / 3): all references draw uniforms here.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normzoo.models import assemble

D, FFN, VOCAB = 256, 512, 64
N, M = 2, 3
FAMILIES = ["encoder", "decoder", "encoder_decoder"]

# torchscale's multiplier s on the scaled roles, by hand (N = 2, M = 3):
# DeepNorm: encoder-only (8*2)^(-1/4) = 0.5, decoder-only (8*3)^(-1/4), enc-dec encoder
# 1.15 * (2^4 * 3)^(-1/16) (torchscale divides by (N^4 M)^(1/16) / 1.15), enc-dec decoder
# (12*3)^(-1/4). Sub-LN: sqrt(ln 4), sqrt(ln 6), sqrt(ln 9 * ln 4 / 3), sqrt(ln 9).
SCALE = {
    "deepnorm": {
        "encoder": {"encoder": 0.5},
        "decoder": {"decoder": 0.45180100180492242},
        "encoder_decoder": {"encoder": 0.90285968899909940, "decoder": 0.40824829046386302},
    },
    "subln": {
        "encoder": {"encoder": 1.1774100225154747},
        "decoder": {"decoder": 1.3385661990458503},
        "encoder_decoder": {"encoder": 1.0076375078494640, "decoder": 1.4823038073675111},
    },
}
VALUE_PATH = {"v", "out", "ffn_in", "ffn_out"}


def clinic(role: str, sub: str) -> tuple[float, float]:
    """(weight variance, bias variance) of Transformer-Clinic's init."""
    if role == "out":
        return 1 / D, 0.0
    if role in ("ffn_in", "ffn_out"):
        return 2 / (D + FFN), 0.0
    return 1 / (2 * D), 0.0


def fan_in(role: str) -> int:
    return FFN if role == "ffn_out" else D


def torchscale(scheme: str, family: str, stack: str, role: str, sub: str) -> tuple[float, float]:
    unscaled = scheme == "subln" and sub == "cross_attn"  # torchscale skips encoder_attn
    s = 1.0 if unscaled or role not in VALUE_PATH else SCALE[scheme][family][stack]
    var = s * s / (3 * fan_in(role))
    return var, var


def resi_dual(role: str, sub: str) -> tuple[float, float]:
    if role in ("ffn_in", "ffn_out"):
        var = 1 / (3 * fan_in(role))
        return var, var
    weight_var, _ = clinic(role, sub)
    return weight_var, 0.0 if role == "out" else 1 / (3 * D)


def expected(scheme: str, family: str, stack: str, role: str, sub: str) -> tuple[float, float]:
    if scheme in ("deepnorm", "subln"):
        return torchscale(scheme, family, stack, role, sub)
    if scheme == "resi_dual":
        return resi_dual(role, sub)
    return clinic(role, sub)


def build(family: str, residual, fused: bool = True) -> nn.Module:
    torch.manual_seed(0)
    return assemble({
        "family": family, "encoder_layers": N, "decoder_layers": M, "residual": residual,
        "d_model": D, "heads": 4, "ffn_dim": FFN, "vocab_size": VOCAB, "dropout": 0.0,
        "fused_qkv": fused,
    })


def kurtosis(w: torch.Tensor) -> float:
    z = (w - w.mean()) / w.std()
    return (z**4).mean().item()


def check(model: nn.Module, scheme: str, family: str) -> int:
    checked = 0
    for stack_name in ("encoder", "decoder"):
        stack = getattr(model, stack_name, None)
        if stack is None:
            continue
        for i, layer in enumerate(stack.layers):
            for sub_name, sub in layer.named_children():
                if not hasattr(sub, "role_weights"):
                    continue
                biases = sub.role_biases()
                for role, weight in sub.role_weights().items():
                    where = f"{scheme}: {stack_name}.layers[{i}].{sub_name} {role}"
                    weight_var, bias_var = expected(scheme, family, stack_name, role, sub_name)
                    got = weight.double().var().item()
                    assert got == pytest.approx(weight_var, rel=0.03), where
                    assert 1.7 < kurtosis(weight) < 1.9, f"{where}: not a uniform draw"
                    bias = biases[role]
                    if bias_var == 0.0:
                        assert torch.count_nonzero(bias) == 0, f"{where} bias"
                    else:  # d entries only: ~9% sd on a variance; the bound is 5 sd wide
                        bound = math.sqrt(3 * bias_var)
                        assert bias.abs().max().item() <= bound + 1e-7, f"{where} bias"
                        got = bias.double().var().item()
                        assert got == pytest.approx(bias_var, rel=0.45), f"{where} bias"
                    checked += 1
    return checked


# The schemes whose init a reference implementation fixes (expected() gives each one's law).
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", ["post", "pre", "admin", "deepnorm", "subln", "resi_dual"])
def test_every_role_matches_its_reference(scheme: str, family: str) -> None:
    model = build(family, scheme)
    per_stack = {"encoder": 6 * N, "decoder": 6 * M, "encoder_decoder": 6 * N + 10 * M}
    assert check(model, scheme, family) == per_stack[family]


# One of each reference law (Transformer-Clinic's, torchscale's two, ResiDual's).
@pytest.mark.parametrize("scheme", ["pre", "deepnorm", "subln", "resi_dual"])
def test_separate_qkv_matrices_get_the_fused_variances(scheme: str) -> None:
    """Stored as three [d, d] matrices or one fused [3d, d], each role draws the same law."""
    check(build("encoder_decoder", scheme, fused=False), scheme, "encoder_decoder")


def test_qkv_variance_is_pytorchs_fused_in_projection() -> None:
    """PyTorch's ``nn.MultiheadAttention`` (xavier_uniform on the fused in_proj_weight) gives each
    of W_q, W_k, W_v the variance normzoo gives it, and W_o's differs only by PyTorch leaving
    out_proj at nn.Linear's default."""
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(D, 4)
    for part in reference.in_proj_weight.detach().chunk(3):
        assert part.var().item() == pytest.approx(1 / (2 * D), rel=0.03)


def test_embeddings_and_untied_output_are_fairseqs() -> None:
    """fairseq's ``Embedding``: N(0, 1/d), pad row 0; untied output projection N(0, 1/d)."""
    model = build("decoder", "pre")
    weight = model.embeddings.tokens.weight.detach()
    pad = model.pad_id
    assert torch.count_nonzero(weight[pad]) == 0
    rows = torch.cat([weight[:pad], weight[pad + 1 :]])
    assert rows.var().item() == pytest.approx(1 / D, rel=0.05)
    assert 2.8 < kurtosis(rows) < 3.2, "a normal draw"
    torch.manual_seed(0)
    untied = assemble({"family": "decoder", "decoder_layers": 1, "d_model": D, "heads": 4,
                       "ffn_dim": FFN, "vocab_size": 4 * D, "tie_output": False})
    assert untied.output.weight.var().item() == pytest.approx(1 / D, rel=0.05)
