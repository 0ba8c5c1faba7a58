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
  the callback's ``on_exception`` saves ``last.ckpt`` there;
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

The callback is :class:`~normzoo.run.callbacks.signals.StopOnSignal`; this module keeps what
needs no Lightning (the exception, SLURM's side, and :func:`request_stop`, by which a sweep
cell's job reaches the run that trains), so that a sweep catches :class:`Preempted` without
importing it. The run (:mod:`normzoo.run.endings`) records every ending.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator

from normzoo.errors import NormzooError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
REQUEUE_SIGNAL = signal.SIGUSR1


class Preempted(NormzooError):
    """Training was stopped by a signal after saving a checkpoint; exit code 128 + signal.

    ``what``: what was stopped and saved, without the message's advice on how to go on (a
    sweep, which gives advice of its own, reads it instead of parsing the message)."""

    def __init__(self, message: str, signum: int, *, what: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
        self.signum = signum
        self.what = message if what is None else what


class StopSignal(BaseException):
    """A stop signal raised where it came. A BaseException, as KeyboardInterrupt is, so that no
    ``except Exception`` on the way swallows it; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# The stop of the run training in this process now (its StopOnSignal's ``request``), newest last.
_stop_requests: list[Callable[[int], bool]] = []


@contextlib.contextmanager
def taking_stop_requests(request: Callable[[int], bool]) -> Iterator[None]:
    """While inside (a run's ``fit``), :func:`request_stop` asks ``request``. Signals reach a
    process, not a run: this is how code that holds no reference to the run (a sweep cell's
    job) reaches the run that trains in its process."""
    _stop_requests.append(request)
    try:
        yield
    finally:
        _stop_requests.remove(request)


def request_stop(signum: int) -> bool:
    """Ask the run that trains in this process to stop as ``signum`` stops it (at the end of the
    current step, with a checkpoint); False, and nothing asked, where none takes it now (before
    training has started, or after it ended)."""
    return bool(_stop_requests) and _stop_requests[-1](signum)


@contextlib.contextmanager
def signals_raise(signums: Iterable[int], *, only_unhandled: bool = False) -> Iterator[None]:
    """While inside, each of ``signums`` raises :class:`StopSignal` in this process (not in the
    data-loader workers it forks with these handlers). An ignored SIGINT stays ignored (a
    shell's background job); with ``only_unhandled``, so does every signal that has a handler
    of its own already (a run's or a sweep's stop). The handlers before are put back. Only the
    main thread may set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pid = os.getpid()

    def stop(signum: int, _frame: object) -> None:
        if os.getpid() == pid:
            raise StopSignal(signum)

    before = {signum: signal.getsignal(signum) for signum in signums}
    unhandled = (signal.SIG_DFL, signal.default_int_handler)
    taken = [signum for signum, handler in before.items()
             if not (handler is signal.SIG_IGN and signum == signal.SIGINT)
             and not (only_unhandled and handler not in unhandled)]
    for signum in taken:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum in taken:
            handler = before[signum]
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While inside, SIGTERM, SIGUSR1 and Ctrl-C raise :class:`StopSignal`
    (:func:`signals_raise`), so that the caller can say what was stopped and
    how to go on: for a stretch of work with no step to finish (the final test)."""
    with signals_raise(STOP_SIGNALS):
        yield


def requeue_note(signum: int, enabled: bool, rank_zero: bool = True) -> str:
    """For the SLURM warning signal with ``trainer.slurm_requeue`` in a SLURM job, requeue it
    (rank 0) and return what happened; else ""."""
    if not (enabled and rank_zero and signum == REQUEUE_SIGNAL and slurm_job_id() is not None):
        return ""
    return requeue()


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

