"""The training throughput a run logs (tokens, examples, batches and FLOPs per second, MFU):
Lightning's ``ThroughputMonitor``, without its wait for the GPU at every batch.

Lightning synchronises the GPU at the end of every batch, so that its host clock counts the
batch's kernels: every step's kernels then had to finish before the host queued the next
step's. Here a GPU's training batches are timed on the GPU's own clock: at the batches whose
time a logged figure reads (:func:`clock_read`) a timing CUDA event is recorded, which costs the
host nothing, and the figures are computed once the event has completed (polled without
waiting at each batch's end; waited for before validation, a checkpoint and the end of
training). Their time is the training time before the current stretch (up to the last
validation, or the time trained before a resume) plus the GPU's time from the stretch's first
event to the batch's. Validation, as ever, is left out: a stretch begins when it ends. On a
CPU there is nothing to wait for: the host clock is read as the batch ends.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities import rank_zero_only

from normzoo.run.hardware import peak_bf16_flops
from normzoo.tasks.counting import sentences, tokens

TRAINING = RunningStage.TRAINING


def on_gpu(trainer: Any) -> bool:
    """Whether the run's device is a GPU, whose queued kernels the host clock does not see."""
    return trainer.strategy.root_device.type == "cuda"


def timing_event() -> Any:
    """A CUDA event that records the GPU's time when the kernels queued before it are done."""
    return torch.cuda.Event(enable_timing=True)


def clock_read(trainer: Any) -> bool:
    """Whether a logged throughput figure reads the time at the end of the training batch that
    just ended: a batch of a step whose metrics are written (``train/time``, and the end of the
    rate's two-batch window), or the last batch of the step before it (the window's start)."""
    if trainer._logger_connector.should_update_logs:
        return True
    stepped = trainer.fit_loop.epoch_loop._batches_that_stepped  # steps before this one
    every = max(trainer.log_every_n_steps, 1)
    return not trainer.fit_loop._should_accumulate() and (stepped + 2) % every == 0


class TrainingThroughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor, logging the training throughput only, and never making
    the host wait for a GPU during training (module docstring).

    It still times validation, to leave it out of the training time, but does not log it:
    Lightning would log validation throughput with the count of validation batches as the
    step, rows out of step with the training steps in ``metrics.csv`` and the other logs.
    """

    def __init__(self) -> None:
        # A window of two updates: each logged rate is the last batch's tokens (examples,
        # FLOPs) over the time since the batch before it ended, its data loading included.
        super().__init__(batch_size_fn=sentences, length_fn=tokens, window_size=2)
        # A GPU's timed batches not yet computed: (event, counters, (step, epoch) if logged).
        self._timed: deque[list[Any]] = deque()
        self._stretch: tuple[Any, float] | None = None  # (first event, training time before)
        self._trainer: Any = None

    @torch.inference_mode()
    def _update(self, trainer: Any, pl_module: Any, batch: Any, iter_num: int) -> None:
        """Lightning's (2.6) update; a GPU's training batch is timed by an event, and only
        where a logged figure reads its time (:func:`clock_read`)."""
        stage = trainer.state.stage
        training = stage == TRAINING
        gpu = on_gpu(trainer)
        if gpu and not training:
            torch.cuda.synchronize()  # validation's own figure, never logged: the host clock
        self._lengths[stage] += self.length_fn(batch)
        self._samples[stage] += self.batch_size_fn(batch)
        self._batches[stage] += 1
        counts = {"batches": self._batches[stage], "samples": self._samples[stage],
                  "lengths": self._lengths[stage], "flops": pl_module.flops_per_batch}
        if gpu and training:
            if clock_read(trainer):
                event = timing_event()
                event.record()
                self._timed.append([event, counts, None])
            return
        self._throughputs[stage].update(time=time.perf_counter() - self._t0s[stage], **counts)

    def _compute(self, trainer: Any, iter_num: int | None = None) -> None:
        if trainer.state.stage != TRAINING:
            return
        if not on_gpu(trainer):
            super()._compute(trainer, iter_num)
        elif trainer._logger_connector.should_update_logs and self._timed:
            # Logged once its event is done, under the step and epoch it describes.
            self._timed[-1][2] = (trainer.fit_loop.epoch_loop._batches_that_stepped,
                                  trainer.current_epoch)
            self._land(trainer, wait=False)

    def _land(self, trainer: Any, wait: bool) -> None:
        """Compute (and log, where due) the timed batches whose events are done, oldest first;
        with ``wait``, all of them."""
        while (self._timed and self._stretch is not None and self._stretch[0] is not None
               and (wait or self._timed[0][0].query())):
            event, counts, logged = self._timed.popleft()
            start, before = self._stretch
            if wait:  # the stretch's start came before: done once the batch's event is
                event.synchronize()
                start.synchronize()
            throughput = self._throughputs[TRAINING]
            throughput.update(time=before + start.elapsed_time(event) / 1000, **counts)
            if logged is not None:
                step, epoch = logged
                metrics = {f"{TRAINING.value}{throughput.separator}{k}": v
                           for k, v in throughput.compute().items()}
                trainer._logger_connector.log_metrics({**metrics, "epoch": epoch}, step=step)

    def _begin_stretch(self, before: float) -> None:
        start = timing_event()
        start.record()
        self._stretch = (start, before)

    def _trained(self, trainer: Any) -> float:
        """Seconds trained so far, waiting for the GPU: every timed batch computed first."""
        self._land(trainer, wait=True)
        if self._stretch is None:
            return 0.0
        now = timing_event()
        now.record()
        now.synchronize()
        start, before = self._stretch
        start.synchronize()
        return before + start.elapsed_time(now) / 1000

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        super().on_train_batch_end(trainer, *args)
        if on_gpu(trainer) and trainer.is_global_zero:
            self._land(trainer, wait=False)

    @rank_zero_only
    def on_validation_start(self, trainer: Any, *args: Any) -> None:
        if on_gpu(trainer) and not trainer.sanity_checking and self._stretch is not None:
            self._stretch = (None, self._trained(trainer))  # paused until validation ends
        super().on_validation_start(trainer, *args)

    @rank_zero_only
    def on_validation_end(self, trainer: Any, *args: Any) -> None:
        super().on_validation_end(trainer, *args)
        if on_gpu(trainer) and self._stretch is not None and self._stretch[0] is None:
            self._begin_stretch(self._stretch[1])

    @rank_zero_only
    def on_train_end(self, trainer: Any, *args: Any) -> None:
        if on_gpu(trainer):
            self._land(trainer, wait=True)

    def setup(self, trainer, pl_module, stage: str) -> None:
        """For a bf16 run on a GPU, normzoo's dense bf16 peak (the one
        ``benchmarks/peers.py`` divides by); Lightning's peak otherwise. Lightning's table
        misses the H200 by the name torch gives it and lists the sparse figure for some
        parts (the H100 NVL), which would halve their MFU."""
        super().setup(trainer, pl_module, stage)
        self._trainer = trainer
        device = trainer.strategy.root_device
        if device.type != "cuda" or not str(trainer.precision).startswith("bf16"):
            return
        if peak := peak_bf16_flops(torch.cuda.get_device_name(device)):
            self.available_flops = peak[0]
            for throughput in self._throughputs.values():
                throughput.available_flops = peak[0]

    def state_dict(self) -> dict[str, Any]:
        """Training's counters and time at the checkpoint: a resumed run's ``train/batches``,
        ``train/samples``, ``train/lengths`` and ``train/time`` go on from them rather than
        from zero. A checkpoint waits for the GPU anyway: the timed batches are computed."""
        if self._trainer is not None and on_gpu(self._trainer) and self._trainer.is_global_zero:
            self._land(self._trainer, wait=True)
        times = self._throughputs[TRAINING]._time if TRAINING in self._throughputs else ()
        return {"batches": self._batches.get(TRAINING, 0),
                "samples": self._samples.get(TRAINING, 0),
                "lengths": self._lengths.get(TRAINING, 0), "time": times[-1] if times else 0.0}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resumed = dict(state_dict)

    def on_train_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        resumed, self._resumed = getattr(self, "_resumed", None), None
        before = resumed["time"] if resumed else 0.0
        if resumed and trainer.is_global_zero:
            for name in ("batches", "samples", "lengths"):
                getattr(self, f"_{name}")[TRAINING] = resumed[name]
            self._t0s[TRAINING] -= before  # the clock reads the time trained before too
        if on_gpu(trainer) and trainer.is_global_zero:
            self._timed.clear()
            self._begin_stretch(before)
