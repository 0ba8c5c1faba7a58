"""The example-level test (normzoo.verdicts.resampling) and its scores and null simulation."""

from __future__ import annotations

import numpy as np
import pytest
from sacrebleu.metrics import BLEU
from scipy.stats import binom

from normzoo.contract.scores import bleu_score, bleu_stats, ratio_score
from normzoo.verdicts import calibration
from normzoo.verdicts.resampling import ExampleTest, example_test

WORDS = tuple(" ".join([
    "a man woman child dog in on the with is are running playing red blue green shirt street",
    "water ball two people sitting standing near young girl boy white black jacket holding",
    "looking at an of and while small large grass beach city , Ein Mann-mit (Hund) 3.5 über",
]).split(" "))


def references(rng: np.random.Generator, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=rng.integers(3, 25))).capitalize() + "."
            for _ in range(count)]


def translate(rng: np.random.Generator, refs: list[str], errors: float) -> list[str]:
    """Hypotheses: each reference word dropped, replaced or followed by an inserted word at
    rates set by ``errors``; some lines lose their final period, a few come out empty."""
    out = []
    for ref in refs:
        words = []
        for word in ref[:-1].split():
            u = rng.random()
            if u < errors / 3:
                continue
            words.append(str(rng.choice(WORDS)) if u < errors else word)
            if rng.random() < errors / 4:
                words.append(str(rng.choice(WORDS)))
        line = " ".join(words) + ("." if rng.random() < 0.9 else "")
        out.append("" if rng.random() < 0.01 else line)
    return out


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[list[str]]]:
    rng = np.random.default_rng(2016)
    refs = references(rng, 400)
    return refs, [translate(rng, refs, errors) for errors in (0.15, 0.3, 0.5, 0.9)]


def test_bleu_score_is_sacrebleus(corpus) -> None:
    refs, systems = corpus
    metric = BLEU()
    for hyps in systems:
        stats = bleu_stats(hyps, refs)
        assert stats.shape == (len(refs), 10) and stats.dtype == np.float64
        expected = metric.corpus_score(hyps, [refs]).score
        assert abs(float(bleu_score(stats.sum(0))) - expected) <= 1e-9
        # vectorised: subsets of sentences (resamples, and single short sentences that hit
        # sacreBLEU's corner cases: no 4-grams, no match, shorter than the reference)
        rng = np.random.default_rng(0)
        weights = rng.multinomial(len(refs), np.full(len(refs), 1 / len(refs)), size=40)
        totals = np.concatenate([weights @ stats, stats[:60]]).reshape(10, 10, 10)
        found = bleu_score(totals)
        assert found.shape == (10, 10)
        wanted = np.array([metric._compute_score_from_stats(list(t)).score
                           for t in totals.reshape(-1, 10)]).reshape(10, 10)
        np.testing.assert_allclose(found, wanted, rtol=0, atol=1e-9)
    corner = np.array([[0, 5, 0, 0, 0, 0, 0, 0, 0, 0], [3, 5, 2, 1, 0, 0, 3, 2, 1, 0],
                       [2, 9, 1, 0, 0, 0, 2, 1, 0, 0], [7, 4, 5, 3, 0, 0, 7, 6, 5, 4]], float)
    np.testing.assert_allclose(
        bleu_score(corner), [metric._compute_score_from_stats(list(t)).score for t in corner],
        rtol=0, atol=1e-9)


def test_ratio_score() -> None:
    np.testing.assert_allclose(ratio_score(np.array([[3.0, 4.0], [1.0, 8.0]])), [0.75, 0.125])


def test_one_run_a_side_is_sacrebleus_corpus_bleu(corpus) -> None:
    refs, systems = corpus
    found = example_test([bleu_stats(systems[1], refs)], [bleu_stats(systems[0], refs)],
                         bleu_score, paired=True, samples=200)
    assert found.baseline_score == pytest.approx(BLEU().corpus_score(systems[1], [refs]).score,
                                                 abs=1e-9)
    assert found.system_score == pytest.approx(BLEU().corpus_score(systems[0], [refs]).score,
                                               abs=1e-9)
    assert found.name.startswith("paired bootstrap of the examples")
    assert found.p_value < 0.01 and found.interval[0] > 0  # 0.15 errors a word against 0.3


@pytest.mark.parametrize("runs", [1, 3])
def test_identical_sides(corpus, runs: int) -> None:
    refs, systems = corpus
    held = [bleu_stats(hyps, refs) for hyps in systems[:runs]]
    for paired in (True, False):
        found = example_test(held, [run.copy() for run in held], bleu_score, paired=paired,
                             samples=300)
        assert found.p_value == 1.0 and found.difference == 0.0
        assert found.interval[0] <= 0.0 <= found.interval[1]


def _sides(seed: int, shift: float = 0.0, runs: tuple[int, int] = (3, 3), seed_sd: float = 0.2
           ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Classifier runs on one test set: ``runs`` a side, the system's right on a further
    ``shift`` share of the examples."""
    rng = np.random.default_rng(seed)
    held = calibration.accuracy_runs(rng, sum(runs), seed_sd=seed_sd)
    system = held[runs[0]:]
    system[..., 0] = np.maximum(system[..., 0], rng.random(system.shape[:2]) < shift)
    return list(held[:runs[0]]), list(system)


def test_symmetric_in_the_sides(corpus) -> None:
    refs, systems = corpus
    cases = [([bleu_stats(h, refs) for h in systems[:2]],
              [bleu_stats(h, refs) for h in systems[1:3]], bleu_score),
             (*_sides(1), ratio_score), (*_sides(3, runs=(2, 4)), ratio_score),
             (*_sides(5, runs=(1, 3)), ratio_score)]
    for baseline, system, score in cases:
        for paired in (True, False):
            if paired and len(baseline) != len(system):
                continue
            one = example_test(baseline, system, score, paired=paired, samples=300)
            other = example_test(system, baseline, score, paired=paired, samples=300)
            assert one.p_value == other.p_value
            assert one.difference == -other.difference
            assert one.interval == pytest.approx((-other.interval[1], -other.interval[0]))


def test_a_clear_difference(corpus) -> None:
    baseline, system = _sides(11, shift=0.3, seed_sd=0.02)
    for paired in (True, False):
        found = example_test(baseline, system, ratio_score, paired=paired)
        assert isinstance(found, ExampleTest) and found.samples == 1000
        assert found.difference > 0.05 and found.p_value < 0.01
        assert found.interval[0] < found.difference < found.interval[1]
        assert found.interval[0] > 0
        assert set(found.as_dict()) == {"baseline_score", "system_score", "difference",
                                        "p_value", "interval", "name", "samples"}
    refs, _ = corpus
    rng = np.random.default_rng(5)
    found = example_test([bleu_stats(translate(rng, refs, 0.5), refs) for _ in range(3)],
                         [bleu_stats(translate(rng, refs, 0.3), refs) for _ in range(3)],
                         bleu_score, paired=False)
    assert found.difference > 5 and found.p_value < 0.01 and found.interval[0] > 0


def test_interval_and_p_agree() -> None:
    """The interval holds the difference, and excludes 0 where (and only where, up to the +1
    and the quantile's step) the p-value is below 0.05."""
    for seed in range(12):
        baseline, system = _sides(100 + seed, shift=0.005 * seed)
        found = example_test(baseline, system, ratio_score, paired=seed % 2 == 0, samples=400)
        low, high = found.interval
        assert low <= found.difference <= high
        if found.p_value < 0.045:
            assert low > 0 or high < 0
        if found.p_value > 0.055:
            assert low <= 0 <= high


def test_deterministic_and_checked() -> None:
    baseline, system = _sides(1)
    assert (example_test(baseline, system, ratio_score, paired=True)
            == example_test(baseline, system, ratio_score, paired=True))
    with pytest.raises(ValueError, match="seed with seed"):
        example_test(baseline, system[:2], ratio_score, paired=True)
    with pytest.raises(ValueError, match="same examples"):
        example_test(baseline, [run[:-1] for run in system], ratio_score, paired=False)
    with pytest.raises(ValueError, match="at least one"):
        example_test([], system, ratio_score, paired=False)


def _former_p(baseline: list[list[str]], system: list[list[str]], refs: list[str],
              samples: int) -> float:
    """The p-value of the former ``normzoo/sweep/bootstrap.py: hierarchical_bootstrap`` (removed
    since; git history), its loop transcribed: sacreBLEU's statistics in float32, the sentence
    draws of every run slot then the run pairs from sacreBLEU's seed, sacreBLEU's scoring and
    p-value."""
    from sacrebleu.significance import _compute_p_value

    metric = BLEU()
    base, other = (np.array([metric._extract_corpus_statistics(h, [refs]) for h in runs],
                            dtype="float32") for runs in (baseline, system))
    runs, sentences = base.shape[:2]
    rng = np.random.default_rng(12345)
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
    differences = np.abs(scores[1] - scores[0])
    return _compute_p_value(differences - differences.mean(),
                            abs(score(other.sum((0, 1))) - score(base.sum((0, 1)))))


def test_the_former_bootstrap_reimplemented(corpus) -> None:
    """The simulation's vectorised former bootstrap gives the former test's p, to the bit."""
    refs, _ = corpus
    rng = np.random.default_rng(9)
    baseline = [translate(rng, refs, 0.3) for _ in range(2)]
    system = [translate(rng, refs, 0.28) for _ in range(2)]
    assert calibration.former_bootstrap_p(
        [bleu_stats(h, refs) for h in baseline], [bleu_stats(h, refs) for h in system],
        bleu_score, 150) == _former_p(baseline, system, refs, 150)


NULLS = 300


def _band(nulls: int, level: float = 0.999) -> tuple[float, float]:
    """Where the rejection rate over ``nulls`` independent nulls of a test whose true rate is
    anywhere in the target [0.03, 0.07] falls with probability ``level`` at least: from the
    binomial's lower tail at 0.03 to its upper tail at 0.07."""
    tail = (1 - level) / 2
    low, high = calibration.TARGET
    return binom.ppf(tail, nulls, low) / nulls, binom.ppf(1 - tail, nulls, high) / nulls


@pytest.mark.parametrize("kind", list(calibration.KINDS))
def test_null_rejection_rates(kind: str) -> None:
    """A small null simulation (fixed seed, so deterministic). Each design's example-level
    rejection rate lies in the band a test calibrated within the target stays in 999 times in
    1000, and the two designs' together (600 tests) within [0.02, 0.08]; the former bootstrap
    (sacreBLEU's uncentred statistic, runs and sentences resampled) rejects so much more that it
    falls above the band: a test that could not tell the two apart would fail here."""
    low, high = _band(NULLS)
    assert low < 0.01 and 0.11 < high < 0.13
    found = calibration.simulate(kind, "realistic", NULLS, samples=200, seed=1, former=True)
    rates = {design: held["rates"] for design, held in found["designs"].items()}
    for design, held in rates.items():
        assert low <= held["example"]["rate"] <= high, (design, held)
        assert held["combined"]["rate"] <= min(held["example"]["rate"], held["seeds"]["rate"])
        assert held["former"]["rate"] > high, (design, held)
    pooled = sum(held["example"]["rejected"] for held in rates.values()) / (2 * NULLS)
    assert 0.02 <= pooled <= 0.08, rates
