"""Every logger ended at every ending of a run, and a full disk under the logs reported in one
line that names the file, with no logger's exit hook printing a traceback after it.

A real ``normzoo train`` with 16-20 KB free printed ``error: could not write: the disk is
full`` and then tensorboardX's exit hook's traceback: its writer, whose flush had failed, was
flushed again at exit. Here the disk is made full by tests/crash.py (``full RE``: no byte
fits in a file whose path matches RE) from the run's start.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import warm
import yaml
from tiny import tiny

HERE = Path(__file__).parent

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.mark.parametrize("full", [
    "/logs/",  # every log: the CSV logger's hparams.yaml is the first to fail
    "tfevents",  # the TensorBoard event file alone, written by tensorboardX's thread
])
def test_a_full_disk_under_the_logs_ends_in_one_line_naming_the_file(tmp_path: Path,
                                                                      full: str):
    recipe = tiny(trainer={"max_steps": 3, "val_every_steps": 1, "log_every_steps": 1,
                           "loggers": ["csv", "tensorboard"]})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    result = warm.run([sys.executable, str(HERE / "crash.py"), "full", full, "train",
                       "tiny.yaml", "run.dir=run"], cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "the disk is full" in line
    named = str(tmp_path / "run" / "logs")
    assert named in line or "run/logs/" in line, line
    if full == "tfevents":
        assert "events.out.tfevents." in line, line


# -- close_loggers: each logger ended by the run's exit code, its errors contained ------------

class Finishing:
    """A W&B run that records how it was finished."""

    def __init__(self) -> None:
        self.exit_codes: list[int] = []

    def finish(self, exit_code: int = 0) -> None:
        self.exit_codes.append(exit_code)


def loggers(tmp_path: Path, fail: bool = False) -> tuple[list[Any], dict[str, list]]:
    """A W&B, an MLflow, a TensorBoard and a CSV logger whose endings are recorded (the
    TensorBoard one's close fails on a full disk when ``fail``)."""
    from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

    from normzoo.run.callbacks import HistoryCSVLogger, KeptOpenTensorBoardLogger

    seen: dict[str, list] = {"mlflow": [], "tensorboard": [], "csv": []}

    class MLflow(MLFlowLogger):
        def finalize(self, status: str = "success") -> None:
            seen["mlflow"].append(status)

    class TensorBoard(KeptOpenTensorBoardLogger):
        def close(self) -> None:
            seen["tensorboard"].append("closed")
            if fail:
                raise OSError(28, "No space left on device", str(tmp_path / "events"))

    class CSV(HistoryCSVLogger):
        def save(self) -> None:
            seen["csv"].append("saved")

    wandb = WandbLogger(save_dir=str(tmp_path), offline=True)
    wandb._experiment = Finishing()
    seen["wandb"] = wandb._experiment.exit_codes
    mlflow = MLflow.__new__(MLflow)  # no tracking store: its finalize is all that is called
    tensorboard, csv = TensorBoard(tmp_path), CSV(tmp_path)
    for written in (tensorboard, csv):  # a run's loggers have been written to: ended then
        written._experiment = object()
    built = [wandb, mlflow, tensorboard, csv]
    return built, seen


@pytest.mark.parametrize(("code", "mlflow"), [
    (0, "success"), (1, "failed"), (3, "failed"), (143, "KILLED"), (130, "KILLED")])
def test_every_logger_is_ended_with_the_runs_exit_code(tmp_path: Path, code: int, mlflow: str,
                                                       monkeypatch: pytest.MonkeyPatch):
    import wandb

    from normzoo.run.trainer import close_loggers

    torn_down: list[int] = []
    monkeypatch.setattr(wandb, "teardown", lambda exit_code=None: torn_down.append(exit_code))
    built, seen = loggers(tmp_path)
    close_loggers(type("Trainer", (), {"loggers": built})(), code)
    assert seen == {"wandb": [code], "mlflow": [mlflow], "tensorboard": ["closed"],
                    "csv": ["saved"]}
    assert torn_down == [code]  # W&B's service waited for: its offline run file written out


def test_a_failing_runs_loggers_raise_nothing_a_completed_runs_name_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import wandb

    from normzoo.run.trainer import close_loggers

    monkeypatch.setattr(wandb, "teardown", lambda exit_code=None: None)
    built, seen = loggers(tmp_path, fail=True)
    close_loggers(type("Trainer", (), {"loggers": built})(), 1)  # the run's own error stands
    assert seen["csv"] == ["saved"]  # the loggers after the one that failed are still ended
    built, seen = loggers(tmp_path, fail=True)
    with pytest.raises(OSError) as raised:
        close_loggers(type("Trainer", (), {"loggers": built})(), 0)
    assert raised.value.filename == str(tmp_path / "events") and seen["csv"] == ["saved"]
