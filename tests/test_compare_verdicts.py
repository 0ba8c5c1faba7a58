"""Verdicts no copy can fool (issue 51): ``normzoo compare`` refuses relabelled copies of one run,
holds a side mixing device kinds to *indicated*, resamples seeds before sentences, and pairs the
seeds' test where both sides ran the same seeds. On the committed study cells where it can."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.sweep.bootstrap import NAME as HIERARCHICAL
from normzoo.sweep.significance import PAIRED_T, WELCH

ROOT = Path(__file__).resolve().parent.parent
CEILING = ROOT / "docs" / "study-depth" / "data" / "ceiling"
LLAMA = ROOT / "docs" / "study-llama" / "data" / "multi30k-de"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
needs_multi30k = pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k")


def _relabelled(run: Path, where: Path, seed: int, device: str | None = None) -> Path:
    """A copy of ``run``'s folder with its ``recipe.yaml`` seed edited (and, given ``device``,
    a ``summary.json`` machine record saying it trained there)."""
    copy = where / f"{run.name}-as-seed-{seed}"
    shutil.copytree(run, copy)
    recipe = yaml.safe_load((copy / "recipe.yaml").read_text(encoding="utf-8"))
    recipe["seed"] = seed
    (copy / "recipe.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    if device is not None:
        summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
        summary["machine"] = {"device": device, "gpu": None}
        (copy / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return copy


def _args(flag: str, runs: list[Path]) -> list[str]:
    return [a for run in runs for a in (flag, str(run))]


@pytest.mark.parametrize(("cells", "output"), [(CEILING, "test translations"),
                                                (LLAMA, "test losses")])
def test_relabelled_copies_of_one_run_are_refused(tmp_path: Path, cells: Path, output: str):
    """The issue's attack: three copies of Pre-LN seed 1 with the seed edited, against three
    of seed 2, read *shown* (Welch p = 0, both sides without spread) for one seed's noise."""
    one = cells / "seed-1_residual-pre"
    two = cells / "seed-2_residual-pre"
    base = [_relabelled(one, tmp_path, s) for s in (1, 2, 3)]
    other = [_relabelled(two, tmp_path, s) for s in (1, 2, 3)]
    found = CliRunner().invoke(app, ["compare", *_args("-b", base), *_args("-s", other),
                                     "--data-dir", str(MULTI30K)])
    assert found.exit_code == 2, found.output
    assert "the baseline runs must be distinct work" in found.output
    assert f"identical {output}" in found.output and str(base[0]) in found.output
    assert "shown" not in found.output


def test_language_models_pair_the_same_seeds_and_welch_the_rest():
    from normzoo.sweep.lm_comparison import compare_lm_runs, format_lm_comparison

    def seeds(scheme: str, which: tuple[int, ...] = (1, 2, 3)) -> list[Path]:
        return [LLAMA / f"seed-{s}_residual-{scheme}" for s in which]

    paired = compare_lm_runs(seeds("pre"), seeds("peri")[::-1])  # paired by seed, any order
    assert paired["paired"] and paired["seed_test"] == PAIRED_T
    assert paired["system_seed_loss"] == compare_lm_runs(seeds("pre"), seeds("peri"))[
        "system_seed_loss"]
    assert "seeds: paired t-test (the same seeds on both sides)" in format_lm_comparison(paired)
    for unpaired in (compare_lm_runs(seeds("pre"), seeds("peri", (1, 2))),
                     compare_lm_runs(seeds("pre", (1, 2)), seeds("peri", (2, 3)))):
        assert not unpaired["paired"] and unpaired["seed_test"] == WELCH
        assert unpaired["seed_p"] == unpaired["welch_p"]


def test_a_language_model_side_mixing_device_kinds_is_at_most_indicated(tmp_path: Path):
    from normzoo.sweep.lm_comparison import compare_lm_runs

    pre = [_relabelled(LLAMA / f"seed-{s}_residual-pre", tmp_path, s, "cuda") for s in (1, 2, 3)]
    peri = [_relabelled(LLAMA / f"seed-{s}_residual-peri", tmp_path, s, device)
            for s, device in ((1, "cuda"), (2, "cpu"), (3, "cpu"))]
    assert compare_lm_runs(pre, peri[:1] + [
        _relabelled(LLAMA / f"seed-{s}_residual-peri", tmp_path / "gpu", s, "cuda")
        for s in (2, 3)])["verdict"] == "shown"
    # Given in any order, the runs are reported seed by seed (the seeds match: paired).
    result = CliRunner().invoke(app, ["compare", *_args("-b", pre), *_args("-s", peri[::-1]),
                                      "--json"])
    report = json.loads(result.output)
    assert report["verdict"] == "indicated" and report["system_device"] == ["cuda", "cpu", "cpu"]
    assert report["systems"] == [str(run) for run in peri]
    assert "different device kinds (cpu, cuda)" in report["reason"]
    text = CliRunner().invoke(app, ["compare", *_args("-b", pre), *_args("-s", peri)]).output
    assert "indicated: the runs trained on different device kinds" in text
    assert "bf16-mixed on cpu, cuda" in text or "on cpu, cuda" in text


@needs_multi30k
def test_the_hierarchical_bootstrap_is_sacrebleus_on_one_run_and_wider_over_seeds(tmp_path,
                                                                                 monkeypatch):
    """One run a side: the same draws as sacreBLEU's paired bootstrap, so the same p-value and
    interval exactly. Three seeds: the pooled bootstrap counted each test sentence three times
    and narrowed the interval; resampling the seeds first widens it again."""
    from normzoo.inference.scoring import paired_bootstrap
    from normzoo.sweep.bootstrap import hierarchical_bootstrap
    from normzoo.sweep.compare import _references, read_hypotheses, run_recipe

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    refs = _references(run_recipe(CEILING / "seed-1_residual-pre"), "test2016", MULTI30K)
    pre, post = ([read_hypotheses(CEILING / f"seed-{s}_residual-{scheme}" / "hyps.test2016.txt")
                  for s in (1, 2, 3)] for scheme in ("pre", "post"))
    one = hierarchical_bootstrap(pre[:1], pre[1:2], refs, samples=200)
    plain = paired_bootstrap(pre[0], pre[1], refs, samples=200)
    assert (one.p_value, one.system_ci) == (plain.p_value, plain.system_ci)
    assert one.system_bleu == pytest.approx(plain.system_bleu, abs=1e-4)
    three = hierarchical_bootstrap(pre, post, refs, samples=200)
    pooled = paired_bootstrap([h for run in pre for h in run], [h for run in post for h in run],
                              refs * 3, samples=200)
    assert three.system_ci > 1.1 * pooled.system_ci
    assert hierarchical_bootstrap(pre, post, refs, samples=200) == three  # seeded


@needs_multi30k
def test_compare_names_its_tests_and_pairs_matching_seeds(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    pre = [CEILING / f"seed-{s}_residual-pre" for s in (1, 2, 3)]
    post = [CEILING / f"seed-{s}_residual-post" for s in (1, 2, 3)]
    runner = CliRunner()
    found = runner.invoke(app, ["compare", *_args("-b", pre), *_args("-s", post), "--json",
                                "--data-dir", str(MULTI30K), "--samples", "100"])
    report = json.loads(found.output)
    assert report["sentence_test"] == HIERARCHICAL and report["seed_test"] == PAIRED_T
    assert report["paired"] and report["verdict"] == "not shown"
    low, high = report["seed_interval"]  # what "not shown" leaves open, not "no difference"
    assert low < report["difference"] < high and low < 0 < high
    text = runner.invoke(app, ["compare", *_args("-b", pre), *_args("-s", post[:2]),
                               "--data-dir", str(MULTI30K), "--samples", "100"]).output
    assert f"sentences: {HIERARCHICAL} over 2 runs a side paired in order" in text
    assert "seeds: Welch's t-test on the runs' BLEU" in text


def test_a_margin_is_needed_to_call_two_settings_equal():
    """A *not shown* says which interval the seeds leave open, never "no difference"; with
    ``--margin`` the two one-sided tests say whether the two are equal within it."""
    cells = ROOT / "docs" / "study-llama" / "data" / "schemes-12"

    def seeds(scheme: str) -> list[str]:
        return _args("-b" if scheme == "pre" else "-s",
                     [cells / f"seed-{s}_residual-{scheme}" for s in (1, 2, 3)])

    runner = CliRunner()
    plain = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns")])
    assert plain.exit_code == 0, plain.output
    if "not shown:" in plain.output:
        assert "not shown is not \"no difference\"" in plain.output
    wide = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", "0.5",
                               "--json"])
    report = json.loads(wide.output)
    assert report["margin"] == 0.5 and report["equivalence_p"] < 0.05
    text = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", "0.5"])
    assert "equal within ± 0.5 nats/token: shown (two one-sided tests, paired t" in text.output
    narrow = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", "1e-6"])
    assert "equal within ± 1e-06 nats/token: not shown" in narrow.output
    for bad in ("0", "-1"):
        refused = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", bad])
        assert refused.exit_code == 2 and "--margin" in refused.output
