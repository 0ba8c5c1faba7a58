"""Where a sweep's cells run: one after another in this process, ``jobs`` at a time on this
machine (:mod:`~normzoo.sweep.local`), or as SLURM jobs (:mod:`~normzoo.sweep.slurm`); the last
two through ``submitit``, which starts, watches and cancels the jobs, so normzoo keeps no process
management of its own.

Each cell is an ordinary run in its own folder that resumes from its newest checkpoint, so a
sweep stopped anywhere (the sweep process, a job, the machine) is continued by running the same
command again: finished cells are collected, the others start or resume. How a cell's job stops
and is requeued on pre-emption or at its time limit: :mod:`~normzoo.sweep.cell_job`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from normzoo.sweep.cell_job import Cell, CellJob
from normzoo.sweep.local import GpuShare, _stop_local, _StopSignals, threads_per_job, visible_gpus
from normzoo.sweep.slurm import Slurm, _cancel

# A job's limit: a week. submitit's local default (5 minutes) would kill any real cell.
WEEK_MIN = 7 * 24 * 60


def run_cells(cells: list[Cell], work: Callable[[Cell], Any], folder: Path, *, jobs: int = 1,
              launcher: str = "local", slurm: Slurm | None = None,
              after_each: Callable[[], None] = lambda: None, poll_s: float = 2.0) -> None:
    """Run ``work(cell)`` for every cell, calling ``after_each`` whenever one has finished.

    ``launcher="local"`` with ``jobs=1`` runs them here one after another; with ``jobs>1``,
    ``jobs`` at a time as submitit's local jobs (processes of their own), each with
    :func:`~normzoo.sweep.local.threads_per_job` torch threads and, on a machine with GPUs, one
    GPU (:class:`~normzoo.sweep.local.GpuShare`). ``launcher="slurm"`` submits them as one SLURM
    job array, at most ``jobs`` running at once, and waits for them. A failed cell's error is
    raised once the cells already running have finished. An interrupted sweep stops its
    running local cells with a checkpoint and waits for them
    (:class:`~normzoo.sweep.local._StopSignals`), or cancels its SLURM jobs.
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
