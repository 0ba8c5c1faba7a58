"""When is a difference between two settings *shown*? Only when it survives both of its noises.

A setting's test BLEU has two sources of chance in it. The test set: other sentences would give
another score; sacreBLEU's paired bootstrap resamples them. The training run: another seed gives
another model; the paired bootstrap cannot see that, since it resamples the sentences of these
translations only. Run on pairs of 6+6 cells of one setting that differ only in their seed, the
bootstrap alone called 3 of 6 pairs significant (the depth study's committed cells), so on its
own it mistakes a seed for a scheme about half the time.

So a difference is judged by two tests, and shown only where both find it:

* **seeds**: a t-test on the runs' BLEU, each run one observation of its setting: Welch's
  (unequal variances: a failing setting's seeds all score near 0, a training one's spread), or
  the paired t-test where both sides ran the same seeds (:func:`paired_t_p`). It needs at least
  :data:`MIN_SEEDS` runs a side to say anything about the seeds' spread, and some spread: two
  sides without any have no variance to test (copies of one run), never p = 0;
* **sentences**: the hierarchical bootstrap of the runs' translations (seeds, then sentences;
  :mod:`normzoo.sweep.bootstrap`).

With fewer seeds, or with only one of the two tests significant, or runs on more than one device
kind, the difference is at most *indicated*. Runs of different precision (``trainer.precision``
as the run recorded it) are never compared as shown: the difference could be the precision's.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
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


def equivalence_verdict(p: float | None, seeds: int, precisions: Collection[str] = (),
                        devices: Collection[str] = (), alpha: float = ALPHA) -> str:
    """"Equal within the margin" is held to the rule a difference is: *shown* only below
    ``alpha`` with :data:`MIN_SEEDS` runs a side or more, of one precision and one device kind;
    below ``alpha`` otherwise *indicated*; else *not shown*."""
    if p is None or p >= alpha:
        return NOT_SHOWN
    one_kind = len(set(precisions)) <= 1 and len(set(devices)) <= 1
    return SHOWN if seeds >= MIN_SEEDS and one_kind else INDICATED


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
          min_seeds: int = MIN_SEEDS, sentence_test: bool = True,
          devices: Collection[str] = (), paired: bool = False,
          sentence_name: str = "paired bootstrap") -> Verdict:
    """The verdict on ``system`` against ``baseline`` from their per-seed scores, the
    sentence-level bootstrap's p-value, and the precisions and device kinds the runs trained on
    (empty: not known).

    ``paired``: both sides ran the same seeds, given in the same seed order, so the seeds' test
    is the paired t-test (:func:`paired_t_p`) instead of Welch's. Runs on more than one device
    kind (cuda and cpu) are at most *indicated*: one seed moved 1.2 BLEU between a CPU in fp32
    and a GPU in bf16, about what a seed moves it. ``sentence_test=False``: the scores come with
    no per-sentence values to resample (a language model's test loss as the runs keep it), so
    the seeds' test decides alone, and the reason says that the test set's noise was not tested
    apart from it."""
    seeds = min(len(baseline), len(system))
    seed_p = paired_t_p(baseline, system) if paired else welch_p(baseline, system)
    by_seeds = seed_p is not None and seed_p < alpha
    if not sentence_test:
        bootstrap_p = 0.0 if by_seeds else None
    by_sentences = bootstrap_p is not None and bootstrap_p < alpha
    name = "paired t" if paired else "Welch"
    seed_text = (p_text(seed_p) if seed_p is not None else "– (fewer than two seeds a side)"
                 if seeds < 2 else "– (no variance to test)")
    tests = (f"seeds: {name} p = {seed_text}; sentences: {sentence_name} p = "
             f"{p_text(bootstrap_p)}" if sentence_test else
             f"seeds: {name} p = {seed_text}; no per-sentence scores, so the test set's noise "
             "is not tested apart from the seeds'")
    if len(set(precisions)) > 1:
        return Verdict(NOT_SHOWN, f"the runs trained in different precisions "
                       f"({', '.join(sorted(set(precisions)))}): a difference could be the "
                       f"precision's ({tests})")
    if seeds >= 2 and no_spread(baseline, system):
        return Verdict(NOT_SHOWN, f"no variance to test: every run of each side scores the "
                       f"same ({tests})")
    mixed = len(set(devices)) > 1
    if seeds < min_seeds or mixed:
        why = (f"the runs trained on different device kinds "
               f"({', '.join(sorted(set(devices)))}): a difference could be the device's"
               if mixed else
               f"{'one seed' if seeds == 1 else f'{seeds} seeds'} a side, under the "
               f"{min_seeds} a test of the seeds' spread needs")
        if by_sentences or by_seeds:
            return Verdict(INDICATED, f"{why} ({tests})")
        return Verdict(NOT_SHOWN, f"no test finds a difference ({why}; {tests})")
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


def equivalence_line(result: dict[str, Any], unit: str, precisions: Collection[str] = (),
                     devices: Collection[str] = ()) -> str | None:
    """The report's line on equality: the equivalence test against the margin given, or, for a
    *not shown* without one, that it is no finding of "no difference"."""
    margin, p = result.get("margin"), result.get("equivalence_p")
    if margin is None:
        return None if result["verdict"] != NOT_SHOWN else (
            "not shown is not \"no difference\": the interval above is what the seeds leave "
            "open; --margin M tests whether the two are equal within ± M")
    if p is None:
        return f"equal within ± {margin:g} {unit}: nothing to test (no spread, or one run a side)"
    seeds = min(len(v) for k, v in result.items()
                if k.startswith(("baseline_seed_", "system_seed_")) and isinstance(v, list))
    label = equivalence_verdict(p, seeds, precisions, devices)
    return (f"equal within ± {margin:g} {unit}: {label} (two one-sided tests, "
            f"{'paired t' if result['paired'] else 'Welch'}, p = {p_text(p)})")
