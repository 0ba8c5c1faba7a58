"""One cell of a sweep as a ``submitit`` job (:class:`CellJob`), on this machine or on SLURM.

Pre-emption and time limits of a cell's job. submitit asks SLURM for its own warning signal
(``--signal=USR2@<signal_delay_s>``; ``SUBMITIT_PREEMPT_SIGNAL`` picks another) and, in the job,
binds it to its handler, which calls the job's ``checkpoint()``, pickles the submission that
returns and requeues the job, or, for a plain function, raises ``UncompletedJobError`` (timed
out) or requeues it and exits (pre-empted) at once, wherever the run is: in the middle of a
step, with no checkpoint. A cell's job therefore lets that signal first stop the run the way
normzoo stops on SIGTERM (at the end of the current optimizer step, with ``last.ckpt``), and
only then hands over to submitit's handler: ``checkpoint()`` gives the same cell again, and the
requeued job resumes it from that checkpoint. submitit requeues a job after its time limit 3
times at most (``SlurmExecutor``'s ``max_num_timeout``); a cell that needs longer then fails
with ``UncompletedJobError``, and running the sweep again resumes it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from submitit import JobEnvironment
from submitit.helpers import Checkpointable, DelayedSubmission

from normzoo.run.preemption import Preempted, request_stop

Cell = dict[str, str]


def run_one(work: Callable[[Cell], Any], cell: Cell, threads: int | None) -> Any:
    """One cell inside a job: torch's threads set first (a job's share of the machine)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return work(cell)


class CellJob(Checkpointable):
    """One cell as a submitit job: ``work(cell)`` with the job's share of torch threads.

    Checkpointable, so that submitit's pre-emption/time-limit signal requeues the job rather
    than failing it; :meth:`checkpoint` resubmits the same cell, which resumes from its newest
    checkpoint. While the cell's run trains, that signal first stops it at the end of the
    current step with a checkpoint (normzoo's stop, the one SIGTERM gets), and submitit's own
    handler (checkpoint, requeue, exit) runs once the run has stopped; at any other moment
    (before training, while testing) submitit's handler runs at once.
    """

    def __init__(self, work: Callable[[Cell], Any], cell: Cell, threads: int | None,
                 gpu: str | None = None, *, local: bool = False) -> None:
        self.work, self.cell, self.threads, self.gpu = work, cell, threads, gpu
        self.local = local

    def __call__(self) -> Any:
        if self.gpu is not None:  # before anything starts CUDA (local.GpuShare)
            os.environ["CUDA_VISIBLE_DEVICES"] = self.gpu
        if hasattr(signal, "pthread_sigmask"):  # Ctrl-C, held while the job started
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if self.local and threading.current_thread() is threading.main_thread():
            # submitit's job ignores SIGTERM (on SLURM its own signal requeues); a local
            # cell stopped by its sweep before it trains (data, model, sanity check) would
            # otherwise train to its end. While it trains, normzoo's stop replaces this.
            signal.signal(signal.SIGTERM, _end_on_sigterm)
        # submitit's public name for it ("USR2" unless SUBMITIT_PREEMPT_SIGNAL says otherwise)
        requeue_signal = getattr(signal, f"SIG{JobEnvironment.USR_SIG}")
        submitit_handler = signal.getsignal(requeue_signal)
        if not callable(submitit_handler) or \
                threading.current_thread() is not threading.main_thread():
            return run_one(self.work, self.cell, self.threads)  # not in a submitit job
        stopping: list[int] = []

        def stop_then_requeue(signum: int, frame: Any) -> None:
            # While the run trains, it takes the stop SIGTERM gets (request_stop: the run's
            # own, handed out while it trains), asked for as SIGTERM, not this signal, as
            # that is what it passes on to the processes it launched.
            if request_stop(signal.SIGTERM):
                stopping.append(signum)  # the run stops at its next clean step, saves, raises
            else:
                submitit_handler(signum, frame)

        signal.signal(requeue_signal, stop_then_requeue)
        try:
            return run_one(self.work, self.cell, self.threads)
        except Preempted:
            if not stopping:  # another signal (SIGTERM, SIGUSR1): the run's own stop, as ever
                raise
            name = signal.Signals(stopping[0]).name
            print(f"{name} (submitit's pre-emption signal): the run stopped with a checkpoint; "
                  "requeueing the cell", file=sys.stderr, flush=True)
            submitit_handler(stopping[0], None)  # checkpoint(), requeue and exit (or fail)
            raise
        finally:
            signal.signal(requeue_signal, submitit_handler)

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        """What submitit's handler pickles and the requeued job runs: the same cell."""
        return DelayedSubmission(CellJob(self.work, self.cell, self.threads, self.gpu,
                                         local=self.local))


def _end_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)
