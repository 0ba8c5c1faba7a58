"""A sweep's cells as local jobs, ``jobs`` at a time on this machine: the cores shared out among
them (:func:`threads_per_job`), one GPU each (:class:`GpuShare`), and a stopped sweep stopping
its running cells with a checkpoint (:class:`_StopSignals`, :func:`_stop_local`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from normzoo.run.workers import usable_cores


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
    also sets ``CUDA_VISIBLE_DEVICES`` itself before anything starts CUDA
    (:class:`~normzoo.sweep.cell_job.CellJob`),
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
        the cell's job unblocks it (:class:`~normzoo.sweep.cell_job.CellJob`), so the cell
        stops as a run stops on Ctrl-C.
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


def _stop_local(jobs: list[Any]) -> None:
    """Stop the running local jobs as a run stops on SIGTERM, at the end of the current step
    with ``last.ckpt``, and wait for them, so that the sweep exits only once they have saved.

    SIGTERM goes to each job's controller, which passes it on to the cell's process: the only
    signal the cell gets when the sweep alone was sent one, and one a cell that had the
    terminal's Ctrl-C already is stopping on. A cell not yet training ends at once
    (:class:`~normzoo.sweep.cell_job.CellJob`). A second Ctrl-C ends the wait
    (:class:`_StopSignals`).
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
