"""What the adopted example-level test replaced or corrects, on the same draws: the runs
resampled as the examples are (with and without the √(n/(n − 1)) scaling), sacreBLEU's
statistic, and the former bootstrap of ``normzoo/sweep/bootstrap.py`` (since removed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from normzoo.verdicts import resampling


def _run_counts(rng: np.random.Generator, samples: int, runs: int) -> np.ndarray:
    drawn = rng.integers(runs, size=(samples, runs)) + (np.arange(samples) * runs)[:, None]
    return np.bincount(drawn.ravel(), minlength=samples * runs).reshape(samples, runs)


def _centred_p(replicates: np.ndarray, difference: float) -> float:
    centred = np.abs(replicates - replicates.mean())
    return (int(np.sum(centred >= abs(difference))) + 1) / (centred.size + 1)


def pigeonhole_p(resampled: resampling._Resampled, paired: bool, samples: int, seed: int,
                 scaled: bool) -> float:
    """The hierarchical bootstrap that resamples the runs as it does the examples: each draw
    takes each side's runs with replacement (paired: the same runs both sides), sums their
    statistics over the drawn examples (the same for every run), and scores the sides;
    ``scaled``: each side's deviation of its drawn runs from its mean scaled by √(n/(n − 1)).
    The centred two-sided p-value."""
    rng = np.random.default_rng([seed, 2])
    nb, ns = resampled.baseline_draws.shape[1], resampled.system_draws.shape[1]
    drawn_b = _run_counts(rng, samples, nb)
    drawn_s = drawn_b if paired else _run_counts(rng, samples, ns)

    def side(draws: np.ndarray, counts: np.ndarray) -> np.ndarray:
        runs = draws.shape[1]
        factor = np.sqrt(runs / (runs - 1)) if scaled and runs > 1 else 1.0
        mean = draws.mean(1, keepdims=True)
        moved = np.einsum("br,brk->bk", counts - 1.0, draws - mean)
        return np.maximum(runs * mean[:, 0] + factor * moved, 0)

    score = resampled.score
    replicates = (score(side(resampled.system_draws, drawn_s))
                  - score(side(resampled.baseline_draws, drawn_b)))
    return _centred_p(replicates, resampled.difference)


def sacrebleu_statistic_p(replicates: np.ndarray, difference: float) -> float:
    """sacreBLEU's paired-bootstrap p-value (``sacrebleu.significance._compute_p_value`` of
    ``|d*| − mean|d*|`` against ``|d|``), as the former ``normzoo/sweep/bootstrap.py`` took
    it."""
    absolute = np.abs(replicates)
    return (int(np.sum(absolute - absolute.mean() > abs(difference))) + 1) / (len(absolute) + 1)


def former_bootstrap_p(baseline: Sequence[np.ndarray], system: Sequence[np.ndarray],
                       score: Callable[[np.ndarray], np.ndarray], samples: int,
                       seed: int = 12345) -> float:
    """The former example-level test's p-value (``hierarchical_bootstrap`` of
    ``normzoo/sweep/bootstrap.py``, since removed: git history) from statistics, vectorised: the
    same draws from the same seed (the sentences of each run slot, then the run pairs), the same
    sums, the same p formula."""
    base, other = np.stack(baseline), np.stack(system)
    runs, sentences = base.shape[:2]
    rng = np.random.default_rng(seed)
    sentence_draws = rng.choice(sentences, size=(samples, runs * sentences), replace=True)
    run_draws = rng.integers(runs, size=(samples, runs))
    held = np.concatenate([base, other]).transpose(1, 0, 2).reshape(sentences, -1)
    totals = np.zeros((2, samples, base.shape[2]))
    rows = np.arange(samples)
    for slot in range(runs):
        drawn = sentence_draws[:, slot * sentences:(slot + 1) * sentences]
        drawn = drawn + (rows * sentences)[:, None]
        weights = np.bincount(drawn.ravel(), minlength=samples * sentences).reshape(
            samples, sentences).astype(np.float64)
        summed = (weights @ held).reshape(samples, 2 * runs, -1)
        totals[0] += summed[rows, run_draws[:, slot]]
        totals[1] += summed[rows, runs + run_draws[:, slot]]
    difference = float(score(other.sum((0, 1))) - score(base.sum((0, 1))))
    return sacrebleu_statistic_p(score(totals[1]) - score(totals[0]), difference)


