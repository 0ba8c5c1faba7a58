"""One training run from a recipe, in order: the run directory and its lock, a resume's
checkpoint, the Trainer, the data, the task, ``fit``, the final test and ``summary.json``.

Each step's code is in its own module under :mod:`normzoo.run`; this module only runs them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from normzoo.io.atomic import atomic_write_text
from normzoo.recipe import Recipe
from normzoo.recipe.paths import resolve_paths
from normzoo.run.console import header, quiet_libraries
from normzoo.run.directory import (
    prepare_run_dir,
    refuse_existing_run,
    run_directory,
)
from normzoo.run.final_test import test_language_model, test_translation
from normzoo.run.hardware import describe
from normzoo.run.history import resume_history
from normzoo.run.init_weights import initial_weights
from normzoo.run.preemption import Preempted
from normzoo.run.resume import (
    prepare_resume,
    refuse_missing_run,
    requeued,
    resume_checkpoint,
    resume_command,
)
from normzoo.run.trainer import (
    build_loggers,
    build_trainer,
    close_loggers,
    global_rank,
    machine_failures,
    stop_reason,
)
from normzoo.tasks import task_class


def run(
    recipe: Recipe, recipe_path: str | Path, *, force: bool = False, resume: str | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any] | None:
    """Train ``recipe`` and return the summary (also written to ``summary.json``).

    Under several processes only rank 0 creates and writes the run directory and returns the
    summary; the other ranks return None. ``resume`` (``auto`` or a checkpoint path) continues
    a run in its own directory: model, optimizer, schedule and step count. bf16 on a CPU
    without bf16 instructions trains in float32 (:mod:`normzoo.run.precision`). Its paths
    are stored resolved (:mod:`normzoo.recipe.paths`); ``overrides`` (the command's) are
    repeated in the command that resumes a pre-empted run.

    Rank 0 holds the run directory's lock throughout (:mod:`normzoo.run.lock`): a second process
    on a live run is refused before it reads or deletes anything. A SLURM job requeued after
    pre-emption runs the same command again and resumes by itself, as Lightning's does.
    """
    from normzoo.run.lock import RunLock
    from normzoo.run.precision import training_precision

    rank = global_rank()
    recipe = resolve_paths(training_precision(recipe, announce=rank == 0))
    run_dir = run_directory(recipe, recipe_path)
    if rank > 0:
        return _run(recipe, recipe_path, run_dir, rank, force, requeued(run_dir, resume),
                    overrides)
    refuse_missing_run(run_dir, resume, recipe_path)  # before the lock creates it
    lock = RunLock(run_dir).acquire()
    finished = False
    try:
        summary = _run(recipe, recipe_path, run_dir, rank, force, requeued(run_dir, resume),
                       overrides)
        finished = True
        return summary
    except Preempted:
        finished = True  # its checkpoint stays
        raise
    finally:
        lock.release(remove_dir_if_empty=not finished)


def _run(recipe: Recipe, recipe_path: str | Path, run_dir: Path, rank: int, force: bool,
         resume: str | None, overrides: list[str] | None = None) -> dict[str, Any] | None:
    import lightning as L

    from normzoo.data.tokenizer import Tokenizer
    from normzoo.tasks.datamodule import TextDataModule, show_progress

    started = time.perf_counter()
    ckpt_path = resume_checkpoint(run_dir, resume, announce=rank == 0) if resume else None
    if rank == 0 and ckpt_path is None:
        refuse_existing_run(run_dir, force)  # at once, not after minutes of tokenizer training
    resumed_step, saved_tokenizer = 0, ""
    if ckpt_path is not None:
        resumed_step, saved_tokenizer = prepare_resume(ckpt_path, recipe, run_dir, resume,
                                                       rank)
        if rank == 0:
            import typer

            typer.echo(f"resuming from {ckpt_path} (step {resumed_step})", err=True)
    # init.from: read and checked against the model now, before anything is written (or
    # --force clears the run directory it may be in); the run trains on its tokenizer.
    init = initial_weights(recipe) if ckpt_path is None else None
    if init is not None:
        saved_tokenizer = init.tokenizer
    # The Trainer and the data first: settings the hardware cannot run, and data that is
    # missing or broken, fail before anything is written to the run directory.
    quiet_libraries()
    trainer = build_trainer(recipe, run_dir)
    saved = run_dir / "tokenizer.json"
    tokenizer = None  # the recipe's, from the prepared cache
    if saved_tokenizer:
        tokenizer = Tokenizer.from_str(saved_tokenizer)  # the one the weights were trained with
    elif saved.is_file() and rank > 0:
        tokenizer = Tokenizer.load(saved)  # the one rank 0 used
    data = TextDataModule(recipe, tokenizer, show_progress=rank == 0 and show_progress())
    # Prepared (by each node's first process) and mapped now, so that broken data fails
    # before the run directory exists.
    data.setup("fit")
    tokenizer = data.tokenizer
    if rank == 0 and ckpt_path is None:
        prepare_run_dir(recipe, recipe_path, force)
    # W&B and MLflow write as they are created: only now that the run directory is ours.
    trainer.loggers = build_loggers(recipe, run_dir)
    if rank == 0:
        atomic_write_text(run_dir / "recipe.yaml", recipe.to_yaml(), "recipe")
        atomic_write_text(saved, tokenizer.to_str(), "tokenizer")
    L.seed_everything(recipe.seed, workers=True, verbose=False)
    task = task_class(recipe.task)(recipe, tokenizer.vocab_size, tokenizer.to_str())
    if init is not None:
        init.load_into(task.model)
        if rank == 0:
            import typer

            typer.echo(init.announcement(), err=True)
    if recipe.task == "translation":
        task.valid_references = data.references["valid"]
    if rank == 0:
        import typer

        size = sum(p.numel() for p in task.model.parameters())
        budget = recipe.data.max_tokens * recipe.trainer.accumulate * trainer.world_size
        typer.echo(header(size, budget, recipe.trainer.max_steps, run_dir), err=True)

    if ckpt_path is not None and rank == 0:  # before the CSV logger writes: it appends to it
        resume_history(run_dir / "logs" / "csv" / "metrics.csv", resumed_step)
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from normzoo.diagnostics.callbacks import DivergenceError

    try:
        try:
            with machine_failures(trainer):
                trainer.fit(task, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        except SIGTERMException:
            raise _preempted(trainer, recipe_path, run_dir, started, overrides) from None
        except DivergenceError as error:
            if trainer.is_global_zero:
                _record_divergence(error, recipe_path, run_dir, started,
                                   trainer.strategy.root_device.type)
            raise
        # last.ckpt is written at each validation, and a run that reaches max_steps validates
        # there (final_validation_callback); one stopped otherwise (max_epochs) gets its final
        # state here. Only then: a state saved after fit ended resumes one logged step off.
        rolling = next(cb for cb in trainer.callbacks if type(cb).__name__ == "RollingCheckpoints")
        if rolling.saved_step != trainer.global_step:
            trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
        if recipe.task != "translation":  # validate/test are collective: every rank takes part
            lm_validation, lm_test = test_language_model(recipe, task, data, trainer)
        if not trainer.is_global_zero:
            return None
        summary: dict[str, Any] = {
            "status": "completed",
            "recipe": str(recipe_path),
            "run_dir": str(run_dir),
            "steps": trainer.global_step,
            "stopped": stop_reason(trainer, recipe),
            "train_wall_s": round(time.perf_counter() - started, 1),
            "best_checkpoint": trainer.checkpoint_callback.best_model_path or None,
            "validation": lm_validation if recipe.task != "translation" else {
                k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")},
        }
        summary["test"] = (test_translation(recipe, task, data, trainer)
                           if recipe.task == "translation" else lm_test)
        if init is not None:
            summary["init"] = init.record()
        summary["machine"] = describe(trainer.strategy.root_device.type)
        summary["total_wall_s"] = round(time.perf_counter() - started, 1)
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")
        return summary
    finally:
        close_loggers(trainer)


def _record_divergence(error: Exception, recipe_path: str | Path, run_dir: Path,
                       started: float, device_type: str | None = None) -> None:
    """``summary.json`` of a run stopped by :class:`DivergenceError`: the step and the reason,
    so that the run directory says how the run ended, as it does for every other ending."""
    step = getattr(error, "step", None)
    summary = {"status": "diverged", "recipe": str(recipe_path), "run_dir": str(run_dir),
               "steps": step, "diverged_at_step": step, "reason": str(error),
               "last_good_checkpoint": getattr(error, "last_checkpoint", None),
               "train_wall_s": round(time.perf_counter() - started, 1),
               "machine": describe(device_type)}
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")


def _preempted(trainer, recipe_path: str | Path, run_dir: Path, started: float,
               overrides: list[str] | None = None) -> Preempted:
    """What to say (and record in ``summary.json``) when a signal stopped the run."""
    import signal

    stop = next(cb for cb in trainer.callbacks if type(cb).__name__ == "StopOnSignal")
    name = signal.Signals(stop.agreed).name
    command = resume_command(recipe_path, run_dir, overrides or [])
    if trainer.is_global_zero:
        summary = {"status": "preempted", "signal": name, "recipe": str(recipe_path),
                   "run_dir": str(run_dir), "steps": trainer.global_step,
                   "checkpoint": stop.saved_path, "resume": command,
                   "train_wall_s": round(time.perf_counter() - started, 1),
                   "machine": describe(trainer.strategy.root_device.type)}
        if stop.requeue_note:
            summary["requeue"] = stop.requeue_note
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")
    note = f"; {stop.requeue_note}" if stop.requeue_note else ""
    return Preempted(f"stopped by {name} at step {trainer.global_step}: saved "
                     f"{stop.saved_path}{note}; continue with: {command}", stop.agreed)
