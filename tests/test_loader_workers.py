"""``data.num_workers: auto``: loader processes where batches go to a GPU, none on a CPU, and
never more than the machine's CPUs per training process leave beside the loop; a written number
is kept. (``recipe.yaml`` records what ran: ``tests/test_shapes.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tiny import tiny

from normzoo.recipe import from_dict
from normzoo.run import machine
from normzoo.run.machine import LOADER_WORKERS, loader_workers
from normzoo.tasks.datamodule import TextDataModule


def on_cuda(monkeypatch, cpus: int) -> None:
    monkeypatch.setattr(machine, "training_device", lambda trainer: object())  # CUDA's props
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)


def test_auto_is_no_worker_on_a_cpu():
    recipe = from_dict(tiny())
    assert recipe.data.num_workers == "auto"
    assert loader_workers(recipe).data.num_workers == 0


@pytest.mark.parametrize("cpus, devices, workers", [
    (16, 1, LOADER_WORKERS), (16, 4, 3), (3, 1, 2), (1, 1, 0), (8, 8, 0)])
def test_auto_on_a_cuda_device_leaves_a_cpu_per_process_for_the_loop(
        monkeypatch, cpus: int, devices: int, workers: int):
    on_cuda(monkeypatch, cpus)
    recipe = from_dict(tiny(trainer={"accelerator": "gpu", "devices": devices}))
    assert loader_workers(recipe).data.num_workers == workers


def test_a_written_number_is_kept_on_any_device(monkeypatch):
    assert loader_workers(from_dict(tiny(data={"num_workers": 2}))).data.num_workers == 2
    on_cuda(monkeypatch, 16)
    gpu = tiny(trainer={"accelerator": "gpu"}, data={"num_workers": 0})
    assert loader_workers(from_dict(gpu)).data.num_workers == 0


def test_an_unresolved_auto_loads_in_the_process(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path))
    module = TextDataModule(from_dict(tiny()), None, show_progress=False)
    assert module.workers == 0
    assert module.val_dataloader().num_workers == 0

