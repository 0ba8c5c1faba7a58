"""Lightning callbacks: periodic diagnostics, and stopping a run that diverges.

Both read the task's ``model`` and its ``logits(batch)``; neither changes training.
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


class DivergenceGuard(L.Callback):
    """Stop before a non-finite (or above ``max_loss``) loss or gradient reaches the weights.

    The error names the step, the first module whose output is non-finite on the offending
    batch (forward order), and the first parameter with a non-finite gradient. Raised before
    the optimizer step, so no checkpoint with broken weights is ever written: the run's last
    checkpoint stays the last good one.
    """

    def __init__(self, max_loss: float | None = None) -> None:
        self.max_loss = max_loss
        self._batch: Any = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._batch = batch

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        loss = pl_module.last_loss
        grads = [p.grad for p in pl_module.model.parameters() if p.grad is not None]
        grad_norm = torch.stack(torch._foreach_norm(grads)).norm() if grads else loss * 0
        bad = ~torch.isfinite(loss) | ~torch.isfinite(grad_norm)
        if self.max_loss is not None:
            bad = bad | (loss > self.max_loss)
        if trainer.world_size > 1:  # every process stops together
            bad = trainer.strategy.reduce(bad.float(), reduce_op="sum") > 0
        # The one host-device sync this guard costs each step, kept on purpose: the verdict
        # must reach the host before the optimizer step, or the broken update is already made.
        if not bool(bad):
            return
        model = pl_module.model
        layer = first_non_finite(model, lambda: pl_module.logits(self._batch))
        param = first_non_finite_gradient(model)
        saved = getattr(trainer.checkpoint_callback, "last_model_path", "") or None
        raise DivergenceError(
            f"training diverged at step {trainer.global_step}: loss {float(loss):.4g}, "
            f"gradient norm {float(grad_norm):.4g}; first non-finite output: "
            f"{layer or 'none (finite forward pass)'}; first non-finite gradient: "
            f"{param or 'none'}. The last good checkpoint is {saved or 'none yet'}",
            step=trainer.global_step, last_checkpoint=saved,
        )
