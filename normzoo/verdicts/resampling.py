"""The example-level test: is a difference beyond the test set's noise, over several runs a side?

Each run gives per-example sufficient statistics ``[examples, k]`` (:mod:`.outputs`, :mod:`.scores`)
over one test set, the same examples in the same order for every run. A side's score is the
corpus score of all its runs pooled (``score`` of the statistics summed over its runs and
examples): with one run, sacreBLEU's corpus BLEU of that run; for accuracy or a token-weighted
loss, whose denominators are the same in every run, exactly the mean of the runs' scores; for
BLEU, the corpus BLEU of all the runs' translations concatenated (within rounding of the mean of
the runs' BLEU, and, unlike that mean, a function of summed statistics).

Two noises move the difference ``d`` of the pooled scores (system − baseline):

* **seeds**: another seed gives another run. What each run's score deviates by from its side's
  mean (the seed's own effect and the run's example-by-example noise, averaged over the test
  set) is the spread of the runs' scores;
* **examples**: another test set gives another difference. The examples both sides share cancel
  in ``d`` except where the system gains on some examples and loses on others (the side×example
  interaction): the paired bootstrap resamples the examples, the same draws for both sides.

The test resamples both, hierarchically, and takes the centred two-sided p-value: the share of
the replicates ``d*`` with ``|d* − mean(d*)| ≥ |d|`` (plus one, over the replicates plus one).
Two corrections make it calibrated; the null simulation (:mod:`.calibration`,
docs/verdicts/null-rates.md: 2,000 true nulls a cell, 3 runs a side, translation,
classification and language-model scores) measured what each is worth:

1. **The seed level is drawn from its t distribution**, not by resampling the runs. Drawing 3
   runs with replacement makes at most 10 different means, all within the runs' range: the
   replicates' tails are short and their spread under-estimated by (n − 1)/n, so where the seeds
   dominate the test rejected 0.10–0.24 of true nulls at 0.05, and still 0.09–0.18 with the
   replicates scaled by √(n/(n − 1)) at the seed level. The seed-level part of each replicate is
   instead ``se · T``, ``T`` drawn from Student's t, ``se`` and its degrees of freedom those of
   the seeds' t-test on the runs' scores (Welch's for ``paired=False``, the paired t on the
   seed-by-seed differences for ``paired=True``), the degrees of freedom raised by
   Welch–Satterthwaite for the example level's share of the variance (estimated from thousands
   of examples: without the raise, where that share dominates, the test rejected 0.03 where it
   should 0.05). Each draw is used with both signs, so the p-value is exactly symmetric in the
   two sides.
2. **The example level counts only what the seeds do not.** A run's example-by-example noise is
   already in its score's deviation from its side's, so resampling the examples of the pooled
   runs counts it a second time (the crossed seeds × examples design of Owen's pigeonhole
   bootstrap): where that noise dominates, the test rejected 0.007–0.016 of true nulls (and the
   runs-resampling designs 0.001–0.006). The example-resampled replicates are shrunk (as Davison
   and Hinkley shrink two-stage residuals) by ``λ = √max(0, 1 − V_runs / V_examples)``:
   ``V_examples`` their variance, ``V_runs`` the part of it that the runs' disagreement example
   by example explains (each run's replicate around its side's, over n − 1; paired: the
   seed-by-seed differences'). What is left is the side×example interaction, which the seeds'
   spread cannot contain: the system better on some examples and worse on others, which another
   test set would not repeat. Where it dominates, the seeds' t-test rejected 0.21–0.25 of such
   nulls (it holds the test set fixed); this test 0.05.

The test rejected 0.033–0.066 of true nulls in every scenario and design (0.048–0.066 paired,
where λ's sampling noise raises the degrees of freedom a little; 0.033–0.050 unpaired, where
Welch's t with 3 runs a side is itself conservative); sacreBLEU's statistic (``|d*| −
mean|d*|`` against ``|d|``), which the former test (``normzoo/sweep/bootstrap.py``) took,
rejected 0.08–0.13 on the same replicates, and that former test, with its own draws, up to 0.28.

With one run a side there is no seed level and nothing to tell the runs' noise from the
interaction: the test is sacreBLEU's paired bootstrap of the examples, with the centred two-sided
p-value. With one run on one side only, that side's spread is taken to be the other's (and its
example-by-example noise too). Unpaired sides may have different numbers of runs; paired sides
must have the same number, given seed by seed in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np

LEVEL = 0.95  # the interval's coverage
CHUNK = 1 << 22  # example draws weighed at once (32 MB of weights): one chunk below 4,000 examples

Score = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ExampleTest:
    """The example-level test's result.

    ``baseline_score``, ``system_score``: each side's pooled corpus score (all its runs'
    statistics summed); ``difference``: system − baseline; ``p_value``: centred two-sided;
    ``interval``: the 95% interval of the difference, ``difference ± q`` with ``q`` the 95%
    quantile of the centred replicates' absolute values, so that it excludes 0 where the p-value
    is below 0.05 (up to the +1); ``name``: the test, as a report prints it; ``samples``: the
    bootstrap draws (each used with both signs of its seed-level part)."""

    baseline_score: float
    system_score: float
    difference: float
    p_value: float
    interval: tuple[float, float]
    name: str
    samples: int

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["interval"] = list(self.interval)
        return found


@dataclass(frozen=True)
class _Resampled:
    """What the paired and the unpaired test share: the example draws and what they give."""

    baseline_runs: np.ndarray  # [runs, k]: each baseline run's statistics summed
    system_runs: np.ndarray
    baseline_draws: np.ndarray  # [samples, runs, k]: each run's sums over the drawn examples
    system_draws: np.ndarray
    score: Score

    @cached_property
    def baseline_score(self) -> float:
        return float(self.score(self.baseline_runs.sum(0)))

    @cached_property
    def system_score(self) -> float:
        return float(self.score(self.system_runs.sum(0)))

    @property
    def difference(self) -> float:
        return self.system_score - self.baseline_score

    @cached_property
    def examples_part(self) -> np.ndarray:
        """The pooled sides' difference on each draw of examples, minus the observed one."""
        return ((self.score(self.system_draws.sum(1)) - self.score(self.baseline_draws.sum(1)))
                - self.difference)

    @cached_property
    def run_scores(self) -> tuple[np.ndarray, np.ndarray]:
        return self.score(self.baseline_runs), self.score(self.system_runs)

    @cached_property
    def around(self) -> tuple[np.ndarray, np.ndarray]:
        """Each run's replicate (its score on the drawn examples, less its score) around its
        side's pooled one, ``[samples, runs]`` a side: the runs' example-by-example noise."""

        def around(draws: np.ndarray, runs: np.ndarray) -> np.ndarray:
            each = self.score(draws) - self.score(runs)
            pooled = self.score(draws.sum(1)) - self.score(runs.sum(0))
            return each - pooled[:, None]

        return (around(self.baseline_draws, self.baseline_runs),
                around(self.system_draws, self.system_runs))


def _check(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], paired: bool
           ) -> tuple[np.ndarray, np.ndarray]:
    if not baseline or not system:
        raise ValueError(f"{len(baseline)} baseline and {len(system)} system runs: give at "
                         "least one a side")
    if paired and len(baseline) != len(system):
        raise ValueError(f"paired runs come seed with seed: {len(baseline)} baseline and "
                         f"{len(system)} system runs")
    runs = [np.asarray(run, dtype=np.float64) for run in [*baseline, *system]]
    shapes = {run.shape for run in runs}
    if len(shapes) != 1 or runs[0].ndim != 2 or runs[0].shape[0] == 0:
        raise ValueError(f"every run must give [examples, k] statistics over the same examples, "
                         f"not shapes {sorted(shapes)}")
    held = np.stack(runs)
    return held[:len(baseline)], held[len(baseline):]


def _example_weights(rng: np.random.Generator, samples: int, examples: int) -> np.ndarray:
    """How often each example is drawn in each resample, ``[samples, examples]``."""
    drawn = rng.integers(examples, size=(samples, examples), dtype=np.int32)
    drawn += (np.arange(samples, dtype=np.int32) * examples)[:, None]
    return np.bincount(drawn.ravel(), minlength=samples * examples).reshape(
        samples, examples).astype(np.float64)


def _resample(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], score: Score,
              paired: bool, samples: int, seed: int) -> _Resampled:
    base, other = _check(baseline, system, paired)
    runs, examples, k = base.shape[0], base.shape[1], base.shape[2]
    rng = np.random.default_rng(seed)
    held = np.concatenate([base, other]).transpose(1, 0, 2).reshape(examples, -1)
    drawn = np.empty((samples, held.shape[1]))
    rows = max(1, CHUNK // examples)  # the draws' weights a few tens of MB at a time
    for start in range(0, samples, rows):
        stop = min(samples, start + rows)
        drawn[start:stop] = _example_weights(rng, stop - start, examples) @ held  # all runs
    drawn = drawn.reshape(samples, -1, k)
    return _Resampled(base.sum(1), other.sum(1), drawn[:, :runs], drawn[:, runs:], score)


def _seed_level(baseline: np.ndarray, system: np.ndarray, paired: bool
                ) -> tuple[float, float]:
    """The standard error of the difference over the seeds and its degrees of freedom, as the
    seeds' t-test has them (Welch's, or the paired t); (0, inf) where there is no spread to
    estimate."""
    nb, ns = len(baseline), len(system)
    if paired:
        if nb < 2:
            return 0.0, np.inf
        differences = system - baseline
        return float(differences.std(ddof=1) / np.sqrt(nb)), float(nb - 1)
    if nb < 2 and ns < 2:
        return 0.0, np.inf
    if nb < 2 or ns < 2:  # one run on one side: its spread taken to be the other side's
        spread = float((system if ns >= 2 else baseline).var(ddof=1))
        return float(np.sqrt(spread * (1 / nb + 1 / ns))), float(max(nb, ns) - 1)
    vb, vs = baseline.var(ddof=1) / nb, system.var(ddof=1) / ns
    if vb + vs == 0:
        return 0.0, np.inf
    freedom = (vb + vs) ** 2 / (vb ** 2 / (nb - 1) + vs ** 2 / (ns - 1))
    return float(np.sqrt(vb + vs)), float(freedom)


def _runs_noise(resampled: _Resampled, paired: bool) -> float:
    """The variance of the examples part that the runs' disagreement example by example
    explains (already in the seeds' spread): each run's replicate around its side's, over
    n − 1; paired, the seed-by-seed differences' replicates around theirs."""
    base, other = resampled.around
    nb, ns = base.shape[1], other.shape[1]
    if paired:
        return float((other - base).var(0).mean() / (nb - 1)) if nb >= 2 else 0.0
    if nb < 2 and ns < 2:
        return 0.0
    per_run = [float(held.var(0).mean() * n / (n - 1)) if n >= 2 else None  # one run's noise
               for n, held in ((nb, base), (ns, other))]
    known = next(value for value in per_run if value is not None)
    return sum((known if value is None else value) / n
               for value, n in zip(per_run, (nb, ns), strict=True))


def _name(nb: int, ns: int, paired: bool) -> str:
    if nb < 2 and ns < 2:
        return "paired bootstrap of the examples (centred, two-sided)"
    seeds = ("the paired t" if paired else "Welch's t" if min(nb, ns) >= 2 else
             f"a t on the {max(nb, ns)}-run side's spread")
    return (f"hierarchical bootstrap (seeds by {seeds}, examples resampled for both sides; "
            "centred, two-sided)")


def _replicates(resampled: _Resampled, paired: bool, samples: int, seed: int,
                shrink: bool = True) -> np.ndarray:
    """The ``2 · samples`` replicates ``d*``: ``d + λ · examples* ± se · T``, each draw of the
    seeds' t with both signs (``shrink=False``: λ = 1, for the null simulation's comparison)."""
    d = resampled.difference
    examples = resampled.examples_part
    spread = float(examples.var())
    noise = _runs_noise(resampled, paired) if shrink else 0.0
    factor = float(np.sqrt(max(0.0, 1 - noise / spread))) if spread > 0 else 0.0
    se, freedom = _seed_level(*resampled.run_scores, paired)
    if se > 0:
        # Welch–Satterthwaite: the examples' share of the variance is known from thousands of
        # examples (infinite degrees of freedom), so the total's are the seeds' raised by it.
        freedom *= (1 + factor ** 2 * spread / se ** 2) ** 2
        seeds = se * np.random.default_rng([seed, 1]).standard_t(freedom, size=samples)
    else:
        seeds = np.zeros(samples)
    centre = d + factor * examples
    return np.concatenate([centre + seeds, centre - seeds])


def _centred(replicates: np.ndarray) -> np.ndarray:
    """``|d* − mean(d*)|``, the mean summed half by half, so that swapping the sides (which
    negates the replicates and swaps the halves) gives the same values, bit for bit."""
    half = len(replicates) // 2
    mean = (replicates[:half].sum() + replicates[half:].sum()) / len(replicates)
    return np.abs(replicates - mean)


def _finish(resampled: _Resampled, paired: bool, samples: int, seed: int) -> ExampleTest:
    d = resampled.difference
    centred = _centred(_replicates(resampled, paired, samples, seed))
    p = (int(np.sum(centred >= abs(d))) + 1) / (centred.size + 1)
    half = float(np.quantile(centred, LEVEL))
    nb, ns = len(resampled.baseline_runs), len(resampled.system_runs)
    return ExampleTest(resampled.baseline_score, resampled.system_score, d, float(p),
                       (d - half, d + half), _name(nb, ns, paired), samples)


def example_test(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray], score: Score, *,
                 paired: bool, samples: int = 1000, seed: int = 12345) -> ExampleTest:
    """The example-level test of ``system`` against ``baseline``.

    ``baseline``, ``system``: each run's per-example statistics ``[examples, k]``, every run
    over the same examples in the same order; ``score``: summed statistics ``[..., k]`` to the
    corpus score ``[...]`` (:func:`~normzoo.contract.scores.bleu_score`,
    :func:`~normzoo.contract.scores.ratio_score`); ``paired``: the runs are paired seed with seed
    (the same seeds, in the same order on both sides; the seeds' part is the paired t's), else
    the sides' runs are independent (Welch's; the sides may have different numbers of runs).
    ``samples`` draws of the examples (the same draws for every run of both sides) and of the
    seeds' t, from ``seed``: deterministic."""
    if samples < 1:
        raise ValueError(f"samples must be positive, not {samples}")
    return _finish(_resample(baseline, system, score, paired, samples, seed), paired, samples,
                   seed)
