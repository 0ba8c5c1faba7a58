"""What a set of runs shows: the rule that turns runs (one per seed a side) into verdicts.

* :mod:`~normzoo.contract.outputs` — a run's per-example test outputs, as every task keeps them,
  so that the test set can be resampled whatever the task.
"""
