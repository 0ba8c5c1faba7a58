"""A stop signal anywhere in an epoch resumes exactly, its last batch included (issue 52).

Lightning acts on a stop signal at an epoch's last batch only once the epoch has ended; the
state then saved still counted the ended epoch's batches, and a resume took them for the next
epoch's: it trained one batch of that epoch, moved on to the following one, and every loss from
there differed from an uninterrupted run's. Here an epoch has three batches and SIGTERM stops
the run at each of them in turn; every logged loss, and the step counters, must equal the
uninterrupted run's to the last digit.
"""

from __future__ import annotations

import csv
import signal
from pathlib import Path

import pytest
import yaml
from test_resume import RECIPE as RESUME_RECIPE
from test_resume import normzoo

# test_resume's tiny run, with 60 sentences in batches of 512 tokens: 3 batches an epoch.
RECIPE = {**RESUME_RECIPE,
          "data": {**RESUME_RECIPE["data"], "train_limit": 60, "max_tokens": 512},
          "trainer": {**RESUME_RECIPE["trainer"], "max_steps": 15}}
STEPS = 15
COLUMNS = ("epoch", "train/loss", "train/batches", "train/samples", "train/lengths")


def logged(run_dir: Path) -> dict[int, dict[str, str]]:
    """Each training step's logged loss, epoch and counters, as written (a step's figures may
    come in more than one row; none twice)."""
    rows: dict[int, dict[str, str]] = {}
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("step") or row.get("val/loss"):
                continue
            step = rows.setdefault(int(row["step"]), {})
            for key in COLUMNS:
                if row.get(key) and key != "epoch":
                    assert key not in step, f"{key} of step {row['step']} logged twice"
                    step[key] = row[key]
            if row.get("train/loss"):
                step["epoch"] = row["epoch"]
    return {step: found for step, found in rows.items() if "train/loss" in found}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("epoch-boundary")
    (root / "tiny.yaml").write_text(yaml.safe_dump(RECIPE))
    return root


@pytest.fixture(scope="module")
def whole(workdir: Path) -> dict[int, dict[str, str]]:
    done = normzoo(["train", "tiny.yaml", "run.dir=runs/whole"], workdir)
    assert done.returncode == 0, done.stderr
    assert "3 batches an epoch" in done.stderr  # the premise: steps 6, 7, 8 are one epoch
    rows = logged(workdir / "runs" / "whole")
    assert sorted(rows) == list(range(STEPS))
    assert rows[STEPS - 1]["train/batches"] == str(STEPS)  # the counters are logged
    assert [rows[s]["epoch"] for s in (6, 8, 9)] == ["2", "2", "3"]
    return rows


@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_signal_at_each_batch_of_an_epoch_resumes_exactly(workdir, whole, position: int):
    step = 6 + position  # SIGTERM as step `step` starts: it finishes, is saved, the run stops
    args = ["train", "tiny.yaml", f"run.dir=runs/at-{step}"]
    stopped = normzoo(args, workdir, ["TERM", str(step)])
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    resumed = normzoo([*args, "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert logged(workdir / "runs" / f"at-{step}") == whole
