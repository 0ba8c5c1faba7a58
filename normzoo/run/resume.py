"""Resuming a run: which checkpoint, whether it belongs to this recipe, and tidying what a
killed process left behind.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from normzoo.atomic import remove_stale_temporaries
from normzoo.errors import NormzooError
from normzoo.models.config import ModelConfig
from normzoo.recipe import Recipe
from normzoo.run.directory import RunDirectoryExists


def resume_checkpoint(run_dir: Path, resume: str) -> Path:
    """``auto`` -> the run's newest complete checkpoint, whatever its name (``last.ckpt`` may
    be older, if the process died between two writes); otherwise the path given."""
    from normzoo.checkpointing import newest_checkpoint

    if resume != "auto":
        path = Path(resume)
        if not path.exists():
            raise RunDirectoryExists(f"cannot resume: no checkpoint at {path}")
        return path
    directory = run_dir / "checkpoints"
    newest = newest_checkpoint(directory)
    if newest is None:
        raise RunDirectoryExists(
            f"cannot resume {run_dir}: no complete checkpoint in {directory} (the run stopped "
            "before its first checkpoint, "
            "which is written at the first validation, every trainer.val_every_steps steps); "
            "start it again with --force"
        )
    return newest.path


# Model keys that choose how the same function is computed, not which function or weights:
# a run may resume with another value (e.g. the other attention kernel).
COMPUTE_ONLY = frozenset({"attention_impl"})


class ResumeError(NormzooError):
    """The checkpoint to resume from does not belong to this recipe's model or task."""


def check_resumable(saved: dict[str, Any], recipe: Recipe, path: Path) -> None:
    """Refuse a checkpoint whose model or task differs from ``recipe``'s, naming each difference.

    Loading it anyway would fail deep inside ``load_state_dict`` with a shape mismatch, or worse,
    succeed and silently continue a different experiment.
    """
    meta = saved.get("normzoo") if isinstance(saved, dict) else None
    theirs = meta.get("recipe") if isinstance(meta, dict) else None
    if (not isinstance(theirs, dict) or "loops" not in saved
            or not isinstance(saved.get("global_step"), int)):
        raise ResumeError(f"{path} is not a normzoo training checkpoint (no recipe or loop "
                          "state in it); resume from a run's checkpoints/*.ckpt")
    ours = recipe.to_dict()
    differences = [f"task: checkpoint {theirs.get('task')!r}, recipe {ours['task']!r}"] \
        if theirs.get("task") != ours["task"] else []
    their_model, our_model = theirs.get("model"), ours["model"]
    if not isinstance(their_model, dict):
        raise ResumeError(f"{path} is damaged: its recipe has no model section")
    # Compared with defaults filled in: a key added to normzoo since the checkpoint was written
    # is not a difference when the checkpoint's model had the default.
    their_model = {**ModelConfig().model_dump(mode="json"), **their_model}
    for key in sorted(set(their_model) | set(our_model)):
        if key not in COMPUTE_ONLY and their_model.get(key) != our_model.get(key):
            differences.append(f"model.{key}: checkpoint {their_model.get(key)!r}, "
                               f"recipe {our_model.get(key)!r}")
    if differences:
        lines = "\n".join(f"  - {d}" for d in differences)
        raise ResumeError(f"cannot resume from {path}: it was trained with another model:\n"
                          f"{lines}\nresume with the recipe it was trained with "
                          "(its run directory's recipe.yaml)")


STEP_FILE = re.compile(r"^(?:best|step)-(\d+)(?:-v\d+)?\.ckpt$")


def discard_abandoned_work(checkpoint_dir: Path, resumed_step: int) -> None:
    """Before resuming at ``resumed_step``: delete what a killed process left that the resumed
    run will redo: half-written temporary files and checkpoints of later steps (the resumed run
    writes its own; left in place they would collide with them or pose as its results)."""
    remove_stale_temporaries(checkpoint_dir)
    for path in checkpoint_dir.glob("*.ckpt"):
        match = STEP_FILE.match(path.name)
        if match and int(match.group(1)) > resumed_step:
            if path.is_dir():  # an FSDP sharded checkpoint
                shutil.rmtree(path)
            else:
                path.unlink()


def prepare_resume(ckpt_path: Path, recipe: Recipe, run_dir: Path, resume: str | None,
                   rank: int) -> tuple[int, str]:
    """Check the checkpoint to resume from and tidy the run directory; return its step and the
    tokenizer it was trained with.

    ``--resume auto`` is crash recovery: checkpoints after the resumed step are discarded as the
    run redoes them. With an explicit path they are left alone (the user may be branching).
    """
    from normzoo.checkpoint_files import (
        checkpoint_parts,
        checkpoint_tokenizer,
        read_checkpoint,
    )

    # Weights only: a crafted file runs no code. FSDP's sharded checkpoints are folders whose
    # metadata is in meta.pt.
    sharded = ckpt_path.is_dir()
    saved = read_checkpoint(ckpt_path / "meta.pt" if sharded else ckpt_path)
    if not sharded:
        checkpoint_parts(saved, str(ckpt_path))  # a clean error for a damaged file
    check_resumable(saved, recipe, ckpt_path)
    tokenizer = checkpoint_tokenizer(saved["normzoo"].get("tokenizer"), str(ckpt_path))
    step = saved["global_step"]
    if rank == 0:
        if resume == "auto":
            discard_abandoned_work(run_dir / "checkpoints", step)
        else:
            remove_stale_temporaries(run_dir / "checkpoints")
    return step, tokenizer.to_str()


def requeued(run_dir: Path, resume: str | None) -> str | None:
    """``auto`` for a SLURM job restarted after a requeue whose run has a checkpoint."""
    from normzoo.checkpointing import newest_checkpoint
    from normzoo.preemption import slurm_restarted

    if resume is None and slurm_restarted() and newest_checkpoint(run_dir / "checkpoints"):
        import typer

        typer.echo(f"SLURM job restarted (SLURM_RESTART_COUNT="
                   f"{os.environ.get('SLURM_RESTART_COUNT')}): resuming {run_dir}", err=True)
        return "auto"
    return resume
