"""Learning-rate schedules and the optimizer's parameter groups."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normzoo.recipe import OptimConfig
from normzoo.tasks.optim import build_optimizer, lr_factor


def factors(schedule: str, steps: int, max_steps: int = 100, **kwargs) -> list[float]:
    config = OptimConfig(schedule=schedule, **kwargs)
    fn = lr_factor(config, max_steps)
    return [fn(step) for step in range(steps)]


# -- inverse_sqrt ----------------------------------------------------------------------------------


def test_inverse_sqrt_pinned_values():
    f = lr_factor(OptimConfig(schedule="inverse_sqrt", warmup_steps=4), 1000)
    # LambdaLR passes the 0-based count of updates done; update k (1-based) uses factor(k - 1).
    assert f(0) == pytest.approx(0.25)  # the first update already learns
    assert f(1) == pytest.approx(0.5)
    assert f(2) == pytest.approx(0.75)
    assert f(3) == pytest.approx(1.0)  # peak at update == warmup
    assert f(4) == pytest.approx(math.sqrt(4 / 5))
    assert f(15) == pytest.approx(0.5)  # sqrt(4 / 16)
    assert f(399) == pytest.approx(0.1)  # sqrt(4 / 400)


def test_inverse_sqrt_fairseq_shape():
    warmup = 4000
    f = lr_factor(OptimConfig(schedule="inverse_sqrt", warmup_steps=warmup), 100_000)
    values = [f(s) for s in range(0, 20_000, 7)]
    peak = max(values)
    assert peak == pytest.approx(1.0, abs=1e-3)
    # Rising linearly before the peak, falling as 1/sqrt(step) after it.
    assert f(warmup // 2 - 1) == pytest.approx(0.5)
    assert f(4 * warmup - 1) == pytest.approx(0.5)
    assert f(16 * warmup - 1) == pytest.approx(0.25)
    rising = [f(s) for s in range(warmup)]
    assert rising == sorted(rising)
    falling = [f(s) for s in range(warmup - 1, 3 * warmup)]
    assert falling == sorted(falling, reverse=True)


def test_inverse_sqrt_without_warmup_stays_at_the_peak():
    assert factors("inverse_sqrt", 50, warmup_steps=0) == [1.0] * 50


# -- cosine ----------------------------------------------------------------------------------------


def test_cosine_warms_up_then_decays_to_min_lr_at_max_steps():
    config = OptimConfig(schedule="cosine", lr=1e-3, min_lr=1e-4, warmup_steps=10)
    f = lr_factor(config, 110)
    floor = 0.1
    assert f(0) == pytest.approx(0.1)
    assert f(4) == pytest.approx(0.5)
    assert f(9) == pytest.approx(1.0)  # peak at the end of warm-up
    assert f(59) == pytest.approx(floor + (1 - floor) * 0.5)  # half way: the mid point
    assert f(109) == pytest.approx(floor)  # the last of max_steps updates: min_lr
    assert f(500) == pytest.approx(floor)  # and it stays there
    decay = [f(s) for s in range(9, 110)]
    assert decay == sorted(decay, reverse=True)
    assert config.lr * f(109) == pytest.approx(config.min_lr)


def test_cosine_to_zero_by_default():
    f = lr_factor(OptimConfig(schedule="cosine", warmup_steps=0), 50)
    assert f(0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 50)))
    assert f(24) == pytest.approx(0.5)
    assert f(49) == pytest.approx(0.0, abs=1e-12)


def test_cosine_with_warmup_longer_than_training():
    f = lr_factor(OptimConfig(schedule="cosine", warmup_steps=100), 10)
    assert [f(s) for s in range(10)] == pytest.approx([(s + 1) / 100 for s in range(10)])


# -- constant --------------------------------------------------------------------------------------


def test_constant_after_warmup():
    assert factors("constant", 8, warmup_steps=4) == pytest.approx(
        [0.25, 0.5, 0.75, 1, 1, 1, 1, 1])
    assert factors("constant", 5, warmup_steps=0) == [1.0] * 5


@pytest.mark.parametrize("schedule", ["inverse_sqrt", "cosine", "linear", "wsd", "constant"])
def test_warmup_is_linear_for_every_schedule(schedule: str):
    values = factors(schedule, 20, max_steps=1000, warmup_steps=20)
    assert values[:19] == pytest.approx([(s + 1) / 20 for s in range(19)])
    assert all(0 < v <= 1 for v in values)


# -- the optimizer ---------------------------------------------------------------------------------


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.linear = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.gate = nn.Parameter(torch.zeros(()))  # a ReZero-style scalar
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight  # tied


def test_no_weight_decay_on_one_dimensional_parameters():
    model = Tiny()
    config = OptimConfig(weight_decay=0.1, lr=1e-3, betas=(0.9, 0.99), eps=1e-7)
    optimizer, _ = build_optimizer(model, config, 100)
    assert isinstance(optimizer, torch.optim.AdamW)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = lambda group: {id(p) for p in group["params"]}  # noqa: E731
    assert ids(decay) == {id(model.embed.weight), id(model.linear.weight)}
    assert ids(no_decay) == {id(model.linear.bias), id(model.norm.weight), id(model.norm.bias),
                             id(model.gate)}
    # Frozen parameters are left out, tied ones are counted once.
    assert len(decay["params"]) + len(no_decay["params"]) == 6
    for group in optimizer.param_groups:
        assert group["lr"] == pytest.approx(1e-3 * lr_factor(config, 100)(0))
        assert group["betas"] == (0.9, 0.99) and group["eps"] == 1e-7


def test_scheduler_steps_the_factor():
    model = Tiny()
    config = OptimConfig(lr=2e-3, schedule="inverse_sqrt", warmup_steps=4)
    optimizer, scheduler = build_optimizer(model, config, 100)
    seen = []
    for _ in range(8):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    want = [2e-3 * f for f in factors("inverse_sqrt", 8, warmup_steps=4)]
    assert seen == pytest.approx(want)


def test_weight_decay_shrinks_matrices_only():
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0)
    config = OptimConfig(lr=0.1, weight_decay=0.5, schedule="constant", warmup_steps=0)
    optimizer, _ = build_optimizer(model, config, 10)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    assert torch.allclose(model[0].weight, torch.full((3, 3), 1 - 0.1 * 0.5))
    for p in (model[0].bias, model[1].weight, model[1].bias):
        assert torch.equal(p, torch.ones_like(p))


class Mixer(nn.Module):
    """A module that declares what its own parameters need: a 2-D mixing matrix kept out of
    weight decay, and a gain with a tenth of the learning rate."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Parameter(torch.eye(3))
        self.gain = nn.Parameter(torch.ones(3))
        self.proj = nn.Linear(3, 3, bias=False)

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        return {"mix": {"weight_decay": 0.0}, "gain": {"lr_scale": 0.1}}


def test_modules_declare_what_their_parameters_need_from_the_optimizer():
    model = nn.Sequential(nn.Linear(3, 3), Mixer())
    config = OptimConfig(weight_decay=0.1, lr=1e-3, warmup_steps=0, schedule="constant")
    optimizer, scheduler = build_optimizer(model, config, 10)
    groups = {g["name"]: g for g in optimizer.param_groups}
    ids = lambda group: {id(p) for p in group["params"]}  # noqa: E731
    mixer = model[1]
    assert ids(groups["lr"]) == {id(model[0].weight), id(mixer.proj.weight)}  # undeclared: rank
    assert ids(groups["lr_no_decay"]) == {id(model[0].bias), id(mixer.mix)}  # 2-D, declared
    scaled = groups["lr_0_0.1"]
    assert ids(scaled) == {id(mixer.gain)} and scaled["weight_decay"] == 0.0
    assert scaled["lr"] == pytest.approx(1e-4) and groups["lr"]["lr"] == pytest.approx(1e-3)
    optimizer.step()
    scheduler.step()  # the schedule scales every group's own rate
    assert scaled["lr"] == pytest.approx(1e-4)


def test_an_unknown_optimizer_option_is_named():
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

        def optimizer_options(self):
            return {"w": {"momentum": 0.5}}

    with pytest.raises(ValueError, match="momentum"):
        build_optimizer(Odd(), OptimConfig(), 10)
