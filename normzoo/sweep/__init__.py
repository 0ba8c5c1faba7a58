"""``normzoo sweep``: a grid of runs, trained resumably, and its results over seeds (what they
show is judged by :mod:`normzoo.verdicts`).

* :mod:`~normzoo.sweep.runner` — every cell of a grid trained, resumably; ``results.md``.
* :mod:`~normzoo.sweep.launch` — where cells run: in turn, ``--jobs`` at once, or on SLURM.
* :mod:`~normzoo.sweep.local` — cells as local jobs: cores and GPUs shared out, stopped with a
  checkpoint.
* :mod:`~normzoo.sweep.slurm` — cells as SLURM jobs: what each asks for.
* :mod:`~normzoo.sweep.cell_job` — one cell as a submitit job, requeued on pre-emption.
* :mod:`~normzoo.sweep.seeds` — mean ± standard deviation over a seed axis.
* :mod:`~normzoo.sweep.plots` — the finished sweep's figures.

The grid itself (``--set`` axes, cells, their overrides) is :mod:`normzoo.recipe.grid`: the
sweep and ``normzoo diagnose --vary`` share it.
"""
