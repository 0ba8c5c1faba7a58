"""A translation checkpoint's validation loss in eval mode and in train mode (dropout on), with
what it predicts: how far dropout changes the function a model computes.

    python benchmarks/eval_gap.py CKPT [--data-dir DIR] [--batches 6]

Written for the depth study's Post-LN 18+18 cells, whose validation loss (eval mode, no label
smoothing) ends above ln(vocabulary), a uniform guess, while their training loss is lower. For
each mode it prints the token loss with and without label smoothing, the mean entropy of the
predicted distribution, the mean probability of the top token, and the most frequent argmax
predictions, on the first ``--batches`` validation batches (the same in both modes; dropout
masks from a fixed seed).
"""

from __future__ import annotations

import argparse
import collections
import math
from pathlib import Path

import torch


def measure(model, batches, tokenizer, train_mode: bool, smoothing: float) -> dict:
    from normzoo.tasks.terms import token_terms

    model.train(train_mode)
    torch.manual_seed(0)
    pad = model.pad_id  # padding is left out of the loss and the predictions
    loss = count = entropy = top_p = 0.0
    predictions: collections.Counter = collections.Counter()
    with torch.no_grad():
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"]).float()
            terms = token_terms(logits, batch["tgt_out"], ignore_index=pad, smoothing=smoothing)
            loss, count = loss + terms.loss_sum.item(), count + terms.tokens.item()
            real = batch["tgt_out"].ne(pad)
            p = logits.softmax(-1)[real]
            entropy += -(p * p.clamp_min(1e-30).log()).sum(-1).sum().item()
            top_p += p.max(-1).values.sum().item()
            predictions.update(logits.argmax(-1)[real].tolist())
    common = [(repr(tokenizer.decode([i])), round(n / count, 3))
              for i, n in predictions.most_common(3)]
    return {"mode": "train" if train_mode else "eval", "smoothing": smoothing,
            "loss": loss / count, "entropy": entropy / count, "top_p": top_p / count,
            "top_predictions": common}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--batches", type=int, default=6)
    args = parser.parse_args(argv)
    import normzoo
    from normzoo.tasks.datamodule import TextDataModule

    loaded = normzoo.load(args.checkpoint)
    recipe = loaded.recipe
    if args.data_dir is not None:
        data = recipe.data.model_copy(update={"dir": str(args.data_dir), "source": "files"})
        recipe = recipe.model_copy(update={"data": data})
    module = TextDataModule(recipe, loaded.tokenizer, show_progress=False)
    module.setup("fit")
    batches = list(module.val_dataloader())[: args.batches]
    print(f"{args.checkpoint}: uniform guess ln V = {math.log(loaded.tokenizer.vocab_size):.3f}")
    for train_mode in (False, True):
        for smoothing in (0.0, recipe.optim.label_smoothing):
            r = measure(loaded.model, batches, loaded.tokenizer, train_mode, smoothing)
            print(f"{r['mode']:5s} mode, label smoothing {r['smoothing']}: loss {r['loss']:.3f}, "
                  f"entropy {r['entropy']:.3f}, mean top-token p {r['top_p']:.3f}, "
                  f"argmax {r['top_predictions']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
