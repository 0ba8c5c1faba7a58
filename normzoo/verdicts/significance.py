"""The seeds' side of the rule: the t-tests on the runs' scores, the interval they leave open,
the equivalence test against a margin, and Holm's correction.

A setting's test score has two sources of chance in it: the test set (other examples would
give another score: :mod:`normzoo.verdicts.resampling` resamples them) and the training run
(another seed gives another model). This module tests the second: a t-test on the runs'
scores, each run one observation of its setting, Welch's (unequal variances: a failing
setting's seeds all score near 0, a training one's spread) or the paired t-test where both sides
ran the same seeds (:func:`paired_t_p`). It needs at least :data:`MIN_SEEDS` runs a side to
say anything about the seeds' spread, and some spread: two sides without any have no variance
to test (copies of one run), never p = 0. Run on pairs of 6+6 cells of one setting that differ
only in their seed, sacreBLEU's paired bootstrap alone called 3 of 6 pairs significant (the
depth study's committed cells): the test set's noise alone mistakes a seed for a scheme. How
the two tests make a verdict: :mod:`normzoo.verdicts.rule`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

ALPHA = 0.05
MIN_SEEDS = 3  # fewer runs a side cannot estimate the seeds' spread the t-test needs
SHOWN, INDICATED, NOT_SHOWN = "shown", "indicated", "not shown"


def no_spread(baseline: Sequence[float], system: Sequence[float]) -> bool:
    """Both sides without any spread: copies of one run, or runs that all failed alike. A
    t-test divides by the spread, so it has nothing to divide by here: no variance to test,
    never p = 0 (three copies of one run against three of another read p = 0 and *shown*)."""
    return statistics.pvariance(baseline) == 0 and statistics.pvariance(system) == 0


def welch_p(baseline: Sequence[float], system: Sequence[float]) -> float | None:
    """Two-sided p-value of Welch's t-test on two sets of per-seed scores; None with fewer than
    two runs on a side or no spread on either (no variance to test)."""
    if len(baseline) < 2 or len(system) < 2 or no_spread(baseline, system):
        return None
    from scipy.stats import ttest_ind

    return float(ttest_ind(system, baseline, equal_var=False).pvalue)


def paired_t_p(baseline: Sequence[float], system: Sequence[float]) -> float | None:
    """Two-sided p-value of the paired t-test on per-seed scores given seed by seed in the same
    order (the same seeds under two settings share their data order and initial draws, so the
    seed's own effect cancels in the differences); None with fewer than two pairs or
    differences without spread."""
    if len(baseline) != len(system) or len(baseline) < 2:
        return None
    differences = [s - b for b, s in zip(baseline, system, strict=True)]
    if statistics.pvariance(differences) == 0:
        return None
    from scipy.stats import ttest_rel

    return float(ttest_rel(system, baseline).pvalue)


def same_seeds(baseline: list[Any], system: list[Any]) -> bool:
    """Both sides ran the same seeds (two or more, each once): a paired design, as the
    precision study's same seeds under two settings, so the seeds' test is the paired one."""
    return (len(baseline) >= 2 and None not in baseline
            and sorted(map(str, baseline)) == sorted(map(str, system)))


def seed_interval(baseline: Sequence[float], system: Sequence[float], paired: bool,
                  level: float = 1 - ALPHA) -> tuple[float, float] | None:
    """The ``level`` interval of the system's mean minus the baseline's over the seeds, by the
    seeds' t-test (paired or Welch's); None where that test has nothing to say. A *not shown*
    says how large a difference the seeds leave open, never that there is none."""
    if (paired_t_p if paired else welch_p)(baseline, system) is None:
        return None
    from scipy.stats import ttest_ind, ttest_rel

    test = (ttest_rel(system, baseline) if paired
            else ttest_ind(system, baseline, equal_var=False))
    found = test.confidence_interval(level)
    return float(found.low), float(found.high)


def equivalence_p(baseline: Sequence[float], system: Sequence[float], margin: float | None,
                  paired: bool) -> float | None:
    """Two one-sided tests (TOST, Schuirmann 1987) that the difference of the means lies within
    ``± margin``: the larger p-value of the seeds' t-test (paired or Welch's) against a
    difference of ``-margin`` (alternative: greater) and of ``+margin`` (alternative: less).
    Below :data:`ALPHA` exactly when the 90% interval of the difference lies inside the margin.
    Only this says "no difference" (as "equal within the margin"); a *not shown* never does.
    None without a margin or where the seeds' test has nothing to say."""
    if margin is None or (paired_t_p if paired else welch_p)(baseline, system) is None:
        return None
    from scipy.stats import ttest_ind, ttest_rel

    def one_sided(shift: float, alternative: str) -> float:
        moved = [value - shift for value in system]
        test = (ttest_rel(moved, baseline, alternative=alternative) if paired else
                ttest_ind(moved, baseline, equal_var=False, alternative=alternative))
        return float(test.pvalue)

    return max(one_sided(-margin, "greater"), one_sided(margin, "less"))


def holm(p_values: Sequence[float | None], alpha: float = ALPHA) -> list[bool]:
    """Which of ``p_values`` Holm's step-down correction keeps below ``alpha`` when all of them
    are tested together (a page that leans on several verdicts says which survive it); None
    (nothing to test) is never kept and is not counted among the tests."""
    tested = [i for i, p in enumerate(p_values) if p is not None]
    order = sorted(tested, key=lambda i: p_values[i])
    kept = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] >= alpha / (len(order) - rank):
            break
        kept[i] = True
    return kept


def seed_order(seeds: list[Any]) -> list[int]:
    """The positions of a side's runs in the order of their seeds, to pair seed with seed."""
    return sorted(range(len(seeds)), key=lambda i: str(seeds[i]))


def seed_test(baseline: list[float], system: list[float], paired: bool,
              margin: float | None = None) -> dict[str, Any]:
    """The seeds' test chosen, named, its p-value and the 95% interval of the difference of the
    means (None: fewer than two runs a side, or no variance to test); with a ``margin``, the
    equivalence test's p-value against it (:func:`equivalence_p`)."""
    return {"seed_test": PAIRED_T if paired else WELCH, "paired": paired,
            "seed_p": paired_t_p(baseline, system) if paired else welch_p(baseline, system),
            "seed_interval": seed_interval(baseline, system, paired), "margin": margin,
            "equivalence_p": equivalence_p(baseline, system, margin, paired)}


PAIRED_T = "paired t-test (the same seeds on both sides)"
WELCH = "Welch's t-test"


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def p_text(value: float | None) -> str:
    """A p-value as the verdicts print it: four decimals, or two digits below 1e-4."""
    if value is None:
        return "–"
    return "0" if value == 0 else f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"
