"""How a run ends is saved and recorded whatever ends it (issue 25, item 5): Ctrl-C checkpoints
the current step and prints how to resume, as SIGTERM does; a second Ctrl-C stops at once; a
run that diverges writes ``summary.json`` saying at which step and why.

The Ctrl-C tests send SIGINT to a real ``normzoo train`` process, started as a terminal starts
a foreground program (SIGINT at its default, whatever the test runner's is).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from foreground import start_foreground, wait_for
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

HERE = Path(__file__).parent
# The quick start's shape, tiny: validation far ahead (step 200 of 400), so a stop before it
# has no checkpoint to fall back on.
RECIPE = tiny(data={"train_limit": 200, "valid_limit": 8, "max_tokens": 256, "max_len": 32},
              trainer={"max_steps": 400, "val_every_steps": 200, "log_every_steps": 1,
                       "keep_checkpoints": 1, "save_top_k": 1})


def environment(cache: Path) -> dict[str, str]:
    import os

    return {**os.environ, "NORMZOO_CACHE": str(cache), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def start(args: list[str], cwd: Path, crash: list[str] | None = None) -> subprocess.Popen:
    prefix = [sys.executable, str(HERE / "crash.py"), *crash] if crash else \
        [sys.executable, "-m", "normzoo"]
    with open(cwd / "stderr.txt", "w") as stderr:  # the process has its own copy
        return start_foreground([*prefix, *args], cwd, environment(cwd / "cache"),
                                subprocess.DEVNULL, stderr)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(RECIPE))
    return tmp_path


def test_ctrl_c_saves_the_current_step_and_prints_how_to_resume(workdir: Path):
    run = workdir / "R"
    process = start(["train", "t.yaml", "run.dir=R"], workdir)
    try:
        # Training has started once it has logged a row.
        wait_for((run / "logs" / "csv" / "metrics.csv").is_file, process)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=120)
    finally:
        process.kill()
    stderr = (workdir / "stderr.txt").read_text()
    assert code == 128 + signal.SIGINT, stderr
    assert "Traceback" not in stderr and "graceful shutdown" not in stderr
    stopped = re.search(r"stopped by SIGINT at step (\d+): saved (\S+);", stderr)
    assert stopped, stderr
    step = int(stopped.group(1))
    assert 0 < step < 200  # before the first validation: nothing else would have saved it
    assert "continue with: normzoo train t.yaml --resume auto run.dir=R" in stderr
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == step  # the step it stopped at, not 0 nor the last validation
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["signal"] == "SIGINT"
    assert summary["steps"] == step and "--resume auto" in summary["resume"]
    assert summary["machine"]["device"] == "cpu" and summary["machine"]["cpu"]


def test_a_second_ctrl_c_stops_at_once(workdir: Path):
    # The run stands still at step 3 (tests/crash.py pause), so the first Ctrl-C's stop is
    # still pending when the second comes.
    process = start(["train", "t.yaml", "run.dir=R"], workdir, ["pause", "3"])
    try:
        wait_for((workdir / "paused").is_file, process)
        process.send_signal(signal.SIGINT)
        wait_for(lambda: "Ctrl-C again" in (workdir / "stderr.txt").read_text(), process)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=30)
    finally:
        process.kill()
    stderr = (workdir / "stderr.txt").read_text()
    assert code == -signal.SIGINT, stderr  # ended by SIGINT itself: a shell says 130
    assert "stopping at once" in stderr
    assert not (workdir / "R" / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT,
                                    pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_signal_in_the_final_test_says_how_to_run_the_test_alone(tmp_path: Path, signum: int):
    """Training is over and saved when the final test starts: a stop signal there ends the
    process at once (exit 128 + signal) with one line saying so and the command that runs the
    test alone, and ``summary.json`` records it; that command trains nothing and completes."""
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny(
        trainer={"max_steps": 2, "keep_checkpoints": 1, "save_top_k": 1})))
    name = signal.Signals(signum).name
    process = start(["train", "t.yaml", "run.dir=R"], tmp_path, ["test", name.removeprefix("SIG")])
    try:
        code = process.wait(timeout=240)
    finally:
        process.kill()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 128 + signum, stderr
    assert "Traceback" not in stderr
    command = "normzoo train t.yaml --resume auto run.dir=R"
    assert (f"error: training finished at step 2 (saved R/checkpoints/last.ckpt), but {name} "
            f"stopped the final test; run the test alone with: {command}") in stderr
    run = tmp_path / "R"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["signal"] == name
    assert summary["during"] == "final test" and summary["resume"] == command
    assert summary["steps"] == 2 and "test" not in summary
    last = (run / "checkpoints" / "last.ckpt").read_bytes()
    trained = [(r["step"], r["train/loss"]) for r in rows(run) if r.get("train/loss")]

    resumed = subprocess.run([sys.executable, "-m", *command.split()], cwd=tmp_path,
                             env=environment(tmp_path / "cache"), text=True,
                             capture_output=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from R/checkpoints/last.ckpt (step 2)" in resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert "bleu" in summary["test"] and summary["validation"]["val/loss"] > 0
    # Only the test ran: no step trained, no checkpoint rewritten.
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == last
    assert [(r["step"], r["train/loss"]) for r in rows(run) if r.get("train/loss")] == trained
    assert [r["test/bleu"] for r in rows(run) if r.get("test/bleu")] == [
        str(summary["test"]["bleu"])]


def rows(run: Path) -> list[dict[str, str]]:
    import csv

    with open(run / "logs" / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_diverged_run_records_the_step_and_the_reason(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "explode.yaml"
    recipe.write_text(yaml.safe_dump(tiny(run={"dir": str(tmp_path / "run")},
                                          trainer={"max_steps": 4},
                                          diagnostics={"max_loss": 0.5})))
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == 3, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged"
    assert summary["steps"] == summary["diverged_at_step"] == 0
    assert summary["reason"].startswith("training diverged at step 0: loss")
    assert summary["last_good_checkpoint"] is None  # none was written before step 0
    assert summary["machine"]["device"] == "cpu" and summary["machine"]["cpu"]



def test_a_run_the_machine_fails_records_the_failure(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    """Out of memory mid-run: exit 1 with what to do, and ``summary.json`` says so too (it
    is written by every ending, through ``TrainingRun.write_summary``)."""
    from normzoo.tasks.translation.module import TranslationModule

    step = TranslationModule.training_step

    def out_of_memory_at_step_2(task, *args, **kwargs):
        if task.trainer.global_step == 2:
            raise torch.OutOfMemoryError("CUDA out of memory (planted)")
        return step(task, *args, **kwargs)

    monkeypatch.setattr(TranslationModule, "training_step", out_of_memory_at_step_2)
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "t.yaml"
    recipe.write_text(yaml.safe_dump(tiny(run={"dir": str(tmp_path / "run")},
                                          trainer={"max_steps": 4})))
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == 1, result.output
    assert "out of memory at step 2" in result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 2
    assert summary["reason"].startswith("out of memory at step 2: lower data.max_tokens")
    assert summary["machine"]["device"] == "cpu"
