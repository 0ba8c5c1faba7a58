"""The seed-aware verdict (normzoo.verdicts.significance, under the rule of
normzoo.verdicts.rule): a seed is not mistaken for a setting at more than the rate the test
promises, a real difference is shown, and the depth study's committed 6+6 cells (two settings
that train alike) are never called different."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from normzoo.verdicts import rule
from normzoo.verdicts.significance import (
    INDICATED,
    NOT_SHOWN,
    SHOWN,
    equivalence_p,
    holm,
    paired_t_p,
    seed_interval,
    seed_test,
    welch_p,
)

ROOT = Path(__file__).resolve().parent.parent


def judge(baseline: list[float], system: list[float], bootstrap_p: float | None,
          precisions: list[str] | None = None, devices: list[str] | None = None,
          paired: bool = False, sentence_test: bool = True, margin: float | None = None
          ) -> tuple[str, str]:
    """The rule's verdict on per-seed scores with a given example-level p-value (None and
    ``sentence_test=False``: the runs kept no per-example outputs); every run on one device
    and precision unless given."""
    n = len(baseline) + len(system)
    precisions, devices = precisions or ["32-true"] * n, devices or ["cpu"] * n
    if len(precisions) < n:
        precisions = [*precisions, *[precisions[-1]] * (n - len(precisions))]
    if len(devices) < n:
        devices = [*devices, *[devices[-1]] * (n - len(devices))]
    runs = [rule.Run(f"run{i}", str(i % len(baseline)) if paired else str(i), v,
                     precisions[i], devices[i])
            for i, v in enumerate([*baseline, *system])]
    row = {**seed_test(baseline, system, paired, margin), "example_p": bootstrap_p,
           "example_note": None if sentence_test else "kept no per-example outputs"}
    if sentence_test and bootstrap_p is None:
        row["example_note"] = "identical outputs"
    return rule.verdict(row, runs[:len(baseline)], runs[len(baseline):])
CEILING = ROOT / "docs" / "study-depth" / "data" / "ceiling"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"


def _null_rate(seeds: int, trials: int = 4000, sd: float = 0.6) -> float:
    rng = np.random.default_rng(0)
    draws = rng.normal(34.7, sd, size=(trials, 2, seeds))
    return float(np.mean([welch_p(a.tolist(), b.tolist()) < 0.05 for a, b in draws]))


def test_the_seed_test_holds_its_false_positive_rate_on_settings_that_do_not_differ():
    # Two settings with the same mean and the same seed-to-seed spread: Welch's t-test calls
    # them different at no more than its nominal 5% (4,000 trials; with 3 seeds a side it is a
    # little conservative, 3.5%, since its degrees of freedom are estimated), and not so far
    # under it that it could never find anything.
    for seeds in (3, 5):
        assert 0.02 <= _null_rate(seeds) <= 0.065


def test_the_seed_test_finds_a_real_difference():
    rng = np.random.default_rng(1)
    found = [welch_p(rng.normal(30.0, 0.6, 3).tolist(), rng.normal(33.0, 0.6, 3).tolist()) < 0.05
             for _ in range(500)]
    assert np.mean(found) > 0.9  # 3 BLEU at a 0.6 spread, 3 seeds a side


def test_the_verdict_needs_the_example_test_three_seeds_and_one_precision():
    low, high = [30.1, 30.4, 29.8], [33.0, 33.5, 32.8]
    assert judge(low, high, bootstrap_p=0.001)[0] == SHOWN
    # The example-level test decides (its noise holds the seeds' too); the seeds' t-test alone
    # finding a difference on this test set is only indicated.
    seeds_only = judge(low, high, bootstrap_p=0.3)
    assert seeds_only[0] == INDICATED and "not beyond the noise" in seeds_only[1]
    one = judge([30.0], [33.0], bootstrap_p=0.001)
    assert one[0] == INDICATED and "one seed a side" in one[1]
    assert judge(low[:2], high[:2], bootstrap_p=0.001)[0] == INDICATED
    assert judge([30.0], [30.1], bootstrap_p=0.6)[0] == NOT_SHOWN
    # A side mixing precisions is at most indicated (it was "not shown" before issue 58).
    mixed = judge(low, high, bootstrap_p=0.001,
                  precisions=["bf16-mixed", "bf16-mixed", "32-true"])
    assert mixed[0] == INDICATED and "more than one precision" in mixed[1]
    # Failing runs all scoring 0.00 against training ones: no spread, certainly different.
    assert welch_p([0.0, 0.0, 0.0], [30.0, 31.0, 32.0]) < 1e-3
    assert welch_p([1.0], [2.0, 3.0]) is None


def test_no_spread_on_either_side_is_no_variance_to_test_never_p_0():
    """Three copies of one run against three of another (the issue's attack) gave Welch p = 0
    and *shown* for 1.21 BLEU of seed noise: a t-test has no spread to divide by, so there is
    nothing to test, whatever the bootstrap says."""
    copies = judge([35.44] * 3, [34.23] * 3, bootstrap_p=0.001)
    assert copies[0] == NOT_SHOWN and "no variance to test" in copies[1]
    assert welch_p([35.44] * 3, [34.23] * 3) is None
    assert welch_p([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]) is None
    assert paired_t_p([30.0, 31.0, 32.0], [31.0, 32.0, 33.0]) is None  # one shift, no spread
    lm = judge([4.03] * 3, [4.0298] * 3, None, sentence_test=False)
    assert lm[0] == NOT_SHOWN and "no variance to test" in lm[1]


def test_runs_on_more_than_one_device_kind_are_at_most_indicated():
    low, high = [30.1, 30.4, 29.8], [33.0, 33.5, 32.8]
    one_kind = judge(low, high, 0.001, devices=["cuda"] * 6)
    assert one_kind[0] == SHOWN
    mixed = judge(low, high, 0.001, devices=["cuda", "cpu", "cpu", "cuda", "cuda", "cuda"])
    assert mixed[0] == INDICATED and "more than one device (cpu, cuda)" in mixed[1]
    assert judge([30.0, 30.2, 29.9], [30.1, 29.8, 30.3], 0.6,
                 devices=["cpu", "cuda"])[0] == NOT_SHOWN
    # A run that recorded no device is unknown, and unknown is no match (issue 58).
    unknown = judge(low, high, 0.001, devices=["cpu", "", "cpu"])
    assert unknown[0] == INDICATED and "recorded no device" in unknown[1]


def test_a_not_shown_difference_carries_the_interval_the_seeds_leave_open():
    # The study's Post-LN against Pre-LN 6+6 (p = 0.99) is "not shown", not "no difference":
    # the seeds leave about ± 1.35 BLEU open either way.
    bleu = _ceiling_bleu()
    pre, post = ([bleu[(scheme, s)] for s in "123"] for scheme in ("pre", "post"))
    low, high = seed_interval(pre, post, paired=False)
    assert low == pytest.approx(-1.337, abs=0.01) and high == pytest.approx(1.344, abs=0.01)
    assert seed_interval(pre, post, paired=True) is not None
    assert seed_interval([35.44] * 3, [34.23] * 3, paired=False) is None


def test_the_paired_t_test_is_used_for_a_paired_design():
    # Each seed moves both settings alike, the setting adds a steady +0.3: Welch sees the
    # seeds' spread and finds nothing, the paired test sees the steady shift.
    base, other = [30.0, 32.0, 34.0], [30.3, 32.2, 34.4]
    assert welch_p(base, other) > 0.5 and paired_t_p(base, other) < 0.05
    paired = judge(base, other, 0.04, paired=True)
    assert paired[0] == SHOWN and "paired t p = " in paired[1]
    assert "Welch p = " in judge(base, other, 0.04)[1]


def _ceiling_bleu() -> dict[tuple[str, str], float]:
    import json

    found = {}
    for cell in CEILING.iterdir():
        record = json.loads((cell / "summary.json").read_text(encoding="utf-8"))
        scheme = "post" if cell.name.endswith("post") else "pre"
        found[(scheme, cell.name.split("_")[0].removeprefix("seed-"))] = record["test"]["bleu"]
    return found


def test_splits_of_the_committed_6x6_cells_are_called_different_at_about_the_promised_rate():
    # Post-LN and Pre-LN 6+6 train to the same BLEU under the papers' protocol, so the six
    # cells are six seeds of one quality. Split every way into two groups of three (10 splits),
    # the seed test finds a difference in one: the best three against the worst three (34.73,
    # 35.16, 35.44 against 34.21, 34.23, 34.42, p = 0.047), the most extreme of ten looks, as a
    # 5% test gives. The split the study actually makes, Post-LN against Pre-LN, is p = 0.99.
    bleu = _ceiling_bleu()
    assert len(bleu) == 6
    cells = sorted(bleu)
    splits = [(group, tuple(c for c in cells if c not in group))
              for group in itertools.combinations(cells, 3) if cells[0] in group]
    assert len(splits) == 10
    found = [welch_p([bleu[c] for c in a], [bleu[c] for c in b]) < 0.05 for a, b in splits]
    assert sum(found) <= 1
    by_scheme = [[bleu[("post", s)] for s in "123"], [bleu[("pre", s)] for s in "123"]]
    assert welch_p(*by_scheme) > 0.9
    assert judge(*by_scheme, bootstrap_p=0.5)[0] == NOT_SHOWN


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k")
def test_compare_on_the_committed_6x6_cells_shows_no_difference(monkeypatch, tmp_path):
    from normzoo.verdicts.runs import compare_runs

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    post = [CEILING / f"seed-{s}_residual-post" for s in (1, 2, 3)]
    pre = [CEILING / f"seed-{s}_residual-pre" for s in (1, 2, 3)]
    settings = compare_runs(pre, post, MULTI30K, samples=200)
    assert settings["verdict"] == NOT_SHOWN and settings["seed_p"] > 0.5
    assert settings["baseline"]["precisions"] == ["bf16-mixed"] * 3
    # One Pre-LN seed against another: the example test alone finds 1.21 BLEU significant;
    # one seed a side is at most indicated.
    seeds = compare_runs(pre[:1], pre[1:2], MULTI30K, samples=200)
    assert seeds["example_p"] < 0.05 and seeds["verdict"] == INDICATED
    assert seeds["baseline"]["scores"] == [35.44] and seeds["system"]["scores"] == [34.23]


def test_without_per_sentence_scores_the_seeds_decide_alone_and_say_so():
    low, high = [4.03, 4.05, 4.02], [3.79, 3.78, 3.80]
    shown = judge(low, high, None, sentence_test=False)
    assert shown[0] == SHOWN and "the seeds' test alone" in shown[1]
    assert judge(low[:2], high[:2], None, sentence_test=False)[0] == INDICATED
    assert judge([4.03, 3.9, 4.1], [4.0, 3.95, 4.05], None,
                 sentence_test=False)[0] == NOT_SHOWN


def test_compare_on_the_committed_llama_cells_gives_the_study_s_verdicts():
    """``normzoo compare`` on language-model runs is the rule the Llama-style study applies:
    on its committed Multi30k cells it finds what the study reports (Peri-LN -0.250
    nats/token against Pre-LN, DeepNorm -0.062), held to *indicated* since those runs recorded
    no device, and one seed against another of Pre-LN is not shown."""
    from normzoo.verdicts.runs import compare_runs

    cells = ROOT / "docs" / "study-llama" / "data" / "multi30k-de"

    def seeds(scheme: str) -> list[Path]:
        return [cells / f"seed-{s}_residual-{scheme}" for s in (1, 2, 3)]

    for scheme, difference in (("peri", -0.250), ("deepnorm", -0.062)):
        result = compare_runs(seeds("pre"), seeds(scheme))
        assert result["verdict"] == INDICATED and "recorded no device" in result["reason"]
        assert result["difference"] == pytest.approx(difference, abs=5e-4)
        assert result["better_side"] == "system" and result["seed_p"] < 0.05
    one = compare_runs(seeds("pre")[:1], seeds("pre")[1:2])
    assert one["verdict"] != "shown"


@pytest.mark.parametrize("paired", [False, True])
def test_equal_within_a_margin_exactly_when_the_90_percent_interval_lies_inside_it(paired):
    """TOST at 0.05 is the 90% interval of the difference inside the margin (Schuirmann)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        base = rng.normal(20.4, 0.3, 3).tolist()
        other = (np.asarray(base) + rng.normal(rng.uniform(-1, 1), 0.3, 3)).tolist()
        margin = float(rng.uniform(0.2, 2.0))
        low, high = seed_interval(base, other, paired, level=0.90)
        p = equivalence_p(base, other, margin, paired)
        assert (p < 0.05) == (-margin < low and high < margin)


def test_equality_is_never_read_without_a_margin_or_from_no_spread():
    base, same = [20.28, 20.01, 20.55], [20.43, 20.12, 20.74]
    assert equivalence_p(base, same, None, paired=False) is None
    assert equivalence_p([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], 1.0, paired=False) is None
    p = equivalence_p(base, same, 1.0, paired=True)  # the same seeds, 0.15 apart
    assert p < 0.05
    # A steady 0.15 BLEU shift is a difference (indicated: the example test finds none);
    # seeds that differ by nothing steady are equal within ± 1.
    assert judge(base, same, 0.5, paired=True, margin=1.0)[0] == INDICATED
    same = [20.43, 20.0, 20.60]
    assert judge(base, same, 0.5, paired=True, margin=1.0)[0] == rule.EQUAL
    # Two seeds a side, or mixed devices: "equal" is only indicated, so not said.
    two = judge(base[:2], same[:2], 0.5, paired=True, margin=1.0)
    assert two[0] == NOT_SHOWN and "only indicated" in two[1]
    mixed = judge(base, same, 0.5, paired=True, margin=1.0, devices=["cpu", "cuda"])
    assert mixed[0] == NOT_SHOWN and "only indicated" in mixed[1]
    assert judge(base, same, 0.5, paired=True, margin=0.05)[0] == NOT_SHOWN


def test_holm_keeps_what_survives_testing_together_and_skips_the_untested():
    assert holm([0.03, 0.001, 0.04, 0.012]) == [False, True, False, True]
    assert holm([0.2, 0.01]) == [False, True]
    assert holm([0.01, None, 0.02]) == [True, False, True]  # two tests, not three
    assert holm([]) == []
