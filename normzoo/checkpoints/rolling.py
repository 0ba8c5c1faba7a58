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

A step's checkpoints are one unit: all written, or ``--resume auto`` writes the missing ones
before it resumes (:func:`complete_step`). A kill after 1. left ``best-<step>.ckpt`` alone:
resumed from it, the run never wrote that step's ``step-`` checkpoint (``export --average``
found one too few), and Lightning never deleted ``best-<step>.ckpt`` when a better one came,
as it keeps the checkpoint a run resumed from. Every checkpoint of one validation holds the
same state (they are written one after the other, with nothing run between), so the missing
ones are made from the newest one, as ``last.ckpt`` is made from ``step-<step>.ckpt``; the run
then resumes from ``last.ckpt``, as one that was not cut short.

The callback that writes 2. and 3. is
:class:`~normzoo.run.callbacks.checkpoints.RollingCheckpoints`, with the run's other Lightning
callbacks; this module keeps the files' names and steps, which the export and the sweep read
without Lightning.
"""

from __future__ import annotations

import os
import re
import shutil
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


def place_copy(source: Path, target: Path) -> None:
    """Make ``target`` the same checkpoint as the complete ``source``, atomically: a hard link
    (:func:`link_last`), or a copy where the file system has none; a sharded (folder) checkpoint
    is copied under a temporary name, then renamed into place."""
    if source.is_dir():
        tmp = temporary_path(target)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(tmp, target)
    elif not link_last(source, target):
        tmp = temporary_path(target)
        shutil.copyfile(source, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    fsync_directory(target.parent)


def prune_steps(directory: Path, step: int, keep: int) -> None:
    """Delete all but the newest ``keep`` ``step-`` checkpoints up to ``step``.

    Later ones belong to a dead run that ``--resume auto`` already discarded, or to a branch
    that ``--resume PATH`` keeps; neither is this run's to delete.
    """
    mine = [path for s, path in step_checkpoints(directory) if s <= step]
    for path in mine[: max(len(mine) - keep, 0)]:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


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


def complete_step(directory: Path, newest: Candidate, keep: int) -> tuple[Path, list[str]]:
    """Write the checkpoints of ``newest``'s step that a killed process did not (the module's
    docstring): ``step-<step>.ckpt`` (when ``keep`` of them are kept) and ``last.ckpt``, made
    from ``newest``, and the ``step-`` checkpoints beyond ``keep`` deleted, as the validation
    would have. Returns the checkpoint to resume from (``last.ckpt`` once complete) and the
    names of the files written.

    ``newest`` is the run's newest complete checkpoint (:func:`newest_checkpoint`): when it is
    ``last.ckpt`` the step is whole (or its state was saved alone, as after ``fit`` or at a stop
    signal) and nothing is written.
    """
    last = directory / "last.ckpt"
    if newest.path.name == last.name:
        return newest.path, []
    written, source = [], newest.path
    if keep:
        periodic = directory / f"step-{newest.step}.ckpt"
        if not periodic.exists():
            place_copy(source, periodic)
            written.append(periodic.name)
        source = periodic
    place_copy(source, last)
    written.append(last.name)
    if keep:
        prune_steps(directory, newest.step, keep)
    return last, written
