"""Translate a whole split in token-budget batches and score it; shared by training and the CLI."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import ParallelData
from normzoo.data.tokenizer import Tokenizer
from normzoo.inference.arguments import ArgumentValueError
from normzoo.inference.beams import beam_problem, beam_state_bytes
from normzoo.inference.decoding import beam_search, greedy
from normzoo.inference.device import device_memory
from normzoo.models.families import Seq2SeqModel
from normzoo.recipe import EvalConfig


class InputCut(UserWarning):
    """An input line longer than the model's positions was cut to fit (``normzoo translate``,
    ``evaluate`` and ``generate`` print it as ``warning: line N: ...``)."""


def warn_cut(line: int, tokens: int, kept: int, positions: int, part: str = "first",
             stacklevel: int = 4) -> None:
    """Warn that input line ``line`` (counted from 1) of ``tokens`` tokens was cut to ``kept``;
    ``stacklevel`` (as :func:`warnings.warn` counts) points at the code that called the API."""
    warnings.warn(InputCut(f"line {line}: {tokens:,} tokens, more than the model's {positions:,} "
                           f"positions hold; only its {part} {kept:,} are used"),
                  stacklevel=stacklevel)


def translate_batch(model: Seq2SeqModel, src: torch.Tensor, config: EvalConfig) -> list[list[int]]:
    """Token ids of the translations of ``src``: greedy for ``beam == 1``, else beam search."""
    if config.beam == 1:
        return greedy(model, src, max_len_a=config.max_len_a, max_len_b=config.max_len_b)
    return beam_search(model, src, beam=config.beam, lenpen=config.lenpen,
                       max_len_a=config.max_len_a, max_len_b=config.max_len_b)


def check_beam_memory(model: Seq2SeqModel, config: EvalConfig,
                      batches: list[np.ndarray]) -> None:
    """Refuse (:class:`~normzoo.inference.arguments.ArgumentValueError`, exit 2 at the command
    line) a beam whose search state for the largest of ``batches`` (each its sources' lengths,
    EOS counted; :func:`~normzoo.inference.beams.beam_state_bytes`) is more than the memory of
    the model's device, before anything is allocated: not an allocator's traceback asking for
    terabytes (``--beam 1000000000``)."""
    if config.beam == 1 or not batches:
        return
    weight = next(model.parameters())
    width, kind = weight.element_size(), weight.device.type
    if torch.is_autocast_enabled(kind):
        width = min(width, torch.get_autocast_dtype(kind).itemsize)
    positions = model.config.max_positions - 1

    def need(lengths: np.ndarray, sentences: int) -> tuple[int, int, int]:
        source = int(lengths.max())
        steps = min(max(int(source * config.max_len_a + config.max_len_b), 1), positions)
        return beam_state_bytes(model.config, config.beam, sentences, source, steps,
                                width), sentences, source

    most, sentences, source = max(need(lengths, len(lengths)) for lengths in batches)
    batch = (f"a batch of {sentences} sentences of up to {source} tokens" if sentences > 1
             else f"one sentence of {source} tokens")
    limit, where = device_memory(weight.device)
    problem = beam_problem(config.beam, most, batch, limit, where)
    if problem:
        alone = need(np.array([source]), 1)[0]  # the batch's longest sentence on its own
        raise ArgumentValueError(f"beam {config.beam} {problem}"
                                 + (" or fewer tokens per batch" if alone <= limit else ""))


@torch.no_grad()
def translate_dataset(
    model: Seq2SeqModel,
    tokenizer: Tokenizer,
    data: ParallelData,
    config: EvalConfig,
    max_tokens: int,
    *,
    warn_cut_lines: bool = False,
    first_line: int = 1,
) -> list[str]:
    """Detokenized hypotheses for every sentence of ``data``, in the split's order.

    An empty source (no tokens: an empty or blank line) gets an empty hypothesis without
    decoding; the model would make one up from EOS alone. A source longer than the model's
    positions is cut to its first ``max_len - 1`` tokens (and EOS), as in validation; with
    ``warn_cut_lines`` each one is named in an :class:`InputCut` warning, by its line
    (``first_line`` for the first sentence of ``data``).
    """
    device = next(model.parameters()).device
    if warn_cut_lines:
        full = data.src.lengths()[data.ids]
        for i in np.flatnonzero(full > data.max_len - 1):
            warn_cut(int(data.ids[i]) + first_line, int(full[i]), data.max_len - 1,
                     data.max_len, stacklevel=5)  # past no_grad's wrapper and Loaded.translate
    lengths = data.src_lengths()  # with EOS: 1 for an empty source
    hyps: dict[int, str] = {int(data.ids[i]): "" for i in np.flatnonzero(lengths <= 1)}
    filled = np.flatnonzero(lengths > 1)
    # A sentence longer than the budget is a batch of its own rather than an error.
    budget = max(max_tokens, int(lengths[filled].max())) if filled.size else max_tokens
    batches = [filled[np.asarray(items, dtype=np.int64)] for items in (
        token_budget_batches(lengths[filled], budget, shuffle=False) if filled.size else [])]
    check_beam_memory(model, config, [lengths[chosen] for chosen in batches])
    for chosen in batches:
        batch = data.collate(chosen.tolist())
        out = translate_batch(model, batch["src"].to(device), config)
        for i, ids in zip(batch["ids"].tolist(), out, strict=True):
            hyps[i] = tokenizer.decode(ids)
    return [hyps[i] for i in sorted(hyps)]
