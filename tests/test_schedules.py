"""The LLM schedules (issue 27): ``linear`` and ``wsd`` against transformers' own schedulers at
every step, the 1-sqrt cooldown against its definition, and the recipe rules that tie them to
``trainer.max_steps``.

normzoo's update ``s`` (0-based) uses transformers' factor at step ``s + 1``: normzoo's first
update already learns, transformers' first update has a rate of 0 under any warm-up
(``normzoo.tasks.optim.lr_factor``). So transformers' schedulers are stepped once before they
are read.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tiny import tiny
from transformers.optimization import (
    get_cosine_with_min_lr_schedule_with_warmup,
    get_linear_schedule_with_warmup,
    get_wsd_schedule,
)

from normzoo.errors import ConfigError
from normzoo.recipe import OptimConfig, from_dict
from normzoo.recipe.optim import decay_length
from normzoo.tasks.optim import build_optimizer

PEAK = 1e-3


def normzoo_rates(config: OptimConfig, max_steps: int, steps: int) -> list[float]:
    """The learning rate of each of ``steps`` updates of normzoo's optimizer and schedule."""
    optimizer, scheduler = build_optimizer(torch.nn.Linear(2, 2), config, max_steps)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def transformers_rates(make: Callable, steps: int) -> list[float]:
    """The rates of a transformers scheduler from its step 1 on (see the module's docstring)."""
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=PEAK)
    scheduler = make(optimizer)
    rates = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    return rates


# -- linear --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("warmup", "max_steps"), [(0, 10), (3, 12), (1, 7), (12, 12), (20, 10)])
def test_linear_is_transformers_linear_schedule_with_warmup(warmup: int, max_steps: int):
    config = OptimConfig(lr=PEAK, schedule="linear", warmup_steps=warmup)
    steps = max_steps + 3  # and past the end: it stays at the floor
    ours = normzoo_rates(config, max_steps, steps)
    theirs = transformers_rates(
        lambda opt: get_linear_schedule_with_warmup(opt, warmup, max_steps), steps)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)
    if warmup < max_steps:
        assert ours[max_steps - 1] == 0.0  # the last update is at min_lr


def test_linear_decays_to_min_lr():
    config = OptimConfig(lr=1.0, min_lr=0.1, schedule="linear", warmup_steps=2)
    rates = normzoo_rates(config, 12, 14)
    assert rates[:2] == pytest.approx([0.5, 1.0])
    # From the peak at update 2 (0-based 1) down to 0.1 at update 12, in equal steps of 0.09.
    assert rates[1:12] == pytest.approx([1.0 - 0.09 * i for i in range(11)])
    assert rates[12:] == pytest.approx([0.1, 0.1])


@pytest.mark.parametrize(("warmup", "max_steps"), [(0, 10), (3, 12), (12, 12)])
def test_cosine_is_transformers_cosine_with_min_lr(warmup: int, max_steps: int):
    # The existing schedule, pinned beside the new ones (up to max_steps: past it
    # transformers' cosine rises again, normzoo's stays at the floor).
    config = OptimConfig(lr=PEAK, min_lr=PEAK / 4, schedule="cosine", warmup_steps=warmup)
    ours = normzoo_rates(config, max_steps, max_steps)
    theirs = transformers_rates(lambda opt: get_cosine_with_min_lr_schedule_with_warmup(
        opt, warmup, max_steps, min_lr_rate=0.25), max_steps)
    assert ours == pytest.approx(theirs, rel=1e-12)


# -- wsd -----------------------------------------------------------------------------------------

SHAPES = ("linear", "cosine", "1-sqrt")
LENGTHS = [  # warm-up, decay steps (None: decay_fraction 0.2), max_steps
    (3, 4, 20), (0, 5, 12), (2, None, 30), (4, 16, 20), (0, 10, 10), (5, None, 7)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("warmup", "decay_steps", "max_steps"), LENGTHS)
def test_wsd_is_transformers_wsd_schedule(shape: str, warmup: int, decay_steps: int | None,
                                          max_steps: int):
    config = OptimConfig(lr=PEAK, schedule="wsd", warmup_steps=warmup, decay_steps=decay_steps,
                         decay_shape=shape)
    decay = decay_length(decay_steps, config.decay_fraction, max_steps)
    steps = max_steps + 3
    ours = normzoo_rates(config, max_steps, steps)
    theirs = transformers_rates(lambda opt: get_wsd_schedule(
        opt, num_warmup_steps=warmup, num_decay_steps=decay, num_training_steps=max_steps,
        decay_type=shape), steps)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)
    stable = ours[warmup - 1 if warmup else 0:max_steps - decay]
    assert stable == [PEAK] * len(stable)


@pytest.mark.parametrize("shape", SHAPES)
def test_wsd_with_a_floor_is_transformers_after_the_warmup(shape: str):
    # transformers' wsd warm-up starts at min_lr; normzoo's, as every normzoo schedule's, at 0.
    warmup, decay, max_steps = 4, 6, 16
    config = OptimConfig(lr=PEAK, min_lr=PEAK / 10, schedule="wsd", warmup_steps=warmup,
                         decay_steps=decay, decay_shape=shape)
    ours = normzoo_rates(config, max_steps, max_steps + 2)
    theirs = transformers_rates(lambda opt: get_wsd_schedule(
        opt, num_warmup_steps=warmup, num_decay_steps=decay, num_training_steps=max_steps,
        decay_type=shape, min_lr_ratio=0.1), max_steps + 2)
    assert ours[warmup - 1:] == pytest.approx(theirs[warmup - 1:], rel=1e-12)
    assert ours[:warmup] == pytest.approx([PEAK * (s + 1) / warmup for s in range(warmup)])
    assert ours[max_steps - 1:] == pytest.approx([PEAK / 10] * 3)


def test_the_one_minus_sqrt_cooldown_is_the_papers():
    # Hägele et al. (2024), "Scaling Laws and Compute-Optimal Training Beyond Fixed Training
    # Durations": over the last N_decay of N steps, lr(n) = peak * (1 - sqrt((n - (N -
    # N_decay)) / N_decay)), n counting updates from 1; with a floor, min + (peak - min) * that.
    peak, floor, n_total, n_decay = 2.0, 0.5, 20, 5
    config = OptimConfig(lr=peak, min_lr=floor, schedule="wsd", warmup_steps=2,
                         decay_steps=n_decay, decay_shape="1-sqrt")
    rates = normzoo_rates(config, n_total, n_total + 1)
    start = n_total - n_decay
    for n in range(start, n_total + 1):
        progress = (n - start) / n_decay
        assert rates[n - 1] == pytest.approx(floor + (peak - floor) * (1 - math.sqrt(progress)))
    assert rates[:start] == pytest.approx([1.0, *[peak] * (start - 1)])
    assert rates[start] == pytest.approx(floor + (peak - floor) * (1 - math.sqrt(0.2)))
    assert rates[n_total - 1] == pytest.approx(floor)


def test_decay_fraction_rounds_to_the_nearest_step():
    assert decay_length(None, 0.2, 12) == 2  # 2.4
    assert decay_length(None, 0.25, 10) == 3  # 2.5: halves up
    assert decay_length(None, 0.01, 10) == 1  # never no decay at all
    assert decay_length(7, 0.2, 100) == 7  # decay_steps wins
    assert decay_length(None, 1.0, 9) == 9


# -- recipe rules --------------------------------------------------------------------------------


def problems(data: dict) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        from_dict(data)
    return {p.path: p.message for p in info.value.problems}


@pytest.mark.parametrize("schedule", ["cosine", "linear", "wsd"])
def test_a_schedule_that_ends_at_max_steps_needs_it_set(schedule: str):
    found = problems({"optim": {"schedule": schedule}})
    assert list(found) == ["trainer.max_steps"]
    assert f"optim.schedule={schedule} decays to optim.min_lr at trainer.max_steps: set it" \
        in found["trainer.max_steps"]
    # Set, even to the default's value, it is the recipe's own.
    from_dict({"optim": {"schedule": schedule}, "trainer": {"max_steps": 100_000}})
    # Reported beside the recipe's other problems.
    other = problems({"optim": {"schedule": schedule, "lr": -1.0}})
    assert set(other) == {"optim.lr", "trainer.max_steps"}


@pytest.mark.parametrize("schedule", ["inverse_sqrt", "constant"])
def test_schedules_that_do_not_end_need_no_max_steps(schedule: str):
    from_dict({"optim": {"schedule": schedule}})


def test_a_wsd_decay_must_fit_after_the_warmup():
    found = problems({"optim": {"schedule": "wsd", "warmup_steps": 11},
                      "trainer": {"max_steps": 12}})
    assert found == {"optim.decay_fraction": (
        "the wsd decay (decay_fraction=0.2 of trainer.max_steps=12: 2 steps) does not fit "
        "after the 11 warm-up steps: together they need trainer.max_steps >= 13, not 12; "
        "shorten the decay or the warm-up")}
    found = problems({"optim": {"schedule": "wsd", "warmup_steps": 3, "decay_steps": 10},
                      "trainer": {"max_steps": 12}})
    assert list(found) == ["optim.decay_steps"]
    assert "decay_steps=10: 10 steps" in found["optim.decay_steps"]
    # Exactly fitting is fine: no stable phase.
    from_dict({"optim": {"schedule": "wsd", "warmup_steps": 2, "decay_steps": 10},
               "trainer": {"max_steps": 12}})
    # Other schedules ignore the wsd keys.
    from_dict({"optim": {"schedule": "cosine", "warmup_steps": 11, "decay_steps": 10},
               "trainer": {"max_steps": 12}})


def test_wsd_keys_are_range_checked():
    found = problems({"optim": {"schedule": "wsd", "decay_fraction": 1.5, "decay_steps": 0,
                                "decay_shape": "sqrt"}, "trainer": {"max_steps": 10}})
    assert set(found) == {"optim.decay_fraction", "optim.decay_steps", "optim.decay_shape"}
    assert "'linear', 'cosine' or '1-sqrt'" in found["optim.decay_shape"]


# -- a run ---------------------------------------------------------------------------------------


def test_a_wsd_run_logs_transformers_rate_at_every_step(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    from normzoo.run import training as train

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    steps, optim = 8, {"lr": PEAK, "schedule": "wsd", "warmup_steps": 2, "decay_steps": 3,
                       "decay_shape": "cosine"}
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, optim=optim,
                            trainer={"max_steps": steps, "val_every_steps": steps,
                                     "log_every_steps": 1}))
    train.run(recipe, "tiny.yaml")
    with open(tmp_path / "run" / "logs" / "csv" / "metrics.csv", newline="") as f:
        logged = {int(row["step"]): float(row["train/lr"]) for row in csv.DictReader(f)
                  if row.get("train/lr")}
    theirs = transformers_rates(lambda opt: get_wsd_schedule(
        opt, num_warmup_steps=2, num_decay_steps=3, num_training_steps=steps,
        decay_type="cosine"), steps)
    assert logged == pytest.approx(dict(enumerate(theirs)), rel=1e-12, abs=1e-15)
