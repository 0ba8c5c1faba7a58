"""What a run logs, through Lightning's own loggers and monitors, changed where a run needs it:

* :class:`HistoryCSVLogger` keeps a resumed run's ``metrics.csv`` whole (why:
  :mod:`normzoo.run.history`);
* :class:`KeptOpenTensorBoardLogger` keeps one event file from the first step to the end, and
  keeps a failed write's error (:class:`EventRecords`) for the run to report, naming the file;
* :class:`FlushLogsOnCheckpoint` writes the loggers' buffered rows with every checkpoint;
* :class:`StepLearningRate` logs once per optimizer step.

The training throughput: :mod:`normzoo.run.callbacks.throughput`; the task's scalars, read from
the device late: :mod:`normzoo.run.callbacks.late`.
"""

from __future__ import annotations

import contextlib
import csv
from pathlib import Path
from typing import Any

import yaml
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import Callback, LearningRateMonitor
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from normzoo.io.atomic import atomic_write_text
from normzoo.run.callbacks.late import LateLogs
from normzoo.run.history import read_header, read_metrics, write_metrics


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
    """Write the loggers' buffered rows whenever a checkpoint is saved, the scalars still on
    their way from the device (``late``) first.

    A run killed later loses no logged history that its checkpoint covers: the resumed run
    picks up both from the same step.
    """

    def __init__(self, late: LateLogs | None = None) -> None:
        self.late = late

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if self.late is not None:
            self.late.write_all(trainer)
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
