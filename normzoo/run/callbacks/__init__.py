"""The Lightning classes of a training run, each defined once at module level and held by
reference: the run keeps the instances it needs to read after ``fit`` (which step was saved,
which signal stopped it) instead of looking them up in ``trainer.callbacks`` by name.

This package imports Lightning (and torch) when it is imported; the CLI imports
:mod:`normzoo.run` only inside its commands, which keeps ``normzoo --help`` quick.

* :mod:`~normzoo.run.callbacks.checkpoints` — :class:`RollingCheckpoints`,
  :class:`ValidateAtMaxSteps`, :class:`RelocateCheckpoints`, :class:`BetweenEpochs`,
  :class:`AtomicCheckpointIO`.
* :mod:`~normzoo.run.callbacks.signals` — :class:`StopOnSignal`.
* :mod:`~normzoo.run.callbacks.logs` — :class:`HistoryCSVLogger`,
  :class:`KeptOpenTensorBoardLogger`, :class:`FlushLogsOnCheckpoint`,
  :class:`StepLearningRate`.
* :mod:`~normzoo.run.callbacks.throughput` — :class:`TrainingThroughput`.
* :mod:`~normzoo.run.callbacks.late` — :class:`LateLogs`.
"""

from normzoo.run.callbacks.checkpoints import (
    AtomicCheckpointIO,
    BetweenEpochs,
    RelocateCheckpoints,
    RollingCheckpoints,
    ValidateAtMaxSteps,
)
from normzoo.run.callbacks.late import LateLogs
from normzoo.run.callbacks.logs import (
    FlushLogsOnCheckpoint,
    HistoryCSVLogger,
    HistoryWriter,
    KeptOpenTensorBoardLogger,
    StepLearningRate,
)
from normzoo.run.callbacks.signals import StopOnSignal
from normzoo.run.callbacks.throughput import TrainingThroughput

__all__ = ["AtomicCheckpointIO", "BetweenEpochs", "FlushLogsOnCheckpoint", "HistoryCSVLogger",
           "HistoryWriter", "KeptOpenTensorBoardLogger", "LateLogs", "RelocateCheckpoints",
           "RollingCheckpoints", "StepLearningRate", "StopOnSignal", "TrainingThroughput",
           "ValidateAtMaxSteps"]
