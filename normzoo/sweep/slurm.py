"""A sweep's cells as SLURM jobs (``normzoo sweep --launcher slurm``): what each job asks for,
and cancelling them when the sweep is interrupted. How a job stops and is requeued at its warning
signal: :mod:`~normzoo.sweep.cell_job`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


def _cancel(jobs: list[Any]) -> None:
    """SLURM: cancel the array's running jobs (scancel; each cell saves on SIGTERM)."""
    for job in jobs:
        job.cancel(check=False)
