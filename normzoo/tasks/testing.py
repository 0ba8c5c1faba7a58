"""The final test every task scored by Lightning's own loops shares (language models, the
classifier): the best checkpoint's weights, then ``trainer.validate`` and ``trainer.test`` in
float32 (:class:`~normzoo.tasks.scored.ScoredModule`); and what each test example gave, kept
in the run directory (``examples.<test split>.tsv``, :mod:`normzoo.tasks.per_example`) so that
a comparison of runs can resample the test set, not only the seeds.

A module that keeps them has a :class:`KeptExamples` as ``kept_examples`` and an
``example_rows(dataset, kept)`` giving the file's header and rows; its test step adds to it
where the batch carries its ``items`` (the dataset's indices of its rows, which the final test's
loader adds: :class:`ItemsCollate`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from normzoo.recipe import Recipe


def load_best(task, trainer) -> None:
    """The run's best checkpoint's weights into ``task`` (where there is one file to read)."""
    best = trainer.checkpoint_callback.best_model_path
    if best and Path(best).is_file():  # FSDP's sharded checkpoints are folders: keep weights
        state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
        task.load_state_dict(state)


def test_in_loops(recipe: Recipe, task, data,
                  trainer) -> tuple[dict[str, float], dict[str, Any]]:
    """Task metrics of the best checkpoint on the validation split (``val/*``) and on the test
    split (all ranks take part). The test runs as ``trainer.test`` and logs under ``test/``, so
    its numbers never stand in for the validation metrics; a module that keeps its examples'
    outputs has them written by rank 0 (:func:`keep_outputs`).

    Both score in float32 whatever ``trainer.precision`` trained in (the task's
    ``float32_scores``), as the translation test decodes: so they are what ``normzoo evaluate``
    scores from the checkpoint, and runs trained in other precisions are scored alike."""
    load_best(task, trainer)
    kept: KeptExamples | None = getattr(task, "kept_examples", None)
    loader = data.test_dataloader()
    if kept is not None:
        kept.clear()
        loader.collate_fn = ItemsCollate(loader.collate_fn)
    task.float32_scores = True
    try:
        validation = trainer.validate(task, dataloaders=data.val_dataloader(),
                                      verbose=False)[0]
        test = trainer.test(task, dataloaders=loader, verbose=False)[0]
    finally:
        task.float32_scores = False
    if kept is not None:
        keep_outputs(recipe, task, data, trainer, kept)
    return ({k: float(v) for k, v in validation.items()},
            {"split": recipe.data.test_split,
             **{k.removeprefix("test/"): float(v) for k, v in test.items()}})


class ItemsCollate:
    """A loader's ``collate`` that also hands the batch's dataset indices, as ``items``: what
    the final test's step keeps each example's outputs by (a class, not a closure, so that a
    loader worker started by spawning can receive it)."""

    def __init__(self, collate: Callable[[Any], dict[str, Any]]) -> None:
        self.collate = collate

    def __call__(self, items: Sequence[int]) -> dict[str, Any]:
        return {**self.collate(items), "items": torch.from_numpy(np.asarray(items, np.int64))}


class KeptExamples:
    """What each test example gave on this process, by its index in the dataset: a
    classifier's prediction, label and loss; a language model's token losses. A repeated
    example (a distributed sampler tops up a short last batch) is kept once."""

    def __init__(self) -> None:
        self.by_item: dict[int, Any] = {}

    def clear(self) -> None:
        self.by_item = {}

    def add(self, items: torch.Tensor, outputs: Iterable[Any]) -> None:
        """``outputs``: one per row of the batch whose dataset indices are ``items``."""
        for item, output in zip(items.tolist(), outputs, strict=True):
            self.by_item.setdefault(item, output)

    def gathered(self, trainer) -> list[tuple[int, Any]]:
        """Every process's examples, each once, in the dataset's order: on rank 0 (every
        process must call it); empty elsewhere."""
        mine = sorted(self.by_item.items(), key=lambda pair: pair[0])
        if trainer.world_size == 1 or not dist.is_initialized():
            return mine
        everyone: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(everyone, mine)
        if not trainer.is_global_zero:
            return []
        merged: dict[int, Any] = {}
        for part in everyone:
            for item, output in part:
                merged.setdefault(item, output)
        return sorted(merged.items(), key=lambda pair: pair[0])


def token_losses(logits: torch.Tensor, labels: torch.Tensor,
                 ignore_index: int = -100) -> torch.Tensor:
    """``[B, T]`` float32 cross-entropy of each token on the CPU, 0 where ``labels`` is
    ``ignore_index``: a row at a time, so no copy of the whole batch's log-probabilities is
    made beside its logits (a language model's vocabulary is large)."""
    out = torch.zeros(labels.shape, dtype=torch.float32)
    for row in range(len(labels)):
        x, y = logits[row].float(), labels[row]
        keep = y.ne(ignore_index)
        picked = x.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        out[row] = (torch.logsumexp(x, dim=-1) - picked).masked_fill(~keep, 0.0).cpu()
    return out


def keep_outputs(recipe: Recipe, task, data, trainer, kept: KeptExamples) -> None:
    """Write the test's per-example outputs to the run directory (rank 0, after gathering
    every process's). A test that missed some example writes nothing and says so: a partial
    file would pass for a smaller test set. The training and its summary are unaffected."""
    from normzoo.tasks.per_example import outputs_path, write_outputs

    gathered = kept.gathered(trainer)
    if not trainer.is_global_zero:
        return
    dataset, split = data.dataset("test"), recipe.data.test_split
    table = task.example_rows(dataset, gathered)
    if table is None:
        print(f"warning: the per-example outputs of the final test on '{split}' are not kept "
              f"({len(gathered)} of its {len(dataset)} examples scored, or examples that do "
              "not say which line they are)", file=sys.stderr)
        return
    header, rows = table
    write_outputs(outputs_path(Path(trainer.default_root_dir), split), header, rows)
