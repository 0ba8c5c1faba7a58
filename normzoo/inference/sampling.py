"""Sampling from causal language models with the key/value cache: temperature, top-k and nucleus
sampling, a batch of equal prompts at once or prompts of different lengths side by side.

Each step feeds only the newest token through the decoder, whose cache holds the keys and values
of the earlier ones; eval mode and the special tokens never sampled are decoding's
(:mod:`~normzoo.inference.decoding`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from normzoo.data.tokenizer import EOS, PAD
from normzoo.inference.decoding import _ban_specials, _strip, evaluation_mode
from normzoo.models.families import DecoderModel


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
