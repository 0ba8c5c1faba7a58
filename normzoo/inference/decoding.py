"""Decoding with the key/value cache: greedy and beam search for translation, and what every
decoder shares (eval mode for the duration, the special tokens never emitted); sampling from
language models is :mod:`~normzoo.inference.sampling`.

The encoder runs once per batch; each step feeds only the newest target token through the
decoder, whose cache holds the keys and values of the earlier ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.models.families import Seq2SeqModel


@contextmanager
def evaluation_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run the block with ``model`` in eval mode, then give it back the mode it came in with.

    Decoding needs eval mode (no dropout) whatever mode the caller's model is in, and must not
    change that mode behind the caller's back; restoring it in ``finally`` also holds when
    decoding raises, so an error cannot leave a training model silently without dropout.
    """
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def max_target_lengths(src: torch.Tensor, a: float, b: int, limit: int) -> torch.Tensor:
    """Per-sentence length limit ``a * source_length + b``, capped by the model's positions."""
    src_len = src.ne(PAD).sum(dim=1)
    return (src_len.float() * a + b).long().clamp(min=1, max=limit)


@torch.no_grad()
def greedy(
    model: Seq2SeqModel,
    src: torch.Tensor,
    *,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 0,
) -> list[list[int]]:
    """Greedy translations of a padded source batch ``[B, S]``, as token ids without BOS/EOS.

    ``min_len`` bans EOS until a hypothesis has that many tokens (fairseq's ``--min-len``);
    the length limit still wins where it is shorter.
    """
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


def _ban_specials(scores: torch.Tensor, step: int, min_len: int) -> None:
    """Never emit PAD or BOS; no EOS before ``min_len`` tokens (``step`` of them so far)."""
    scores[:, PAD] = float("-inf")
    scores[:, BOS] = float("-inf")
    if step < min_len:
        scores[:, EOS] = float("-inf")


def _advance(
    ranked: Iterable[tuple[float, int, int]],
    k: int,
    at_limit: bool,
    prefixes: torch.Tensor,
    finished: list[tuple[float, list[int]]],
    lenpen: float,
) -> list[tuple[float, int, int]]:
    """One sentence's beam step over its ``2k`` best (score, beam, token) candidates, best
    first: hypotheses that end here go to ``finished``; returns the (at most ``k``) live ones.
    ``prefixes`` ``[k, step]`` holds the tokens of the sentence's beams so far.
    """
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


def _strip(ids: list[int]) -> list[int]:
    if EOS in ids:
        ids = ids[: ids.index(EOS)]
    return [i for i in ids if i != PAD]


@torch.no_grad()
def beam_search(
    model: Seq2SeqModel,
    src: torch.Tensor,
    *,
    beam: int = 5,
    lenpen: float = 0.6,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 0,
) -> list[list[int]]:
    """Batched beam search with the key/value cache, as in fairseq.

    A hypothesis is finished when it emits EOS; its score is the sum of token log-probabilities
    (EOS included) divided by ``length ** lenpen``. A sentence is done once it has ``beam``
    finished hypotheses (or at its length limit, where the live beams are finished as they
    stand); the best finished one is returned. With ``beam=1`` this is exactly greedy search.
    ``min_len`` bans EOS before that many tokens, as in :func:`greedy`.
    """
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
        scores[:, 0] = 0.0  # all beams start identical: keep one so top-k isn't k copies
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
            # Python lists, turned into tensors once per step: element-wise tensor writes
            # cost a dispatch each, k of them per sentence and step.
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
            picked = torch.tensor(live, dtype=torch.float64)  # [batch, k, (score, beam, token)]
            scores = picked[..., 0].to(device, scores.dtype)
            reorder = (base + picked[..., 1].long().to(device)).view(-1)
            cache.reorder(reorder, cross=False)  # a sentence's beams share its encoder keys
            next_token = picked[..., 2].long().to(device).view(-1, 1)
            tokens = torch.cat([tokens[reorder], next_token], dim=1)
        return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in finished]
