"""The stop signal turned into a checkpoint at a clean step: :class:`StopOnSignal`.

Why a signal only *requests* the stop, and what ``normzoo train`` does after it, is told in
:mod:`normzoo.run.preemption`, which keeps the signal-free parts (the exception, SLURM's job id
and requeue) so that a sweep can catch :class:`~normzoo.run.preemption.Preempted` without
importing Lightning.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from normzoo.run.callbacks.checkpoints import RollingCheckpoints
from normzoo.run.preemption import REQUEUE_SIGNAL, STOP_SIGNALS, requeue, slurm_job_id


class StopOnSignal(Callback):
    """Checkpoint at the end of the current optimizer step when a stop signal arrives.

    ``rolling`` is the run's :class:`~normzoo.run.callbacks.checkpoints.RollingCheckpoints`:
    when the stop comes right after a validation, the checkpoint it wrote there is the one to
    keep (Lightning resumes exactly from a validation-end state, not from one saved after it).
    The run reads ``agreed``, ``saved_path`` and ``requeue_note`` from this instance once
    ``fit`` has stopped, and hands out :meth:`request` while ``fit`` runs
    (:func:`~normzoo.run.preemption.taking_stop_requests`), for a stop asked for by other
    means than a signal this process gets (a sweep cell's job).
    """

    def __init__(self, rolling: RollingCheckpoints, slurm_requeue: bool = True) -> None:
        self.rolling, self.slurm_requeue = rolling, slurm_requeue
        self.received: int | None = None  # the signal this process got, if any
        self.agreed: int | None = None  # the signal every process acts on
        self.saved_path: str | None = None
        self.requeue_note = ""
        self.listening = False  # its handlers are set: from on_train_start to the end of fit
        self._pid = os.getpid()  # the process whose signals these are (on_train_start's)

    def request(self, signum: int) -> bool:
        """Ask for the stop that ``signum`` asks for, as its handler does; False, and nothing
        asked, unless the handlers are set (training has started and not ended): before,
        there is no step to finish, and after, nothing to stop."""
        if not self.listening:
            return False
        self._handle(signum, None)
        return True

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
        self._trainer = trainer
        self._pid = os.getpid()
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            # An ignored SIGINT stays ignored, as Python leaves it: a shell script starts
            # its background jobs so, that Ctrl-C at the terminal does not reach them.
            if signum != signal.SIGINT or signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, self._handle)
        self.listening = True

    def on_fit_end(self, trainer, pl_module) -> None:
        # Lightning's teardown has put back the handlers from before fit.
        self.listening = False

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
        last = self.rolling.dirpath / "last.ckpt"
        if self.rolling.saved_step != trainer.global_step:
            trainer.save_checkpoint(last, weights_only=False)
        self.saved_path = str(last)
        if (self.slurm_requeue and self.agreed == REQUEUE_SIGNAL and trainer.is_global_zero
                and slurm_job_id() is not None):
            self.requeue_note = requeue()
