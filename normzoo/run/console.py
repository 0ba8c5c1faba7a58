"""What a run prints: one header line, a progress bar over the run's steps, and nothing else
from the libraries underneath (their advertisements, their own deprecation warnings).

Lightning's progress bar counts the batches of an epoch (``Epoch 5/-2`` for a run bounded by
steps); normzoo's runs are bounded by ``trainer.max_steps``, so the bar counts optimizer steps
towards it, with the training loss, tokens per second, the validation metric and time left.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from lightning.pytorch.callbacks import TQDMProgressBar

# Lightning's logger lines that sell a service rather than describe the run, and its note that
# fit stopped at max_steps, which the bar already shows (printed while the bar is still open, it
# lands on the bar's line).
_ADVERTISEMENTS = ("💡 Tip:", "`Trainer.fit` stopped: `max_steps=")
# Warnings raised inside Lightning about its own use of torch, which a user cannot act on; and
# the two it raises on every resume, which are wrong for a normzoo run directory: the checkpoints
# directory is expected to hold the run's checkpoints, and the CSV log that Lightning "will
# delete" is put back together by normzoo.run.history.
_INTERNAL_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                      r"Checkpoint directory .* exists and is not empty",
                      r"Experiment logs directory .* exists and is not empty")


class _DropAdvertisements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(_ADVERTISEMENTS)


def quiet_libraries() -> None:
    """Silence third-party advertisements and internal deprecation warnings (idempotent).

    The filter sits on the handlers Lightning attaches to its package loggers: a logger's own
    filters do not see the records its child loggers pass up to those handlers."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, _DropAdvertisements) for f in handler.filters):
                handler.addFilter(_DropAdvertisements())
    for message in _INTERNAL_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def header(parameters: int, tokens_per_step: int, steps: int, run_dir: Any) -> str:
    """The one line a run starts with: what is trained, how much per step, how long, where."""
    return (f"normzoo: {parameters:,} parameters · up to {tokens_per_step:,} tokens per step · "
            f"{steps:,} steps · {run_dir}")


# The progress bar's columns: the logged metric, the name shown, and how it is formatted. Tokens
# per second are this process's, from Lightning's ThroughputMonitor.
_SHOWN = (("train/loss", "loss", "{:.3f}"), ("train/device/items_per_sec", "tok/s", "{:,.0f}"),
          ("val/loss", "val_loss", "{:.3f}"), ("val/bleu", "val_bleu", "{:.2f}"),
          ("val/ppl", "val_ppl", "{:.2f}"), ("val/mlm_acc", "val_acc", "{:.3f}"))


class StepProgressBar(TQDMProgressBar):
    """One bar over the whole run's optimizer steps, ``step / max_steps``, with time left.

    Lightning's bar is per epoch: it is restarted at each epoch and, left on screen, closed at
    each epoch's end. Here it is set up once when training starts, epochs pass through it, and
    it is closed (and left on screen) when training ends.
    """

    def on_train_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        bar = self.train_progress_bar
        bar.reset(total=trainer.max_steps)
        bar.initial = trainer.global_step  # a resumed run starts where it stopped
        bar.n = trainer.global_step
        bar.set_description("step")

    def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
        """Nothing: an epoch is a pass over the data, not a unit of the bar."""

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Nothing: the bar stays open across epochs."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is not None and trainer.global_step != bar.n:
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        # Callbacks' metrics (the ThroughputMonitor's) reach the loggers, not the progress bar:
        # they are shown as last logged, every trainer.log_every_steps steps.
        logged = {**trainer.logged_metrics, **super().get_metrics(trainer, pl_module)}
        shown = {}
        for key, name, form in _SHOWN:
            value = logged.get(key)
            if value is not None:
                shown[name] = form.format(float(value))
        return shown
