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
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def rolling_checkpoints(dirpath: Path, keep: int) -> Any:
    """The callback that writes ``step-N.ckpt`` and ``last.ckpt`` at every validation."""
    from lightning.pytorch.callbacks import Checkpoint
    from lightning.pytorch.trainer.states import TrainerFn

    class RollingCheckpoints(Checkpoint):
        """``step-N.ckpt`` (newest ``keep`` kept) then ``last.ckpt`` after every validation.

        A :class:`~lightning.pytorch.callbacks.Checkpoint` so that Lightning runs it after the
        other callbacks and after the best-checkpoint ``ModelCheckpoint`` listed before it:
        ``last.ckpt`` is the final write of a validation and holds their final state.
        """

        def __init__(self) -> None:
            self.dirpath, self.keep = Path(dirpath), keep
            self.saved_step = -1

        def on_validation_end(self, trainer, pl_module) -> None:
            if (trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING
                    or trainer.global_step == self.saved_step or trainer.global_step == 0):
                return
            self.save(trainer)

        def save(self, trainer) -> Path:
            """Write this step's checkpoints; return the path of ``last.ckpt``."""
            step = trainer.global_step
            last = self.dirpath / "last.ckpt"
            if self.keep:
                path = self.dirpath / f"step-{step}.ckpt"
                trainer.save_checkpoint(path, weights_only=False)
                linked = False
                if trainer.is_global_zero and path.is_file():
                    linked = link_last(path, last)
                linked = trainer.strategy.broadcast(linked)
                if not linked:  # a sharded (folder) checkpoint, or no hard links here
                    trainer.save_checkpoint(last, weights_only=False)
                if trainer.is_global_zero:
                    self.prune(step)
            else:
                trainer.save_checkpoint(last, weights_only=False)
            trainer.strategy.barrier("rolling_checkpoints")
            self.saved_step = step
            return last

        def prune(self, step: int) -> None:
            """Delete all but the newest ``keep`` ``step-`` checkpoints up to ``step``.

            Later ones belong to a dead run that ``--resume auto`` already discarded, or to a
            branch that ``--resume PATH`` keeps; neither is this run's to delete.
            """
            mine = [path for s, path in step_checkpoints(self.dirpath) if s <= step]
            for path in mine[: max(len(mine) - self.keep, 0)]:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)

    return RollingCheckpoints()


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
