"""Loggers from the recipe (``trainer.loggers``), through Lightning's own classes, offline: W&B in
offline mode and MLflow with a local file store, with the logged values read back."""

from __future__ import annotations

import csv
import struct
from pathlib import Path
from typing import Any

import pytest
from tiny import tiny
from typer.testing import CliRunner

from normzoo import train
from normzoo.cli import app
from normzoo.recipe import from_dict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def wandb_records(run_file: Path) -> list[Any]:
    """The records of a W&B offline run file: wandb's transaction log, the LevelDB log format
    (a 7-byte file header, then 32 KiB blocks of records with a 7-byte header each)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    ident, _, _ = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loggers")
    recipe = from_dict(tiny(
        run={"dir": str(root / "run"), "name": "tiny-run", "project": "nz-test",
             "offline": True},
        trainer={"max_steps": 4, "val_every_steps": 2, "log_every_steps": 1,
                 "loggers": ["csv", "tensorboard", "wandb", "mlflow"]}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        patch.delenv("WANDB_API_KEY", raising=False)
        train.run(recipe, "tiny.yaml")
    return root / "run"


def csv_losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        return {int(row["step"]): float(row["train/loss"]) for row in csv.DictReader(f)
                if row.get("train/loss")}


def test_mlflow_file_store_holds_the_metrics_and_the_recipe(logged_run: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(logged_run / "logs" / "mlruns").absolute().as_uri())
    experiment = client.get_experiment_by_name("nz-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "tiny-run"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id,
                                                                  "train/loss")}
    assert history == pytest.approx(csv_losses(logged_run), rel=1e-6)
    assert len(history) >= 3
    params = run.data.params
    assert params["recipe/model/d_model"] == "32" and params["recipe/task"] == "translation"


def test_wandb_offline_run_holds_the_metrics_and_the_recipe(logged_run: Path):
    import json

    (run_file,) = (logged_run / "logs" / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    history: dict[int, float] = {}
    config: dict[str, Any] = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in record.history.item}
            if "train/loss" in items:
                history[int(items["trainer/global_step"])] = items["train/loss"]
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "run":
            assert record.run.display_name == "tiny-run" and record.run.project == "nz-test"
    assert history == pytest.approx(csv_losses(logged_run), rel=1e-6)
    assert config["recipe"]["model"]["d_model"] == 32


def test_tensorboard_and_csv_stay_the_default(logged_run: Path):
    assert list((logged_run / "logs" / "tb").glob("events.out.tfevents.*"))
    assert from_dict({}).trainer.loggers == ["csv", "tensorboard"]


@pytest.mark.parametrize(("loggers", "says"), [
    ("[csv,wandb]", None),
    ("[csv,csv]", "named twice"),
    ("[wandb]", "keep 'csv'"),
    ("[csv,comet]", "Input should be 'csv', 'tensorboard', 'wandb' or 'mlflow'"),
])
def test_recipe_validate_checks_the_loggers(loggers: str, says: str | None):
    quickstart = Path(__file__).parent.parent / "recipes" / "quickstart.yaml"
    result = CliRunner().invoke(app, ["recipe", "validate", str(quickstart),
                                      f"trainer.loggers={loggers}"])
    assert result.exit_code == (0 if says is None else 2), result.output
    if says:
        assert "trainer.loggers" in result.output and says in result.output


def test_a_logger_that_is_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    from normzoo.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'normzoo\[mlflow\]'"):
        from_dict({"trainer": {"loggers": ["csv", "mlflow"]}})
