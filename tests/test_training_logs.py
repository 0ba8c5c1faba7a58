"""What a training run logs through Lightning's own callbacks: the learning rate of every update
(``LearningRateMonitor``) and the throughput, with FLOPs (``ThroughputMonitor``), read back from
``metrics.csv``; and how the FLOPs of a batch are counted."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.fabric.utilities.throughput import measure_flops
from registered import BUILTIN_TASKS
from task_samples import sample
from tiny import tiny
from torch.nn.attention import SDPBackend, sdpa_kernel

from normzoo.checkpoints import rng_state as rng
from normzoo.contract import module_class
from normzoo.recipe import from_dict
from normzoo.run import training as train
from normzoo.tasks.counting import flops_per_token
from normzoo.tasks.optim import GROUP_NAMES, lr_factor

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

STEPS = 6
OPTIM = {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 3, "schedule": "cosine"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, str]]]:
    """``metrics.csv`` rows of a tiny run logging every step, without and with accumulation
    (validation every 3 steps, so its time is left out of the training throughput)."""
    root = tmp_path_factory.mktemp("logs")
    rows = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        for accumulate in (1, 2):
            run_dir = root / f"accumulate{accumulate}"
            recipe = from_dict(tiny(
                run={"dir": str(run_dir)}, optim=OPTIM,
                trainer={"max_steps": STEPS, "val_every_steps": 3, "log_every_steps": 1,
                         "accumulate": accumulate}))
            train.run(recipe, "tiny.yaml")
            with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
                rows[accumulate] = list(csv.DictReader(f))
    return rows


def logged(rows: list[dict[str, str]], key: str) -> dict[int, float]:
    """``{step: value}`` of ``key``; a step logged twice fails."""
    values: dict[int, float] = {}
    for row in rows:
        if row.get(key):
            step = int(row["step"])
            assert step not in values, f"{key} logged twice at step {step}"
            values[step] = float(row[key])
    return values


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_learning_rate_of_every_update_is_the_schedule_at_that_step(runs, accumulate):
    rows = runs[accumulate]
    factor = lr_factor(from_dict(tiny(optim=OPTIM)).optim, STEPS)
    want = {step: OPTIM["lr"] * factor(step) for step in range(STEPS)}
    # Once per update, accumulated or not, at the step of the loss the update followed.
    assert logged(rows, "train/lr") == pytest.approx(want, rel=1e-12)
    assert logged(rows, "train/lr_no_decay") == pytest.approx(want, rel=1e-12)
    assert set(logged(rows, "train/loss")) == set(want)


def test_throughput_of_every_step_is_its_tokens_over_the_time_since_the_step_before(runs):
    rows = runs[1]
    rate = logged(rows, "train/device/items_per_sec")
    tokens, seconds = logged(rows, "train/lengths"), logged(rows, "train/time")
    # From the second step on (the first has no step before it), one figure per step.
    assert sorted(rate) == list(range(1, STEPS))
    for step in rate:
        step_tokens = tokens[step] - tokens[step - 1]
        assert step_tokens > 0
        assert rate[step] == pytest.approx(step_tokens / (seconds[step] - seconds[step - 1]))
    sentences = logged(rows, "train/samples")
    assert all(tokens[s] > sentences[s] > 0 for s in tokens)


@pytest.mark.gpu  # on a GPU it also checks that MFU is logged
@pytest.mark.parametrize("accumulate", [1, 2])
def test_flops_per_second_are_the_measured_flops_per_token_times_tokens_per_second(
    runs, accumulate
):
    rows = runs[accumulate]
    flops = logged(rows, "train/device/flops_per_sec")
    rate = logged(rows, "train/device/items_per_sec")
    assert flops and set(flops) == set(rate)
    per_token = {step: flops[step] / rate[step] for step in flops}
    first = next(iter(per_token.values()))
    assert first > 0
    assert per_token == pytest.approx(dict.fromkeys(per_token, first), rel=1e-6)
    if not torch.cuda.is_available():  # MFU needs the device's peak FLOPs
        assert not any(row.get("train/device/mfu") for row in rows)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_only_training_throughput_is_logged_and_every_row_is_at_a_training_step(
    runs, accumulate
):
    # The final test's scores (test/bleu, test/chrf) are one row of their own, after training.
    scores = [row for row in runs[accumulate] if row.get("test/bleu")]
    assert len(scores) == 1 and int(scores[0]["step"]) == STEPS
    rows = [row for row in runs[accumulate] if not row.get("test/bleu")]
    keys = {key for row in rows for key, value in row.items() if value}
    assert not [key for key in keys if key.startswith(("validate/", "test/", "predict/"))]
    assert {int(row["step"]) for row in rows} == set(range(STEPS))


# -- FLOPs of a batch -------------------------------------------------------------------------


def tiny_task(task: str, **model: Any):
    recipe = from_dict(tiny(task=task, model=model))
    return module_class(task)(recipe, 120)


def sampled_task(task: str, cache: Path, **model: Any) -> tuple[Any, dict[str, Any]]:
    """The tiny model of ``task`` and a padded training batch of its own data (3 examples of
    different lengths), for any registered task."""
    recipe, batch, vocab = sample(task, cache, model=model)
    torch.manual_seed(0)
    return module_class(task)(recipe, vocab), batch


@pytest.mark.parametrize("task_name", BUILTIN_TASKS)
def test_flops_counted_on_the_meta_device_are_those_of_the_real_training_step(
        task_name, tmp_path):
    task, batch = sampled_task(task_name, tmp_path)
    before = {name: p.detach().clone() for name, p in task.named_parameters()}
    state = rng.capture()

    per_token = flops_per_token(task, batch)

    after = rng.capture()
    assert torch.equal(state["torch"], after["torch"]) and state["python"] == after["python"]
    assert all(p.grad is None for p in task.parameters())
    assert all(torch.equal(p, before[name]) for name, p in task.named_parameters())
    smoothing = task.recipe.optim.label_smoothing if task.smooths_labels else 0.0
    # Attention as the meta device runs it, in matrix products: torch's fused CPU kernel has no
    # FLOP formula, and the counter would leave attention out.
    with sdpa_kernel(SDPBackend.MATH):
        real = measure_flops(task, lambda: task.loss_terms(batch, smoothing).loss_sum,
                             lambda loss: loss)
        forward = measure_flops(task, lambda: task.loss_terms(batch, smoothing).loss_sum)
    assert per_token == pytest.approx(real / batch["ntokens"], rel=1e-12)
    # Forward and backward: about three forward passes.
    assert 2.5 * forward < real < 3.5 * forward


def test_flops_per_batch_scale_with_the_batch_tokens_in_training_only():
    task = tiny_task("translation")
    task._flops_per_token = 1000.5
    task.train()
    task._batch_tokens = 0
    assert task.flops_per_batch == 0
    task._batch_tokens = 40
    assert task.flops_per_batch == 40_020
    task.eval()  # validation: forward only, not what was measured
    assert task.flops_per_batch is None
    task.train()
    task._flops_per_token = None  # not measured
    assert task.flops_per_batch is None


def test_a_model_that_cannot_run_on_the_meta_device_logs_no_flops(caplog, tmp_path):
    # BatchNorm reads the padding mask's values to count the real tokens.
    task, batch = sampled_task("mlm", tmp_path, norm={"name": "batchnorm"})
    state = rng.capture()
    with caplog.at_level("INFO"):
        assert flops_per_token(task, batch) is None
    assert torch.equal(state["torch"], rng.capture()["torch"])
    assert "Training FLOPs not measured" in caplog.text


def test_a_checkpoint_with_unnamed_parameter_groups_resumes_with_the_named_ones():
    task = tiny_task("translation")
    optimizer = task.configure_optimizers()["optimizer"]
    saved = optimizer.state_dict()
    for group in saved["param_groups"]:
        del group["name"]  # as written before the groups were named
    checkpoint: dict[str, Any] = {"optimizer_states": [saved], "normzoo": {}}
    task.on_load_checkpoint(checkpoint)
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    assert tuple(group["name"] for group in optimizer.param_groups) == GROUP_NAMES


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="MFU needs a GPU")
def test_a_gpu_run_logs_mfu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from lightning.fabric.utilities.throughput import get_available_flops

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            trainer={"max_steps": 4, "log_every_steps": 1, "val_every_steps": 4,
                                     "accelerator": "gpu", "devices": 1}))
    train.run(recipe, "tiny.yaml")
    with open(tmp_path / "run" / "logs" / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    flops, mfu = logged(rows, "train/device/flops_per_sec"), logged(rows, "train/device/mfu")
    peak = get_available_flops(torch.device("cuda"), torch.float32)
    if peak is None:
        pytest.skip(f"Lightning does not know the peak FLOPs of {torch.cuda.get_device_name()}")
    assert set(mfu) == set(flops) == {1, 2, 3}
    assert mfu == pytest.approx({step: flops[step] / peak for step in flops})


def test_the_logged_training_loss_is_the_token_mean_of_its_interval(tmp_path: Path,
                                                                      monkeypatch):
    """train/loss written every 3 updates (with 2 batches accumulated per update) is the token
    mean over the 6 batches since the last write, computed from a run that logs every batch's
    loss: the same seed, so the same batches and losses."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    rows = {}
    for every, accumulate in ((1, 1), (3, 2), (1, 2)):
        run_dir = tmp_path / f"log{every}-{accumulate}"
        recipe = from_dict(tiny(run={"dir": str(run_dir)}, model={"dropout": 0.0},
                                trainer={"max_steps": 6, "val_every_steps": 6,
                                         "log_every_steps": every, "accumulate": accumulate}))
        train.run(recipe, "tiny.yaml")
        with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
            rows[every, accumulate] = list(csv.DictReader(f))
    # Per update of 2 batches: the token mean of both (logged every update).
    per_update = logged(rows[1, 2], "train/loss")
    tokens = logged(rows[1, 2], "train/lengths")  # cumulative target tokens, per update
    counts = {s: tokens[s] - tokens.get(s - 1, 0.0) for s in tokens}
    interval = logged(rows[3, 2], "train/loss")
    assert set(interval) == {2, 5}
    for end in (2, 5):
        steps = range(end - 2, end + 1)
        want = sum(per_update[s] * counts[s] for s in steps) / sum(counts[s] for s in steps)
        assert interval[end] == pytest.approx(want, rel=1e-5)
    # Without accumulation, logging every step is each batch's own loss, as before.
    assert set(logged(rows[1, 1], "train/loss")) == set(range(6))


def _throughput_setup(monkeypatch: pytest.MonkeyPatch, gpu: str, precision: str):
    """normzoo's throughput callback set up as a fit on ``gpu`` would set it up (no GPU
    needed: the device's name is all the peak lookup reads)."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import MixedPrecision, Precision
    from lightning.pytorch.trainer.states import RunningStage, TrainerFn

    from normzoo.run.callbacks import TrainingThroughput

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu)
    plugin = MixedPrecision(precision, "cuda") if precision.endswith("mixed") else Precision()
    trainer = SimpleNamespace(precision=precision, precision_plugin=plugin, world_size=1,
                              strategy=SimpleNamespace(root_device=torch.device("cuda", 0)),
                              enable_validation=True,
                              state=SimpleNamespace(stage=RunningStage.TRAINING))
    callback = TrainingThroughput()
    callback.setup(trainer, None, TrainerFn.FITTING)
    return callback, callback._throughputs[RunningStage.TRAINING]


def test_mfu_of_a_bf16_run_divides_by_the_dense_bf16_peak(monkeypatch):
    # Seen on a lent H200: Lightning 2.6 knows no "NVIDIA H200", so the run logged no MFU.
    callback, training = _throughput_setup(monkeypatch, "NVIDIA H200", "bf16-mixed")
    assert callback.available_flops == training.available_flops == 989e12
    # Lightning's table lists the H100 NVL's sparse figure (1978.8e12): the dense one is used.
    callback, training = _throughput_setup(monkeypatch, "NVIDIA H100 NVL", "bf16-mixed")
    assert training.available_flops == 835e12
    # A GPU normzoo's table lacks keeps Lightning's figure.
    callback, training = _throughput_setup(monkeypatch, "NVIDIA L4", "bf16-mixed")
    assert training.available_flops == pytest.approx(121e12)
    # The table holds bf16 peaks only: a float32 run on an H200 logs no MFU rather than a wrong one.
    callback, training = _throughput_setup(monkeypatch, "NVIDIA H200", "32-true")
    assert training.available_flops is None


def test_the_peak_table_matches_the_most_specific_name_first():
    from normzoo.run.hardware import peak_bf16_flops

    assert peak_bf16_flops("NVIDIA H200 NVL")[0] == 835e12
    assert peak_bf16_flops("NVIDIA H200")[0] == 989e12
    assert peak_bf16_flops("NVIDIA H100 PCIe")[0] == 756e12
    assert peak_bf16_flops("NVIDIA A100-SXM4-80GB")[0] == 312e12
    assert peak_bf16_flops("Tesla T4") is None
