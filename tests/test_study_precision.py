"""``studies/precision/report.py`` under the verdict rule of issue 51: the same seeds in both
precisions are a paired design, so the paired t-test decides and is named; every *not shown*
carries the 95% interval of the difference; "equal" comes only from the equivalence test (TOST)
against the stated margins; a column says whether Holm's correction over the table keeps each
verdict; and the page says these are the short protocol's runs, with one seed a precision at
18+18 allowing at most *indicated*."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: studies/
from normzoo.sweep.significance import holm, paired_t_p, welch_p
from studies.precision import report as study_precision
from studies.precision import verdicts


def _fake(study: str, scheme: str, precision: str, seed: str, bleu: float, val: float,
          device: str = "") -> SimpleNamespace:
    return SimpleNamespace(study=study, scheme=scheme, precision=precision, seed=seed,
                           bleu=bleu, best_val=val, device=device)


JITTER = {"1": -0.01, "2": 0.02, "3": -0.01}  # bf16 minus fp32 differs a little seed by seed


def _study(bleu_shift: float = 0.0, val_shift: float = 0.0, bf16_seeds=("1", "2", "3"),
           devices=("", "")) -> list[SimpleNamespace]:
    """Both schemes at 6+6 (three seeds, a spread of 0.5 BLEU and 0.05 nats between them) and
    18+18 (one seed; Post-LN failing); bf16 = fp32 + shift, give or take JITTER."""
    cells = []
    for scheme in ("post", "pre"):
        for seed, noise in (("1", -0.5), ("2", 0.0), ("3", 0.5)):
            cells.append(_fake("shallow", scheme, "32-true", seed, 20 + noise, 3.5 + noise / 10,
                               devices[0]))
        for seed, noise in zip(bf16_seeds, (-0.5, 0.0, 0.5), strict=True):
            j = JITTER.get(seed, 0.0)
            cells.append(_fake("shallow", scheme, "bf16-mixed", seed, 20 + noise + bleu_shift + j,
                               3.5 + noise / 10 + val_shift + j / 10, devices[1]))
        for precision in ("32-true", "bf16-mixed"):
            cells.append(_fake("deep", scheme, precision, "1", 12.0 if scheme == "pre" else 0.0,
                               4.0))
    return cells


def _row(rows, study, scheme, attribute):
    what = dict((a, w) for a, w, *_ in verdicts.READINGS)[attribute]
    return next(r for r in rows if (r["study"], r["scheme"], r["what"]) == (study, scheme, what))


def test_the_same_seeds_are_paired_and_the_paired_test_sees_a_shift_welch_misses():
    rows = verdicts.comparisons(_study(bleu_shift=0.3, val_shift=0.03))
    loss = _row(rows, "shallow", "pre", "best_val")
    base, system = loss["values"]["32-true"], loss["values"]["bf16-mixed"]
    assert loss["paired"] and loss["seed_p"] == pytest.approx(paired_t_p(base, system))
    assert loss["seed_p"] < 0.05 < welch_p(base, system)  # the seeds' spread hides it from Welch
    assert loss["verdict"].label == "shown" and "paired t p = " in loss["verdict"].reason
    bleu = _row(rows, "shallow", "pre", "bleu")  # no translations: no bootstrap, at most indicated
    assert bleu["seed_p"] < 0.05 and bleu["verdict"].label == "indicated"
    assert "hierarchical bootstrap p = –" in bleu["verdict"].reason
    table = "\n".join(verdicts.table_lines(rows))
    assert "| seeds' test |" in table and "Welch" not in table
    assert "| paired t p = " in table


def test_other_seeds_on_one_side_fall_back_to_welch():
    rows = verdicts.comparisons(_study(val_shift=0.03, bf16_seeds=("4", "5", "6")))
    loss = _row(rows, "shallow", "pre", "best_val")
    assert not loss["paired"]
    assert loss["seed_p"] == pytest.approx(welch_p(loss["values"]["32-true"],
                                                   loss["values"]["bf16-mixed"]))
    assert "| Welch p = " in "\n".join(verdicts.table_lines(rows))


def test_two_device_kinds_are_at_most_indicated():
    rows = verdicts.comparisons(_study(val_shift=0.03, devices=("cpu", "cuda")))
    assert _row(rows, "shallow", "pre", "best_val")["verdict"].label == "indicated"


def test_not_shown_carries_its_interval_and_equal_comes_from_the_equivalence_test():
    rows = verdicts.comparisons(_study())
    for r in rows:
        if r["study"] == "shallow":
            low, high = r["interval"]
            assert r["verdict"].label == "not shown" and low < r["diff"] < high
            assert r["equal"] == "shown" and r["equivalence_p"] < 0.05
        else:  # one seed a precision: no interval, nothing to test for equality
            assert r["interval"] is None and r["equivalence_p"] is None
    table = verdicts.table_lines(rows)
    assert "± 1.0 BLEU: shown (p = " in table[2] and "± 0.02 nats: shown (p = " in table[3]
    assert all("no interval: one seed a precision" in line for line in table[6:])
    _, text, summary = verdicts.findings(rows, "1,000 updates")
    assert "So bf16-mixed moves no 6+6 reading by more than the margins." in text
    assert summary.startswith("Summary: the short protocol's runs (1,000 updates)")
    assert verdicts.BLEU_MARGIN == 1.0 and verdicts.LOSS_MARGIN == 0.02


def test_holm_column_keeps_only_what_survives_the_table():
    # Both losses shown on their own: Pre-LN's at p = 0.0011 (kept: under 0.05 / 4), Post-LN's
    # at p = 0.029 (not kept: over 0.05 / 3).
    cells = _study(val_shift=0.03)
    for c in cells:
        if (c.study, c.scheme, c.precision) == ("shallow", "post", "bf16-mixed"):
            c.best_val += -0.01 + {"1": 0.0, "2": 0.004, "3": 0.016}[c.seed]
    rows = verdicts.comparisons(cells)
    assert [r["holm_diff"] for r in rows] == holm([r["seed_p"] for r in rows])
    post, pre = (_row(rows, "shallow", s, "best_val") for s in ("post", "pre"))
    assert pre["seed_p"] == pytest.approx(0.0011, abs=1e-4) and pre["holm_diff"]
    assert post["seed_p"] == pytest.approx(0.0289, abs=1e-4) and not post["holm_diff"]
    assert pre["verdict"].label == post["verdict"].label == "shown"
    table = verdicts.table_lines(rows)
    assert "Holm's correction over the table (4 difference, 4 equivalence tests)" in table[0]
    line = {r.split(" | ")[0]: r for r in table}
    assert "| difference: kept" in line["| Pre-LN 6+6, best validation loss"]
    assert "| difference: not kept (shown → not shown)" in line[
        "| Post-LN 6+6, best validation loss"]
    assert line["| Post-LN 18+18, best validation loss"].endswith("| nothing to test |")
    _, text, summary = verdicts.findings(rows, "1,000 updates")
    assert "which Holm's correction over the table's 4 tests does not keep" in text
    assert "not kept by Holm's correction" in summary


def test_the_committed_report(tmp_path: Path, monkeypatch):
    """The committed cells: Pre-LN 6+6's validation loss is shown by the paired t-test (p about
    0.0375) but not kept by Holm; the other 6+6 readings are not shown, each with its interval;
    Post-LN 6+6's loss is neither shown to move nor equal, so "moves no reading" is not said."""
    monkeypatch.setattr(study_precision, "FIGURES", tmp_path)  # the committed plot stays
    cells = study_precision.load_cells()
    rows = verdicts.comparisons(cells)
    pre = _row(rows, "shallow", "pre", "best_val")
    assert pre["paired"] and pre["seed_p"] == pytest.approx(0.0375, abs=5e-4)
    assert pre["verdict"].label == "shown" and not pre["holm_diff"]
    assert pre["equal"] == "shown" and pre["holm_equal"]
    post = _row(rows, "shallow", "post", "best_val")
    assert post["verdict"].label == "not shown" and post["equal"] == "not shown"
    assert post["interval"] == pytest.approx((-0.0495, 0.0079), abs=1e-4)
    for attribute, p in (("bleu", 0.1365), ("best_val", 0.0375)):
        assert _row(rows, "shallow", "pre", attribute)["seed_p"] == pytest.approx(p, abs=1e-4)
    assert _row(rows, "shallow", "post", "bleu")["seed_p"] == pytest.approx(0.3644, abs=1e-4)
    text = study_precision.render(cells)
    verdict = text.split("## Verdict")[1].split("## Results")[0]
    assert "**paired t-test**" in verdict and "Welch" not in verdict
    assert ("| Pre-LN 6+6, best validation loss | 3.539 ± 0.020 | 3.540 ± 0.020 | +0.001 | "
            "+0.0001 to +0.0015 | paired t p = 0.0375 | **shown** | ± 0.02 nats: shown (p = "
            "3.5e-05) | difference: not kept (shown → not shown); equal: kept |") in verdict
    assert ("| Post-LN 6+6, best validation loss | 4.855 ± 0.548 | 4.835 ± 0.544 | -0.021 | "
            "-0.0495 to +0.0079 | paired t p = 0.0890 | not shown | ± 0.02 nats: not shown") \
        in verdict
    assert verdict.count("no interval: one seed a precision") == 4
    assert "So bf16-mixed moves no" not in text and "moves no reading" not in text.replace(
        "does not say that bf16-mixed moves no reading", "")
    summary = text.split("## How it was run")[0]
    assert "Summary: the short protocol's runs (1,000 updates)" in summary
    assert "18+18 has one seed a precision, which allows at most indicated" in summary
    assert "short protocol's runs (1,000 updates; three seeds a precision)" in verdict
    assert ("Post-LN fails to train in both precisions (BLEU 0.00 and 0.00), so for it no "
            "precision effect could be seen at all") in verdict


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
        "total_wall_s": 660.0, "machine": {"device": "cpu"},
        "test": {"bleu": bleu, "greedy_bleu": bleu - 1, "signature": "nrefs:1|test"}}))
    with open(folder / "logs" / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "train/loss", "val/loss", "train/time"])
        writer.writeheader()
        minutes = 10.0 if precision == "32-true" else 6.0
        writer.writerows([{"step": 24, "train/loss": 7.0, "val/loss": "", "train/time": 100},
                          {"step": 249, "train/loss": "", "val/loss": val + 1,
                           "train/time": 300},
                          {"step": 274, "train/loss": 6.0, "val/loss": "", "train/time": 20},
                          {"step": 999, "train/loss": "", "val/loss": val,
                           "train/time": minutes * 60 - 300}])


def test_collected_cells_render_pending_and_complete(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(study_precision, "DATA", tmp_path / "docs" / "precision" / "data")
    monkeypatch.setattr(study_precision, "FIGURES", tmp_path / "docs" / "precision")
    sweeps = tmp_path / "runs"
    _cell(sweeps, "shallow", "post", "32-true", "1", 10.0, 4.0)
    study_precision.collect(sweeps)
    text = study_precision.render(study_precision.load_cells())
    assert "Cells: 1 of 16." in text and "**Not decided yet**" in text
    assert "| Pre-LN 6+6, test2016 BLEU (beam 5) | pending |" in text
    assert "| 6+6 | Post-LN | fp32 | 1 | ok | 1000 | 10.00 | 4.000 | 10.0 | 2 |" in text
    for scheme in ("post", "pre"):
        for seed, noise in (("1", -0.5), ("2", 0.0), ("3", 0.5)):
            for precision, shift in (("32-true", 0.0), ("bf16-mixed", JITTER[seed])):
                if (scheme, seed, precision) != ("post", "1", "32-true"):
                    _cell(sweeps, "shallow", scheme, precision, seed, 10.0 + noise + shift,
                          4.0 + noise / 10 + shift / 10)
        for precision in ("32-true", "bf16-mixed"):
            _cell(sweeps, "deep", scheme, precision, "1", 12.0 if scheme == "pre" else 0.0, 4.0)
    study_precision.collect(sweeps)
    cells = study_precision.load_cells()
    assert {c.device for c in cells} == {"cpu"}
    text = study_precision.render(cells)
    assert "Cells: 16 of 16." in text and "paired t p = " in text
    assert "10.0 min of training per cell in fp32 and 6.0 min in bf16-mixed" in text
    assert (tmp_path / "docs" / "precision" / "loss_curves.png").is_file()
