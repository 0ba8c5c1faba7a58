"""What every task shares: building the model from the recipe, the optimizer, the FLOPs a
training batch costs (for Lightning's ``ThroughputMonitor``) and what a checkpoint carries so it
can be used without the run directory.

A task says two things about a batch: its model's :meth:`~TaskModule.logits`, and its
:meth:`~TaskModule.loss_terms` (summed token loss and token count, :mod:`normzoo.nn.token_loss`).
Training, validation, diagnostics and the divergence guard use nothing else.

A checkpoint holds only plain data (dicts, strings, tensors) so that it loads with
``torch.load(weights_only=True)``: the resolved recipe, the tokenizer as JSON, the plugins that
built the model (name, distribution, version; a task plugin's too) and the run's identity.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, ClassVar

import lightning as L
import torch
import torch.distributed as dist
from lightning.fabric.plugins.precision.amp import _optimizer_handles_unscaling
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import rank_zero_info

from normzoo import __version__, registry
from normzoo.checkpoints import rng_state as rng
from normzoo.contract import task_of
from normzoo.data.shapes import ladder_rungs
from normzoo.nn.token_loss import LossTerms
from normzoo.recipe import Recipe
from normzoo.tasks.compiled import (
    CompileCount,
    compile_step,
    compiled_inputs,
    recompiles_expected,
)
from normzoo.tasks.counting import flops_per_token, sentences, tokens
from normzoo.tasks.optim import GROUP_NAMES, adamw_impl, build_optimizer


class TaskModule(L.LightningModule):
    """Base LightningModule, built from the validated recipe."""

    # Label smoothing is a training-time regulariser of translation; the LM tasks train on the
    # plain cross-entropy, as BERT and GPT do.
    smooths_labels = False
    # The [batch, time] tensors the loss reads, and the value padding takes in each: what
    # the compiled step is given (compiled.compiled_inputs).
    loss_inputs: ClassVar[dict[str, int]] = {}

    def __init__(self, recipe: Recipe, vocab_size: int, tokenizer_json: str = "") -> None:
        super().__init__()
        # Logged (TensorBoard, hparams.yaml) as plain data; the checkpoint's: on_save_checkpoint.
        self.save_hyperparameters({"recipe": recipe.to_dict(), "vocab_size": vocab_size})
        self.recipe = recipe
        # The task's model (a classifier adds its head to the assembled encoder).
        self.model = task_of(recipe).build_model(recipe, vocab_size)
        # trainer.compile: the training and validation step compiled (trainer.compile_scope:
        # each layer class a region, or the model and loss as one), never the module itself,
        # so checkpoint keys stay unprefixed; decoding calls encode/decode, left eager.
        self._compiled: Callable[..., LossTerms] | None = None
        self._compiles: CompileCount | None = None
        if mode := self.recipe.trainer.compile:
            shapes = ladder_rungs(recipe.data)
            self._compiled = compile_step(self.loss_terms, mode, shapes)
            self._compiles = CompileCount()
            self._expected_compiles = recompiles_expected(shapes, self._compiled)  # then said
        self.tokenizer_json = tokenizer_json
        # Training FLOPs per token, measured on this process's first batch (see flops_per_batch);
        # None until measured, or where the model cannot be measured.
        self._flops_per_token: float | None = None
        self._flops_measured = False
        self._batch_tokens = 0  # tokens of the training batch being processed
        self.last_loss = torch.zeros(())  # this step's mean token loss, for the divergence guard
        # Summed token loss and tokens of the batches since train/loss was last written.
        self._interval = (torch.zeros(()), torch.zeros((), dtype=torch.long))
        self._due: dict[str, torch.Tensor | float] = {}  # this step's scalars, for late_logs
        self._pending_rng: dict[str, Any] | None = None  # generator states of a resumed run
        self.identity: dict[str, Any] | None = None  # normzoo.run.identity; None: unknown

    def logits(self, batch: dict[str, Any]) -> torch.Tensor:
        """The model's logits for ``batch`` (also used by a scheme's data-dependent init and to
        locate a NaN)."""
        raise NotImplementedError

    def loss_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """Summed token loss of ``batch`` (label-smoothed by ``smoothing``) and its count."""
        raise NotImplementedError

    def step_terms(self, batch: dict[str, Any], smoothing: float = 0.0) -> LossTerms:
        """:meth:`loss_terms` as training and validation compute it: under ``trainer.compile``
        through the compiled region, on the loss's tensors alone
        (:func:`~normzoo.tasks.compiled.compiled_inputs`); eager otherwise."""
        if self._compiled is None:
            return self.loss_terms(batch, smoothing)
        return self._compiled(compiled_inputs(batch, self.loss_inputs), smoothing)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Under ``trainer.compile``, say on stderr why the model compiled again once it has
        compiled more than a handful of times: each compile costs seconds to minutes, and one
        per batch means the run pays compiling for nothing (``compile/compiles`` is logged with
        the step's loss)."""
        if self._compiles is None:
            return
        fresh, reasons = self._compiles.new_since()
        total = self._compiles.compiles
        if fresh and total > self._expected_compiles and self.trainer.is_global_zero:
            why = "; ".join(line.strip() for line in reasons) or "TorchDynamo gave no reason"
            print(f"trainer.compile: compiled again at step {self.trainer.global_step} "
                  f"({total} compiles so far): {why}", file=sys.stderr)

    def on_train_batch_start(self, batch: dict[str, Any], batch_idx: int) -> None:
        # A scheme that sets state from data (Admin ``init: profiled``) sees the first training
        # batch; a resumed run restored that state from its checkpoint before this.
        if self.trainer.global_step == 0 and self.model.scheme.needs_data_init(self.model):
            self.data_init(batch)
        if not self._flops_measured:  # this process's first batch
            self._flops_measured = True
            if self._monitors_throughput():
                self._flops_per_token = flops_per_token(self, batch)

    # Whether a ThroughputMonitor reads flops_per_batch: set by whoever gives the Trainer one
    # (a training run, whose RunCallbacks hold it), never looked up in trainer.callbacks.
    flops_read = False

    def _monitors_throughput(self) -> bool:
        """Whether Lightning's ThroughputMonitor reads :attr:`flops_per_batch` here: it does on
        the global rank 0 only, where one was given (:attr:`flops_read`)."""
        return self.trainer.is_global_zero and self.flops_read

    @property
    def flops_per_batch(self) -> int | None:
        """FLOPs of the training batch just processed, forward and backward, which Lightning's
        ``ThroughputMonitor`` reads after each batch to log FLOPs per second and, on a GPU whose
        peak it knows, MFU.

        Token-budget batches change shape every step, so the FLOPs are measured once, on the
        first batch this process trains on (:func:`~normzoo.tasks.counting.flops_per_token`),
        and scaled by each batch's token count. Exact for a batch shaped like that one; for the
        others, attention (quadratic in the length), padding and, in translation, the source
        tokens per target token are counted as they were in it. None outside training
        (validation runs forward only) and where nothing could be measured.
        """
        if not self.training or not self._flops_per_token:
            return None
        return round(self._flops_per_token * self._batch_tokens)

    def data_init(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The scheme's data-dependent init (:meth:`ResidualScheme.data_init
        <normzoo.residual.base.ResidualScheme.data_init>`) on ``batch`` in training mode; with
        several processes every one takes rank 0's state, so the replicas agree. The generators
        are left as they were: the run's dropout masks do not depend on whether it ran."""
        scheme = self.model.scheme
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            state = scheme.data_init(self.model, lambda: self.logits(batch))
        if self._trainer is not None and self.trainer.world_size > 1:
            state = self.trainer.strategy.broadcast(state, src=0)
            scheme.load_data_init(self.model, state)
        rank_zero_info(scheme.describe_data_init(state))
        return state

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        smoothing = self.recipe.optim.label_smoothing if self.smooths_labels else 0.0
        terms = self.step_terms(batch, smoothing)
        self.last_loss = terms.mean.detach()
        self._log_interval_loss(terms, batch)
        self._batch_tokens = tokens(batch)
        return self.global_token_mean(terms.loss_sum, terms.tokens)

    def _log_interval_loss(self, terms: LossTerms, batch: dict[str, Any]) -> None:
        """Log ``train/loss`` as the token mean over every batch since it was last written
        (``trainer.log_every_steps`` updates, accumulated batches included, all processes), not
        the loss of the one batch at the logged step: what a comparison between runs reads
        should not be one batch's noise."""
        loss_sum, count = self._interval
        loss_sum = loss_sum.to(terms.loss_sum.device) + terms.loss_sum.detach().float()
        count = count.to(terms.tokens.device) + terms.tokens.detach()
        self._interval = (loss_sum, count)
        if self._trainer is not None and (self.trainer.fit_loop._should_accumulate()
                                          or not self.trainer._logger_connector.should_update_logs):
            return  # Lightning writes a step's metrics at its last batch, every log interval
        if self._trainer is not None and self.trainer.world_size > 1:
            loss_sum = self.trainer.strategy.reduce(loss_sum, reduce_op="sum")
            count = self.trainer.strategy.reduce(count.float(), reduce_op="sum")
        self._write("train/loss", loss_sum / count.clamp(min=1), batch)
        self._interval = (torch.zeros_like(self._interval[0]),
                          torch.zeros_like(self._interval[1]))
        if self._compiles is not None:  # TorchDynamo's compiles in this process so far
            self._write("compile/compiles", float(self._compiles.compiles), batch)

    # Whether the run reads this step's logged scalars late (its LateLogs callback: set by
    # whoever gives the Trainer one, as flops_read): they are then handed over, never logged
    # here, where Lightning would read them on the host at once.
    late_logs = False

    def _write(self, name: str, value: torch.Tensor | float, batch: dict[str, Any]) -> None:
        """Log ``value`` at this step: through the run's late reader, or Lightning's log."""
        if self.late_logs:
            self._due[name] = value
        else:
            self.log(name, value, prog_bar=name == "train/loss", on_step=True, on_epoch=False,
                     batch_size=sentences(batch))

    def take_logged(self) -> dict[str, torch.Tensor | float]:
        """The scalars this step logs (device tensors, host numbers), handed over once."""
        due, self._due = self._due, {}
        return due

    # -- optimisation ---------------------------------------------------------------------------
    def configure_optimizers(self):
        """AdamW and its schedule, stepped per update. The scheduler is named ``train``: Lightning's
        LearningRateMonitor logs the rates under that name and the groups' names
        (:data:`~normzoo.tasks.optim.GROUP_NAMES`), ``train/lr`` and ``train/lr_no_decay``."""
        # Lightning has moved the model to its device by now (Strategy.setup, then
        # setup_optimizers), so its parameters say where the update runs.
        device = next(self.model.parameters()).device.type
        impl = adamw_impl(device, self.recipe.trainer.precision)
        optimizer, scheduler = build_optimizer(
            self.model, self.recipe.optim, self.recipe.trainer.max_steps, impl)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "name": "train"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None) -> None:
        """Lightning's clipping, except for a fused AdamW under ``bf16-mixed``: Lightning's
        mixed-precision plugin refuses to clip for an optimizer that unscales its own gradients
        even where no GradScaler scaled them, so the norm is clipped here as its plain
        precision plugin clips it (:func:`~normzoo.tasks.optim.adamw_impl`)."""
        plugin = self.trainer.precision_plugin
        if (gradient_clip_val and isinstance(plugin, MixedPrecision) and plugin.scaler is None
                and _optimizer_handles_unscaling(optimizer)):
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val,
                                     gradient_clip_algorithm or "norm")
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer, optimizer_closure=None) -> None:
        """One update, then the scheme's constraint on the updated weights
        (:meth:`ResidualScheme.after_step <normzoo.residual.base.ResidualScheme.after_step>`).
        Lightning calls this once per real update, after the accumulated batches' backward
        passes, so the constraint never sees a half-accumulated state; under DDP every process
        makes the same update and applies it to the same weights."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self.model.scheme.after_step(self.model)

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

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["normzoo"] = {
            "version": __version__,
            "recipe": self.recipe.to_dict(),
            "tokenizer": self.tokenizer_json,
            "plugins": [*self.model.plugins, *registry.task_provenance(self.recipe.task)],
            "rng": self._per_rank(rng.capture()),
            # The loss window train/loss is the mean of: a resumed run logs the same value.
            "loss_window": self._per_rank([t.detach().cpu() for t in self._interval]),
            "identity": self.identity,
        }
        if (state := self.model.scheme.data_init_state(self.model)) is not None:
            checkpoint["normzoo"]["data_init"] = state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("normzoo", {})
        self.tokenizer_json, self.identity = saved.get("tokenizer", ""), saved.get("identity")
        states = saved.get("rng") or []
        rank = self.trainer.global_rank if self._trainer is not None else 0
        # Restored when training starts, before the next batch is fetched: its collation may
        # draw (MLM masks), and Lightning draws nothing between then and the next step.
        self._pending_rng = states[rank] if rank < len(states) else None
        windows = saved.get("loss_window") or []
        if rank < len(windows):
            self._interval = (windows[rank][0].float(), windows[rank][1].long())
        # A checkpoint from before the parameter groups were named: loading it would drop the
        # names, and the learning rates would be logged under other keys.
        for optimizer in checkpoint.get("optimizer_states", []):
            for group, name in zip(optimizer.get("param_groups", []), GROUP_NAMES, strict=False):
                group.setdefault("name", name)

    def on_train_start(self) -> None:
        if self._pending_rng is not None:
            rng.restore(self._pending_rng)
            self._pending_rng = None

    def _per_rank(self, state: Any) -> list[Any]:
        """Every process's ``state`` (generator states, loss window) by rank: rank 0 saves it."""
        if self._trainer is None or self.trainer.world_size == 1:
            return [state]
        gathered: list[Any] = [None] * self.trainer.world_size
        dist.all_gather_object(gathered, state)
        return gathered

