"""``studies/llama/report.py``: the schemes-in-a-Llama report is built from the sweeps' files
alone, renders while cells are missing, keeps the cells already collected when a later sweep
adds seeds, and judges each scheme against Pre-LN by the seed-aware verdict: the paired t-test
where both sides ran the same seeds (Welch's otherwise), shown only with three seeds a side and
that test below 0.05, at most indicated with two; every verdict carries the 95% interval of the
difference, equality comes only from the equivalence test against the page's margin, and a
column says whether Holm's correction over the part's comparisons keeps each shown verdict."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: studies/
from normzoo.sweep.significance import holm
from studies.llama import report as study_llama
from studies.llama.text import MARGIN, holm_cell, summary_lines, verdict_cell


def _cell(root: Path, dataset: str, scheme: str, seed: str, loss: float,
          qk_norm: str | None = None) -> None:
    name = scheme.strip("{}").replace(": ", "-").replace(", ", "-")
    folder = root / dataset / f"seed-{seed}_{'qk_norm-rmsnorm_' if qk_norm else ''}residual-{name}"
    (folder / "logs" / "csv").mkdir(parents=True)
    record = {"model.residual": scheme, "seed": seed, "status": "ok", "steps": 800,
              "stopped": "step cap: trainer.max_steps=800"}
    (folder / "cell.json").write_text(json.dumps(
        {**record, **({"model.qk_norm": qk_norm} if qk_norm else {})}))
    (folder / "summary.json").write_text(json.dumps({
        "steps": 800, "test": {"loss": loss, "ppl": 2.718281828 ** loss}}))
    with open(folder / "logs" / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "val/loss", "train/time"])
        writer.writeheader()
        writer.writerows([{"step": 199, "val/loss": loss + 1, "train/time": 30.0},
                          {"step": 799, "val/loss": loss, "train/time": 120.0}])
    with open(folder / "diagnose.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["when", "stack", "layer", "grad_norm",
                                               "stream_norm"])
        writer.writeheader()
        for when in ("init", "final"):
            for layer, (g, s) in enumerate(((1.0, 2.0), (3.0, 8.0))):
                writer.writerow({"when": when, "stack": "decoder", "layer": layer,
                                 "grad_norm": g, "stream_norm": s})


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(study_llama, "DATA", tmp_path / "docs" / "study-llama" / "data")
    monkeypatch.setattr(study_llama, "FIGURES", tmp_path / "docs" / "study-llama")
    monkeypatch.setattr(study_llama, "REPORT", tmp_path / "docs" / "study-llama.md")

    def build(cells: dict[tuple[str, str, str], float]) -> str:
        for (dataset, scheme, seed), loss in cells.items():
            _cell(tmp_path / "runs", dataset, scheme, seed, loss)
        assert study_llama.main([str(tmp_path / "runs")]) == 0
        return study_llama.REPORT.read_text(encoding="utf-8")

    return build


def _row(text: str, section: str, label: str) -> list[str]:
    part = text.split(f"## {section}\n")[1].split("\n## ")[0]
    line = next(line for line in part.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_verdicts_are_seed_aware_and_missing_cells_are_pending(report):
    text = report({
        **{("builtin", "pre", seed): loss for seed, loss in (("1", 3.00), ("2", 3.02),
                                                              ("3", 3.01))},
        # Clearly lower over the same three seeds: shown, by the paired t-test.
        **{("builtin", "peri", seed): loss for seed, loss in (("1", 2.80), ("2", 2.83),
                                                               ("3", 2.81))},
        # Overlapping Pre-LN's seeds: not shown, with the interval it leaves open.
        **{("builtin", "mixln", seed): loss for seed, loss in (("1", 2.99), ("2", 3.03),
                                                                ("3", 3.02))},
        # Clearly higher, but over two seeds (not Pre-LN's three): Welch's, indicated.
        ("builtin", "deepnorm", "1"): 3.50, ("builtin", "deepnorm", "2"): 3.52,
    })
    peri = _row(text, "builtin", "Peri-LN")
    assert peri[4] == "-0.197" and peri[5].startswith("lower test loss: **shown** (paired t p = ")
    assert float(peri[5].split("p = ")[1].split(";")[0]) < 0.05
    assert "95% interval -0.211 to -0.182" in peri[5] and peri[6] == "kept"
    mixln = _row(text, "builtin", "Mix-LN")
    assert mixln[5] == ("higher test loss: not shown (paired t p = 0.6667; 95% interval -0.025 "
                        "to +0.032)")
    assert mixln[6] == "–" and mixln[7] == "not shown (p = 0.0648)"
    deepnorm = _row(text, "builtin", "DeepNorm")
    assert deepnorm[1] == "2" and deepnorm[5].startswith("higher test loss: indicated (Welch p")
    assert "the seeds' test decides alone" in text and "paired t-test" in text
    shows = text.split("## What the verdicts show\n")[1].split("\n## ")[0]
    assert "- **Peri-LN** against Pre-LN: builtin: lower test loss **shown**, kept by Holm " \
           "(-0.197 nats, 95% interval -0.211 to -0.182, paired t p = " in shows
    assert "builtin: higher test loss indicated (+0.500 nats" in shows
    assert "builtin: higher test loss not shown (+0.003 nats, 95% interval -0.025 to +0.032, " \
           "paired t p = 0.6667; equal within ± 0.02 nats: not shown, TOST p = 0.0648)" in shows
    assert "Holm's correction for making them together keeps 1 of the 1 shown." in shows
    assert "Equal to Pre-LN within ± 0.02 nats/token (TOST): none." in shows
    for word in ("better", "worse", "spread rule", "does not differ", "Welch's t-test below"):
        assert word not in text.split("## builtin")[1]
    pre = _row(text, "builtin", "Pre-LN")
    assert pre[1] == "3" and pre[2] == "3.010 ± 0.010" and pre[9] == "3.00 ± 0.00"  # 3/1
    assert pre[10] == "4.00 ± 0.00" and pre[11] == "–"  # no layer cosine in these files
    assert pre[12] == "800, step cap" and pre[13] == "2.0 ± 0.0"
    assert pre[5:9] == ["–"] * 4  # no verdict on itself; no train loss logged here
    assert _row(text, "multi30k-de", "Pre-LN")[2] == "pending"
    assert len(_row(text, "multi30k-de", "Pre-LN")) == 14
    assert "Cells: 11 of 24" in text
    assert _row(text, "multi30k-de", "Mix-LN")[2] == "pending"
    assert (study_llama.FIGURES / "val_loss_builtin.png").stat().st_size > 5000


def test_two_seeds_a_side_are_at_most_indicated():
    def said(pre, losses, paired=False):
        found = study_llama.verdict(pre, losses, paired)
        return found.direction, found.label

    assert said([3.00, 3.01], [2.50, 2.51]) == ("lower test loss", "indicated")
    assert said([3.00, 3.01, 3.02], [2.50, 2.51, 2.52]) == ("lower test loss", "shown")
    assert said([3.00, 3.10, 3.05], [3.02, 3.08, 3.04]) == ("lower test loss", "not shown")
    assert said([3.00, 3.10, 3.05], [3.50, 3.60, 3.55]) == ("higher test loss", "shown")


def _cells(*pairs):
    from types import SimpleNamespace

    return [SimpleNamespace(seed=seed, test_loss=loss, precision="bf16-mixed", device=device)
            for seed, loss, device in pairs]


def test_the_same_seeds_are_paired_seed_with_seed_and_others_are_welchs():
    """A seed's own effect (3.00, 3.10, 3.20 under either scheme) cancels in the paired
    differences, so +0.020 on every seed is shown, in whatever order the cells come; Welch's
    test, which cannot pair them, sees only the seeds' spread."""
    pre = _cells(("1", 3.00, "cpu"), ("2", 3.10, "cpu"), ("3", 3.20, "cpu"))
    same = _cells(("3", 3.219, "cpu"), ("1", 3.020, "cpu"), ("2", 3.121, "cpu"))
    paired = study_llama.compare("g", "s", pre, same)
    assert paired.paired and paired.label == "shown" and paired.p < 0.001
    assert paired.interval[0] > 0.017 and paired.interval[1] < 0.023
    assert "paired t p = 8.3e-04; 95% interval +0.018 to +0.022" in verdict_cell(paired)
    others = _cells(("4", 3.219, "cpu"), ("5", 3.020, "cpu"), ("6", 3.121, "cpu"))
    welch = study_llama.compare("g", "s", pre, others)
    assert not welch.paired and welch.label == "not shown" and welch.p > 0.5
    assert verdict_cell(welch).startswith("higher test loss: not shown (Welch p = 0.8181; 95% "
                                          "interval -0.206 to +0.246)")


def test_a_side_mixing_device_kinds_is_at_most_indicated():
    pre = _cells(("1", 3.00, "cpu"), ("2", 3.10, "cuda"), ("3", 3.20, "cpu"))
    mine = _cells(("1", 3.020, "cpu"), ("2", 3.121, "cpu"), ("3", 3.219, "cpu"))
    assert study_llama.compare("g", "s", pre, mine).label == "indicated"


def test_equal_is_said_only_by_the_equivalence_test_against_the_margin():
    assert MARGIN == 0.02
    close = study_llama.verdict([3.00, 3.10, 3.20], [3.001, 3.101, 3.199], paired=True,
                                group="g", name="S")
    assert close.label == "not shown" and close.equal == "shown" and close.equal_p < 0.001
    apart = study_llama.verdict([3.00, 3.10, 3.20], [3.001, 3.101, 3.199], paired=False)
    assert apart.label == "not shown" and apart.equal == "not shown"  # the seeds' spread
    summary = summary_lines([close], [("S", "s", False)], {"g": "6 layers"})
    assert "equal within ± 0.02 nats: shown, TOST p = 5.7e-04" in summary[0]
    assert "Equal to Pre-LN within ± 0.02 nats/token (TOST): S on 6 layers." in summary[-1]


def test_holm_keeps_what_survives_testing_together():
    # Thresholds 0.05/4, 0.05/3, 0.05/2, 0.05: the third smallest (0.03) fails 0.025 and stops.
    assert holm([0.03, 0.001, 0.04, 0.012]) == [False, True, False, True]
    assert holm([0.2, 0.01]) == [False, True]
    assert holm([]) == []


def test_a_shown_verdict_holm_drops_is_not_bold_and_says_so_in_its_row():
    found = study_llama.verdict([3.00, 3.10, 3.20], [3.020, 3.121, 3.219], paired=True)
    assert holm_cell(found) == "not kept" and "**" not in verdict_cell(found)
    found.holm = True
    assert holm_cell(found) == "kept" and "**shown**" in verdict_cell(found)
    not_shown = study_llama.verdict([3.00, 3.10, 3.05], [3.02, 3.08, 3.04], paired=True)
    assert holm_cell(not_shown) == "–"


def test_the_report_prints_each_sweep_that_ran():
    text = study_llama.render([])
    for dataset in study_llama.DATASETS:
        assert f"--set seed=1,2 --set model.residual=pre,peri,mixln,deepnorm --diagnose " \
               f"--out runs/study-llama/{dataset}" in text
        assert f"--set seed=3 --set model.residual=pre,peri,mixln,deepnorm --diagnose " \
               f"--out runs/study-llama/{dataset}" in text
    assert "seed 3, added on 2026-11-26 from a fresh clone at the same commit" in text
    assert "{seeds}" not in text


def test_a_later_seed_is_collected_beside_the_cells_already_there(report, tmp_path: Path):
    report({("builtin", "pre", "1"): 3.0, ("builtin", "pre", "2"): 3.1})
    later = tmp_path / "later"
    _cell(later, "builtin", "pre", "3", 3.2)
    assert study_llama.main([str(later)]) == 0
    text = study_llama.REPORT.read_text(encoding="utf-8")
    assert _row(text, "builtin", "Pre-LN")[1:3] == ["3", "3.100 ± 0.100"]


def test_the_report_renders_from_the_committed_files_alone(report):
    report({("builtin", "pre", "1"): 3.0, ("builtin", "deepnorm", "1"): 3.5})
    first = study_llama.REPORT.read_text(encoding="utf-8")
    assert study_llama.main(["--render-only"]) == 0
    assert study_llama.REPORT.read_text(encoding="utf-8") == first
    # One seed a side: the seeds' test has no spread to test against, so nothing is shown.
    assert _row(first, "builtin", "DeepNorm")[5] == (
        "higher test loss: not shown (Welch p = –; no interval (fewer than two seeds a side, "
        "or no spread))")


def test_the_second_part_groups_its_sweeps_by_depth_and_tells_qk_norm_and_options_apart(
        report, tmp_path: Path):
    """Pre-LN with and without QK-norm are two schemes; HC's cell records its residual as a
    mapping; the 6-layer group gathers the cells of its three sweeps."""
    runs = tmp_path / "runs"
    for seed, loss, qk, hc in (("1", 3.00, 2.70, 3.001), ("2", 3.02, 2.71, 3.018),
                               ("3", 3.01, 2.72, 3.013)):
        _cell(runs, "schemes-6-a", "pre", seed, loss)
        _cell(runs, "schemes-6-qk", "pre", seed, qk, qk_norm="rmsnorm")
        _cell(runs, "schemes-6-hc", "{name: hyper, streams: 4}", seed, hc)
    text = report({})
    assert _row(text, "6 layers", "Pre-LN")[1:3] == ["3", "3.010 ± 0.010"]
    qk = _row(text, "6 layers", "Pre-LN + QK-norm")
    assert qk[1:5] == ["3", "2.710 ± 0.010", "15.03 ± 0.15", "-0.300"]
    assert qk[5].startswith("lower test loss: **shown** (paired t p = ") and qk[6] == "kept"
    assert "Holm over the part's 2 comparisons" in text.split("## 6 layers")[1]
    assert _row(text, "6 layers", "HC (n = 4)")[5].startswith("higher test loss: not shown")
    assert _row(text, "12 layers", "nGPT")[2] == "pending"
    assert "Cells: 9 of 42" in text
    assert "model.decoder_layers=12 --set seed=1,2,3 --set model.residual=pre,lns,peri,ngpt" \
        in text
    cost = text.split("## What each scheme costs per step\n")[1].split("\n## ")[0]
    assert "| Pre-LN |" in cost and "| nGPT |" in cost and "| 1.00 |" in cost


def test_a_residual_recorded_as_a_mapping_is_read_by_its_name():
    assert study_llama.residual_name("{name: mhc, streams: 4}") == "mhc"
    assert study_llama.residual_name("ngpt") == "ngpt"
    assert study_llama.residual_name("") == ""


def test_the_committed_cells_are_judged_paired_with_intervals_and_holm(tmp_path: Path,
                                                                        monkeypatch):
    """The page as the committed cells give it under the rule of issue 51: every scheme ran
    Pre-LN's seeds 1-3, so each verdict is the paired t-test's; on the built-in corpus Peri-LN
    and Mix-LN are no longer shown; a shown verdict Holm's correction drops is not in bold and
    says so in its row; every not shown carries its interval; the page is this render."""
    monkeypatch.setattr(study_llama, "FIGURES", tmp_path)
    text = study_llama.render(study_llama.load_cells())
    assert text == study_llama.REPORT.read_text(encoding="utf-8")
    assert _row(text, "builtin", "Peri-LN")[5:7] == [
        "higher test loss: not shown (paired t p = 0.1589; 95% interval -0.015 to +0.047)", "–"]
    assert _row(text, "builtin", "Mix-LN")[5] == (
        "higher test loss: not shown (paired t p = 0.0538; 95% interval -0.001 to +0.037)")
    assert _row(text, "multi30k-de", "DeepNorm")[5:7] == [
        "lower test loss: shown (paired t p = 0.0296; 95% interval -0.109 to -0.015)",
        "not kept"]
    for depth, p in (("6", "0.0383"), ("12", "0.0339")):
        qk = _row(text, f"{depth} layers", "Pre-LN + QK-norm")
        assert qk[5].startswith(f"higher test loss: shown (paired t p = {p}; ")
        assert qk[6] == "not kept"
    assert _row(text, "12 layers", "mHC (n = 4)")[5:7] == [
        "higher test loss: shown (paired t p = 0.0125; 95% interval +0.031 to +0.090)",
        "not kept"]
    rows = [line for line in text.splitlines() if line.startswith("| ") and "test loss:" in line]
    assert len(rows) == 18 and all("paired t p = " in row for row in rows)
    assert all("95% interval" in row for row in rows if "not shown (paired" in row)
    assert all(row.split(" | ")[6] == "kept" for row in rows if "**shown**" in row)
    assert "LNS** against Pre-LN: 6 layers: lower test loss not shown (-0.019 nats, 95% " \
           "interval -0.043 to +0.005, paired t p = 0.0772; equal within ± 0.02 nats: not " \
           "shown, TOST p = 0.4270)" in text
    assert "Welch p" not in text and "does not differ" not in text
