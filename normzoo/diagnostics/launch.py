"""Where a sweep's cells run: one after another in this process, ``jobs`` at a time on this
machine, or as SLURM jobs; the last two through ``submitit``, which starts, watches and cancels
the jobs, so normzoo keeps no process management of its own.

Each cell is an ordinary run in its own folder that resumes from its newest checkpoint, so a
sweep stopped anywhere (the sweep process, a job, the machine) is continued by running the same
command again: finished cells are collected, the others start or resume.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
            # submitit's warning signal (USR2) two minutes before the time limit; a cell's
            # run then saves on SLURM's SIGTERM like any normzoo run, and re-running the sweep
            # resumes it from that checkpoint.
            "signal_delay_s": 120,
        }
        if self.partition:
            params["partition"] = self.partition
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        params.update(self.extra)
        return params


def threads_per_job(jobs: int) -> int:
    """This machine's cores shared out among ``jobs`` cells running at once (at least one)."""
    return max(1, (os.cpu_count() or 1) // max(jobs, 1))


def run_one(work: Callable[[Cell], Any], cell: Cell, threads: int | None) -> Any:
    """One cell inside a job: torch's threads set first (a job's share of the machine)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return work(cell)


def run_cells(cells: list[Cell], work: Callable[[Cell], Any], folder: Path, *, jobs: int = 1,
              launcher: str = "local", slurm: Slurm | None = None,
              after_each: Callable[[], None] = lambda: None, poll_s: float = 2.0) -> None:
    """Run ``work(cell)`` for every cell, calling ``after_each`` whenever one has finished.

    ``launcher="local"`` with ``jobs=1`` runs them here one after another; with ``jobs>1``,
    ``jobs`` at a time as submitit's local jobs (processes of their own), each with
    :func:`threads_per_job` torch threads. ``launcher="slurm"`` submits them as one SLURM job
    array, at most ``jobs`` running at once, and waits for them. A failed cell's error is
    raised once the cells already running have finished; the jobs of an interrupted sweep
    are cancelled.
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
            pending = [executor.submit(run_one, work, cell, None) for cell in cells]
        _wait(pending, [], jobs, None, after_each, poll_s)
        return
    executor = submitit.LocalExecutor(folder=logs)
    executor.update_parameters(timeout_min=WEEK_MIN)
    threads = threads_per_job(jobs)
    queue = list(cells)
    _wait([], queue, jobs, lambda cell: executor.submit(run_one, work, cell, threads),
          after_each, poll_s)


def _wait(running: list[Any], queue: list[Cell], jobs: int,
          submit: Callable[[Cell], Any] | None, after_each: Callable[[], None],
          poll_s: float) -> None:
    """Keep ``jobs`` of the queued cells running (submitting as others finish) until all are
    done; the first failure is raised at the end, the rest cancelled on an interrupt."""
    failures: list[BaseException] = []
    try:
        while running or queue:
            while submit is not None and queue and len(running) < jobs:
                running.append(submit(queue.pop(0)))
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
        for job in running:
            job.cancel(check=False)
        raise
    if failures:
        raise failures[0]
