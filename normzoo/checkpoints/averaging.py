"""The average of a run's checkpoints (fairseq's ``average_checkpoints``): what ``normzoo
export --average`` writes and translation's final test scores beside the best checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from normzoo.checkpoints.reading import (
    CheckpointError,
    check_finite,
    checkpoint_parts,
    read_checkpoint,
)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    weights = checkpoint_parts(read_checkpoint(path), str(path))[1]
    check_finite(weights, str(path))
    return weights



def average_state(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' float parameters (others taken from the first).

    Every checkpoint must hold the same tensors with the same shapes; one that does not (from
    another run, or damaged) is named rather than averaged.
    """
    first = _weights(paths[0])
    total = {k: v.double() if v.is_floating_point() else v for k, v in first.items()}
    for path in paths[1:]:
        weights = _weights(path)
        shapes = {k: v.shape for k, v in weights.items()}
        if shapes != {k: v.shape for k, v in first.items()}:
            raise CheckpointError(f"cannot average {path} with {paths[0]}: their weights differ "
                                  "in names or shapes (checkpoints of different models?)")
        for key, value in weights.items():
            if value.is_floating_point():
                total[key] += value.double()
    return {k: (v / len(paths)).to(first[k].dtype) if v.is_floating_point() else v
            for k, v in total.items()}
