"""Sentences classified by a model with a ``classifier`` head (what a classification task
builds): each sentence made ``[BOS, *ids, EOS]``, cut to the recipe's ``data.max_len``, as the
classifier's dataset makes it for training and testing; batched by a token budget, in length
order; and scored as the classifier's LightningModule scores it, the head on the encoder's
states and their padding mask. Nothing here knows a task: the head is what is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import pad
from normzoo.data.tokenizer import BOS, EOS
from normzoo.inference.decoding import evaluation_mode
from normzoo.inference.translate import warn_cut


def classifier_head(model: nn.Module) -> nn.Module | None:
    """``model``'s ``classifier`` head over its encoder, or None where it has none."""
    head = getattr(model, "classifier", None)
    return head if isinstance(head, nn.Module) and callable(getattr(model, "encode", None)) \
        else None


def sentence_rows(tokenizer: Any, texts: Sequence[str], max_len: int,
                  first_line: int = 1) -> list[list[int]]:
    """Each text as ``[BOS, *ids, EOS]`` of at most ``max_len`` tokens (the classifier's
    dataset cuts its sentences so); a longer one is cut to its start, with an
    :class:`~normzoo.inference.translate.InputCut` warning naming its line (``first_line``
    for the first text)."""
    cap = max_len - 2
    rows = []
    for i, ids in enumerate(tokenizer.encode_batch(list(texts))):
        if len(ids) > cap:
            warn_cut(first_line + i, len(ids), cap, max_len, part="first", stacklevel=4)
        rows.append([BOS, *ids[:cap], EOS])
    return rows


@torch.no_grad()
def classify_rows(model: nn.Module, rows: Sequence[Sequence[int]], max_tokens: int) -> list[int]:
    """The class index ``model``'s head picks for each row (in order), in batches of about
    ``max_tokens`` padded tokens (a longer row is a batch of its own)."""
    if not rows:
        return []
    head = classifier_head(model)
    lengths = [len(row) for row in rows]
    batches = token_budget_batches(lengths, max(max_tokens, *lengths), shuffle=False)
    device = next(model.parameters()).device
    picked = [0] * len(rows)
    with evaluation_mode(model):
        for batch in batches:
            tokens = pad([rows[i] for i in batch]).to(device)
            logits = head(model.encode(tokens), model.padding_mask(tokens))
            for i, index in zip(batch, logits.argmax(dim=-1).tolist(), strict=True):
                picked[i] = index
    return picked
