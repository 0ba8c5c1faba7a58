"""A run stopped at any point and resumed with ``--resume auto`` leaves what an uninterrupted run
leaves (issue 60, item 5).

* A step's checkpoints are one unit (``best-N``, ``step-N``, ``last.ckpt``,
  :mod:`normzoo.checkpoints.rolling`): a SIGKILL between two of them, resumed, leaves the same
  checkpoint files as an uninterrupted run, and ``export --average 3`` averages the same ones.
  Before, a kill after ``best-N`` never got its ``step-N`` written (``export --average 3``
  found 2 periodic checkpoints) and left a stale ``best-N`` beside the new best.
* A run stopped at its last step or in its final test, resumed, writes its final validation
  and test rows at the uninterrupted run's epoch and step. Before, a task scored in
  Lightning's loops wrote them one step and one epoch early (Lightning's counters as the
  checkpoint saved them, inside the last step: ``normzoo.run.history.end_restored_fit``).

Real ``normzoo train`` processes, killed or signalled by tests/crash.py.
"""

from __future__ import annotations

import csv
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
import warm
import yaml
from registered import BUILTIN_TASKS
from safetensors.torch import load_file
from task_samples import model_of_family
from test_resume import RECIPE
from tiny import tiny

HERE = Path(__file__).parent


def environment(cache: Path) -> dict[str, str]:
    return {**os.environ, "NORMZOO_CACHE": str(cache), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def normzoo(args: list[str], cwd: Path, crash: list[str] | None = None):
    prefix = [sys.executable, str(HERE / "crash.py"), *crash] if crash else \
        [sys.executable, "-m", "normzoo"]
    return warm.run([*prefix, *args], cwd=cwd, env=environment(cwd / "cache"), timeout=300)


def load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


# -- a step's checkpoints are one unit ---------------------------------------------------------

# tests/test_resume.py's translation run, 15 steps: validations (and checkpoints) at steps 5,
# 10 and 15, each improving on the one before. Every validation writes best-N, then step-N,
# then links last.ckpt to step-N: checkpoint writes 1-2 are step 5's, 3-4 step 10's, 5-6
# step 15's; link n is the n-th validation's.
UNIT = {**RECIPE, "trainer": {**RECIPE["trainer"], "max_steps": 15}}


@pytest.fixture(scope="module")
def unit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("units")
    (root / "unit.yaml").write_text(yaml.safe_dump(UNIT))
    return root


@pytest.fixture(scope="module")
def whole(unit_dir: Path) -> dict[int, Path]:
    """The uninterrupted runs, by ``trainer.keep_checkpoints`` (5, the default, and 0), made
    when first asked for."""
    class Runs(dict):
        def __missing__(self, keep: int) -> Path:
            args = ["train", "unit.yaml", f"run.dir=runs/whole-keep{keep}",
                    f"trainer.keep_checkpoints={keep}"]
            result = normzoo(args, unit_dir)
            assert result.returncode == 0, result.stderr
            self[keep] = unit_dir / "runs" / f"whole-keep{keep}"
            return self[keep]

    return Runs()


def names(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir())


def averaged(run: Path, out: Path) -> dict[str, torch.Tensor]:
    """``normzoo export last.ckpt --average 3``: the exported weights."""
    result = normzoo(["export", str(run / "checkpoints" / "last.ckpt"), "--average", "3",
                      "--out", str(out)], run.parent.parent)
    assert result.returncode == 0, result.stderr
    files = list(out.glob("*.safetensors"))
    assert len(files) == 1, sorted(p.name for p in out.iterdir())
    return load_file(files[0])


@pytest.mark.parametrize("crash, keep, resumed_from", [
    # The 2nd validation (step 10), at each point of its writes: inside best-10 (nothing of
    # step 10 complete), inside step-10 (best-10 complete, last at 5: the fault), between
    # step-10 and last's link (step-10 complete, last at 5).
    (["write", "3"], 5, "last.ckpt (step 5)"),
    (["write", "4"], 5, "last.ckpt (step 10)"),
    (["link", "2"], 5, "last.ckpt (step 10)"),
    # The last validation (step 15): no later validation writes last.ckpt again, or prunes.
    (["write", "6"], 5, "last.ckpt (step 15)"),
    (["link", "3"], 5, "last.ckpt (step 15)"),
    # No step- checkpoints kept: the unit is best-10 and last.ckpt's own write (the 4th).
    (["write", "4"], 0, "last.ckpt (step 10)"),
], ids=["in-best", "in-step", "before-link", "last-in-step", "last-before-link",
        "keep0-in-last"])
def test_a_kill_between_a_steps_checkpoints_then_resume_leaves_an_uninterrupted_runs_files(
        unit_dir, whole, crash, keep, resumed_from):
    expected = whole[keep]
    name = f"{crash[0]}{crash[1]}-keep{keep}"
    args = ["train", "unit.yaml", f"run.dir=runs/{name}", f"trainer.keep_checkpoints={keep}"]
    killed = normzoo(args, unit_dir, crash)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = normzoo([*args, "--resume", "auto"], unit_dir)
    assert resumed.returncode == 0, resumed.stderr
    run = unit_dir / "runs" / name
    assert names(run) == names(expected)  # no stale best-N, no missing step-N
    last = load(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 15
    reference = load(expected / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(torch.equal(last["state_dict"][k], v) for k, v in reference.items())
    if keep:  # the same three periodic checkpoints averaged, to the last bit
        got = averaged(run, unit_dir / "exports" / name)
        want = averaged(expected, unit_dir / "exports" / f"{name}-whole")
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want)
    # Resumed from last.ckpt, the step's checkpoints complete: Lightning keeps the file a run
    # resumed from, which must not be a best- checkpoint.
    assert f"resuming from runs/{name}/checkpoints/{resumed_from}" in resumed.stderr


# -- the final rows of a run resumed at its end, every task ------------------------------------

# Each family's smallest model; every task reads the built-in corpus. Epochs of 5 batches of
# 256 tokens: the last of 7 steps falls inside the second epoch, whose end only fit's end
# records; validations at steps 3, 6 and 7 (the last, ValidateAtMaxSteps).
FAMILY_MODELS = {
    "encoder_decoder": {},
    "encoder": {"family": "encoder", "decoder_layers": 0},
    "decoder": {"family": "decoder", "encoder_layers": 0},
}
STEPS = 7


def task_recipe(task: str) -> dict:
    return tiny(task=task, model=model_of_family(task, FAMILY_MODELS),
                data={"source": "builtin", "train_limit": 40, "valid_limit": 8,
                      "max_tokens": 256, "max_len": 32},
                optim={"lr": 3e-3, "warmup_steps": 2},
                trainer={"max_steps": STEPS, "val_every_steps": 3, "log_every_steps": 1,
                         "keep_checkpoints": 1, "save_top_k": 1})


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ends")
    for task in BUILTIN_TASKS:
        (root / f"{task}.yaml").write_text(yaml.safe_dump(task_recipe(task)))
    return root


@pytest.fixture(scope="module")
def uninterrupted(task_dir: Path) -> dict[str, Path]:
    """Each task's uninterrupted run, made when first asked for."""
    class Runs(dict):
        def __missing__(self, task: str) -> Path:
            result = normzoo(["train", f"{task}.yaml", f"run.dir=runs/{task}-whole"], task_dir)
            assert result.returncode == 0, result.stderr
            self[task] = task_dir / "runs" / f"{task}-whole"
            return self[task]

    return Runs()


def final_rows(run: Path) -> list[dict[str, str]]:
    """The ``metrics.csv`` rows of validations and tests, each with every cell it has (its
    epoch and step included)."""
    with open(run / "logs" / "csv" / "metrics.csv", newline="") as f:
        rows = [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]
    return [row for row in rows if any(k.startswith(("val/", "test/")) for k in row)]


# The points a run stops at its end, each with the exit it ends with:
# - SIGTERM as the last step starts: the step and its validation finish, last.ckpt is saved,
#   the run stops in fit (pre-empted during training);
# - SIGKILL in the final test: nothing recorded (a task scored in Lightning's loops has logged
#   its final validation's rows, which the resume drops and writes again);
# - Ctrl-C in the final test: stopped in the test (pre-empted during the final test).
POINTS = {"term-last-step": (["TERM", str(STEPS - 1)], 128 + signal.SIGTERM),
          "kill-in-test": (["test", "KILL"], -signal.SIGKILL),
          "int-in-test": (["test", "INT"], 128 + signal.SIGINT)}


# Every built-in task at every point: a case is two short processes (5-10 s on 2 cores).
@pytest.mark.parametrize("point", list(POINTS))
@pytest.mark.parametrize("task", BUILTIN_TASKS)
def test_a_run_stopped_at_its_end_and_resumed_logs_its_final_rows_where_an_uninterrupted_one_does(
        task_dir, uninterrupted, task, point):
    expected = final_rows(uninterrupted[task])
    tests = [row for row in expected if any(k.startswith("test/") for k in row)]
    assert [row["step"] for row in tests] == [str(STEPS)]
    crash, code = POINTS[point]
    args = ["train", f"{task}.yaml", f"run.dir=runs/{task}-{point}"]
    stopped = normzoo(args, task_dir, crash)
    assert stopped.returncode == code, stopped.stderr
    assert "Traceback" not in stopped.stderr
    resumed = normzoo([*args, "--resume", "auto"], task_dir)
    assert resumed.returncode == 0, resumed.stderr
    assert f"(step {STEPS})" in resumed.stderr  # resumed at its end: nothing left to train
    run = task_dir / "runs" / f"{task}-{point}"
    assert final_rows(run) == expected
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == STEPS
