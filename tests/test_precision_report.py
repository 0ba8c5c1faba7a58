"""``benchmarks/study_precision.py``: the fp32/bf16 report is built from the sweeps' files alone,
renders while cells are missing, and says only what its seeds support: the seed-aware verdict at
6+6 (three seeds a precision; BLEU at most indicated without the paired bootstrap's
translations), and at 18+18 (one seed) that nothing is shown or ruled out, nor seen at all where
a scheme fails in both precisions."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import study_precision


def _cell(sweeps: Path, study: str, scheme: str, precision: str, seed: str, bleu: float,
          val: float) -> None:
    axes = ({"seed": seed} if study == "shallow" else
            {"model.encoder_layers,model.decoder_layers": "18"})
    name = "_".join(f"{k.split(',')[0].split('.')[-1]}-{v}" for k, v in
                    [*axes.items(), ("model.residual", scheme), ("trainer.precision", precision)])
    folder = sweeps / study / name
    (folder / "logs" / "csv").mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps({
        "cell": name, **axes, "model.residual": scheme, "trainer.precision": precision,
        "metric": "val/loss", "status": "ok", "steps": 1000, "metric_value": val + 0.5,
        "test_bleu": bleu, "final_train_loss": 4.0}))
    (folder / "summary.json").write_text(json.dumps({
        "train_wall_s": 600.0 if precision == "32-true" else 400.0, "total_wall_s": 660.0,
        "test": {"bleu": bleu, "greedy_bleu": bleu - 1, "signature": "nrefs:1|test"}}))
    with open(folder / "logs" / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "val/loss", "train/time"])
        writer.writeheader()
        minutes = 10.0 if precision == "32-true" else 6.0
        # Killed after step 249 and resumed: the second process's clock starts again at 0.
        writer.writerows([{"step": 24, "train/loss": 7.0, "val/loss": "", "train/time": 100},
                          {"step": 249, "train/loss": "", "val/loss": val + 1,
                           "train/time": 300},
                          {"step": 274, "train/loss": 6.0, "val/loss": "", "train/time": 20},
                          {"step": 999, "train/loss": "", "val/loss": val,
                           "train/time": minutes * 60 - 300}])


@pytest.fixture
def report_paths(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(study_precision, "DATA", tmp_path / "docs" / "precision" / "data")
    monkeypatch.setattr(study_precision, "FIGURES", tmp_path / "docs" / "precision")
    monkeypatch.setattr(study_precision, "REPORT", tmp_path / "docs" / "precision.md")
    return tmp_path


def _render(sweeps: Path) -> str:
    study_precision.collect(sweeps)
    return study_precision.render(study_precision.load_cells())


def test_pending_cells_leave_the_verdict_open(report_paths: Path):
    sweeps = report_paths / "runs"
    _cell(sweeps, "shallow", "post", "32-true", "1", 10.0, 4.0)
    text = _render(sweeps)
    assert "Cells: 1 of 16." in text
    assert "**Not decided yet**" in text
    assert "Pre-LN 6+6, test2016 BLEU (beam 5): pending." in text
    # The best validation loss is the lowest the run logged, not cell.json's last one.
    assert "| 6+6 | Post-LN | fp32 | 1 | ok | 1000 | 10.00 | 4.000 | 10.0 | 2 |" in text


@pytest.mark.parametrize(("bleu_shift", "val_shift", "bleu_label", "val_label", "conclusion"), [
    (0.1, 0.0, "not shown", "not shown", "no reading is shown to move with the precision"),
    # BLEU far apart over three seeds, but no translations for the bootstrap: indicated.
    (3.0, 0.0, "indicated", "not shown", "a precision effect is indicated on at least one"),
    (0.1, 0.3, "not shown", "**shown**", "a precision effect is shown on at least one"),
])
def test_the_6_6_verdict_is_seed_aware(report_paths: Path, bleu_shift, val_shift, bleu_label,
                                       val_label, conclusion):
    sweeps = report_paths / "runs"
    for scheme in ("post", "pre"):
        for seed, noise in (("1", -0.5), ("2", 0.0), ("3", 0.5)):  # a spread of 0.5
            _cell(sweeps, "shallow", scheme, "32-true", seed, 20.0 + noise, 3.5 + noise / 10)
            _cell(sweeps, "shallow", scheme, "bf16-mixed", seed, 20.0 + bleu_shift + noise,
                  3.5 + val_shift + noise / 10)
        for precision in ("32-true", "bf16-mixed"):
            _cell(sweeps, "deep", scheme, precision, "1", 12.0 if scheme == "pre" else 0.0,
                  4.0)
    text = _render(sweeps)
    assert "Cells: 16 of 16." in text
    line = next(line for line in text.splitlines()
                if line.startswith("- Pre-LN 6+6, test2016 BLEU (beam 5):"))
    assert line.startswith(f"- Pre-LN 6+6, test2016 BLEU (beam 5): bf16 minus fp32 "
                           f"{bleu_shift:+.2f} (fp32 20.00 ± 0.50, bf16-mixed ")
    assert f"): {bleu_label} (Welch p = " in line and "no paired bootstrap" in line
    line = next(line for line in text.splitlines()
                if line.startswith("- Pre-LN 6+6, best validation loss:"))
    assert f"): {val_label} (Welch p = " in line and "the seeds' test alone" in line
    assert f"**At 6+6, {conclusion}" in text
    if bleu_label == val_label == "not shown":
        assert "the depth study stays in float32" not in text
    else:
        assert "the depth study stays in float32" in text
    # 18+18: one seed a precision decides nothing, and Post-LN fails there in both.
    assert ("- Pre-LN 18+18, test2016 BLEU (beam 5): bf16 minus fp32 +0.00 (fp32 12.00, "
            "bf16-mixed 12.00): one seed a precision can neither show nor rule out a precision "
            "effect.") in text
    assert text.count("Post-LN fails to train in both precisions (BLEU under 1 in every "
                      "cell), so no precision effect could be seen here at all.") == 2
    assert ("Post-LN fails to train in both precisions (BLEU 0.00 and 0.00), so for it no "
            "precision effect could be seen at all") in text
    assert "the 6+6 verdict does not carry to 18+18" in text.lower()
    # Training time summed over the two processes: 10 against 6 minutes.
    assert "10.0 min of training per cell in fp32 and 6.0 min in bf16-mixed" in text
    assert "1.67x" in text
    assert (report_paths / "docs" / "precision" / "loss_curves.png").is_file()


def test_the_committed_report_claims_nothing_its_seeds_do_not_support(tmp_path: Path,
                                                                     monkeypatch):
    monkeypatch.setattr(study_precision, "FIGURES", tmp_path)  # the committed plot stays
    text = study_precision.render(study_precision.load_cells())
    verdict = text.split("## Verdict")[1].split("## Results")[0]
    assert "**shown**" not in verdict and "indicated (Welch" not in verdict
    assert "Post-LN fails to train in both precisions (BLEU 0.00 and 0.00)" in verdict
    assert "moves no" not in verdict and "may run in bf16-mixed" not in verdict
