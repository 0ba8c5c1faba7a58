"""The Lightning Trainer a recipe asks for: callbacks, loggers, strategy, and the failures of
the machine (memory, disk) turned into messages.

This module imports Lightning when it is imported: only a training run imports it (the CLI
imports :mod:`normzoo.run` inside its commands). The callbacks' classes are in
:mod:`normzoo.run.callbacks`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint, Timer
from lightning.pytorch.loggers import MLFlowLogger, WandbLogger
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from normzoo.contract import task_of
from normzoo.diagnostics.callbacks import DiagnosticsCallback, DivergenceGuard
from normzoo.errors import NormzooError, RuntimeFailure
from normzoo.models.layers import DecoderLayer, EncoderLayer
from normzoo.recipe import Recipe
from normzoo.run.callbacks import (
    AtomicCheckpointIO,
    BetweenEpochs,
    FlushLogsOnCheckpoint,
    HistoryCSVLogger,
    KeptOpenTensorBoardLogger,
    LateLogs,
    RelocateCheckpoints,
    RollingCheckpoints,
    StepLearningRate,
    StopOnSignal,
    TrainingThroughput,
    ValidateAtMaxSteps,
)
from normzoo.run.console import StepProgressBar


class TrainerSetupError(NormzooError):
    """The recipe's trainer settings cannot run on this machine (devices, strategy, precision)."""


def global_rank() -> int:
    """This process's rank, known before the Trainer exists (from the launcher's environment).

    Lightning's launcher re-runs ``normzoo train`` once per extra process, and torchrun or SLURM
    start every process the same way: only rank 0 may create or write the run directory.
    """
    return getattr(rank_zero_only, "rank", 0) or 0


def build_loggers(recipe: Recipe, run_dir: Path) -> list[Any]:
    """Lightning's own loggers, as ``trainer.loggers`` names them, configured from ``run``.

    Files go under the run's ``logs/``: ``csv/metrics.csv``, ``tb/``, ``wandb/`` and, unless
    ``run.tracking_uri`` names a server or store, an MLflow file store in ``mlruns/``. Each
    logger also receives the resolved recipe as the run's hyperparameters.
    """
    logs, run = run_dir / "logs", recipe.run
    name, project = run.name or run_dir.name, run.project or "normzoo"
    built: list[Any] = []
    for kind in recipe.trainer.loggers:
        if kind == "csv":  # Lightning's, made to keep a resumed run's earlier rows
            built.append(HistoryCSVLogger(logs))
        elif kind == "tensorboard":
            built.append(KeptOpenTensorBoardLogger(logs))
        elif kind == "wandb":
            # W&B logs to files in the run directory: on a full disk, logging's own report of
            # each failed record was a traceback. The run reports the full disk once, itself.
            logging.raiseExceptions = False
            built.append(WandbLogger(name=name, project=project, entity=run.entity,
                                     save_dir=str(logs), offline=run.offline))
        elif kind == "mlflow":
            uri = run.tracking_uri or (logs / "mlruns").absolute().as_uri()
            if uri.startswith("file:"):
                # MLflow 3 refuses its file store unless asked: it is what a run without a
                # tracking server keeps, beside its other logs.
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            built.append(MLFlowLogger(experiment_name=project, run_name=name, tracking_uri=uri))
    return built


def close_loggers(trainer: Any, exit_code: int = 0) -> None:
    """End every logger as the run ends, however it ends (``exit_code``: 0 completed, 1 failed,
    3 diverged, 128 + signal stopped), before the process says how it ended: the CSV rows
    written, the TensorBoard file closed, the MLflow run marked (``FINISHED``, ``FAILED`` or
    ``KILLED``), the W&B run finished with the exit code and W&B's service waited for.

    Lightning leaves the W&B run open (for notebooks), and ``finish()`` returns before W&B's
    service has written the offline run file out: read at once, on a loaded machine, it had no
    history. Nothing is left for an exit hook to write, which on a full disk printed a
    traceback after the run's own error. Each logger's error is contained: the first is raised
    after all are ended, and only when the run was otherwise ending well (an OS error names
    its file where known); a failing run reports its own error."""
    errors: list[BaseException] = []
    finished_wandb = False
    for logger in trainer.loggers:
        if getattr(logger, "_experiment", True) is None:
            continue  # never written to: ending it would create its files in the run's folder
        try:
            if isinstance(logger, WandbLogger):
                if logger._experiment is not None:
                    finished_wandb = True
                    logger._experiment.finish(exit_code=exit_code)
            elif isinstance(logger, KeptOpenTensorBoardLogger):
                logger.close()
            elif isinstance(logger, MLFlowLogger):
                logger.finalize("success" if exit_code == 0 else
                                "KILLED" if exit_code > 128 else "failed")
            else:  # the CSV logger, and any other: its buffered rows written
                logger.save()
        except Exception as error:  # every logger ended; the first is raised below
            errors.append(error)
    if finished_wandb:
        errors += _wandb_teardown(exit_code)
    if errors and exit_code == 0:
        error = errors[0]
        if isinstance(error, (OSError, NormzooError)):
            raise error
        raise RuntimeFailure(f"could not end the run's logs: {error}") from None


def _wandb_teardown(exit_code: int) -> list[BaseException]:
    """Wait for W&B's service to write out every finished run and exit (its teardown; only
    then is an offline run file whole); its error, if any, as a list."""
    import wandb

    try:
        wandb.teardown(exit_code)
    except (Exception, SystemExit) as error:  # W&B's teardown may call sys.exit
        return [error]
    return []


@dataclass
class RunCallbacks:
    """A run's callbacks, in the order Lightning gets them, with those whose state the run
    reads held by name, never looked up in ``trainer.callbacks``: ``rolling`` (whether the
    final step is saved yet), ``stop`` (which signal stopped the run, and where it saved),
    and what ended ``fit`` (:func:`stop_reason`): ``early`` (``trainer.patience``) and
    ``timer`` (``trainer.max_time``, made here rather than by Lightning's Trainer so that
    the run holds it). Lightning runs checkpoint callbacks last, in their order here: best-N,
    then step-N and last."""

    best: ModelCheckpoint
    rolling: RollingCheckpoints
    stop: StopOnSignal
    listed: list[Callback] = field(default_factory=list)
    early: EarlyStopping | None = None
    timer: Timer | None = None

    @classmethod
    def for_recipe(cls, recipe: Recipe, run_dir: Path) -> RunCallbacks:
        t, diagnostics = recipe.trainer, recipe.diagnostics
        monitor, mode = task_of(recipe).monitor(recipe)
        checkpoints = run_dir / "checkpoints"
        best = ModelCheckpoint(dirpath=checkpoints, filename="best-{step}", monitor=monitor,
                               mode=mode, save_top_k=t.save_top_k, save_last=False,
                               auto_insert_metric_name=False)
        rolling = RollingCheckpoints(checkpoints, t.keep_checkpoints)
        stop = StopOnSignal(rolling, t.slurm_requeue)
        # A run resumed from another folder keeps its best checkpoints (RelocateCheckpoints).
        # The task's scalars are written late, after the throughput's (rows in that order).
        late = LateLogs()
        listed: list[Callback] = [best, RelocateCheckpoints(best), BetweenEpochs(), rolling, stop,
                                  FlushLogsOnCheckpoint(late), StepLearningRate(),
                                  TrainingThroughput(), late, ValidateAtMaxSteps()]
        early = timer = None
        if t.patience is not None:
            # At validation (every val_every_steps), never at an epoch's end: token-budget
            # epochs are no unit a recipe counts in.
            early = EarlyStopping(monitor=monitor, mode=mode, patience=t.patience,
                                  min_delta=t.min_delta, check_on_train_epoch_end=False)
            listed.append(early)
        if diagnostics.guard or diagnostics.max_loss is not None:
            listed.append(DivergenceGuard(diagnostics.max_loss))
        if diagnostics.every_steps:
            listed.append(DiagnosticsCallback(diagnostics.every_steps))
        if t.progress_bar:
            listed.append(StepProgressBar())
        if t.max_time is not None:  # last, where Trainer(max_time=...) put its own
            timer = Timer(duration=t.max_time, interval="step")
            listed.append(timer)
        return cls(best, rolling, stop, listed, early=early, timer=timer)


# Lightning warns when an epoch has fewer batches than log_every_n_steps; its steps are counted
# across epochs and normzoo writes train/loss as the mean since the last write, so a short epoch
# loses nothing and the warning, on every small run, would only alarm.
warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller "
                        r"than the logging interval")


def build_trainer(recipe: Recipe, run_dir: Path, callbacks: RunCallbacks | None = None,
                  **extra: Any) -> L.Trainer:
    """The Trainer of ``recipe``'s ``trainer`` section, on ``callbacks`` (by default the
    recipe's own: :meth:`RunCallbacks.for_recipe`), without loggers (attached once the run
    directory is the run's) and with atomic checkpoint writes; settings this machine cannot
    run raise :class:`TrainerSetupError` (exit 2) before anything is written."""
    t = recipe.trainer
    callbacks = callbacks or RunCallbacks.for_recipe(recipe, run_dir)
    strategy: Any = t.strategy
    if t.strategy == "fsdp":
        # One FSDP unit per Transformer layer; each process saves its own shard.
        strategy = FSDPStrategy(auto_wrap_policy={EncoderLayer, DecoderLayer},
                                state_dict_type="sharded")
    try:
        return L.Trainer(
            default_root_dir=run_dir,
            max_steps=t.max_steps,
            max_epochs=t.max_epochs if t.max_epochs is not None else -1,
            val_check_interval=t.val_every_steps * t.accumulate,
            check_val_every_n_epoch=None,
            log_every_n_steps=t.log_every_steps,
            accumulate_grad_batches=t.accumulate,
            gradient_clip_val=recipe.optim.clip_norm or None,
            precision=t.precision,
            accelerator=t.accelerator,
            devices=t.devices,
            num_nodes=t.num_nodes,
            strategy=strategy,
            callbacks=list(callbacks.listed),  # Lightning adds its own to the list it gets
            logger=False,  # attached once the run directory exists (TrainingRun.setup)
            use_distributed_sampler=False,  # token-budget batches are sharded by our sampler
            enable_progress_bar=t.progress_bar,
            enable_model_summary=False,  # normzoo's header line says the size
            plugins=[AtomicCheckpointIO()],  # atomic writes: never a half-written checkpoint
            **extra,
        )
    except (MisconfigurationException, ValueError, RuntimeError) as error:
        raise TrainerSetupError(
            f"trainer settings (accelerator={t.accelerator}, devices={t.devices}, "
            f"num_nodes={t.num_nodes}, strategy={t.strategy}, precision={t.precision}) cannot "
            f"run on this machine: {error}"
        ) from None


def stop_reason(trainer: Any, recipe: Recipe, callbacks: RunCallbacks) -> str:
    """Why ``fit`` ended, in words for ``summary.json``: converged (early stopping, with
    Lightning's own account), the step cap, the time limit or the epoch limit; read from the
    run's own ``callbacks``."""
    if (early := callbacks.early) is not None:
        # stopping_reason_message is Lightning >= 2.6; older ones record only stopped_epoch.
        message = getattr(early, "stopping_reason_message", None)
        if message or early.stopped_epoch:
            message = message or (f"{early.monitor} did not improve in the last "
                                  f"{early.wait_count} records")
            return f"early stopping: {message.removesuffix(' Signaling Trainer to stop.')}"
    if trainer.global_step >= recipe.trainer.max_steps:
        return f"step cap: trainer.max_steps={recipe.trainer.max_steps}"
    if (timer := callbacks.timer) is not None and (left := timer.time_remaining()) is not None \
            and left <= 0:
        return f"time limit: trainer.max_time={recipe.trainer.max_time}"
    if recipe.trainer.max_epochs is not None:
        return f"epoch limit: trainer.max_epochs={recipe.trainer.max_epochs}"
    return "fit ended"


@contextlib.contextmanager
def machine_failures(trainer: Any, checkpoints: Path | None = None) -> Iterator[None]:
    """Turn the machine running out of memory or disk into a :class:`RuntimeFailure` (exit 1)
    that says what to do, instead of a traceback from deep inside torch. The advice holds for
    the run as it stands: ``--resume auto`` where ``checkpoints`` holds a complete checkpoint,
    else the same command again with ``--force`` (a resume would find none)."""
    try:
        yield
    except torch.OutOfMemoryError:
        raise RuntimeFailure(
            f"out of memory at step {trainer.global_step}: lower data.max_tokens (raise "
            f"trainer.accumulate to keep the batch), then {_then(checkpoints)}"
        ) from None
    except Exception as raised:  # a NormzooError has its message (a file's, a divergence's)
        error = None if isinstance(raised, NormzooError) else disk_full(raised)
        if error is None:
            raise
        where = f" writing {error.filename}" if error.filename else ""
        raise RuntimeFailure(
            f"the disk is full (at step {trainer.global_step}{where}): free space, then "
            f"{_then(checkpoints)}"
        ) from None


def disk_full(error: BaseException | None) -> OSError | None:
    """The full disk (ENOSPC) behind ``error``: itself, or what it was raised from or while
    handling, as MLflow's file store wraps it in its own exception."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _then(checkpoints: Path | None) -> str:
    """How to go on after a machine failure: from the newest complete checkpoint, if any."""
    from normzoo.checkpoints.rolling import newest_checkpoint

    newest = newest_checkpoint(checkpoints) if checkpoints is not None else None
    if newest is not None:
        return (f"continue with --resume auto (from {newest.path.name}, step {newest.step}, "
                "which is intact)")
    if checkpoints is None:
        return "continue with --resume auto"
    return "run the same command again with --force: no checkpoint was written yet"
