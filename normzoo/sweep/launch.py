"""Where a sweep's cells run: one after another in this process, ``jobs`` at a time on this
machine, or as SLURM jobs; the last two through ``submitit``, which starts, watches and cancels
the jobs, so normzoo keeps no process management of its own.

Each cell is an ordinary run in its own folder that resumes from its newest checkpoint, so a
sweep stopped anywhere (the sweep process, a job, the machine) is continued by running the same
command again: finished cells are collected, the others start or resume.

Pre-emption and time limits of a cell's job (:class:`CellJob`). submitit asks SLURM for its own
warning signal (``--signal=USR2@<signal_delay_s>``; ``SUBMITIT_PREEMPT_SIGNAL`` picks another)
and, in the job, binds it to its handler, which calls the job's ``checkpoint()``, pickles the
submission that returns and requeues the job, or, for a plain function, raises
``UncompletedJobError`` (timed out) or requeues it and exits (pre-empted) at once, wherever the
run is: in the middle of a step, with no checkpoint. A cell's job therefore lets that signal
first stop the run the way normzoo stops on SIGTERM (at the end of the current optimizer step,
with ``last.ckpt``), and only then hands over to submitit's handler: ``checkpoint()`` gives the
same cell again, and the requeued job resumes it from that checkpoint. submitit requeues a job
after its time limit 3 times at most (``SlurmExecutor``'s ``max_num_timeout``); a cell that
needs longer then fails with ``UncompletedJobError``, and running the sweep again resumes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submitit import JobEnvironment
from submitit.helpers import Checkpointable, DelayedSubmission

from normzoo.run.hardware import usable_cores
from normzoo.run.preemption import Preempted

Cell = dict[str, str]
# A job's limit: a week. submitit's local default (5 minutes) would kill any real cell.
WEEK_MIN = 7 * 24 * 60


@dataclass(frozen=True)
class Slurm:
    """What each cell's SLURM job asks for (``normzoo sweep --launcher slurm``)."""

    partition: str | None = None
    time_min: int = 24 * 60
    gpus: int = 0
    cpus: int = 4
    extra: dict[str, Any] = field(default_factory=dict)  # more sbatch settings, by name

    def parameters(self, parallel: int) -> dict[str, Any]:
        """``submitit.SlurmExecutor.update_parameters`` arguments (one task, one node per
        cell)."""
        params: dict[str, Any] = {
            "time": self.time_min, "cpus_per_task": self.cpus, "ntasks_per_node": 1,
            "nodes": 1, "array_parallelism": parallel, "job_name": "normzoo-sweep",
            # submitit's warning signal (SIGUSR2, or SUBMITIT_PREEMPT_SIGNAL) two minutes
            # before the time limit: time for the cell's run to finish its step and save it
            # (CellJob), then submitit requeues the job with CellJob.checkpoint(), the same
            # cell, which resumes from that checkpoint. SLURM's SIGTERM at the limit leaves
            # only KillWait (30 s by default) before SIGKILL.
            "signal_delay_s": 120,
        }
        if self.partition:
            params["partition"] = self.partition
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        params.update(self.extra)
        return params


def threads_per_job(jobs: int) -> int:
    """The cores this process may use (its CPU affinity: a container's or a batch job's
    share, not the machine's count) shared out among ``jobs`` cells at once (at least one)."""
    return max(1, usable_cores() // max(jobs, 1))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, named as CUDA names them to it: the entries of
    ``CUDA_VISIBLE_DEVICES`` where it is set (indexes, UUIDs or MIG names), else every device
    torch counts (none on a machine without CUDA)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [name.strip() for name in listed.split(",") if name.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


class GpuShare:
    """One GPU for each local job: the one the fewest running jobs hold, shared once the jobs
    outnumber the GPUs.

    submitit's local executor sets a job's ``CUDA_VISIBLE_DEVICES`` to the GPUs it asks for
    and hides every other, so a job that asks for none sees no GPU and trains on the CPU
    (``--jobs 4`` on a GPU machine once did exactly that). A GPU named by index is asked for
    through submitit's ``visible_gpus``, so the job's processes start with it; the cell's job
    also sets ``CUDA_VISIBLE_DEVICES`` itself before anything starts CUDA (:class:`CellJob`),
    which is how a GPU named by UUID or MIG name, which ``visible_gpus`` does not take, gets
    there.
    """

    def __init__(self, gpus: list[str]) -> None:
        self.gpus = gpus
        self.held: list[tuple[Any, str]] = []

    def take(self) -> str | None:
        """The GPU for the next job (None without GPUs); :meth:`hold` records its job."""
        if not self.gpus:
            return None
        self.held = [(job, gpu) for job, gpu in self.held if not job.done()]
        load = {gpu: 0 for gpu in self.gpus}
        for _, gpu in self.held:
            load[gpu] += 1
        return min(self.gpus, key=lambda gpu: load[gpu])  # the first of the least held

    def hold(self, job: Any, gpu: str | None) -> None:
        if gpu is not None:
            self.held.append((job, gpu))

    @staticmethod
    def parameters(gpu: str | None) -> dict[str, Any]:
        """``LocalExecutor.update_parameters`` arguments for a job on ``gpu``: by index
        through submitit; none otherwise (the job sets a named GPU itself)."""
        if gpu is not None and gpu.isdigit():
            return {"gpus_per_node": 1, "visible_gpus": (int(gpu),)}
        return {"gpus_per_node": 0, "visible_gpus": ()}


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
        if self.gpu is not None:  # before anything starts CUDA (GpuShare)
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
            # While the run trains, SIGTERM is normzoo's stop (preemption.StopOnSignal, which
            # train.py finds by that name too); it is handed SIGTERM, not this signal, as that
            # is what it passes on to the processes it launched.
            stop = signal.getsignal(signal.SIGTERM)
            if callable(stop) and type(getattr(stop, "__self__", None)).__name__ == \
                    "StopOnSignal":
                stopping.append(signum)  # the run stops at its next clean step, saves, raises
                stop(signal.SIGTERM, frame)
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


def run_cells(cells: list[Cell], work: Callable[[Cell], Any], folder: Path, *, jobs: int = 1,
              launcher: str = "local", slurm: Slurm | None = None,
              after_each: Callable[[], None] = lambda: None, poll_s: float = 2.0) -> None:
    """Run ``work(cell)`` for every cell, calling ``after_each`` whenever one has finished.

    ``launcher="local"`` with ``jobs=1`` runs them here one after another; with ``jobs>1``,
    ``jobs`` at a time as submitit's local jobs (processes of their own), each with
    :func:`threads_per_job` torch threads and, on a machine with GPUs, one GPU
    (:class:`GpuShare`). ``launcher="slurm"`` submits them as one SLURM job
    array, at most ``jobs`` running at once, and waits for them. A failed cell's error is
    raised once the cells already running have finished. An interrupted sweep stops its
    running local cells with a checkpoint and waits for them (:class:`_StopSignals`), or
    cancels its SLURM jobs.
    """
    if launcher == "local" and jobs <= 1:
        for cell in cells:
            work(cell)
            after_each()
        return
    import submitit

    logs = folder / ".submitit"
    if launcher == "slurm":
        executor: Any = submitit.SlurmExecutor(folder=logs)
        executor.update_parameters(**(slurm or Slurm()).parameters(jobs))
        with executor.batch():
            pending = [executor.submit(CellJob(work, cell, None)) for cell in cells]
        _wait(pending, [], jobs, None, after_each, poll_s, _cancel)
        return
    executor = submitit.LocalExecutor(folder=logs)
    executor.update_parameters(timeout_min=WEEK_MIN)
    threads = threads_per_job(jobs)
    share = GpuShare(visible_gpus())

    with _StopSignals() as signals:

        def submit(cell: Cell) -> Any:
            gpu = share.take()
            executor.update_parameters(**share.parameters(gpu))
            with signals.starting_job():
                job = executor.submit(CellJob(work, cell, threads, gpu, local=True))
                share.hold(job, gpu)
            return job

        _wait([], list(cells), jobs, submit, after_each, poll_s, _stop_local,
              signals.raise_pending)


class _StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM to a sweep whose cells run as local jobs.

    Each stops the sweep as an exception (KeyboardInterrupt, or SystemExit(143) for SIGTERM:
    ``kill``, a scheduler), after which :func:`_stop_local` stops the running cells with a
    checkpoint, rather than leaving them running when this process dies. Never while a job
    starts, though: raised there, it would leave a started job out of the ones stopped, so
    there it is only noted, and :meth:`raise_pending` raises it once the job is counted.
    While the cells stop, a second Ctrl-C ends the wait (the terminal gives it to the cells
    too, and they stop at once) and a second SIGTERM is ignored.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.starting = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                # An ignored SIGINT stays ignored, as for a run (preemption.StopOnSignal): a
                # shell starts its background jobs so, and their cells inherit it.
                if signum == signal.SIGINT and signal.getsignal(signum) is signal.SIG_IGN:
                    continue
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *_exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.starting:
            self.signum = self.signum or signum
            return
        if self.signum is None:
            self.signum = signum
            raise self._exception()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt

    def _exception(self) -> BaseException:
        if self.signum == signal.SIGINT:
            return KeyboardInterrupt()
        return SystemExit(128 + (self.signum or signal.SIGTERM))

    def raise_pending(self) -> None:
        """Raise the stop noted while a job started, now that the job is counted."""
        if self.signum is not None:
            raise self._exception()

    @contextlib.contextmanager
    def starting_job(self) -> Iterator[None]:
        """While a job's processes start: the stop signals noted, not raised, and SIGINT
        blocked, which those processes inherit.

        Ctrl-C reaches the terminal's whole process group. submitit's controller, between
        this process and the cell's, would take it as its own KeyboardInterrupt: a traceback
        on the terminal, then SIGINT and, a second later, SIGKILL to the cell, which needs the
        rest of its step to save. Started with SIGINT blocked, the controller never sees it;
        the cell's job unblocks it (:class:`CellJob`), so the cell stops as a run stops on
        Ctrl-C.
        """
        self.starting = True
        held = hasattr(signal, "pthread_sigmask")
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if held else None
        try:
            yield
        finally:
            if before is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
            self.starting = False


def _cancel(jobs: list[Any]) -> None:
    """SLURM: cancel the array's running jobs (scancel; each cell saves on SIGTERM)."""
    for job in jobs:
        job.cancel(check=False)


def _stop_local(jobs: list[Any]) -> None:
    """Stop the running local jobs as a run stops on SIGTERM, at the end of the current step
    with ``last.ckpt``, and wait for them, so that the sweep exits only once they have saved.

    SIGTERM goes to each job's controller, which passes it on to the cell's process: the only
    signal the cell gets when the sweep alone was sent one, and one a cell that had the
    terminal's Ctrl-C already is stopping on. A cell not yet training ends at once
    (:class:`CellJob`). A second Ctrl-C ends the wait (:class:`_StopSignals`).
    """
    if not jobs:
        return
    print(f"normzoo sweep: stopping {len(jobs)} running cell(s) at the end of their current "
          "step, each with a checkpoint; the same command resumes them (Ctrl-C again stops "
          "them at once, without one)", file=sys.stderr, flush=True)
    for job in jobs:
        # submitit's LocalJob keeps the controller's Popen, whose send_signal skips a process
        # it has already reaped (a bare pid could by then be another process's).
        process = getattr(job, "_process", None)
        if process is not None:
            process.send_signal(signal.SIGTERM)
    with contextlib.suppress(KeyboardInterrupt):
        while not all(job.done() for job in jobs):
            time.sleep(0.2)


def _wait(running: list[Any], queue: list[Cell], jobs: int,
          submit: Callable[[Cell], Any] | None, after_each: Callable[[], None],
          poll_s: float, stop: Callable[[list[Any]], None],
          started: Callable[[], None] = lambda: None) -> None:
    """Keep ``jobs`` of the queued cells running (submitting as others finish) until all are
    done; the first failure is raised at the end, and on an interrupt ``stop`` ends the
    running ones and no other starts. ``started`` runs after each job is counted."""
    failures: list[BaseException] = []
    try:
        while running or queue:
            while submit is not None and queue and len(running) < jobs:
                running.append(submit(queue.pop(0)))
                started()
            done = [job for job in running if job.done()]
            for job in done:
                running.remove(job)
                try:
                    job.result()
                except Exception as error:  # the others go on; reported at the end
                    failures.append(error)
                after_each()
            if not done:
                time.sleep(poll_s)
    except BaseException:
        stop(running)
        raise
    if failures:
        raise failures[0]
