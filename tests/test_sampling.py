"""Sampling from a causal LM: greedy limits, top-k / top-p supports, determinism, the cache."""

from __future__ import annotations

import pytest
import torch

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.inference.sampling import _pick, sample
from normzoo.models import assemble

VOCAB = 40


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    lm = assemble({"family": "decoder", "vocab_size": VOCAB, "d_model": 32, "heads": 4,
                   "ffn_dim": 64, "decoder_layers": 2, "dropout": 0.0})
    with torch.no_grad():  # a peaked output distribution, so top-k/top-p sets are informative
        lm.embeddings.tokens.weight.mul_(4)
    return lm.eval()


def greedy_without_cache(model, prompt: torch.Tensor, steps: int) -> list[int]:
    tokens, out = prompt, []
    for _ in range(steps):
        logits = model(tokens)[:, -1].float()
        logits[:, PAD] = logits[:, BOS] = float("-inf")
        token = int(logits.argmax())
        out.append(token)
        if token == EOS:
            break
        tokens = torch.cat([tokens, torch.tensor([[token]])], dim=1)
    return out[:-1] if out and out[-1] == EOS else out


@pytest.mark.parametrize("limits", [{"temperature": 0.0}, {"top_k": 1}, {"top_p": 1e-9}])
def test_degenerate_settings_are_greedy_and_match_a_cacheless_forward(model, limits):
    prompt = torch.tensor([[BOS, 7, 9, 11]])
    expected = greedy_without_cache(model, prompt, 12)
    got = sample(model, prompt, max_new_tokens=12, generator=torch.Generator().manual_seed(1),
                 **limits)
    assert got == [expected]


def test_sampling_is_deterministic_under_a_seeded_generator(model):
    prompt = torch.tensor([[BOS, 5, 6], [BOS, 8, 9]])
    def draw(seed: int) -> list[list[int]]:  # a high temperature: seeds really differ
        return sample(model, prompt, max_new_tokens=10, temperature=5.0,
                      generator=torch.Generator().manual_seed(seed))

    first, again, other = draw(3), draw(3), draw(4)
    assert first == again and first != other


def test_top_k_and_top_p_sample_only_from_their_sets():
    logits = torch.log(torch.tensor([[0.0, 0.0, 0.05, 0.5, 0.3, 0.1, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    seen_k = {int(_pick(logits.clone(), 1.0, 2, None, gen)) for _ in range(300)}
    assert seen_k == {3, 4}
    # top_p=0.85: 0.5 + 0.3 < 0.85, so the third most likely (0.1) is still needed; no more.
    seen_p = {int(_pick(logits.clone(), 1.0, None, 0.85, gen)) for _ in range(300)}
    assert seen_p == {3, 4, 5}


def test_bad_sampling_settings_are_refused(model):
    with pytest.raises(ValueError, match="top_p"):
        sample(model, torch.tensor([[BOS]]), max_new_tokens=3, top_p=1.5)
