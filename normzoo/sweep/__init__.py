"""``normzoo sweep`` and ``normzoo compare``: a grid of runs, and what its results say.

* :mod:`~normzoo.sweep.runner` — every cell of a grid trained, resumably; ``results.md``.
* :mod:`~normzoo.sweep.launch` — where cells run: in turn, ``--jobs`` at once, or on SLURM.
* :mod:`~normzoo.sweep.seeds` — mean ± standard deviation over a seed axis.
* :mod:`~normzoo.sweep.plots` — the finished sweep's figures.
* :mod:`~normzoo.sweep.compare` — two runs' test BLEU, by sacreBLEU's paired bootstrap.

The grid itself (``--set`` axes, cells, their overrides) is :mod:`normzoo.recipe.grid`: the
sweep and ``normzoo diagnose --vary`` share it.
"""
