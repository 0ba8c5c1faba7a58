"""What a training step makes the host wait for on a GPU, counted on the CPU.

On a GPU, reading a tensor's value on the host (``.item()``, ``float(t)``, ``bool(t)``,
``.tolist()``, ``.cpu()``), copying a host number to the device, and
``torch.cuda.synchronize()`` each wait for every kernel queued so far, so the host stops
queueing the next step's. On a CPU the same calls are made, so they can be counted: a tiny run
must make them only at the steps whose metrics are written (``trainer.log_every_steps``), but
for the divergence guard's verdict, which must reach the host before the optimizer step.
"""

from __future__ import annotations

import csv
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tiny import tiny
from torch.overrides import TorchFunctionMode

import normzoo.run.callbacks.logs as logs
import normzoo.run.console as console
from normzoo.recipe import from_dict
from normzoo.run import training as train
from normzoo.tasks.base import TaskModule
from normzoo.tasks.compiled import CompileCount
from normzoo.tasks.translation.module import TranslationModule

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

READS = {"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "cpu", "numpy"}
# Reads of host tensors on a GPU too: AdamW's step counts (kept on the host unless fused), the
# data loader's seed and the generators' states (the FLOPs count's, once), CPU tensors there.
ON_THE_HOST = ("torch/optim/", "torch/utils/data/", "normzoo/checkpoints/rng_state.py")
EVERY = 5


class Reads(TorchFunctionMode):
    """Each read of a tensor's value during training: (global step, the normzoo or Lightning
    line that made it)."""

    def __init__(self, trainer: Any) -> None:
        super().__init__()
        self.trainer, self.seen = trainer, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS and self.trainer.training:
            frames = [f for f in traceback.extract_stack()[:-1] if "overrides" not in f.filename]
            where = f"{frames[-1].filename}:{frames[-1].lineno}"
            if not any(part in where for part in ON_THE_HOST):
                self.seen.append((self.trainer.global_step, where))
        return func(*args, **(kwargs or {}))


def _reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: bool) -> list:
    """The reads of a 20-step run logging every 5 steps, its progress bar drawn as on a
    terminal (which reads the bar's metrics)."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(console, "is_terminal", lambda stream: True)
    modes: list[Reads] = []
    start, end = TaskModule.on_train_start, TaskModule.on_train_end

    def on_train_start(self) -> None:
        start(self)
        modes.append(Reads(self.trainer))
        modes[-1].__enter__()

    def on_train_end(self) -> None:
        modes[-1].__exit__(None, None, None)
        end(self)

    monkeypatch.setattr(TaskModule, "on_train_start", on_train_start)
    monkeypatch.setattr(TaskModule, "on_train_end", on_train_end)
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, diagnostics={"guard": guard},
                            trainer={"max_steps": 20, "val_every_steps": 20,
                                     "log_every_steps": EVERY, "progress_bar": True}))
    train.run(recipe, "tiny.yaml")
    return modes[0].seen


def test_a_step_reads_no_tensor_on_the_host_between_logged_steps(tmp_path, monkeypatch):
    seen = _reads(tmp_path, monkeypatch, guard=False)
    # Lightning writes the metrics of the step before each multiple of EVERY once it is done.
    between = [(step, where) for step, where in seen if step % EVERY]
    assert not between, between[:5]
    assert {step for step, _ in seen} <= {5, 10, 15, 20}


def test_the_divergence_guard_is_the_one_read_of_every_step(tmp_path, monkeypatch):
    seen = _reads(tmp_path, monkeypatch, guard=True)
    between = {where for step, where in seen if step % EVERY}
    assert len(between) == 1 and "diagnostics/callbacks.py" in between.pop()
    assert {step for step, _ in seen} == set(range(21))  # every step, and the last write


# -- the throughput's clock ---------------------------------------------------------------------


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_throughput_waits_for_the_gpu_only_where_its_figures_read_the_clock(
        tmp_path, monkeypatch, accumulate):
    """As on a GPU (the device check and ``torch.cuda.synchronize`` stood in): each batch whose
    end a logged figure reads, and the one before it, waited; no other training batch did."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(logs, "on_gpu", lambda trainer: True)
    batches: list[dict[str, Any]] = []  # every training batch's end, in order
    waits: list[str] = []
    update, compute = logs.TrainingThroughput._update, logs.TrainingThroughput._compute

    def recording_update(self, trainer, *args):
        if trainer.state.stage == "train":
            batches.append({"waited": False, "logged": False, "step": trainer.global_step})
        update(self, trainer, *args)

    def recording_compute(self, trainer, *args):
        if trainer._logger_connector.should_update_logs and trainer.state.stage == "train":
            batches[-1]["logged"] = True
        compute(self, trainer, *args)

    def synchronize(*args) -> None:
        caller = sys._getframe(1)
        waits.append(caller.f_code.co_name)
        if caller.f_code.co_name == "_update" and caller.f_locals["training"]:
            batches[-1]["waited"] = True

    monkeypatch.setattr(logs.TrainingThroughput, "_update", recording_update)
    monkeypatch.setattr(logs.TrainingThroughput, "_compute", recording_compute)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)}, diagnostics={"guard": False},
                            trainer={"max_steps": 9, "val_every_steps": 4, "log_every_steps": 3,
                                     "accumulate": accumulate}))
    train.run(recipe, "tiny.yaml")

    logged = [i for i, b in enumerate(batches) if b["logged"]]
    assert len(logged) == 3  # steps 2, 5 and 8
    for i in logged:  # the rate's window: this batch's end and the one before
        assert batches[i]["waited"] and batches[i - 1]["waited"], (i, batches)
    waited = sum(b["waited"] for b in batches)
    assert waited <= (accumulate + 1) * len(logged) < len(batches)
    assert "on_validation_start" in waits  # training's kernels counted as training's
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/device/items_per_sec")]
    assert {int(r["step"]) for r in rows} == {2, 5, 8}
    assert all(float(r["train/device/items_per_sec"]) > 0 for r in rows)


# -- a compiled run's count ---------------------------------------------------------------------


def test_the_compile_count_is_logged_only_where_it_is_written(monkeypatch):
    """Logging a host number copies it to the GPU, which waits: only at written steps."""
    task = TranslationModule(from_dict(tiny(trainer={"compile": True})), 120)
    assert isinstance(task._compiles, CompileCount)  # nothing compiles until a step runs
    logged: list[tuple] = []
    monkeypatch.setattr(task, "log", lambda name, value, **kw: logged.append((name, value)),
                        raising=False)
    for written in (False, True, False):
        task._trainer = SimpleNamespace(
            _logger_connector=SimpleNamespace(should_update_logs=written),
            is_global_zero=True, global_step=0)
        task.on_train_batch_end(None, {"tokens": torch.zeros(2, 3)}, 0)
    assert logged == [("compile/compiles", 0.0)]
