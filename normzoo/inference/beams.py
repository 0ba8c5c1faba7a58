"""Beam search's bookkeeping as tensor operations over the whole batch, on the model's device.

Each step takes the ``2k`` best (score, beam, token) candidates of every sentence and, without
a Python loop or a read of the device, decides what fairseq's ``SequenceGenerator`` decides
walking them best first: an EOS within the top ``k`` finishes its beam (one further down is
passed over); at a sentence's length limit every candidate finishes, its token kept; any other
candidate continues, until ``k`` continue or the sentence has ``k`` finished hypotheses. The
walk stops at the first candidate where one of those counts is full, so candidate ``r`` is taken
exactly when fewer than ``k`` finished (counting the earlier steps') and fewer than ``k``
continuing ones rank above it: two exclusive cumulative sums decide every candidate of every
sentence at once. Finished hypotheses keep their place in the order they finished, so the best
one, picked at the end, is the first of the best, as Python's ``max`` picks it.
"""

from __future__ import annotations

from typing import Any

import torch

from normzoo.data.tokenizer import EOS, PAD

SCORE_BYTES, TOKEN_BYTES = 4, 8  # the beam's log-probabilities are float32, its tokens int64


def beam_state_bytes(config: Any, beam: int, sentences: int, source: int, steps: int,
                     width: int = 4) -> int:
    """A lower bound of the memory that beam search over ``sentences`` sentences of ``source``
    tokens (padded, EOS counted), ``beam`` beams each, holds at once at its length limit of
    ``steps`` target tokens, its activations ``width`` bytes wide (``config``: the model's
    :class:`~normzoo.models.config.ModelConfig`): the encoder output copied per beam; every
    decoder layer's keys and values, cross-attention's from the first step and self-attention's
    for ``steps`` positions (a GPU's static cache holds them from the first step); one step's
    logits and log-probabilities over the vocabulary; the live and finished hypotheses' tokens.
    The step's own activations and the weights come on top."""
    rows, head_dim = sentences * beam, config.d_model // config.heads
    kv_width = (config.kv_heads or config.heads) * head_dim
    encoder_output = rows * source * config.d_model * width
    cache = config.decoder_depth * 2 * rows * kv_width * (source + steps) * width
    scores = rows * config.vocab_size * (width + SCORE_BYTES)
    tokens = (rows + sentences * (beam + 1)) * steps * TOKEN_BYTES
    return encoder_output + cache + scores + tokens


def _size(count: int) -> str:
    return f"{count / 2**40:,.1f} TiB" if count >= 2**40 else f"{count / 2**30:,.1f} GiB"


def beam_problem(beam: int, need: int, batch: str, limit: int | None, where: str,
                 option: str = "beam") -> str | None:
    """Why ``beam`` beams, whose search needs ``need`` bytes (:func:`beam_state_bytes`) for
    ``batch`` (in words), do not fit in the ``limit`` bytes of ``where``, after the beam's name
    and value (``beam 1000000000 does not fit this machine: ...``); None where they may (or the
    memory is not known)."""
    if limit is None or need <= limit:
        return None
    return (f"does not fit this machine: beam search over {batch}, {beam} beams each, needs "
            f"at least {_size(need)} for its state (KV cache, scores, hypotheses), more than "
            f"the {_size(limit)} of {where}; use a smaller {option}")


class Beams:
    """The beams of ``batch`` sentences, ``k`` each, for at most ``steps`` tokens; ``lengths``
    ``[batch]`` is each sentence's length limit (on the device).

    ``scores`` ``[batch, k]`` are the live beams' sums of token log-probabilities (``-inf``
    for an empty slot); ``history`` ``[batch * k, steps]`` their tokens. Finished hypotheses
    go to one of ``k`` slots per sentence (slot ``k`` takes what finishes nowhere): their raw
    score, the step they finished at, and their tokens.
    """

    def __init__(self, batch: int, k: int, steps: int, lengths: torch.Tensor) -> None:
        device = lengths.device
        self.batch, self.k, self.lengths = batch, k, lengths
        self.scores = torch.full((batch, k), float("-inf"), device=device)
        self.scores[:, 0] = 0.0  # all beams start identical: keep one so top-k isn't k copies
        self.history = torch.full((batch * k, steps), PAD, dtype=torch.long, device=device)
        self.base = (torch.arange(batch, device=device) * k)[:, None]
        self.rank = torch.arange(2 * k, device=device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.count = torch.zeros(batch, dtype=torch.long, device=device)
        self.finished_scores = torch.full((batch, k + 1), float("-inf"), device=device)
        self.finished_steps = torch.zeros((batch, k + 1), dtype=torch.long, device=device)
        self.finished_tokens = torch.full((batch, k + 1, steps), PAD, dtype=torch.long,
                                          device=device)

    def advance(self, logp: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One step over ``logp`` ``[batch * k, vocab]`` (the tokens' log-probabilities, banned
        ones at ``-inf``). Returns the rows of the beams that continue (``[batch * k]``, the
        cache's reorder) and their next tokens ``[batch * k, 1]``; a sentence that is done, or
        an empty slot, continues row 0 of its sentence with PAD at ``-inf``."""
        batch, k = self.batch, self.k
        vocab = logp.shape[-1]
        candidates = (self.scores[:, :, None] + logp.view(batch, k, vocab)).view(batch, -1)
        top_scores, top_index = candidates.topk(2 * k, dim=1)
        origin, token = top_index // vocab, top_index % vocab
        valid = top_scores.ne(float("-inf"))  # the walk stops at the first -inf
        eos = token.eq(EOS)
        at_limit = self.lengths.le(step + 1)[:, None]
        finish = valid & torch.where(eos, self.rank < k, at_limit)
        live = valid & ~eos & ~at_limit
        finished_before = finish.cumsum(dim=1) - finish.long()
        live_before = live.cumsum(dim=1) - live.long()
        taken = (~self.done[:, None] & (self.count[:, None] + finished_before < k)
                 & (live_before < k))
        finish &= taken
        live &= taken
        self._finish(finish, finished_before, top_scores, origin, token, eos, step)
        self.done |= self.count.ge(k) | at_limit[:, 0] | ~live.any(dim=1)
        live &= ~self.done[:, None]  # a sentence done now keeps no live beam
        slot = torch.where(live, live_before, k)
        scores = torch.full((batch, k + 1), float("-inf"), device=logp.device)
        origins = torch.zeros((batch, k + 1), dtype=torch.long, device=logp.device)
        tokens = torch.full((batch, k + 1), PAD, dtype=torch.long, device=logp.device)
        self.scores = scores.scatter_(1, slot, top_scores)[:, :k].contiguous()
        reorder = (self.base + origins.scatter_(1, slot, origin)[:, :k]).view(-1)
        next_token = tokens.scatter_(1, slot, token)[:, :k].reshape(-1)
        self.history = self.history.index_select(0, reorder)
        self.history[:, step] = next_token
        return reorder, next_token[:, None]

    def _finish(self, finish: torch.Tensor, finished_before: torch.Tensor,
                top_scores: torch.Tensor, origin: torch.Tensor, token: torch.Tensor,
                eos: torch.Tensor, step: int) -> None:
        """File the candidates ``finish`` marks: the beam's tokens, and its token unless EOS."""
        batch, k, width = self.batch, self.k, step + 1
        slot = torch.where(finish, self.count[:, None] + finished_before, k)
        rows = (self.base + origin).view(-1)
        tokens = self.history[:, :width].index_select(0, rows).view(batch, 2 * k, width)
        tokens[:, :, step] = torch.where(eos, PAD, token)
        self.finished_tokens[:, :, :width].scatter_(
            1, slot[:, :, None].expand(-1, -1, width), tokens)
        self.finished_scores.scatter_(1, slot, top_scores)
        self.finished_steps.scatter_(1, slot, torch.full_like(slot, step))
        self.count += finish.sum(dim=1)

    def best(self, lenpen: float) -> list[list[int]]:
        """Each sentence's best finished hypothesis (``[]`` if it has none), by its score over
        ``length ** lenpen``, EOS counted, computed on the host in double precision as the
        per-sentence search did: the first of equals wins."""
        counts = self.count.tolist()
        scores = self.finished_scores[:, : self.k].tolist()
        steps = self.finished_steps[:, : self.k].tolist()
        chosen = []
        for count, raw, step in zip(counts, scores, steps, strict=True):
            normed = [raw[i] / (step[i] + 1) ** lenpen for i in range(count)]
            chosen.append(max(range(count), key=normed.__getitem__) if count else -1)
        index = torch.tensor([max(i, 0) for i in chosen], device=self.count.device)
        rows = self.finished_tokens[torch.arange(self.batch, device=index.device), index]
        return [[t for t in row if t != PAD] if i >= 0 else []
                for row, i in zip(rows.tolist(), chosen, strict=True)]
