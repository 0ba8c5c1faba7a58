"""A translation checkpoint's validation loss in eval mode, in train mode, and with one kind of
dropout on at a time, with what it predicts: how far dropout changes the function a model
computes, and which dropout does it.

    python -m studies.depth.eval_gap CKPT [--data-dir DIR] [--batches 6] [--json OUT.json]

Written for the depth study's Post-LN 18+18 cells, whose validation loss (eval mode, no label
smoothing) ends above ln(vocabulary), a uniform guess, while their training loss is lower. Each
row runs the first ``--batches`` validation batches (the same in every row; dropout masks from a
fixed seed) and prints:

- the token loss without and with the recipe's label smoothing;
- the mean entropy of the predicted distribution and the mean probability of its top token;
- how much the prediction moves along a sentence: the mean total-variation distance between
  the distributions predicted at neighbouring positions (0: every position predicts the same)
  and the mean number of distinct argmax tokens per sentence;
- the three most frequent argmax tokens.

The row "train mode, every dropout p=0" checks the eval path itself: its logits must equal eval
mode's (the largest difference is printed), so that a gap between eval and train mode is
dropout's and nothing else's (no other layer behaves differently in training).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from normzoo.data.tokenizer import Tokenizer

_RESIDUAL = re.compile(r"layers\.\d+\.dropout$")


def dropout_groups(model: nn.Module) -> dict[str, list[nn.Module]]:
    """The model's dropout sites by kind; attention dropout lives in the attention modules."""
    from normzoo.nn.attention import MultiheadAttention
    from normzoo.nn.dropout import Dropout

    groups: dict[str, list[nn.Module]] = collections.defaultdict(list)
    for name, module in model.named_modules():
        if isinstance(module, MultiheadAttention) and module.dropout > 0:
            groups["attention"].append(module)
        elif isinstance(module, Dropout) and module.p > 0:
            kind = ("residual" if _RESIDUAL.search(name) else "activation" if "ffn" in name
                    else "embedding" if "embed" in name else name)
            groups[kind].append(module)
    return dict(groups)


@contextlib.contextmanager
def dropout_off_in_train_mode(model: nn.Module) -> Iterator[None]:
    """Train mode with every dropout probability set to 0, restored afterwards."""
    from normzoo.nn.attention import MultiheadAttention
    from normzoo.nn.dropout import Dropout

    saved = []
    for module in model.modules():
        if isinstance(module, Dropout):
            saved.append((module, "p", module.p))
            module.p = 0.0
        elif isinstance(module, MultiheadAttention):
            saved.append((module, "dropout", module.dropout))
            module.dropout = 0.0
    model.train()
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


def measure(model: nn.Module, batches: list, smoothing: float, *,
            keep_logits: bool = False) -> dict:
    """Loss, entropy, top-token probability and how predictions move along each sentence.

    ``keep_logits``: also return the logits of every batch (``logits``), to compare two modes;
    off by default, as they take about 50 MB a batch at the study's size."""
    from normzoo.nn.token_loss import token_terms

    torch.manual_seed(0)
    pad = model.pad_id  # padding is left out of the loss and the predictions
    loss = smoothed = count = entropy = top_p = moves = pairs = distinct = sentences = 0.0
    predictions: collections.Counter = collections.Counter()
    all_logits = []
    with torch.no_grad():
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"]).float()
            if keep_logits:
                all_logits.append(logits)
            labels = batch["tgt_out"]
            plain = token_terms(logits, labels, ignore_index=pad, smoothing=0.0)
            smooth = token_terms(logits, labels, ignore_index=pad, smoothing=smoothing)
            loss, smoothed = loss + plain.loss_sum.item(), smoothed + smooth.loss_sum.item()
            count += plain.tokens.item()
            real = labels.ne(pad)
            p = logits.softmax(-1)
            entropy += -(p * p.clamp_min(1e-30).log()).sum(-1)[real].sum().item()
            top_p += p.max(-1).values[real].sum().item()
            both = real[:, 1:] & real[:, :-1]
            moves += (0.5 * (p[:, 1:] - p[:, :-1]).abs().sum(-1))[both].sum().item()
            pairs += both.sum().item()
            argmax = logits.argmax(-1)
            predictions.update(argmax[real].tolist())
            for row, keep in zip(argmax, real, strict=True):
                distinct += len(set(row[keep].tolist()))
                sentences += 1
    return {"loss": loss / count, "loss_smoothed": smoothed / count, "entropy": entropy / count,
            "top_p": top_p / count, "tv_neighbours": moves / max(pairs, 1),
            "distinct_argmax": distinct / max(sentences, 1),
            "top_predictions": [(i, n / count) for i, n in predictions.most_common(3)],
            **({"logits": all_logits} if keep_logits else {})}


def rows(model: nn.Module, batches: list, smoothing: float) -> list[dict]:
    """Every mode the script compares, eval mode first."""
    results = []

    def run(name: str, keep_logits: bool = False) -> dict:
        result = measure(model, batches, smoothing, keep_logits=keep_logits)
        result["mode"] = name
        results.append(result)
        return result

    model.eval()
    reference = run("eval mode", keep_logits=True)
    with dropout_off_in_train_mode(model):
        same = run("train mode, every dropout p=0", keep_logits=True)
    same["max_abs_diff_to_eval"] = max(
        (a - b).abs().max().item() for a, b in zip(same["logits"], reference["logits"],
                                                    strict=True))
    del same["logits"], reference["logits"]
    model.train()
    run("train mode (all dropout on)")
    for kind, modules in dropout_groups(model).items():
        model.eval()
        for module in modules:
            module.train()
        run(f"eval mode, {kind} dropout on")
    model.eval()
    return results


def token_text(tokenizer: Tokenizer, token: int) -> str:
    """A token as the vocabulary spells it (special tokens too, which decoding drops)."""
    return tokenizer.backend.id_to_token(token) or tokenizer.decode([token])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--batches", type=int, default=6,
                        help="how many validation batches each row runs (default: 6)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error(f"--batches must be at least 1, not {args.batches}")
    import normzoo
    from normzoo.checkpoints.rolling import checkpoint_step
    from normzoo.errors import NormzooError
    from normzoo.io.atomic import atomic_write_text
    from normzoo.tasks.datamodule import TextDataModule

    try:
        loaded = normzoo.load(args.checkpoint)
    except NormzooError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    recipe = loaded.recipe
    if args.data_dir is not None:
        data = recipe.data.model_copy(update={"dir": str(args.data_dir), "source": "files"})
        recipe = recipe.model_copy(update={"data": data})
    module = TextDataModule(recipe, loaded.tokenizer, show_progress=False)
    module.setup("fit")
    batches = list(module.val_dataloader())[: args.batches]
    smoothing = recipe.optim.label_smoothing
    uniform = math.log(loaded.tokenizer.vocab_size)
    results = rows(loaded.model, batches, smoothing)
    for result in results:
        result["top_predictions"] = [(token_text(loaded.tokenizer, i), round(share, 3))
                                     for i, share in result["top_predictions"]]
    print(f"{args.checkpoint}: uniform guess ln V = {uniform:.3f}; {len(batches)} validation "
          f"batches; label smoothing {smoothing}")
    print("| mode | loss | loss (smoothed) | entropy | top-token p | TV, neighbours "
          "| distinct argmax / sentence | most frequent argmax |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        extra = (f" (logits differ from eval mode's by at most {r['max_abs_diff_to_eval']:.2e})"
                 if "max_abs_diff_to_eval" in r else "")
        top = ", ".join(f"{token!r} {share:.0%}" for token, share in r["top_predictions"])
        print(f"| {r['mode']}{extra} | {r['loss']:.3f} | {r['loss_smoothed']:.3f} "
              f"| {r['entropy']:.3f} | {r['top_p']:.3f} | {r['tv_neighbours']:.3f} "
              f"| {r['distinct_argmax']:.1f} | {top} |")
    if args.json is not None:
        record = {"checkpoint": args.checkpoint.name, "step": checkpoint_step(args.checkpoint),
                  "recipe": loaded.recipe.model_dump(mode="json"), "batches": len(batches),
                  "uniform_loss": uniform, "label_smoothing": smoothing, "rows": results}
        atomic_write_text(args.json, json.dumps(record, indent=2) + "\n", "eval-gap record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
