"""Parity with PyTorch's reference layers: same weights, same outputs.

normzoo's ``post`` and ``pre`` schemes must reproduce ``torch.nn.TransformerEncoderLayer`` /
``TransformerDecoderLayer`` with ``norm_first=False`` / ``True`` (and the stacks must reproduce
``nn.TransformerEncoder`` / ``nn.TransformerDecoder``, final norm included or not). Weights are
copied from the torch layer into normzoo's modules by attribute name, after randomising every
torch parameter so that biases and norm affines are not at their trivial init.

The torch layers run in train mode with dropout 0: in eval mode torch takes a "fast path" that
returns zeros (or nested tensors) at padded positions. Padded positions are never compared.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normzoo.models import assemble

D, HEADS, FFN = 32, 4, 64
ATOL = 1e-5
NORM_FIRST = {"post": False, "pre": True}



def build(family: str, residual: str, *, fused: bool = True, layers: int = 1,
          activation: str = "relu"):
    config = {
        "family": family,
        "vocab_size": 17,
        "d_model": D,
        "heads": HEADS,
        "ffn_dim": FFN,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "dropout": 0.0,
        "residual": residual,
        "fused_qkv": fused,
        "activation": activation,
    }
    return assemble(config).eval()


@torch.no_grad()
def randomize(module: nn.Module, seed: int) -> None:
    """Non-trivial values everywhere (biases, norm weights), so a swapped copy can't hide."""
    generator = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        p.add_(0.2 * torch.randn(p.shape, generator=generator))


@torch.no_grad()
def copy_linear(dst: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    assert dst.weight.shape == weight.shape
    dst.weight.copy_(weight)
    dst.bias.copy_(bias)


@torch.no_grad()
def copy_self_attention(ours, theirs: nn.MultiheadAttention) -> None:
    w, b = theirs.in_proj_weight, theirs.in_proj_bias
    if ours.fused:
        copy_linear(ours.qkv_proj, w, b)
    else:
        for i, linear in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
            copy_linear(linear, w[i * D : (i + 1) * D], b[i * D : (i + 1) * D])
    copy_linear(ours.out_proj, theirs.out_proj.weight, theirs.out_proj.bias)
    # role_weights must address the same rows, fused or not.
    roles = ours.role_weights()
    for i, role in enumerate(("q", "k", "v")):
        torch.testing.assert_close(roles[role], w[i * D : (i + 1) * D], rtol=0, atol=0)
    torch.testing.assert_close(roles["out"], theirs.out_proj.weight, rtol=0, atol=0)


@torch.no_grad()
def copy_cross_attention(ours, theirs: nn.MultiheadAttention) -> None:
    w, b = theirs.in_proj_weight, theirs.in_proj_bias
    copy_linear(ours.q_proj, w[:D], b[:D])
    copy_linear(ours.kv_proj, w[D:], b[D:])
    copy_linear(ours.out_proj, theirs.out_proj.weight, theirs.out_proj.bias)
    roles = ours.role_weights()
    torch.testing.assert_close(roles["k"], w[D : 2 * D], rtol=0, atol=0)
    torch.testing.assert_close(roles["v"], w[2 * D :], rtol=0, atol=0)


@torch.no_grad()
def copy_norm(ours: nn.Module, theirs: nn.LayerNorm) -> None:
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)
    assert ours.eps == theirs.eps


@torch.no_grad()
def copy_ffn(ours, theirs) -> None:
    copy_linear(ours.ffn_in, theirs.linear1.weight, theirs.linear1.bias)
    copy_linear(ours.ffn_out, theirs.linear2.weight, theirs.linear2.bias)


def copy_encoder_layer(ours, theirs: nn.TransformerEncoderLayer) -> None:
    copy_self_attention(ours.self_attn, theirs.self_attn)
    copy_ffn(ours.ffn, theirs)
    copy_norm(ours.self_attn_residual.norm, theirs.norm1)
    copy_norm(ours.ffn_residual.norm, theirs.norm2)


def copy_decoder_layer(ours, theirs: nn.TransformerDecoderLayer) -> None:
    copy_self_attention(ours.self_attn, theirs.self_attn)
    copy_cross_attention(ours.cross_attn, theirs.multihead_attn)
    copy_ffn(ours.ffn, theirs)
    copy_norm(ours.self_attn_residual.norm, theirs.norm1)
    copy_norm(ours.cross_attn_residual.norm, theirs.norm2)
    copy_norm(ours.ffn_residual.norm, theirs.norm3)


def torch_encoder_layer(scheme: str, activation: str = "relu") -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(
        D, HEADS, FFN, dropout=0.0, activation=activation, batch_first=True,
        norm_first=NORM_FIRST[scheme],
    )
    return layer.train()  # train mode (dropout 0) keeps torch off its eval fast path


def torch_decoder_layer(scheme: str) -> nn.TransformerDecoderLayer:
    layer = nn.TransformerDecoderLayer(
        D, HEADS, FFN, dropout=0.0, batch_first=True, norm_first=NORM_FIRST[scheme]
    )
    return layer.train()


def right_padding(lengths: list[int], total: int) -> torch.Tensor:
    """bool ``[B, total]``, True at padded positions."""
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]


def causal_mask(length: int) -> torch.Tensor:
    """torch's convention: True = may NOT attend."""
    return torch.ones(length, length, dtype=torch.bool).triu(1)


def assert_close_where(ours: torch.Tensor, theirs: torch.Tensor, pad: torch.Tensor | None):
    assert ours.shape == theirs.shape
    if pad is not None:
        keep = ~pad
        ours, theirs = ours[keep], theirs[keep]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=ATOL)


# -- encoder ----------------------------------------------------------------------------------


@pytest.mark.parametrize("padded", [False, True], ids=["nopad", "pad"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_encoder_layer_matches_torch(scheme, fused, padded):
    torch.manual_seed(0)
    reference = torch_encoder_layer(scheme)
    randomize(reference, seed=1)
    layer = build("encoder", scheme, fused=fused).encoder.layers[0]
    copy_encoder_layer(layer, reference)

    x = torch.randn(3, 7, D)
    pad = right_padding([7, 4, 2], 7) if padded else None
    with torch.no_grad():
        expected = reference(x, src_key_padding_mask=pad)
        actual = layer(x, pad)
    assert_close_where(actual, expected, pad)


@pytest.mark.parametrize("activation", ["gelu"])
@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_encoder_layer_matches_torch_other_activation(scheme, activation):
    torch.manual_seed(0)
    reference = torch_encoder_layer(scheme, activation)
    randomize(reference, seed=2)
    layer = build("encoder", scheme, activation=activation).encoder.layers[0]
    copy_encoder_layer(layer, reference)
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), reference(x), rtol=1e-5, atol=ATOL)


def test_encoder_layer_matches_torch_eval_fast_path_without_padding():
    """Without padding torch's eval fast path is exact too; both must agree there as well."""
    torch.manual_seed(0)
    reference = torch_encoder_layer("post")
    randomize(reference, seed=3)
    reference.eval()
    layer = build("encoder", "post").encoder.layers[0]
    copy_encoder_layer(layer, reference)
    x = torch.randn(2, 6, D)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), reference(x), rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_encoder_stack_matches_torch(scheme):
    """Whole stack: Pre-LN has exactly one final norm after the stack, Post-LN none."""
    torch.manual_seed(0)
    layers = 3
    final = nn.LayerNorm(D) if scheme == "pre" else None
    reference = nn.TransformerEncoder(
        torch_encoder_layer(scheme), layers, norm=final, enable_nested_tensor=False
    ).train()
    randomize(reference, seed=4)
    stack = build("encoder", scheme, layers=layers).encoder
    for ours, theirs in zip(stack.layers, reference.layers, strict=True):
        copy_encoder_layer(ours, theirs)
    assert isinstance(stack.embedding_norm, nn.Identity)
    if scheme == "pre":
        copy_norm(stack.ends.final_norm, final)
    else:
        assert stack.ends.final_norm is None

    x = torch.randn(3, 6, D)
    pad = right_padding([6, 3, 5], 6)
    with torch.no_grad():
        expected = reference(x, src_key_padding_mask=pad)
        actual = stack(x, pad)
    assert_close_where(actual, expected, pad)


# -- decoder ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tgt_padded", [False, True], ids=["tgt-nopad", "tgt-pad"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_decoder_layer_matches_torch(scheme, fused, tgt_padded):
    torch.manual_seed(0)
    reference = torch_decoder_layer(scheme)
    randomize(reference, seed=5)
    layer = build("encoder_decoder", scheme, fused=fused).decoder.layers[0]
    copy_decoder_layer(layer, reference)

    tgt = torch.randn(3, 6, D)
    memory = torch.randn(3, 8, D)
    memory_pad = right_padding([8, 5, 3], 8)
    tgt_pad = right_padding([6, 4, 1], 6) if tgt_padded else None
    with torch.no_grad():
        expected = reference(
            tgt,
            memory,
            tgt_mask=causal_mask(6),
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=memory_pad,
            tgt_is_causal=True,
        )
        actual = layer(tgt, memory, padding_mask=tgt_pad, memory_padding_mask=memory_pad)
    assert_close_where(actual, expected, tgt_pad)


@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_decoder_stack_matches_torch(scheme):
    torch.manual_seed(0)
    layers = 3
    final = nn.LayerNorm(D) if scheme == "pre" else None
    reference = nn.TransformerDecoder(torch_decoder_layer(scheme), layers, norm=final).train()
    randomize(reference, seed=6)
    stack = build("encoder_decoder", scheme, layers=layers).decoder
    for ours, theirs in zip(stack.layers, reference.layers, strict=True):
        copy_decoder_layer(ours, theirs)
    if scheme == "pre":
        copy_norm(stack.ends.final_norm, final)
    else:
        assert stack.ends.final_norm is None

    tgt = torch.randn(2, 5, D)
    memory = torch.randn(2, 7, D)
    memory_pad = right_padding([7, 4], 7)
    with torch.no_grad():
        expected = reference(
            tgt, memory, tgt_mask=causal_mask(5), memory_key_padding_mask=memory_pad,
            tgt_is_causal=True,
        )
        actual = stack(tgt, memory, memory_padding_mask=memory_pad)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_decoder_only_layer_matches_torch_encoder_layer_with_causal_mask(scheme):
    """A GPT-style decoder layer (no cross-attention) is a causally-masked encoder layer."""
    torch.manual_seed(0)
    reference = torch_encoder_layer(scheme)
    randomize(reference, seed=7)
    layer = build("decoder", scheme).decoder.layers[0]
    assert layer.cross_attn is None
    copy_self_attention(layer.self_attn, reference.self_attn)
    copy_ffn(layer.ffn, reference)
    copy_norm(layer.self_attn_residual.norm, reference.norm1)
    copy_norm(layer.ffn_residual.norm, reference.norm2)
    x = torch.randn(2, 6, D)
    with torch.no_grad():
        expected = reference(x, src_mask=causal_mask(6), is_causal=True)
        actual = layer(x)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=ATOL)
