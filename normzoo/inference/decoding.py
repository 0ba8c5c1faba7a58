"""Decoding with the key/value cache: greedy and beam search for translation, sampling for LMs.

The encoder runs once per batch; each step feeds only the newest target token through the
decoder, whose cache holds the keys and values of the earlier ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.models.families import DecoderModel, Seq2SeqModel


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


@torch.no_grad()
def sample(model: DecoderModel, prompt: torch.Tensor, **settings: Any) -> list[list[int]]:
    """Continue each row of ``prompt`` ``[B, T]`` (no padding) by sampling from a causal LM.

    ``settings`` are :func:`sample_steps`' (``max_new_tokens``, ``temperature`` 0 meaning
    greedy, ``top_k``, ``top_p`` for nucleus sampling, ``generator``). Returns the new token ids
    of each row, stopping at EOS.
    """
    steps = list(sample_steps(model, prompt, **settings))
    if not steps:
        return [[] for _ in range(prompt.shape[0])]
    return [_strip(row) for row in torch.stack(steps, dim=1).tolist()]


@torch.no_grad()  # on a generator, torch enters and leaves no_grad around each step
def sample_steps(
    model: DecoderModel,
    prompt: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[torch.Tensor]:
    """The tokens :func:`sample` picks, one step ``[B]`` at a time as they are sampled (PAD for
    rows already finished), so a caller can show them as they come."""
    if temperature < 0 or (top_p is not None and not 0 < top_p <= 1) or (top_k is not None
                                                                          and top_k < 1):
        raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 1")
    with evaluation_mode(model):
        batch = prompt.shape[0]
        limit = model.config.max_positions - prompt.shape[1]
        cache = model.new_cache()
        logits = model(prompt, cache=cache)[:, -1]
        finished = torch.zeros(batch, dtype=torch.bool, device=prompt.device)
        for _ in range(max(min(max_new_tokens, limit), 0)):
            token = _pick(logits.float(), temperature, top_k, top_p, generator)
            token[finished] = PAD
            yield token
            finished |= token.eq(EOS)
            if bool(finished.all()):
                return
            logits = model(token[:, None], cache=cache)[:, -1]


@torch.no_grad()  # on a generator, torch enters and leaves no_grad around each step
def ragged_sample_steps(
    model: DecoderModel,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
) -> Iterator[list[int | None]]:
    """Continue prompts of different lengths together, one step of every row at a time.

    No padding: all rows feed their prompt up to the shortest one's length at once; then, at
    each position, a row whose prompt goes on is fed its next prompt token (nothing is
    sampled for it), and the others sample. So each row sees exactly the positions and the
    tokens it would see alone, and with ``generators`` (one per row, or None for the global
    generator) draws exactly the random numbers it would draw alone: a row's continuation is
    the one it gets alone, up to the floating-point rounding of batched arithmetic. Yields,
    per step, each row's sampled token, or None where the row fed a prompt token or has
    finished (EOS, ``max_new_tokens`` or the model's positions). Prompts (BOS first) must fit
    the model's positions (:func:`fit_prompt`).
    """
    if temperature < 0 or (top_p is not None and not 0 < top_p <= 1) or (top_k is not None
                                                                          and top_k < 1):
        raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 1")
    if not prompts:
        return
    positions = model.config.max_positions
    lengths = [len(p) for p in prompts]
    if min(lengths) < 1 or max(lengths) > positions:
        raise ValueError(f"prompts need 1 to {positions} tokens (BOS included)")
    rows = range(len(prompts))
    generators = list(generators) if generators is not None else [None] * len(prompts)
    budget = [max(min(max_new_tokens, positions - n), 0) for n in lengths]
    made = [0] * len(prompts)
    done = [b == 0 for b in budget]
    device = next(model.parameters()).device
    with evaluation_mode(model):
        cache = model.new_cache()
        start = min(lengths)
        first = torch.tensor([list(p[:start]) for p in prompts], dtype=torch.long, device=device)
        logits = model(first, cache=cache)[:, -1]
        position = start  # the position whose token is chosen now
        while not all(done):
            fed = [PAD] * len(prompts)
            picked: list[int | None] = [None] * len(prompts)
            sampling = [i for i in rows if position >= lengths[i] and not done[i]]
            for i in rows:
                if position < lengths[i]:
                    fed[i] = int(prompts[i][position])
            if sampling:
                for i, token in zip(sampling, _pick_rows(logits.float(), sampling, temperature,
                                                         top_k, top_p, generators), strict=True):
                    fed[i] = picked[i] = token
                    made[i] += 1
                    done[i] = token == EOS or made[i] >= budget[i]
            yield picked
            if all(done) or position + 1 >= positions:
                return
            step = torch.tensor(fed, dtype=torch.long, device=device)[:, None]
            logits = model(step, cache=cache)[:, -1]
            position += 1


def _pick_rows(logits: torch.Tensor, rows: list[int], temperature: float, top_k: int | None,
               top_p: float | None, generators: Sequence[torch.Generator | None]) -> list[int]:
    """The tokens of ``rows`` of ``logits``: together on the global generator (or greedy),
    row by row on their own generators, each drawing as it would alone."""
    if temperature == 0 or all(generators[i] is None for i in rows):
        return _pick(logits[rows], temperature, top_k, top_p, None).tolist()
    return [int(_pick(logits[i : i + 1], temperature, top_k, top_p, generators[i])[0])
            for i in rows]


def fit_prompt(ids: Sequence[int], positions: int) -> tuple[list[int], int]:
    """A prompt's tokens (BOS first) cut to leave the model at least one position to sample:
    BOS and the prompt's last tokens, which the continuation follows. Returns them and how
    many tokens were cut (0: none)."""
    room = positions - 1  # BOS + prompt, one position left for the first new token
    if len(ids) <= room:
        return list(ids), 0
    return [ids[0], *ids[len(ids) - (room - 1):]], len(ids) - room


def _pick(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
          generator: torch.Generator | None) -> torch.Tensor:
    _ban_specials(logits, step=0, min_len=0)
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already reach p.
        drop = probs.cumsum(dim=-1) - probs >= top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)
