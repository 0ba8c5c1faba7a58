"""The null comparisons themselves: each design's p-values for one, and the rates over many."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from normzoo.verdicts import resampling
from normzoo.verdicts.calibration.alternatives import (
    _centred_p,
    former_bootstrap_p,
    pigeonhole_p,
    sacrebleu_statistic_p,
)
from normzoo.verdicts.calibration.models import (
    ALPHA,
    COUNTS,
    DESIGNS,
    FORMER_SAMPLES,
    KINDS,
    RUNS,
    SAMPLES,
    Kind,
)


def _one_null(kind: Kind, runs: np.ndarray, samples: int, seed: int, former: bool
              ) -> dict[str, dict]:
    """Each design's p-values for one null comparison (baseline: the first :data:`RUNS` runs)."""
    from normzoo.verdicts.significance import paired_t_p, welch_p

    baseline, system = list(runs[:RUNS]), list(runs[RUNS:])
    resampled = resampling._resample(baseline, system, kind.score, True, samples, seed)
    base_scores, system_scores = (list(map(float, x)) for x in resampled.run_scores)
    former = (former_bootstrap_p(baseline, system, kind.score, min(samples, FORMER_SAMPLES),
                                 seed) if former else None)
    found = {}
    for design in DESIGNS:
        paired = design == "paired"
        seeds = (paired_t_p if paired else welch_p)(base_scores, system_scores)
        replicates = resampling._replicates(resampled, paired, samples, seed)
        d = resampled.difference
        example = (int(np.sum(resampling._centred(replicates) >= abs(d))) + 1) / (
            replicates.size + 1)
        found[design] = {
            "seeds": seeds, "example": example,
            "pigeonhole": pigeonhole_p(resampled, paired, samples, seed, scaled=False),
            "pigeonhole_scaled": pigeonhole_p(resampled, paired, samples, seed, scaled=True),
            "unshrunk": _centred_p(resampling._replicates(resampled, paired, samples, seed,
                                                          shrink=False), d),
            "sacrebleu_statistic": sacrebleu_statistic_p(replicates, d),
            "former": former,
        }
    return found


def binomial_interval(count: int, total: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval of a rate ``count / total``."""
    from scipy.stats import beta

    tail = (1 - level) / 2
    low = 0.0 if count == 0 else float(beta.ppf(tail, count, total - count + 1))
    high = 1.0 if count == total else float(beta.ppf(1 - tail, count + 1, total - count))
    return low, high


def simulate(kind: str, scenario: str, nulls: int, samples: int = SAMPLES, seed: int = 0,
             alpha: float = ALPHA, former: bool | None = None) -> dict[str, Any]:
    """``nulls`` null comparisons of ``kind`` in ``scenario``: per design, each count's
    rejections at ``alpha``, rate and binomial 95% interval (None p-values, no variance to test,
    count as not rejected), with the runs' mean score and the seeds' sd (root mean variance).
    ``former``: count the former bootstrap too (default: for BLEU only)."""
    former = kind == "bleu" if former is None else former
    spec = KINDS[kind]
    seed_sd, interaction_sd = spec.scenarios[scenario]
    rng = np.random.default_rng([seed, list(KINDS).index(kind), list(spec.scenarios).index(
        scenario)])
    rejected = {design: dict.fromkeys(COUNTS, 0) for design in DESIGNS}
    untested = {design: 0 for design in DESIGNS}
    scores, variances = [], []
    for null in range(nulls):
        runs = spec.generate(rng, 2 * RUNS, seed_sd)
        if interaction_sd and spec.interact is not None:
            spec.interact(rng, runs[RUNS:], interaction_sd)
        with warnings.catch_warnings():  # scipy on nearly equal runs: the p-value stands
            warnings.simplefilter("ignore", RuntimeWarning)
            found = _one_null(spec, runs, samples, seed * 1_000_003 + null, former)
        per_run = spec.score(runs.sum(1))
        scores.append(per_run.mean())
        variances.append((per_run[:RUNS].var(ddof=1) + per_run[RUNS:].var(ddof=1)) / 2)
        for design, values in found.items():
            below = {name: value is not None and value < alpha for name, value in values.items()}
            below["combined"] = below["seeds"] and below["example"]
            untested[design] += values["seeds"] is None
            for name in COUNTS:
                rejected[design][name] += below[name]
    result: dict[str, Any] = {
        "kind": kind, "scenario": scenario, "seed_effect_sd": seed_sd,
        "interaction_sd": interaction_sd, "unit": spec.unit,
        "nulls": nulls, "samples": samples, "mean_score": float(np.mean(scores)),
        "seeds_sd": float(np.sqrt(np.mean(variances))), "designs": {}}
    for design in DESIGNS:
        rates = {}
        for name in COUNTS:
            if name == "former" and not former:
                continue
            count = rejected[design][name]
            rates[name] = {"rejected": count, "rate": count / nulls,
                           "interval": list(binomial_interval(count, nulls))}
        result["designs"][design] = {"rates": rates, "seeds_untested": untested[design]}
    return result


