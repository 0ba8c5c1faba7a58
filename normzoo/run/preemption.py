"""Pre-emption and Ctrl-C: on SIGTERM, SIGINT or the SLURM warning signal, checkpoint the
current step and stop.

Schedulers (SLURM, Kubernetes, cloud spot instances) send SIGTERM some seconds before they kill
a job; SLURM can also be asked for an earlier warning signal (``#SBATCH --signal=USR1@120``).
Lightning, left alone, stops on SIGTERM without a checkpoint and exits 0, so a job script sees
success. Ctrl-C (SIGINT), the way most people stop a run by hand, fares no better: Lightning
turns the ``KeyboardInterrupt`` into "attempting graceful shutdown", saves nothing and exits 1.
Here the signal only *requests* a stop; the stop happens at the next point where a
checkpoint is exact (after the current optimizer step and its validation, if one is due):

* every process agrees on the step (under several processes the request is all-reduced at each
  optimizer step, so no rank stops alone and hangs the others);
* Lightning's own stop (``SIGTERMException``) then ends ``fit`` at the end of that step, and
  :meth:`on_exception` saves ``last.ckpt`` there;
* ``normzoo train`` reports how to resume and exits with ``128 + signal`` (143 for SIGTERM, 130
  for Ctrl-C), as a process killed by that signal would, so job scripts and launchers see a
  failure.

A second Ctrl-C while the first one's stop is pending stops the process at once, by SIGINT itself
(no checkpoint; the previous ones are whole, as after any kill): a person who presses it twice
means it.

On SLURM with ``trainer.slurm_requeue`` (the default), the warning signal also requeues the job
(``scontrol requeue``, as Lightning's ``SLURMEnvironment(auto_requeue=True)`` does), and the
requeued job, which runs the same command again, resumes from the checkpoint by itself
(:func:`slurm_restarted`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from typing import Any

from normzoo.errors import NormzooError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
REQUEUE_SIGNAL = signal.SIGUSR1


class Preempted(NormzooError):
    """Training was stopped by a signal after saving a checkpoint; exit code 128 + signal."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
        self.signum = signum


def slurm_job_id() -> str | None:
    """This SLURM job's id as ``scontrol`` wants it (``ARRAY_TASK`` for array jobs), or None."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}" if array else \
        os.environ.get("SLURM_JOB_ID")
    return job if job and re.fullmatch(r"[0-9_]+", job) else None


def slurm_restarted() -> bool:
    """Whether this is a SLURM job started again after a requeue (``SLURM_RESTART_COUNT`` > 0)."""
    return slurm_job_id() is not None and os.environ.get("SLURM_RESTART_COUNT", "0") not in (
        "", "0")


def requeue() -> str:
    """Ask SLURM to requeue this job; return what happened, for the log."""
    job = slurm_job_id()
    if job is None:
        return "not a SLURM job: not requeued"
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"could not requeue SLURM job {job}: {error}"
    if result.returncode != 0:
        return f"could not requeue SLURM job {job}: {result.stderr.strip() or result.returncode}"
    return f"requeued SLURM job {job}"


def preemption_callback(rolling: Any, slurm_requeue: bool = True) -> Any:
    """The Lightning callback that turns a stop signal into a checkpoint at a clean step.

    ``rolling`` is the run's :func:`~normzoo.checkpoints.rolling.rolling_checkpoints` callback: when
    the stop comes right after a validation, the checkpoint it wrote there is the one to keep
    (Lightning resumes exactly from a validation-end state, not from one saved after it).
    """
    import torch
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    class StopOnSignal(Callback):
        """Checkpoint at the end of the current optimizer step when a stop signal arrives."""

        def __init__(self) -> None:
            self.received: int | None = None  # the signal this process got, if any
            self.agreed: int | None = None  # the signal every process acts on
            self.saved_path: str | None = None
            self.requeue_note = ""
            self._pid = os.getpid()  # the process whose signals these are (on_train_start's)

        def _handle(self, signum: int, _frame: Any) -> None:
            if os.getpid() != self._pid:
                # A data-loader worker forked with this handler (Ctrl-C reaches the terminal's
                # whole process group): it serves batches until this process stops it.
                return
            if self.received is not None and signum == signal.SIGINT:
                self._say("second Ctrl-C: stopping at once, without a checkpoint")
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)  # ends as Ctrl-C ends a program: 128 + 2
                return
            if self.received is None:
                self.received = signum
                again = " (Ctrl-C again stops at once, without one)" \
                    if signum == signal.SIGINT else ""
                self._say(f"{signal.Signals(signum).name}: stopping after this step (and its "
                          f"validation, if one is due) with a checkpoint{again}")
                launcher = getattr(self._trainer.strategy, "launcher", None)
                # The processes this one launched stop with it. Not for Ctrl-C: the terminal
                # sends it to all of them already, and a second one would stop them at once
                # (a SIGINT to this process alone reaches the others through the all-reduce).
                if launcher is not None and hasattr(launcher, "procs") and \
                        signum != signal.SIGINT:
                    launcher.kill(signum)

        def _say(self, message: str) -> None:
            # os.write, not print: a signal can interrupt a print to stderr, and a buffered
            # stream entered again from its own handler raises.
            if self._trainer.is_global_zero:
                os.write(2, f"\n{message}\n".encode())

        def on_train_start(self, trainer, pl_module) -> None:
            # After Lightning registered its handlers (which stop mid-validation without a
            # checkpoint): ours replace them for the signals we act on; Lightning's teardown
            # restores whatever was there before fit.
            import threading

            self._trainer = trainer
            self._pid = os.getpid()
            if threading.current_thread() is not threading.main_thread():
                return
            for signum in STOP_SIGNALS:
                # An ignored SIGINT stays ignored, as Python leaves it: a shell script starts
                # its background jobs so, that Ctrl-C at the terminal does not reach them.
                if signum != signal.SIGINT or signal.getsignal(signum) is not signal.SIG_IGN:
                    signal.signal(signum, self._handle)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            loop = trainer.fit_loop.epoch_loop
            if loop._should_accumulate():
                return  # mid-accumulation: the step is not finished
            signum = self.received or 0
            if trainer.world_size > 1:  # every rank must stop at the same step
                flag = torch.tensor([signum], device=trainer.strategy.root_device)
                signum = int(trainer.strategy.reduce(flag, reduce_op="max").item())
            if not signum:
                return
            if self.agreed:  # the predicted validation did not come: stop now
                trainer._signal_connector.received_sigterm = True
                return
            self.agreed = signum
            every = trainer.val_check_batch
            validating = isinstance(every, int) and every > 0 and \
                loop.total_batch_idx % every == every - 1 and trainer.enable_validation
            if not validating:  # else on_validation_end stops after the validation
                trainer._signal_connector.received_sigterm = True

        def on_validation_end(self, trainer, pl_module) -> None:
            if self.agreed and not trainer.sanity_checking:
                trainer._signal_connector.received_sigterm = True

        def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
            if not isinstance(exception, SIGTERMException) or not self.agreed:
                return
            last = rolling.dirpath / "last.ckpt"
            if rolling.saved_step != trainer.global_step:
                trainer.save_checkpoint(last, weights_only=False)
            self.saved_path = str(last)
            if (slurm_requeue and self.agreed == REQUEUE_SIGNAL and trainer.is_global_zero
                    and slurm_job_id() is not None):
                self.requeue_note = requeue()

    return StopOnSignal()
