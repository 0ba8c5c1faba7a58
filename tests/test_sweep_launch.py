"""``normzoo sweep --jobs N`` and ``--launcher slurm``: cells as submitit jobs, N at a time on
this machine with the cores shared out, or as a SLURM job array (the submission it would make is
checked without a cluster)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny import tiny

from normzoo.diagnostics import launch


def test_two_jobs_run_both_cells_as_separate_processes(tmp_path: Path):
    recipe = tiny(trainer={"max_steps": 2, "val_every_steps": 2})
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    out = tmp_path / "sweep"
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "normzoo.cli", "sweep", str(path),
                           "--set", "seed=1,2", "--jobs", "2", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["seed"] for r in rows] == ["1", "2"]
    assert all(r["status"] == "ok" and r["steps"] == "2" for r in rows)
    # Each cell ran in a submitit job of its own (its own log folder), not in the sweep process.
    assert len(list((out / ".submitit").glob("*_0_log.out"))) == 2
    assert "2 cells, 0 diverged" in done.stdout


def test_the_cores_are_shared_among_the_jobs(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [launch.threads_per_job(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_a_failed_cell_is_reported_after_the_others_finish(tmp_path: Path):
    finished = []

    def work(cell):
        if cell["seed"] == "1":
            raise ValueError("cell 1 broke")
        return cell

    with pytest.raises(Exception, match="cell 1 broke"):
        launch.run_cells([{"seed": "1"}, {"seed": "2"}], work, tmp_path, jobs=2,
                         after_each=lambda: finished.append(1), poll_s=0.2)
    assert len(finished) == 2  # the second cell still ran to the end


def test_the_slurm_submission_is_one_array_of_single_node_jobs(tmp_path: Path, monkeypatch):
    import submitit

    # submitit's SLURM executor wants srun on the PATH; the script is only written, not run.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    slurm = launch.Slurm(partition="gpu", time_min=600, gpus=1, cpus=8)
    executor = submitit.SlurmExecutor(folder=tmp_path / ".submitit")
    executor.update_parameters(**slurm.parameters(parallel=3))
    script = executor._make_submission_file_text("python -m submitit.core._submit X", "UID")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=600", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --nodes=1",
                 "#SBATCH --ntasks-per-node=1", "#SBATCH --job-name=normzoo-sweep",
                 "#SBATCH --signal=USR2@120"):
        assert line in script, (line, script)
    assert slurm.parameters(parallel=3)["array_parallelism"] == 3


def test_paired_bootstrap_is_sacrebleus_and_tells_a_real_difference_from_none():
    import random

    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from normzoo.scoring import paired_bootstrap

    rng = random.Random(0)
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "in", "mat", "park", "big", "small",
             "red"]
    refs = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(200)]

    def noisy(keep: float) -> list[str]:
        return [" ".join(w if rng.random() < keep else rng.choice(words) for w in r.split())
                for r in refs]

    weak, strong, also_weak = noisy(0.5), noisy(0.8), noisy(0.5)
    result = paired_bootstrap(weak, strong, refs)
    assert result.system_bleu > result.baseline_bleu and result.p_value < 0.05
    assert paired_bootstrap(weak, also_weak, refs).p_value > 0.05
    # The very numbers sacreBLEU's own test gives (same seed, same resamples).
    _, direct = PairedTest([("b", weak), ("s", strong)], {"BLEU": BLEU()}, references=[refs],
                           test_type="bs", n_samples=1000)()
    assert result.p_value == direct["BLEU"][1].p_value
    assert "bs:1000" in result.signature
    with pytest.raises(ValueError, match="references"):
        paired_bootstrap(weak[:3], strong, refs)


def test_results_give_mean_and_sd_over_seeds_per_setting():
    from normzoo.diagnostics.seeds import over_seeds

    rows = [{"model.residual": "post", "seed": s, "status": "ok", "test_bleu": b,
             "metric_value": 3.0, "final_train_loss": 4.0, "steps": 1000}
            for s, b in (("1", 20.0), ("2", 22.0), ("3", 24.0))]
    rows.append({"model.residual": "pre", "seed": "1", "status": "ok", "test_bleu": 18.0,
                 "metric_value": 3.5, "final_train_loss": 4.5, "steps": 1000})
    rows.append({"model.residual": "pre", "seed": "2", "status": "diverged", "test_bleu": "",
                 "metric_value": "", "final_train_loss": None, "steps": 12})
    lines = over_seeds(rows, ["model.residual", "seed"])
    post = next(line for line in lines if line.startswith("| post |"))
    assert "| 1, 2, 3 | 0 | 22.00 ± 2.00 | 3.0000 ± 0.0000 |" in post
    pre = next(line for line in lines if line.startswith("| pre |"))
    assert "| 1, 2 | 1 | 18.00 | 3.5000 |" in pre  # one undiverged seed: no spread
    assert over_seeds(rows, ["model.residual"]) == []


def test_compare_runs_by_paired_bootstrap_at_the_command_line(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from normzoo import train
    from normzoo.cli import app
    from normzoo.recipe import from_dict

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    runs = []
    for seed in (1, 2):
        run_dir = tmp_path / f"run{seed}"
        train.run(from_dict(tiny(seed=seed, run={"dir": str(run_dir)},
                                 trainer={"max_steps": 3, "val_every_steps": 3})), "tiny.yaml")
        runs.append(run_dir)
    runner = CliRunner()
    result = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[1]), "--json"])
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    assert 0.0 <= report["p_value"] <= 1.0 and "bs:1000" in report["signature"]
    assert report["sentences"] == 4  # tiny's valid_limit: the test split it translated
    same = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[0])])
    assert same.exit_code == 0 and "identical translations: no difference" in same.output
    # Two seeds a side: translations and references concatenated, paired in order.
    pooled = runner.invoke(app, ["compare", "-b", str(runs[0]), "-b", str(runs[1]),
                                 "-s", str(runs[1]), "-s", str(runs[0]), "--json"])
    assert json.loads(pooled.output)["sentences"] == 8
    uneven = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[1]),
                                 "-s", str(runs[0])])
    assert uneven.exit_code == 2 and "as many of each" in uneven.output
    (runs[1] / "hyps.test.txt").unlink()
    missing = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[1])])
    assert missing.exit_code == 2 and "has no test translations" in missing.output
    assert "Traceback" not in missing.output
