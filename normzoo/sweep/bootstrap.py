"""The sentence-level test over several seeds: a hierarchical paired bootstrap of corpus BLEU.

A setting's runs share one test set. Pooling their translations and resampling the (sentence,
seed) items independently, as the paired bootstrap of concatenated runs did, counts each test
sentence once per seed and treats the seeds as if they were the population: its interval shrank
by about √3 on three seeds (± 0.86 pooled against ± 1.57 for one run). Here each replicate first
draws the runs (seeds) with replacement, then the sentences within each drawn run, both sides
paired (the same run pair, the same sentences), and scores the corpus BLEU of what it drew, as
sacreBLEU's paired bootstrap does. With one run a side it is sacreBLEU's paired bootstrap,
resample for resample (the same ``SACREBLEU_SEED``, the same draws of sentences).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

NAME = "hierarchical bootstrap (seeds, then sentences)"


@dataclass(frozen=True)
class HierarchicalBootstrap:
    """Both sides' corpus BLEU over all their runs, the two-sided p-value of the system's
    difference (sacreBLEU's statistic: the absolute difference against the replicates'
    centred ones), the system's 95% half-interval (as sacreBLEU reports it) and the 95%
    half-interval of the difference."""

    baseline_bleu: float
    system_bleu: float
    p_value: float
    system_ci: float
    difference_ci: float
    signature: str
    sentence_test: str = NAME

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _seed() -> int | None:
    """sacreBLEU's own seed, so one run a side draws what ``sacrebleu --paired-bs`` draws."""
    seed = os.environ.get("SACREBLEU_SEED", "12345")
    return None if seed.lower() == "none" else int(seed)


def hierarchical_bootstrap(baseline: Sequence[Sequence[str]], system: Sequence[Sequence[str]],
                           references: Sequence[str], samples: int = 1000
                           ) -> HierarchicalBootstrap:
    """``baseline[k]`` and ``system[k]``: the test hypotheses of the k-th run pair (paired
    seed with seed), each line against ``references``."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import _compute_p_value, estimate_ci

    if not baseline or len(baseline) != len(system):
        raise ValueError(f"{len(baseline)} baseline and {len(system)} system runs: give pairs")
    if any(len(h) != len(references) for h in [*baseline, *system]):
        raise ValueError(f"every run must translate the {len(references)} references")
    metric = BLEU()
    refs = [list(references)]

    def stats(runs: Sequence[Sequence[str]]) -> np.ndarray:
        return np.array([metric._extract_corpus_statistics(list(h), refs) for h in runs],
                        dtype="float32")  # (runs, sentences, statistics), as sacreBLEU holds them

    base, other = stats(baseline), stats(system)
    runs, sentences = base.shape[:2]
    rng = np.random.default_rng(_seed())
    # Sentences first, in sacreBLEU's shape for one run; the seeds' draws after, so that one
    # run a side leaves sacreBLEU's draws of sentences untouched.
    sentence_draws = rng.choice(sentences, size=(samples, runs * sentences), replace=True)
    run_draws = rng.integers(runs, size=(samples, runs))

    def score(total: np.ndarray) -> float:
        return float(metric._compute_score_from_stats(total).score)

    scores = np.empty((2, samples))
    for i in range(samples):
        drawn = sentence_draws[i].reshape(runs, sentences)
        for side, held in enumerate((base, other)):
            scores[side, i] = score(sum(held[run][drawn[j]].sum(0)
                                        for j, run in enumerate(run_draws[i])))
    base_bleu, sys_bleu = score(base.sum((0, 1))), score(other.sum((0, 1)))
    differences = np.abs(scores[1] - scores[0])
    p_value = _compute_p_value(differences - differences.mean(), abs(sys_bleu - base_bleu))
    signature = f"{metric.get_signature()}|bs:{samples}|seed:{_seed()}|hierarchical"
    return HierarchicalBootstrap(base_bleu, sys_bleu, float(p_value),
                                 float(estimate_ci(scores[1])[1]),
                                 float(estimate_ci(scores[1] - scores[0])[1]), signature)
