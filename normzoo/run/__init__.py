"""The parts of one training run, each with one job; :class:`normzoo.run.training.TrainingRun`
runs them in order (``setup``, ``fit``, ``test``, ``close``) and writes ``summary.json``.

* :mod:`~normzoo.run.directory` — where the run lives; refusing to overwrite one.
* :mod:`~normzoo.run.trainer` — the Lightning Trainer the recipe asks for.
* :mod:`~normzoo.run.callbacks` — the Trainer's callbacks, loggers and checkpoint IO.
* :mod:`~normzoo.run.resume` — which checkpoint to resume from, and whether it fits.
* :mod:`~normzoo.run.history` — ``metrics.csv`` stitched together across resumes.

Importing this package imports nothing heavy; :mod:`~normzoo.run.training` and the modules it
runs import torch and Lightning, so the CLI imports them inside its commands.
"""
