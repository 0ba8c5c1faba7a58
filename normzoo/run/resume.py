"""Resuming a run: which checkpoint, whether it belongs to this recipe, and tidying what a
killed process left behind.

What a resume may change (:data:`RESUMABLE`). Each change is printed (``resume: KEY OLD -> NEW``);
any other difference from the recipe the run was trained with refuses the resume, listed with
its old and new value (the differences are found by :mod:`normzoo.run.recipe_changes`).

A resume continues *the same experiment* where it stopped, so what may change is what does
not decide the result of a training step:

* how long it runs: ``trainer.max_steps`` (not below the step resumed from; under a cosine,
  linear or wsd schedule a new length re-stretches or moves the decay from here on, which is
  said; a wsd run resumed during its stable phase with a longer length is the schedule's
  point: its decay moves to the new end), ``max_epochs``,
  ``max_time``;
* how often it validates, checkpoints and logs, and where to: ``trainer.val_every_steps``,
  ``log_every_steps``, ``progress_bar``, ``loggers``, ``keep_checkpoints``,
  ``slurm_requeue``, ``diagnostics.every_steps`` and the whole ``run`` section (run
  directory, tracker names);
* where its inputs are now: ``data.dir`` (a moved corpus; the run keeps the tokenizer of
  its checkpoint), ``data.tokenizer.path`` (a moved tokenizer file; likewise);
* how the same computation runs: ``model.attention_impl``, ``attention_backend``
  (:data:`COMPUTE_ONLY`),
  ``trainer.compile``, ``compile_scope``, ``trainer.accelerator``, ``data.num_workers``;
* how the final test is decoded: ``eval.beam``, ``lenpen``, ``max_len_a``, ``max_len_b``,
  ``valid_bleu_limit`` (:data:`DECODING`) and ``average_last``; but not while the run
  monitors validation BLEU (translation with ``eval.valid_bleu``), whose values they change
  mid-run, so that the best checkpoint would be picked among differently decoded scores.

Refused, among others: the optimizer and schedule (``optim.*``: a new learning rate is a new
experiment), the model and task, the data's content and batching (``data.*`` but its folder
and workers), ``seed`` (the generators are restored from the checkpoint: a new seed would be
silently ignored), ``trainer.precision`` (the numeric format is part of a stability result;
fp16's loss scale exists only in a 16-mixed checkpoint), ``trainer.accumulate``,
``devices``, ``num_nodes`` and ``strategy`` (the global batch, and FSDP's sharded
checkpoints), ``trainer.patience`` and ``min_delta`` (the stopping rule is part of the
protocol, and Lightning restores the old patience from the checkpoint anyway),
``trainer.save_top_k``, ``eval.valid_bleu`` (the monitored metric), ``diagnostics.guard`` and
``max_loss`` (what counts as diverged), and ``init`` (a resume takes its weights from its own
checkpoint). To continue the weights under such changes, start a new run from them:
``init.from=CHECKPOINT`` (step 0, a fresh optimizer and schedule).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from normzoo.checkpoints.reading import checkpoint_parts, checkpoint_tokenizer, read_checkpoint
from normzoo.checkpoints.rolling import Candidate, complete_step, newest_checkpoint
from normzoo.contract import task_of
from normzoo.errors import NormzooError
from normzoo.io.atomic import TMP_MARK, remove_stale_temporaries
from normzoo.recipe import Recipe
from normzoo.recipe.optim import ENDS_AT_MAX_STEPS
from normzoo.run.directory import RunDirectoryExists, run_directory_override, run_summary
from normzoo.run.preemption import slurm_restarted
from normzoo.run.recipe_changes import Change, recipe_changes, shown


def resume_checkpoint(run_dir: Path, resume: str, announce: bool = True) -> Path:
    """``auto`` -> the run's newest complete checkpoint, whatever its name (``last.ckpt`` may
    be older, if the process died between two writes); otherwise the path given.

    A checkpoint that cannot be read is skipped for the previous one, and (``announce``) a
    ``warning:`` line says which and why."""
    if resume != "auto":
        path = Path(resume).expanduser()
        if not path.exists():
            raise RunDirectoryExists(f"cannot resume: no checkpoint at {path}")
        return path
    directory = run_dir / "checkpoints"
    skipped: list[Path] = []
    newest = newest_checkpoint(directory, skipped)
    if announce:
        instead = f"; resuming from {newest.path} (step {newest.step}) instead" if newest else ""
        for path in skipped:
            typer.echo(f"warning: skipping {path}: it cannot be read as a checkpoint (cut short "
                       f"or damaged){instead}", err=True)
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
COMPUTE_ONLY = frozenset({"attention_impl", "attention_backend"})

# What a resume may change, and why: the module's docstring.
DECODING = frozenset({"eval.beam", "eval.lenpen", "eval.max_len_a", "eval.max_len_b",
                      "eval.valid_bleu_limit"})
RESUMABLE = frozenset({
    "trainer.max_steps", "trainer.max_epochs", "trainer.max_time",
    "trainer.val_every_steps", "trainer.log_every_steps", "trainer.progress_bar",
    "trainer.loggers", "trainer.keep_checkpoints", "trainer.slurm_requeue",
    "diagnostics.every_steps", "data.dir", "data.tokenizer.path", "data.num_workers",
    "trainer.compile", "trainer.compile_scope", "trainer.accelerator", "eval.average_last",
    *(f"model.{key}" for key in COMPUTE_ONLY), *DECODING,
})
RESUMABLE_SECTIONS = ("run.",)


class ResumeError(NormzooError):
    """The checkpoint to resume from does not belong to this recipe (its model or task), or the
    recipe changes what a resume cannot (:data:`RESUMABLE`)."""


def _refusal(change: Change, theirs: dict[str, Any], step: int) -> str | None:
    """Why ``change`` cannot be made on resume, or None if it can."""
    if change.key == "trainer.max_steps" and isinstance(change.new, int) and change.new < step:
        return f"below step {step}, where the checkpoint was saved: nothing left to train"
    if change.key in DECODING and task_of(theirs).decodes_in_validation(theirs):
        return "it decodes validation BLEU, the metric this run picks its best checkpoint by"
    if change.key in RESUMABLE or change.key.startswith(RESUMABLE_SECTIONS):
        return None
    if change.key.startswith("init."):
        return ("--resume continues the run from its own checkpoint and init.from starts a new "
                "one: drop it to resume, or start a new run with another run.dir or --force")
    return ""


def check_resumable(saved: dict[str, Any], recipe: Recipe, path: Path) -> list[Change]:
    """The settings ``recipe`` changes against the recipe of the checkpoint to resume from
    (what the run was trained with, as in its ``recipe.yaml``), when each may change on
    resume (:data:`RESUMABLE`); else :class:`ResumeError` listing every refused one, old and
    new value.

    Loading another model anyway would fail deep inside ``load_state_dict`` with a shape
    mismatch, or worse, succeed and silently continue a different experiment; a new learning
    rate or schedule would silently make the run another one.
    """
    meta = saved.get("normzoo") if isinstance(saved, dict) else None
    theirs = meta.get("recipe") if isinstance(meta, dict) else None
    if (not isinstance(theirs, dict) or "loops" not in saved
            or not isinstance(saved.get("global_step"), int)):
        raise ResumeError(f"{path} is not a normzoo training checkpoint (no recipe or loop "
                          "state in it); resume from a run's checkpoints/*.ckpt")
    if not isinstance(theirs.get("model"), dict):
        raise ResumeError(f"{path} is damaged: its recipe has no model section")
    theirs, changes = recipe_changes(theirs, recipe)
    step = saved["global_step"]
    accepted: list[Change] = []
    refused: list[str] = []
    for change in changes:
        key = change.key
        why = _refusal(change, theirs, step)
        if why is None:
            schedule = theirs["optim"].get("schedule")
            if key == "trainer.max_steps" and schedule in ENDS_AT_MAX_STEPS:
                change = Change(key, change.old, change.new, f"the {schedule} decay now ends at "
                                f"step {change.new}: the learning rate from here on follows "
                                "the new length")
            accepted.append(change)
        else:
            refused.append(f"{key}: checkpoint {shown(change.old)}, recipe "
                           f"{shown(change.new)}" + (f" ({why})" if why else ""))
    if refused:
        lines = "\n".join(f"  - {line}" for line in refused)
        model = any(line.startswith(("model.", "task:")) for line in refused)
        init = any(line.startswith("init.") for line in refused)
        # A new width, family or task changes every matrix's shape: init.from would load
        # nothing (init_weights refuses that), so it is not offered.
        reshaped = any(line.startswith(("model.d_model:", "model.family:", "task:"))
                       for line in refused)
        further = "" if init else (
            "; its weights cannot seed the new model (every matrix changes shape): train a new "
            "run with another run.dir" if reshaped else
            "; to go on from its weights under the new settings, start a new run from them "
            f"(step 0, a fresh optimizer and schedule): init.from={path}"
            + (" init.strict=false" if model else "") + " with another run.dir")
        raise ResumeError(
            f"cannot resume from {path}: the recipe differs from the one it was trained with "
            f"(its run directory's recipe.yaml) in settings a resume cannot change:\n{lines}\n"
            "A resume continues the same experiment: only its length, validation and logging "
            "cadence, loggers, data folder, compute settings and test decoding may change. "
            f"Resume with the recipe it was trained with{further}")
    return accepted


STEP_FILE = re.compile(r"^(?:best|step)-(\d+)(?:-v\d+)?\.ckpt$")


def discard_abandoned_work(checkpoint_dir: Path, resumed_step: int) -> None:
    """Before resuming at ``resumed_step``: delete what a killed process left that the resumed
    run will redo: half-written temporary files (and folders: a sharded checkpoint's copy,
    :func:`~normzoo.checkpoints.rolling.place_copy`) and checkpoints of later steps (the
    resumed run writes its own; left in place they would collide with them or pose as its
    results)."""
    if checkpoint_dir.is_dir():
        for path in checkpoint_dir.glob(f".*{TMP_MARK}*"):
            if path.is_dir():
                shutil.rmtree(path)
    remove_stale_temporaries(checkpoint_dir)
    for path in checkpoint_dir.glob("*.ckpt"):
        match = STEP_FILE.match(path.name)
        if match and int(match.group(1)) > resumed_step:
            if path.is_dir():  # an FSDP sharded checkpoint
                shutil.rmtree(path)
            else:
                path.unlink()


def prepare_resume(ckpt_path: Path, recipe: Recipe, run_dir: Path, resume: str | None,
                   rank: int) -> tuple[int, str, dict[str, Any]]:
    """Check the checkpoint to resume from and tidy the run directory; return its step, the
    tokenizer it was trained with and its recipe's task options.

    ``--resume auto`` is crash recovery: checkpoints after the resumed step are discarded as the
    run redoes them. With an explicit path they are left alone (the user may be branching).
    """
    # Weights only: a crafted file runs no code. FSDP's sharded checkpoints are folders whose
    # metadata is in meta.pt.
    sharded = ckpt_path.is_dir()
    if sharded and not (ckpt_path / "meta.pt").is_file():
        raise NormzooError(f"--resume {ckpt_path} is a folder but not a sharded (FSDP) "
                           "checkpoint (no meta.pt in it): give a .ckpt file, or --resume auto "
                           "with the run's recipe to continue from its checkpoints/last.ckpt")
    saved = read_checkpoint(ckpt_path / "meta.pt" if sharded else ckpt_path)
    if not sharded:
        checkpoint_parts(saved, str(ckpt_path))  # a clean error for a damaged file
    changes = check_resumable(saved, recipe, ckpt_path)
    tokenizer = checkpoint_tokenizer(saved["normzoo"].get("tokenizer"), str(ckpt_path))
    step = saved["global_step"]
    if rank == 0:
        for change in changes:
            typer.echo(f"resume: {change}", err=True)
        if resume == "auto":
            discard_abandoned_work(run_dir / "checkpoints", step)
        else:
            remove_stale_temporaries(run_dir / "checkpoints")
    options = saved["normzoo"]["recipe"].get("task_options")
    return step, tokenizer.to_str(), options if isinstance(options, dict) else {}


def requeued(run_dir: Path, resume: str | None) -> str | None:
    """``auto`` for a SLURM job restarted after a requeue whose run has a checkpoint."""
    if resume is None and slurm_restarted() and newest_checkpoint(run_dir / "checkpoints"):
        typer.echo(f"SLURM job restarted (SLURM_RESTART_COUNT="
                   f"{os.environ.get('SLURM_RESTART_COUNT')}): resuming {run_dir}", err=True)
        return "auto"
    return resume


@dataclass(frozen=True)
class StartingPoint:
    """The checkpoint a resumed run starts from, checked against its recipe: its step, the
    tokenizer it was trained with and its task options."""

    checkpoint: Path
    step: int
    tokenizer: str
    task_options: dict[str, Any]  # the checkpoint's run's, resolved from its data


def starting_point(run_dir: Path, resume: str | None, recipe: Recipe,
                   rank: int) -> StartingPoint | None:
    """Where a run starts: None for a new run; else the checkpoint ``resume`` names
    (:func:`resume_checkpoint`; ``auto`` also for a SLURM job requeued after pre-emption, which
    runs the same command again), checked against ``recipe`` before anything is written, and
    the run directory tidied (:func:`prepare_resume`); for ``auto``, the checkpoints of its
    step that a kill cut short are written first
    (:func:`~normzoo.checkpoints.rolling.complete_step`) and it starts from ``last.ckpt``."""
    resume = requeued(run_dir, resume)
    if not resume:
        return None
    path = resume_checkpoint(run_dir, resume, announce=rank == 0)
    step, tokenizer, options = prepare_resume(path, recipe, run_dir, resume, rank)
    if resume == "auto" and rank == 0:
        # A kill between a validation's checkpoints: the step's others are made from the
        # newest, and the run resumes from its last.ckpt (normzoo.checkpoints.rolling). Other
        # ranks load the newest itself: the same state.
        found = path
        path, written = complete_step(run_dir / "checkpoints", Candidate(path, step),
                                      recipe.trainer.keep_checkpoints)
        if written:
            typer.echo(f"resume: step {step}'s checkpoints were cut short after {found.name}: "
                       f"wrote {' and '.join(written)} from it", err=True)
    if rank == 0:
        typer.echo(f"resuming from {path} (step {step})", err=True)
    return StartingPoint(path, step, tokenizer, options)


def resume_command(recipe_path: str | Path, run_dir: Path, overrides: list[str]) -> str:
    """The command that continues a stopped run: the one it was started with (its overrides
    repeated, quoted for the shell) with ``--resume auto``, and the run directory when it is not
    the recipe's default and no override names it."""
    words = ["normzoo", "train", str(recipe_path), "--resume", "auto", *overrides]
    if run_directory_override(run_dir, recipe_path) and not any(
            override.partition("=")[0].strip() == "run.dir" for override in overrides):
        words.append(f"run.dir={run_dir}")
    return shlex.join(words)


def completed(run_dir: Path, step: int, recipe: Recipe) -> dict | None:
    """The summary of a run that ``--resume auto`` finds complete: its summary says so and its
    checkpoint is at ``trainer.max_steps``. Resuming it ran the final validation and test again
    and rewrote their rows a step early (the fault pass: two rows at step 19, none at 20): now
    nothing is written, and the run says so (raise ``trainer.max_steps`` to train on)."""
    summary, limit = run_summary(run_dir), recipe.trainer.max_steps
    if not (summary.get("status") == "completed" and limit and step >= limit):
        return None
    typer.echo(f"{run_dir} is complete (step {step}, trainer.max_steps={limit}): nothing to "
               "resume; raise trainer.max_steps to train on", err=True)
    return summary
