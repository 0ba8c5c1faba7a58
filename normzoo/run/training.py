"""One training run from a recipe, read top to bottom: :func:`run` and its :class:`TrainingRun`.

In the manner of torchtune's recipe classes, a run is one object whose methods are its stages:
:meth:`~TrainingRun.setup` (the run directory and its lock, a resume's checkpoint, the
Trainer, the data, the task), :meth:`~TrainingRun.fit`, :meth:`~TrainingRun.test` (the best
checkpoint on the test split) and :meth:`~TrainingRun.close`. The object holds the recipe, its
paths, the process's rank, the clock, the Trainer and its callbacks, the data and the task,
so no stage threads them through arguments to the next. Every ending (completed, stopped
early, pre-empted or interrupted by a signal, diverged, failed) writes ``summary.json``
through the one :meth:`~TrainingRun.write_summary`, so every summary starts alike, and is
recorded on the run itself (:mod:`normzoo.run.endings`, whose :class:`RunEndings` is the
part of :class:`TrainingRun` that keeps how it ended, and what a stop leaves).

Each stage's code is in its own module under :mod:`normzoo.run`; this module only runs them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L
import typer

from normzoo.contract import FinalTest, module_class, task_of
from normzoo.data.shapes import ShapeCount, batch_shapes_line
from normzoo.data.tokenizer import Tokenizer
from normzoo.recipe import Recipe
from normzoo.run.allocator import keep_freed_memory
from normzoo.run.allocator import requested as requested_malloc
from normzoo.run.console import header, quiet_libraries
from normzoo.run.directory import RunDirectory
from normzoo.run.endings import RunEndings
from normzoo.run.hardware import describe
from normzoo.run.history import (
    end_restored_fit,
    log_test_scores,
    metrics_path,
    resume_history,
    validation_of,
)
from normzoo.run.identity import run_identity
from normzoo.run.init_weights import initial_weights
from normzoo.run.inputs import for_training, unread_data_keys
from normzoo.run.kernels import kernel_line, kernel_record
from normzoo.run.machine import cpu_bf16_override, for_this_machine
from normzoo.run.recipe_changes import resolved_options
from normzoo.run.resume import completed, starting_point
from normzoo.run.trainer import (
    RunCallbacks,
    build_loggers,
    build_trainer,
    close_loggers,
    global_rank,
    stop_reason,
)
from normzoo.tasks.datamodule import TextDataModule, show_progress, training_data
from normzoo.tasks.testing import test_in_loops


def run(
    recipe: Recipe, recipe_path: str | Path, *, force: bool = False, resume: str | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any] | None:
    """Train ``recipe`` and return the summary (also written to ``summary.json``).

    Under several processes only rank 0 creates and writes the run directory and returns the
    summary; the other ranks return None. ``resume`` (``auto`` or a checkpoint path) continues
    a run in its own directory: model, optimizer, schedule and step count. Its inputs are
    checked to be there and its paths stored resolved (:mod:`normzoo.run.inputs`), a model
    this machine cannot hold is refused, and bf16 on a CPU without bf16 instructions trains in
    float32 (:mod:`normzoo.run.machine`); ``overrides`` (the command's) are repeated in the
    command that resumes a pre-empted run.

    Rank 0 holds the run directory's lock throughout
    (:class:`~normzoo.run.directory.RunDirectory`): a second process on a live run is refused
    before it reads or deletes anything. A SLURM job requeued after
    pre-emption runs the same command again and resumes by itself, as Lightning's does.
    Every stop signal is raised, one after the summary said completed too (a sweep stops
    there); ``normzoo train`` runs :meth:`TrainingRun.run` itself, to answer that one.
    """
    training = TrainingRun(recipe, recipe_path, force=force, resume=resume, overrides=overrides)
    return training.run()


class TrainingRun(RunEndings):
    """One run of ``normzoo train``: its stages in order, and the state they share; how it
    ended is kept by :class:`~normzoo.run.endings.RunEndings`."""

    def __init__(self, recipe: Recipe, recipe_path: str | Path, *, force: bool = False,
                 resume: str | None = None, overrides: list[str] | None = None) -> None:
        self.rank = global_rank()
        stored = for_training(recipe, recipe_path, resuming=resume is not None)
        self.recipe = for_this_machine(stored, announce=self.rank == 0)
        for line in unread_data_keys(self.recipe) if self.rank == 0 else []:
            typer.echo(f"warning: {line}", err=True)
        requested_malloc()  # NORMZOO_CPU_MALLOC mistyped: refused before anything starts
        cpu_bf16_override()  # and NORMZOO_CPU_BF16, whatever the precision
        self.recipe_path = recipe_path
        self.directory = RunDirectory(self.recipe, recipe_path, self.rank)  # locked in setup()
        self.run_dir = self.directory.path
        self.force, self.resume, self.overrides = force, resume, overrides or []
        self.started = self.trained = 0.0  # the clock at setup; where train_wall_s ends
        self.ckpt_path: Path | None = None  # the checkpoint a resume starts from
        self.resumed_step = 0  # and its step
        self.init = None  # init.from's weights (normzoo.run.init_weights), for a new run
        self.callbacks: RunCallbacks | None = None
        self.trainer: L.Trainer | None = None
        self.data: TextDataModule | None = None
        self.shapes: ShapeCount | None = None  # one epoch's training batches, for the summary
        self.task = task_of(self.recipe)  # the task's contract (Task): what it says
        self.module: Any = None  # its LightningModule, built in setup()
        self.complete: dict | None = None  # a completed run's summary, --resume auto

    def run(self, *, note_late_stops: bool = False) -> dict[str, Any] | None:
        """Every stage, in order, inside the run's :meth:`~RunEndings.ending`; the summary
        (rank 0), or a completed run's that ``--resume auto`` found. ``note_late_stops``:
        a stop signal once the summary said completed is kept in ``late_signal``, not
        raised."""
        with self.ending(note_late_stops=note_late_stops):
            self.setup()
            if self.complete is None:
                self.fit()
                self.write_summary("completed", **self.test())
        return self.summary if self.complete is None else self.complete

    def setup(self) -> None:
        """Everything before ``fit``, ordered so that what can fail fails before anything is
        written: the lock, the checkpoint to resume or the weights to start from, the Trainer
        (settings the hardware cannot run) and the data (missing or broken), and only then
        the run directory, its loggers, its recipe and tokenizer, and the task."""
        self.directory.claim(self.resume)
        self.started = time.perf_counter()
        start = starting_point(self.run_dir, self.resume, self.recipe, self.rank)
        if start is None:  # a new run: refused now, not after the tokenizer's minutes
            self.directory.refuse_existing(self.force)
            self.init = initial_weights(self.recipe)
            if self.init is not None and not self.task.resolves_from_data:
                self.init.fit_recipe(self.recipe)  # a misfit refused before the data's minutes
        else:
            self.ckpt_path, self.resumed_step = start.checkpoint, start.step
            if (done := completed(self.run_dir, start.step, self.recipe)) is not None:
                self.complete = done  # nothing to train, test or write
                return
        quiet_libraries()
        self.callbacks = RunCallbacks.for_recipe(self.recipe, self.run_dir)
        self.trainer = build_trainer(self.recipe, self.run_dir, callbacks=self.callbacks)
        if self.trainer.strategy.root_device.type == "cpu":
            keep_freed_memory()
        if start is not None:  # a resumed run keeps what its data resolved (a label set)
            self.recipe = self.recipe.model_copy(update={"task_options": resolved_options(
                self.recipe.task, self.recipe.task_options, start.task_options)})
        self.data = training_data(
            self.recipe, start.tokenizer if start else self.init.tokenizer if self.init else "",
            saved=self.run_dir / "tokenizer.json" if self.rank > 0 else None,
            progress=self.rank == 0 and show_progress())
        # What only the data can say (a classifier's labels), recorded in the run's recipe.
        self.recipe = self.data.recipe = self.task.resolved(self.recipe, self.data)
        if self.init is not None and self.task.resolves_from_data:
            self.init.fit_recipe(self.recipe)  # its model needed the data; still before the
            # run directory is written
        self.shapes = self.data.train_shapes(self.trainer.world_size)
        if self.rank == 0:
            typer.echo(f"data: {batch_shapes_line(self.data.ladder, self.shapes)}", err=True)
        tokenizer = self.data.tokenizer
        self.directory.start({"recipe.yaml": (self.recipe.to_yaml(), "recipe"),
                              "tokenizer.json": (tokenizer.to_str(), "tokenizer")},
                             new=start is None, force=self.force)
        self.started_new = start is None
        # W&B and MLflow write as they are created: only now that the run directory is ours.
        self.trainer.loggers = build_loggers(self.recipe, self.run_dir)
        self.module = self._built_module(tokenizer)
        if self.ckpt_path is not None and self.rank == 0:  # last: the CSV logger appends to it
            resume_history(metrics_path(self.run_dir), self.resumed_step)

    def fit(self) -> None:
        """``trainer.fit``, then the final state saved. A stop signal, a divergence or a
        machine failure ends the run here: each is recorded (:meth:`write_summary`) and
        raised, as :class:`~normzoo.run.preemption.Preempted` (exit 128 + signal),
        :class:`~normzoo.diagnostics.callbacks.DivergenceError` (exit 3) or
        :class:`~normzoo.errors.RuntimeFailure` (exit 1)."""
        with self._recording_failures():
            with self._training_stops():
                self.trainer.fit(self.module, datamodule=self.data, ckpt_path=self.ckpt_path,
                                 weights_only=True)
            # last.ckpt is written at each validation, and a run that reaches max_steps
            # validates there (ValidateAtMaxSteps); one stopped otherwise (max_epochs) gets its
            # final state here. Only then: a state saved after fit ended resumes one logged
            # step off. A run resumed at its end (its test was stopped) trained nothing: its
            # checkpoint stays as it was, and Lightning's counters are ended as fit ends them.
            step = self.trainer.global_step
            if self.ckpt_path is not None and step == self.resumed_step:
                end_restored_fit(self.trainer)
            elif step != self.callbacks.rolling.saved_step:
                self.trainer.save_checkpoint(self.run_dir / "checkpoints" / "last.ckpt",
                                             weights_only=False)
        self.fitted = True

    def test(self) -> dict[str, Any]:
        """The best checkpoint's scores (validation and test) and what else the completed
        summary records; empty on ranks other than 0. The task's final test
        (:meth:`~normzoo.contract.task.Task.final_test`) says where training time ends. A
        stop signal ends the test at once (:meth:`_test_stopped`)."""
        trainer, recipe = self.trainer, self.recipe
        with self._recording_failures(), self._test_stopped():
            scored = self.task.final_test(self._final_test())
        if scored is None:  # another process: rank 0 writes the summary
            return {}
        validation, test = scored
        scores: dict[str, Any] = {
            "stopped": stop_reason(trainer, recipe, self.callbacks),
            "best_checkpoint": self.callbacks.best.best_model_path or None,
            "validation": validation, "test": test}
        if self.init is not None:
            scores["init"] = self.init.record()
        return scores | {"total_wall_s": round(time.perf_counter() - self.started, 1)}

    def _final_test(self) -> FinalTest:
        """What the task's final test is given: the run's parts and services."""
        trainer, module, data = self.trainer, self.module, self.data
        return FinalTest(
            self.recipe, module, data, trainer, self._training_ended,
            in_loops=lambda: test_in_loops(self.recipe, module, data, trainer),
            last_validation=lambda: validation_of(trainer),
            log_test=lambda scores: log_test_scores(trainer, scores))

    def _training_ended(self) -> None:
        """Where ``train_wall_s`` ends: the task's final test calls it."""
        self.trained = time.perf_counter()

    def write_summary(self, status: str, **extra: Any) -> dict[str, Any] | None:
        """Write how the run ended to ``summary.json`` (atomically, by rank 0 alone) and return
        it; None on other ranks. Every ending has ``status``, ``task``, ``recipe``, ``run_dir``,
        ``steps`` (``extra`` may give its own: a diverged run's step), ``train_wall_s``
        (until :meth:`test` ended training, else until now), the run's ``identity`` where it
        is known (:mod:`normzoo.run.identity`; from the checkpoint for a resumed run), then
        ``extra``, the kernels (:func:`~normzoo.run.kernels.kernel_record`) and ``machine``."""
        trainer = self.trainer
        if not trainer.is_global_zero:
            self.status = status
            return None
        summary = {"status": status, "task": self.recipe.task,
                   "recipe": str(self.recipe_path), "run_dir": str(self.run_dir),
                   "steps": trainer.global_step,
                   "train_wall_s": round((self.trained or time.perf_counter()) - self.started, 1)}
        if (identity := getattr(self.module, "identity", None)) is not None:
            summary["identity"] = identity
        if self.shapes is not None:
            summary |= {"train_batch_shapes": self.shapes.shapes,
                        "train_padding": round(self.shapes.padding, 4)}
        summary |= extra
        summary |= kernel_record(self.recipe, trainer.strategy.root_device.type)
        summary["machine"] = describe(trainer.strategy.root_device.type)
        self.directory.write("summary.json", json.dumps(summary, indent=2), "summary")
        self.status, self.summary = status, summary  # once written: a stop before finds None
        return summary

    def close(self, exit_code: int = 0) -> None:
        """End every logger (:func:`~normzoo.run.trainer.close_loggers`: a failing run's
        ``exit_code`` contains their errors) and let go of the lock. A run that failed before
        it wrote anything leaves no run directory behind (every ending after that has written
        ``summary.json`` or the run's files into it)."""
        try:
            if self.trainer is not None:
                close_loggers(self.trainer, exit_code)
        finally:
            self.directory.release()

    # -- the stages' parts ---------------------------------------------------------------------

    def _built_module(self, tokenizer: Tokenizer) -> Any:
        """The task (LightningModule) from the recipe's seed, with ``init.from``'s weights and,
        in a new run, the identity of that start (rank 0's, which its checkpoints carry);
        rank 0 prints the header line."""
        recipe = self.recipe
        L.seed_everything(recipe.seed, workers=True, verbose=False)
        task = module_class(self.task)(recipe, tokenizer.vocab_size, tokenizer.to_str())
        task.flops_read = True  # the run's TrainingThroughput (RunCallbacks) reads them
        if self.init is not None:
            self.init.load_into(task.model)
            if self.rank == 0:
                typer.echo(self.init.announcement(), err=True)
        if self.ckpt_path is None and self.rank == 0:  # a resumed run's is its checkpoint's
            task.identity = run_identity(recipe.seed, task.model, recipe.to_dict())
        if self.rank == 0:
            size = sum(p.numel() for p in task.model.parameters())
            budget = recipe.data.max_tokens * recipe.trainer.accumulate * self.trainer.world_size
            typer.echo(header(size, budget, recipe.trainer.max_steps, self.run_dir), err=True)
            if (device := self.trainer.strategy.root_device.type) == "cuda":
                typer.echo(kernel_line(recipe, device), err=True)
        return task
