"""The callbacks and plugin behind a run's checkpoints: when they are written, how, and where a
moved run finds them.

* :class:`RollingCheckpoints` writes ``step-N.ckpt`` and ``last.ckpt`` at every validation (the
  schedule and ``--resume auto``'s choice: :mod:`normzoo.checkpoints.rolling`);
* :class:`ValidateAtMaxSteps` validates, and so checkpoints, after the last step;
* :class:`RelocateCheckpoints` moves the best-checkpoint state of a run resumed from another
  folder (:mod:`normzoo.checkpoints.relocate`);
* :class:`BetweenEpochs` records a state saved between two epochs as the next epoch's start;
* :class:`AtomicCheckpointIO` writes every checkpoint whole or not at all
  (:mod:`normzoo.io.atomic`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn

from normzoo.checkpoints.relocate import relocated_state
from normzoo.checkpoints.rolling import link_last, prune_steps
from normzoo.io.atomic import save_checkpoint_atomically


class RollingCheckpoints(Checkpoint):
    """``step-N.ckpt`` (newest ``keep`` kept) then ``last.ckpt`` after every validation.

    A :class:`~lightning.pytorch.callbacks.Checkpoint` so that Lightning runs it after the
    other callbacks and after the best-checkpoint ``ModelCheckpoint`` listed before it:
    ``last.ckpt`` is the final write of a validation and holds their final state. The run
    reads ``saved_step`` to know whether its final state is already saved.
    """

    def __init__(self, dirpath: Path, keep: int) -> None:
        self.dirpath, self.keep = Path(dirpath), keep
        self.saved_step = -1

    def on_validation_end(self, trainer, pl_module) -> None:
        if (trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING
                or trainer.global_step == self.saved_step or trainer.global_step == 0):
            return
        self.save(trainer)

    def save(self, trainer) -> Path:
        """Write this step's checkpoints; return the path of ``last.ckpt``."""
        step = trainer.global_step
        last = self.dirpath / "last.ckpt"
        if self.keep:
            path = self.dirpath / f"step-{step}.ckpt"
            trainer.save_checkpoint(path, weights_only=False)
            linked = False
            if trainer.is_global_zero and path.is_file():
                linked = link_last(path, last)
            linked = trainer.strategy.broadcast(linked)
            if not linked:  # a sharded (folder) checkpoint, or no hard links here
                trainer.save_checkpoint(last, weights_only=False)
            if trainer.is_global_zero:
                self.prune(step)
        else:
            trainer.save_checkpoint(last, weights_only=False)
        trainer.strategy.barrier("rolling_checkpoints")
        self.saved_step = step
        return last

    def prune(self, step: int) -> None:
        """Delete all but the newest ``keep`` ``step-`` checkpoints up to ``step``
        (:func:`~normzoo.checkpoints.rolling.prune_steps`)."""
        prune_steps(self.dirpath, step, self.keep)


class ValidateAtMaxSteps(Callback):
    """Validate (and so checkpoint) after the last optimizer step, whatever
    ``val_every_steps`` is.

    Lightning validates every ``val_check_interval`` batches only, so a run whose
    ``max_steps`` is not a multiple of ``val_every_steps`` would end with steps that no
    validation scored and no ``step-N``/``best`` checkpoint holds: the final test would take
    the best of the earlier ones, as if the last steps had not been trained. Asking Lightning to
    stop at the last step (``should_stop``) makes it validate there, with the checkpoints that
    follow a validation, exactly as early stopping does.

    Asked as the last step's last batch *starts*: Lightning also writes a step's logs when a
    stop is due, and the task logs ``train/loss`` only where Lightning will write it, so the
    last step's loss is logged once, fresh (asked later, Lightning would write the value of an
    earlier step again under the last one).
    """

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if 0 < trainer.max_steps <= trainer.global_step + 1 and \
                not trainer.fit_loop._should_accumulate():
            trainer.should_stop = True


class RelocateCheckpoints(Callback):
    """Relocate the best-checkpoint state of ``checkpoint`` (the run's best-checkpoint
    ``ModelCheckpoint``) before Lightning restores it, when a run resumes from another folder
    than the one it recorded.

    Lightning calls every callback's ``on_load_checkpoint`` with the loaded checkpoint
    before any callback's ``load_state_dict``. A callback of its own rather than a subclass
    of ``ModelCheckpoint``: a subclass would change the state key (the class name) under
    which the run's checkpoints hold that state.
    """

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint = checkpoint

    def on_load_checkpoint(self, trainer, pl_module, loaded: dict[str, Any]) -> None:
        checkpoint = self.checkpoint
        states = loaded.get("callbacks") or {}
        state = states.get(checkpoint.state_key)
        if not isinstance(state, dict):
            return
        states[checkpoint.state_key], missing = relocated_state(state, checkpoint)
        if missing and trainer.is_global_zero:
            typer.echo(f"warning: the run's checkpoints moved from {state['dirpath']} to "
                       f"{checkpoint.dirpath}; its best checkpoint"
                       f"{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(Path(p).name for p in missing)} "
                       f"{'are' if len(missing) > 1 else 'is'} not there and left out",
                       err=True)


class BetweenEpochs(Callback):
    """A checkpoint written between two epochs (a stop signal at an epoch's last batch, which
    Lightning acts on only once the epoch has ended; the state saved when ``fit`` returns)
    records no batch of the next epoch as done.

    Lightning clears the epoch's batch count when the next epoch starts, so such a state still
    counts the ended epoch's batches; a resume read them as the next epoch's, fetched that many
    fewer batches in it and moved on to the following epoch early (a 3-batch epoch stopped at
    its last batch: the resumed run trained one batch of the next and then the one after's,
    its losses apart from step 10 on). Mid-epoch states are left as they are.
    """

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        fit = checkpoint.get("loops", {}).get("fit_loop")
        if not fit:
            return
        epochs = fit["epoch_progress"]["total"]
        if epochs["ready"] != epochs["completed"]:  # an epoch in flight: mid-epoch
            return
        batches = fit["epoch_loop.batch_progress"]
        batches["current"] = dict.fromkeys(batches["current"], 0)
        batches["is_last_batch"] = False


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, with writes that are atomic and durable
    (:func:`~normzoo.io.atomic.save_checkpoint_atomically`): never a half-written checkpoint
    that a resume would pick up."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint_atomically(checkpoint, path)
