"""Translate a whole split in token-budget batches and score it; shared by training and the CLI."""

from __future__ import annotations

import torch

from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import ParallelData
from normzoo.data.tokenizer import Tokenizer
from normzoo.decoding import beam_search, greedy
from normzoo.models.families import Seq2SeqModel
from normzoo.recipe import EvalConfig


def translate_batch(model: Seq2SeqModel, src: torch.Tensor, config: EvalConfig) -> list[list[int]]:
    """Token ids of the translations of ``src``: greedy for ``beam == 1``, else beam search."""
    if config.beam == 1:
        return greedy(model, src, max_len_a=config.max_len_a, max_len_b=config.max_len_b)
    return beam_search(model, src, beam=config.beam, lenpen=config.lenpen,
                       max_len_a=config.max_len_a, max_len_b=config.max_len_b)


@torch.no_grad()
def translate_dataset(
    model: Seq2SeqModel,
    tokenizer: Tokenizer,
    data: ParallelData,
    config: EvalConfig,
    max_tokens: int,
) -> list[str]:
    """Detokenized hypotheses for every sentence of ``data``, in the split's order."""
    device = next(model.parameters()).device
    hyps: dict[int, str] = {}
    lengths = [len(s) + 1 for s in data.src]
    for batch_items in token_budget_batches(lengths, max_tokens, shuffle=False):
        batch = data.collate(batch_items)
        out = translate_batch(model, batch["src"].to(device), config)
        for i, ids in zip(batch["ids"].tolist(), out, strict=True):
            hyps[i] = tokenizer.decode(ids)
    return [hyps[i] for i in sorted(hyps)]
