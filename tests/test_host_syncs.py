"""What a training step makes the host wait for on a GPU, counted on the CPU (issue 61).

On a GPU, reading a tensor's value on the host (``.item()``, ``float(t)``, ``bool(t)``,
``.tolist()``, ``.cpu()``), copying a host number to the device, and
``torch.cuda.synchronize()`` each wait for every kernel queued so far, so the host stops
queueing the next step's. On a CPU the same calls are made, so they can be counted: a tiny run
logging every step, its divergence guard on and its progress bar drawn, makes none while it
trains. What is logged or checked reaches the host through :mod:`normzoo.io.late`'s copies,
whose reads never wait (they are told apart here by the mark that module sets on them); on a
GPU the gpu-marked tests check the same with ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import csv
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import lightning as L
import pytest
import torch
from tiny import tiny
from torch.overrides import TorchFunctionMode

import normzoo.run.callbacks.throughput as throughput
import normzoo.run.console as console
from normzoo.diagnostics.callbacks import DivergenceError
from normzoo.io.late import HOST_COPY
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
        late = bool(args) and getattr(args[0], HOST_COPY, False)  # a host copy: no wait
        if getattr(func, "__name__", "") in READS and self.trainer.training and not late:
            frames = [f for f in traceback.extract_stack()[:-1] if "overrides" not in f.filename]
            where = f"{frames[-1].filename}:{frames[-1].lineno}"
            if not any(part in where for part in ON_THE_HOST):
                self.seen.append((self.trainer.global_step, where))
        return func(*args, **(kwargs or {}))


def _reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: bool, every: int,
           **trainer: Any) -> list:
    """The reads of a 20-step run logging every ``every`` steps, its progress bar drawn as on
    a terminal (which shows the logged loss and rate)."""
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
                            trainer={"max_steps": 20, "val_every_steps": 10,
                                     "log_every_steps": every, "progress_bar": True,
                                     **trainer}))
    train.run(recipe, "tiny.yaml")
    return modes[0].seen


@pytest.mark.parametrize("guard", [True, False])
@pytest.mark.parametrize("every", [1, EVERY])
def test_a_training_step_reads_no_tensor_on_the_host(tmp_path, monkeypatch, guard, every):
    """Not at a logged step either: logging every step costs the device no wait."""
    assert _reads(tmp_path, monkeypatch, guard, every) == []


def test_where_the_optimizer_cannot_skip_on_the_device_the_guard_reads_before_each_update(
        tmp_path, monkeypatch):
    """foreach AdamW (16-mixed's, beside GradScaler) has no found_inf: the verdict must reach
    the host before the update, one read a step, the guard's alone."""
    import normzoo.tasks.base as base

    monkeypatch.setattr(base, "adamw_impl", lambda device, precision: "foreach")
    seen = _reads(tmp_path, monkeypatch, True, EVERY)
    assert {where.split(":")[0] for _, where in seen} == {
        str(Path(base.__file__).parent.parent / "diagnostics" / "callbacks.py")}
    assert [step for step, _ in seen] == list(range(20))


def test_the_logged_history_is_the_one_lightning_wrote(tmp_path, monkeypatch):
    """The late rows: train/loss at each logged step's 0-based index, with its epoch, in the
    order Lightning wrote them (learning rate, throughput, loss)."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)}, trainer={
        "max_steps": 9, "val_every_steps": 4, "log_every_steps": 3, "accumulate": 2}))
    train.run(recipe, "tiny.yaml")
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    losses = [(r["epoch"], r["step"]) for r in rows if r.get("train/loss")]
    assert losses == [("0", "2"), ("1", "5"), ("2", "8")]
    order = [next(k for k in ("train/lr", "train/device/items_per_sec", "train/loss")
                  if r.get(k)) for r in rows if r["step"] == "5" and not r.get("val/loss")]
    assert order == ["train/lr", "train/device/items_per_sec", "train/loss"]


# -- the divergence guard, decided on the device ------------------------------------------------


class PlantNaN:
    """A NaN in the first encoder layer's feed-forward weight before step ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self, task: Any, batch: Any, batch_idx: int) -> None:
        if task.trainer.global_step == self.at:
            with torch.no_grad():
                task.model.encoder.layers[0].ffn.ffn_in.weight[0, 0] = float("nan")


def test_a_diverged_update_is_skipped_on_the_device_and_the_run_stops_naming_its_step(
        tmp_path, monkeypatch):
    """The verdict is read late, yet the bad step's update never reaches the weights: the
    weights at the stop are those before that step, apart from the planted NaN, and no
    checkpoint follows it."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    plant, seen = PlantNaN(at=5), {}
    start = TaskModule.on_train_batch_start

    def on_train_batch_start(self, batch, batch_idx):
        start(self, batch, batch_idx)
        if self.trainer.global_step == 5:
            seen["before"] = {k: v.clone() for k, v in self.model.state_dict().items()}
        plant(self, batch, batch_idx)
        seen["task"] = self

    monkeypatch.setattr(TaskModule, "on_train_batch_start", on_train_batch_start)
    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)}, trainer={
        "max_steps": 12, "val_every_steps": 4, "keep_checkpoints": 3}))
    with pytest.raises(DivergenceError) as caught:
        train.run(recipe, "tiny.yaml")
    assert caught.value.step == 5 and "diverged at step 5" in str(caught.value)
    assert "encoder.layers.0.ffn" in str(caught.value)
    after = seen["task"].model.state_dict()
    for name, before in seen["before"].items():
        if name != "encoder.layers.0.ffn.ffn_in.weight":
            assert torch.equal(after[name], before), name
    steps = sorted(int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*"))
    assert steps == [4]  # the last good one; none after the NaN


# -- the throughput's clock ---------------------------------------------------------------------


def test_a_run_resumed_from_the_last_good_checkpoint_equals_one_never_diverged(
        tmp_path, monkeypatch):
    """The guard's stop loses nothing checkpointed: resumed (the NaN gone) from the checkpoint
    before the bad step, the run ends with the weights and the losses of a run that never
    diverged."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    settings = {"max_steps": 8, "val_every_steps": 4, "log_every_steps": 1,
                "keep_checkpoints": 2}
    clean = tmp_path / "clean"
    train.run(from_dict(tiny(run={"dir": str(clean)}, trainer=settings)), "tiny.yaml")
    start = TaskModule.on_train_batch_start

    def planting(self, batch, batch_idx):
        start(self, batch, batch_idx)
        PlantNaN(at=6)(self, batch, batch_idx)

    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)}, trainer=settings))
    with monkeypatch.context() as patch:
        patch.setattr(TaskModule, "on_train_batch_start", planting)
        with pytest.raises(DivergenceError, match="diverged at step 6"):
            train.run(recipe, "tiny.yaml")
    train.run(recipe, "tiny.yaml", resume="auto")

    def final(folder: Path) -> dict[str, torch.Tensor]:
        return torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]

    want, got = final(clean), final(run_dir)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)

    def losses(folder: Path) -> list[tuple[str, str]]:
        with open(folder / "logs" / "csv" / "metrics.csv", newline="") as f:
            return [(r["step"], r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]

    assert losses(run_dir) == losses(clean)


class FakeEvent:
    """A timing CUDA event as the host sees it: recorded at the host's time (the CPU has run
    every kernel by then), done once ``landed`` says so, waited for by ``synchronize``."""

    landed = True
    made: ClassVar[list[FakeEvent]] = []

    def __init__(self) -> None:
        self.at: float | None = None
        self.waited = False
        FakeEvent.made.append(self)

    def record(self) -> None:
        import time

        self.at = time.perf_counter()

    def query(self) -> bool:
        return FakeEvent.landed or self.waited

    def synchronize(self) -> None:
        self.waited = True

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.query() and end.query(), "elapsed_time on an event not done waits"
        return (end.at - self.at) * 1000


@pytest.mark.parametrize("landed", [True, False])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_throughput_never_waits_for_the_gpu_while_training(tmp_path, monkeypatch,
                                                               accumulate, landed):
    """As on a GPU (the device check, CUDA's synchronize and its timing events stood in): no
    training batch synchronises; the batches a logged figure reads are timed by events, and
    each figure is logged under its own step once its event is done (``landed``: at the next
    batch; else only when the run waits anyway: validation, a checkpoint, the end)."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(throughput, "on_gpu", lambda trainer: True)
    monkeypatch.setattr(throughput, "timing_event", FakeEvent)
    monkeypatch.setattr(FakeEvent, "landed", landed)
    monkeypatch.setattr(FakeEvent, "made", [])
    waits: list[bool] = []  # whether the trainer was training at each synchronize
    trainers: list[Any] = []
    setup = throughput.TrainingThroughput.setup

    def recording_setup(self, trainer, *args, **kwargs):
        trainers.append(trainer)
        setup(self, trainer, *args, **kwargs)

    monkeypatch.setattr(throughput.TrainingThroughput, "setup", recording_setup)
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda *args: waits.append(trainers[-1].training))
    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)}, diagnostics={"guard": False},
                            trainer={"max_steps": 9, "val_every_steps": 4, "log_every_steps": 3,
                                     "accumulate": accumulate}))
    train.run(recipe, "tiny.yaml")

    assert not any(waits), "a training batch synchronised"
    # Events, not waits: the two batches of each logged rate's window (3 logged steps), the
    # first stretch's start, and at each of the 3 validations (steps 4, 8, the last) the
    # training time read and the next stretch's start.
    assert len(FakeEvent.made) <= 2 * 3 + 1 + 2 * 3
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/device/items_per_sec")]
    assert [int(r["step"]) for r in rows] == [2, 5, 8]
    assert all(float(r["train/device/items_per_sec"]) > 0 for r in rows)
    times = [float(r["train/time"]) for r in rows]
    assert times == sorted(times) and times[0] > 0


# -- a compiled run's count ---------------------------------------------------------------------


@pytest.mark.parametrize("late", [False, True])
def test_the_compile_count_is_logged_only_where_it_is_written(monkeypatch, late):
    """With the step's loss, at the steps whose metrics are written: handed to the run's late
    reader (``late_logs``) as a host number, or, without one, through Lightning's log, which
    copies it to the GPU, a copy that waits."""
    task = TranslationModule(from_dict(tiny(trainer={"compile": True})), 120)
    assert isinstance(task._compiles, CompileCount)  # nothing compiles until a step runs
    task.late_logs = late
    logged: list[tuple] = []
    monkeypatch.setattr(task, "log", lambda name, value, **kw: logged.append((name, value)),
                        raising=False)
    terms = SimpleNamespace(loss_sum=torch.tensor(6.0), tokens=torch.tensor(3))
    for written in (False, True, False):
        task._trainer = SimpleNamespace(
            _logger_connector=SimpleNamespace(should_update_logs=written),
            fit_loop=SimpleNamespace(_should_accumulate=lambda: False),
            is_global_zero=True, global_step=0, world_size=1)
        task._log_interval_loss(terms, {"tokens": torch.zeros(2, 3)})
        logged += list(task.take_logged().items())
    assert [(name, float(value)) for name, value in logged] == [
        ("train/loss", 2.0), ("compile/compiles", 0.0)]


# -- on a GPU: torch's own sync detector ----------------------------------------------------------


class SyncsAreErrors(L.Callback):
    """CUDA's synchronisations raise from each training batch's start to its end (the last
    callback's hooks: every other callback's run inside); validation, the checkpoints and the
    first batch (the FLOPs count on the meta device, the scheme's data init) may wait."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step > 0:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        torch.cuda.set_sync_debug_mode("default")

    def on_exception(self, trainer, pl_module, exception) -> None:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_on_a_gpu_no_training_step_synchronises(tmp_path, monkeypatch, precision):
    """Logging every step, the divergence guard on: torch's sync debug mode raises on any
    synchronisation (an ``.item()``, a pageable copy, ``torch.cuda.synchronize``)."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    original = train.build_trainer

    def detecting(recipe, run_dir, **extra):
        trainer = original(recipe, run_dir, **extra)
        trainer.callbacks.append(SyncsAreErrors())
        return trainer

    monkeypatch.setattr(train, "build_trainer", detecting)
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, diagnostics={"guard": True},
                            trainer={"max_steps": 8, "val_every_steps": 4, "log_every_steps": 1,
                                     "accelerator": "gpu", "devices": 1,
                                     "precision": precision}))
    train.run(recipe, "tiny.yaml")
    with open(tmp_path / "run" / "logs" / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["step"]) for r in rows if r.get("train/loss")) == list(range(8))
    rates = sorted(int(r["step"]) for r in rows if r.get("train/device/items_per_sec"))
    assert rates == list(range(1, 8))  # each after the first (a window of two batches)
