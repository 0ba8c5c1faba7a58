"""``studies/depth/report.py``: the depth study's report is built from the sweeps' files alone,
renders while cells are missing, and decides each verdict by its stated rule: a difference is
shown only with three seeds a side, the seeds' t-test (paired: the schemes ran the same seeds)
and the hierarchical bootstrap of the translations (seeds, then sentences) both below 0.05, one
precision and one device kind; with fewer seeds at most indicated."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: studies/
from studies.depth import cells as study_depth_cells
from studies.depth import plan
from studies.depth import report as study_depth

WORDS = ["ein", "mann", "fährt", "mit", "dem", "fahrrad", "durch", "die", "stadt", "am", "abend"]
REFERENCES = [" ".join(WORDS[i % 5:i % 5 + 6]) + f" {i}" for i in range(60)]
GOOD = REFERENCES  # a system that scores 100
BAD = [" ".join(reversed(r.split()[:4])) for r in REFERENCES]  # one that scores little
# Two systems as good as each other, each better on half the sentences.
EVEN = [good if i % 2 else bad for i, (good, bad) in enumerate(zip(GOOD, BAD, strict=True))]
ODD = [bad if i % 2 else good for i, (good, bad) in enumerate(zip(GOOD, BAD, strict=True))]
SPREAD = (("1", 0.2), ("2", -0.2), ("3", 0.0))  # three seeds, a small spread
# The same spread in another order for each scheme: the cells of two schemes run the same
# seeds, so the seeds' test is the paired one, which needs the seed-by-seed differences to
# spread too.
ORDER = {"post": (0, 1, 2), "pre": (1, 2, 0), "deepnorm": (2, 0, 1), "admin": (0, 2, 1)}


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _folder(tier: str, scheme: str) -> str:
    """The sweep folder under a clone's runs/ that holds ``scheme`` in ``tier``."""
    if tier in ("ceiling", "nowarmup"):
        return f"study-papers/{tier}-{scheme}"
    for sweep_tier, folder, _, residual, *_ in plan.SEED_SWEEPS:
        if sweep_tier == tier and scheme in residual:
            return f"study-seeds/{folder}"
    return f"study-seeds/{tier}-{scheme}"  # ResiDual and Sub-LN: not in the seed sweeps


def _cell(root: Path, tier: str, scheme: str, seed: str, bleu: float, hyps: list[str],
          times: tuple[float, ...] = (60.0, 120.0), stopped: str = "step cap",
          precision: str = "bf16-mixed", averaged: dict | None = None) -> Path:
    """A finished cell as the sweep leaves it."""
    residual = "{name: admin, init: profiled}" if scheme == "admin" else scheme
    name = f"seed-{seed}_residual-{'admin-init-profiled' if scheme == 'admin' else scheme}"
    folder = root / _folder(tier, scheme) / name
    (folder / "logs" / "csv").mkdir(parents=True)
    record = {"cell": name, "seed": seed, "model.residual": residual, "status": "ok",
              "diverged_at_step": "", "steps": 4500, "stopped": stopped, "test_bleu": bleu}
    (folder / "cell.json").write_text(json.dumps(record))
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "steps": 4500, "stopped": stopped,
        "best_checkpoint": "checkpoints/best-4500.ckpt",
        "machine": {"cpu": "AMD EPYC (family 25, model 17)", "device": "cpu"},
        "test": {"bleu": bleu, "greedy_bleu": bleu - 1, "signature": "nrefs:1|test",
                 "averaged": averaged or {"requested": 5, "rule": "from the best on",
                                          "skipped": "still improving at its end"}}}))
    (folder / "recipe.yaml").write_text(f"seed: {seed}\ntrainer:\n  precision: {precision}\n")
    (folder / "hyps.test2016.txt").write_text("\n".join(hyps) + "\n")
    steps = [50 * (i + 1) for i in range(len(times))]
    _write_csv(folder / "logs" / "csv" / "metrics.csv",
               [{"step": s, "train/loss": 9.0 - s / 100, "val/loss": 5.0 - s / 1000,
                 "train/time": t} for s, t in zip(steps, times, strict=True)])
    post = scheme == "post"
    rows = []
    for when in ("init", "final"):
        for stack in ("encoder", "decoder"):
            grads = (1.0, 3.0, 8.0) if post else (1.0, 1.2, 1.5)
            for layer, (g, s, r) in enumerate(zip(grads, (10.0, 20.0, 40.0), (0.8, 0.2, 0.1),
                                                  strict=True)):
                rows.append({"when": when, "stack": stack, "layer": layer, "grad_norm": g,
                             "stream_norm": s, "layer_cosine": 0.9, "ratio_self_attn": r,
                             "ratio_cross_attn": "", "ratio_ffn": r})
    _write_csv(folder / "diagnose.csv", rows)
    return folder


def _sweeps(root: Path, cells: dict) -> Path:
    for (tier, scheme, seed), value in cells.items():
        bleu, hyps, *precision = value
        _cell(root, tier, scheme, seed, bleu, hyps, precision=(precision or ["bf16-mixed"])[0])
    return root


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(study_depth, "DATA", tmp_path / "docs" / "study-depth" / "data")
    monkeypatch.setattr(study_depth, "FIGURES", tmp_path / "docs" / "study-depth")
    monkeypatch.setattr(study_depth, "REPORT", tmp_path / "docs" / "study-depth.md")
    references = tmp_path / "test2016.de"
    references.write_text("\n".join(REFERENCES) + "\n")

    def build(cells: dict, render_only: bool = False, refs: bool = True) -> str:
        runs = _sweeps(tmp_path / "runs", cells)
        args = ["--render-only"] if render_only else [str(runs)]
        args += ["--references", str(references if refs else tmp_path / "missing")]
        assert study_depth.main(args) == 0
        return study_depth.REPORT.read_text(encoding="utf-8")

    return build


def _three(tier: str, scheme: str, bleu: float, hyps: list[str], precision: str = "bf16-mixed"):
    order = ORDER.get(scheme, (0, 1, 2))
    return {(tier, scheme, seed): (bleu + SPREAD[i][1], hyps, precision)
            for (seed, _), i in zip(SPREAD, order, strict=True)}


# Post-LN ahead at 6+6; deep Post-LN failing; the fixes training; the no-warm-up controls.
FULL = {
    **_three("ceiling", "post", 31.0, GOOD), **_three("ceiling", "pre", 28.0, BAD),
    **_three("stability", "post", 1.0, BAD), **_three("stability", "pre", 27.0, GOOD),
    **_three("stability", "deepnorm", 28.0, GOOD), **_three("stability", "admin", 28.5, GOOD),
    **_three("nowarmup6", "post", 0.5, BAD), **_three("nowarmup6", "pre", 20.0, GOOD),
    ("nowarmup", "post", "1"): (0.5, BAD, "32-true"),
    ("nowarmup", "pre", "1"): (20.0, GOOD, "32-true"),
}


def test_every_claim_gets_its_verdict_from_the_numbers(report):
    text = report(FULL)
    for claim in ("1. Post-LN's gradients grow toward the output at initialisation",
                  "4. DeepNorm trains deep Post-LN where plain Post-LN fails",
                  "5. At 6+6, Post-LN ends higher than Pre-LN"):
        assert f"### {claim}: **shown**" in text
    # the warm-up claim says its budgets are unmatched; verdict 3 is judged branch by branch
    assert ("### 2. Without warm-up, Post-LN fails at a depth where it trains with warm-up, "
            "while Pre-LN trains: **shown at a 1,500-update cap; the budgets are unmatched "
            "(7,000 with warm-up)**") in text
    assert ("### 3. Pre-LN's stream grows with depth; its branches do not keep up: "
            "**self-attention shown;") in text
    assert "Post-LN 8.00, 8.00, 8.00 vs Pre-LN 1.50, 1.50, 1.50" in text
    # the comparison's numbers: means ± sd over seeds, difference, both tests
    assert "Post-LN 31.00 ± 0.20 (3 seeds) vs Pre-LN 28.00 ± 0.20 (3 seeds): +3.00 BLEU, " \
           "95% interval of the difference [+2.14, +3.86], **shown** (both tests below 0.05" \
           in text
    assert "seeds: paired t p = " in text
    assert "sentences: hierarchical bootstrap p = 0.0010" in text
    # verdict 3 from the branch's own norm (0.1 x 20 over 0.2 x 10: flat) beside the stream (4x)
    assert "stream norm last/first layer 4.00, 4.00, 4.00; self-attention branch norm " \
           "last/second layer 1.00, 1.00, 1.00" in text
    assert "with the 4,000-update warm-up Post-LN 6+6 scores 31.00 ± 0.20 (3 seeds)" in text
    # the 18+18 no-warm-up pair: one seed, 32-true: indicated at most
    assert "At 18+18 (32-true;" in text
    assert "+19.50 BLEU, no 95% interval (fewer than two seeds a side, or no spread), " \
           "**indicated** (one seed a side" in text
    assert ("| Post-LN | 2 | bf16-mixed, CPU (AMD EPYC (family 25, model 17)) | 4500 | step cap "
            "| 4.900 | 30.80 | – (still improving at its end: nothing to average) | 29.80 |"
            in text)
    assert "| 18 layers | DeepNet (Wang et al. 2022) | diverged | – | – | 28.8 |" in text
    assert "| 31.00 ± 0.20 (3) | 28.00 ± 0.20 (3) |" in text
    assert "| DeepNorm | 1: 28.00 (CPU), 2: 28.20 (CPU), 3: 27.80 (CPU) | 28.00 ± 0.20 (3) |" \
           in text
    # each difference in the fixes table with its interval and the seeds' paired test; the same
    # translations on both sides leave the bootstrap nothing to test: indicated at most
    assert "| DeepNorm − Pre-LN | +1.00 | [+0.14, +1.86] | paired t 0.0377 | – |" in text
    assert "| DeepNorm − Post-LN | +27.00 | [+26.14, +27.86] | paired t 5.5e-05 | 0.0010 |" in text
    for plot in ("loss_ceiling", "loss_stability", "loss_nowarmup", "loss_nowarmup6",
                 "grad_norm_by_layer", "stream_norm_by_layer", "branch_ratio_by_layer",
                 "stream_and_branch_norms"):
        assert f"](study-depth/{plot}.png)" in text
        assert (study_depth.FIGURES / f"{plot}.png").stat().st_size > 5000


def test_one_seed_a_side_is_at_most_indicated(report):
    one = {k: v for k, v in FULL.items() if k[0] != "stability" or k[2] == "1"}
    text = report(one)
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **indicated**" in text
    assert "DeepNorm 28.00 (one seed) vs Post-LN 1.20 (one seed): +26.80 BLEU, no 95% " \
           "interval (fewer than two seeds a side, or no spread), **indicated** (one seed a " \
           "side" in text
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **indicated**" \
        in text


def test_a_difference_inside_the_noise_is_not_shown(report):
    """Post-LN ahead in mean BLEU, but sentence by sentence no better than Pre-LN: the
    bootstrap's p is large and nothing is shown, though the seeds alone differ."""
    cells = {**FULL, **_three("ceiling", "post", 29.0, EVEN),
             **_three("ceiling", "pre", 28.0, ODD)}
    text = report(cells)
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **not shown: a difference of " \
           "+1.00 is indicated only**" in text
    assert "the seeds differ, but not beyond the test set's noise" in text


def test_a_difference_within_the_seeds_spread_is_not_shown(report):
    """Significant on the pooled translations, but the seeds disagree more than the settings."""
    cells = {**FULL,
             **{("ceiling", "post", s): (28.0 + d, GOOD) for s, d in (("1", 2), ("2", -2),
                                                                      ("3", 0.6))},
             **_three("ceiling", "pre", 28.0, BAD)}
    text = report(cells)
    line = next(line for line in text.splitlines()
                if "Post-LN 28.20 ± 2.03 (3 seeds) vs Pre-LN 28.00 ± 0.20 (3 seeds): +0.20 BLEU, "
                in line)
    assert "**indicated** (significant over these sentences, but the seeds' spread could " \
           "give it" in line
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **not shown" in text


def test_pre_ln_significantly_ahead_is_reported_as_the_opposite(report):
    cells = {**FULL, **_three("ceiling", "post", 25.0, BAD),
             **_three("ceiling", "pre", 28.0, GOOD)}
    text = report(cells)
    assert "Post-LN ends higher than Pre-LN: **the opposite is shown (Pre-LN ends higher)**" \
        in text


def test_cells_of_another_precision_are_reported_but_not_compared(report):
    cells = {**FULL, **_three("stability", "deepnorm", 28.0, GOOD, precision="32-true")}
    text = report(cells)
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **not yet measured**" \
        in text
    assert "| DeepNorm | 1 | 32-true, CPU (AMD EPYC (family 25, model 17)) | 4500 | step cap; " \
           "not compared: another precision than the tier's |" in text


def test_without_references_nothing_is_shown(report):
    text = report(FULL, refs=False)
    assert "no p-value computed, so no difference can be shown" in text
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **not shown" in text
    # a measurement of the initialisation needs no test set
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **shown**" in text


def test_the_report_renders_while_cells_are_missing_and_from_its_data_alone(report):
    partial = {key: value for key, value in FULL.items() if key[0] == "ceiling"
               and key[2] == "1"}
    text = report(partial)
    assert "Cells so far: ceiling 2, stability 0, nowarmup 0, nowarmup6 0" in text
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **not yet measured**" \
        in text
    assert "6+6 without warm-up: cells still to run" in text
    assert report({}, render_only=True) == text


def test_a_killed_and_resumed_cell_counts_the_time_of_every_process(report, tmp_path: Path):
    """ThroughputMonitor's train/time restarts at a resume: the earlier process's time is
    added and the row says the cell was resumed."""
    _cell(tmp_path / "runs", "nowarmup", "post", "1", 0.5, BAD,
          times=(120.0, 240.0, 130.0, 250.0), precision="32-true")
    text = report({key: value for key, value in FULL.items() if key != ("nowarmup", "post", "1")})
    # 240 s before the kill + 250 s after = 8.2 min
    assert "| Post-LN | 1 | 32-true, CPU (AMD EPYC (family 25, model 17)) | 4500 | step cap " \
           "(resumed 1x) |" in text
    assert "| -0.50 | 8.2 |" in text


def test_a_cell_with_two_threads_is_named_with_what_its_record_says(report, tmp_path: Path):
    """summary.json records the last process's torch threads, nothing about what else ran:
    the report names the cell and its threads and claims no more."""
    cell = _cell(tmp_path / "runs", "nowarmup", "post", "1", 0.5, BAD, precision="32-true")
    summary = json.loads((cell / "summary.json").read_text())
    summary["machine"]["torch_threads"] = 2
    (cell / "summary.json").write_text(json.dumps(summary))
    text = report({key: value for key, value in FULL.items() if key != ("nowarmup", "post", "1")})
    assert "(nowarmup Post-LN, seed 1: the last stretch with two torch threads, as " \
           "its summary.json records)" in text
    assert "alone on the cores" not in text


def test_the_averaged_checkpoint_is_reported_only_where_it_averages_the_converged_stretch():
    average = study_depth_cells._averaged
    converged = {"rule": "...", "bleu": 30.5, "checkpoints": ["step-3000.ckpt"]}
    assert average(converged, "best-2500.ckpt") == (30.5, "")
    assert average({"rule": "...", "skipped": "still improving"}, None)[0] is None
    # Before the papers' averaging: the newest five, whatever the best. An early-stopped run's
    # five start at its best (the converged stretch); a capped run's precede its best.
    old = {"requested": 5, "bleu": 0.0, "checkpoints": [f"step-{s}.ckpt" for s in
                                                         (1500, 2000, 2500, 3000, 3500)]}
    assert average(old, "/x/best-1500.ckpt") == (0.0, "")
    bleu, note = average(old, "/x/best-3500.ckpt")
    assert bleu is None and "mid-schedule" in note


def test_the_slots_run_every_pending_cell_once(report, capsys: pytest.CaptureFixture[str]):
    """study_depth.sh runs what ``--commands a`` and ``--commands b`` print: every seed sweep's
    cells not yet collected, once, each slot's in order; a collected cell drops out."""
    cells = [(folder, seed) for _, folder, _, _, seeds, _, _ in plan.SEED_SWEEPS
             for seed in seeds]
    assert len(set(cells)) == len(cells)  # no cell in two sweeps: two processes would train it
    assert {tier for tier, *_ in plan.SEED_SWEEPS} == {"stability", "nowarmup6"}
    for slot in "ab":
        assert study_depth.main(["--commands", slot]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines and all(line.startswith("OMP_NUM_THREADS=1 normzoo sweep ") for line in lines)
    report({("stability", "pre", "2"): (27.0, GOOD)})
    assert study_depth.main(["--commands", "a"]) == 0
    pre = [line for line in capsys.readouterr().out.splitlines() if "residual=pre " in line
           and "stability-pre" in line]
    assert pre and all("--set seed=3 " in line for line in pre)
    assert study_depth.main(["--gpu-lanes"]) == 0
    lanes = capsys.readouterr().out.splitlines()
    assert "stability-pre-2|" not in "\n".join(lanes) and any(
        lane.startswith("stability-pre-3|" + plan.STABLE_ARGS) for lane in lanes)


def _gpu_lane(root: Path, lane: str, scheme: str, seed: str, finished: bool, gpu: bool = True):
    """What ``study_depth_gpu.sh`` returns for one lane, unpacked: the sweep's folder with the
    cell (its cell.json only where it finished its final test) and the lane's log."""
    (root / lane).mkdir(parents=True)
    cell = _cell(root / "made", "stability", scheme, seed, 27.0, GOOD).rename(
        root / lane / f"seed-{seed}_residual-{scheme}")
    shutil.rmtree(root / "made")
    summary = json.loads((cell / "summary.json").read_text())
    summary["machine"] = {"device": "cuda", "gpu": "NVIDIA H200"} if gpu else {"device": "cpu"}
    (cell / "summary.json").write_text(json.dumps(summary))
    if not finished:
        (cell / "cell.json").unlink()
    (root / f"{lane}.log").write_text("GPU 0: NVIDIA H200\nGPU available: True (cuda), used: "
                                      "True\n" if gpu else "GPU available: False\n")


def test_cells_trained_on_a_lent_gpu_are_collected_with_their_device(report, tmp_path: Path):
    gpu = tmp_path / "gpu"
    _gpu_lane(gpu, "stability-pre-1", "pre", "1", finished=True)
    _gpu_lane(gpu, "stability-pre-2", "pre", "2", finished=False)  # cut off: not collected
    study_depth.DATA.mkdir(parents=True)
    assert study_depth.collect_gpu(gpu, study_depth.DATA / "stability") == 1
    kept = study_depth.DATA / "stability" / "seed-1_residual-pre"
    assert "NVIDIA H200" in (kept / "sweep.log").read_text()
    text = report({k: v for k, v in FULL.items() if k[:2] != ("stability", "pre")})
    assert "| Pre-LN | 1 | bf16-mixed, GPU (NVIDIA H200) | 4500 |" in text
    assert "| Pre-LN (baseline) | 1: 27.00 (GPU) | 27.00 (1) |" in text
    assert "1 cells on the GPU" in text
