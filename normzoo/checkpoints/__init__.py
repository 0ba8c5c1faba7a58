"""Checkpoint files: which ones a run keeps, what they carry, and how one is read back.

* :mod:`~normzoo.checkpoints.rolling` — which checkpoints a run keeps; which one a resume takes.
* :mod:`~normzoo.checkpoints.relocate` — a run directory moved to another path resumes with its
  best checkpoint.
* :mod:`~normzoo.checkpoints.rng_state` — the random generators' states, carried in a
  checkpoint as plain data so that a resumed run draws what an unbroken one would.
* :mod:`~normzoo.checkpoints.reading` — read a checkpoint file or export folder; check each part.
* :mod:`~normzoo.checkpoints.plugins` — the plugins that built the model, installed here?
* :mod:`~normzoo.checkpoints.rebuild` — the saved recipe validated, the model assembled, the
  weights loaded into it.

``normzoo.load`` (:mod:`normzoo.inference.load`) goes down through the last three, each entered
once; files are written through :mod:`normzoo.io.atomic`.
"""
