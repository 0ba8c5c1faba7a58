"""Decoding with the key/value cache: greedy and beam search for translation, and what every
decoder shares (eval mode for the duration, the special tokens never emitted); sampling from
language models is :mod:`~normzoo.inference.sampling`.

The encoder runs once per batch; each step feeds only the newest target token through the
decoder, whose cache holds the keys and values of the earlier ones. The step is
:mod:`~normzoo.inference.step_graphs`' (a CUDA graph over a static cache on a GPU, eager on a
CPU); everything around it stays on the device: greedy's choices and beam search's
(:class:`~normzoo.inference.beams.Beams`) are tensor operations over the whole batch, and the
host reads the device only to learn whether every sentence is done, every step on a CPU (where
reading costs nothing) and every :data:`DONE_CHECK_EVERY` steps on a GPU, where each read makes
the host wait for the queued kernels; the steps run past the end compute what nobody reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.inference.beams import Beams
from normzoo.inference.step_graphs import decoder_step
from normzoo.models.families import Seq2SeqModel

DONE_CHECK_EVERY = 4  # steps between the host's "all done?" reads on a GPU


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


def done_check_every(device: torch.device) -> int:
    """How often the host reads whether decoding is done: every step on a CPU, where a read
    costs nothing, and every :data:`DONE_CHECK_EVERY` steps elsewhere."""
    return 1 if device.type == "cpu" else DONE_CHECK_EVERY


@torch.no_grad()
def greedy(
    model: Seq2SeqModel,
    src: torch.Tensor,
    *,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 0,
    graphs: bool | None = None,
) -> list[list[int]]:
    """Greedy translations of a padded source batch ``[B, S]``, as token ids without BOS/EOS.

    ``min_len`` bans EOS until a hypothesis has that many tokens (fairseq's ``--min-len``);
    the length limit still wins where it is shorter. ``graphs`` turns the step's CUDA graph on
    or off (None: on a GPU unless ``NORMZOO_DECODE_GRAPHS=0``;
    :mod:`~normzoo.inference.step_graphs`).
    """
    with evaluation_mode(model):
        limit = model.config.max_positions - 1
        lengths = max_target_lengths(src, max_len_a, max_len_b, limit)
        steps = int(lengths.max())
        memory, memory_mask = model.encode(src)
        step_logits = decoder_step(model, memory, memory_mask, steps, graphs)
        batch, device = src.shape[0], src.device
        token = torch.full((batch, 1), BOS, dtype=torch.long, device=device)
        out = torch.full((batch, steps), PAD, dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        every = done_check_every(device)
        for step in range(steps):
            logits = step_logits(token, step)
            _ban_specials(logits, step, min_len)
            token = torch.where(finished, PAD, logits.argmax(dim=-1))[:, None]
            out[:, step] = token[:, 0]
            finished |= token[:, 0].eq(EOS) | lengths.le(step + 1)
            if (step + 1) % every == 0 and bool(finished.all()):
                break
        return [_strip(row) for row in out.tolist()]


def _ban_specials(scores: torch.Tensor, step: int, min_len: int) -> None:
    """Never emit PAD or BOS; no EOS before ``min_len`` tokens (``step`` of them so far)."""
    scores[:, PAD] = float("-inf")
    scores[:, BOS] = float("-inf")
    if step < min_len:
        scores[:, EOS] = float("-inf")


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
    graphs: bool | None = None,
) -> list[list[int]]:
    """Batched beam search with the key/value cache, as in fairseq.

    A hypothesis is finished when it emits EOS; its score is the sum of token log-probabilities
    (EOS included) divided by ``length ** lenpen``. A sentence is done once it has ``beam``
    finished hypotheses (or at its length limit, where the live beams are finished as they
    stand); the best finished one is returned. With ``beam=1`` this is exactly greedy search.
    ``min_len`` bans EOS before that many tokens, and ``graphs`` is the step's CUDA graph, as
    in :func:`greedy`. The bookkeeping is :class:`~normzoo.inference.beams.Beams`'.
    """
    with evaluation_mode(model):
        batch, k = src.shape[0], beam
        limit = model.config.max_positions - 1
        lengths = max_target_lengths(src, max_len_a, max_len_b, limit)
        steps = int(lengths.max())
        memory, memory_mask = model.encode(src)
        memory = memory.repeat_interleave(k, dim=0)
        memory_mask = memory_mask.repeat_interleave(k, dim=0)
        step_logits = decoder_step(model, memory, memory_mask, steps, graphs)
        beams = Beams(batch, k, steps, lengths)
        tokens = torch.full((batch * k, 1), BOS, dtype=torch.long, device=src.device)
        every = done_check_every(src.device)
        for step in range(steps):
            logp = torch.log_softmax(step_logits(tokens, step).float(), dim=-1)
            _ban_specials(logp, step, min_len)
            reorder, tokens = beams.advance(logp, step)
            if (step + 1) % every == 0 and bool(beams.done.all()):
                break
            step_logits.reorder(reorder)
        return beams.best(lenpen)
