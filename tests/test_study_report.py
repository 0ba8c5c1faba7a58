"""``benchmarks/study_depth.py``: the depth study's report is built from the sweeps' files alone,
renders while cells are missing, and decides each verdict by its stated rule."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import study_depth

PLACEMENT_AXES = ["model.residual", "model.encoder_layers,model.decoder_layers",
                  "optim.warmup_steps"]


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _cell(folder: Path, bleu: float, grad: tuple[float, float], stream: tuple[float, float],
          branch: tuple[float, float]) -> None:
    """A finished cell as the sweep leaves it: summary, metrics and diagnostics."""
    (folder / "logs" / "csv").mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "total_wall_s": 600.0, "validation": {"val/loss": 3.0},
        "test": {"bleu": bleu, "greedy_bleu": bleu - 1, "signature": "nrefs:1|test"}}))
    _write_csv(folder / "logs" / "csv" / "metrics.csv",
               [{"step": s, "train/loss": 9.0 - s / 100, "val/loss": ""} for s in (25, 50)])
    rows = []
    for when in ("init", "final"):
        for stack in ("encoder", "decoder"):
            for layer, (g, s, b) in enumerate(zip(grad, stream, branch, strict=True)):
                rows.append({"when": when, "stack": stack, "layer": layer, "grad_norm": g,
                             "stream_norm": s, "layer_cosine": 0.9, "ratio_self_attn": b,
                             "ratio_cross_attn": "", "ratio_ffn": b})
    _write_csv(folder / "diagnose.csv", rows)


def _sweeps(root: Path, bleus: dict[tuple[str, str, str], float]) -> Path:
    """Both studies' folders with the cells of ``bleus`` ((scheme, depth, warm-up) -> BLEU)."""
    studies: dict[str, list[dict]] = {"placement": [], "fixes": [], "seeds": []}
    for (scheme, depth, warmup, *seed), bleu in bleus.items():
        study = "seeds" if seed else "placement" if scheme in ("post", "pre") else "fixes"
        name = f"{scheme}-{depth}-{warmup}" + (f"-seed{seed[0]}" if seed else "")
        row = {"cell": name, "model.residual": scheme, "status": "ok",
               "diverged_at_step": "", "final_train_loss": 2.5}
        if study == "seeds":  # the recipe's depth and warm-up; seed is an axis
            row["seed"] = seed[0]
        else:
            row["model.encoder_layers,model.decoder_layers"] = depth
        if study == "placement":
            row["optim.warmup_steps"] = warmup
        studies[study].append(row)
        post = scheme == "post"
        _cell(root / study / name, bleu, grad=(1.0, 8.0) if post else (1.0, 1.5),
              stream=(10.0, 40.0), branch=(0.8, 0.1))
    for study, rows in studies.items():
        if rows:
            _write_csv(root / study / "results.csv", rows)
    return root


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(study_depth, "DATA", tmp_path / "docs" / "study-depth" / "data")
    monkeypatch.setattr(study_depth, "FIGURES", tmp_path / "docs" / "study-depth")
    monkeypatch.setattr(study_depth, "REPORT", tmp_path / "docs" / "study-depth.md")

    def build(bleus: dict, render_only: bool = False) -> str:
        sweeps = _sweeps(tmp_path / "runs", bleus)
        args = ["--render-only"] if render_only else [str(sweeps)]
        assert study_depth.main(args) == 0
        return study_depth.REPORT.read_text(encoding="utf-8")

    return build


FULL = {("post", "6", "0"): 15.0, ("post", "18", "0"): 0.4, ("pre", "18", "0"): 22.0,
        ("post", "6", "200"): 31.0, ("pre", "6", "200"): 30.0, ("post", "18", "200"): 1.0,
        ("pre", "18", "200"): 29.0, ("pre", "6", "0"): 24.0, ("deepnorm", "18", "200"): 28.0}


def test_every_claim_gets_its_verdict_from_the_numbers(report):
    text = report(FULL)
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **shown**" in text
    assert "last/first layer gradient norm 8.00 (Post-LN) vs 1.50 (Pre-LN)" in text
    assert "### 2. Post-LN without warm-up fails with depth while Pre-LN trains: **shown**" in text
    assert "Post-LN 6+6 15.00, Post-LN 18+18 0.40, Pre-LN 18+18 22.00" in text
    assert "### 3. Pre-LN's stream grows and its deep layers' branches shrink: **shown**" in text
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **shown**" in text
    assert "### 5. At shallow depth, with warm-up, Post-LN ends higher than Pre-LN: **shown**" \
        in text
    assert "| Post-LN | 18+18 | 0 | ok | 2.500 | 3.000 | 0.40 | -0.60 | 10.0 |" in text
    for plot in ("loss_curves", "bleu_by_depth", "grad_norm_by_layer", "stream_norm_by_layer",
                 "branch_ratio_by_layer"):
        assert f"](study-depth/{plot}.png)" in text
        assert (study_depth.FIGURES / f"{plot}.png").stat().st_size > 5000


def test_claims_that_do_not_hold_are_reported_as_such(report):
    text = report({**FULL, ("post", "18", "0"): 21.0, ("post", "6", "200"): 29.9,
                   ("post", "18", "200"): 27.0})
    assert "fails with depth while Pre-LN trains: **shown in part**" in text
    assert "Post-LN ends higher than Pre-LN: **not shown**" in text
    assert "plain Post-LN fails: **shown in part (Post-LN trains, DeepNorm trains better)**" in text


def test_the_report_renders_while_cells_are_missing_and_from_its_data_alone(report):
    partial = {key: bleu for key, bleu in FULL.items() if key[0] == "post"}
    text = report(partial)
    assert "Cells: 4 of 16" in text
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **not yet measured**" \
        in text
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **not yet" in text
    # The data copied into docs/ is enough to render it again.
    assert report({}, render_only=True) == text


def test_the_ceiling_claim_weighs_the_seeds(report):
    seeds = {("post", "6", "200", "2"): 29.0, ("post", "6", "200", "3"): 30.0,
             ("pre", "6", "200", "2"): 30.5, ("pre", "6", "200", "3"): 29.5}
    text = report({**FULL, **seeds})  # seed 1: Post-LN 31.0, Pre-LN 30.0
    assert ("at 6+6 Post-LN 30.00 ± 1.00 over 3 seeds vs Pre-LN 30.00 ± 0.50 over 3 seeds"
            in text)
    assert "Post-LN ends higher than Pre-LN: **not shown**" in text
    assert "three for Post-LN 6+6, warm-up 200 and Pre-LN 6+6, warm-up 200" in text
    assert "| Post-LN | 6+6 | 200 | 3 | ok |" in text


def test_a_killed_and_resumed_cell_counts_the_time_of_every_process(
        report, monkeypatch: pytest.MonkeyPatch):
    """summary.json times only the process that finished; the earlier one's training time
    (ThroughputMonitor's train/time, restarting at the resume) is added, and the table says the
    cell was resumed."""
    original = _cell

    def resumed_cell(folder: Path, *args, **kwargs) -> None:
        original(folder, *args, **kwargs)
        if folder.name == "post-18-0":  # killed after step 50 (at 240 s), resumed from step 50
            _write_csv(folder / "logs" / "csv" / "metrics.csv",
                       [{"step": s, "train/loss": 9.0 - s / 100, "train/time": t, "val/loss": ""}
                        for s, t in ((25, 120.0), (50, 240.0), (75, 130.0), (100, 250.0))])

    monkeypatch.setitem(globals(), "_cell", resumed_cell)
    text = report(FULL)
    # 600 s in the finishing process + 240 s before the kill = 14.0 min; others stay 10.0.
    assert "| Post-LN | 18+18 | 0 | ok (killed; resumed once) | 2.500 |" in text
    assert "| 0.40 | -0.60 | 14.0 |" in text
    assert "| Pre-LN | 18+18 | 0 | ok | 2.500 | 3.000 | 22.00 | 21.00 | 10.0 |" in text


def test_the_gradient_claim_reads_initialisation_from_either_warm_up(report):
    """At initialisation the warm-up has not acted yet: a Pre-LN 18+18 cell with warm-up is
    enough for claim 1 while the one without is still training."""
    text = report({k: v for k, v in FULL.items() if k != ("pre", "18", "0")})
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **shown**" in text
    assert "### 2. Post-LN without warm-up fails with depth while Pre-LN trains: **not yet" in text
