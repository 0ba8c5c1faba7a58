"""Training's logged scalars written without the host waiting for the device.

Lightning's ``self.log`` of a device tensor reads it on the host at every logged step
(``.item()``), which on a GPU waits for the whole step's kernels: logging every step cost
0.58x the throughput of logging every 10 on an H200 (issue 61). Here the task hands the step's
scalars over (:meth:`TaskModule.take_logged <normzoo.tasks.base.TaskModule.take_logged>`:
``train/loss``, ``compile/compiles``), they are copied to the host without waiting
(:class:`~normzoo.io.late.LateValues`) and written, under the step they describe, once the copy
has landed: on a CPU at once, on a GPU a step or so later. Before validation, before a
checkpoint's logs are flushed and at the end of training every pending value is written, so
the history a checkpoint covers is whole
(:class:`~normzoo.run.callbacks.logs.FlushLogsOnCheckpoint`).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from normzoo.io.late import LateValues


class LateLogs(Callback):
    """Write the task's logged scalars of each step once they reach the host, as Lightning
    would have written them: one row per step, its ``step`` Lightning's (the update's 0-based
    index), its ``epoch`` the step's, and the values in ``trainer.logged_metrics`` for the
    progress bar."""

    def __init__(self) -> None:
        self._values = LateValues()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl_module.late_logs = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        due = pl_module.take_logged()
        if due and trainer.is_global_zero:  # Lightning's loggers write on rank 0 only
            step = trainer.fit_loop.epoch_loop._batches_that_stepped
            names = list(due)
            self._values.post((step, trainer.current_epoch, names), [due[n] for n in names])
        self._write(trainer, self._values.landed())

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self.write_all(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.write_all(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """A failing run writes what has landed (a diverged run's last losses among them)."""
        self._write(trainer, self._values.landed())
        self._values.clear()

    def write_all(self, trainer: Any) -> None:
        """Write every pending value, waiting for the copies under way."""
        self._write(trainer, self._values.drain())

    @staticmethod
    def _write(trainer: Any, landed: list[tuple[Any, list[float]]]) -> None:
        for (step, epoch, names), values in landed:
            row = dict(zip(names, values, strict=True))
            trainer._logger_connector.log_metrics({**row, "epoch": epoch}, step=step)
