"""bf16 on a CPU: the blocked cross-entropy and the CPU dropout equal what they replace, a CPU
without bf16 instructions trains in float32 and says so once, and the attention kernel may
change on resume."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from tiny import tiny

from normzoo.nn import cross_entropy
from normzoo.nn.cross_entropy import smoothed_cross_entropy_sum
from normzoo.nn.dropout import Dropout, dropout, keep_threshold

# -- cross-entropy ----------------------------------------------------------------------------


def _labels(rows: int, vocab: int, ignored: int = 7) -> torch.Tensor:
    labels = torch.randint(1, vocab, (rows,))
    labels[torch.randperm(rows)[:ignored]] = 0  # padding
    return labels


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block", [1 << 20, 3 * 50])  # one block; blocks of 3 rows, a ragged end
def test_blocked_cross_entropy_equals_torch(smoothing, dtype, block, monkeypatch):
    monkeypatch.setattr(cross_entropy, "BLOCK_ELEMENTS", block)
    torch.manual_seed(0)
    rows, vocab = 40, 50
    logits = (torch.randn(rows, vocab) * 3).to(dtype)
    labels = _labels(rows, vocab)
    ours = logits.clone().requires_grad_(True)
    theirs = logits.clone().requires_grad_(True)
    loss = smoothed_cross_entropy_sum(ours, labels, ignore_index=0, smoothing=smoothing)
    expected = F.cross_entropy(theirs.float(), labels, ignore_index=0,
                               label_smoothing=smoothing, reduction="sum")
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-4)
    (loss * 0.37).backward()
    (expected * 0.37).backward()
    assert ours.grad.dtype == dtype
    # The gradient is computed in float32 in both; bf16 then rounds it once (8-bit mantissa).
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype is torch.float32 else {"rtol": 1e-2,
                                                                       "atol": 1e-3}
    torch.testing.assert_close(ours.grad.float(), theirs.grad.float(), **tol)
    assert ours.grad[labels == 0].abs().max() == 0  # padding rows get no gradient


def test_blocked_cross_entropy_without_gradients_and_with_every_row_ignored():
    logits = torch.randn(6, 9)
    labels = torch.zeros(6, dtype=torch.long)
    with torch.no_grad():
        assert smoothed_cross_entropy_sum(logits, labels, ignore_index=0).item() == 0.0
    labels[2] = 4
    with torch.no_grad():
        loss = smoothed_cross_entropy_sum(logits, labels, ignore_index=0, smoothing=0.1)
    expected = F.cross_entropy(logits, labels, ignore_index=0, label_smoothing=0.1,
                               reduction="sum")
    torch.testing.assert_close(loss, expected)


def test_blocked_cross_entropy_refuses_a_second_backward():
    logits = torch.randn(4, 5, requires_grad=True)
    loss = smoothed_cross_entropy_sum(logits, torch.tensor([1, 2, 3, 4]), ignore_index=0)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()


def test_blocked_cross_entropy_leaves_float32_logits_untouched():
    logits = torch.randn(8, 11, requires_grad=True)
    before = logits.detach().clone()
    smoothed_cross_entropy_sum(logits, torch.arange(8), ignore_index=0,
                               smoothing=0.1).backward()
    torch.testing.assert_close(logits.detach(), before, rtol=0, atol=0)


@pytest.mark.parametrize("scale", [2.0**15, 2.0**16])  # 2**16: GradScaler's first scale
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_blocked_cross_entropy_keeps_float16_gradients_that_only_the_loss_scale_makes_visible(
        smoothing, scale):
    # 16-mixed: a confident model's unlikely tokens have probabilities (here 2e-9 to 6e-9)
    # below float16's smallest subnormal (6e-8), while the loss scale times them is a normal
    # float16. Kept in float16 before the scale, they were all zero (and a scale of 2**16,
    # itself cast to float16, was inf).
    torch.manual_seed(0)
    rows, vocab = 16, 1000
    logits = torch.rand(rows, vocab)
    labels = torch.randint(1, vocab, (rows,))
    logits[torch.arange(rows), labels] = 20.0  # each row's label: the likely token
    logits = logits.half()
    ours = logits.clone().requires_grad_(True)
    theirs = logits.float().requires_grad_(True)
    (smoothed_cross_entropy_sum(ours, labels, ignore_index=0, smoothing=smoothing)
     * scale).backward()
    (F.cross_entropy(theirs, labels, ignore_index=0, label_smoothing=smoothing,
                     reduction="sum") * scale).backward()
    assert ours.grad.dtype == torch.float16
    unlikely = torch.ones(rows, vocab, dtype=torch.bool)
    unlikely[torch.arange(rows), labels] = False
    true = theirs.grad / scale
    if not smoothing:
        assert true[unlikely].abs().max() < 3e-8  # what float16 rounds to zero
    assert theirs.grad[unlikely].abs().min() > 6.2e-5  # normal float16 once scaled
    assert (ours.grad[unlikely] != 0).all()
    torch.testing.assert_close(ours.grad[unlikely].float(), theirs.grad[unlikely], rtol=2e-3,
                               atol=0)  # float16's rounding of the scaled gradient
    # The label's entry, p - 1 with p near 1, is float32 cancellation in both: a few float32
    # steps of 1 (1.2e-7), times the scale; float16's rounding on top.
    torch.testing.assert_close(ours.grad[~unlikely].float(), theirs.grad[~unlikely], rtol=1e-3,
                               atol=scale * 1e-6)


# -- dropout ----------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_keeps_one_minus_p_and_scales_by_its_inverse(p, dtype):
    torch.manual_seed(1)
    n = 400_000
    x = torch.ones(n, dtype=dtype)
    y = dropout(x, p)
    kept = y != 0
    rate = kept.float().mean().item()
    # p rounded to 1/65536, then four binomial standard deviations
    exact = 1 - (keep_threshold(p) + 32768) / 65536
    assert abs(exact - (1 - p)) <= 1 / 65536
    assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / n)
    scale = torch.tensor(1 / (1 - p), dtype=dtype).item()  # the scale as the dtype holds it
    assert torch.all(y[kept].float() == scale)


def test_dropout_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(2)
    x = torch.randn(50, 30, requires_grad=True)
    y = dropout(x, 0.2)
    y.backward(torch.ones_like(y))
    mask = (y != 0).float()
    torch.testing.assert_close(x.grad, mask / 0.8)
    torch.testing.assert_close(y, x.detach() * mask / 0.8)


def test_dropout_masks_follow_the_seed_and_the_mode():
    x = torch.randn(64, 64)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same generator state, the same mask
    assert not torch.equal(a, dropout(x, 0.1))  # and the generator moves on
    layer = Dropout(0.1).eval()
    assert layer(x) is x
    assert dropout(x, 0.0) is x
    assert torch.count_nonzero(dropout(x, 1.0)) == 0
    assert dropout(x, 0.1, training=False) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)


def test_dropout_odd_sizes_and_non_contiguous_inputs():
    torch.manual_seed(4)
    x = torch.randn(7, 5, 3).transpose(0, 2)  # 105 elements, not a multiple of 4
    y = dropout(x, 0.5)
    assert y.shape == x.shape
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] * 2)


# -- bf16 on a CPU that cannot -----------------------------------------------------------------


def _train_bf16_recipe(tmp_path: Path, cpu_bf16: str) -> subprocess.CompletedProcess:
    """``normzoo train`` of a bf16-mixed tiny recipe with ``NORMZOO_CPU_BF16=cpu_bf16``."""
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(tiny(trainer={"precision": "bf16-mixed"})), encoding="utf-8")
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "NORMZOO_CPU_BF16": cpu_bf16}
    return subprocess.run([sys.executable, "-m", "normzoo", "train", str(path),
                           f"run.dir={tmp_path / 'run'}"], capture_output=True, text=True,
                          env=env, timeout=300)


def test_a_cpu_without_bf16_trains_in_float32_and_says_so_once(tmp_path: Path):
    result = _train_bf16_recipe(tmp_path, "0")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "no bf16 instructions" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ")
    assert "training in 32-true instead" in warnings[0]
    saved = yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text())
    assert saved["trainer"]["precision"] == "32-true"  # the precision that ran


def test_a_mistyped_bf16_override_is_refused_at_the_command_line(tmp_path: Path):
    result = _train_bf16_recipe(tmp_path, "yes")
    assert result.returncode == 2, result.stderr
    assert "NORMZOO_CPU_BF16='yes'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_bf16_is_kept_where_the_cpu_has_it_and_off_the_cpu(monkeypatch):
    from normzoo.recipe import from_dict
    from normzoo.run import machine

    recipe = from_dict(tiny(trainer={"precision": "bf16-mixed"}))
    monkeypatch.setenv("NORMZOO_CPU_BF16", "1")
    assert machine.training_precision(recipe) is recipe
    monkeypatch.setenv("NORMZOO_CPU_BF16", "0")
    assert machine.training_precision(recipe, announce=False).trainer.precision == "32-true"
    fp32 = from_dict(tiny())
    assert machine.training_precision(fp32) is fp32
    monkeypatch.delenv("NORMZOO_CPU_BF16")
    assert isinstance(machine.cpu_supports_bf16(), bool)


def test_the_attention_kernel_may_change_on_resume():
    from normzoo.recipe import from_dict
    from normzoo.run.resume import ResumeError, check_resumable

    recipe = from_dict(tiny(model={"attention_impl": "explicit"}))
    saved_recipe = from_dict(tiny(model={"attention_impl": "sdpa"})).to_dict()
    saved = {"normzoo": {"recipe": saved_recipe}, "loops": {}, "global_step": 3}
    check_resumable(saved, recipe, Path("x.ckpt"))  # same weights, another kernel: accepted
    saved_recipe["model"]["heads"] = 4
    with pytest.raises(ResumeError, match=r"model\.heads"):
        check_resumable(saved, recipe, Path("x.ckpt"))


# -- readings under bf16 ------------------------------------------------------------------------


def _first_step(tmp_path: Path, precision: str, residual: dict) -> tuple[dict, dict]:
    """Train the tiny recipe for one step with diagnostics at step 0; return the diagnostics
    logged there and the checkpoint's normzoo record."""
    import csv

    recipe = tiny(model={"residual": residual, "encoder_layers": 2, "decoder_layers": 2},
                  trainer={"precision": precision}, diagnostics={"every_steps": 1})
    path = tmp_path / f"{precision}.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    run_dir = tmp_path / precision
    # Forced on: where the CPU lacks bf16 the run would otherwise switch to float32 and compare
    # float32 with itself.
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "NORMZOO_CPU_BF16": "1"}
    done = subprocess.run([sys.executable, "-m", "normzoo", "train", str(path),
                           f"run.dir={run_dir}"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        diag = {k: float(v) for row in csv.DictReader(f) if row["step"] == "0"
                for k, v in row.items() if k.startswith("diag/") and v}
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    return diag, saved


@pytest.mark.parametrize("residual", [
    {"name": "admin", "init": "profiled"},
    pytest.param({"name": "deepnorm"}, marks=pytest.mark.slow)], ids=["admin", "deepnorm"])
def test_init_profiling_and_diagnostics_read_the_same_under_bf16(tmp_path: Path, residual):
    """Admin profiles its w before the first step, outside autocast: the same values in both
    precisions. The diagnostics of the first step (DeepNorm's scaled init included) measure
    bf16 activations in float32: within a few percent of float32's."""
    diag32, saved32 = _first_step(tmp_path, "32-true", residual)
    diag16, saved16 = _first_step(tmp_path, "bf16-mixed", residual)
    assert diag32 and diag32.keys() == diag16.keys()
    stream = [k for k in diag32 if "stream_norm" in k or "branch_ratio" in k]
    grads = [k for k in diag32 if "grad_norm" in k]
    assert stream and grads
    for key in stream:
        assert diag16[key] == pytest.approx(diag32[key], rel=0.02, abs=1e-4), key
    for key in grads:
        assert diag16[key] == pytest.approx(diag32[key], rel=0.05, abs=1e-4), key
    if residual["name"] == "admin":
        omega32, omega16 = saved32["normzoo"]["data_init"], saved16["normzoo"]["data_init"]
        assert omega32 == omega16
