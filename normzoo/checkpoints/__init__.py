"""Checkpoint files: writing them whole, keeping a run's rolling set, and loading a model back.

* :mod:`~normzoo.checkpoints.atomic` — every file of a run written whole or not at all.
* :mod:`~normzoo.checkpoints.rolling` — which checkpoints a run keeps; which one a resume takes.
* :mod:`~normzoo.checkpoints.load` — ``normzoo.load``: the one way down from a file to a model,
  through the three modules below, each entered once.
* :mod:`~normzoo.checkpoints.reading` — read a checkpoint file or export folder; check each part.
* :mod:`~normzoo.checkpoints.plugins` — the plugins that built the model, installed here?
* :mod:`~normzoo.checkpoints.rebuild` — the saved recipe validated, the model assembled, the
  weights loaded into it.
"""
