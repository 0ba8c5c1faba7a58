"""What a run prints: one header line, its progress, and nothing else from the libraries
underneath (their advertisements, their own deprecation warnings).

Lightning's progress bar counts the batches of an epoch (``Epoch 5/-2`` for a run bounded by
steps); normzoo's runs are bounded by ``trainer.max_steps``, so the bar counts optimizer steps
towards it, with the training loss, tokens per second, the validation metric and time left.
That bar is for a terminal: where standard output is a file or a pipe (a cluster job's log,
``| tee``), its redrawn frames would fill the log with ``\r``, so there the run prints plain
lines instead, as fairseq does: one per ``trainer.log_every_steps`` (step, loss, tokens per
second, time left) and one per validation, with its metrics.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from typing import Any, TextIO

from lightning.pytorch.callbacks import TQDMProgressBar

# Lightning's logger lines that sell a service rather than describe the run, and its note that
# fit stopped at max_steps, which the bar already shows (printed while the bar is still open, it
# lands on the bar's line).
_ADVERTISEMENTS = ("💡 Tip:", "`Trainer.fit` stopped: `max_steps=")
# And its line on a Ctrl-C it catches (before training starts; after, the run's own stop has
# it): normzoo train says what was stopped and what to do instead (normzoo.cli.train).
_SAID_BY_NORMZOO = ("\nDetected KeyboardInterrupt, attempting graceful shutdown",)
# Warnings raised inside Lightning about its own use of torch, which a user cannot act on; and
# the two it raises on every resume, which are wrong for a normzoo run directory: the checkpoints
# directory is expected to hold the run's checkpoints, and the CSV log that Lightning "will
# delete" is put back together by normzoo.run.history.
_INTERNAL_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                      r"Checkpoint directory .* exists and is not empty",
                      r"Experiment logs directory .* exists and is not empty")


class _DropAdvertisements(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(_ADVERTISEMENTS + _SAID_BY_NORMZOO)


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


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (a closed or replaced stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def duration(seconds: float) -> str:
    """``1:02:03`` (hours shown only when there are some), as tqdm writes time left."""
    minutes, secs = divmod(round(max(seconds, 0.0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


# The plain lines' validation columns: every ``val/`` metric, by its name without the prefix.
_VALIDATION_FORMS = {"bleu": "{:.2f}", "chrf": "{:.2f}", "ppl": "{:.2f}"}


class StepProgressBar(TQDMProgressBar):
    """One bar over the whole run's optimizer steps, ``step / max_steps``, with time left; or,
    where standard output is not a terminal (``plain``), plain lines instead of any bar.

    Lightning's bar is per epoch: it is restarted at each epoch and, left on screen, closed at
    each epoch's end. Here it is set up once when training starts, epochs pass through it, and
    it is closed (and left on screen) when training ends.

    Plain lines, written to standard output (where the bar would go) by the first process
    only: ``step 25/1500 | loss 7.364 | tok/s 3,598 | eta 14:42`` every
    ``trainer.log_every_steps``, and ``step 500/1500 | validation | loss 5.781 | bleu 0.06 |
    chrf 3.64`` after each validation (not the sanity check). Lightning's own bars (sanity
    check, validation, test) are all off then.
    """

    def __init__(self, *args: Any, plain: bool | None = None, stream: TextIO | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stream = stream
        self.plain = not is_terminal(self.stream) if plain is None else plain
        self._started: tuple[float, int] | None = None  # (time, step) when training started
        self._printed_step = -1

    @property
    def stream(self) -> TextIO:
        """Where plain lines go: standard output as it is when they are written (a test or
        ``contextlib.redirect_stdout`` may replace it), unless a stream was given."""
        return self._stream if self._stream is not None else sys.stdout

    @property
    def is_disabled(self) -> bool:
        """Every tqdm bar Lightning makes through this callback is off in plain mode."""
        return self.plain or super().is_disabled

    def _say(self, trainer: Any, line: str) -> None:
        if trainer.is_global_zero:
            print(line, file=self.stream, flush=True)  # a pipe is block-buffered otherwise

    def on_train_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        self._started = (time.monotonic(), trainer.global_step)
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
        if self.plain:
            step = trainer.global_step
            # At the batch that completes a logged step: its loss was logged in training_step,
            # and the throughput monitor (an earlier callback) has logged its rate.
            if step != self._printed_step and step % max(trainer.log_every_n_steps, 1) == 0:
                self._printed_step = step
                self._say(trainer, self.step_line(trainer, pl_module))
            return
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

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.plain and not trainer.sanity_checking and trainer.state.fn == "fit":
            self._say(trainer, self.validation_line(trainer))

    def step_line(self, trainer: Any, pl_module: Any) -> str:
        """``step 25/1500 | loss 7.364 | tok/s 3,598 | eta 14:42``: time left from the mean
        time per step since training started (validations included)."""
        step, total = trainer.global_step, trainer.max_steps
        parts = [f"step {step}/{total}" if total and total > 0 else f"step {step}"]
        shown = self.get_metrics(trainer, pl_module)
        parts += [f"{name} {shown[name]}" for name in ("loss", "tok/s") if name in shown]
        if self._started is not None and total and total > 0 and step > self._started[1]:
            began, first = self._started
            rate = (time.monotonic() - began) / (step - first)  # seconds per step so far
            parts.append(f"eta {duration(rate * (total - step))}")
        return " | ".join(parts)

    def validation_line(self, trainer: Any) -> str:
        """``step 500/1500 | validation | loss 5.781 | bleu 0.06 | chrf 3.64``."""
        step, total = trainer.global_step, trainer.max_steps
        parts = [f"step {step}/{total}" if total and total > 0 else f"step {step}",
                 "validation"]
        for key, value in trainer.callback_metrics.items():
            if key.startswith("val/"):
                name = key.removeprefix("val/")
                parts.append(f"{name} " + _VALIDATION_FORMS.get(name, "{:.3f}").format(
                    float(value)))
        return " | ".join(parts)
