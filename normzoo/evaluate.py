"""Translate a whole split in token-budget batches and score it; shared by training and the CLI."""

from __future__ import annotations

import torch

from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import ParallelData
from normzoo.data.tokenizer import Tokenizer
from normzoo.decoding import beam_search, greedy
from normzoo.models.families import Seq2SeqModel
from normzoo.recipe import EvalConfig
from normzoo.tasks.terms import token_terms


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
    for batch_items in token_budget_batches(data.src_lengths(), max_tokens, shuffle=False):
        batch = data.collate(batch_items)
        out = translate_batch(model, batch["src"].to(device), config)
        for i, ids in zip(batch["ids"].tolist(), out, strict=True):
            hyps[i] = tokenizer.decode(ids)
    return [hyps[i] for i in sorted(hyps)]


@torch.no_grad()
def language_model_metrics(loaded, lines: list[str], max_tokens: int, seed: int = 0) -> dict:
    """MLM accuracy (masked LM, seeded masking) or perplexity (causal LM) on raw ``lines``:
    the token terms the LM tasks log in validation (:func:`normzoo.tasks.terms.token_terms`),
    summed over the whole text."""
    import math

    from normzoo.data.examples import BlockData, SentenceData

    recipe, model = loaded.recipe, loaded.model
    ids = loaded.tokenizer.encode_batch(lines)
    if recipe.task == "mlm":
        data = SentenceData.build(ids, recipe.data.max_len, loaded.tokenizer.vocab_size,
                                  recipe.data.mask_prob, mask_seed=seed)
    else:
        data = BlockData.build(ids, recipe.data.max_len)
    nll, correct, total = 0.0, 0, 0
    device = next(model.parameters()).device
    for items in token_budget_batches(data.lengths(), max_tokens, shuffle=False):
        batch = data.collate(items)
        terms = token_terms(model(batch["tokens"].to(device)), batch["labels"].to(device),
                            ignore_index=-100, count_correct=True)
        nll += terms.loss_sum.item()
        correct += int(terms.correct)
        total += int(terms.tokens)
    loss = nll / max(total, 1)
    result = {"task": recipe.task, "tokens": total, "loss": round(loss, 4)}
    if recipe.task == "mlm":
        result["mlm_acc"] = round(correct / max(total, 1), 4)
    else:
        result["ppl"] = round(math.exp(min(loss, 50.0)), 3)
    return result
