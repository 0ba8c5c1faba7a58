"""Verdicts no copy can fool (issues 51, 58): ``normzoo compare`` refuses relabelled copies of one
run, holds a side mixing device kinds to *indicated*, resamples seeds before sentences, and pairs
the seeds' test where both sides ran the same seeds, for every task. On the committed study
cells where it can."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.verdicts.runs import compare_runs, format_comparison
from normzoo.verdicts.significance import PAIRED_T, WELCH

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


@pytest.mark.parametrize("cells", [pytest.param(CEILING, marks=needs_multi30k), LLAMA])
def test_relabelled_copies_of_one_run_are_refused(tmp_path: Path, cells: Path):
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
    assert "agree on 100.0%" in found.output and str(base[0]) in found.output
    assert "shown" not in found.output


def test_language_models_pair_the_same_seeds_and_welch_the_rest():
    def seeds(scheme: str, which: tuple[int, ...] = (1, 2, 3)) -> list[Path]:
        return [LLAMA / f"seed-{s}_residual-{scheme}" for s in which]

    paired = compare_runs(seeds("pre"), seeds("peri")[::-1])  # paired by seed, any order
    assert paired["paired"] and paired["seed_test"] == PAIRED_T
    assert paired["system"]["scores"] == compare_runs(seeds("pre"), seeds("peri"))["system"][
        "scores"]
    assert paired["score"] == "test loss" and paired["better"] == "min"
    assert "seeds: paired t-test (the same seeds on both sides)" in format_comparison(paired)
    for unpaired in (compare_runs(seeds("pre"), seeds("peri", (1, 2))),
                     compare_runs(seeds("pre", (1, 2)), seeds("peri", (2, 3)))):
        assert not unpaired["paired"] and unpaired["seed_test"] == WELCH


def test_a_language_model_side_mixing_device_kinds_is_at_most_indicated(tmp_path: Path):
    pre = [_relabelled(LLAMA / f"seed-{s}_residual-pre", tmp_path, s, "cuda") for s in (1, 2, 3)]
    peri = [_relabelled(LLAMA / f"seed-{s}_residual-peri", tmp_path, s, device)
            for s, device in ((1, "cuda"), (2, "cpu"), (3, "cpu"))]
    assert compare_runs(pre, peri[:1] + [
        _relabelled(LLAMA / f"seed-{s}_residual-peri", tmp_path / "gpu", s, "cuda")
        for s in (2, 3)])["verdict"] == "shown"
    # Given in any order, the runs are reported seed by seed (the seeds match: paired).
    result = CliRunner().invoke(app, ["compare", *_args("-b", pre), *_args("-s", peri[::-1]),
                                      "--json"])
    report = json.loads(result.output)
    assert report["verdict"] == "indicated" and report["system"]["devices"] == [
        "cuda", "cpu", "cpu"]
    assert report["system"]["runs"] == [str(run) for run in peri]
    assert "more than one device (cpu, cuda)" in report["reason"]
    text = CliRunner().invoke(app, ["compare", *_args("-b", pre), *_args("-s", peri)]).output
    assert "indicated: the runs trained on more than one device" in text
    assert "bf16-mixed on cpu, cuda" in text


@needs_multi30k
def test_compare_names_its_tests_and_pairs_matching_seeds(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    pre = [CEILING / f"seed-{s}_residual-pre" for s in (1, 2, 3)]
    post = [CEILING / f"seed-{s}_residual-post" for s in (1, 2, 3)]
    runner = CliRunner()
    found = runner.invoke(app, ["compare", *_args("-b", pre), *_args("-s", post), "--json",
                                "--data-dir", str(MULTI30K), "--samples", "200"])
    report = json.loads(found.output)
    assert report["example_test"] and report["seed_test"] == PAIRED_T
    assert report["paired"] and report["score"] == "test bleu" and report["unit"] == "BLEU"
    low, high = report["seed_interval"]  # what "not shown" leaves open, not "no difference"
    assert low < report["difference"] < high and low < 0 < high
    assert report["verdict"] in ("not shown", "indicated")  # no device record: at most that
    text = runner.invoke(app, ["compare", *_args("-b", pre), *_args("-s", post[:2]),
                               "--data-dir", str(MULTI30K), "--samples", "200"]).output
    assert "seeds: Welch's t-test, p = " in text and "examples: " in text


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
    assert "not shown is not \"no difference\"" in plain.output
    wide = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", "0.5",
                               "--json"])
    report = json.loads(wide.output)
    assert report["margin"] == 0.5 and report["equivalence_p"] < 0.05
    assert report["verdict"] == "equal"
    narrow = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", "1e-6"])
    assert "equal within ± 1e-06 nats/token: not shown" in narrow.output
    for bad in ("0", "-1"):
        refused = runner.invoke(app, ["compare", *seeds("pre"), *seeds("lns"), "--margin", bad])
        assert refused.exit_code == 2 and "--margin" in refused.output
