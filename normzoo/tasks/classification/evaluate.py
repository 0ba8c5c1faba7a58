"""``normzoo evaluate`` for a classifier: accuracy and macro-F1 of a checkpoint on a split of
its recipe's data, or on a ``text<TAB>label`` file (``--src``), scored as the run's final test
scores them (same batches' contents, float32)."""

from __future__ import annotations

from typing import Any

import torch

from normzoo.tasks.contract import EvaluateRequest


@torch.no_grad()
def evaluate(task: Any, loaded: Any, request: EvaluateRequest) -> tuple[dict[str, Any],
                                                                       list[str]]:
    from normzoo.data.batching import token_budget_batches
    from normzoo.data.sources import read_lines
    from normzoo.tasks.classification.data import LabelledSentences
    from normzoo.tasks.classification.layout import parse_lines
    from normzoo.tasks.classification.metrics import ClassificationMetrics
    from normzoo.tasks.classification.module import sentence_terms

    recipe, model = loaded.recipe, loaded.model
    if request.src is not None:
        texts, labels = parse_lines(read_lines(request.src), str(request.src))
        where = str(request.src)
    else:
        parts = list(task.read(recipe, request.split, None))
        texts = [text for chunk in parts for text in chunk[0]]
        labels = [label for chunk in parts for label in chunk[1]]
        where = request.split
    classes = task.option(recipe, "labels")
    data = LabelledSentences.build(loaded.tokenizer.encode_batch(texts), labels, classes,
                                   recipe.data.max_len)
    scores = ClassificationMetrics(len(classes))
    device = next(model.parameters()).device
    loss_sum, count = 0.0, 0
    for items in token_budget_batches(data.lengths(), request.batch_tokens, shuffle=False):
        batch = data.collate(items)
        tokens, target = batch["tokens"].to(device), batch["labels"].to(device)
        logits = model.classifier(model.encode(tokens), model.padding_mask(tokens)).float()
        terms = sentence_terms(logits, target)
        loss_sum += terms.loss_sum.item()
        count += int(terms.tokens)
        scores.update(logits.cpu(), target.cpu())
    result = {key: round(float(value), 4) for key, value in scores.compute().items()}
    report = {"checkpoint": request.checkpoint, "split": where, "task": recipe.task,
              "sentences": count, "loss": round(loss_sum / max(count, 1), 4), **result}
    return report, ["  ".join(f"{k}={v}" for k, v in report.items())]
