"""Every way a training run ends, kept by the run itself: :class:`RunEndings`, the part of
:class:`~normzoo.run.training.TrainingRun` that knows how its run ended.

A run ends completed, pre-empted or interrupted by a signal (during training or its final
test), diverged, failed (memory, disk), or by a stop signal outside both (before training,
between training and the summary, or after the summary said completed). Each is recorded
where it happens, by the object that saw it happen, and not pieced together afterwards from
the files' times: ``status`` is what ``summary.json`` says (set once it is written),
``fitted`` that ``fit`` ended with the final state saved, ``started_new`` that this command
started a new run's folder, ``late_signal`` a stop that came once the summary said completed.
From them the run says what a stop leaves and what to do next (:meth:`RunEndings.stop_note`,
the line ``normzoo train`` prints) and the exit code its loggers record (:func:`exit_code`).

The stages (setup, fit, test, the summary) are in :mod:`normzoo.run.training`; this module
holds only the endings, so that the stages read top to bottom.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from lightning.pytorch.utilities.exceptions import SIGTERMException

from normzoo.diagnostics.callbacks import DivergenceError
from normzoo.errors import RuntimeFailure
from normzoo.run.preemption import (
    Preempted,
    StopSignal,
    requeue_note,
    stop_signals_raise,
    taking_stop_requests,
)
from normzoo.run.resume import resume_command
from normzoo.run.trainer import machine_failures


def exit_code(ending: BaseException) -> int:
    """The exit code ``ending`` ends the process with (a stop signal's 128 + signal, a
    divergence's 3, a user error's 2, else 1): the loggers record the run's ending by it."""
    if (stop := stop_raised(ending)) is not None:
        return 128 + getattr(stop, "signum", signal.SIGINT)
    if isinstance(ending, SIGTERMException):
        return 128 + signal.SIGTERM
    return getattr(ending, "exit_code", 1)


def stop_raised(ending: BaseException) -> KeyboardInterrupt | StopSignal | None:
    """The stop signal ``ending`` is, as raised: Ctrl-C's KeyboardInterrupt (also when
    Lightning caught it and ended with ``SystemExit(1)`` instead), or a
    :class:`~normzoo.run.preemption.StopSignal`; None for any other ending."""
    if isinstance(ending, KeyboardInterrupt | StopSignal):
        return ending
    if isinstance(ending, SystemExit) and isinstance(ending.__context__, KeyboardInterrupt):
        return ending.__context__
    return None


class RunEndings:
    """How a :class:`~normzoo.run.training.TrainingRun` ends: its stages run inside
    :meth:`ending` (and ``fit`` inside :meth:`_training_stops`, the final test inside
    :meth:`_test_stopped`), which record each ending in ``summary.json`` (through the run's
    ``write_summary``) and in the attributes below, and raise the error that ends the process.

    The run provides ``recipe``, ``recipe_path``, ``run_dir``, ``overrides``, ``force``,
    ``resume``, ``trainer``, ``callbacks``, ``complete``, ``write_summary`` and ``close``."""

    status: str | None = None  # what summary.json says, once this run has written it
    summary: dict[str, Any] | None = None  # and the summary itself (rank 0)
    fitted = False  # fit ended, its final state saved: the checkpoints hold the training
    started_new = False  # this command started a new run's folder (its recipe, no checkpoint)
    late_signal = 0  # a stop signal that came once the summary said completed

    @property
    def completed(self) -> bool:
        """Whether the run's summary says completed: written by this run, or found so by
        ``--resume auto``."""
        return self.status == "completed" or getattr(self, "complete", None) is not None

    @contextlib.contextmanager
    def ending(self, *, note_late_stops: bool = False) -> Iterator[None]:
        """The whole run: whatever ends it, its loggers are ended with its exit code and the
        lock let go (``close``). A stop signal is raised with the run's :meth:`stop_note`
        (Lightning's ``SystemExit`` after a Ctrl-C it caught, as the Ctrl-C it was). With
        ``note_late_stops`` (``normzoo train``, which answers it), a stop once the summary
        says completed stops nothing and is kept in ``late_signal``; a sweep wants it raised,
        to stop there."""
        try:
            try:
                yield
            except BaseException as error:
                self.close(exit_code(error))
                raise
            self.close(0)
        except BaseException as error:
            stop = stop_raised(error)
            if stop is None:
                raise
            if note_late_stops and self.completed:
                self.late_signal = getattr(stop, "signum", signal.SIGINT)
                return
            if not getattr(stop, "note", None) and (note := self.stop_note()) is not None:
                stop.note = note  # the line the command's guard prints (normzoo.cli.ending)
            if stop is error:
                raise
            raise stop from None

    def stop_note(self) -> str | None:
        """What a stop outside training and its final test leaves, where the command's own
        line (before training started, run the same command) is not all: training's
        checkpoints, which ``--resume auto`` continues from, or a new run's folder started
        without one, which only ``--force`` may start again."""
        folder = self.run_dir / "checkpoints"
        if self.fitted or (self.callbacks is not None and self.callbacks.rolling.saved_step >= 0):
            command = resume_command(self.recipe_path, self.run_dir, self.overrides)
            return (f"after training, before the run's summary was written; its checkpoints "
                    f"are in {folder}: continue with: {command}")
        if self.started_new and self.resume is None and not self.force:
            return (f"before training started; {self.run_dir} holds no checkpoint: run the "
                    "same command again with --force")
        return None

    @contextlib.contextmanager
    def _training_stops(self) -> Iterator[None]:
        """``fit``'s endings: a stop signal (the run's :class:`StopOnSignal` checkpoints the
        step and Lightning stops) raised as :class:`~normzoo.run.preemption.Preempted`, a
        divergence recorded and raised, the machine's failures said as such. While inside,
        a stop may also be asked for without a signal (a sweep cell's job passing on
        submitit's pre-emption signal: :func:`~normzoo.run.preemption.request_stop`)."""
        try:
            with machine_failures(self.trainer, self.run_dir / "checkpoints"), \
                    taking_stop_requests(self.callbacks.stop.request):
                yield
        except SIGTERMException:
            raise self._preempted() from None
        except DivergenceError as error:
            self.write_summary("diverged", steps=error.step, diverged_at_step=error.step,
                               reason=str(error), last_good_checkpoint=error.last_checkpoint)
            raise

    def _preempted(self) -> Preempted:
        """Record a run stopped by a signal during training (its checkpoint, the command that
        resumes it) and say the same in the error that ends the process."""
        stop = self.callbacks.stop
        return self._stopped(stop.agreed, stop.saved_path, stop.requeue_note,
                             f"stopped by {{name}} at step {self.trainer.global_step}: saved "
                             f"{stop.saved_path}{{note}}", "continue with")

    def _stopped(self, signum: int, checkpoint: Any, requeue: str, what: str, advice: str,
                 **extra: Any) -> Preempted:
        """Write the pre-empted summary (the signal, the checkpoint, the command that goes on,
        a SLURM requeue) and return the error that ends the process: ``what`` happened (with
        ``{name}`` and ``{note}`` filled in), then ``advice``, then the command. The error
        keeps ``what`` alone too, for a sweep, which gives advice of its own."""
        name = signal.Signals(signum).name
        command = resume_command(self.recipe_path, self.run_dir, self.overrides)
        self.write_summary("preempted", signal=name, **extra, checkpoint=checkpoint,
                           resume=command, **({"requeue": requeue} if requeue else {}))
        note = f"; {requeue}" if requeue else ""
        # Placeholders replaced, not str.format: a path may hold braces.
        said = what.replace("{name}", name).replace("{note}", note)
        return Preempted(f"{said}; {advice}: {command}", signum, what=said)

    @contextlib.contextmanager
    def _test_stopped(self) -> Iterator[None]:
        """SIGTERM, SIGUSR1 or Ctrl-C during the final test: training is over and saved, so
        ``--resume auto`` runs the test alone (a SLURM job requeued by SIGUSR1 does so by
        itself). Recorded as pre-empted, with that command, and said so in the error that
        ends the process (exit 128 + signal)."""
        try:
            with stop_signals_raise():
                yield
        except StopSignal as stop:
            saved = self.run_dir / "checkpoints" / "last.ckpt"
            note = requeue_note(stop.signum, self.recipe.trainer.slurm_requeue,
                                self.trainer.is_global_zero)
            raise self._stopped(stop.signum, str(saved), note,
                                f"training finished at step {self.trainer.global_step} (saved "
                                f"{saved}), but {{name}} stopped the final test{{note}}",
                                "run the test alone with", during="final test") from None

    @contextlib.contextmanager
    def _recording_failures(self) -> Iterator[None]:
        """A machine failure (memory, disk) during fit or the final test is recorded as the
        run's ending, as far as the disk still allows; the failure itself is what is raised."""
        try:
            yield
        except RuntimeFailure as failure:
            with contextlib.suppress(RuntimeFailure):
                self.write_summary("failed", reason=str(failure))
            raise
