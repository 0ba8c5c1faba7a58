"""Fused AdamW (:func:`normzoo.tasks.optim.adamw_impl`), and gradient clipping with it.

Lightning's mixed-precision plugin refuses to clip gradients for an optimizer that unscales
them itself (``MixedPrecision.clip_gradients``: ``_optimizer_handles_unscaling``, true for a
fused torch optimizer), under ``16-mixed`` and ``bf16-mixed`` alike, though only fp16 has a
GradScaler. The task clips itself under bf16-mixed. torch's fused AdamW runs on a CPU too, so
the whole path is exercised here: a fit in bf16-mixed with fused AdamW and a clipping norm.
"""

from __future__ import annotations

import itertools
from typing import Any

import lightning as L
import pytest
import torch
from tiny import tiny
from torch.utils.data import DataLoader

import normzoo.tasks.base as base
from normzoo.recipe import OptimConfig, from_dict
from normzoo.tasks.optim import adamw_impl, build_optimizer
from normzoo.tasks.translation.module import TranslationModule

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-mixed")


@pytest.mark.parametrize("device,precision",
                         list(itertools.product(["cuda", "cpu", "mps", "nodevice"],
                                                PRECISIONS)))
def test_fused_except_under_a_grad_scaler_or_where_torch_has_no_fused_kernel(device, precision):
    want = "fused" if device != "nodevice" and precision != "16-mixed" else "foreach"
    assert adamw_impl(device, precision) == want


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_the_optimizer_is_built_with_the_kernel_asked_for(impl):
    optimizer, _ = build_optimizer(torch.nn.Linear(3, 3), OptimConfig(), 10, impl)
    assert optimizer.defaults[impl] is True
    other = "foreach" if impl == "fused" else "fused"
    assert not optimizer.defaults[other]
    # the benchmarks comparing frameworks call it without a kernel: foreach, as every peer
    assert build_optimizer(torch.nn.Linear(3, 3), OptimConfig(), 10)[0].defaults["foreach"]


def _batches(count: int = 4) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    out = []
    for _ in range(count):
        ids = torch.randint(5, 100, (3, 7))
        ids[-1, 4:] = 0
        out.append({"src": ids, "tgt_in": ids[:, :-1].clone(), "tgt_out": ids[:, 1:].clone(),
                    "ids": torch.arange(3), "ntokens": int((ids[:, 1:] != 0).sum())})
    return out


class StepNorms(L.Callback):
    """The gradient norm each optimizer step used (after clipping) and the optimizer itself."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.optimizer: Any = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.optimizer = trainer.optimizers[0]

        def hook(optimizer, args, kwargs) -> None:
            grads = [p.grad.float() for g in optimizer.param_groups for p in g["params"]
                     if p.grad is not None]
            self.norms.append(torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(g) for g in grads])).item())

        # Lightning runs the backward (and the clipping) inside step(closure): the gradients
        # the update used are read after it, before the next zero_grad.
        self.optimizer.register_step_post_hook(hook)


def _fit(precision: str, clip: float) -> StepNorms:
    torch.manual_seed(0)
    task = TranslationModule(from_dict(tiny(trainer={"precision": precision})), 120)
    seen = StepNorms()
    trainer = L.Trainer(max_steps=3, precision=precision, gradient_clip_val=clip,
                        accelerator="cpu", devices=1, logger=False, callbacks=[seen],
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0)
    trainer.fit(task, train_dataloaders=DataLoader(_batches(), batch_size=None))
    return seen


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true", "bf16-true"])
def test_fused_adamw_clips_gradients_in_every_precision_it_runs_in(monkeypatch, precision):
    monkeypatch.setattr(base, "adamw_impl", lambda device, precision: "fused")
    clip = 1e-3  # far below the tiny model's gradient norm: every step is clipped
    seen = _fit(precision, clip)
    assert seen.optimizer.defaults["fused"] is True
    assert len(seen.norms) == 3
    assert all(norm <= clip * 1.01 for norm in seen.norms), seen.norms


def test_lightning_itself_refuses_to_clip_for_fused_adamw_under_bf16_mixed(monkeypatch):
    """What the task's own clipping is there for: Lightning's plugin, left to clip, raises."""
    monkeypatch.setattr(base, "adamw_impl", lambda device, precision: "fused")
    monkeypatch.setattr(base.TaskModule, "configure_gradient_clipping",
                        L.LightningModule.configure_gradient_clipping)
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        _fit("bf16-mixed", 1.0)


def test_a_cpu_run_asks_for_its_parameters_device_and_steps_fused(monkeypatch):
    asked = []

    def spy(device: str, precision: str) -> str:
        asked.append((device, precision))
        return adamw_impl(device, precision)

    monkeypatch.setattr(base, "adamw_impl", spy)
    seen = _fit("bf16-mixed", 0.0)
    assert asked == [("cpu", "bf16-mixed")]
    assert seen.optimizer.defaults["fused"] is True and not seen.optimizer.defaults["foreach"]
