"""Incremental decoding with rotary positions, grouped- and multi-query attention, and both: the
KV cache (keys stored rotated, ``kv_heads`` of them) gives the logits of a full causal forward,
on both attention kernels; greedy, beam search and sampling run on it and agree with decoding
that recomputes every prefix from scratch.
"""

from __future__ import annotations

import pytest
import torch

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.inference.decoding import _ban_specials, beam_search, greedy
from normzoo.inference.sampling import sample
from normzoo.models import assemble

VOCAB = 31
VARIANTS = {
    "rope": {"positions": "rope"},
    "gqa": {"kv_heads": 2},
    "mqa": {"kv_heads": 1},
    "rope+gqa": {"positions": "rope", "kv_heads": 2},
    "rope+mqa": {"positions": "rope", "kv_heads": 1, "fused_qkv": False},
}
IMPLS = ["sdpa", "explicit"]
FAMILIES = ["decoder", "encoder_decoder"]


def build(family: str, variant: str, impl: str = "sdpa", seed: int = 0, **changes):
    torch.manual_seed(seed)
    model = assemble({
        "family": family, "vocab_size": VOCAB, "d_model": 32, "heads": 4, "ffn_dim": 64,
        "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.1, "attention_dropout": 0.1,
        "max_positions": 40, "attention_impl": impl, "rope_base": 100.0,
        **VARIANTS[variant], **changes,
    })
    with torch.no_grad():  # away from the init: zero biases must not hide a position bug
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def source(seed: int = 1) -> torch.Tensor:
    src = tokens(3, 9, seed)
    src[1, 6:] = PAD
    src[2, 3:] = PAD
    return src


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def run(model, family: str, chunks: list[torch.Tensor], src: torch.Tensor | None, cache):
    """Logits of ``chunks`` fed one after another (through ``cache`` when given)."""
    if family == "decoder":
        return torch.cat([model(chunk, cache=cache) for chunk in chunks], dim=1)
    memory, mask = model.encode(src)
    return torch.cat([model.decode(chunk, memory, mask, cache) for chunk in chunks], dim=1)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("family", FAMILIES)
def test_step_by_step_and_chunks_match_the_full_forward(family, variant, impl):
    model = build(family, variant, impl)
    seq, src = tokens(3, 8, seed=2), source()
    with torch.no_grad():
        full = run(model, family, [seq], src, None)
        cache = model.new_cache()
        steps = run(model, family, list(seq.split(1, dim=1)), src, cache)
        assert cache.length == 8
        chunked = run(model, family, [seq[:, :3], seq[:, 3:4], seq[:, 4:]], src,
                      model.new_cache())
    close(steps, full)
    close(chunked, full)


@pytest.mark.parametrize("variant", ["rope", "rope+gqa"])
@pytest.mark.parametrize("family", FAMILIES)
def test_reordered_cache_matches_the_reordered_batch(family, variant):
    """Beam search's reorder moves rotated keys with their rows; positions stay right."""
    model = build(family, variant, seed=3)
    seq, src = tokens(3, 7, seed=4), source(seed=5)
    index = torch.tensor([2, 0, 0])
    with torch.no_grad():
        expected = run(model, family, [seq[index]], src[index], None)
        cache = model.new_cache()
        if family == "decoder":
            model(seq[:, :3], cache=cache)
            cache.reorder(index)
            rest = model(seq[index][:, 3:], cache=cache)
        else:
            memory, mask = model.encode(src)
            model.decode(seq[:, :3], memory, mask, cache)
            cache.reorder(index)
            rest = model.decode(seq[index][:, 3:], memory[index], mask[index], cache)
    close(rest, expected[:, 3:])


def uncached_greedy(model, src: torch.Tensor, steps: int) -> list[list[int]]:
    """Greedy decoding that recomputes the whole prefix at every step: no cache, no offsets."""
    memory, mask = model.encode(src)
    prefix = torch.full((src.shape[0], 1), BOS)
    for step in range(steps):
        logits = model.decode(prefix, memory, mask)[:, -1]
        _ban_specials(logits, step, min_len=steps)  # no EOS: compare all ``steps`` tokens
        prefix = torch.cat([prefix, logits.argmax(-1, keepdim=True)], dim=1)
    return prefix[:, 1:].tolist()


def uncached_beam(model, src: torch.Tensor, steps: int, k: int) -> list[list[int]]:
    """Beam search that recomputes every prefix at every step, sentence by sentence: the ``k``
    best sums of token log-probabilities (no EOS, so every hypothesis has ``steps`` tokens and
    the length penalty cannot reorder them)."""
    memory, mask = model.encode(src)
    best = []
    for b in range(src.shape[0]):
        beams: list[tuple[list[int], float]] = [([], 0.0)]
        for step in range(steps):
            prefixes = torch.tensor([[BOS, *h] for h, _ in beams])
            rows = len(beams)
            logits = model.decode(prefixes, memory[b : b + 1].expand(rows, -1, -1),
                                  mask[b : b + 1].expand(rows, -1))[:, -1]
            logp = torch.log_softmax(logits.float(), dim=-1)
            _ban_specials(logp, step, min_len=steps)
            scores = torch.tensor([s for _, s in beams])[:, None] + logp
            top = scores.view(-1).topk(k)
            vocab = logp.shape[-1]
            beams = [([*beams[i // vocab][0], i % vocab], v)
                     for v, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)]
        best.append(beams[0][0])
    return best


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_and_beam_search_with_the_cache_agree_with_recomputing(variant):
    model = build("encoder_decoder", variant, seed=6)
    src = source(seed=7)
    steps = 6
    with torch.no_grad():
        expected = uncached_greedy(model, src, steps)
    settings = {"max_len_a": 0.0, "max_len_b": steps, "min_len": steps}
    assert greedy(model, src, **settings) == expected
    assert beam_search(model, src, beam=1, **settings) == expected
    with torch.no_grad():  # the cache reordered across beams at every step, as recomputed
        assert beam_search(model, src, beam=3, **settings) == uncached_beam(model, src, steps, 3)


@pytest.mark.parametrize("variant", ["rope", "rope+mqa"])
def test_sampling_a_language_model_greedily_agrees_with_recomputing(variant):
    model = build("decoder", variant, impl="explicit", seed=8)
    prompt = torch.cat([torch.full((2, 1), BOS), tokens(2, 4, seed=9)], dim=1)
    new = 6
    with torch.no_grad():
        seq = prompt
        for _ in range(new):
            logits = model(seq)[:, -1]
            _ban_specials(logits, 0, 0)
            logits[:, EOS] = float("-inf")
            seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)

    class NoEOS(torch.nn.Module):  # the same ban inside the model, for sample()
        def __init__(self, output):
            super().__init__()
            self.output = output

        def forward(self, h):
            logits = self.output(h).clone()
            logits[..., EOS] = float("-inf")
            return logits

    model.output = NoEOS(model.output)
    assert sample(model, prompt, max_new_tokens=new, temperature=0.0) == seq[:, 5:].tolist()
