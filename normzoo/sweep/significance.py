"""When is a difference between two settings *shown*? Only when it survives both of its noises.

A setting's test BLEU has two sources of chance in it. The test set: other sentences would give
another score; sacreBLEU's paired bootstrap resamples them. The training run: another seed gives
another model; the paired bootstrap cannot see that, since it resamples the sentences of these
translations only. Run on pairs of 6+6 cells of one setting that differ only in their seed, the
bootstrap alone called 3 of 6 pairs significant (the depth study's committed cells), so on its
own it mistakes a seed for a scheme about half the time.

So a difference is judged by two tests, and shown only where both find it:

* **seeds**: Welch's t-test on the runs' BLEU, each run one observation of its setting (unequal
  variances: a failing setting's seeds all score near 0, a training one's spread). It needs at
  least :data:`MIN_SEEDS` runs a side to say anything about the seeds' spread;
* **sentences**: the paired bootstrap of the runs' pooled translations (paired seed by seed).

With fewer seeds, or with only one of the two tests significant, the difference is at most
*indicated*. Runs of different precision (``trainer.precision`` as the run recorded it) are never
compared as shown: the difference could be the precision's.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass

ALPHA = 0.05
MIN_SEEDS = 3  # fewer runs a side cannot estimate the seeds' spread the t-test needs
SHOWN, INDICATED, NOT_SHOWN = "shown", "indicated", "not shown"


def welch_p(baseline: Sequence[float], system: Sequence[float]) -> float | None:
    """Two-sided p-value of Welch's t-test on two sets of per-seed scores; None with fewer than
    two runs on a side (no spread to test against). Two sides without any spread are equal
    (p = 1) or certainly different (p = 0)."""
    if len(baseline) < 2 or len(system) < 2:
        return None
    if statistics.pvariance(baseline) == 0 and statistics.pvariance(system) == 0:
        return 1.0 if statistics.fmean(baseline) == statistics.fmean(system) else 0.0
    from scipy.stats import ttest_ind

    return float(ttest_ind(system, baseline, equal_var=False).pvalue)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


@dataclass(frozen=True)
class Verdict:
    """What a comparison shows, and why in words a report can print."""

    label: str  # SHOWN, INDICATED or NOT_SHOWN
    reason: str

    @property
    def shown(self) -> bool:
        return self.label == SHOWN


def judge(baseline: Sequence[float], system: Sequence[float], bootstrap_p: float | None,
          precisions: Collection[str] = (), alpha: float = ALPHA,
          min_seeds: int = MIN_SEEDS, sentence_test: bool = True) -> Verdict:
    """The verdict on ``system`` against ``baseline`` from their per-seed scores, the pooled
    paired bootstrap's p-value and the precisions the runs trained in (empty: not known).

    ``sentence_test=False``: the scores come with no per-sentence values to resample (a language
    model's test loss as the runs keep it), so the seeds' test decides alone, and the reason says
    that the test set's noise was not tested apart from it."""
    seeds = min(len(baseline), len(system))
    seed_p = welch_p(baseline, system)
    by_seeds = seed_p is not None and seed_p < alpha
    if not sentence_test:
        bootstrap_p = 0.0 if by_seeds else None
    by_sentences = bootstrap_p is not None and bootstrap_p < alpha
    seed_text = p_text(seed_p) if seed_p is not None else "– (fewer than two seeds a side)"
    tests = (f"seeds: Welch p = {seed_text}; sentences: paired bootstrap p = "
             f"{p_text(bootstrap_p)}" if sentence_test else
             f"seeds: Welch p = {seed_text}; no per-sentence scores, so the test set's noise "
             "is not tested apart from the seeds'")
    if len(set(precisions)) > 1:
        return Verdict(NOT_SHOWN, f"the runs trained in different precisions "
                       f"({', '.join(sorted(set(precisions)))}): a difference could be the "
                       f"precision's ({tests})")
    if seeds < min_seeds:
        few = "one seed" if seeds == 1 else f"{seeds} seeds"
        if by_sentences or by_seeds:
            return Verdict(INDICATED, f"{few} a side, under the {min_seeds} a test of the "
                           f"seeds' spread needs ({tests})")
        return Verdict(NOT_SHOWN, f"no test finds a difference ({few} a side; {tests})")
    if by_seeds and by_sentences:
        which = "both tests" if sentence_test else "the seeds' test"
        return Verdict(SHOWN, f"{which} below {alpha} over {seeds}+ seeds a side ({tests})")
    if by_sentences:
        return Verdict(INDICATED, f"significant over these sentences, but the seeds' spread "
                       f"could give it ({tests})")
    if by_seeds:
        return Verdict(INDICATED, f"the seeds differ, but not beyond the test set's noise "
                       f"({tests})")
    return Verdict(NOT_SHOWN, f"no test finds a difference ({tests})")


def p_text(value: float | None) -> str:
    """A p-value as the verdicts print it: four decimals, or two digits below 1e-4."""
    if value is None:
        return "–"
    return "0" if value == 0 else f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"
