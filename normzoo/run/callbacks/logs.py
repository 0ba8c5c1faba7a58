"""What a run logs, through Lightning's own loggers and monitors, changed where a run needs it:

* :class:`HistoryCSVLogger` keeps a resumed run's ``metrics.csv`` whole (why:
  :mod:`normzoo.run.history`);
* :class:`KeptOpenTensorBoardLogger` keeps one event file from the first step to the end, and
  keeps a failed write's error (:class:`EventRecords`) for the run to report, naming the file;
* :class:`FlushLogsOnCheckpoint` writes the loggers' buffered rows with every checkpoint;
* :class:`StepLearningRate` and :class:`TrainingThroughput` log once per optimizer step and
  the training throughput only; the throughput waits for the GPU only where a logged figure
  reads the clock.
"""

from __future__ import annotations

import contextlib
import csv
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ThroughputMonitor
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities import rank_zero_only

from normzoo.io.atomic import atomic_write_text
from normzoo.run.hardware import peak_bf16_flops
from normzoo.run.history import read_header, read_metrics, write_metrics
from normzoo.tasks.base import sentences, tokens


@contextlib.contextmanager
def naming(path: Path):
    """An OS error writing ``path`` raised with ``path`` as its file name: a buffered write
    fails at its flush or close with no name (``[Errno 28] No space left on device``), and the
    message a full disk ends a run with should say which file could not be written."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from None


def save_hyperparameters(path: Path, hparams: dict[str, Any]) -> None:
    """``hparams.yaml`` written whole or not at all (Lightning writes it in place, so a full
    disk left half a YAML file, or an empty one that it then never rewrote); values YAML cannot
    write are left out, as Lightning leaves them out."""
    plain = {}
    for key, value in hparams.items():
        try:
            yaml.safe_dump(value)
        except yaml.YAMLError:
            continue
        plain[key] = value
    atomic_write_text(path, yaml.safe_dump(plain, sort_keys=False), "hyperparameters")


class HistoryWriter(ExperimentWriter):
    """Lightning's CSV experiment writer, keeping the rows already in ``metrics.csv``: it
    writes new rows under the header the *file* has, appended when their fields are in it,
    else the whole file rewritten atomically with the union of both headers."""

    def _check_log_dir_exists(self) -> None:
        pass  # Lightning deletes metrics.csv here; the run directory is already ours

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)
        save_hyperparameters(Path(self.log_dir) / self.NAME_HPARAMS_FILE, self.hparams)

    def save(self) -> None:
        if not self.metrics:
            return
        path = Path(self.metrics_file_path)
        header = read_header(path)
        new = {key for row in self.metrics for key in row}
        self.metrics_keys = sorted(new | set(header or []) | set(self.metrics_keys))
        if header is None or not new <= set(header):  # a wider header: all rewritten
            write_metrics(path, read_metrics(path) + self.metrics, self.metrics_keys)
        else:  # a row appended whole or torn at its end: never a shorter file
            with naming(path), open(path, "a", newline="", encoding="utf-8") as f:
                csv.DictWriter(f, fieldnames=header).writerows(self.metrics)
        self.metrics = []


class HistoryCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger`` writing ``save_dir/csv/metrics.csv`` on a
    :class:`HistoryWriter`, so that a resumed run's file stays whole: it does not delete an
    existing ``metrics.csv`` (:func:`~normzoo.run.history.resume_history` has made it this
    run's), and a new metric widens the header atomically."""

    def __init__(self, save_dir: Path) -> None:
        super().__init__(save_dir, name="csv", version="")

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = HistoryWriter(log_dir=self.log_dir)
        return self._experiment


class EventRecords:
    """tensorboardX's writer of one event file, whose first OS error (a full disk) is kept,
    naming the file, not raised where tensorboardX writes: its thread, or its exit hook, which
    printed a traceback after the run's own error. The file is then let go, its buffer too, and
    later records dropped: the run is ending, and says why (``raise_kept``)."""

    def __init__(self, records: Any) -> None:
        self.records, self.path = records, str(records.path)
        self.error: OSError | None = None

    def write(self, data: bytes) -> None:
        self._kept(self.records.write, data)

    def flush(self) -> None:
        self._kept(self.records.flush)

    def close(self) -> None:
        self._kept(self.records.close)

    def _kept(self, act: Any, *args: Any) -> None:
        if self.error is not None:
            return
        try:
            act(*args)
        except OSError as error:
            self.error = OSError(error.errno, error.strerror, self.path)
            with contextlib.suppress(OSError, ValueError):
                self.records.close()  # the descriptor closed; the buffer fails to flush


class KeptOpenTensorBoardLogger(TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` writing ``logs/tb/``, whose writer stays open from the
    first step to the end of the run.

    Lightning closes the writer at the end of fit and of test, and tensorboardX reopens it on
    the next scalar under a file named by the *second* it opens: a final test within the
    second after fit's end overwrote the file holding every training and validation scalar.
    Here ``finalize`` writes out and keeps the file; :meth:`close` (the run's
    :func:`~normzoo.run.trainer.close_loggers`) closes it once. A failed write is raised where
    the run reports it (a checkpoint, fit's or test's end, :meth:`close`); never by a failing
    run's ``finalize("failed")``, so that the run's own error is the one reported.
    """

    def __init__(self, logs: Path) -> None:
        super().__init__(logs, name="tb", version="", default_hp_metric=False)
        self._records: EventRecords | None = None

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is None:
            writer = super().experiment
            events = getattr(getattr(writer, "file_writer", None), "event_writer", None)
            inner = getattr(events, "_ev_writer", None)  # tensorboardX's; torch's differs
            if hasattr(inner, "_py_recordio_writer"):
                self._records = EventRecords(inner._py_recordio_writer)
                inner._py_recordio_writer = self._records
        return self._experiment

    def raise_kept(self) -> None:
        """Raise the event file's failed write, if any, as an OS error naming the file."""
        if self._records is not None and self._records.error is not None:
            raise self._records.error

    def save(self) -> None:
        self.raise_kept()
        path = Path(self.log_dir) / self.NAME_HPARAMS_FILE
        if path.parent.is_dir() and not path.is_file():
            save_hyperparameters(path, dict(self.hparams))

    def finalize(self, status: str) -> None:
        if self._experiment is not None:
            self.experiment.flush()
        if status == "success":
            self.save()

    def close(self) -> None:
        if self._experiment is not None:
            self.experiment.close()
        self.raise_kept()


class FlushLogsOnCheckpoint(Callback):
    """Write the loggers' buffered rows whenever a checkpoint is saved.

    A run killed later loses no logged history that its checkpoint covers: the resumed run
    picks up both from the same step.
    """

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        for logger in trainer.loggers:
            logger.save()


class StepLearningRate(LearningRateMonitor):
    """Lightning's LearningRateMonitor, logging each rate once per optimizer step.

    Lightning's logs before every batch of a logged step, so with ``trainer.accumulate``
    it would write the same rates once per accumulated batch; here only before the step's
    last batch, whose update uses them (the schedule steps after the update).
    """

    def __init__(self) -> None:
        super().__init__(logging_interval="step")

    def on_train_batch_start(self, trainer, *args: Any, **kwargs: Any) -> None:
        if not trainer.fit_loop._should_accumulate():
            super().on_train_batch_start(trainer, *args, **kwargs)


def on_gpu(trainer: Any) -> bool:
    """Whether the run's device is a GPU, whose queued kernels the clock does not see."""
    return trainer.strategy.root_device.type == "cuda"


def clock_read(trainer: Any) -> bool:
    """Whether a logged throughput figure reads the time at the end of the training batch that
    just ended: a batch of a step whose metrics are written (``train/time``, and the end of the
    rate's two-batch window), or the last batch of the step before it (the window's start)."""
    if trainer._logger_connector.should_update_logs:
        return True
    stepped = trainer.fit_loop.epoch_loop._batches_that_stepped  # steps before this one
    every = max(trainer.log_every_n_steps, 1)
    return not trainer.fit_loop._should_accumulate() and (stepped + 2) % every == 0


class TrainingThroughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor, logging the training throughput only, and waiting for the
    GPU only at the batches whose time a logged figure reads.

    It still times validation, to leave it out of the training time, but does not log it:
    Lightning would log validation throughput with the count of validation batches as the
    step, rows out of step with the training steps in ``metrics.csv`` and the other logs.

    Lightning synchronises the GPU at the end of every batch, so that its clock counts the
    batch's kernels: every step's kernels then had to finish before the host queued the next
    step's. Here only the batches :func:`clock_read` names are synchronised (two per
    ``trainer.log_every_steps``, or one more per accumulated batch), which are all that the
    logged figures read; and once before each validation, whose time is left out of
    training's, so that kernels training queued still count as training.
    """

    def __init__(self) -> None:
        # A window of two updates: each logged rate is the last batch's tokens (examples,
        # FLOPs) over the time since the batch before it ended, its data loading included.
        super().__init__(batch_size_fn=sentences, length_fn=tokens, window_size=2)
        self._unsynchronised: float | None = None  # the last training batch's time, if unsynced
        self._drained = 0.0  # training's kernels finished after validation's clock started

    @torch.inference_mode()
    def _update(self, trainer: Any, pl_module: Any, batch: Any, iter_num: int) -> None:
        """Lightning's (2.6) update, with its ``torch.cuda.synchronize()`` on every batch kept
        for the batches whose time is read (:func:`clock_read`) and for validation's."""
        stage = trainer.state.stage
        training = stage == RunningStage.TRAINING
        synchronise = on_gpu(trainer) and (not training or clock_read(trainer))
        if synchronise:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - self._t0s[stage]
        if training:
            self._unsynchronised = None if synchronise or not on_gpu(trainer) else elapsed
        self._lengths[stage] += self.length_fn(batch)
        self._samples[stage] += self.batch_size_fn(batch)
        self._batches[stage] += 1
        self._throughputs[stage].update(
            time=elapsed, batches=self._batches[stage], samples=self._samples[stage],
            lengths=self._lengths[stage], flops=pl_module.flops_per_batch)

    @rank_zero_only
    def on_validation_start(self, trainer: Any, *args: Any) -> None:
        if self._unsynchronised is not None and not trainer.sanity_checking:
            torch.cuda.synchronize()
            finished = time.perf_counter() - self._t0s[RunningStage.TRAINING]
            self._drained = max(finished - self._unsynchronised, 0.0)
            self._unsynchronised = None
        super().on_validation_start(trainer, *args)

    @rank_zero_only
    def on_validation_end(self, trainer: Any, *args: Any) -> None:
        super().on_validation_end(trainer, *args)
        if self._drained:  # Lightning left out of training the time from its last batch's end;
            # the GPU was still running training's kernels for the first `drained` s of it.
            self._t0s[RunningStage.TRAINING] -= self._drained
            self._drained = 0.0

    def setup(self, trainer, pl_module, stage: str) -> None:
        """For a bf16 run on a GPU, normzoo's dense bf16 peak (the one
        ``benchmarks/peers.py`` divides by); Lightning's peak otherwise. Lightning's table
        misses the H200 by the name torch gives it and lists the sparse figure for some
        parts (the H100 NVL), which would halve their MFU."""
        super().setup(trainer, pl_module, stage)
        device = trainer.strategy.root_device
        if device.type != "cuda" or not str(trainer.precision).startswith("bf16"):
            return
        if peak := peak_bf16_flops(torch.cuda.get_device_name(device)):
            self.available_flops = peak[0]
            for throughput in self._throughputs.values():
                throughput.available_flops = peak[0]

    def state_dict(self) -> dict[str, Any]:
        """Training's counters and time at the checkpoint: a resumed run's ``train/batches``,
        ``train/samples``, ``train/lengths`` and ``train/time`` go on from them rather than
        from zero."""
        stage = RunningStage.TRAINING
        times = self._throughputs[stage]._time if stage in self._throughputs else ()
        return {"batches": self._batches.get(stage, 0), "samples": self._samples.get(stage, 0),
                "lengths": self._lengths.get(stage, 0), "time": times[-1] if times else 0.0}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resumed = dict(state_dict)

    def on_train_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        resumed, self._resumed = getattr(self, "_resumed", None), None
        if resumed and trainer.is_global_zero:
            stage = RunningStage.TRAINING
            for name in ("batches", "samples", "lengths"):
                getattr(self, f"_{name}")[stage] = resumed[name]
            self._t0s[stage] -= resumed["time"]  # the clock reads the time trained before too

    def _compute(self, trainer, iter_num: int | None = None) -> None:
        if trainer.state.stage == RunningStage.TRAINING:
            super()._compute(trainer, iter_num)
