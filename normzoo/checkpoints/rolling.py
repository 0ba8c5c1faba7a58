"""When a run writes its checkpoints, and which one ``--resume auto`` continues from.

Every validation (one per ``trainer.val_every_steps``) writes, in this order:

1. ``best-<step>.ckpt`` when the monitored metric improved (Lightning's ``ModelCheckpoint``);
2. ``step-<step>.ckpt``, of which the newest ``trainer.keep_checkpoints`` are kept;
3. ``last.ckpt``, a hard link to that ``step-<step>.ckpt`` (no second copy on disk), or a file
   of its own when no ``step-`` checkpoints are kept.

So ``last.ckpt`` never lags: it moves at *every* checkpoint, not only when the metric improves.
A process killed between two of these writes leaves an older ``last.ckpt`` beside a newer
complete checkpoint, which is why :func:`newest_checkpoint` picks by the step recorded *inside*
the files rather than by name.

The callback that writes 2. and 3. is
:class:`~normzoo.run.callbacks.checkpoints.RollingCheckpoints`, with the run's other Lightning
callbacks; this module keeps the files' names and steps, which the export and the sweep read
without Lightning.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from normzoo.io.atomic import fsync_directory, temporary_path

STEP_FILE = re.compile(r"^step-(\d+)\.ckpt$")
# Among checkpoints of one step, the one written last holds every callback's final state.
_PREFERENCE = ("last", "step", "best")


def _rank(path: Path) -> int:
    stem = path.name.split("-")[0].removesuffix(".ckpt")
    return len(_PREFERENCE) - _PREFERENCE.index(stem) if stem in _PREFERENCE else 0


def link_last(source: Path, last: Path) -> bool:
    """Make ``last`` a hard link to the complete checkpoint ``source``, atomically.

    The link is made under a temporary name and renamed over ``last``, so ``last`` is always
    either the previous complete checkpoint or the new one. Returns False where the file system
    has no hard links (the caller then writes ``last`` itself).
    """
    tmp = temporary_path(last)
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        return False
    os.replace(tmp, last)
    fsync_directory(last.parent)
    return True


def step_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """The periodic ``step-N.ckpt`` of a run, as (N, path), oldest first."""
    found = []
    for path in directory.glob("step-*.ckpt"):
        match = STEP_FILE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


@dataclass(frozen=True)
class Candidate:
    """A checkpoint on disk and the training step recorded inside it."""

    path: Path
    step: int


def checkpoint_step(path: Path) -> int | None:
    """The ``global_step`` inside a checkpoint, or None if it cannot be read.

    Memory-mapped, so only the small pickled header is read, however large the weights.
    Sharded (FSDP) checkpoints are folders with their metadata in ``meta.pt``.
    """
    import torch

    target = path / "meta.pt" if path.is_dir() else path
    try:
        saved = torch.load(target, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return None
    step = saved.get("global_step") if isinstance(saved, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def newest_checkpoint(directory: Path, skipped: list[Path] | None = None) -> Candidate | None:
    """The complete checkpoint of the latest step in ``directory``, whatever its name.

    Half-written temporaries are hidden files and never considered; a file that cannot be read
    is skipped (and added to ``skipped``, for the caller to report to its user), so one
    damaged file costs one interval, not the run.
    Among checkpoints of the same step, ``last`` beats ``step-`` beats ``best-``.
    """
    if not directory.is_dir():
        return None
    found = []
    for path in directory.glob("*.ckpt"):
        if path.name.startswith("."):
            continue
        step = checkpoint_step(path)
        if step is None:
            if skipped is not None:
                skipped.append(path)
            continue
        found.append(Candidate(path, step))
    if not found:
        return None
    return max(found, key=lambda c: (c.step, _rank(c.path), c.path.name))
