"""The Lightning Trainer a recipe asks for: callbacks, loggers, strategy, and the failures of
the machine (memory, disk) turned into messages.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from normzoo.errors import NormzooError, RuntimeFailure
from normzoo.io.atomic import checkpoint_io
from normzoo.recipe import Recipe
from normzoo.tasks import monitored_metric


class TrainerSetupError(NormzooError):
    """The recipe's trainer settings cannot run on this machine (devices, strategy, precision)."""


def global_rank() -> int:
    """This process's rank, known before the Trainer exists (from the launcher's environment).

    Lightning's launcher re-runs ``normzoo train`` once per extra process, and torchrun or SLURM
    start every process the same way: only rank 0 may create or write the run directory.
    """
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) or 0


def _flush_logs_callback():
    from lightning.pytorch.callbacks import Callback

    class FlushLogsOnCheckpoint(Callback):
        """Write the loggers' buffered rows whenever a checkpoint is saved.

        A run killed later loses no logged history that its checkpoint covers: the resumed run
        picks up both from the same step.
        """

        def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
            for logger in trainer.loggers:
                logger.save()

    return FlushLogsOnCheckpoint()


def _learning_rate_callback():
    from lightning.pytorch.callbacks import LearningRateMonitor

    class StepLearningRate(LearningRateMonitor):
        """Lightning's LearningRateMonitor, logging each rate once per optimizer step.

        Lightning's logs before every batch of a logged step, so with ``trainer.accumulate``
        it would write the same rates once per accumulated batch; here only before the step's
        last batch, whose update uses them (the schedule steps after the update).
        """

        def on_train_batch_start(self, trainer, *args: Any, **kwargs: Any) -> None:
            if not trainer.fit_loop._should_accumulate():
                super().on_train_batch_start(trainer, *args, **kwargs)

    return StepLearningRate(logging_interval="step")


def _throughput_callback():
    from lightning.pytorch.callbacks import ThroughputMonitor
    from lightning.pytorch.trainer.states import RunningStage

    from normzoo.tasks.base import sentences, tokens

    class TrainingThroughput(ThroughputMonitor):
        """Lightning's ThroughputMonitor, logging the training throughput only.

        It still times validation, to leave it out of the training time, but does not log it:
        Lightning would log validation throughput with the count of validation batches as the
        step, rows out of step with the training steps in ``metrics.csv`` and the other logs.
        """

        def setup(self, trainer, pl_module, stage: str) -> None:
            """For a bf16 run on a GPU, normzoo's dense bf16 peak (the one
            ``benchmarks/peers.py`` divides by); Lightning's peak otherwise. Lightning's table
            misses the H200 by the name torch gives it and lists the sparse figure for some
            parts (the H100 NVL), which would halve their MFU."""
            super().setup(trainer, pl_module, stage)
            device = trainer.strategy.root_device
            if device.type == "cuda" and str(trainer.precision).startswith("bf16"):
                import torch

                from normzoo.run.hardware import peak_bf16_flops

                if peak := peak_bf16_flops(torch.cuda.get_device_name(device)):
                    self.available_flops = peak[0]
                    for throughput in self._throughputs.values():
                        throughput.available_flops = peak[0]

        def _compute(self, trainer, iter_num: int | None = None) -> None:
            if trainer.state.stage == RunningStage.TRAINING:
                super()._compute(trainer, iter_num)

    # A window of two updates: each logged rate is the last batch's tokens (examples, FLOPs)
    # over the time since the batch before it ended, its data loading included.
    return TrainingThroughput(batch_size_fn=sentences, length_fn=tokens, window_size=2)


def build_loggers(recipe: Recipe, run_dir: Path) -> list[Any]:
    """Lightning's own loggers, as ``trainer.loggers`` names them, configured from ``run``.

    Files go under the run's ``logs/``: ``csv/metrics.csv``, ``tb/``, ``wandb/`` and, unless
    ``run.tracking_uri`` names a server or store, an MLflow file store in ``mlruns/``. Each
    logger also receives the resolved recipe as the run's hyperparameters.
    """
    from lightning.pytorch import loggers as pl_loggers

    logs, run = run_dir / "logs", recipe.run
    name, project = run.name or run_dir.name, run.project or "normzoo"
    built: list[Any] = []
    for kind in recipe.trainer.loggers:
        if kind == "csv":  # Lightning's, made to keep a resumed run's earlier rows
            from normzoo.run.history import csv_logger

            built.append(csv_logger(logs))
        elif kind == "tensorboard":
            built.append(tensorboard_logger(logs))
        elif kind == "wandb":
            built.append(pl_loggers.WandbLogger(name=name, project=project, entity=run.entity,
                                                save_dir=str(logs), offline=run.offline))
        elif kind == "mlflow":
            uri = run.tracking_uri or (logs / "mlruns").absolute().as_uri()
            if uri.startswith("file:"):
                # MLflow 3 refuses its file store unless asked: it is what a run without a
                # tracking server keeps, beside its other logs.
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            built.append(pl_loggers.MLFlowLogger(experiment_name=project, run_name=name,
                                                 tracking_uri=uri))
    return built


def tensorboard_logger(logs: Path) -> Any:
    """Lightning's ``TensorBoardLogger`` writing ``logs/tb/``, whose writer stays open from the
    first step to the end of the run.

    Lightning closes the writer at the end of fit and of test, and tensorboardX reopens it on
    the next scalar under a file named by the *second* it opens: a final test within the
    second after fit's end overwrote the file holding every training and validation scalar.
    Here ``finalize`` writes out and keeps the file; :func:`close_loggers` closes it once.
    """
    from lightning.pytorch.loggers import TensorBoardLogger

    class KeptOpenTensorBoardLogger(TensorBoardLogger):
        def finalize(self, status: str) -> None:
            if self._experiment is not None:
                self.experiment.flush()
            if status == "success":
                self.save()

        def close(self) -> None:
            if self._experiment is not None:
                self.experiment.close()

    return KeptOpenTensorBoardLogger(logs, name="tb", version="", default_hp_metric=False)


def close_loggers(trainer: Any) -> None:
    """End the W&B run when the training run ends (Lightning leaves it open, for notebooks), so
    that its records are written out whole, offline too, before the process exits; close the
    TensorBoard writer (:func:`tensorboard_logger`)."""
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger.experiment.finish()
        elif isinstance(logger, TensorBoardLogger) and hasattr(logger, "close"):
            logger.close()


def build_trainer(recipe: Recipe, run_dir: Path, **extra: Any):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    t = recipe.trainer
    strategy: Any = t.strategy
    if t.strategy == "fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        from normzoo.models.layers import DecoderLayer, EncoderLayer

        # One FSDP unit per Transformer layer; each process saves its own shard.
        strategy = FSDPStrategy(auto_wrap_policy={EncoderLayer, DecoderLayer},
                                state_dict_type="sharded")
    from normzoo.checkpoints.relocate import relocate_callback
    from normzoo.checkpoints.rolling import rolling_checkpoints
    from normzoo.run.preemption import preemption_callback

    monitor, mode = monitored_metric(recipe)
    checkpoints = run_dir / "checkpoints"
    # Lightning runs checkpoint callbacks last, in this order: best-N, then step-N and last.
    best = ModelCheckpoint(
        dirpath=checkpoints,
        filename="best-{step}",
        monitor=monitor,
        mode=mode,
        save_top_k=t.save_top_k,
        save_last=False,
        auto_insert_metric_name=False,
    )
    rolling = rolling_checkpoints(checkpoints, t.keep_checkpoints)
    from normzoo.run.final_test import final_validation_callback

    # A run resumed from another folder keeps its best checkpoints (normzoo.checkpoints.relocate).
    callbacks: list[Any] = [best, relocate_callback(best), rolling,
                            preemption_callback(rolling, t.slurm_requeue),
                            _flush_logs_callback(), _learning_rate_callback(),
                            _throughput_callback(), final_validation_callback()]
    if t.patience is not None:
        from lightning.pytorch.callbacks import EarlyStopping

        # At validation (every val_every_steps), never at an epoch's end: token-budget epochs
        # are no unit a recipe counts in.
        callbacks.append(EarlyStopping(monitor=monitor, mode=mode, patience=t.patience,
                                       min_delta=t.min_delta, check_on_train_epoch_end=False))
    diagnostics = recipe.diagnostics
    if diagnostics.guard or diagnostics.max_loss is not None:
        from normzoo.diagnostics.callbacks import DivergenceGuard

        callbacks.append(DivergenceGuard(diagnostics.max_loss))
    if diagnostics.every_steps:
        from normzoo.diagnostics.callbacks import DiagnosticsCallback

        callbacks.append(DiagnosticsCallback(diagnostics.every_steps))
    if t.progress_bar:
        from normzoo.run.console import StepProgressBar

        callbacks.append(StepProgressBar())
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        return L.Trainer(
            default_root_dir=run_dir,
            max_steps=t.max_steps,
            max_epochs=t.max_epochs if t.max_epochs is not None else -1,
            max_time=t.max_time,
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
            callbacks=callbacks,
            logger=False,  # attached once the run directory exists (train.py)
            use_distributed_sampler=False,  # token-budget batches are sharded by our sampler
            enable_progress_bar=t.progress_bar,
            enable_model_summary=False,  # normzoo's header line says the size
            plugins=[checkpoint_io()],  # atomic writes: never a half-written checkpoint
            **extra,
        )
    except (MisconfigurationException, ValueError, RuntimeError) as error:
        raise TrainerSetupError(
            f"trainer settings (accelerator={t.accelerator}, devices={t.devices}, "
            f"num_nodes={t.num_nodes}, strategy={t.strategy}, precision={t.precision}) cannot "
            f"run on this machine: {error}"
        ) from None


def stop_reason(trainer: Any, recipe: Recipe) -> str:
    """Why ``fit`` ended, in words for ``summary.json``: converged (early stopping, with
    Lightning's own account), the step cap, the time limit or the epoch limit."""
    from lightning.pytorch.callbacks import EarlyStopping, Timer

    for callback in trainer.callbacks:
        # stopping_reason_message is Lightning >= 2.6; older ones record only stopped_epoch.
        message = getattr(callback, "stopping_reason_message", None)
        if isinstance(callback, EarlyStopping) and (message or callback.stopped_epoch):
            message = message or (f"{callback.monitor} did not improve in the last "
                                  f"{callback.wait_count} records")
            return f"early stopping: {message.removesuffix(' Signaling Trainer to stop.')}"
    if trainer.global_step >= recipe.trainer.max_steps:
        return f"step cap: trainer.max_steps={recipe.trainer.max_steps}"
    for callback in trainer.callbacks:
        if isinstance(callback, Timer) and callback.time_remaining() is not None and (
                callback.time_remaining() <= 0):
            return f"time limit: trainer.max_time={recipe.trainer.max_time}"
    if recipe.trainer.max_epochs is not None:
        return f"epoch limit: trainer.max_epochs={recipe.trainer.max_epochs}"
    return "fit ended"


@contextlib.contextmanager
def machine_failures(trainer: Any) -> Iterator[None]:
    """Turn the machine running out of memory or disk into a :class:`RuntimeFailure` (exit 1)
    that says what to do, instead of a traceback from deep inside torch."""
    import torch

    try:
        yield
    except torch.OutOfMemoryError:
        raise RuntimeFailure(
            f"out of memory at step {trainer.global_step}: lower data.max_tokens (raise "
            "trainer.accumulate to keep the batch), then continue with --resume auto"
        ) from None
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise RuntimeFailure(
            f"the disk is full (at step {trainer.global_step}): free space, then continue with "
            "--resume auto; the last checkpoint is intact"
        ) from None
