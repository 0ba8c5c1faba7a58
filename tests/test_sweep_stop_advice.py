"""A sweep stopped by a signal says to run the sweep again, and that advice works (issue 52,
item 3). With ``--jobs 1`` the cells train in the sweep's own process, and the stop used to
print the stopped cell's ``normzoo train ... --resume auto``: followed, it finished that cell
alone, never the cells after it nor ``results.csv``."""

from __future__ import annotations

import csv
import signal
from pathlib import Path

import yaml
from test_resume import normzoo
from test_resume_epoch_boundary import RECIPE


def test_a_stopped_one_job_sweep_says_to_run_the_sweep_again_and_that_finishes_it(
        tmp_path: Path):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**RECIPE, "trainer": {
        **RECIPE["trainer"], "max_steps": 8}}))
    sweep = ["sweep", "tiny.yaml", "--set", "seed=1,2", "--jobs", "1", "--out", "runs/s"]
    stopped = normzoo(sweep, tmp_path, ["TERM", "3"])  # SIGTERM in the first cell's step 3
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "run the same normzoo sweep command again to continue it" in stopped.stderr
    assert "normzoo train" not in stopped.stderr and "Traceback" not in stopped.stderr
    again = normzoo(sweep, tmp_path)  # the advice, followed
    assert again.returncode == 0, again.stderr
    with open(tmp_path / "runs" / "s" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(row["seed"] for row in rows) == ["1", "2"]
    assert all(row["status"] == "ok" and row["steps"] == "8" for row in rows)


def test_the_same_train_command_on_a_stopped_run_says_to_resume_it(tmp_path: Path):
    """Found by the fault pass: the refusal's only advice was --force, which threw away the
    stopped run's steps."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**RECIPE, "trainer": {
        **RECIPE["trainer"], "max_steps": 8}}))
    train = ["train", "tiny.yaml", "run.dir=runs/t"]
    assert normzoo(train, tmp_path, ["TERM", "6"]).returncode == 128 + signal.SIGTERM
    again = normzoo(train, tmp_path)
    assert again.returncode == 2
    assert ("already holds a run that stopped at step 7 with a checkpoint: continue it with "
            "--resume auto") in again.stderr
    resumed = normzoo([*train, "--resume", "auto"], tmp_path)  # the advice, followed
    assert resumed.returncode == 0, resumed.stderr
    finished = normzoo(train, tmp_path)  # a completed run: no such advice
    assert finished.returncode == 2 and "--resume auto" not in finished.stderr


def test_resuming_a_completed_run_changes_nothing_and_says_so(tmp_path: Path):
    """Found by the fault pass: --resume auto on a finished run ran the final validation and
    test again and rewrote their rows a step early (two rows at step 19, none at 20)."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**RECIPE, "trainer": {
        **RECIPE["trainer"], "max_steps": 6}}))
    train = ["train", "tiny.yaml", "run.dir=runs/c"]
    assert normzoo(train, tmp_path).returncode == 0
    run = tmp_path / "runs" / "c"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    again = normzoo([*train, "--resume", "auto"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "is complete (step 6, trainer.max_steps=6): nothing to resume" in again.stderr
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # metrics.csv, summary.json, checkpoints: untouched
