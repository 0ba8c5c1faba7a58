"""The null simulation: how often each test finds a difference where there is none.

``python -m normzoo.verdicts.calibration --nulls 2000 --out docs/verdicts/null-rates.json``
simulates, for three kinds of task, comparisons of two sides whose runs all come from ONE
distribution (3 seeds a side), and counts how often, at α = 0.05,

* **(a)** the seeds' t-test on the runs' scores (:func:`normzoo.verdicts.significance.paired_t_p`
  for the paired design, :func:`~normzoo.verdicts.significance.welch_p` for the unpaired one),
* **(b)** the example-level test (:func:`normzoo.verdicts.resampling.example_test`),
* **(c)** both (what the rule, :func:`normzoo.verdicts.rule.verdict`, requires for *shown*)

reject, each with its exact (Clopper–Pearson) binomial 95% interval. A calibrated test rejects a
true null 5% of the time. On the same draws it also counts what the adopted test replaced or
corrects: the hierarchical bootstrap that resamples the runs as it resamples the examples (the
"pigeonhole" bootstrap, with and without the replicates scaled by √(n/(n − 1)) at the seed
level), the adopted test without its example-level shrinkage, sacreBLEU's statistic (``|d*| −
mean|d*|`` against ``|d|``) on the adopted replicates, and, for translation, the former
example-level test itself, ``hierarchical_bootstrap`` of ``normzoo/sweep/bootstrap.py`` (since
removed; its draws and its p-value, vectorised: :func:`former_bootstrap_p`).

Each comparison draws a fresh test set (per-example difficulty), then six runs, each a seed-level
effect plus example-by-example noise around the examples' difficulty; the first three runs are
the baseline, the last three the system. The paired design is the same draws judged as seed
pairs (under this null the two sides' runs are independent draws; pairing only changes which
tests run). Three scenarios a kind (no seed effect, realistic, seed-heavy) from the committed
studies' spread of the seeds, and one more for the language model:

* **translation** (corpus BLEU of 1,000 sentences): synthetic sacreBLEU statistics fitted to the
  depth study's Multi30k test2016 runs (reference lengths 12 ± 4 words, precisions about
  0.63/0.38/0.26/0.17, half the sentences translated alike by every seed, two seeds' paired
  bootstrap sd of their difference ≈ 0.47 BLEU at BLEU ≈ 32); seeds' BLEU sd ≈ 0.44 (examples
  only: no seed effect), ≈ 0.7 (realistic), ≈ 1.5 (seed-heavy);
* **classification** (accuracy of 500 examples, each correct with a probability set by its
  difficulty and the seed): accuracy ≈ 0.74, seeds' sd ≈ 0.013, 0.023, 0.04;
* **causal-lm** (token-weighted loss of 1,000 sentences of 5–40 tokens, each sentence's summed
  loss): loss ≈ 4 nats/token, seeds' sd ≈ 0.002, 0.006, 0.016 nats/token; and **interaction**:
  small seed effects, but the system better on some sentences and worse on others by
  ``u_j ~ N(0, 0.15)`` nats a token, fresh each comparison: no difference on average over test
  sets, so a null for the example-level test, but not for the seeds' t-test, which holds the
  test set fixed (it should reject often there: that is what the example level is for).

Each test in the simulation draws :data:`SAMPLES` = 500 bootstrap samples (1,000 replicates),
the former bootstrap 200 (``normzoo compare`` draws 1,000); ``--nulls 2000`` takes about 7
minutes on one core.
"""

from __future__ import annotations

from normzoo.verdicts.calibration.alternatives import (
    former_bootstrap_p,
    pigeonhole_p,
    sacrebleu_statistic_p,
)
from normzoo.verdicts.calibration.models import (
    ALPHA,
    COUNTS,
    DESIGNS,
    KINDS,
    RUNS,
    SAMPLES,
    TARGET,
    Kind,
    accuracy_runs,
    bleu_runs,
    loss_runs,
)
from normzoo.verdicts.calibration.report import main, markdown, run
from normzoo.verdicts.calibration.simulation import binomial_interval, simulate

__all__ = ["ALPHA", "COUNTS", "DESIGNS", "KINDS", "RUNS", "SAMPLES", "TARGET", "Kind",
           "accuracy_runs", "binomial_interval", "bleu_runs", "former_bootstrap_p", "loss_runs",
           "main", "markdown", "pigeonhole_p", "run", "sacrebleu_statistic_p", "simulate"]
