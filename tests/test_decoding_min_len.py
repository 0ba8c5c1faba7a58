"""``min_len`` in greedy and beam search (no EOS before that many tokens, the limit still wins),
and the cached beam search it runs in."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.inference.decoding import beam_search, greedy
from normzoo.models import assemble

VOCAB = 30


class FavourEOS(nn.Module):
    """The model's output projection with EOS made the best token at every step."""

    def __init__(self, output: nn.Module) -> None:
        super().__init__()
        self.output = output

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.output(h)
        bonus = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
        bonus[EOS] = 100.0
        return logits + bonus


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    seq2seq = assemble({"vocab_size": VOCAB, "d_model": 32, "heads": 4, "ffn_dim": 64,
                        "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0})
    seq2seq.output = FavourEOS(seq2seq.output)
    return seq2seq.eval()


SRC = torch.tensor([[7, 8, 9, EOS], [10, 11, EOS, PAD]])


def search(name: str, model, **kwargs) -> list[list[int]]:
    if name == "greedy":
        return greedy(model, SRC, **kwargs)
    return beam_search(model, SRC, beam=3, **kwargs)


@pytest.mark.parametrize("name", ["greedy", "beam"])
def test_without_min_len_eos_comes_first(model, name):
    assert search(name, model) == [[], []]


@pytest.mark.parametrize("name", ["greedy", "beam"])
@pytest.mark.parametrize("min_len", [1, 4])
def test_eos_is_banned_until_min_len_tokens(model, name, min_len):
    hyps = search(name, model, min_len=min_len, max_len_a=0.0, max_len_b=20)
    assert [len(h) for h in hyps] == [min_len, min_len]  # EOS as soon as it is allowed
    assert all(t not in (PAD, BOS, EOS) for h in hyps for t in h)


@pytest.mark.parametrize("name", ["greedy", "beam"])
def test_the_length_limit_wins_over_min_len(model, name):
    hyps = search(name, model, min_len=50, max_len_a=0.0, max_len_b=6)
    assert [len(h) for h in hyps] == [6, 6]


def test_beam_of_one_with_min_len_is_greedy(model):
    limits = {"min_len": 3, "max_len_a": 0.0, "max_len_b": 8}
    assert beam_search(model, SRC, beam=1, **limits) == greedy(model, SRC, **limits)


class CachelessDecoder(nn.Module):
    """The model without its key/value cache: each step re-decodes the whole prefix, which the
    fake cache keeps (and reorders as beam search asks)."""

    class Prefix:
        def __init__(self) -> None:
            self.tokens: torch.Tensor | None = None

        def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
            self.tokens = self.tokens.index_select(0, index)

    def __init__(self, model) -> None:
        super().__init__()
        self.model, self.config = model, model.config

    def encode(self, src):
        return self.model.encode(src)

    def new_cache(self) -> Prefix:
        return self.Prefix()

    def decode(self, tgt, memory, memory_padding_mask, cache: Prefix):
        cache.tokens = tgt if cache.tokens is None else torch.cat([cache.tokens, tgt], dim=1)
        return self.model.decode(cache.tokens, memory, memory_padding_mask)


@pytest.mark.parametrize("min_len", [0, 5])
def test_beam_search_with_the_cache_matches_it_without(min_len):
    """The cached search (beams reordered, encoder keys shared per sentence) finds exactly
    what re-decoding every prefix finds."""
    torch.manual_seed(3)
    model = assemble({"vocab_size": VOCAB, "d_model": 32, "heads": 4, "ffn_dim": 64,
                      "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0,
                      "tie_output": False}).eval()
    with torch.no_grad():  # untied and peaked: varied hypotheses, some ending early
        model.output.weight.mul_(3)
    src = torch.tensor([[7, 8, 9, 12, EOS], [10, 11, EOS, PAD, PAD], [20, 21, 22, EOS, PAD]])
    limits = {"beam": 4, "min_len": min_len, "max_len_a": 1.0, "max_len_b": 6}
    assert beam_search(model, src, **limits) == beam_search(CachelessDecoder(model), src, **limits)
