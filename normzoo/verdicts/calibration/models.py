"""The null simulation's models: per score kind, runs drawn from one distribution (a seed-level
effect plus example-by-example noise around each example's difficulty), and what each null
comparison counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from normzoo.contract.scores import bleu_score, ratio_score

ALPHA = 0.05
TARGET = (0.03, 0.07)
RUNS = 3  # a side
SAMPLES = 500  # bootstrap draws a test in the simulation (1000 replicates: both signs)
FORMER_SAMPLES = 200  # the former bootstrap's draws (its per-slot draws cost 3× the others')


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _ngram_stats(rng: np.random.Generator, hyp_len: np.ndarray, ref_len: np.ndarray,
                 quality: np.ndarray) -> np.ndarray:
    """sacreBLEU-like statistics ``[..., 10]`` of hypotheses of ``hyp_len`` words against
    references of ``ref_len`` words: unigram matches binomial in the hypothesis words with the
    probability ``sigmoid(quality)``, each higher order's matches binomial among the lower
    order's (at most the order's n-grams) with a probability that rises with the quality; no
    order matches more n-grams than the reference has."""
    shape = np.broadcast_shapes(hyp_len.shape, quality.shape)
    stats = np.zeros((*shape, 10))
    stats[..., 0], stats[..., 1] = hyp_len, ref_len
    matched = None
    for n, offset in enumerate((None, -0.05, 0.2, 0.2)):
        total = np.broadcast_to(np.maximum(hyp_len - n, 0), shape)
        most = np.maximum(ref_len - n, 0)
        if offset is None:
            matched = rng.binomial(total.astype(np.int64), _sigmoid(quality))
        else:
            matched = rng.binomial(np.minimum(matched, total).astype(np.int64),
                                   _sigmoid(offset + quality - TRANSLATION_QUALITY))
        matched = np.minimum(matched, most)
        stats[..., 2 + n], stats[..., 6 + n] = matched, total
    return stats


TRANSLATION_QUALITY = 0.55  # mean unigram logit: precisions ≈ 0.61/0.35/0.24/0.18, BLEU ≈ 32


def bleu_runs(rng: np.random.Generator, runs: int, seed_sd: float,
                examples: int = 1000) -> np.ndarray:
    """``[runs, examples, 10]`` BLEU statistics of ``runs`` runs of one setting on a fresh test
    set. A sentence has a reference length (5 + Gamma(3.15, 2.25), 12 ± 4 words), a difficulty
    (logit sd 0.8) and a length offset (sd 2.1 words), and one translation most seeds agree on;
    each run translates it that way with probability 0.5, else its own way: a length around it
    (sd 1.25 words) and a quality shifted by the seed's effect (logit sd ``seed_sd``, the same
    for all the run's sentences) and by the run's sentence noise (logit sd 0.3)."""
    ref_len = 5 + np.round(rng.gamma(3.15, 2.25, examples))
    offset = rng.normal(0, 2.1, examples)
    quality = TRANSLATION_QUALITY + rng.normal(0, 0.8, examples)
    shared = _ngram_stats(rng, np.maximum(1, np.round(ref_len + offset)), ref_len, quality)
    seed = rng.normal(0, seed_sd, (runs, 1))
    own_quality = quality + seed + rng.normal(0, 0.3, (runs, examples))
    own_len = np.maximum(1, np.round(ref_len + offset + rng.normal(0, 1.25, (runs, examples))))
    own = _ngram_stats(rng, own_len, ref_len, own_quality)
    alike = rng.random((runs, examples)) < 0.5
    return np.where(alike[..., None], shared[None], own)


def accuracy_runs(rng: np.random.Generator, runs: int, seed_sd: float,
                   examples: int = 500) -> np.ndarray:
    """``[runs, examples, 2]`` ``[correct, 1]`` of ``runs`` runs: example j is correct with the
    probability ``sigmoid(difficulty_j + seed effect)``, difficulty ~ N(2, 2.5) logits (most
    examples nearly always right or wrong, accuracy ≈ 0.74), the seed's effect ~ N(0,
    ``seed_sd``), the same for all the run's examples."""
    difficulty = rng.normal(2.0, 2.5, examples)
    seed = rng.normal(0, seed_sd, (runs, 1))
    correct = rng.random((runs, examples)) < _sigmoid(difficulty + seed)
    return np.stack([correct.astype(np.float64), np.ones((runs, examples))], -1)


def loss_runs(rng: np.random.Generator, runs: int, seed_sd: float,
              examples: int = 1000) -> np.ndarray:
    """``[runs, examples, 2]`` ``[summed loss, tokens]`` of ``runs`` runs: a sentence has 5–40
    tokens and a loss per token ~ N(4, 0.5) nats; a run's summed loss adds the seed's effect
    (~ N(0, ``seed_sd``) nats a token, the same for all its sentences) on every token and its
    own token noise (sd 0.35 nats a token, independent, so √tokens · 0.35 a sentence)."""
    tokens = rng.integers(5, 41, examples).astype(np.float64)
    difficulty = rng.normal(4.0, 0.5, examples)
    seed = rng.normal(0, seed_sd, (runs, 1))
    loss = (tokens * (difficulty + seed)
            + np.sqrt(tokens) * 0.35 * rng.standard_normal((runs, examples)))
    return np.stack([loss, np.broadcast_to(tokens, (runs, examples))], -1)


def lm_interaction(rng: np.random.Generator, system: np.ndarray, sd: float) -> None:
    """A side×example interaction with no effect on average: the system's runs ``[runs,
    examples, 2]`` lose ``u_j`` nats a token more on sentence j, ``u_j ~ N(0, sd)`` fresh each
    comparison (better on some sentences, worse on others, the same on a new test set)."""
    system[..., 0] += system[..., 1] * rng.normal(0, sd, system.shape[1])


@dataclass(frozen=True)
class Kind:
    name: str
    generate: Callable[[np.random.Generator, int, float], np.ndarray]
    score: Callable[[np.ndarray], np.ndarray]
    # scenario: (the seed effect's sd, the side×example interaction's sd), generator's units
    scenarios: dict[str, tuple[float, float]]
    unit: str
    interact: Callable[[np.random.Generator, np.ndarray, float], None] | None = None


KINDS = {
    "bleu": Kind("bleu", bleu_runs, bleu_score,
                        {"examples": (0.0, 0.0), "realistic": (0.05, 0.0),
                         "seed-heavy": (0.13, 0.0)}, "BLEU"),
    "accuracy": Kind("accuracy", accuracy_runs, ratio_score,
                           {"examples": (0.0, 0.0), "realistic": (0.2, 0.0),
                            "seed-heavy": (0.4, 0.0)}, "accuracy"),
    "loss": Kind("loss", loss_runs, ratio_score,
                      {"examples": (0.0, 0.0), "realistic": (0.006, 0.0),
                       "seed-heavy": (0.016, 0.0), "interaction": (0.002, 0.15)},
                      "nats/token", lm_interaction),
}
DESIGNS = ("paired", "unpaired")
# What each comparison counts, per design: (a), (b), (c), then what the adopted test replaces.
COUNTS = {
    "seeds": "(a) seeds' t-test (paired t / Welch) on the runs' scores",
    "example": "(b) example-level test (resampling.example_test)",
    "combined": "(c) both below 0.05 (the former condition for *shown*; the rule takes (b))",
    "pigeonhole": "runs resampled, then examples (no correction), centred",
    "pigeonhole_scaled": "runs resampled ×√(n/(n−1)), then examples, centred",
    "unshrunk": "adopted test without the example-level shrinkage (λ = 1)",
    "sacrebleu_statistic": "sacreBLEU's statistic (|d*| − mean|d*| > |d|) on the adopted "
                           "replicates",
    "former": f"former normzoo/sweep/bootstrap.py (sacreBLEU's statistic, its draws, "
              f"{FORMER_SAMPLES} of them); BLEU only",
}


