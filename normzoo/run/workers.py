"""How many processes this machine may run for a training run's loaders: the cores this process
may use, the training processes per machine, and the bound on ``data.num_workers`` (a leaf of
``run/``: the machine's checks and its description both read it)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from normzoo.errors import Problem

if TYPE_CHECKING:
    from normzoo.recipe import Recipe, TrainerConfig


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity (a container's or a batch job's share),
    not the machine's count, which ``os.cpu_count()`` gives."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def processes_per_machine(trainer: TrainerConfig) -> int:
    devices = trainer.devices
    if devices == -1:
        return os.cpu_count() or 1
    return devices if isinstance(devices, int) else 1


WORKERS_PER_CPU = 4  # data.num_workers: loader processes a machine may hold per usable CPU


def loader_workers_problem(recipe: Recipe) -> Problem | None:
    """``data.num_workers`` where every training process's loader processes together would be
    more than :data:`WORKERS_PER_CPU` per usable CPU: each worker is a forked process that
    collates on a CPU, so beyond that they only contend (and 100,000 of them fork until the
    machine's process limit or its memory stops the run). ``auto`` is this machine's own
    choice (:func:`~normzoo.run.machine.loader_workers`), never refused."""
    workers = recipe.data.num_workers
    if workers == "auto" or workers == 0:
        return None
    cpus = usable_cores()
    processes = processes_per_machine(recipe.trainer)
    bound = WORKERS_PER_CPU * cpus
    if workers * processes <= bound:
        return None
    each = f" in each of {processes} training processes" if processes > 1 else ""
    most = bound // processes
    return Problem("data.num_workers", (
        f"{workers:,} loader processes{each} are more than this machine can run: it has {cpus} "
        f"CPU{'s' if cpus != 1 else ''}, and more than {WORKERS_PER_CPU} loader processes per "
        f"CPU only contend for them (or exhaust the process limit); use data.num_workers=auto "
        f"(this machine's choice) or {most} or fewer"))
