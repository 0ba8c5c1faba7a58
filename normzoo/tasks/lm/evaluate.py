"""``normzoo evaluate`` for language models: MLM accuracy (masked LM) or perplexity (causal LM)
on raw lines, as the run's validation and final test score them."""

from __future__ import annotations

import math

import torch

from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import BlockData, SentenceData
from normzoo.nn.token_loss import token_terms


@torch.no_grad()
def language_model_metrics(loaded, lines: list[str], max_tokens: int, masked: bool,
                           seed: int | None = None) -> dict:
    """MLM accuracy (``masked``, seeded masking) or perplexity (causal LM) on raw ``lines``:
    the token terms the LM tasks log in validation (:func:`normzoo.nn.token_loss.token_terms`),
    summed over the whole text. The masks are seeded as the run's validation and test seed
    them (the recipe's ``seed`` unless ``seed`` is given), sentence by sentence, so a split
    scores what the run's final test scored, whatever ``max_tokens``."""
    recipe, model = loaded.recipe, loaded.model
    ids = loaded.tokenizer.encode_batch(lines)
    if masked:
        data = SentenceData.build(ids, recipe.data.max_len, loaded.tokenizer.vocab_size,
                                  recipe.data.mask_prob,
                                  mask_seed=recipe.seed if seed is None else seed)
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
    if masked:
        result["mlm_acc"] = round(correct / max(total, 1), 4)
    else:
        result["ppl"] = round(math.exp(min(loss, 50.0)), 3)
    return result
