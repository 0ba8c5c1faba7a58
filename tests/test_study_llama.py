"""``benchmarks/study_llama.py``: the schemes-in-a-Llama report is built from the sweeps' files
alone, renders while cells are missing, keeps the cells already collected when a later sweep
adds seeds, and judges each scheme against Pre-LN by the seed-aware verdict: shown only with
three seeds a side and Welch's t-test below 0.05, at most indicated with two."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import study_llama


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
        # Clearly lower over three seeds: shown.
        **{("builtin", "peri", seed): loss for seed, loss in (("1", 2.80), ("2", 2.82),
                                                               ("3", 2.81))},
        # Overlapping Pre-LN's seeds: not shown.
        **{("builtin", "mixln", seed): loss for seed, loss in (("1", 2.99), ("2", 3.03),
                                                                ("3", 3.02))},
        # Clearly higher, but over two seeds: indicated, not shown.
        ("builtin", "deepnorm", "1"): 3.50, ("builtin", "deepnorm", "2"): 3.52,
    })
    peri = _row(text, "builtin", "Peri-LN")
    assert peri[4] == "-0.200" and peri[5].startswith("lower test loss: **shown** (Welch p = ")
    assert float(peri[5].split("p = ")[1].rstrip(")")) < 0.05
    assert _row(text, "builtin", "Mix-LN")[5].startswith("higher test loss: not shown")
    deepnorm = _row(text, "builtin", "DeepNorm")
    assert deepnorm[1] == "2" and deepnorm[5].startswith("higher test loss: indicated")
    assert "the seeds' test decides alone" in text
    shows = text.split("## What the verdicts show\n")[1].split("\n## ")[0]
    assert "lower test loss than Pre-LN shown: Peri-LN (-0.200 nats, Welch p = " in shows
    assert "higher test loss than Pre-LN indicated: DeepNorm (+0.500 nats" in shows
    assert "higher test loss than Pre-LN not shown: Mix-LN (+0.003 nats" in shows
    assert "Holm's correction for making them together keeps 1 of the 1 shown: Peri-LN on " \
           "builtin." in shows
    for word in ("better", "worse", "spread rule"):
        assert word not in text.split("## builtin")[1]
    pre = _row(text, "builtin", "Pre-LN")
    assert pre[1] == "3" and pre[2] == "3.010 ± 0.010" and pre[7] == "3.00 ± 0.00"  # 3/1
    assert pre[8] == "4.00 ± 0.00" and pre[9] == "–"  # no layer cosine in these files
    assert pre[10] == "800, step cap" and pre[11] == "2.0 ± 0.0"
    assert pre[5] == "–" and pre[6] == "–"  # no verdict on itself; no train loss logged here
    assert _row(text, "multi30k-de", "Pre-LN")[2] == "pending"
    assert "Cells: 11 of 24" in text
    assert _row(text, "multi30k-de", "Mix-LN")[2] == "pending"
    assert (study_llama.FIGURES / "val_loss_builtin.png").stat().st_size > 5000


def test_two_seeds_a_side_are_at_most_indicated():
    assert study_llama.verdict([3.00, 3.01], [2.50, 2.51])[:2] == ("lower test loss",
                                                                   "indicated")
    assert study_llama.verdict([3.00, 3.01, 3.02], [2.50, 2.51, 2.52])[:2] == (
        "lower test loss", "shown")
    assert study_llama.verdict([3.00, 3.10, 3.05], [3.02, 3.08, 3.04])[:2] == (
        "lower test loss", "not shown")
    assert study_llama.verdict([3.00, 3.10, 3.05], [3.50, 3.60, 3.55])[:2] == (
        "higher test loss", "shown")


def test_holm_keeps_what_survives_testing_together():
    # Thresholds 0.05/4, 0.05/3, 0.05/2, 0.05: the third smallest (0.03) fails 0.025 and stops.
    assert study_llama.holm([0.03, 0.001, 0.04, 0.012]) == [False, True, False, True]
    assert study_llama.holm([0.2, 0.01]) == [False, True]
    assert study_llama.holm([]) == []


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
    # One seed a side: Welch's test has no spread to test against, so nothing is shown.
    assert _row(first, "builtin", "DeepNorm")[5] == "higher test loss: not shown (Welch p = –)"


def test_the_second_part_groups_its_sweeps_by_depth_and_tells_qk_norm_and_options_apart(
        report, tmp_path: Path):
    """Pre-LN with and without QK-norm are two schemes; HC's cell records its residual as a
    mapping; the 6-layer group gathers the cells of its three sweeps."""
    runs = tmp_path / "runs"
    for seed, loss in (("1", 3.00), ("2", 3.02), ("3", 3.01)):
        _cell(runs, "schemes-6-a", "pre", seed, loss)
        _cell(runs, "schemes-6-qk", "pre", seed, loss - 0.3, qk_norm="rmsnorm")
        _cell(runs, "schemes-6-hc", "{name: hyper, streams: 4}", seed, loss + 0.001)
    text = report({})
    assert _row(text, "6 layers", "Pre-LN")[1:3] == ["3", "3.010 ± 0.010"]
    qk = _row(text, "6 layers", "Pre-LN + QK-norm")
    assert qk[1:5] == ["3", "2.710 ± 0.010", "15.03 ± 0.15", "-0.300"]
    assert qk[5].startswith("lower test loss: **shown**")
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
