"""The final test every task scored by Lightning's own loops shares (language models, the
classifier): the best checkpoint's weights, then ``trainer.validate`` and ``trainer.test`` in
float32 (:class:`~normzoo.tasks.scored.ScoredInFloat32`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

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
    its numbers never stand in for the validation metrics.

    Both score in float32 whatever ``trainer.precision`` trained in (the task's
    ``float32_scores``), as the translation test decodes: so they are what ``normzoo evaluate``
    scores from the checkpoint, and runs trained in other precisions are scored alike."""
    load_best(task, trainer)
    task.float32_scores = True
    try:
        validation = trainer.validate(task, dataloaders=data.val_dataloader(),
                                      verbose=False)[0]
        test = trainer.test(task, dataloaders=data.test_dataloader(), verbose=False)[0]
    finally:
        task.float32_scores = False
    return ({k: float(v) for k, v in validation.items()},
            {"split": recipe.data.test_split,
             **{k.removeprefix("test/"): float(v) for k, v in test.items()}})
