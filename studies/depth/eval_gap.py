"""A translation checkpoint's validation loss in eval mode, in train mode, and with one kind of
dropout on at a time, with what it predicts: does dropout change the function a model computes,
and which dropout does it (the depth study's eval-gap section reads the ``--json`` records)?

    python -m studies.depth.eval_gap CKPT [--data-dir DIR] [--batches 6] [--json OUT.json]

Each row runs the first ``--batches`` validation batches (dropout masks from a fixed seed): the
token loss without and with label smoothing, the predictions' mean entropy and top-token
probability, the mean total variation between neighbouring positions' predictions (0: every
position predicts the same), distinct argmax tokens per sentence, the three most frequent. The
row "train mode, every dropout p=0" checks the eval path: its logits must equal eval mode's.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

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
            groups["residual" if _RESIDUAL.search(name) else "activation" if "ffn" in name
                   else "embedding" if "embed" in name else name].append(module)
    return dict(groups)


@contextlib.contextmanager
def dropout_off_in_train_mode(model: nn.Module) -> Iterator[None]:
    """Train mode with every dropout probability set to 0, restored afterwards."""
    from normzoo.nn.attention import MultiheadAttention
    from normzoo.nn.dropout import Dropout

    saved = [(m, name, getattr(m, name)) for m in model.modules()
             if (name := "p" if isinstance(m, Dropout) else "dropout" if isinstance(
                 m, MultiheadAttention) else "")]
    for module, attribute, _ in saved:
        setattr(module, attribute, 0.0)
    model.train()
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


def measure(model: nn.Module, batches: list, smoothing: float, *,
            keep_logits: bool = False) -> dict:
    """Loss, entropy, top-token probability and how predictions move along each sentence
    (``keep_logits``: also every batch's logits, about 50 MB a batch at the study's size)."""
    from normzoo.nn.token_loss import token_terms

    torch.manual_seed(0)
    pad = model.pad_id  # padding is left out of the loss and the predictions
    loss = smoothed = count = entropy = top_p = moves = pairs = distinct = sentences = 0.0
    predictions: collections.Counter = collections.Counter()
    all_logits = []
    with torch.no_grad():
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"]).float()
            all_logits += [logits] if keep_logits else []
            labels, real = batch["tgt_out"], batch["tgt_out"].ne(pad)
            plain = token_terms(logits, labels, ignore_index=pad, smoothing=0.0)
            smooth = token_terms(logits, labels, ignore_index=pad, smoothing=smoothing)
            loss, smoothed = loss + plain.loss_sum.item(), smoothed + smooth.loss_sum.item()
            count += plain.tokens.item()
            p = logits.softmax(-1)
            entropy += -(p * p.clamp_min(1e-30).log()).sum(-1)[real].sum().item()
            top_p += p.max(-1).values[real].sum().item()
            both = real[:, 1:] & real[:, :-1]
            moves += (0.5 * (p[:, 1:] - p[:, :-1]).abs().sum(-1))[both].sum().item()
            pairs += both.sum().item()
            argmax = logits.argmax(-1)
            predictions.update(argmax[real].tolist())
            distinct += sum(len(set(row[keep].tolist())) for row, keep in zip(argmax, real,
                                                                              strict=True))
            sentences += len(argmax)
    return {"loss": loss / count, "loss_smoothed": smoothed / count, "entropy": entropy / count,
            "top_p": top_p / count, "tv_neighbours": moves / max(pairs, 1),
            "distinct_argmax": distinct / max(sentences, 1),
            "top_predictions": [(i, n / count) for i, n in predictions.most_common(3)],
            **({"logits": all_logits} if keep_logits else {})}


def rows(model: nn.Module, batches: list, smoothing: float) -> list[dict]:
    """Every mode the script compares, eval mode first; the model is left in eval mode."""
    results = []

    def run(name: str, keep_logits: bool = False) -> dict:
        results.append({**measure(model, batches, smoothing, keep_logits=keep_logits),
                        "mode": name})
        return results[-1]

    model.eval()
    reference = run("eval mode", keep_logits=True)
    with dropout_off_in_train_mode(model):
        same = run("train mode, every dropout p=0", keep_logits=True)
    same["max_abs_diff_to_eval"] = max((a - b).abs().max().item() for a, b in zip(
        same.pop("logits"), reference.pop("logits"), strict=True))
    model.train()
    run("train mode (all dropout on)")
    for kind, modules in dropout_groups(model).items():
        model.eval()
        for module in modules:
            module.train()
        run(f"eval mode, {kind} dropout on")
    model.eval()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--batches", type=int, default=6, help="validation batches a row")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error(f"--batches must be at least 1, not {args.batches}")
    import normzoo
    from normzoo.checkpoints.rolling import checkpoint_step
    from normzoo.io.atomic import atomic_write_text
    from normzoo.tasks.datamodule import TextDataModule

    loaded = normzoo.load(args.checkpoint)
    recipe = loaded.recipe
    if args.data_dir is not None:
        recipe = recipe.model_copy(update={"data": recipe.data.model_copy(
            update={"dir": str(args.data_dir), "source": "files"})})
    module = TextDataModule(recipe, loaded.tokenizer, show_progress=False)
    module.setup("fit")
    batches = list(module.val_dataloader())[: args.batches]
    uniform = math.log(loaded.tokenizer.vocab_size)
    results = rows(loaded.model, batches, recipe.optim.label_smoothing)
    for r in results:  # a token as the vocabulary spells it (special tokens too)
        r["top_predictions"] = [(loaded.tokenizer.backend.id_to_token(i)
                                 or loaded.tokenizer.decode([i]), round(share, 3))
                                for i, share in r["top_predictions"]]
        print(r["mode"], {k: v for k, v in r.items() if k != "mode"})
    if args.json is not None:
        record = {"checkpoint": args.checkpoint.name, "step": checkpoint_step(args.checkpoint),
                  "recipe": loaded.recipe.model_dump(mode="json"), "batches": len(batches),
                  "uniform_loss": uniform, "label_smoothing": recipe.optim.label_smoothing,
                  "rows": results}
        atomic_write_text(args.json, json.dumps(record, indent=2) + "\n", "eval-gap record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
