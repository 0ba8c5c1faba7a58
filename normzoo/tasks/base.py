"""What every task shares: building the model from the recipe, the optimizer, throughput logging
and what a checkpoint carries so it can be used without the run directory.

A task says two things about a batch: its model's :meth:`~NormzooTask.logits`, and its
:meth:`~NormzooTask.loss_terms` (summed token loss and token count, :mod:`normzoo.tasks.terms`).
Training, validation, diagnostics and the divergence guard use nothing else.

A checkpoint holds only plain data (dicts, strings, tensors) so that it loads with
``torch.load(weights_only=True)``: the resolved recipe, the tokenizer as JSON, and the plugins
(name, distribution, version) that built the model.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

from normzoo import __version__, rng
from normzoo.models import assemble
from normzoo.optim import build_optimizer
from normzoo.recipe import Recipe
from normzoo.residual import admin
from normzoo.tasks.terms import LossTerms


class NormzooTask(L.LightningModule):
    """Base LightningModule, built from the validated recipe."""

    # Label smoothing is a training-time regulariser of translation; the LM tasks train on the
    # plain cross-entropy, as BERT and GPT do.
    smooths_labels = False

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__()
        # Logged (TensorBoard, hparams.yaml) as plain data; the checkpoint's own copy is in
        # on_save_checkpoint.
        self.save_hyperparameters({"recipe": recipe.to_dict(), "vocab_size": vocab_size})
        self.recipe = recipe
        self.model = assemble(recipe.model, vocab_size=vocab_size)
        if mode := self.recipe.trainer.compile:
            # In place, so checkpoint keys stay unprefixed; dynamic, because token-budget
            # batches change shape every step. Decoding calls encode/decode, left eager.
            self.model.compile(mode="default" if mode is True else mode, dynamic=True)
        self.tokenizer_json = tokenizer_json
        self._last_step_time: float | None = None
        self.last_loss = torch.zeros(())  # this step's mean token loss, for the divergence guard
        self._pending_rng: dict[str, Any] | None = None  # generator states of a resumed run

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        """The model's logits for ``batch`` (also used to profile Admin and locate a NaN)."""
        raise NotImplementedError

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Summed token loss of ``batch`` (label-smoothed by ``smoothing``) and its count."""
        raise NotImplementedError

    def on_train_batch_start(self, batch: dict[str, Any], batch_idx: int) -> None:
        # Admin ``init: profiled`` sets w from the first training batch; a resumed run restored
        # them (and their record) from its checkpoint before this.
        if self.trainer.global_step == 0 and self._unprofiled_admin():
            self.profile_admin(batch)

    def _unprofiled_admin(self) -> bool:
        return any(getattr(m, "profiled_omega", None) is not None and m.profiled_omega.item() <= 0
                   for m in self.model.modules())

    def profile_admin(self, batch: dict[str, Any]) -> dict[str, list[float]]:
        """Profile Admin's w on ``batch`` in training mode (:func:`normzoo.residual.admin.profile`);
        with several processes every one takes rank 0's values, as the reference profiles on a
        single GPU. The generators are left as they were: the run's dropout masks do not
        depend on whether it profiled."""
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            values = admin.profile(self.model, lambda: self.logits(batch))
        if self._trainer is not None and self.trainer.world_size > 1:
            values = self.trainer.strategy.broadcast(values, src=0)
            admin.set_profiled(self.model, values)
        from lightning.pytorch.utilities import rank_zero_info

        rank_zero_info("Admin profiled w: " + "; ".join(
            f"{name} " + ", ".join(f"{w:.4g}" for w in ws) for name, ws in values.items()))
        return values

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        smoothing = self.recipe.optim.label_smoothing if self.smooths_labels else 0.0
        terms = self.loss_terms(batch, smoothing)
        size = next(v for v in batch.values() if torch.is_tensor(v)).shape[0]  # sentences
        self.last_loss = terms.mean.detach()
        self.log("train/loss", self.last_loss, prog_bar=True, on_step=True, on_epoch=False,
                 batch_size=size)
        self.log_throughput(batch["ntokens"], size)
        return self.global_token_mean(terms.loss_sum, terms.tokens)

    # -- optimisation ---------------------------------------------------------------------------
    def configure_optimizers(self):
        optimizer, scheduler = build_optimizer(
            self.model, self.recipe.optim, self.recipe.trainer.max_steps
        )
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def global_token_mean(self, loss_sum: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """The training loss: this process's summed token losses over the tokens of the whole
        global batch (all processes), times the number of processes.

        DDP averages gradients over processes, so the update is exactly the one a single
        process would make on the whole global batch, however the tokens are split.
        """
        world = self.trainer.world_size if self._trainer is not None else 1
        if world == 1:
            return loss_sum / count.clamp(min=1)
        total = self.trainer.strategy.reduce(count.float(), reduce_op="sum")
        return loss_sum * world / total.clamp(min=1)

    def log_throughput(self, tokens: int, batch_size: int) -> None:
        """Tokens per second between consecutive training steps (data loading included)."""
        now = time.perf_counter()
        if self._last_step_time is not None:
            elapsed = max(now - self._last_step_time, 1e-9)
            self.log("train/tok_s", tokens / elapsed, prog_bar=True, on_step=True,
                     on_epoch=False, batch_size=batch_size)
        self._last_step_time = now
        optimizer = self.optimizers(use_pl_optimizer=False)
        self.log("train/lr", optimizer.param_groups[0]["lr"], prog_bar=True, on_step=True,
                 on_epoch=False, batch_size=batch_size)

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["normzoo"] = {
            "version": __version__,
            "recipe": self.recipe.to_dict(),
            "tokenizer": self.tokenizer_json,
            "plugins": self.model.plugins,
            "rng": self._rng_states(),
        }
        if (omegas := admin.profiled_omegas(self.model)) is not None:
            checkpoint["normzoo"]["admin_omega"] = omegas

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("normzoo", {})
        self.tokenizer_json = saved.get("tokenizer", "")
        states = saved.get("rng") or []
        rank = self.trainer.global_rank if self._trainer is not None else 0
        # Restored when training starts, before the next batch is fetched: its collation may
        # draw (MLM masks), and Lightning draws nothing between then and the next step.
        self._pending_rng = states[rank] if rank < len(states) else None

    def on_train_start(self) -> None:
        if self._pending_rng is not None:
            rng.restore(self._pending_rng)
            self._pending_rng = None

    def _rng_states(self) -> list[dict[str, Any]]:
        """Every process's generator states (all ranks save; rank 0 writes the file)."""
        state = rng.capture()
        if self._trainer is None or self.trainer.world_size == 1:
            return [state]
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.trainer.world_size
        dist.all_gather_object(gathered, state)
        return gathered

