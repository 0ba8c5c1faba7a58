"""Greedy and beam search on the device give exactly what the per-sentence Python search gave.

The reference below is ``normzoo/inference/decoding.py``'s greedy and beam search as they were
before the search moved onto the device (issue 50): each beam step went through Python lists,
sentence by sentence (``_advance``). The new search must find the same hypotheses, token for
token, on small random models across batch sizes, beams 1 to 5, length penalties, ``min_len``
and length limits; and it must not read the device at every step.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch
from torch.overrides import TorchFunctionMode

import normzoo.inference.decoding as decoding
from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.inference.decoding import (
    _ban_specials,
    _strip,
    beam_search,
    evaluation_mode,
    greedy,
    max_target_lengths,
)
from normzoo.models import assemble

VOCAB = 30

# -- the reference: decoding.py's greedy and beam search before issue 50, verbatim -------------


@torch.no_grad()
def reference_greedy(model, src, *, max_len_a=1.2, max_len_b=10, min_len=0) -> list[list[int]]:
    with evaluation_mode(model):
        limit = model.config.max_positions - 1
        lengths = max_target_lengths(src, max_len_a, max_len_b, limit)
        memory, memory_mask = model.encode(src)
        batch = src.shape[0]
        cache = model.new_cache()
        token = torch.full((batch, 1), BOS, dtype=torch.long, device=src.device)
        out = torch.full((batch, int(lengths.max())), PAD, dtype=torch.long, device=src.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        for step in range(int(lengths.max())):
            logits = model.decode(token, memory, memory_mask, cache)[:, -1]
            _ban_specials(logits, step, min_len)
            token = logits.argmax(dim=-1, keepdim=True)
            token[finished, 0] = PAD
            out[:, step] = token[:, 0]
            finished |= token[:, 0].eq(EOS) | (step + 1 >= lengths)
            if bool(finished.all()):
                break
        return [_strip(row) for row in out.tolist()]


def _advance(ranked: Iterable[tuple[float, int, int]], k: int, at_limit: bool,
             prefixes: torch.Tensor, finished: list[tuple[float, list[int]]],
             lenpen: float) -> list[tuple[float, int, int]]:
    live: list[tuple[float, int, int]] = []
    for rank, (score, origin, token) in enumerate(ranked):
        if score == float("-inf"):
            break
        if token == EOS and rank >= k:
            continue  # as in fairseq: only an EOS within the top k ends a beam
        if token == EOS or at_limit:
            prefix = prefixes[origin].tolist()
            hyp = prefix if token == EOS else [*prefix, token]
            finished.append((score / (len(prefix) + 1) ** lenpen, hyp))
            if len(finished) >= k:
                break
        elif len(live) < k:
            live.append((score, origin, token))
        if len(live) >= k and not at_limit:
            break
    return live


@torch.no_grad()
def reference_beam_search(model, src, *, beam=5, lenpen=0.6, max_len_a=1.2, max_len_b=10,
                          min_len=0) -> list[list[int]]:
    with evaluation_mode(model):
        batch, k = src.shape[0], beam
        device = src.device
        limit = model.config.max_positions - 1
        lengths = max_target_lengths(src, max_len_a, max_len_b, limit)
        memory, memory_mask = model.encode(src)
        memory = memory.repeat_interleave(k, dim=0)
        memory_mask = memory_mask.repeat_interleave(k, dim=0)
        cache = model.new_cache()
        scores = torch.full((batch, k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        tokens = torch.full((batch * k, 1), BOS, dtype=torch.long, device=device)
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
        done = [False] * batch
        base = (torch.arange(batch, device=device) * k)[:, None]
        for step in range(int(lengths.max())):
            logits = model.decode(tokens[:, -1:], memory, memory_mask, cache)[:, -1]
            logp = torch.log_softmax(logits.float(), dim=-1)
            _ban_specials(logp, step, min_len)
            vocab = logp.shape[-1]
            candidates = (scores[:, :, None] + logp.view(batch, k, vocab)).view(batch, -1)
            top_scores, top_index = candidates.topk(2 * k, dim=1)
            ranked = zip(top_scores.tolist(), (top_index // vocab).tolist(),
                         (top_index % vocab).tolist(), strict=True)
            at_limit = (step + 1 >= lengths).tolist()
            live = [[(float("-inf"), 0, PAD)] * k for _ in range(batch)]
            for b, (row_scores, row_origin, row_token) in enumerate(ranked):
                if done[b]:
                    continue
                chosen = _advance(
                    zip(row_scores, row_origin, row_token, strict=True), k, at_limit[b],
                    tokens[b * k : (b + 1) * k, 1:], finished[b], lenpen)
                if len(finished[b]) >= k or at_limit[b] or not chosen:
                    done[b] = True
                else:
                    live[b][: len(chosen)] = chosen
            if all(done):
                break
            picked = torch.tensor(live, dtype=torch.float64)
            scores = picked[..., 0].to(device, scores.dtype)
            reorder = (base + picked[..., 1].long().to(device)).view(-1)
            cache.reorder(reorder, cross=False)
            next_token = picked[..., 2].long().to(device).view(-1, 1)
            tokens = torch.cat([tokens[reorder], next_token], dim=1)
        return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]


# -- models and sources -------------------------------------------------------------------------


class EOSBonus(torch.nn.Module):
    """The output layer with ``bonus`` added to EOS's logit."""

    def __init__(self, output: torch.nn.Module, bonus: float) -> None:
        super().__init__()
        self.output, self.bonus = output, bonus

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.output(h)
        return torch.cat([logits[..., :EOS], logits[..., EOS:EOS + 1] + self.bonus,
                          logits[..., EOS + 1:]], dim=-1)


def build(seed: int, eos_bonus: float):
    """A small random translation model, its output layer peaked and EOS made likelier by
    ``eos_bonus``, so that hypotheses end at many lengths and beams finish at different steps."""
    torch.manual_seed(seed)
    model = assemble({"vocab_size": VOCAB, "d_model": 32, "heads": 4, "ffn_dim": 64,
                      "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.1,
                      "tie_output": False, "max_positions": 48})
    with torch.no_grad():
        model.output.weight.mul_(3)
    model.output = EOSBonus(model.output, eos_bonus)
    return model.eval()


def sources(batch: int, seed: int, longest: int = 9) -> torch.Tensor:
    """``batch`` sentences of 2 to ``longest`` tokens (EOS last), right-padded."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, longest + 1, (batch,), generator=generator).tolist()
    src = torch.full((batch, max(lengths)), PAD)
    for row, n in enumerate(lengths):
        src[row, : n - 1] = torch.randint(3, VOCAB, (n - 1,), generator=generator)
        src[row, n - 1] = EOS
    return src


SETTINGS = [  # lenpen, min_len, max_len_a, max_len_b
    (0.6, 0, 1.2, 10),
    (1.0, 3, 1.2, 10),
    (0.0, 0, 0.5, 2),
    (2.0, 2, 0.0, 7),
]


@pytest.fixture(scope="module", params=[(0, 0.0), (0, 4.0), (1, 5.0), (2, 1.0)],
                ids=lambda p: f"seed{p[0]}-eos{p[1]:g}")
def model(request):
    return build(*request.param)


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "lp{}-min{}-a{}-b{}".format(*s))
@pytest.mark.parametrize("beam", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_beam_search_finds_exactly_the_reference_hypotheses(model, batch, beam, settings):
    lenpen, min_len, a, b = settings
    src = sources(batch, seed=batch * 10 + beam)
    kwargs = {"beam": beam, "lenpen": lenpen, "min_len": min_len, "max_len_a": a, "max_len_b": b}
    expected = reference_beam_search(model, src, **kwargs)
    assert beam_search(model, src, **kwargs) == expected


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "lp{}-min{}-a{}-b{}".format(*s))
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_greedy_finds_exactly_the_reference_hypotheses(model, batch, settings):
    _, min_len, a, b = settings
    src = sources(batch, seed=batch)
    kwargs = {"min_len": min_len, "max_len_a": a, "max_len_b": b}
    expected = reference_greedy(model, src, **kwargs)
    assert greedy(model, src, **kwargs) == expected
    assert beam_search(model, src, beam=1, **kwargs) == expected


def test_the_reference_hypotheses_vary_in_length():
    """The comparison means something: hypotheses end at different lengths, early EOS and
    the length limit both occur."""
    model = build(1, 5.0)
    src = sources(8, seed=3)
    hyps = reference_beam_search(model, src, beam=4)
    limits = max_target_lengths(src, 1.2, 10, 47).tolist()
    assert len({len(h) for h in hyps}) >= 4
    assert any(len(h) == n for h, n in zip(hyps, limits, strict=True))
    assert any(0 < len(h) < n for h, n in zip(hyps, limits, strict=True))


# -- reads of the device ----------------------------------------------------------------------

READS = {"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "cpu", "numpy"}


class Reads(TorchFunctionMode):
    """The reads of a tensor's value on the host, by the function that made them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            import traceback

            frames = [f for f in traceback.extract_stack()[:-1]
                      if "normzoo" in f.filename and "overrides" not in f.filename]
            self.seen.append(frames[-1].name if frames else "?")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_the_search_reads_the_device_only_to_check_it_is_done(monkeypatch, search):
    """As on a GPU (checked every DONE_CHECK_EVERY steps): one read of the length limit, the
    done checks, and the results at the end; nothing per step besides."""
    monkeypatch.setattr(decoding, "done_check_every", lambda device: decoding.DONE_CHECK_EVERY)
    model = build(0, 0.0)  # no EOS bias: the hypotheses run to the length limit
    src = sources(4, seed=5)
    steps = int(max_target_lengths(src, 1.2, 10, 47).max())
    with Reads() as reads:
        if search == "greedy":
            greedy(model, src)
        else:
            beam_search(model, src, beam=3)
    function = "greedy" if search == "greedy" else "beam_search"
    checks = -(-steps // decoding.DONE_CHECK_EVERY)
    assert set(reads.seen) <= {function, "best"}, reads.seen
    assert 1 <= reads.seen.count(function) <= 1 + checks + (search == "greedy")
    assert reads.seen.count("best") == (4 if search == "beam" else 0)


def test_of_equal_finished_hypotheses_the_first_to_finish_wins():
    """``max`` over the finished list kept the first of equal scores; so does ``best``."""
    from normzoo.inference.beams import Beams

    beams = Beams(batch=1, k=3, steps=4, lengths=torch.tensor([4]))
    beams.count[0] = 3
    beams.finished_scores[0, :3] = torch.tensor([-4.0, -2.0, -2.0])
    beams.finished_steps[0, :3] = torch.tensor([1, 1, 1])
    beams.finished_tokens[0, :3, :2] = torch.tensor([[5, 6], [7, 8], [9, 10]])
    assert beams.best(lenpen=1.0) == [[7, 8]]
    beams.finished_steps[0, 2] = 3  # now [9, 10]'s -2 is spread over 4 positions: it wins
    assert beams.best(lenpen=1.0) == [[9, 10]]
