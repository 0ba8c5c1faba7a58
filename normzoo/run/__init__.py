"""The parts of one training run, each with one job; :mod:`normzoo.run.training` runs them in order.

* :mod:`~normzoo.run.directory` — where the run lives; refusing to overwrite one.
* :mod:`~normzoo.run.trainer` — the Lightning Trainer the recipe asks for.
* :mod:`~normzoo.run.resume` — which checkpoint to resume from, and whether it fits.
* :mod:`~normzoo.run.history` — ``metrics.csv`` stitched together across resumes.
* :mod:`~normzoo.run.final_test` — the best checkpoint scored on the test split.
"""
