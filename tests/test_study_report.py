"""``benchmarks/study_depth.py``: the depth study's report is built from the sweeps' files alone,
renders while cells are missing, and decides each verdict by its stated rule: a difference is
shown only where paired bootstrap on the test translations finds it significant and it exceeds
the seeds' spread."""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import study_depth

WORDS = ["ein", "mann", "fährt", "mit", "dem", "fahrrad", "durch", "die", "stadt", "am", "abend"]
REFERENCES = [" ".join(WORDS[i % 5:i % 5 + 6]) + f" {i}" for i in range(60)]
GOOD = REFERENCES  # a system that scores 100
BAD = [" ".join(reversed(r.split()[:4])) for r in REFERENCES]  # one that scores little
# Two systems as good as each other, each better on half the sentences.
EVEN = [good if i % 2 else bad for i, (good, bad) in enumerate(zip(GOOD, BAD, strict=True))]
ODD = [bad if i % 2 else good for i, (good, bad) in enumerate(zip(GOOD, BAD, strict=True))]


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _sweep_folder(tier: str, scheme: str) -> str:
    """The sweep that runs ``scheme`` in ``tier``, by its ``--set model.residual=...`` list."""
    for sweep_tier, folder, args in study_depth.SWEEPS:
        schemes = args.split("model.residual=")[1]
        if sweep_tier == tier and re.search(rf"(?<![\w]){scheme}(?![\w])", schemes):
            return folder
    raise AssertionError(f"no sweep runs {scheme} in {tier}")


def _cell(root: Path, tier: str, scheme: str, seed: str, bleu: float, hyps: list[str],
          times: tuple[float, ...] = (60.0, 120.0), stopped: str = "step cap") -> None:
    """A finished cell as the sweep leaves it."""
    residual = "{name: admin, init: profiled}" if scheme == "admin" else scheme
    name = f"seed-{seed}_residual-{scheme}" if tier == "ceiling" else f"residual-{scheme}"
    folder = root / _sweep_folder(tier, scheme) / name
    (folder / "logs" / "csv").mkdir(parents=True)
    record = {"cell": name, "model.residual": residual, "status": "ok", "diverged_at_step": "",
              "steps": 4500, "stopped": stopped, "test_bleu": bleu}
    if tier == "ceiling":
        record["seed"] = seed
    (folder / "cell.json").write_text(json.dumps(record))
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "steps": 4500, "stopped": stopped,
        "test": {"bleu": bleu, "greedy_bleu": bleu - 1, "signature": "nrefs:1|test",
                 "averaged": {"requested": 5, "bleu": bleu + 0.5}}}))
    (folder / "recipe.yaml").write_text("trainer:\n  precision: bf16-mixed\n")
    (folder / "hyps.test2016.txt").write_text("\n".join(hyps) + "\n")
    steps = [50 * (i + 1) for i in range(len(times))]
    _write_csv(folder / "logs" / "csv" / "metrics.csv",
               [{"step": s, "train/loss": 9.0 - s / 100, "val/loss": 5.0 - s / 1000,
                 "train/time": t} for s, t in zip(steps, times, strict=True)])
    post = scheme == "post"
    rows = []
    for when in ("init", "final"):
        for stack in ("encoder", "decoder"):
            for layer, (g, s, b) in enumerate(zip((1.0, 8.0) if post else (1.0, 1.5),
                                                  (10.0, 40.0), (0.8, 0.1), strict=True)):
                rows.append({"when": when, "stack": stack, "layer": layer, "grad_norm": g,
                             "stream_norm": s, "layer_cosine": 0.9, "ratio_self_attn": b,
                             "ratio_cross_attn": "", "ratio_ffn": b})
    _write_csv(folder / "diagnose.csv", rows)


def _sweeps(root: Path, cells: dict[tuple[str, str, str], tuple[float, list[str]]]) -> Path:
    for (tier, scheme, seed), (bleu, hyps) in cells.items():
        _cell(root, tier, scheme, seed, bleu, hyps)
    return root


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(study_depth, "DATA", tmp_path / "docs" / "study-depth" / "data")
    monkeypatch.setattr(study_depth, "FIGURES", tmp_path / "docs" / "study-depth")
    monkeypatch.setattr(study_depth, "REPORT", tmp_path / "docs" / "study-depth.md")
    references = tmp_path / "test2016.de"
    references.write_text("\n".join(REFERENCES) + "\n")

    def build(cells: dict, render_only: bool = False, refs: bool = True) -> str:
        sweeps = _sweeps(tmp_path / "runs", cells)
        args = ["--render-only"] if render_only else [str(sweeps)]
        args += ["--references", str(references if refs else tmp_path / "missing")]
        assert study_depth.main(args) == 0
        return study_depth.REPORT.read_text(encoding="utf-8")

    return build


# Post-LN ahead at 6+6 over three seeds; deep Post-LN failing; DeepNorm and Pre-LN training.
FULL = {
    **{("ceiling", "post", s): (31.0 + d, GOOD) for s, d in (("1", 0.2), ("2", -0.2), ("3", 0))},
    **{("ceiling", "pre", s): (28.0 + d, BAD) for s, d in (("1", 0.3), ("2", -0.3), ("3", 0))},
    ("stability", "post", "1"): (1.0, BAD), ("stability", "pre", "1"): (27.0, GOOD),
    ("stability", "deepnorm", "1"): (28.0, GOOD), ("stability", "admin", "1"): (28.5, GOOD),
    ("stability", "resi_dual", "1"): (27.5, GOOD), ("stability", "subln", "1"): (27.2, GOOD),
    ("nowarmup", "post", "1"): (0.5, BAD), ("nowarmup", "pre", "1"): (20.0, GOOD),
}


def test_every_claim_gets_its_verdict_from_the_numbers(report):
    text = report(FULL)
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **shown**" in text
    assert "last/first layer gradient norm 8.00 (Post-LN) vs 1.50 (Pre-LN)" in text
    assert "### 2. Without warm-up, deep Post-LN fails while Pre-LN trains: **shown**" in text
    assert "### 3. Pre-LN's stream grows and its deep layers' branches shrink: **shown**" in text
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **shown**" in text
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **shown**" in text
    # the comparison's numbers: means, seeds, difference, p-value, the spread it beat
    assert "Post-LN 31.00 vs Pre-LN 28.00 (3 seeds): +3.00 BLEU, p = 0.0" in text
    assert "seeds' spread 0.30 (these settings' seeds)" in text
    # a one-seed comparison is held to the 6+6 seeds' spread
    assert "DeepNorm 28.00 vs Post-LN 1.00 (one seed): +27.00 BLEU" in text
    assert "(the 6+6 seeds)" in text
    # every cell's row: precision, updates, why it stopped, both test scores
    assert ("| Post-LN | 2 | bf16-mixed, CPU | 4500 | step cap | 4.900 | 30.80 | 31.30 | 29.80 |"
            in text)
    assert "ceiling 6 of 6, stability 6 of 6, nowarmup 2 of 2" in text
    assert "| 18 layers | DeepNet (Wang et al. 2022) | diverged | – | – | 28.8 |" in text
    assert "| 6+6 | normzoo" in text and "31.00 ± 0.20 | 28.00 ± 0.30 |" in text
    for plot in ("loss_ceiling", "loss_stability", "loss_nowarmup", "grad_norm_by_layer",
                 "stream_norm_by_layer", "branch_ratio_by_layer"):
        assert f"](study-depth/{plot}.png)" in text
        assert (study_depth.FIGURES / f"{plot}.png").stat().st_size > 5000


def test_a_difference_inside_the_noise_is_not_shown(report):
    """Post-LN ahead in mean BLEU, but sentence by sentence no better than Pre-LN: p is large
    and nothing is shown. Post-LN training at depth makes claim 4 not hold even though
    DeepNorm's lead there is significant."""
    cells = {**FULL,
             **{("ceiling", "post", s): (29.0, EVEN) for s in ("1", "2", "3")},
             **{("ceiling", "pre", s): (28.0, ODD) for s in ("1", "2", "3")},
             ("stability", "post", "1"): (26.0, BAD)}
    text = report(cells)
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **not shown: no difference beyond " \
           "the noise**" in text
    assert "Post-LN 29.00 vs Pre-LN 28.00 (3 seeds): +1.00 BLEU, p = 0.4086" in text
    assert ("### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **not shown: Post-LN "
            "trains too (more than half of DeepNorm's BLEU), though significantly lower**"
            ) in text


def test_a_difference_within_the_seeds_spread_is_not_shown(report):
    """Significant on the pooled translations, but smaller than how far the seeds disagree."""
    cells = {**FULL,
             **{("ceiling", "post", s): (28.0 + d, GOOD) for s, d in (("1", 2), ("2", -2),
                                                                      ("3", 0.6))},
             **{("ceiling", "pre", s): (28.0, BAD) for s in ("1", "2", "3")}}
    text = report(cells)
    assert "Post-LN 28.20 vs Pre-LN 28.00 (3 seeds): +0.20 BLEU, p = 0.0010" in text
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **not shown" in text


def test_pre_ln_significantly_ahead_is_reported_as_the_opposite(report):
    cells = {**FULL, **{("ceiling", "post", s): (25.0, BAD) for s in ("1", "2", "3")},
             **{("ceiling", "pre", s): (28.0, GOOD) for s in ("1", "2", "3")}}
    text = report(cells)
    assert "Post-LN ends higher than Pre-LN: **the opposite is shown (Pre-LN ends higher)**" \
        in text


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
    assert "ceiling 2 of 6, stability 0 of 6, nowarmup 0 of 2" in text
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **not yet measured**" \
        in text
    assert report({}, render_only=True) == text


def test_a_killed_and_resumed_cell_counts_the_time_of_every_process(report, tmp_path: Path):
    """ThroughputMonitor's train/time restarts at a resume: the earlier process's time is
    added and the row says the cell was resumed."""
    _cell(tmp_path / "runs", "nowarmup", "post", "1", 0.5, BAD,
          times=(120.0, 240.0, 130.0, 250.0))
    text = report({key: value for key, value in FULL.items() if key != ("nowarmup", "post", "1")})
    # 240 s before the kill + 250 s after = 8.2 min
    assert "| Post-LN | 1 | bf16-mixed, CPU | 4500 | step cap (resumed 1x) |" in text
    assert "| 0.50 | 1.00 | -0.50 | 8.2 |" in text


def test_the_two_slots_run_every_sweep_once(capsys: pytest.CaptureFixture[str]) -> None:
    """study_depth.sh runs what ``--commands a`` and ``--commands b`` print: together, every
    sweep once, half in each slot, in the order of SWEEPS (the verdicts' cells first), and no
    two sweeps share an output folder (two processes would train the same cell)."""
    printed = []
    for slot in "ab":
        assert study_depth.main(["--commands", slot]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines == study_depth.COMMANDS["ab".index(slot)::2]
        assert len(lines) == len(study_depth.SWEEPS) // 2
        printed += lines
    assert sorted(printed) == sorted(study_depth.COMMANDS)
    folders = [folder for _, folder, _ in study_depth.SWEEPS]
    assert len(set(folders)) == len(folders)
    assert {tier for tier, _, _ in study_depth.SWEEPS} == set(study_depth.TIERS)
    assert all(line.startswith("OMP_NUM_THREADS=1 normzoo sweep ") for line in printed)


def test_the_gradients_at_initialisation_are_read_from_the_no_warm_up_pair_until_the_deep_pair_ran(
        report) -> None:
    """Verdict 1 is a measurement of the initialisation, the same for both 18+18 tiers."""
    text = report({("nowarmup", "post", "1"): (0.5, BAD), ("nowarmup", "pre", "1"): (20.0, GOOD)},
                  render_only=False)
    assert "### 1. Post-LN's gradients grow toward the output at initialisation: **shown**" in text
    assert "measured in the no-warm-up cells" in text
    assert "### 3. Pre-LN's stream grows and its deep layers' branches shrink: **not yet" in text


def test_the_gpu_script_runs_the_stability_tiers_cells_as_the_study_does():
    # benchmarks/study_depth_gpu.sh repeats the tier's arguments (it runs on a machine with
    # the study's wheel alone); a change to one must reach the other.
    script = (Path(study_depth.__file__).parent / "study_depth_gpu.sh").read_text()
    stable = re.search(r'^STABLE="([^"]+)"', script, re.MULTILINE)
    assert stable and stable.group(1) == study_depth._STABLE
    stability = [args for tier, _, args in study_depth.SWEEPS if tier == "stability"]
    assert stability and all(args.startswith(study_depth._STABLE) and "--diagnose" in args
                             for args in stability)
    assert "--diagnose" in script and "--jobs" not in script.split("set -u", 1)[1]


def _gpu_tarball(root: Path, scheme: str, steps: int, gpu: bool = True,
                 finished: bool = False) -> None:
    """What ``study_depth_gpu.sh`` returns for one cell, unpacked: the sweep's folder with the
    cell's recipe and metrics (no cell.json when the device's time ran out before the final
    test) and the sweep's log."""
    cell = root / f"gpu-{scheme}" / f"residual-{scheme}"
    (cell / "logs" / "csv").mkdir(parents=True)
    (cell / "recipe.yaml").write_text(f"model:\n  residual:\n    name: {scheme}\ntrainer:\n"
                                      "  precision: bf16-mixed\n  max_steps: 4500\n")
    _write_csv(cell / "logs" / "csv" / "metrics.csv",
               [{"step": s - 1, "train/loss": 9.0 - s / 1000, "val/loss": 6.0 - s / 1000,
                 "train/time": s / 10} for s in range(500, steps + 1, 500)])
    if finished:
        (cell / "cell.json").write_text(json.dumps({"cell": cell.name, "model.residual": scheme,
                                                    "status": "ok", "steps": steps}))
    (root / f"gpu-{scheme}.log").write_text(
        "GPU available: True (cuda), used: True\n" if gpu else "GPU available: False\n")


def test_cells_trained_on_a_lent_gpu_but_not_scored_are_reported_by_their_losses(
        report, tmp_path: Path) -> None:
    """A GPU cell cut off before its final test has its losses in the report, marked as run on
    the GPU and not scored; no verdict reads it, and the CPU's hours leave its time out."""
    tarballs = tmp_path / "gpu"
    _gpu_tarball(tarballs, "resi_dual", 4500)
    _gpu_tarball(tarballs, "subln", 4000, gpu=False)
    partial = {key: value for key, value in FULL.items()
               if key[0] != "stability" or key[1] in ("post", "pre", "deepnorm")}
    study_depth.main(["--gpu", str(tarballs), "--references", str(tmp_path / "missing"),
                      str(tmp_path / "empty")])
    text = report(partial)
    row = "| ResiDual | 1 | bf16-mixed, GPU | 4500 | step cap reached (trainer.max_steps=4500); " \
          "not scored"
    assert row in text
    # a log without Lightning's GPU line is not taken for a GPU run; 4,000 updates is no cap
    assert "| Sub-LN | 1 | bf16-mixed, CPU | 4000 | not scored" in text
    assert "| ResiDual | bf16-mixed, GPU | 1.500 | – | – | – |" in text  # fixes: val loss only
    assert "**Test BLEU of ResiDual and Sub-LN at 18+18.**" in text
    assert "1 cell on the GPU, 8 min of training" in text
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **shown**" in text
    # a later, scored run of the same cell is never overwritten by an unscored one
    scored = study_depth.DATA / "stability" / "residual-resi_dual"
    (scored / "cell.json").write_text(json.dumps({"model.residual": "resi_dual", "status": "ok",
                                                  "steps": 4500}))
    (scored / "loss.csv").write_text("kept")
    assert study_depth.collect_gpu(tarballs, study_depth.DATA / "stability") == 1
    assert (scored / "loss.csv").read_text() == "kept"
