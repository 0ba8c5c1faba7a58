"""What ``normzoo train`` prints: one header line, a progress bar over the run's steps at a
terminal (plain lines elsewhere: ``tests/test_cli_output.py``), and no third-party
advertisements or internal deprecation warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from terminal import run_with_terminal_stdout
from tiny import tiny


@pytest.mark.parametrize("steps", [4, 12])  # 12 steps: four epochs of the tiny corpus
def test_a_run_starts_with_one_header_line_and_a_step_progress_bar(tmp_path: Path, steps: int):
    """At a terminal (standard output a pseudo-terminal): the bar."""
    recipe = tiny(trainer={"max_steps": steps, "val_every_steps": 2, "progress_bar": True,
                           "log_every_steps": 1})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    result = run_with_terminal_stdout([sys.executable, "-m", "normzoo", "train", str(path),
                                       f"run.dir={tmp_path / 'run'}"], env=env)
    assert result.code == 0, result.stderr
    console = result.stderr + result.stdout  # Lightning's bars write to stdout
    headers = [line for line in console.splitlines() if line.startswith("normzoo: ")]
    assert len(headers) == 1
    assert f"parameters · up to 512 tokens per step · {steps} steps · " in headers[0]
    assert str(tmp_path / "run") in headers[0]
    # Steps of the run, not of an epoch, on one bar that lasts across epochs.
    assert "step: 100%" in console and f"{steps}/{steps}" in console
    assert "loss=" in console and "tok/s=" in console
    assert "Epoch" not in console and "/-2" not in console
    for noise in ("💡", "litlogger", "litmodels", "LeafSpec", "DeprecationWarning",
                  "`weights_only` was not set"):
        assert noise not in console, noise


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_a_resumed_run_says_nothing_about_its_own_directory_being_in_use(tmp_path: Path):
    """Lightning warns on every resume that the checkpoint and CSV log directories are not empty
    and that the old logs "will be deleted"; in a normzoo run both are expected (the log is put
    back together), so the warnings would only alarm."""
    recipe = tiny(trainer={"max_steps": 4, "val_every_steps": 2, "log_every_steps": 1})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "normzoo", "train", str(path),
               f"run.dir={tmp_path / 'run'}"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    resumed = subprocess.run([*command, "trainer.max_steps=6", "--resume", "auto"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    console = resumed.stderr + resumed.stdout
    assert "Restored all states" in console  # it did resume
    assert "exists and is not empty" not in console
    assert "will be deleted" not in console


def test_a_small_run_is_not_warned_about_its_logging_interval(tmp_path: Path):
    """An epoch shorter than ``trainer.log_every_steps``: Lightning warns that it is "smaller
    than the logging interval", but its steps are counted across epochs and normzoo logs
    train/loss as the mean since the last write, so nothing is lost and the warning would only
    alarm (issue 37, item 6)."""
    recipe = tiny(trainer={"max_steps": 6, "val_every_steps": 3, "log_every_steps": 50})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "normzoo", "train", str(path),
                           f"run.dir={tmp_path / 'run'}", "data.train_limit=40"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "smaller than the logging interval" not in done.stderr + done.stdout
