"""One training run from a recipe, in order: the run directory and its lock, a resume's
checkpoint, the Trainer, the data, the task, ``fit``, the final test and ``summary.json``.

Each step's code is in its own module under :mod:`normzoo.run`; this module only runs them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from normzoo.atomic import atomic_write_text
from normzoo.preemption import Preempted
from normzoo.recipe import Recipe
from normzoo.run.console import header, quiet_libraries
from normzoo.run.directory import (
    prepare_run_dir,
    refuse_existing_run,
    run_directory,
    run_directory_override,
)
from normzoo.run.final_test import test_language_model, test_translation
from normzoo.run.history import merge_history, read_metrics, trim_history, write_metrics
from normzoo.run.resume import prepare_resume, requeued, resume_checkpoint
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
    recipe: Recipe, recipe_path: str | Path, *, force: bool = False, resume: str | None = None
) -> dict[str, Any] | None:
    """Train ``recipe`` and return the summary (also written to ``summary.json``).

    Under several processes only rank 0 creates and writes the run directory and returns the
    summary; the other ranks return None. ``resume`` (``auto`` or a checkpoint path) continues
    a run in its own directory: model, optimizer, schedule and step count. bf16 on a CPU
    without bf16 instructions trains in float32 (:mod:`normzoo.run.precision`).

    Rank 0 holds the run directory's lock throughout (:mod:`normzoo.runlock`): a second process
    on a live run is refused before it reads or deletes anything. A SLURM job requeued after
    pre-emption runs the same command again and resumes by itself, as Lightning's does.
    """
    from normzoo.run.precision import training_precision
    from normzoo.runlock import RunLock

    rank = global_rank()
    recipe = training_precision(recipe, announce=rank == 0)
    run_dir = run_directory(recipe, recipe_path)
    if rank > 0:
        return _run(recipe, recipe_path, run_dir, rank, force, requeued(run_dir, resume))
    lock = RunLock(run_dir).acquire()
    finished = False
    try:
        summary = _run(recipe, recipe_path, run_dir, rank, force, requeued(run_dir, resume))
        finished = True
        return summary
    except Preempted:
        finished = True  # its checkpoint stays
        raise
    finally:
        lock.release(remove_dir_if_empty=not finished)


def _run(recipe: Recipe, recipe_path: str | Path, run_dir: Path, rank: int, force: bool,
         resume: str | None) -> dict[str, Any] | None:
    import lightning as L

    from normzoo.data.tokenizer import Tokenizer
    from normzoo.tasks.datamodule import TextDataModule, show_progress

    started = time.perf_counter()
    ckpt_path = resume_checkpoint(run_dir, resume) if resume else None
    if rank == 0 and ckpt_path is None:
        refuse_existing_run(run_dir, force)  # at once, not after minutes of tokenizer training
    resumed_step, saved_tokenizer = 0, ""
    if ckpt_path is not None:
        resumed_step, saved_tokenizer = prepare_resume(ckpt_path, recipe, run_dir, resume,
                                                       rank)
        if rank == 0:
            import typer

            typer.echo(f"resuming from {ckpt_path} (step {resumed_step})", err=True)
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
    if recipe.task == "translation":
        task.valid_references = data.references["valid"]
    if rank == 0:
        import typer

        size = sum(p.numel() for p in task.model.parameters())
        budget = recipe.data.max_tokens * recipe.trainer.accumulate * trainer.world_size
        typer.echo(header(size, budget, recipe.trainer.max_steps, run_dir), err=True)

    metrics_file = run_dir / "logs" / "csv" / "metrics.csv"
    # Lightning's CSV logger starts metrics.csv afresh: the earlier rows wait in a file of their
    # own until the run ends, so that a second crash loses none of them either.
    earlier = metrics_file.with_name("metrics.before-resume.csv")
    history = []
    if ckpt_path is not None and rank == 0:
        history = trim_history(read_metrics(earlier) + read_metrics(metrics_file), resumed_step)
        if history:
            write_metrics(earlier, history)
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        try:
            with machine_failures(trainer):
                trainer.fit(task, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        except SIGTERMException:
            merge_history(metrics_file, earlier, history)
            raise _preempted(trainer, recipe_path, run_dir, started) from None
        merge_history(metrics_file, earlier, history)
        # ModelCheckpoint refreshes last.ckpt only at validation; make it the true final state.
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
        summary["total_wall_s"] = round(time.perf_counter() - started, 1)
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")
        return summary
    finally:
        close_loggers(trainer)


def _preempted(trainer, recipe_path: str | Path, run_dir: Path, started: float) -> Preempted:
    """What to say (and record in ``summary.json``) when a signal stopped the run."""
    import signal

    stop = next(cb for cb in trainer.callbacks if type(cb).__name__ == "StopOnSignal")
    name = signal.Signals(stop.agreed).name
    command = f"normzoo train {recipe_path} --resume auto"
    if run_directory_override(run_dir, recipe_path):
        command += f" run.dir={run_dir}"
    if trainer.is_global_zero:
        summary = {"status": "preempted", "signal": name, "recipe": str(recipe_path),
                   "run_dir": str(run_dir), "steps": trainer.global_step,
                   "checkpoint": stop.saved_path, "resume": command,
                   "train_wall_s": round(time.perf_counter() - started, 1)}
        if stop.requeue_note:
            summary["requeue"] = stop.requeue_note
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")
    note = f"; {stop.requeue_note}" if stop.requeue_note else ""
    return Preempted(f"stopped by {name} at step {trainer.global_step}: saved "
                     f"{stop.saved_path}{note}; continue with: {command}", stop.agreed)
