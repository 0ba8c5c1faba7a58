"""``benchmarks/study_llama.py``: the schemes-in-a-Llama report is built from the sweeps' files
alone, renders while cells are missing, and calls a scheme better or worse than Pre-LN only
beyond twice the seeds' spread."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import study_llama


def _cell(root: Path, dataset: str, scheme: str, seed: str, loss: float) -> None:
    folder = root / dataset / f"seed-{seed}_residual-{scheme}"
    (folder / "logs" / "csv").mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps({
        "model.residual": scheme, "seed": seed, "status": "ok", "steps": 800,
        "stopped": "step cap: trainer.max_steps=800"}))
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


def test_verdicts_follow_the_spread_rule_and_missing_cells_are_pending(report):
    text = report({
        ("builtin", "pre", "1"): 3.00, ("builtin", "pre", "2"): 3.02,
        ("builtin", "peri", "1"): 2.80, ("builtin", "peri", "2"): 2.82,  # far beyond
        ("builtin", "mixln", "1"): 3.00, ("builtin", "mixln", "2"): 3.04,  # within
        ("builtin", "deepnorm", "1"): 3.03, ("builtin", "deepnorm", "2"): 3.03,  # 1.4 sd: within
    })
    assert _row(text, "builtin", "Peri-LN")[4:6] == ["-0.200", "better"]
    assert _row(text, "builtin", "Mix-LN")[5] == "within the seeds' spread"
    assert _row(text, "builtin", "DeepNorm")[5] == "within the seeds' spread"  # not 2 sd
    pre = _row(text, "builtin", "Pre-LN")
    assert pre[1] == "2" and pre[2] == "3.010 ± 0.014" and pre[7] == "3.00 ± 0.00"  # 3/1
    assert pre[8] == "4.00 ± 0.00" and pre[9] == "800, step cap" and pre[10] == "2.0 ± 0.0"
    assert pre[6] == "–"  # no train loss logged in these files
    assert _row(text, "multi30k-de", "Pre-LN")[2] == "pending"
    assert "Cells: 8 of 16" in text
    assert _row(text, "multi30k-de", "Mix-LN")[2] == "pending"
    assert (study_llama.FIGURES / "val_loss_builtin.png").stat().st_size > 5000


def test_the_report_renders_from_the_committed_files_alone(report):
    report({("builtin", "pre", "1"): 3.0, ("builtin", "deepnorm", "1"): 3.5})
    first = study_llama.REPORT.read_text(encoding="utf-8")
    assert study_llama.main(["--render-only"]) == 0
    assert study_llama.REPORT.read_text(encoding="utf-8") == first
    assert _row(first, "builtin", "DeepNorm")[5] == "worse"  # one seed each: no spread
