"""Model-level behaviour of the three families.

Deep models of every family and scheme train (forward and backward, finite gradients), every
norm works inside a model, embeddings are tied when asked, padding and future tokens do not leak
into other positions, and positions past ``max_positions`` are refused with a clear error.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from registered import BUILTIN_NORMS, BUILTIN_SCHEMES, builtin, schemes_where
from torch import nn

from normzoo.errors import ConfigError
from normzoo.models import DecoderModel, EncoderModel, Seq2SeqModel, assemble
from normzoo.nn.embeddings import Embeddings
from normzoo.residual import Family, StackInfo
from normzoo.residual.rezero import ReZeroResidual

SCHEMES = BUILTIN_SCHEMES
# The schemes that put a norm on the residual stream itself in a 6-layer stack (Mix-LN: its
# Post-LN layers), where a norm that cannot stand there (DyT) is refused.
STREAM_NORMING = schemes_where(
    lambda cls: cls(StackInfo(Family.ENCODER, "encoder", 6, 0, 32)).normalizes_stream())
FAMILIES = ["encoder", "decoder", "encoder_decoder"]
VOCAB, PAD = 29, 0



def config(family: str, residual="pre", *, layers: int = 2, **overrides) -> dict:
    base = {
        "family": family,
        "vocab_size": VOCAB,
        "d_model": 32,
        "heads": 4,
        "ffn_dim": 64,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "dropout": 0.1,
        "residual": residual,
        "max_positions": 32,
        "pad_id": PAD,
    }
    return {**base, **overrides}


def build(family: str, residual="pre", *, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return assemble(config(family, residual, **kwargs))


def tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=generator)


def logits(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Run any family: encoder and decoder models read ``src``; seq2seq reads both."""
    if isinstance(model, Seq2SeqModel):
        return model(src, tgt)
    return model(src)


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    src, tgt = tokens(2, 7, seed), tokens(2, 5, seed + 100)
    src[1, 4:] = PAD
    tgt[1, 3:] = PAD
    return src, tgt


def loss_of(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    out = logits(model, src, tgt)
    labels = tgt if isinstance(model, Seq2SeqModel) else src
    return F.cross_entropy(out.flatten(0, 1), labels.flatten(), ignore_index=PAD)


def assert_finite_grads(model: nn.Module) -> None:
    missing, bad = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.grad is None:
            missing.append(name)
        elif not torch.isfinite(p.grad).all():
            bad.append(name)
    assert not missing, f"no gradient reached: {missing}"
    assert not bad, f"non-finite gradients: {bad}"


# -- deep models train ------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_deep_model_forward_backward_finite(scheme, family):
    model = build(family, scheme, layers=12).train()
    src, tgt = batch(seed=1)
    loss = loss_of(model, src, tgt)
    assert torch.isfinite(loss)
    loss.backward()
    assert_finite_grads(model)
    if scheme != "rezero":  # the signal reaches the bottom layer of every stack
        for stack in ("encoder", "decoder"):
            if hasattr(model, stack):
                grad = getattr(model, stack).layers[0].ffn.ffn_in.weight.grad
                assert grad.abs().max() > 0, f"no gradient reaches the first {stack} layer"
    if scheme == "rezero":
        gates = [m.a for m in model.modules() if isinstance(m, ReZeroResidual)]
        expected = {"encoder": 12 * 2, "decoder": 12 * 2, "encoder_decoder": 12 * 2 + 12 * 3}
        assert len(gates) == expected[family]
        assert all(a.item() == 0.0 for a in gates)
        if family == "encoder_decoder":
            # With every cross-attention gate at 0 the encoder is cut off from the loss at
            # init, so its gates get exactly zero gradient; one step opens the cross gates.
            torch.optim.SGD(model.parameters(), lr=0.1).step()
            model.zero_grad()
            loss_of(model, src, tgt).backward()
            assert_finite_grads(model)
        assert all(a.grad.abs().item() > 0 for a in gates), "a ReZero gate got no signal"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("norm", BUILTIN_NORMS)
def test_every_norm_works_with_pre(norm, family):
    mixes_positions = getattr(builtin("norm")[norm], "mixes_positions", False)
    if mixes_positions and family != "encoder":
        with pytest.raises(ConfigError, match="causal decoder"):  # see test_norms.py
            build(family, "pre", norm=norm, layers=3)
        return
    model = build(family, "pre", norm=norm, layers=3).train()
    src, tgt = batch(seed=2)
    loss = loss_of(model, src, tgt)
    loss.backward()
    assert torch.isfinite(loss)
    assert_finite_grads(model)
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(logits(model, src, tgt)).all()


@pytest.mark.parametrize("activation", ["gelu", "silu", "swiglu", "geglu"])
@pytest.mark.parametrize("family", FAMILIES)
def test_activations_and_no_bias(family, activation):
    model = build(family, "subln", activation=activation, bias=False, fused_qkv=False).train()
    linears = [m for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and not name.startswith("head")]
    assert linears and all(m.bias is None for m in linears)
    src, tgt = batch(seed=34)
    loss = loss_of(model, src, tgt)
    loss.backward()
    assert torch.isfinite(loss)
    assert_finite_grads(model)


@pytest.mark.parametrize("scheme", STREAM_NORMING)
def test_dyt_on_the_residual_stream_is_refused(scheme):
    residual = {"name": "mixln", "post_fraction": 0.5} if scheme == "mixln" else scheme
    with pytest.raises(ConfigError, match="dyt"):
        assemble(config("encoder_decoder", residual, norm="dyt"))


def test_dyt_with_mixln_without_post_layers_is_allowed():
    model = assemble(config("decoder", {"name": "mixln", "post_fraction": 0.0}, norm="dyt"))
    assert isinstance(model, DecoderModel)


# -- tied and shared embeddings ---------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_tied_output_shares_storage_with_token_embedding(family):
    model = build(family, tie_output=True)
    embedding = (model.decoder_embeddings if family == "encoder_decoder" else model.embeddings)
    table = embedding.tokens.weight
    assert model.output.tied.weight is table
    # One parameter, counted once: an optimizer sees it once and updates both uses.
    params = list(model.parameters())
    assert sum(p is table for p in params) == 1
    assert not any(p.shape == table.shape and p is not table for p in params)

    src, tgt = batch(seed=3)
    model.eval()
    loss_of(model, src, tgt).backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    optimizer.step()
    assert model.output.tied.weight.data_ptr() == table.data_ptr()


@pytest.mark.parametrize("family", FAMILIES)
def test_untied_output_is_its_own_parameter(family):
    model = build(family, tie_output=False)
    embedding = (model.decoder_embeddings if family == "encoder_decoder" else model.embeddings)
    assert model.output.tied is None
    assert model.output.weight.data_ptr() != embedding.tokens.weight.data_ptr()
    with torch.no_grad():
        before = model.output.weight.clone()
        embedding.tokens.weight.add_(1.0)
    assert torch.equal(model.output.weight, before)


def test_tied_output_follows_the_embedding():
    model = build("decoder", tie_output=True).eval()
    seq = tokens(1, 4, seed=4)
    with torch.no_grad():
        h = model.decoder(model.embeddings(seq))
        expected = h @ model.embeddings.tokens.weight.T
        torch.testing.assert_close(model(seq), expected)


@pytest.mark.parametrize("tie_output", [True, False])
def test_share_embeddings_in_seq2seq(tie_output):
    shared = build("encoder_decoder", share_embeddings=True, tie_output=tie_output)
    assert shared.encoder_embeddings.tokens is shared.decoder_embeddings.tokens
    separate = build("encoder_decoder", share_embeddings=False, tie_output=tie_output)
    enc, dec = separate.encoder_embeddings.tokens, separate.decoder_embeddings.tokens
    assert enc is not dec
    assert enc.weight.data_ptr() != dec.weight.data_ptr()
    if tie_output:
        assert separate.output.tied is dec  # output tied to the *target* embedding
    count = sum(p.numel() for p in shared.parameters())
    count_separate = sum(p.numel() for p in separate.parameters())
    assert count_separate - count == VOCAB * 32


def test_tying_survives_a_state_dict_round_trip():
    model = build("encoder_decoder", seed=5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    fresh = build("encoder_decoder", seed=6)
    fresh.load_state_dict(model.state_dict())
    assert fresh.output.tied.weight is fresh.encoder_embeddings.tokens.weight
    src, tgt = batch(seed=7)
    model.eval()
    fresh.eval()
    with torch.no_grad():
        torch.testing.assert_close(fresh(src, tgt), model(src, tgt), rtol=0, atol=0)


# -- padding does not leak ---------------------------------------------------------------------


def padded_pair(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A batch of a short sentence (right-padded) and a long one, and the short length."""
    short, long = tokens(1, 4, seed), tokens(1, 9, seed + 1)
    both = torch.full((2, 9), PAD)
    both[0, :4] = short[0]
    both[1] = long[0]
    return both, short, 4


@pytest.mark.parametrize("scheme", SCHEMES)
def test_encoder_padding_does_not_change_real_positions(scheme):
    model = build("encoder", scheme, seed=8).eval()
    both, short, n = padded_pair(seed=9)
    with torch.no_grad():
        batched_h = model.encode(both)
        alone_h = model.encode(short)
        torch.testing.assert_close(batched_h[0, :n], alone_h[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(batched_h[1], model.encode(both[1:])[0], rtol=1e-5,
                                   atol=1e-5)
        torch.testing.assert_close(model(both)[0, :n], model(short)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_seq2seq_source_padding_does_not_change_logits(scheme):
    model = build("encoder_decoder", scheme, seed=10).eval()
    src, short, _ = padded_pair(seed=11)
    tgt = tokens(2, 5, seed=12)
    with torch.no_grad():
        batched = model(src, tgt)
        torch.testing.assert_close(batched[0], model(short, tgt[:1])[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(batched[1], model(src[1:], tgt[1:])[0], rtol=1e-5,
                                   atol=1e-5)


def test_padding_content_is_ignored():
    """Whatever sits at masked positions (pad or any token) cannot reach real positions."""
    model = build("encoder_decoder", "post", seed=13).eval()
    src, _, n = padded_pair(seed=14)
    tgt = tokens(2, 5, seed=15)
    with torch.no_grad():
        memory, mask = model.encode(src)
        expected = model.decode(tgt, memory, mask)
        noisy = memory.clone()
        noisy[0, n:] = 1e3 * torch.randn_like(noisy[0, n:])
        torch.testing.assert_close(model.decode(tgt, noisy, mask), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ["encoder"])  # refused where a decoder is causal
def test_batchnorm_statistics_ignore_padding_in_training(family):
    """In train mode BatchNorm sees the whole batch, but the amount of padding must not count."""
    model = build(family, "pre", norm="batchnorm", dropout=0.0, seed=16).train()
    src, tgt = batch(seed=17)
    more_src = torch.cat([src, torch.full((2, 5), PAD)], dim=1)
    more_tgt = torch.cat([tgt, torch.full((2, 3), PAD)], dim=1)
    real_src, real_tgt = src.ne(PAD), tgt.ne(PAD)
    expected = logits(model, src, tgt)
    actual = logits(model, more_src, more_tgt)
    real = real_tgt if family == "encoder_decoder" else real_src
    width = real.shape[1]
    torch.testing.assert_close(actual[:, :width][real], expected[real], rtol=1e-5, atol=1e-5)


def softmax_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """SDPA as torch<2.5 computes it: a query whose keys are all masked gets NaN."""
    assert dropout_p == 0.0
    scores = q @ k.transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.fixture(params=["torch", "softmax"])
def attention_backend(request, monkeypatch):
    if request.param == "softmax":
        monkeypatch.setattr(F, "scaled_dot_product_attention", softmax_attention)
    return request.param


@pytest.mark.parametrize("scheme", ["post", "pre"])
def test_empty_source_sentence_stays_finite(scheme, attention_backend):
    """An all-padding source row must not turn the batch (loss, gradients) into NaN."""
    model = build("encoder_decoder", scheme, dropout=0.0, seed=40).train()
    src, tgt = tokens(2, 6, seed=41), tokens(2, 5, seed=42)
    src[1] = PAD
    out = model(src, tgt)
    assert torch.isfinite(out).all()
    F.cross_entropy(out.flatten(0, 1), tgt.flatten()).backward()
    assert_finite_grads(model)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt)[0], model(src[:1], tgt[:1])[0],
                                   rtol=1e-5, atol=1e-5)


def test_left_padded_prompt_stays_finite(attention_backend):
    """Left pads masked as keys have nothing to attend to; real tokens must stay finite."""
    model = build("decoder", "pre", dropout=0.0, positions="learned", seed=43).train()
    seq = tokens(2, 6, seed=44)
    seq[0, :3] = PAD
    out = model(seq, key_padding_mask=seq.eq(PAD))
    assert torch.isfinite(out).all()
    out[~seq.eq(PAD)].square().mean().backward()
    assert_finite_grads(model)


def test_fully_masked_keys_contribute_nothing(attention_backend):
    """Masked keys never contribute, even when every key is masked (an empty source): the
    query gets 0 from attention (torch>=2.5's rule), whatever this torch's SDPA does there."""
    model = build("encoder_decoder", "pre", dropout=0.0, seed=45).eval()
    src, tgt = tokens(2, 6, seed=46), tokens(2, 5, seed=47)
    src[1] = PAD
    with torch.no_grad():
        memory, mask = model.encode(src)
        expected = model.decode(tgt, memory, mask)
        noisy = memory.clone()
        noisy[1] = 10 * torch.randn_like(noisy[1])
        torch.testing.assert_close(model.decode(tgt, noisy, mask), expected, rtol=0, atol=1e-6)
        layer = model.decoder.layers[0]
        out = layer.cross_attn(torch.randn(2, 5, 32), noisy, key_padding_mask=mask)
        torch.testing.assert_close(out[1], layer.cross_attn.out_proj.bias.expand(5, 32))


# -- causality --------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_future_tokens_do_not_change_earlier_logits(family, scheme):
    model = build(family, scheme, seed=18).eval()
    src, tgt = tokens(2, 6, seed=19), tokens(2, 7, seed=20)
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] % (VOCAB - 1)) + 1  # a different real token
    changed[:, 6] = PAD
    with torch.no_grad():
        if family == "decoder":
            before, after = model(tgt), model(changed)
        else:
            before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after[:, 4], before[:, 4]), "the changed token had no effect"


def test_encoder_is_bidirectional():
    """The encoder must *not* be causal: a later token changes earlier outputs."""
    model = build("encoder", "pre", seed=21).eval()
    seq = tokens(1, 6, seed=22)
    changed = seq.clone()
    changed[0, 5] = (changed[0, 5] % (VOCAB - 1)) + 1
    with torch.no_grad():
        assert not torch.allclose(model(seq)[0, 0], model(changed)[0, 0])


# -- shapes, dropout and embeddings ----------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_output_shapes_and_classes(family):
    model = build(family)
    expected_cls = {"encoder": EncoderModel, "decoder": DecoderModel,
                    "encoder_decoder": Seq2SeqModel}[family]
    assert isinstance(model, expected_cls)
    src, tgt = batch(seed=23)
    out = logits(model.eval(), src, tgt)
    length = tgt.shape[1] if family == "encoder_decoder" else src.shape[1]
    assert out.shape == (2, length, VOCAB)


def test_eval_is_deterministic_and_train_uses_dropout():
    model = build("encoder_decoder", "pre", dropout=0.3, seed=24)
    src, tgt = batch(seed=25)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(src, tgt), model(src, tgt))
        model.train()
        assert not torch.equal(model(src, tgt), model(src, tgt))


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_embeddings_refuse_positions_past_max(positions):
    embeddings = Embeddings(VOCAB, 16, pad_id=PAD, positions=positions, max_positions=6)
    assert embeddings(tokens(2, 6, seed=26)).shape == (2, 6, 16)
    with pytest.raises(ValueError, match=r"max_positions=6"):
        embeddings(tokens(2, 7, seed=27))
    with pytest.raises(ValueError, match=r"max_positions=6"):
        embeddings(tokens(2, 2, seed=28), offset=5)


def test_model_refuses_sequences_past_max_positions():
    model = build("encoder_decoder", max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        model(tokens(1, 9, seed=29), tokens(1, 3, seed=30))
    with pytest.raises(ValueError, match="max_positions"):
        model(tokens(1, 3, seed=31), tokens(1, 9, seed=32))


def test_embeddings_reject_unknown_position_kind():
    with pytest.raises(ValueError, match="positions"):
        Embeddings(VOCAB, 16, pad_id=PAD, positions="rotary")


def test_embeddings_scale_and_positions():
    torch.manual_seed(0)
    emb = Embeddings(VOCAB, 16, pad_id=PAD, positions="sinusoidal", max_positions=10)
    seq = tokens(1, 5, seed=33)
    expected = emb.tokens(seq) * 4.0 + emb.position_table()[:5]
    torch.testing.assert_close(emb(seq), expected)
    # Incremental offsets continue the position table where the prefix stopped.
    torch.testing.assert_close(emb(seq[:, 3:], offset=3), expected[:, 3:])
    assert torch.equal(emb.tokens.weight[PAD], torch.zeros(16))


def test_a_schemes_ends_decide_how_the_logits_leave():
    """StreamEnds.logits: the contract's hook for a decoder's logits (nGPT's scaled cosine
    logits); the default is the output projection. Training, full and incremental decoding
    all go through it."""
    from normzoo.residual.base import StreamEnds

    class Doubled(StreamEnds):
        def logits(self, hidden, output):
            return 2 * output(hidden)

    torch.manual_seed(0)
    for family in ("decoder", "encoder_decoder"):
        config = {"family": family, "vocab_size": 40, "d_model": 16, "heads": 2,
                  "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 2, "dropout": 0.0}
        model = assemble(config).eval()
        tokens = torch.randint(4, 40, (2, 5))
        inputs = (tokens,) if family == "decoder" else (tokens, tokens)
        with torch.no_grad():
            plain = model(*inputs)
            final = model.decoder.ends.final_norm
            model.decoder.ends = Doubled(final)
            torch.testing.assert_close(model(*inputs), 2 * plain)
            if family == "decoder":
                cache = model.new_cache()
                steps = torch.cat([model(tokens[:, i:i + 1], cache=cache) for i in range(5)], 1)
                torch.testing.assert_close(steps, 2 * plain, rtol=1e-5, atol=1e-5)
