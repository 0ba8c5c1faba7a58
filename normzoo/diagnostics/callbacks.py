"""Lightning callbacks: periodic diagnostics, and stopping a run that diverges.

Both read the task's ``model`` and its ``logits(batch)``; the diagnostics change nothing, the
guard only withholds a diverged update.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import lightning as L
import torch

from normzoo.diagnostics.probes import (
    Measurements,
    first_non_finite,
    first_non_finite_gradient,
    gradient_norms,
    probe,
)
from normzoo.errors import NormzooError
from normzoo.io.late import LateValues


class DivergenceError(NormzooError):
    """Training produced a non-finite or exploding loss or gradient; the run was stopped.

    ``step`` and ``last_checkpoint`` travel with the message so that ``summary.json`` can
    record them as fields, not only as text.
    """

    exit_code = 3

    def __init__(self, message: str, step: int | None = None,
                 last_checkpoint: str | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.last_checkpoint = last_checkpoint


class DiagnosticsCallback(L.Callback):
    """Every ``every`` optimizer steps, log the measurements of :mod:`~normzoo.diagnostics.probes`
    for that step's batch as ``diag/<metric>/<name>``."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._stack: ExitStack | None = None
        self._found: Measurements | None = None
        self._step = 0

    def _due(self, trainer: L.Trainer) -> bool:
        return trainer.global_step % self.every == 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._due(trainer) and self._stack is None:
            self._step = trainer.global_step
            self._stack = ExitStack()
            self._found = self._stack.enter_context(probe(pl_module.model))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self._found is not None:
            self._found.grad_norm = gradient_norms(pl_module.model)  # before clipping

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._stack is None or self._found is None or not self._found.grad_norm:
            return  # still accumulating: measure once the step's gradients are complete
        self._stack.close()
        values = {f"diag/{k}": v for k, v in self._found.flat().items()}
        self._stack, self._found = None, None
        # Straight to the loggers (rank 0 only): a hundred scalars per measured step, written
        # once, at the step they describe, rather than cached and repeated by self.log.
        for logger in trainer.loggers:
            logger.log_metrics(values, step=self._step)


def skips_on_device(optimizer: Any) -> bool:
    """Whether ``optimizer`` can skip its update on the device: torch's fused Adam and AdamW
    read a ``found_inf`` tensor and leave the weights, their moments and their step counts as
    they were where it is non-zero (GradScaler's way of skipping a step)."""
    return isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and bool(
        optimizer.defaults.get("fused"))


class DivergenceGuard(L.Callback):
    """Stop a run whose loss or gradient goes non-finite (or whose loss exceeds ``max_loss``)
    before the broken update reaches the weights, naming the step, the first module whose
    output is non-finite on that step's batch (forward order) and the first parameter with a
    non-finite gradient.

    The verdict is made on the device every step, and the host does not wait for it. Where the
    optimizer can skip its update there (:func:`skips_on_device`: the fused AdamW a run uses
    outside ``16-mixed``), a bad step's update and every later one are skipped on the device,
    the verdict reaches the host through :class:`~normzoo.io.late.LateValues`, and the run
    stops at the first hook that finds it landed: on a CPU the step's own end, on a GPU a step
    or two later, the weights still those before the bad step. Before validation, before any
    checkpoint is written and at the end of training the verdict is waited for, so no
    checkpoint is ever written after a bad step: the run's last checkpoint stays the last good
    one, and it loses no checkpointed work. Where the optimizer cannot skip on the device
    (``16-mixed``'s foreach AdamW, whose GradScaler reads its own verdict on the host anyway),
    the verdict is read before the update, as then it must be: one wait a step.
    """

    def __init__(self, max_loss: float | None = None) -> None:
        self.max_loss = max_loss
        self._batches: dict[int, Any] = {}  # each unverified step's batch, to locate a NaN
        self._verdicts = LateValues()  # (step, [bad, loss, gradient norm])
        self._bad: torch.Tensor | None = None  # any step bad yet: the device's found_inf

    def on_train_start(self, trainer, pl_module) -> None:
        self._batches, self._bad = {}, None
        self._verdicts.clear()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._check(trainer, pl_module, self._verdicts.landed())
        self._batches[trainer.global_step] = batch  # a step's last batch, once accumulated

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        loss = pl_module.last_loss
        grads = [p.grad for p in pl_module.model.parameters() if p.grad is not None]
        grad_norm = torch.stack(torch._foreach_norm(grads)).norm() if grads else loss * 0
        bad = ~torch.isfinite(loss) | ~torch.isfinite(grad_norm)
        if self.max_loss is not None:
            bad = bad | (loss > self.max_loss)
        if trainer.world_size > 1:  # every process stops together
            bad = trainer.strategy.reduce(bad.float(), reduce_op="sum") > 0
        step = trainer.global_step
        if not skips_on_device(optimizer):
            if bool(bad):  # the verdict must reach the host before the update is made
                self._stop(trainer, pl_module, step, float(loss), float(grad_norm))
            self._batches.pop(step, None)
            return
        self._bad = bad if self._bad is None else self._bad | bad
        optimizer.found_inf = self._bad.to(torch.float32)  # read by the fused step
        self._verdicts.post(step, [bad, loss, grad_norm])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._check(trainer, pl_module, self._verdicts.landed())

    def on_validation_start(self, trainer, pl_module) -> None:
        self._check(trainer, pl_module, self._verdicts.drain())

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self._check(trainer, pl_module, self._verdicts.drain())

    def on_train_end(self, trainer, pl_module) -> None:
        self._check(trainer, pl_module, self._verdicts.drain())

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._verdicts.clear()

    def _check(self, trainer: Any, pl_module: Any, landed: list) -> None:
        for step, (bad, loss, grad_norm) in landed:
            if bad:
                self._stop(trainer, pl_module, step, loss, grad_norm)
            self._batches.pop(step, None)

    def _stop(self, trainer: Any, pl_module: Any, step: int, loss: float,
              grad_norm: float) -> None:
        self._verdicts.clear()
        model, batch = pl_module.model, self._batches.get(step)
        layer = first_non_finite(model, lambda: pl_module.logits(batch)) if batch else None
        param = first_non_finite_gradient(model)
        saved = getattr(trainer.checkpoint_callback, "last_model_path", "") or None
        raise DivergenceError(
            f"training diverged at step {step}: loss {loss:.4g}, gradient norm "
            f"{grad_norm:.4g}; first non-finite output: {layer or 'none (finite forward pass)'}"
            f"; first non-finite gradient: {param or 'none'}. The last good checkpoint is "
            f"{saved or 'none yet'}", step=step, last_checkpoint=saved)
